//! `bl log recover | checkpoint | prove`: maintaining a run's event log and
//! proving what is in it.

use crate::output::outln;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use bl_store::RunDir;
use bl_store::merkle;
use bl_store::provable::{log_leaves, write_checkpoint};
use clap::Subcommand;
use serde_json::json;

use crate::exit::{CliError, CliResult, Exit};

#[derive(Subcommand)]
#[command(defer = true)]
pub enum LogCommand {
    /// Move a torn final line (left by a crash) aside into <log>.torn-<offset>.
    Recover {
        /// A run directory or a controller-events.jsonl file.
        path: std::path::PathBuf,
    },
    /// Write the log's current Merkle tree head, and the digest of every
    /// file of the run directory, into <run>/checkpoints/ (signed with --key).
    Checkpoint {
        /// A run directory or its controller-events.jsonl.
        path: std::path::PathBuf,
        /// The private key (from `bl keys generate`); without it the
        /// checkpoint is written unsigned.
        #[arg(long)]
        key: Option<std::path::PathBuf>,
    },
    /// Print an RFC 6962 inclusion proof (--line N) or consistency proof
    /// (--from M) as JSON.
    Prove {
        /// A run directory or its controller-events.jsonl.
        path: std::path::PathBuf,
        /// The event's line number (1-based).
        #[arg(long, conflicts_with = "from")]
        line: Option<usize>,
        /// The older tree size for a consistency proof.
        #[arg(long)]
        from: Option<usize>,
        /// The tree size to prove against (default: the whole log).
        #[arg(long)]
        size: Option<usize>,
    },
    /// Check a proof that `prove` printed, without the log: its arithmetic,
    /// and that its root is a trusted one (--checkpoint, signed by --pubkey
    /// when given, or --root). Exit 0 when it holds, 1 when it does not.
    CheckProof {
        /// The proof's JSON file (`-` for stdin).
        proof: std::path::PathBuf,
        /// A checkpoint of the same tree size whose root the proof must end at.
        #[arg(long)]
        checkpoint: Option<std::path::PathBuf>,
        /// The verifier key (text or file) that must have signed the checkpoint.
        #[arg(long, requires = "checkpoint")]
        pubkey: Option<String>,
        /// A root (base64, as `prove` prints it) known from elsewhere.
        #[arg(long)]
        root: Option<String>,
        /// A file holding the event line the inclusion proof is for.
        #[arg(long)]
        event: Option<std::path::PathBuf>,
    },
}

pub fn run(cmd: LogCommand) -> CliResult {
    match cmd {
        LogCommand::Recover { path } => recover(path),
        LogCommand::Checkpoint { path, key } => checkpoint(&path, key.as_deref()),
        LogCommand::Prove {
            path,
            line,
            from,
            size,
        } => prove(&path, line, size, from),
        LogCommand::CheckProof {
            proof,
            checkpoint,
            pubkey,
            root,
            event,
        } => check_proof(
            &proof,
            checkpoint.as_deref(),
            pubkey.as_deref(),
            root,
            event,
        ),
    }
}

fn check_proof(
    proof: &Path,
    checkpoint: Option<&Path>,
    pubkey: Option<&str>,
    root: Option<String>,
    event: Option<PathBuf>,
) -> CliResult {
    let refused = |e: String| CliError::refused(format!("log check-proof: {e}"));
    let read = |path: &Path| -> Result<Vec<u8>, CliError> {
        if path == Path::new("-") {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes)
                .map_err(|e| refused(format!("stdin: {e}")))?;
            return Ok(bytes);
        }
        bl_app::paths::read_capped(path, 16 << 20)
            .map_err(|e| refused(format!("{}: {e}", path.display())))
    };
    let proof_value: serde_json::Value = serde_json::from_slice(&read(proof)?)
        .map_err(|e| refused(format!("{}: not JSON: {e}", proof.display())))?;
    let key = pubkey
        .map(bl_app::keys::read_verifier_key)
        .transpose()
        .map_err(|e| refused(e.message().to_string()))?;
    let note = checkpoint
        .map(|p| read(p).map(|b| String::from_utf8_lossy(&b).into_owned()))
        .transpose()?;
    let event = event.map(|p| read(&p)).transpose()?;
    let trust = bl_store::proof_check::Trust {
        checkpoint: note.as_deref().map(|n| (n, key.as_ref())),
        root: root.as_deref(),
        // The line as the log holds it, whatever newline the file ends with.
        event: event.as_deref().map(|e| e.strip_suffix(b"\n").unwrap_or(e)),
    };
    match bl_store::proof_check::check_proof(&proof_value, &trust) {
        Ok(report) => {
            crate::output::answer(
                || json!({"holds": true, "kind": report.kind, "tree_size": report.tree_size}),
                || {
                    format!(
                        "HOLDS: the {} proof for a tree of {} events ends at the trusted root",
                        report.kind, report.tree_size,
                    )
                },
            );
            Ok(Exit::Success)
        }
        Err(bl_store::proof_check::ProofError::Unanchored) => Err(refused(
            "give the root the proof must end at: --checkpoint FILE (with --pubkey KEY) or --root B64"
                .into(),
        )),
        Err(bl_store::proof_check::ProofError::Shape(m)) => Err(refused(format!(
            "{}: not a proof from `bl log prove`: {m}",
            proof.display()
        ))),
        Err(e) => {
            crate::output::answer(
                || json!({"holds": false, "reason": e.to_string()}),
                || format!("DOES NOT HOLD: {e}"),
            );
            Ok(Exit::No)
        }
    }
}

