//! Test helper: appends events to a run's event log forever, a durable
//! group every few events, so a test can kill it at any point.
//!
//!     bl-test-log-writer LOG

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: bl-test-log-writer LOG");
    let identity = bl_e2e::crash_run_identity();
    let mut log =
        bl_store::EventLog::open(std::path::Path::new(&path), identity).expect("open the log");
    let mut n = log.head().sequence;
    loop {
        n += 1;
        let payload = serde_json::json!({"n": n, "padding": "x".repeat((n % 97) as usize)});
        log.append(
            &format!("node.spend:{n}"),
            "node.spend",
            &payload,
            "2026-11-29T21:00:00Z",
        )
        .expect("append");
        if n.is_multiple_of(7) {
            log.sync().expect("sync");
        }
    }
}
