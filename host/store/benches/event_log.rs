//! Event log throughput: appends with a durable group commit (one fsync per
//! 256 events) into a log of 10 and of 100k events (the cost per append must
//! not grow with the log), and chain verification speed in bytes/s (target
//! 500 MB/s; it uses every core).
//!
//!     cargo bench -p bl-store --bench event_log

use std::time::{Duration, Instant};

use bl_store::{EventLog, RunIdentity, verify_chain};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;

const GROUP: u64 = 256;

fn identity() -> RunIdentity {
    RunIdentity {
        organization_id: "org".into(),
        project_id: "project".into(),
        run_id: "bench-run".into(),
        graph_digest: format!("sha256:{}", "1".repeat(64)),
        plan_digest: format!("sha256:{}", "2".repeat(64)),
        policy_digest: format!("sha256:{}", "a".repeat(64)),
    }
}

fn fill(log: &mut EventLog, from: u64, count: u64) {
    for n in from..from + count {
        let payload = json!({"node_id": format!("n{}", n % 1000), "tokens": n});
        log.append(
            &format!("node.spend:{n}"),
            "node.spend",
            &payload,
            "2026-11-29T21:00:00Z",
        )
        .unwrap();
        if (n + 1).is_multiple_of(GROUP) {
            log.sync().unwrap();
        }
    }
    log.sync().unwrap();
}

/// Groups appended before the log is cut back to its starting length, so
/// "a log of 10 events" stays within 10 + 8192 and "100k" within 100k + 8192.
const GROUPS_BEFORE_RESET: u64 = 32;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("append (group commit of 256)");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(6))
        .warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(GROUP));
    for existing in [10u64, 100_000] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(bl_store::RunDir::EVENTS);
        let mut log = EventLog::open(&path, identity()).unwrap();
        fill(&mut log, 0, existing);
        let start_len = std::fs::metadata(&path).unwrap().len();
        let mut log = Some(log);
        let mut groups = 0;
        group.bench_function(
            BenchmarkId::new("events already in the log", existing),
            |b| {
                b.iter_custom(|iters| {
                    let mut measured = Duration::ZERO;
                    for _ in 0..iters {
                        if groups == GROUPS_BEFORE_RESET {
                            // Untimed: the log is append-only, so cutting it
                            // back to its first length restores it exactly.
                            drop(log.take());
                            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                            file.set_len(start_len).unwrap();
                            log = Some(EventLog::open(&path, identity()).unwrap());
                            groups = 0;
                        }
                        let writer = log.as_mut().unwrap();
                        let next = writer.head().sequence;
                        let started = Instant::now();
                        fill(writer, next, GROUP);
                        measured += started.elapsed();
                        groups += 1;
                    }
                    measured
                })
            },
        );
    }
    group.finish();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(bl_store::RunDir::EVENTS);
    let mut log = EventLog::open(&path, identity()).unwrap();
    fill(&mut log, 0, 100_000);
    drop(log);
    let bytes = std::fs::read(&path).unwrap();
    let mut group = c.benchmark_group("verify");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(6));
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("100k events", |b| b.iter(|| verify_chain(&bytes).unwrap()));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
