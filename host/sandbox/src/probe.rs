//! The sandbox probe: a process inside the sandbox tries a network
//! connection, a write outside its workspace, a rewrite of a global sysctl
//! (with the value already there, so it changes nothing even if it got
//! through) and a keyring call, and records what happened in an artifact.
//! It then waits while the host looks at it from outside. An independent
//! check (this module, outside the probed process) passes only if the OS
//! denied everything: it trusts the host's own observations (no connection
//! reached the listener, no file appeared outside, the process is not host
//! root, /proc/sys is mounted read-only for it, a seccomp filter holds it
//! and its user gained no kernel key), and requires the artifact to agree.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bl_core::{CommandRunner, CommandSpec};
use serde_json::{Value, json};

use crate::inspect::{HostView, keys_by_user, wait_for_process};

pub const PROBE_ARTIFACT: &str = "probe-report.json";
pub const PROBE_RESULT: &str = "probe-result.json";
/// The file the host writes into the workspace once it has looked.
const PROBE_CONTINUE: &str = "probe-continue";
/// The global sysctl the probe tries to rewrite.
pub const PROBE_SYSCTL: &str = "/proc/sys/kernel/core_pattern";
const PYTHON: &str = "/usr/bin/python3";

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
import ctypes, json, os, socket, sys, time
port, beside, system, sysctl, keyctl_nr = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
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
# Rewrite the sysctl with the value it already has: nothing changes even
# if the write gets through.
try:
    with open(sysctl, "rb") as f:
        current = f.read()
    fd = os.open(sysctl, os.O_WRONLY)
    try:
        os.write(fd, current)
    finally:
        os.close(fd)
    report["sysctl"] = {"denied": False, "detail": "rewrote " + sysctl}
except OSError as e:
    report["sysctl"] = {"denied": True, "detail": str(e)}
libc = ctypes.CDLL(None, use_errno=True)
serial = libc.syscall(keyctl_nr, 1, b"bl-probe")  # KEYCTL_JOIN_SESSION_KEYRING
if serial < 0:
    report["keyctl"] = {"denied": True, "detail": os.strerror(ctypes.get_errno())}
else:
    report["keyctl"] = {"denied": False, "detail": "joined a new session keyring %d" % serial}
with open("probe-report.json", "w") as f:
    json.dump(report, f, indent=2, sort_keys=True)
# Stay alive (and so keep the keyring, had it been made) while the host looks.
deadline = time.time() + 20
while not os.path.exists("probe-continue") and time.time() < deadline:
    time.sleep(0.02)
"#;

/// What the host saw of the probe while it waited.
struct Observation {
    view: Option<HostView>,
    keys_gained: Option<bool>,
}

