//! Helpers for bl's end-to-end tests: where the repository, the built `bl`
//! binary and the built first-party plugins are. The tests themselves live
//! in `tests/tests/` and drive the real binary and real components.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The `bl` binary of this cargo build (`target/<profile>/bl`), which
/// `cargo test --workspace` builds alongside the tests.
pub fn bl_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    // target/<profile>/deps/<test> → target/<profile>/bl
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary is in target/<profile>/deps")
        .join("bl");
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build -p bl-cli` (or `scripts/dev setup`) first",
        bin.display()
    );
    bin
}

/// Where `scripts/dev setup` puts built components: `BL_PLUGIN_DIR`, else
/// `<repo>/target/plugins`.
pub fn plugin_dir() -> PathBuf {
    std::env::var_os("BL_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/plugins"))
}

/// Where `scripts/dev test` puts the test fixtures and the third-party
/// example: `<repo>/target/test-plugins`.
pub fn test_plugin_dir() -> PathBuf {
    repo_root().join("target/test-plugins")
}

/// The bytes of a built component, with a pointer to `scripts/dev` when it
/// is missing.
pub fn component_bytes(dir: &Path, name: &str) -> Vec<u8> {
    let path = dir.join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build it with `scripts/dev test` (or `bl plugin build`)",
            path.display()
        )
    })
}

/// The crate directories of the first-party plugins.
pub fn first_party_plugin_crates() -> Vec<PathBuf> {
    let mut crates: Vec<PathBuf> = std::fs::read_dir(repo_root().join("plugins"))
        .expect("plugins/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    crates
}

/// Runs `bl` with `args` in the repository root, with a private cache dir.
pub fn bl(args: &[&str], cache: &Path) -> Output {
    Command::new(bl_binary())
        .args(args)
        .current_dir(repo_root())
        .env("BL_PLUGIN_PATH", plugin_dir())
        .env("BL_CACHE_DIR", cache)
        .output()
        .expect("bl runs")
}

/// `bl ARGS`, run in `dir`.
pub fn bl_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(bl_binary())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("bl runs")
}

/// The identity of the run the crash tests' log writer writes.
pub fn crash_run_identity() -> bl_store::RunIdentity {
    bl_store::RunIdentity {
        organization_id: "org".into(),
        project_id: "project".into(),
        run_id: "crash-run".into(),
        graph_digest: format!("sha256:{}", "1".repeat(64)),
        plan_digest: format!("sha256:{}", "2".repeat(64)),
        policy_digest: format!("sha256:{}", "a".repeat(64)),
    }
}

/// `PATH` with `dir/fake-bin` (a case's stand-in agent CLIs) first.
pub fn path_with_fakes(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.join("fake-bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `bl graph run` of [`approval_in_a_repair`]'s case, into `mine/`.
pub const REPAIR_RUN: &[&str] = &[
    "graph",
    "run",
    "--execute",
    "manifest.json",
    "--connections",
    "connections.json",
    "--inputs",
    "inputs.json",
    "--out",
    "mine",
];

/// `bl graph approve` of that run's `gate`, as it waits now.
pub const APPROVE_GATE: &[&str] = &[
    "graph",
    "approve",
    "--run",
    "mine",
    "--node",
    "gate",
    "--decision",
    "approved",
    "--inputs",
    "inputs.json",
];

/// `bl args` in the case directory `dir`, its stand-in agents first on PATH.
pub fn bl_with_fakes(dir: &Path, args: &[&str]) -> Output {
    Command::new(bl_binary())
        .args(args)
        .current_dir(dir)
        .env("PATH", path_with_fakes(dir))
        .output()
        .expect("bl runs")
}

/// The recorded `repair_succeeds` case with an approval `gate` between
/// `fetch` and the rest, written to `dir`: fetch → gate (an approval) →
/// verify, which fails once and repairs from fetch, so that `gate` is
/// asked again in round 1.
pub fn approval_in_a_repair(dir: &Path) {
    copy_tree(
        &repo_root().join("tests/corpus/graph-runs/repair_succeeds"),
        dir,
    );
    std::fs::create_dir_all(dir.join("state")).unwrap();
    // fetch → gate (an approval) → verify (fails once, repairs from fetch).
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    manifest["nodes"].as_array_mut().unwrap().push(json!({
        "id": "gate", "kind": "approval", "inputs": {"in_fetch": "text"}, "outputs": {"out": "text"},
        "budget": {"max_attempts": 1, "max_wallclock_s": 60}, "effects": ["read_only"],
        "isolation": "workspace_only", "required_role": "editor"}));
    for edge in manifest["edges"].as_array_mut().unwrap() {
        if edge["from_node"] == "fetch" {
            edge["from_node"] = json!("gate");
        }
    }
    manifest["edges"].as_array_mut().unwrap().push(
        json!({"from_node": "fetch", "from_port": "out", "to_node": "gate", "to_port": "in_fetch"}),
    );
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
}

/// Copies a directory tree (skipping any `target/`), for tests that change
/// a copy of a checked-in fixture.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Whether the cage can be tested here: false (said loudly) only when
/// bubblewrap is not installed and this is not CI. Under `CI=true` setup
/// must have installed it, and an installed bwrap that fails to cage
/// `true` is a failure, never a skip: it would hide a regression in bl's
/// own bwrap arguments.
pub fn cage_works() -> bool {
    let installed = ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"]
        .iter()
        .any(|p| Path::new(p).is_file());
    if !installed {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but bubblewrap is not installed: scripts/dev setup should have installed it"
        );
        eprintln!("SKIPPED: bubblewrap is not installed on this machine; the cage was not tested");
        return false;
    }
    let ws = tempfile::tempdir().expect("a temporary directory");
    let out = std::process::Command::new(bl_binary())
        .args([
            "sandbox",
            "run",
            "--isolation",
            "container_restricted",
            "--workspace",
        ])
        .arg(ws.path())
        .args(["--", "true"])
        .output()
        .expect("bl runs");
    assert!(
        out.status.success(),
        "bubblewrap is installed but cannot cage `true`: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// A slot (`requires: [chat]`, internal data) for every node of a graph
/// manifest that names one.
pub fn slots_of(nodes: &[serde_json::Value]) -> Vec<serde_json::Value> {
    nodes
        .iter()
        .filter_map(|n| n["connection_slot"].as_str())
        .map(|s| serde_json::json!({"id": s, "requires": ["chat"], "data_class_max": "internal"}))
        .collect()
}

/// An admitted connection candidate (the 17 keys of connections.json) for
/// `slot`, with `fields` over the defaults.
pub fn connection(slot: &str, fields: serde_json::Value) -> serde_json::Value {
    let mut c = serde_json::json!({
        "binding_id": format!("bind-{slot}"), "slot_id": slot, "connector_id": "local_cli",
        "connector_version": "1.0.0", "connection_id": format!("conn-{slot}"),
        "admission_digest": format!("sha256:{}", "1".repeat(64)),
        "route_policy_digest": format!("sha256:{}", "2".repeat(64)),
        "provider_id": "claude", "model_target": "fake-model", "region": "local",
        "fallback": false, "capabilities": ["chat"], "data_class_max": "internal",
        "allowed_effects": ["read_only", "workspace_write"], "isolation": "workspace_only",
        "transport": "local_cli", "admitted": true,
    });
    for (k, v) in fields.as_object().expect("fields are an object") {
        c[k] = v.clone();
    }
    c
}

/// The `event_type` of every line of a JSON-lines event log.
pub fn event_types(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()))
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("a JSON line")["event_type"]
                .as_str()
                .expect("an event_type")
                .to_string()
        })
        .collect()
}

/// The command lines of the processes alive now, as /proc has them
/// (arguments separated by NUL): to check that nothing a test started
/// outlived it.
pub fn live_command_lines() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("cmdline")).ok())
        .collect()
}

/// The python of a throwaway venv holding bounded-loops 0.7.6
/// (`BL_UPSTREAM_PYTHON`, else the one `scripts/dev test` makes under
/// `target/upstream/venv`). `None` (said loudly) when there is none and
/// this is not CI; under `CI=true` setup must have made it.
pub fn upstream_python() -> Option<PathBuf> {
    let python = std::env::var_os("BL_UPSTREAM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/upstream/venv/bin/python3"));
    if python.is_file() {
        return Some(python);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but bounded-loops 0.7.6 is not installed at {}: scripts/dev test should have made that venv",
        python.display()
    );
    eprintln!(
        "SKIPPED: bounded-loops 0.7.6 is not installed ({}); its status was not asked",
        python.display()
    );
    None
}

/// What bounded-loops' own `graph status --json` made of each run
/// directory: (directory, exit code, its stderr). `None` without it.
pub fn upstream_status(dirs: &[PathBuf]) -> Option<Vec<(PathBuf, i64, String)>> {
    let python = upstream_python()?;
    let out = std::process::Command::new(python)
        .arg(repo_root().join("tests/upstream/status.py"))
        .args(dirs)
        .output()
        .expect("bounded-loops' python runs");
    assert!(
        out.status.success(),
        "bounded-loops' status script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
                (
                    PathBuf::from(v["dir"].as_str().unwrap_or_default()),
                    v["exit"].as_i64().unwrap_or(-1),
                    v["stderr"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect(),
    )
}

/// `count` pseudo-random values below `limit` (xorshift from `seed`), so a
/// failure names a reproducible value.
pub fn pseudo_random(count: usize, limit: u64, seed: u64) -> Vec<u64> {
    let mut x = seed.max(1);
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % limit.max(1)
        })
        .collect()
}

/// A log's text with the lines its writer staged beside it and has not
/// moved in yet (none: empty): the run as far as it went.
pub fn log_text(path: &Path) -> String {
    bl_store::read_log(path)
        .map(|bytes| String::from_utf8(bytes).expect("a log is UTF-8"))
        .unwrap_or_default()
}

/// Every line of a JSON-lines file (none when it does not exist), with the
/// lines staged beside it.
pub fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    log_text(path)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `bl graph run` of the `manifest.json`, `connections.json` and
/// `inputs.json` in the current directory, into `run/` (the layout
/// benchmarks/graph/make_graph.py writes).
pub const GRAPH_RUN: &[&str] = &[
    "graph",
    "run",
    "--execute",
    "manifest.json",
    "--connections",
    "connections.json",
    "--inputs",
    "inputs.json",
    "--out",
    "run",
];

/// `bl graph run` of a graph whose connector nodes are bound to recorded
/// replies (the first graph's layout: `graph.yaml`, `connections.json`,
/// `inputs.json`, `replies.json`); the caller adds `--out` and the rest.
pub const RECORDED_GRAPH_RUN: &[&str] = &[
    "graph",
    "run",
    "--execute",
    "graph.yaml",
    "--connections",
    "connections.json",
    "--inputs",
    "inputs.json",
    "--recorded",
    "replies.json",
];

/// A copy of examples/graphs/first-graph (its graph, connections, inputs
/// and recorded replies) in a fresh directory, to run in.
pub fn first_graph() -> tempfile::TempDir {
    let case = tempfile::tempdir().expect("a temporary directory");
    copy_first_graph(case.path());
    case
}

/// Starts a `bl` that serves a page and says `<says>: <url>` on its first
/// line; returns the process and the page's address.
pub fn serving(command: &mut std::process::Command, says: &str) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("bl starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("bl says where it serves");
    let url = line
        .trim()
        .strip_prefix(&format!("{says}: "))
        .unwrap_or_else(|| panic!("bl said {line:?}, not where it serves"))
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (child, url)
}

/// A child process killed (and reaped) when the test lets go of it, even
/// by a failed assertion.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A raw HTTP/1.0 request; the status line and the body.
pub fn http_request(
    url: &str,
    method: &str,
    path_suffix: &str,
    headers: &[&str],
    body: &[u8],
) -> (String, String) {
    let (status, _, body) = http_exchange(url, method, path_suffix, headers, body);
    (status, body)
}

/// The headers of the answer to a raw HTTP/1.0 GET, lower-cased, a line each.
pub fn http_headers(url: &str, path_suffix: &str) -> Vec<String> {
    http_exchange(url, "GET", path_suffix, &[], b"").1
}

/// A raw HTTP/1.0 request; the status line, the headers (lower-cased) and
/// the body.
fn http_exchange(
    url: &str,
    method: &str,
    path_suffix: &str,
    headers: &[&str],
    body: &[u8],
) -> (String, Vec<String>, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let slash = rest.find('/').unwrap();
    let (host, path) = (&rest[..slash], &rest[slash..]);
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    let mut head = format!("{method} {path}{path_suffix} HTTP/1.0\r\nHost: {host}\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    use std::io::{Read, Write};
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(body);
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap_or_default().to_string();
    let headers = lines.map(str::to_ascii_lowercase).collect();
    (status, headers, body.to_string())
}

/// Copies examples/graphs/first-graph's graph, connections, inputs and
/// recorded replies into `dir`.
pub fn copy_first_graph(dir: &Path) {
    let example = repo_root().join("examples/graphs/first-graph");
    for file in [
        "graph.yaml",
        "connections.json",
        "inputs.json",
        "replies.json",
    ] {
        std::fs::copy(example.join(file), dir.join(file)).expect("the example's files");
    }
}
