//! The sandbox probe: a process inside the sandbox tries a network
//! connection and a write outside its workspace, and records what happened
//! in an artifact. Then an independent check (this module, outside the
//! probed process) passes only if the OS denied both: it trusts the host's
//! own observations (no connection reached the listener, no file appeared
//! outside), and requires the artifact to agree.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bl_core::{CommandRunner, CommandSpec};
use serde_json::{Value, json};

pub const PROBE_ARTIFACT: &str = "probe-report.json";
pub const PROBE_RESULT: &str = "probe-result.json";

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOutcome {
    pub passed: bool,
    /// One line per check, for people.
    pub checks: Vec<(String, bool, String)>,
    /// `sha256:` of the artifact the probed process wrote.
    pub artifact_digest: Option<String>,
    pub result_path: PathBuf,
}

const SCRIPT: &str = r#"
import json, socket, sys
port, beside, system = int(sys.argv[1]), sys.argv[2], sys.argv[3]
report = {}
try:
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
    report["network"] = {"denied": False, "detail": "connected to the host's listener"}
except OSError as e:
    report["network"] = {"denied": True, "detail": str(e)}
for key, path in (("write_outside", system), ("write_beside", beside)):
    try:
        with open(path, "w") as f:
            f.write("escaped")
        report[key] = {"denied": False, "detail": "wrote " + path}
    except OSError as e:
        report[key] = {"denied": True, "detail": str(e)}
with open("probe-report.json", "w") as f:
    json.dump(report, f, indent=2, sort_keys=True)
"#;

/// Runs the probe with `runner` and writes the artifact's digest and the
/// result into `out_dir` (which also holds the probe's workspace).
pub fn run_probe(runner: &dyn CommandRunner, out_dir: &Path) -> Result<ProbeOutcome, String> {
    let workspace = out_dir.join("workspace");
    std::fs::create_dir_all(&workspace).map_err(|e| format!("{}: {e}", workspace.display()))?;
    // Two targets outside the workspace: one beside it on the host, one in
    // a system directory. Neither may appear on the host; the system one
    // must also be refused inside (a private /tmp may absorb the other).
    let outside = out_dir.join("outside-the-workspace.txt");
    let system = PathBuf::from(format!("/etc/bl-probe-{}", std::process::id()));
    let _ = std::fs::remove_file(&outside);
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("probe listener: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();

    let spec = CommandSpec {
        argv: vec![
            "/usr/bin/python3".into(),
            "-c".into(),
            SCRIPT.into(),
            port.to_string(),
            outside.display().to_string(),
            system.display().to_string(),
        ],
        workspace: workspace.clone(),
        workspace_writable: true,
        stdin: Vec::new(),
        timeout: Duration::from_secs(30),
        output_cap: 16 << 10,
    };
    let run = runner
        .run(&spec)
        .map_err(|e| format!("the sandbox ({}) {e}", runner.name()))?;

    // The independent part: what the host saw, not what the probe says.
    let mut connected = false;
    if let Ok((mut stream, _)) = listener.accept() {
        let mut buf = [0u8; 1];
        let _ = stream.read(&mut buf);
        connected = true;
    }
    let wrote = outside.exists() || system.exists();
    let artifact_path = workspace.join(PROBE_ARTIFACT);
    let artifact = std::fs::read(&artifact_path).ok();
    let claims: Option<Value> = artifact
        .as_ref()
        .and_then(|b| serde_json::from_slice(b).ok());
    let claimed = |key: &str| claims.as_ref().and_then(|c| c[key]["denied"].as_bool());

    let mut checks = vec![
        (
            "probe ran".to_string(),
            run.exit_code == Some(0) && claims.is_some(),
            format!(
                "exit {:?}; {}",
                run.exit_code,
                if claims.is_some() {
                    "artifact written"
                } else {
                    "no readable artifact"
                }
            ),
        ),
        (
            "network denied".to_string(),
            !connected && claimed("network") == Some(true),
            format!(
                "host listener {}; the probe reported denied={:?}",
                if connected {
                    "WAS REACHED"
                } else {
                    "saw nothing"
                },
                claimed("network")
            ),
        ),
        (
            "write outside denied".to_string(),
            !wrote && claimed("write_outside") == Some(true),
            format!(
                "{} and {} {} on the host; the probe reported denied={:?} for {}",
                outside.display(),
                system.display(),
                if wrote { "one EXISTS" } else { "are absent" },
                claimed("write_outside"),
                system.display()
            ),
        ),
    ];
    if wrote {
        let _ = std::fs::remove_file(&outside);
        let _ = std::fs::remove_file(&system);
    }
    let passed = checks.iter().all(|(_, ok, _)| *ok);
    let artifact_digest = artifact.map(|b| format!("sha256:{}", bl_core::sha256_hex(&b)));
    checks.shrink_to_fit();
    let result = json!({
        "tier": runner.name(),
        "passed": passed,
        "artifact": PROBE_ARTIFACT,
        "artifact_digest": artifact_digest,
        "checks": checks.iter().map(|(n, ok, d)| json!({"name": n, "ok": ok, "detail": d})).collect::<Vec<_>>(),
    });
    let result_path = out_dir.join(PROBE_RESULT);
    std::fs::write(
        &result_path,
        serde_json::to_string_pretty(&result).expect("json") + "\n",
    )
    .map_err(|e| format!("{}: {e}", result_path.display()))?;
    Ok(ProbeOutcome {
        passed,
        checks,
        artifact_digest,
        result_path,
    })
}
