//! The store under real processes: racing publishers, crashes inside an
//! effect, and a log writer killed with SIGKILL at random points.

use bl_store::RunDir;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use bl_store::{EventLog, Ledger, Publish, Reconciliation, recover_torn_tail, verify_chain};

const PUBLISHER: &str = env!("CARGO_BIN_EXE_bl-test-publisher");
const WRITER: &str = env!("CARGO_BIN_EXE_bl-test-log-writer");

fn publish(
    run: &Path,
    key: &str,
    digest: &str,
    effects: &Path,
    crash: bool,
) -> std::process::Child {
    let mut cmd = Command::new(PUBLISHER);
    cmd.arg(run)
        .arg(key)
        .arg(digest)
        .arg(effects)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if crash {
        cmd.arg("--crash-in-effect");
    }
    cmd.spawn().unwrap()
}

fn fired(effects: &Path) -> usize {
    std::fs::read_to_string(effects)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn sixteen_racing_processes_fire_one_effect() {
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects.log");
    let children: Vec<_> = (0..16)
        .map(|_| publish(dir.path(), "run/plan/publish", "sha256:aa", &effects, false))
        .collect();
    let outcomes: Vec<String> = children
        .into_iter()
        .map(|c| {
            String::from_utf8(c.wait_with_output().unwrap().stdout)
                .unwrap()
                .trim()
                .to_string()
        })
        .collect();
    assert_eq!(fired(&effects), 1, "{outcomes:?}");
    assert_eq!(
        outcomes.iter().filter(|o| *o == "Fired").count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| *o == "AlreadyPublished").count(),
        15,
        "{outcomes:?}"
    );
    let ledger: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(RunDir::LEDGER)).unwrap()).unwrap();
    assert_eq!(ledger, serde_json::json!({"run/plan/publish": "sha256:aa"}));
}

#[test]
fn another_payload_for_a_burned_key_halts() {
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects.log");
    let ledger = Ledger::new(dir.path());
    assert_eq!(
        ledger.publish("k", "sha256:aa", || Ok(())).unwrap(),
        Publish::Fired
    );
    assert_eq!(
        ledger
            .publish("k", "sha256:bb", || panic!("must not fire"))
            .unwrap(),
        Publish::Halt {
            recorded_digest: "sha256:aa".into()
        }
    );
    assert_eq!(fired(&effects), 0);
}

/// A writer that died after the ledger's write but before it closed its
/// intent left the effect done: the next publish says so without firing,
/// and closes the intent as published.
#[test]
fn a_crash_after_the_ledger_write_closes_the_intent_without_firing_again() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::new(dir.path());
    assert_eq!(
        ledger.publish("k", "sha256:aa", || Ok(())).unwrap(),
        Publish::Fired
    );
    // Take the run back to the moment before the intent was closed.
    let intents = dir.path().join(RunDir::INTENTS);
    let text = std::fs::read_to_string(&intents).unwrap();
    let open: String = text.lines().take(1).map(|l| format!("{l}\n")).collect();
    assert!(open.contains("\"intent\""), "{text}");
    std::fs::write(&intents, &open).unwrap();
    assert_eq!(
        ledger
            .publish("k", "sha256:aa", || panic!("must not fire again"))
            .unwrap(),
        Publish::AlreadyPublished
    );
    let closed = std::fs::read_to_string(&intents).unwrap();
    assert_eq!(closed.lines().count(), 2, "{closed}");
    assert!(
        closed.lines().nth(1).unwrap().contains("\"published\""),
        "{closed}"
    );
    // And only once: a further publish adds nothing.
    ledger
        .publish("k", "sha256:aa", || panic!("must not fire"))
        .unwrap();
    assert_eq!(std::fs::read_to_string(&intents).unwrap(), closed);
}

#[test]
fn a_crash_inside_the_effect_needs_reconciliation_and_never_replays() {
    let dir = tempfile::tempdir().unwrap();
    let effects = dir.path().join("effects.log");
    let status = publish(dir.path(), "k", "sha256:aa", &effects, true)
        .wait()
        .unwrap();
    assert!(!status.success(), "the helper must have crashed");
    let ledger = Ledger::new(dir.path());
    // Every later attempt stops at the ambiguity, in this process or another.
    assert_eq!(
        ledger
            .publish("k", "sha256:aa", || panic!("must not replay"))
            .unwrap(),
        Publish::ReconciliationRequired {
            intent_digest: "sha256:aa".into()
        }
    );
    let out = publish(dir.path(), "k", "sha256:aa", &effects, false)
        .wait_with_output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ReconciliationRequired"));
    assert_eq!(fired(&effects), 0);

    // The operator found it did not happen: it may fire again, once.
    let out = Command::new(bl_e2e::bl_binary())
        .args(["ledger", "reconcile"])
        .arg(dir.path())
        .args(["k", "--not-published"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = publish(dir.path(), "k", "sha256:aa", &effects, false)
        .wait_with_output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Fired");
    assert_eq!(fired(&effects), 1);

    // A second crash, reconciled as published: recorded, never fired again.
    publish(dir.path(), "k2", "sha256:cc", &effects, true)
        .wait()
        .unwrap();
    ledger.reconcile("k2", Reconciliation::Published).unwrap();
    assert_eq!(
        ledger
            .publish("k2", "sha256:cc", || panic!("must not fire"))
            .unwrap(),
        Publish::AlreadyPublished
    );
}

#[test]
fn a_corrupt_ledger_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(RunDir::LEDGER), "{not json").unwrap();
    let err = Ledger::new(dir.path())
        .publish("k", "sha256:aa", || panic!("must not fire"))
        .unwrap_err();
    assert!(err.to_string().contains("corrupt"), "{err}");
}

#[test]
fn a_log_writer_killed_at_random_points_reopens_verified_or_torn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(RunDir::EVENTS);
    let mut last = 0;
    let mut torn_seen = 0;
    for round in 0..20u64 {
        let mut child = Command::new(WRITER)
            .arg(&path)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Wait until the writer is writing (a loaded machine starts it
        // slowly), then vary the kill point: 2 to 40 ms of writing.
        let started = std::time::Instant::now();
        while !path.exists() && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(2 + (round * 37) % 39));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // A writer killed before it created the log leaves nothing to check.
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && last == 0 => continue,
            Err(e) => panic!("round {round}: {e}"),
        };
        let (head, torn) = verify_chain(&bytes)
            .unwrap_or_else(|e| panic!("round {round}: the log forked or broke: {e}"));
        if torn.is_some() {
            torn_seen += 1;
            recover_torn_tail(&path).unwrap();
        }
        assert!(head.sequence >= last, "round {round}: events were lost");
        last = head.sequence;
    }
    let identity = bl_e2e::crash_run_identity();
    let log = EventLog::open(&path, identity).unwrap();
    assert!(log.head().sequence > 0);
    eprintln!(
        "{} events after 20 kills, {torn_seen} torn tails recovered",
        log.head().sequence
    );
}
