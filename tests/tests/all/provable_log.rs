//! Signed checkpoints and Merkle proofs over a real run directory (one that
//! bounded-loops wrote), through the real `bl` binary.

use bl_store::RunDir;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use bl_e2e::{bl_binary, copy_tree, repo_root};
use bl_store::merkle;
use serde_json::Value;

fn b64(text: &Value) -> merkle::Hash {
    base64::engine::general_purpose::STANDARD
        .decode(text.as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap()
}

fn bl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bl_binary()).args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

struct Setup {
    _dir: tempfile::TempDir,
    run: PathBuf,
    key: PathBuf,
    public: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    copy_tree(&repo_root().join("tests/corpus/runs/upstream-demo"), &run);
    let key = dir.path().join("keys/ops.key");
    let (code, out, err) = bl(&[
        "keys",
        "generate",
        "--name",
        "ops",
        "--out",
        key.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    Setup {
        public: key.with_extension("pub"),
        _dir: dir,
        run,
        key,
    }
}

fn verify(run: &Path, pubkey: Option<&Path>) -> (i32, Value) {
    let mut args = vec!["verify", run.to_str().unwrap(), "--json"];
    if let Some(k) = pubkey {
        args.extend(["--pubkey", k.to_str().unwrap()]);
    }
    let (code, out, _) = bl(&args);
    (code, serde_json::from_str(&out).unwrap_or(Value::Null))
}

fn status(report: &Value, name: &str) -> String {
    let c = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap();
    format!(
        "{}: {}",
        c["status"].as_str().unwrap(),
        c["detail"].as_str().unwrap()
    )
}

fn append_events(run: &Path, n: usize) {
    let log = run.join(RunDir::EVENTS);
    let identity = bl_store::verify_chain(&std::fs::read(&log).unwrap())
        .unwrap()
        .0
        .identity
        .unwrap();
    let mut writer = bl_store::EventLog::open(&log, identity).unwrap();
    for i in 0..n {
        writer
            .append(
                &format!("extra-{i}"),
                "test.event",
                &serde_json::json!({"i": i}),
                "2026-11-29T00:00:00Z",
            )
            .unwrap();
    }
    writer.sync().unwrap();
}

#[test]
fn keys_are_private_and_never_written_into_a_run_directory() {
    use std::os::unix::fs::PermissionsExt;
    let s = setup();
    let mode = std::fs::metadata(&s.key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(
        std::fs::read_to_string(&s.public)
            .unwrap()
            .starts_with("ops+")
    );
    let (code, _, err) = bl(&[
        "keys",
        "generate",
        "--out",
        s.run.join("k.key").to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("inside the run directory"), "{err}");
    let (code, _, err) = bl(&[
        "keys",
        "generate",
        "--name",
        "ops",
        "--out",
        s.key.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "an existing key is never overwritten");
    assert!(err.contains("never overwritten"), "{err}");
    let (code, out, _) = bl(&["keys", "public", s.key.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(out, std::fs::read_to_string(&s.public).unwrap());
}

#[test]
fn checkpoints_verify_with_the_key_and_catch_removed_events_and_other_signers() {
    let s = setup();
    let (run, key, public) = (&s.run, s.key.to_str().unwrap(), &s.public);
    let (code, out, err) = bl(&["log", "checkpoint", run.to_str().unwrap(), "--key", key]);
    assert_eq!(code, 0, "{out}{err}");
    append_events(run, 5);
    let (code, out, err) = bl(&["log", "checkpoint", run.to_str().unwrap(), "--key", key]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        std::fs::read_dir(run.join("checkpoints")).unwrap().count(),
        2
    );

    let (code, report) = verify(run, Some(public));
    assert_eq!(code, 0, "{report}");
    assert!(
        status(&report, "merkle").starts_with("ok: 2 checkpoint(s)"),
        "{report}"
    );
    assert!(status(&report, "signatures").starts_with("ok:"), "{report}");
    let (code, report) = verify(run, None);
    assert_eq!(code, 0);
    assert!(
        status(&report, "signatures").starts_with("not_applicable"),
        "{report}"
    );

    // Another key did not sign these.
    let other = s.key.with_file_name("other.key");
    bl(&[
        "keys",
        "generate",
        "--name",
        "ops",
        "--out",
        other.to_str().unwrap(),
    ]);
    let (code, report) = verify(run, Some(&other.with_extension("pub")));
    assert_eq!(code, 1);
    assert!(
        status(&report, "signatures").contains("no signature by key ops"),
        "{report}"
    );

    // Dropping the last events leaves a valid chain, but the signed tree head
    // says they existed.
    let log = run.join(RunDir::EVENTS);
    let text = std::fs::read_to_string(&log).unwrap();
    let kept: Vec<&str> = text.lines().collect();
    std::fs::write(&log, kept[..kept.len() - 2].join("\n") + "\n").unwrap();
    let (code, report) = verify(run, Some(public));
    assert_eq!(code, 1);
    assert_eq!(status(&report, "chain").split(':').next(), Some("ok"));
    assert!(
        status(&report, "merkle").contains("events were removed"),
        "{report}"
    );
}

#[test]
fn every_single_byte_flip_in_a_signed_checkpoint_is_detected() {
    let s = setup();
    bl(&[
        "log",
        "checkpoint",
        s.run.to_str().unwrap(),
        "--key",
        s.key.to_str().unwrap(),
    ]);
    let file = std::fs::read_dir(s.run.join("checkpoints"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let original = std::fs::read(&file).unwrap();
    let key = bl_store::VerifierKey::parse(&std::fs::read_to_string(&s.public).unwrap()).unwrap();
    for i in 0..original.len() {
        let mut bytes = original.clone();
        bytes[i] ^= 0x01;
        std::fs::write(&file, &bytes).unwrap();
        let result = bl_store::provable::verify_checkpoints(&s.run, Some(&key));
        assert!(result.is_err(), "flip at byte {i} went unnoticed");
    }
    std::fs::write(&file, &original).unwrap();
    assert!(
        bl_store::provable::verify_checkpoints(&s.run, Some(&key))
            .unwrap()
            .is_some()
    );
}

#[test]
fn proofs_printed_by_bl_verify_against_the_roots() {
    let s = setup();
    append_events(&s.run, 9);
    let run = s.run.to_str().unwrap();
    let (leaves, _) = bl_store::provable::log_leaves(&s.run.join(RunDir::EVENTS)).unwrap();
    let n = leaves.len();
    for line in [1, n / 2, n] {
        let (code, out, err) = bl(&["log", "prove", run, "--line", &line.to_string()]);
        assert_eq!(code, 0, "{err}");
        let p: Value = serde_json::from_str(&out).unwrap();
        let proof: Vec<merkle::Hash> = p["proof"].as_array().unwrap().iter().map(b64).collect();
        assert!(merkle::verify_inclusion(
            &b64(&p["leaf_hash"]),
            line - 1,
            n,
            &proof,
            &b64(&p["root"])
        ));
        assert_eq!(b64(&p["root"]), merkle::root(&leaves));
    }
    let (code, out, _) = bl(&["log", "prove", run, "--from", "3"]);
    assert_eq!(code, 0);
    let p: Value = serde_json::from_str(&out).unwrap();
    let proof: Vec<merkle::Hash> = p["proof"].as_array().unwrap().iter().map(b64).collect();
    assert!(merkle::verify_consistency(
        3,
        n,
        &proof,
        &b64(&p["old_root"]),
        &b64(&p["root"])
    ));
}

#[test]
fn verify_checks_approval_signatures_with_the_key() {
    let s = setup();
    let signing = bl_store::SigningKey::parse(&std::fs::read_to_string(&s.key).unwrap()).unwrap();
    let ledger = bl_store::Approvals::new(&s.run);
    let rejection = bl_store::approvals::Rejection {
        node_id: "ship".into(),
        attempt: 1,
        approval_id: bl_store::approval_id("org", "proj", "run", "ship"),
        actor_id: "bo".into(),
        decided_at: "2026-11-29T00:00:00Z".into(),
        decided_by: "bo".into(),
        decided_by_source: "cli".into(),
        repair_round: 0,
        signature: None,
    };
    ledger.reject(rejection, Some(&signing)).unwrap();
    let (code, report) = verify(&s.run, Some(&s.public));
    assert_eq!(code, 0, "{report}");
    assert!(
        status(&report, "approvals").starts_with("ok: 1 decisions, 1 signatures hold"),
        "{report}"
    );
    let path = s.run.join(RunDir::APPROVALS);
    let edited = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"attempt\": 1", "\"attempt\": 2");
    std::fs::write(&path, edited).unwrap();
    let (code, report) = verify(&s.run, Some(&s.public));
    assert_eq!(code, 1);
    assert!(
        status(&report, "approvals").contains("/rejections/0/signature"),
        "{report}"
    );
}

/// `bl log check-proof` checks what `prove` printed without the log: it
/// holds against a signed checkpoint of the same size and the event's own
/// line, and fails (exit 1) for another event, a forged path, another
/// root or another signer.
#[test]
fn check_proof_checks_a_printed_proof_against_a_signed_checkpoint() {
    let s = setup();
    let run = s.run.to_str().unwrap();
    let (code, _, err) = bl(&["log", "checkpoint", run, "--key", s.key.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let checkpoint = std::fs::read_dir(s.run.join("checkpoints"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let (code, proof, err) = bl(&["log", "prove", run, "--line", "2"]);
    assert_eq!(code, 0, "{err}");
    let dir = tempfile::tempdir().unwrap();
    let proof_file = dir.path().join("proof.json");
    std::fs::write(&proof_file, &proof).unwrap();
    let log = bl_e2e::log_text(&s.run.join(RunDir::EVENTS));
    let event = dir.path().join("event.jsonl");
    std::fs::write(&event, format!("{}\n", log.lines().nth(1).unwrap())).unwrap();
    let check = |extra: &[&str]| {
        let mut args = vec!["log", "check-proof", proof_file.to_str().unwrap()];
        args.extend(extra);
        bl(&args)
    };
    let anchored = [
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--pubkey",
        s.public.to_str().unwrap(),
        "--event",
        event.to_str().unwrap(),
    ];
    let (code, out, err) = check(&anchored);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("HOLDS") && out.contains("trusted root"),
        "{out}"
    );

    // Another event's line.
    std::fs::write(&event, format!("{}\n", log.lines().next().unwrap())).unwrap();
    let (code, out, _) = check(&anchored);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("another leaf"), "{out}");

    // Another signer.
    let other = dir.path().join("other.key");
    bl(&[
        "keys",
        "generate",
        "--name",
        "eve",
        "--out",
        other.to_str().unwrap(),
    ]);
    let (code, out, _) = check(&[
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--pubkey",
        other.with_extension("pub").to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");

    // A forged path: one hash of the proof changed.
    let mut forged: Value = serde_json::from_str(&proof).unwrap();
    forged["proof"][0] = Value::from(base64::engine::general_purpose::STANDARD.encode([7u8; 32]));
    std::fs::write(&proof_file, forged.to_string()).unwrap();
    let (code, out, _) = check(&["--checkpoint", checkpoint.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("does not lead to its root"), "{out}");

    // Any path leads to some root: with no trusted one, nothing is shown.
    let (code, out, err) = check(&[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("--checkpoint FILE"), "{err}");
}
