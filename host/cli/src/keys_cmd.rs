//! `bl keys …` and the provable-log commands `bl log checkpoint | prove`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use bl_store::merkle;
use bl_store::provable::{EVENTS_FILE, log_leaves, write_checkpoint};
use bl_store::{SigningKey, VerifierKey};
use clap::Subcommand;
use serde_json::json;

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Make an Ed25519 signing key (mode 0600) and print its verifier key.
    Generate {
        /// The key's name, written into every signature.
        #[arg(long, default_value = "bl")]
        name: String,
        /// Where the private key goes (default: ~/.config/bl/keys/NAME.key).
        /// Refused inside a run directory. NAME.pub goes beside it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print the verifier (public) key of a private key file.
    Public { key: PathBuf },
}

fn default_key_path(name: &str) -> Result<PathBuf, String> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .ok_or("no HOME: pass --out")?;
    Ok(base.join("bl/keys").join(format!("{name}.key")))
}

/// A directory that holds a run's records, or lies inside one.
fn inside_run_dir(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    absolute
        .ancestors()
        .skip(1)
        .find(|dir| {
            dir.join(EVENTS_FILE).exists()
                || dir.join("published-effects.json").exists()
                || dir.join("plan.json").exists()
        })
        .map(Path::to_path_buf)
}

pub fn run(cmd: KeysCommand) -> u8 {
    let result = match cmd {
        KeysCommand::Generate { name, out } => generate(&name, out),
        KeysCommand::Public { key } => {
            read_signing_key(&key).map(|k| println!("{}", k.verifier().to_text()))
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: keys: {e}");
            2
        }
    }
}

fn generate(name: &str, out: Option<PathBuf>) -> Result<(), String> {
    let path = match out {
        Some(p) => p,
        None => default_key_path(name)?,
    };
    if let Some(run) = inside_run_dir(&path) {
        return Err(format!(
            "{} is inside the run directory {}; keep keys out of run directories, where they would travel with the evidence they sign",
            path.display(),
            run.display()
        ));
    }
    let key = SigningKey::generate(name).map_err(|e| e.to_string())?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| {
            format!(
                "{}: {e} (an existing key is never overwritten)",
                path.display()
            )
        })?;
    file.write_all(format!("{}\n", key.to_text()).as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let public = key.verifier().to_text();
    let pub_path = path.with_extension("pub");
    std::fs::write(&pub_path, format!("{public}\n"))
        .map_err(|e| format!("{}: {e}", pub_path.display()))?;
    println!(
        "private key: {} (mode 0600)\nverifier key: {} \n{public}",
        path.display(),
        pub_path.display()
    );
    Ok(())
}

pub fn read_signing_key(path: &Path) -> Result<SigningKey, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{}: a private key must not be readable by others; chmod 600 it",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    SigningKey::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A verifier key given as text or as a file holding it.
pub fn read_verifier_key(arg: &str) -> Result<VerifierKey, String> {
    let text = if Path::new(arg).is_file() {
        std::fs::read_to_string(arg).map_err(|e| format!("{arg}: {e}"))?
    } else {
        arg.to_string()
    };
    VerifierKey::parse(&text).map_err(|e| format!("--pubkey: {e}"))
}

fn run_dir_of(path: &Path) -> PathBuf {
    if path.is_file() {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        path.to_path_buf()
    }
}

pub fn checkpoint(path: &Path, key: Option<&Path>) -> u8 {
    let result = key
        .map(read_signing_key)
        .transpose()
        .and_then(|key| write_checkpoint(&run_dir_of(path), key.as_ref()));
    match result {
        Ok((file, cp)) => {
            println!(
                "checkpoint of {} events and {} files, root {}{}\n  {}",
                cp.size,
                cp.files.len(),
                hex::encode(cp.root),
                if key.is_some() { "" } else { " (unsigned)" },
                file.display()
            );
            0
        }
        Err(e) => {
            eprintln!("error: log checkpoint: {e}");
            2
        }
    }
}

fn b64(hash: &merkle::Hash) -> String {
    base64::engine::general_purpose::STANDARD.encode(hash)
}

/// `bl log prove`: an inclusion proof for one event (1-based line number)
/// in the tree of the first `size` events, or a consistency proof between
/// two sizes.
pub fn prove(path: &Path, line: Option<usize>, size: Option<usize>, from: Option<usize>) -> u8 {
    let result = (|| {
        let (leaves, _) = log_leaves(&run_dir_of(path).join(EVENTS_FILE))?;
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
            println!("{}", serde_json::to_string_pretty(&value).expect("json"));
            0
        }
        Err(e) => {
            eprintln!("error: log prove: {e}");
            2
        }
    }
}