/// Watches the workspace for the artifact; then finds the probe by its
/// marker, reads it from outside, and lets it go on.
fn observe(
    workspace: PathBuf,
    marker: String,
    finished: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Observation> {
    let keys_before = keys_by_user();
    std::thread::spawn(move || {
        let mut observation = Observation {
            view: None,
            keys_gained: None,
        };
        while !finished.load(Ordering::Acquire) {
            if workspace.join(PROBE_ARTIFACT).exists() {
                if let Some(pid) = wait_for_process(PYTHON, &marker, Duration::from_secs(2)) {
                    observation.view = HostView::read(pid).ok();
                }
                if let (Some(view), Some(before), Some(now)) =
                    (&observation.view, &keys_before, keys_by_user())
                {
                    let uid = view.uids[1];
                    let had = before.get(&uid).copied().unwrap_or(0);
                    observation.keys_gained = Some(now.get(&uid).copied().unwrap_or(0) > had);
                }
                let _ = std::fs::write(workspace.join(PROBE_CONTINUE), b"");
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        observation
    })
}

/// Why the probe could not run at all (as opposed to running and finding
/// the cage open, which is a failed [`ProbeOutcome`]).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("probe listener: {0}")]
    Listener(std::io::Error),
    #[error("the probe's observer panicked")]
    ObserverPanicked,
    #[error("the sandbox ({tier}) {source}")]
    Sandbox {
        tier: String,
        source: bl_core::CommandError,
    },
}

impl ProbeError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ProbeError + '_ {
        move |source| ProbeError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Runs the probe with `runner` and writes the artifact's digest and the
/// result into `out_dir` (which also holds the probe's workspace).
/// `caged` is the host uid and gid the runner promises its commands run as.
pub fn run_probe(
    runner: &dyn CommandRunner,
    caged: (u32, u32),
    out_dir: &Path,
) -> Result<ProbeOutcome, ProbeError> {
    let workspace = out_dir.join("workspace");
    std::fs::create_dir_all(&workspace).map_err(ProbeError::io(&workspace))?;
    for stale in [PROBE_ARTIFACT, PROBE_CONTINUE] {
        let _ = std::fs::remove_file(workspace.join(stale));
    }
    // Two targets outside the workspace: one beside it on the host, one in
    // a system directory. Neither may appear on the host; the system one
    // must also be refused inside (a private /tmp may absorb the other).
    let outside = out_dir.join("outside-the-workspace.txt");
    let system = PathBuf::from(format!("/etc/bl-probe-{}", std::process::id()));
    let _ = std::fs::remove_file(&outside);
    let listener = TcpListener::bind("127.0.0.1:0").map_err(ProbeError::Listener)?;
    listener
        .set_nonblocking(true)
        .map_err(ProbeError::Listener)?;
    let port = listener.local_addr().map_err(ProbeError::Listener)?.port();
    let sysctl_before = std::fs::read(PROBE_SYSCTL).ok();
    let marker = format!("bl-probe-{}-{}", std::process::id(), port);

    let spec = CommandSpec {
        argv: vec![
            PYTHON.into(),
            "-c".into(),
            SCRIPT.into(),
            port.to_string(),
            outside.display().to_string(),
            system.display().to_string(),
            PROBE_SYSCTL.into(),
            nix::libc::SYS_keyctl.to_string(),
            marker.clone(),
        ],
        workspace: workspace.clone(),
        workspace_writable: true,
        stdin: Vec::new(),
        timeout: Duration::from_secs(60),
        output_cap: 16 << 10,
        stream: false,
        env: Vec::new(),
        private_dir: None,
        home: None,
    };
    let finished = Arc::new(AtomicBool::new(false));
    let watcher = observe(workspace.clone(), marker, finished.clone());
    let run = runner.run(&spec);
    finished.store(true, Ordering::Release);
    let observation = watcher.join().map_err(|_| ProbeError::ObserverPanicked)?;
    let run = run.map_err(|source| ProbeError::Sandbox {
        tier: runner.name().to_string(),
        source,
    })?;

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
    // What the probe said, as a user reads it.
    let said = |key: &str| claimed(key).map_or("nothing".to_string(), |d| d.to_string());
    let view = observation.view.as_ref();
    // Run by root, bl leaves the caged user no other group; an ordinary
    // user's cage keeps that user's own.
    let own_groups: Vec<u32> = if nix::unistd::geteuid().is_root() {
        Vec::new()
    } else {
        nix::unistd::getgroups()
            .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_default()
    };
    let sysctl_unchanged = std::fs::read(PROBE_SYSCTL).ok() == sysctl_before;

    let mut checks = vec![
        (
            "probe ran".to_string(),
            run.exit_code == Some(0) && claims.is_some() && view.is_some(),
            format!(
                "exit {}; {}; {}",
                run.exit_code
                    .map_or("by a signal".to_string(), |c| c.to_string()),
                if claims.is_some() {
                    "artifact written"
                } else {
                    "no readable artifact"
                },
                match view {
                    Some(v) => format!("the host saw it as pid {}", v.pid),
                    None => "the host could not find it to look at".into(),
                }
            ),
        ),
        (
            "network denied".to_string(),
            !connected && claimed("network") == Some(true),
            format!(
                "host listener {}; the probe reported denied={}",
                if connected {
                    "WAS REACHED"
                } else {
                    "saw nothing"
                },
                said("network")
            ),
        ),
        (
            "write outside denied".to_string(),
            !wrote && claimed("write_outside") == Some(true),
            format!(
                "{} and {} {} on the host; the probe reported denied={} for {}",
                outside.display(),
                system.display(),
                if wrote { "one EXISTS" } else { "are absent" },
                said("write_outside"),
                system.display()
            ),
        ),
        (
            "not host root".to_string(),
            view.is_some_and(|v| !v.is_host_root() && v.is_only(caged.0, caged.1, &own_groups)),
            match view {
                Some(v) => format!(
                    "the host sees uids {:?}, gids {:?} and groups {:?} (expected {}:{})",
                    v.uids, v.gids, v.groups, caged.0, caged.1
                ),
                None => "not seen".into(),
            },
        ),
        (
            "sysctl write denied".to_string(),
            view.is_some_and(|v| v.read_only("/proc/sys/kernel"))
                && claimed("sysctl") == Some(true)
                && sysctl_unchanged,
            format!(
                "/proc/sys {} for the probe, as the host reads its mounts; {PROBE_SYSCTL} {}; the probe reported denied={}",
                match view {
                    Some(v) if v.read_only("/proc/sys/kernel") => "is read-only",
                    Some(_) => "IS WRITABLE",
                    None => "was not seen",
                },
                if sysctl_unchanged {
                    "is unchanged"
                } else {
                    "CHANGED"
                },
                said("sysctl")
            ),
        ),
        (
            "keyctl denied".to_string(),
            view.is_some_and(|v| v.seccomp_mode == 2)
                && observation.keys_gained == Some(false)
                && claimed("keyctl") == Some(true),
            format!(
                "seccomp mode {} for the probe; its user {} kernel keys; the probe reported denied={}",
                view.map_or("unseen".to_string(), |v| v.seccomp_mode.to_string()),
                match observation.keys_gained {
                    Some(true) => "GAINED",
                    Some(false) => "gained no",
                    None => "could not be checked for",
                },
                said("keyctl")
            ),
        ),
    ];
    if wrote {
        let _ = std::fs::remove_file(&outside);
        let _ = std::fs::remove_file(&system);
    }
    let passed = checks.iter().all(|(_, ok, _)| *ok);
    let artifact_digest = artifact.map(|b| bl_core::Sha256Digest::of(&b).to_string());
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
    .map_err(ProbeError::io(&result_path))?;
    Ok(ProbeOutcome {
        passed,
        checks,
        artifact_digest,
        result_path,
    })
}
