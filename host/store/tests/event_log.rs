//! The event log against a log bounded-loops 0.7.6 wrote, and against
//! tampering, a second writer, replays and torn tails.

use std::path::{Path, PathBuf};

use bl_store::{
    Appended, EventLog, RunIdentity, StoreError, recover_torn_tail, set_aside_from, verify_chain,
};
use serde_json::json;

fn upstream_log() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/corpus/runs/upstream-demo/controller-events.jsonl")
}

fn identity() -> RunIdentity {
    RunIdentity {
        organization_id: "demo-org".into(),
        project_id: "demo-project".into(),
        run_id: "demo-run-1".into(),
        graph_digest: "sha256:049c39bf2ca3d0d6eeb846b0000b25b4e0bfcd7393bee1164a4971f6f9262e33"
            .into(),
        plan_digest: "sha256:0eb7cef54715813b7662044a2d1eeb903f63fdd7cf433a1d77f1f842ea5bad41"
            .into(),
        policy_digest: format!("sha256:{}", "a".repeat(64)),
    }
}

#[test]
fn a_log_bounded_loops_wrote_verifies() {
    let bytes = std::fs::read(upstream_log()).unwrap();
    let (head, torn) = verify_chain(&bytes).unwrap();
    assert_eq!((head.sequence, torn), (9, None));
    assert_eq!(head.identity.unwrap(), identity());
}

#[test]
fn every_single_byte_flip_is_detected() {
    let bytes = std::fs::read(upstream_log()).unwrap();
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0x20, 0x80] {
            let mut tampered = bytes.clone();
            tampered[i] ^= flip;
            let detected = match verify_chain(&tampered) {
                Err(_) => true,
                Ok((head, torn)) => torn.is_some() || head.sequence != 9,
            };
            assert!(detected, "flipping byte {i} with {flip:#x} went unnoticed");
        }
    }
}

#[test]
fn appends_continue_the_chain_of_an_existing_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    std::fs::copy(upstream_log(), &path).unwrap();
    let mut log = EventLog::open(&path, identity()).unwrap();
    let appended = log
        .append_durable(
            "run.resumed",
            "run.resumed",
            &json!({"state": "RUNNING"}),
            "2026-11-29T21:00:00Z",
        )
        .unwrap();
    assert!(matches!(appended, Appended::Written { sequence: 10, .. }));
    drop(log);
    let (head, _) = verify_chain(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(head.sequence, 10);
}

#[test]
fn a_replayed_key_is_a_no_op_and_a_changed_one_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let mut log = EventLog::open(&path, identity()).unwrap();
    let payload = json!({"state": "PENDING"});
    log.append(
        "run.created",
        "run.created",
        &payload,
        "2026-11-29T21:00:00Z",
    )
    .unwrap();
    assert_eq!(
        log.append(
            "run.created",
            "run.created",
            &payload,
            "2026-11-29T21:00:01Z"
        )
        .unwrap(),
        Appended::AlreadyRecorded
    );
    let err = log
        .append(
            "run.created",
            "run.created",
            &json!({"state": "RUNNING"}),
            "2026-11-29T21:00:01Z",
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    log.sync().unwrap();
    assert_eq!(log.head().sequence, 1);
}

/// The writer keeps offsets, not contents: after a reopen (and a log long
/// enough to be verified on several threads), a replay is still compared
/// with the line actually recorded, wherever it is.
#[test]
fn replays_are_compared_with_the_recorded_line_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let payload_of = |n: u64| json!({"n": n, "filler": "y".repeat(400)});
    let mut log = EventLog::open(&path, identity()).unwrap();
    for n in 0..4000 {
        log.append(
            &format!("k{n}"),
            "node.spend",
            &payload_of(n),
            "2026-11-29T21:00:00Z",
        )
        .unwrap();
    }
    drop(log);
    assert!(std::fs::metadata(&path).unwrap().len() > 2 << 20);
    let mut log = EventLog::open(&path, identity()).unwrap();
    for n in [0, 1999, 2000, 2001, 3999] {
        assert_eq!(
            log.append(
                &format!("k{n}"),
                "node.spend",
                &payload_of(n),
                "2026-11-30T00:00:00Z"
            )
            .unwrap(),
            Appended::AlreadyRecorded,
            "k{n}"
        );
        let other = log.append(
            &format!("k{n}"),
            "node.spend",
            &payload_of(n + 1),
            "2026-11-30T00:00:00Z",
        );
        assert!(matches!(other, Err(StoreError::Conflict { .. })), "k{n}");
        let other_type = log.append(
            &format!("k{n}"),
            "node.ready",
            &payload_of(n),
            "2026-11-30T00:00:00Z",
        );
        assert!(
            matches!(other_type, Err(StoreError::Conflict { .. })),
            "k{n}"
        );
    }
    assert_eq!(log.head().sequence, 4000);
}

