//! Plugin invocation costs: a warm call of a trivial gate (target p50 ≤ 50 µs),
//! and loading a component with the compile cache hit against missed.
//!
//! Needs the test fixtures: run `scripts/dev test` (or build
//! `tests/plugins/hostile` with `bl plugin build … --out target/test-plugins`) first.

use std::path::PathBuf;
use std::time::Duration;

use bl_plugins::{LoadOptions, Runtime, RuntimeConfig};
use criterion::{Criterion, criterion_group, criterion_main};

fn component() -> Vec<u8> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-plugins/hostile.wasm");
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `scripts/dev test` first", path.display()))
}

fn warm_invocation(c: &mut Criterion) {
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    let gate = runtime
        .load_gate("hostile", &component(), &LoadOptions::default())
        .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("invoke");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function(
        format!("warm trivial gate ({})", runtime.allocator()),
        |b| {
            b.iter(|| {
                let v = runtime
                    .check(&gate, ws.path(), r#"{"mode":"pass"}"#)
                    .unwrap();
                assert!(v.value.passed);
            })
        },
    );
    group.finish();
}

fn cache_hit_vs_miss(c: &mut Criterion) {
    let bytes = component();
    let mut group = c.benchmark_group("load");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    let warm_cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(warm_cache.path().to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    runtime
        .load_gate("hostile", &bytes, &LoadOptions::default())
        .unwrap();
    group.bench_function("cache hit", |b| {
        b.iter(|| {
            runtime
                .load_gate("hostile", &bytes, &LoadOptions::default())
                .unwrap()
        })
    });
    let uncached = Runtime::new(RuntimeConfig::default()).unwrap();
    group.bench_function("cache miss (cranelift)", |b| {
        b.iter(|| {
            uncached
                .load_gate("hostile", &bytes, &LoadOptions::default())
                .unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, warm_invocation, cache_hit_vs_miss);
criterion_main!(benches);