fn run_dir_of(path: &Path) -> PathBuf {
    if path.is_file() {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        path.to_path_buf()
    }
}

fn recover(path: PathBuf) -> CliResult {
    let log = if path.is_dir() {
        RunDir::new(path).events()
    } else {
        path
    };
    match bl_store::recover_torn_tail(&log) {
        Ok(None) => {
            crate::output::answer(
                || serde_json::json!({"log": log, "torn": null}),
                || format!("{}: no torn tail; nothing changed", log.display()),
            );
            Ok(Exit::Success)
        }
        Ok(Some(tail)) => {
            let moved_to = format!("{}.torn-{}", log.display(), tail.offset);
            crate::output::answer(
                || {
                    serde_json::json!({"log": log, "torn": {
                        "bytes": tail.len, "line": tail.line, "moved_to": moved_to,
                    }})
                },
                || {
                    format!(
                        "{}: moved {} torn bytes (line {}) to {moved_to}",
                        log.display(),
                        tail.len,
                        tail.line,
                    )
                },
            );
            Ok(Exit::Success)
        }
        Err(e) => Err(CliError::refused(format!("log recover: {e}"))),
    }
}

fn checkpoint(path: &Path, key: Option<&Path>) -> CliResult {
    let result = key
        .map(|k| bl_app::keys::read_signing_key(k).map_err(|e| e.to_string()))
        .transpose()
        .and_then(|key| {
            write_checkpoint(&run_dir_of(path), key.as_ref()).map_err(|e| e.to_string())
        });
    match result {
        Ok((file, cp)) => {
            crate::output::answer(
                || {
                    serde_json::json!({
                        "checkpoint": file, "events": cp.size, "files": cp.files.len(),
                        "root": hex::encode(cp.root), "signed": key.is_some(),
                    })
                },
                || {
                    format!(
                        "checkpoint of {} events and {} files, root {}{}\n  {}",
                        cp.size,
                        cp.files.len(),
                        hex::encode(cp.root),
                        if key.is_some() { "" } else { " (unsigned)" },
                        file.display()
                    )
                },
            );
            Ok(Exit::Success)
        }
        Err(e) => Err(CliError::refused(format!("log checkpoint: {e}"))),
    }
}

fn b64(hash: &merkle::Hash) -> String {
    base64::engine::general_purpose::STANDARD.encode(hash)
}

/// `bl log prove`: an inclusion proof for one event (1-based line number)
/// in the tree of the first `size` events, or a consistency proof between
/// two sizes.
fn prove(path: &Path, line: Option<usize>, size: Option<usize>, from: Option<usize>) -> CliResult {
    let result = (|| {
        let (leaves, _) =
            log_leaves(&RunDir::new(run_dir_of(path)).events()).map_err(|e| e.to_string())?;
        let size = size.unwrap_or(leaves.len());
        if size == 0 || size > leaves.len() {
            return Err(format!(
                "--size {size}: the log has {} events",
                leaves.len()
            ));
        }
        let tree = &leaves[..size];
        let root = merkle::root(tree);
        Ok(match (line, from) {
            (Some(line), None) => {
                let index = line
                    .checked_sub(1)
                    .filter(|i| *i < size)
                    .ok_or(format!("--line {line} is not in 1..={size}"))?;
                let proof = merkle::inclusion_proof(tree, index).expect("index checked");
                debug_assert!(merkle::verify_inclusion(
                    &tree[index],
                    index,
                    size,
                    &proof,
                    &root
                ));
                json!({"kind": "inclusion", "line": line, "tree_size": size, "leaf_hash": b64(&tree[index]),
                       "root": b64(&root), "proof": proof.iter().map(b64).collect::<Vec<_>>()})
            }
            (None, Some(from)) => {
                let proof = merkle::consistency_proof(tree, from)
                    .ok_or(format!("--from {from} is not in 1..={size}"))?;
                json!({"kind": "consistency", "old_size": from, "old_root": b64(&merkle::root(&leaves[..from])),
                       "tree_size": size, "root": b64(&root), "proof": proof.iter().map(b64).collect::<Vec<_>>()})
            }
            _ => return Err("give --line N (inclusion) or --from M (consistency)".into()),
        })
    })();
    match result {
        Ok(value) => {
            outln!("{}", serde_json::to_string_pretty(&value).expect("json"));
            Ok(Exit::Success)
        }
        Err(e) => Err(CliError::refused(format!("log prove: {e}"))),
    }
}