#[test]
fn a_second_writer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let _first = EventLog::open(&path, identity()).unwrap();
    let second = EventLog::open(&path, identity());
    assert!(matches!(second, Err(StoreError::Locked { .. })));
    // The message names the process that holds the log: this one.
    let said = second.err().unwrap().to_string();
    assert!(
        said.contains(&format!(
            "another process (pid {}) writes",
            std::process::id()
        )),
        "{said}"
    );
}

#[test]
fn a_log_of_another_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    std::fs::copy(upstream_log(), &path).unwrap();
    let other = RunIdentity {
        run_id: "other".into(),
        ..identity()
    };
    assert!(matches!(
        EventLog::open(&path, other),
        Err(StoreError::WrongRun { .. })
    ));
}

#[test]
fn a_torn_tail_is_reported_then_moved_aside_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let mut bytes = std::fs::read(upstream_log()).unwrap();
    let whole = bytes.len() as u64;
    bytes.extend_from_slice(br#"{"actor":"graph-controller","event_ha"#);
    std::fs::write(&path, &bytes).unwrap();
    match EventLog::open(&path, identity()) {
        Err(StoreError::TornTail { tail, .. }) => assert_eq!((tail.line, tail.offset), (10, whole)),
        other => panic!("expected a torn tail, got {:?}", other.map(|_| ())),
    }
    // Nothing was changed by opening.
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let moved = recover_torn_tail(&path).unwrap().unwrap();
    assert_eq!(moved.offset, whole);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
    let aside = std::fs::read(
        dir.path()
            .join(format!("controller-events.jsonl.torn-{whole}")),
    )
    .unwrap();
    assert_eq!(aside, br#"{"actor":"graph-controller","event_ha"#);
    assert_eq!(
        EventLog::open(&path, identity()).unwrap().head().sequence,
        9
    );
}

#[test]
fn lines_from_a_line_on_are_set_aside_whole_and_the_log_left_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let bytes = std::fs::read(upstream_log()).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    // The seventh line's start: six lines stay.
    let cut: usize = bytes
        .split_inclusive(|b| *b == b'\n')
        .take(6)
        .map(<[u8]>::len)
        .sum();
    assert!(
        set_aside_from(&path, cut as u64 + 1, "unsynced").is_err(),
        "only a line's start"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "a refusal changes nothing"
    );
    let aside = set_aside_from(&path, cut as u64, "unsynced").unwrap();
    assert_eq!(
        aside,
        dir.path()
            .join(format!("controller-events.jsonl.unsynced-{cut}"))
    );
    assert_eq!(std::fs::read(&aside).unwrap(), &bytes[cut..]);
    assert_eq!(std::fs::read(&path).unwrap(), &bytes[..cut]);
    assert_eq!(
        EventLog::open(&path, identity()).unwrap().head().sequence,
        6
    );
}

/// bl's writer, given the events bounded-loops recorded (same identity,
/// keys, payloads and times), writes its log byte for byte: so what bl
/// writes reads in bounded-loops' own tools exactly as their logs do.
#[test]
fn bl_writes_the_same_bytes_bounded_loops_wrote_for_the_same_events() {
    let upstream = std::fs::read(upstream_log()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let mut log = EventLog::open(&path, identity()).unwrap();
    let prefix = format!("{}:", identity().run_id);
    for line in upstream.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let event: serde_json::Value = serde_json::from_slice(line).unwrap();
        let key = event["idempotency_key"].as_str().unwrap();
        log.append(
            key.strip_prefix(&prefix).unwrap(),
            event["event_type"].as_str().unwrap(),
            &event["payload"],
            event["timestamp"].as_str().unwrap(),
        )
        .unwrap();
    }
    drop(log);
    assert_eq!(std::fs::read(&path).unwrap(), upstream);
}

#[test]
fn a_buffered_log_writes_whole_lines_only_when_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let mut log = EventLog::open(&path, identity()).unwrap().buffered();
    let ts = "2026-12-01T00:00:00Z";
    for n in 0..3 {
        log.append(&format!("k{n}"), "node.ready", &json!({"n": n}), ts)
            .unwrap();
    }
    assert_eq!(
        std::fs::read(&path).unwrap().len(),
        0,
        "nothing written yet"
    );
    // A replay is compared with the buffered line, and a change refused.
    assert_eq!(
        log.append("k1", "node.ready", &json!({"n": 1}), ts)
            .unwrap(),
        Appended::AlreadyRecorded
    );
    assert!(matches!(
        log.append("k1", "node.ready", &json!({"n": 9}), ts),
        Err(StoreError::Conflict { .. })
    ));
    log.flush().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 3);
    log.append("k3", "node.ready", &json!({"n": 3}), ts)
        .unwrap();
    drop(log);
    // Dropping the writer flushes what was pending; the chain holds.
    let (head, torn) = verify_chain(&std::fs::read(&path).unwrap()).unwrap();
    assert!(torn.is_none());
    assert_eq!(head.sequence, 4);
}

