//! The cost of starting a command in each tier against a bare exec of the
//! same command (`/bin/true`). bwrap's own floor is about 5 ms.

use std::time::Duration;

use bl_core::{CommandRunner, CommandSpec};
use bl_sandbox::{Sandbox, Subprocess, Tier};
use criterion::{Criterion, criterion_group, criterion_main};

fn start(c: &mut Criterion) {
    let ws = tempfile::tempdir().unwrap();
    let spec = CommandSpec {
        argv: vec!["/bin/true".into()],
        workspace: ws.path().to_path_buf(),
        workspace_writable: true,
        stdin: Vec::new(),
        timeout: Duration::from_secs(10),
        output_cap: 4096,
        stream: false,
        env: Vec::new(),
        private_dir: None,
        home: None,
    };
    let mut group = c.benchmark_group("start");
    group.sample_size(30);
    group.bench_function("bare exec (std::process)", |b| {
        b.iter(|| std::process::Command::new("/bin/true").status().unwrap())
    });
    group.bench_function("workspace_only", |b| {
        b.iter(|| Subprocess.run(&spec).unwrap())
    });
    for tier in [Tier::ProcessRestricted, Tier::ContainerRestricted] {
        let sandbox = Sandbox::new(tier);
        if sandbox.run(&spec).map(|r| r.exit_code) != Ok(Some(0)) {
            eprintln!("skipping {}: bwrap cannot run here", tier.name());
            continue;
        }
        group.bench_function(tier.name(), |b| b.iter(|| sandbox.run(&spec).unwrap()));
    }
    group.finish();
}

criterion_group!(benches, start);
criterion_main!(benches);