/// The tree head a writer keeps as it appends is the one read back from
/// the file: over a log another writer began, and over buffered lines
/// once synced.
#[test]
fn the_writers_tree_head_is_the_one_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    std::fs::copy(upstream_log(), &path).unwrap();
    let read_back = |path: &Path| {
        let (leaves, run_id) = bl_store::provable::log_leaves(path).unwrap();
        (leaves.len() as u64, bl_store::merkle::root(&leaves), run_id)
    };
    let kept = |log: &EventLog| {
        let head = log.tree_head();
        (head.size, head.root, head.run_id.to_string())
    };
    let mut log = EventLog::open(&path, identity()).unwrap().buffered();
    assert_eq!(kept(&log), read_back(&path), "as opened");
    for i in 0..5 {
        log.append(
            &format!("node.{i}"),
            "node.done",
            &json!({"node": i}),
            "2026-12-06T06:00:00Z",
        )
        .unwrap();
    }
    log.sync().unwrap();
    let after = kept(&log);
    assert_eq!(after.0, 14);
    assert_eq!(after, read_back(&path), "after five appends");
    drop(log);
    let reopened = EventLog::open(&path, identity()).unwrap();
    assert_eq!(kept(&reopened), after, "reopened");
}

fn append_n(log: &mut EventLog, from: usize, to: usize) {
    for i in from..to {
        log.append(
            &format!("k{i}"),
            "node.succeeded",
            &json!({"node_id": format!("n{i}"), "artifact_digests": []}),
            "2026-01-01T00:00:00Z",
        )
        .unwrap();
    }
}

fn staged_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".staged-"))
        .collect();
    names.sort();
    names
}

/// A staged writer's flushed lines wait beside the log, where readers see
/// them as the log's, and join it only at a sync: a line is never in the
/// log before the caller made what it names durable.
#[test]
fn a_staged_writers_lines_join_the_log_only_at_a_sync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let mut log = EventLog::open(&path, identity()).unwrap().staged();
    append_n(&mut log, 0, 3);
    log.flush().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"", "nothing in the log yet");
    assert_eq!(
        staged_files(dir.path()),
        ["controller-events.jsonl.staged-0"]
    );
    let live = bl_store::read_log(&path).unwrap();
    assert_eq!(verify_chain(&live).unwrap().0.sequence, 3);
    // A replayed key is compared with its staged line.
    assert_eq!(
        log.append(
            "k1",
            "node.succeeded",
            &json!({"node_id": "n1", "artifact_digests": []}),
            "2026-01-01T00:00:09Z"
        )
        .unwrap(),
        Appended::AlreadyRecorded
    );
    log.sync().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), live);
    assert!(staged_files(dir.path()).is_empty());
    // The next group is staged from where the log now ends.
    append_n(&mut log, 3, 5);
    log.flush().unwrap();
    assert_eq!(
        staged_files(dir.path()),
        [format!("controller-events.jsonl.staged-{}", live.len())]
    );
    let mut reader = bl_store::staged::open_at(&path, live.len() as u64)
        .unwrap()
        .unwrap();
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut reader, &mut rest).unwrap();
    assert_eq!(rest.iter().filter(|b| **b == b'\n').count(), 2);
    assert_eq!(bl_store::read_log(&path).unwrap(), [live, rest].concat());
}

/// A writer killed before its sync leaves its lines staged: the log is not
/// opened over them (the chain would fork); settling moves in what may be
/// kept and keeps the rest beside the log, whole.
#[test]
fn lines_a_stopped_writer_staged_are_settled_before_the_log_is_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let mut log = EventLog::open(&path, identity()).unwrap().staged();
    append_n(&mut log, 0, 2);
    log.sync().unwrap();
    append_n(&mut log, 2, 6);
    drop(log);
    let durable = std::fs::read(&path).unwrap();
    let live = bl_store::read_log(&path).unwrap();
    assert_eq!(verify_chain(&live).unwrap().0.sequence, 6);
    let refused = EventLog::open(&path, identity()).err().unwrap();
    assert!(matches!(refused, StoreError::Unsettled { .. }), "{refused}");
    assert!(refused.to_string().contains("bl graph resume"), "{refused}");

    // Two of the four staged lines may be kept.
    let staged = &live[durable.len()..];
    let two: usize = staged
        .split_inclusive(|b| *b == b'\n')
        .take(2)
        .map(<[u8]>::len)
        .sum();
    let settled = bl_store::staged::settle(&path, "unsynced", |lines| {
        assert_eq!(lines, staged);
        Ok::<_, StoreError>(two)
    })
    .unwrap()
    .unwrap();
    assert_eq!(settled.kept, 2);
    let aside = settled.set_aside.unwrap();
    assert_eq!(
        aside,
        dir.path().join(format!(
            "controller-events.jsonl.unsynced-{}",
            durable.len() + two
        ))
    );
    assert_eq!(std::fs::read(&aside).unwrap(), &staged[two..]);
    assert_eq!(std::fs::read(&path).unwrap(), &live[..durable.len() + two]);
    assert!(staged_files(dir.path()).is_empty());
    let log = EventLog::open(&path, identity()).unwrap();
    assert_eq!(log.head().sequence, 4);
}

/// A sync stopped part way through moving lines in leaves the log holding
/// a prefix of them, perhaps ending mid-line: settling finishes the move
/// (nothing twice), and a staged file the log holds whole is only removed.
#[test]
fn a_move_stopped_part_way_is_finished_and_a_spent_staged_file_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let mut log = EventLog::open(&path, identity()).unwrap().staged();
    append_n(&mut log, 0, 3);
    log.flush().unwrap();
    drop(log);
    let staged_path = bl_store::staged::path_for(&path, 0);
    let staged = std::fs::read(&staged_path).unwrap();
    std::fs::write(&path, &staged[..staged.len() / 2 + 7]).unwrap();
    assert_eq!(bl_store::read_log(&path).unwrap(), staged);
    let settled =
        bl_store::staged::settle(&path, "unsynced", |lines| Ok::<_, StoreError>(lines.len()))
            .unwrap()
            .unwrap();
    assert_eq!((settled.kept, settled.set_aside), (3, None));
    assert_eq!(std::fs::read(&path).unwrap(), staged);

    std::fs::write(&staged_path, &staged).unwrap();
    let settled = bl_store::staged::settle(&path, "unsynced", |_| -> Result<usize, StoreError> {
        panic!("a spent staged file has no lines to settle")
    })
    .unwrap();
    assert_eq!(settled, None);
    assert!(staged_files(dir.path()).is_empty());
    assert_eq!(std::fs::read(&path).unwrap(), staged);
}

/// A log at `path` of `synced` lines, then two more a killed writer staged,
/// then `torn` (a write cut short) in the same staged file. Returns the
/// log's length and the whole staged lines.
fn staged_with_a_torn_line(path: &Path, synced: usize, torn: &[u8]) -> (u64, Vec<u8>) {
    let mut log = EventLog::open(path, identity()).unwrap().staged();
    append_n(&mut log, 0, synced);
    log.sync().unwrap();
    append_n(&mut log, synced, synced + 2);
    drop(log);
    let durable = std::fs::metadata(path).unwrap().len();
    let staged_path = bl_store::staged::path_for(path, durable);
    let whole = std::fs::read(&staged_path).unwrap();
    std::fs::write(&staged_path, [&whole[..], torn].concat()).unwrap();
    (durable, whole)
}

/// A torn last staged line (a write cut short) is not a line: it is kept
/// aside, and the whole lines before it join the log.
#[test]
fn a_torn_staged_line_is_kept_aside_and_the_whole_ones_moved_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let (_, whole) = staged_with_a_torn_line(&path, 0, b"{\"sequence\":3,");
    let settled = bl_store::staged::settle(&path, "unsynced", |lines| {
        assert_eq!(lines, whole);
        Ok::<_, StoreError>(lines.len())
    })
    .unwrap()
    .unwrap();
    assert_eq!(settled.kept, 2);
    assert_eq!(
        std::fs::read(settled.set_aside.unwrap()).unwrap(),
        b"{\"sequence\":3,"
    );
    assert_eq!(std::fs::read(&path).unwrap(), whole);
}

/// `bl log recover` moves a torn line aside wherever it is: in the log, or
/// staged beside it (then counted in the two as one).
#[test]
fn a_torn_staged_line_is_moved_aside_by_recover() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let (durable, whole) = staged_with_a_torn_line(&path, 2, b"{\"seq");
    let (durable, whole) = (durable as usize, whole.len());
    assert!(
        verify_chain(&bl_store::read_log(&path).unwrap())
            .unwrap()
            .1
            .is_some()
    );
    let tail = recover_torn_tail(&path).unwrap().unwrap();
    assert_eq!((tail.line, tail.offset), (5, (durable + whole) as u64));
    let aside = dir
        .path()
        .join(format!("controller-events.jsonl.torn-{}", durable + whole));
    assert_eq!(std::fs::read(aside).unwrap(), b"{\"seq");
    let (head, torn) = verify_chain(&bl_store::read_log(&path).unwrap()).unwrap();
    assert_eq!((head.sequence, torn), (4, None));
    assert_eq!(recover_torn_tail(&path).unwrap(), None);
}
