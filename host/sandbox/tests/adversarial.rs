//! Escape attempts against the caged tiers, with real bubblewrap and real
//! processes. Every one must be denied by the OS; a write inside the
//! workspace must persist, owned as before. Run as root (as in CI), the
//! suite also runs its denials again as an ordinary user. Where bwrap is
//! not installed the tests say so and skip, except under `CI=true`, where
//! setup must have installed it; a bwrap that is installed but fails is a
//! failure, never a skip.

use std::net::{TcpListener, UdpSocket};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use bl_core::{CommandError, CommandRunner, CommandSpec};
use bl_sandbox::inspect::{HostView, wait_for_process};
use bl_sandbox::{CagedUser, Sandbox, Tier};
use nix::libc;

fn spec(ws: &Path, script: &str) -> CommandSpec {
    CommandSpec {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        workspace: ws.to_path_buf(),
        workspace_writable: true,
        stdin: Vec::new(),
        timeout: Duration::from_secs(20),
        output_cap: 64 << 10,
        stream: false,
        env: Vec::new(),
        private_dir: None,
        home: None,
    }
}

/// Whether bwrap is missing on a machine where that is allowed.
fn bwrap_absent() -> bool {
    if bl_sandbox::find_bwrap().is_some() {
        return false;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but bubblewrap is not installed: scripts/dev setup should have installed it"
    );
    eprintln!(
        "SKIPPED: bubblewrap is not installed on this machine; the sandbox tests did not run"
    );
    true
}

/// The cage for `tier`, or `None` (after saying why) when this machine has
/// no bwrap. A bwrap that cannot run is a failure: it would otherwise hide
/// a regression in bl's own arguments.
fn cage_of(tier: Tier) -> Option<Sandbox> {
    if bwrap_absent() {
        return None;
    }
    let sandbox = Sandbox::new(tier);
    let ws = tempfile::tempdir().unwrap();
    let r = sandbox.run(&spec(ws.path(), "true"));
    match r {
        Ok(r) if r.exit_code == Some(0) => Some(sandbox),
        other => panic!(
            "bubblewrap is installed but {} cannot run `true`: {}",
            tier.name(),
            match other {
                Ok(r) => String::from_utf8_lossy(&r.stderr_tail).into_owned(),
                Err(e) => e.to_string(),
            }
        ),
    }
}

fn cage() -> Option<Sandbox> {
    cage_of(Tier::ContainerRestricted)
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Runs `script` caged; returns (exit code, stdout, stderr).
fn caged(sandbox: &Sandbox, ws: &Path, script: &str) -> (Option<i32>, String, String) {
    let r = sandbox.run(&spec(ws, script)).unwrap();
    (
        r.exit_code,
        String::from_utf8_lossy(&r.stdout_tail).into_owned(),
        String::from_utf8_lossy(&r.stderr_tail).into_owned(),
    )
}

fn python(code: &str) -> String {
    format!("/usr/bin/python3 -c \"{code}\"")
}

#[test]
fn network_of_every_kind_is_denied() {
    let Some(sandbox) = cage() else { return };
    let ws = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let attempts = [
        (
            "tcp",
            python(&format!(
                "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
            )),
        ),
        (
            "tcp6",
            python(&format!(
                "import socket; socket.create_connection(('::1', {port}), timeout=2)"
            )),
        ),
        (
            "udp",
            python(&format!(
                "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('127.0.0.1', {udp_port}))"
            )),
        ),
        (
            "public",
            python("import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)"),
        ),
        (
            "dns",
            python("import socket; socket.getaddrinfo('example.com', 80)"),
        ),
    ];
    for (name, script) in attempts {
        let (code, _, err) = caged(&sandbox, ws.path(), &script);
        // The UDP send may "succeed" into the sandbox's own loopback; what
        // matters is that nothing reaches the host's socket.
        if name != "udp" {
            assert_ne!(code, Some(0), "{name} got out: {err}");
        }
    }
    let mut buf = [0u8; 8];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a UDP datagram reached the host"
    );
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_err(),
        "a TCP connection reached the host"
    );
}

#[test]
fn writes_outside_the_workspace_fail_and_inside_persist() {
    let Some(sandbox) = cage() else { return };
    let ws = tempfile::tempdir().unwrap();
    let host_tmp = tempfile::tempdir().unwrap();
    let marker = host_tmp.path().join("escaped");
    let script = format!(
        "echo x > /etc/bl-escape; echo x > /var/tmp/bl-escape; echo x > {m}; echo x > /usr/bl-escape; echo kept > inside.txt; echo done",
        m = marker.display()
    );
    let (code, out, err) = caged(&sandbox, ws.path(), &script);
    let escaped: Vec<&str> = ["/etc/bl-escape", "/var/tmp/bl-escape", "/usr/bl-escape"]
        .into_iter()
        .filter(|p| Path::new(p).exists())
        .collect();
    // Leave the host as it was, even when the cage failed.
    for path in &escaped {
        let _ = std::fs::remove_file(path);
    }
    assert!(escaped.is_empty(), "{escaped:?} were written");
    assert_eq!((code, out.trim()), (Some(0), "done"), "{err}");
    assert!(!marker.exists(), "wrote into the host's /tmp");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("inside.txt")).unwrap(),
        "kept\n"
    );
}

#[test]
fn files_outside_the_workspace_cannot_be_read() {
    let Some(sandbox) = cage() else { return };
    let ws = tempfile::tempdir().unwrap();
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "hunter2").unwrap();
    let (_, out, _) = caged(
        &sandbox,
        ws.path(),
        &format!("cat {} ; cat /root/.bash_history; true", secret.display()),
    );
    assert!(!out.contains("hunter2"), "{out}");
}

#[test]
fn the_protected_git_dir_cannot_be_written_or_swapped_for_a_symlink() {
    let Some(sandbox) = cage() else { return };
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join(".git")).unwrap();
    std::fs::write(ws.path().join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let script = "echo evil > .git/HEAD; rm -rf .git; mv .git .git-old; ln -s /tmp .git; ln -sfn /tmp .git/hooks; true";
    caged(&sandbox, ws.path(), script);
    let git = ws.path().join(".git");
    assert!(
        std::fs::symlink_metadata(&git).unwrap().is_dir(),
        ".git was replaced"
    );
    assert_eq!(
        std::fs::read_to_string(git.join("HEAD")).unwrap(),
        "ref: refs/heads/main\n"
    );
    assert!(!git.join("hooks").exists());

    // A workspace whose protected path is already a symlink is refused.
    let bad = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/tmp", bad.path().join(".git")).unwrap();
    let err = sandbox.run(&spec(bad.path(), "true")).unwrap_err();
    assert!(
        matches!(err, CommandError::Denied(ref m) if m.contains("symlink")),
        "{err:?}"
    );
}

#[test]
fn host_processes_are_invisible_and_untouchable_and_there_is_no_terminal() {
    let Some(sandbox) = cage() else { return };
    let ws = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let (_, out, _) = caged(
        &sandbox,
        ws.path(),
        &format!(
            "ls /proc | grep -c '^[0-9]'; test -e /proc/{me} && echo SEEN; kill -0 {me} 2>/dev/null && echo KILLABLE; true"
        ),
    );
    let visible: u32 = out.lines().next().unwrap().trim().parse().unwrap();
    assert!(visible < 10, "{visible} processes visible");
    assert!(!out.contains("SEEN") && !out.contains("KILLABLE"), "{out}");
    // ptrace of anything outside is impossible (invisible); inside, the
    // seccomp filter refuses it, so the attempt returns at once.
    let (code, _, err) = caged(
        &sandbox,
        ws.path(),
        &python(
            "import ctypes, sys; libc=ctypes.CDLL(None, use_errno=True); r=libc.ptrace(16, 1, 0, 0); sys.exit(0 if r == 0 else (10 + ctypes.get_errno()))",
        ),
    );
    assert_eq!(
        code,
        Some(11),
        "PTRACE_ATTACH was not refused with EPERM: {err}"
    );
    // A new session has no controlling terminal, so TIOCSTI has nothing to
    // inject into.
    let (code, _, _) = caged(&sandbox, ws.path(), &python("open('/dev/tty', 'wb')"));
    assert_ne!(code, Some(0), "/dev/tty opened");
}

#[test]
fn a_read_only_workspace_stays_unwritten() {
    let Some(sandbox) = cage() else { return };
    let ws = tempfile::tempdir().unwrap();
    let mut s = spec(ws.path(), "echo x > new.txt; true");
    s.workspace_writable = false;
    sandbox.run(&s).unwrap();
    assert!(!ws.path().join("new.txt").exists());
}

#[test]
fn tiers_without_a_cage_or_without_bwrap_refuse_with_the_fix() {
    let ws = tempfile::tempdir().unwrap();
    let err = Sandbox::new(Tier::CustomerManagedWorker)
        .run(&spec(ws.path(), "true"))
        .unwrap_err();
    assert!(
        matches!(err, CommandError::Denied(ref m) if m.contains("customer's own worker")),
        "{err:?}"
    );
    let err = Sandbox::with_bwrap(Tier::ContainerRestricted, Some("/nonexistent/bwrap".into()))
        .run(&spec(ws.path(), "true"))
        .unwrap_err();
    assert!(
        matches!(err, CommandError::Denied(ref m) if m.contains("install the `bubblewrap` package")),
        "{err:?}"
    );
    let r = Sandbox::new(Tier::WorkspaceOnly)
        .run(&spec(ws.path(), "echo $HOME"))
        .unwrap();
    assert!(String::from_utf8_lossy(&r.stdout_tail).contains("bl-cmd-"));
}

#[test]
fn process_restricted_has_no_network() {
    let Some(_) = cage() else { return };
    let ws = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = Sandbox::new(Tier::ProcessRestricted)
        .run(&spec(
            ws.path(),
            &python(&format!(
                "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
            )),
        ))
        .unwrap();
    assert_ne!(r.exit_code, Some(0));
}

/// Runs Python `code` with `args` caged in `sandbox`; (exit, stdout, stderr).
fn caged_python(
    sandbox: &Sandbox,
    ws: &Path,
    code: &str,
    args: &[String],
) -> (Option<i32>, String, String) {
    let mut argv = vec!["/usr/bin/python3".to_string(), "-c".into(), code.into()];
    argv.extend(args.iter().cloned());
    let r = sandbox
        .run(&CommandSpec {
            argv,
            ..spec(ws, "")
        })
        .unwrap();
    (
        r.exit_code,
        String::from_utf8_lossy(&r.stdout_tail).into_owned(),
        String::from_utf8_lossy(&r.stderr_tail).into_owned(),
    )
}

/// Global sysctls; each is only ever rewritten with the value it has (and
/// the write-only ones are never written), so a failed cage changes nothing.
const SYSCTLS: &[&str] = &[
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/kernel/panic",
    "/proc/sys/kernel/sysrq",
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/vm/drop_caches",
    "/proc/sys/fs/file-max",
    "/proc/sys/net/ipv4/ip_forward",
];

const REWRITE_SYSCTLS: &str = r#"
import json, os, sys
results = {}
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as f:
            current = f.read()
    except OSError:
        current = None  # write-only, or hidden: never written below
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as e:
        results[path] = "denied: " + e.strerror
        continue
    try:
        if current is not None:
            os.write(fd, current)
        results[path] = "OPENED for writing"
    except OSError as e:
        results[path] = "OPENED, then the write failed: " + e.strerror
    finally:
        os.close(fd)
try:
    os.close(os.open("/proc/sysrq-trigger", os.O_WRONLY))
    results["/proc/sysrq-trigger"] = "OPENED for writing"
except OSError as e:
    results["/proc/sysrq-trigger"] = "denied: " + e.strerror
print(json.dumps(results))
"#;

fn host_sysctls() -> Vec<Option<Vec<u8>>> {
    SYSCTLS.iter().map(|p| std::fs::read(p).ok()).collect()
}

fn assert_proc_sys_is_read_only(sandbox: &Sandbox) {
    let ws = tempfile::tempdir().unwrap();
    let before = host_sysctls();
    let args: Vec<String> = SYSCTLS.iter().map(|s| s.to_string()).collect();
    let (code, out, err) = caged_python(sandbox, ws.path(), REWRITE_SYSCTLS, &args);
    assert_eq!(code, Some(0), "{out}{err}");
    let results: serde_json::Value = serde_json::from_str(&out).unwrap();
    for (path, outcome) in results.as_object().unwrap() {
        assert!(
            outcome.as_str().unwrap().starts_with("denied"),
            "{} ({}): {path}: {outcome}",
            sandbox.tier().name(),
            if is_root() { "as root" } else { "as a user" }
        );
    }
    assert_eq!(results.as_object().unwrap().len(), SYSCTLS.len() + 1);
    assert_eq!(host_sysctls(), before, "a host sysctl changed");
}

#[test]
fn proc_sys_and_sysrq_trigger_cannot_be_written_even_with_their_own_values() {
    for tier in [Tier::ContainerRestricted, Tier::ProcessRestricted] {
        let Some(sandbox) = cage_of(tier) else { return };
        assert_proc_sys_is_read_only(&sandbox);
    }
}

const READ_HIDDEN: &str = r#"
import json, os, sys
seen = {}
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            seen[path] = os.listdir(path)
        else:
            with open(path, "rb") as f:
                seen[path] = len(f.read(4096))
    except OSError as e:
        seen[path] = "error: " + e.strerror
print(json.dumps(seen))
"#;

#[test]
fn kernel_memory_keys_timers_and_firmware_are_hidden() {
    for tier in [Tier::ContainerRestricted, Tier::ProcessRestricted] {
        let Some(sandbox) = cage_of(tier) else { return };
        let ws = tempfile::tempdir().unwrap();
        let present: Vec<String> = bl_sandbox::HIDDEN
            .iter()
            .filter(|p| Path::new(p).exists())
            .map(|p| p.to_string())
            .collect();
        let (code, out, err) = caged_python(&sandbox, ws.path(), READ_HIDDEN, &present);
        assert_eq!(code, Some(0), "{out}{err}");
        let seen: serde_json::Value = serde_json::from_str(&out).unwrap();
        for (path, what) in seen.as_object().unwrap() {
            let hidden = what == &serde_json::json!(0)
                || what == &serde_json::json!([])
                || what.as_str().is_some_and(|s| s.starts_with("error"));
            assert!(hidden, "{}: {path} shows {what}", tier.name());
        }
        if tier == Tier::ContainerRestricted {
            let (_, out, _) = caged(&sandbox, ws.path(), "test -e /sys && echo SYS; true");
            assert!(!out.contains("SYS"), "/sys is mounted in the container");
        } else {
            assert_sys_is_read_only(&sandbox);
        }
    }
}

/// The process tier shows /sys, and every mount at or below it is
/// read-only, nosuid and nodev (run by root, masked before bubblewrap
/// starts; otherwise by bubblewrap's own read-only bind). Where mounts are
/// stacked on one place, the last one listed is the one on top: the one
/// a path reaches.
fn assert_sys_is_read_only(sandbox: &Sandbox) {
    let ws = tempfile::tempdir().unwrap();
    let (code, out, err) = caged(
        sandbox,
        ws.path(),
        r#"awk '$5 == "/sys" || index($5, "/sys/") == 1 { print $5, $6 }' /proc/self/mountinfo"#,
    );
    assert_eq!(code, Some(0), "{err}");
    let mut on_top = std::collections::BTreeMap::new();
    for line in out.lines() {
        let (place, options) = line.split_once(' ').unwrap();
        on_top.insert(place, options);
    }
    assert!(on_top.contains_key("/sys"), "no /sys: {out}");
    for (place, options) in on_top {
        let options: Vec<&str> = options.split(',').collect();
        for flag in ["ro", "nosuid", "nodev"] {
            assert!(
                options.contains(&flag),
                "{place} is not {flag}: {options:?}"
            );
        }
    }
}

const SYSCALLS: &str = r#"
import ctypes, json, os, sys, threading, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = json.loads(sys.argv[1])
out = {}
for name, (nr, args) in calls.items():
    cargs = []
    for a in args:
        if isinstance(a, int):
            cargs.append(ctypes.c_long(a))
        elif a.startswith("fd:"):
            cargs.append(ctypes.c_long(os.open(a[3:], os.O_RDONLY)))
        else:
            cargs.append(ctypes.c_char_p(a.encode()))
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *cargs)
    errno = ctypes.get_errno()
    if name.startswith("clone") and r == 0:
        os._exit(0)
    if name.startswith("clone") and r > 0:
        os.waitpid(r, 0)
    out[name] = [r, errno]
# What an agent does need still works: threads (clone3 falls back to
# clone), processes, ordinary files.
t = threading.Thread(target=lambda: None); t.start(); t.join()
out["subprocess"] = subprocess.run(["true"]).returncode
print(json.dumps(out))
"#;

/// Each refused call with its arguments (harmless ones: had the cage
/// failed, none would change the host) and the errno the filter gives.
fn refused_calls(ws: &Path) -> Vec<(&'static str, i64, serde_json::Value, i32)> {
    use serde_json::json;
    let dir = ws.join("mnt").display().to_string();
    let eperm = libc::EPERM;
    let clone_flags = |ns: i64| ns | libc::SIGCHLD as i64;
    let mut calls = vec![
        ("keyctl", libc::SYS_keyctl, json!([1, "bl-test"]), eperm),
        (
            "add_key",
            libc::SYS_add_key,
            json!(["user", "bl-test", "x", 1, -2]),
            eperm,
        ),
        (
            "request_key",
            libc::SYS_request_key,
            json!(["user", "bl-test", 0, 0]),
            eperm,
        ),
        (
            "mount",
            libc::SYS_mount,
            json!(["none", dir, "tmpfs", 0, 0]),
            eperm,
        ),
        ("umount2", libc::SYS_umount2, json!([dir, 0]), eperm),
        (
            "setns",
            libc::SYS_setns,
            json!(["fd:/proc/self/ns/net", 0]),
            eperm,
        ),
        (
            "unshare(user)",
            libc::SYS_unshare,
            json!([libc::CLONE_NEWUSER]),
            eperm,
        ),
        (
            "unshare(files)",
            libc::SYS_unshare,
            json!([libc::CLONE_FILES]),
            eperm,
        ),
        (
            "clone(user)",
            libc::SYS_clone,
            json!([clone_flags(libc::CLONE_NEWUSER as i64), 0, 0, 0, 0]),
            eperm,
        ),
        (
            "clone(net)",
            libc::SYS_clone,
            json!([clone_flags(libc::CLONE_NEWNET as i64), 0, 0, 0, 0]),
            eperm,
        ),
        ("clone3", libc::SYS_clone3, json!([0, 0]), libc::ENOSYS),
        ("bpf", libc::SYS_bpf, json!([0, 0, 0]), eperm),
        (
            "perf_event_open",
            libc::SYS_perf_event_open,
            json!([0, 0, -1, -1, 0]),
            eperm,
        ),
        ("userfaultfd", libc::SYS_userfaultfd, json!([0]), eperm),
        (
            "open_by_handle_at",
            libc::SYS_open_by_handle_at,
            json!([-100, 0, 0]),
            eperm,
        ),
        (
            "name_to_handle_at",
            libc::SYS_name_to_handle_at,
            json!([-100, "/etc/hostname", 0, 0, 0]),
            eperm,
        ),
        ("pivot_root", libc::SYS_pivot_root, json!([dir, dir]), eperm),
        ("chroot", libc::SYS_chroot, json!([dir]), eperm),
        (
            "swapon",
            libc::SYS_swapon,
            json!(["/nonexistent/bl-swap", 0]),
            eperm,
        ),
        (
            "init_module",
            libc::SYS_init_module,
            json!([0, 0, ""]),
            eperm,
        ),
        (
            "finit_module",
            libc::SYS_finit_module,
            json!([-1, "", 0]),
            eperm,
        ),
        (
            "delete_module",
            libc::SYS_delete_module,
            json!(["bl_no_such_module", 0]),
            eperm,
        ),
        (
            "kexec_load",
            libc::SYS_kexec_load,
            // Flags the kernel rejects: without the filter this is EINVAL,
            // never the unload of a loaded image.
            json!([0, 0, 0, 0x100]),
            eperm,
        ),
        (
            "acct",
            libc::SYS_acct,
            json!(["/nonexistent/bl-acct"]),
            eperm,
        ),
        ("settimeofday", libc::SYS_settimeofday, json!([0, 0]), eperm),
        (
            "clock_settime",
            libc::SYS_clock_settime,
            json!([0, 0]),
            eperm,
        ),
        ("ptrace", libc::SYS_ptrace, json!([16, 1, 0, 0]), eperm),
        (
            "personality",
            libc::SYS_personality,
            json!([0x0040000]),
            eperm,
        ),
        ("socket(vsock)", libc::SYS_socket, json!([40, 1, 0]), eperm),
        (
            "io_uring_setup",
            libc::SYS_io_uring_setup,
            json!([1, 0]),
            eperm,
        ),
        (
            "fchmodat(setuid)",
            libc::SYS_fchmodat,
            json!([-100, dir, 0o4755, 0]),
            eperm,
        ),
        (
            "openat(setuid)",
            libc::SYS_openat,
            json!([
                -100,
                format!("{dir}-suid"),
                libc::O_CREAT | libc::O_WRONLY,
                0o4755
            ]),
            eperm,
        ),
        (
            "openat2",
            libc::SYS_openat2,
            json!([-100, "/", 0, 24]),
            libc::ENOSYS,
        ),
        // Newer than the table (file_getattr on Linux 6.17+): ENOSYS, as
        // Docker's allow list refuses what it does not know.
        (
            "syscall 468",
            468,
            json!([-100, "/", 0, 0, 0]),
            libc::ENOSYS,
        ),
    ];
    // The x32 ABI: the same calls with bit 30 set in the number.
    if cfg!(target_arch = "x86_64") {
        calls.push((
            "keyctl(x32)",
            libc::SYS_keyctl | 0x4000_0000,
            json!([1, "bl-test"]),
            eperm,
        ));
        calls.push((
            "getpid(x32)",
            libc::SYS_getpid | 0x4000_0000,
            json!([]),
            eperm,
        ));
    }
    calls
}

fn assert_kernel_facing_calls_are_refused(sandbox: &Sandbox) {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("mnt")).unwrap();
    let calls = refused_calls(ws.path());
    let table: serde_json::Map<String, serde_json::Value> = calls
        .iter()
        .map(|(name, nr, args, _)| (name.to_string(), serde_json::json!([nr, args])))
        .collect();
    let (code, out, err) = caged_python(
        sandbox,
        ws.path(),
        SYSCALLS,
        &[serde_json::Value::Object(table).to_string()],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let seen: serde_json::Value = serde_json::from_str(&out).unwrap();
    for (name, _, _, errno) in calls {
        assert_eq!(
            seen[name],
            serde_json::json!([-1, errno]),
            "{}: {name} was not refused with errno {errno}",
            sandbox.tier().name()
        );
    }
    assert_eq!(seen["subprocess"], 0, "ordinary processes must still run");
}

#[test]
fn keyrings_mounts_namespaces_bpf_perf_and_userfaultfd_are_refused() {
    for tier in [Tier::ContainerRestricted, Tier::ProcessRestricted] {
        let Some(sandbox) = cage_of(tier) else { return };
        assert_kernel_facing_calls_are_refused(&sandbox);
    }
}

/// A 32-bit x86 syscall (`int 0x80`, getpid there) from a 64-bit python.
const I386_GETPID: &str = r#"
import ctypes, mmap, os
code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])  # mov eax, 20; int 0x80; ret
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
print("pid" if call() == os.getpid() else "another answer", flush=True)
"#;

#[cfg(target_arch = "x86_64")]
#[test]
fn a_call_through_the_32_bit_abi_kills_the_process() {
    // Uncaged first: a kernel without ia32 emulation makes no such call.
    let uncaged = std::process::Command::new("/usr/bin/python3")
        .args(["-c", I386_GETPID])
        .output()
        .unwrap();
    if String::from_utf8_lossy(&uncaged.stdout).trim() != "pid" {
        eprintln!(
            "SKIPPED: this kernel does not run 32-bit x86 syscalls ({})",
            uncaged.status
        );
        return;
    }
    for tier in [Tier::ContainerRestricted, Tier::ProcessRestricted] {
        let Some(sandbox) = cage_of(tier) else { return };
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("i386.py"), I386_GETPID).unwrap();
        let (code, out, err) = caged(
            &sandbox,
            ws.path(),
            "/usr/bin/python3 i386.py; echo status=$?",
        );
        assert_eq!(code, Some(0), "{out}{err}");
        assert_eq!(
            out.trim(),
            format!("status={}", 128 + libc::SIGSYS),
            "{}: the call was not killed: {err}",
            tier.name()
        );
    }
}

const WAIT_FOR_GO: &str = r#"
import os, sys, time
deadline = time.time() + 15
while not os.path.exists("go") and time.time() < deadline:
    time.sleep(0.01)
"#;

/// Runs a waiting process in `sandbox`, reads it from the host (outside
/// the cage), then lets it go.
fn seen_from_outside(sandbox: &Sandbox) -> HostView {
    let ws = tempfile::tempdir().unwrap();
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let marker = format!("bl-adversarial-{}-{call}", std::process::id());
    std::thread::scope(|scope| {
        let run = scope.spawn(|| {
            caged_python(
                sandbox,
                ws.path(),
                WAIT_FOR_GO,
                std::slice::from_ref(&marker),
            )
        });
        let pid = wait_for_process("/usr/bin/python3", &marker, Duration::from_secs(10))
            .expect("the caged process is visible from the host");
        let view = HostView::read(pid).unwrap();
        std::fs::write(ws.path().join("go"), b"").unwrap();
        let (code, out, err) = run.join().unwrap();
        assert_eq!(code, Some(0), "{out}{err}");
        view
    })
}

fn assert_not_host_root_from_outside(sandbox: &Sandbox) {
    let view = seen_from_outside(sandbox);
    let expected = match sandbox.caged_user() {
        Some(user) => user.uid,
        None => nix::unistd::getuid().as_raw(),
    };
    assert!(
        !view.is_host_root(),
        "the caged process is host root: {view:?}"
    );
    assert_eq!(view.uids, [expected; 4], "{view:?}");
    if let Some(user) = sandbox.caged_user() {
        assert!(view.is_only(user.uid, user.gid, &[]), "{view:?}");
    }
    for path in bl_sandbox::HIDDEN {
        let visible = !path.starts_with("/sys/") || sandbox.tier() == Tier::ProcessRestricted;
        if visible && Path::new(path).exists() {
            assert_eq!(
                view.mount_of(path).map(|m| m.point.as_str()),
                Some(*path),
                "{path} is not masked"
            );
        }
    }
    assert_eq!(view.cap_eff, 0, "capabilities: {view:?}");
    assert_eq!(
        view.cap_bnd, 0,
        "a capability an exec could regain: {view:?}"
    );
    assert_eq!(view.seccomp_mode, 2, "no seccomp filter: {view:?}");
    assert!(view.no_new_privs);
    for path in bl_sandbox::READ_ONLY_PROC {
        if Path::new(path).exists() {
            assert!(
                view.read_only(path),
                "{path} is writable: {:?}",
                view.mount_of(path)
            );
        }
    }
}

#[test]
fn the_caged_process_is_not_host_root_as_seen_from_outside() {
    for tier in [Tier::ContainerRestricted, Tier::ProcessRestricted] {
        let Some(sandbox) = cage_of(tier) else { return };
        assert_not_host_root_from_outside(&sandbox);
        if is_root() {
            let other = sandbox.with_caged_user(CagedUser {
                uid: 4242,
                gid: 4343,
                idmap: true,
            });
            let view = seen_from_outside(&other);
            assert_eq!((view.uids, view.gids), ([4242; 4], [4343; 4]));
        }
    }
}

/// The ways a workspace can be lent to the caged user on this machine.
fn lendings() -> Vec<CagedUser> {
    if is_root() {
        vec![
            CagedUser::NOBODY,
            CagedUser {
                idmap: false,
                ..CagedUser::NOBODY
            },
        ]
    } else {
        vec![CagedUser::NOBODY]
    }
}

fn assert_workspace_writes_land_owned_as_before(tier: Tier, user: CagedUser) {
    let Some(sandbox) = cage_of(tier) else { return };
    let sandbox = sandbox.with_caged_user(user);
    let ws = tempfile::tempdir().unwrap();
    let me = (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    );
    std::fs::write(ws.path().join("existing.txt"), "old\n").unwrap();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    std::fs::write(ws.path().join("sub/old.txt"), "old\n").unwrap();
    let (code, out, err) = caged(
        &sandbox,
        ws.path(),
        "echo more >> existing.txt && echo new > new.txt && mkdir -p newdir/deeper && echo x > newdir/deeper/f \
         && echo y > sub/old.txt && ln -s existing.txt link && echo ok",
    );
    assert_eq!(
        (code, out.trim()),
        (Some(0), "ok"),
        "{} with {user:?}: {err}",
        tier.name()
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("existing.txt")).unwrap(),
        "old\nmore\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("newdir/deeper/f")).unwrap(),
        "x\n"
    );
    for entry in [
        "",
        "existing.txt",
        "new.txt",
        "newdir",
        "newdir/deeper",
        "newdir/deeper/f",
        "sub",
        "sub/old.txt",
        "link",
    ] {
        let meta = std::fs::symlink_metadata(ws.path().join(entry)).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            me,
            "{} with {user:?}: {entry:?} is owned by someone else",
            tier.name()
        );
    }
}

#[test]
fn a_workspace_write_lands_and_is_owned_as_before() {
    for user in lendings() {
        for tier in [Tier::ContainerRestricted, Tier::ProcessRestricted] {
            assert_workspace_writes_land_owned_as_before(tier, user);
        }
    }
}

#[test]
fn a_lent_workspace_keeps_hard_links_and_set_id_files_out_of_reach() {
    if !is_root() {
        return; // only root lends (an ordinary user's cage is that user)
    }
    // Under both lendings: by chown such files are not lent; through the
    // idmapped mount each gets a read-only mount of itself.
    for user in lendings() {
        for tier in [Tier::ContainerRestricted, Tier::ProcessRestricted] {
            let Some(sandbox) = cage_of(tier) else { return };
            let sandbox = sandbox.with_caged_user(user);
            let ws = tempfile::tempdir().unwrap();
            std::fs::create_dir(ws.path().join("sub")).unwrap();
            let elsewhere = tempfile::tempdir_in(ws.path().parent().unwrap()).unwrap();
            std::fs::write(elsewhere.path().join("shared"), "host\n").unwrap();
            std::fs::hard_link(
                elsewhere.path().join("shared"),
                ws.path().join("sub/linked"),
            )
            .unwrap();
            std::fs::write(ws.path().join("setuid"), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(
                ws.path().join("setuid"),
                std::os::unix::fs::PermissionsExt::from_mode(0o4755),
            )
            .unwrap();
            let (code, out, err) = caged(
                &sandbox,
                ws.path(),
                "echo changed > sub/linked && echo LINK-WRITTEN; echo x >> setuid && echo SETUID-WRITTEN; \
                 echo fine > other && echo ok",
            );
            let what = format!("{} with {user:?}: {out}{err}", tier.name());
            assert_eq!(code, Some(0), "{what}");
            assert!(!out.contains("WRITTEN") && out.contains("ok"), "{what}");
            assert_eq!(
                std::fs::read_to_string(elsewhere.path().join("shared")).unwrap(),
                "host\n",
                "{what}"
            );
            let meta = std::fs::metadata(ws.path().join("setuid")).unwrap();
            assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o4755), "{what}");
            assert_eq!(
                std::fs::read_to_string(ws.path().join("setuid")).unwrap(),
                "#!/bin/sh\n"
            );
        }
    }
}

/// Run as root, the test binary runs this again as an ordinary user.
#[test]
#[ignore = "run by as_an_ordinary_user_too"]
fn the_denials_as_an_ordinary_user() {
    assert!(!is_root(), "this test is for an ordinary user");
    for tier in [Tier::ContainerRestricted, Tier::ProcessRestricted] {
        let Some(sandbox) = cage_of(tier) else { return };
        assert_proc_sys_is_read_only(&sandbox);
        if tier == Tier::ProcessRestricted {
            assert_sys_is_read_only(&sandbox);
        }
        assert_kernel_facing_calls_are_refused(&sandbox);
        assert_not_host_root_from_outside(&sandbox);
        assert_workspace_writes_land_owned_as_before(tier, CagedUser::NOBODY);
    }
}

#[test]
fn as_an_ordinary_user_too() {
    if !is_root() || bwrap_absent() {
        return; // an ordinary user runs the denials directly
    }
    // A copy of this test binary that the ordinary user can read, run as
    // that user with nothing of root's around it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let copy = dir.path().join("adversarial");
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    let mut command = std::process::Command::new(&copy);
    command
        .args([
            "--ignored",
            "--exact",
            "the_denials_as_an_ordinary_user",
            "--nocapture",
        ])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/tmp")
        .env("TMPDIR", "/tmp")
        .current_dir("/tmp");
    if let Ok(ci) = std::env::var("CI") {
        command.env("CI", ci);
    }
    use std::os::unix::process::CommandExt;
    command.uid(4040).gid(4040);
    // Another test thread that forks while the copy's write handle is open
    // keeps it open until its child execs; exec then fails with "text file
    // busy" for a moment. Wait that moment out.
    let mut tries = 0;
    let out = loop {
        match command.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other.unwrap(),
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "as uid 4040:\n{text}");
    assert!(text.contains("1 passed"), "{text}");
}

#[test]
fn a_device_node_in_the_workspace_opens_nothing() {
    // Only root can make one; through the idmapped mount it even looks
    // like the caged user's own.
    if !is_root() {
        return;
    }
    for tier in [Tier::ContainerRestricted, Tier::ProcessRestricted] {
        let Some(sandbox) = cage_of(tier) else { return };
        let ws = tempfile::tempdir().unwrap();
        let node = std::ffi::CString::new(ws.path().join("null").as_os_str().as_bytes()).unwrap();
        // SAFETY: mknod of a character device (1:3, /dev/null) in a
        // directory this test owns.
        let made = unsafe {
            nix::libc::mknod(
                node.as_ptr(),
                nix::libc::S_IFCHR | 0o666,
                nix::libc::makedev(1, 3),
            )
        };
        assert_eq!(made, 0, "{}", std::io::Error::last_os_error());
        let (_, out, _) = caged_python(
            &sandbox,
            ws.path(),
            r#"
for mode in ("rb", "wb"):
    try:
        open("null", mode).close()
        print(mode, "OPENED")
    except OSError as e:
        print(mode, "refused", e.strerror)
"#,
            &[],
        );
        assert!(!out.contains("OPENED"), "{}: {out}", tier.name());
        assert_eq!(out.matches("refused").count(), 2, "{}: {out}", tier.name());
    }
}

#[test]
fn no_set_id_file_can_be_made_in_the_workspace() {
    for user in lendings() {
        for tier in [Tier::ContainerRestricted, Tier::ProcessRestricted] {
            let Some(sandbox) = cage_of(tier) else { return };
            let sandbox = sandbox.with_caged_user(user);
            let ws = tempfile::tempdir().unwrap();
            let (_, out, _) = caged_python(
                &sandbox,
                ws.path(),
                r#"
import os
for name, make in (
    ("setuid", lambda: (open("a", "w").close(), os.chmod("a", 0o4755))),
    ("setgid", lambda: (open("b", "w").close(), os.chmod("b", 0o2755))),
    ("create", lambda: os.close(os.open("c", os.O_CREAT | os.O_WRONLY, 0o4755))),
):
    try:
        make()
        print(name, "MADE")
    except OSError as e:
        print(name, "refused", e.strerror)
"#,
                &[],
            );
            assert!(
                !out.contains("MADE"),
                "{} with {user:?}: {out}",
                tier.name()
            );
            assert_eq!(out.matches("refused").count(), 3, "{out}");
            for entry in std::fs::read_dir(ws.path()).unwrap() {
                let meta = entry.unwrap().metadata().unwrap();
                assert_eq!(meta.mode() & 0o6000, 0, "{} with {user:?}", tier.name());
            }
        }
    }
}

#[test]
fn the_cages_mounts_never_reach_the_host() {
    let Some(sandbox) = cage() else { return };
    let ws = tempfile::tempdir().unwrap();
    let (code, _, err) = caged(&sandbox, ws.path(), "true");
    assert_eq!(code, Some(0), "{err}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains("bl-cage-"), "{mounts}");
    assert!(!mounts.contains(ws.path().to_str().unwrap()), "{mounts}");
}

/// The filter, loaded into a throwaway root child with a private mount
/// namespace, against the same child without it: each call succeeds
/// without the filter and is refused with it, so the table itself is
/// proven, not a lack of privilege. Only root can make the calls succeed,
/// so only root can run it.
#[test]
fn the_filter_itself_refuses_what_root_could_otherwise_do() {
    if !is_root() {
        eprintln!("not root: the filter's own effect is shown by the root run of this suite");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("mnt");
    std::fs::create_dir(&target).unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let without = filter_trial(None, &target, &file);
    let programs = vec![bl_sandbox::seccomp::program().unwrap()];
    let with = filter_trial(Some(&programs), &target, &file);
    let mut unproven = Vec::new();
    for ((name, expected), (control, filtered)) in TRIAL_CALLS.iter().zip(without.iter().zip(&with))
    {
        assert_eq!(filtered, expected, "{name} under the filter");
        if control == expected {
            unproven.push(*name);
        }
    }
    eprintln!("calls this kernel refuses even without the filter: {unproven:?}");
    assert!(
        unproven.len() <= 2,
        "too few calls succeed without the filter to prove it: {unproven:?} (without: {without:?})"
    );
}

/// The calls of `filter_trial`, with the errno the filter must give.
const TRIAL_CALLS: &[(&str, i32)] = &[
    ("keyctl", libc::EPERM),
    ("mount", libc::EPERM),
    ("umount2", libc::EPERM),
    ("setns", libc::EPERM),
    ("unshare", libc::EPERM),
    ("clone(user)", libc::EPERM),
    ("clone3", libc::ENOSYS),
    ("bpf", libc::EPERM),
    ("perf_event_open", libc::EPERM),
    ("userfaultfd", libc::EPERM),
    ("name_to_handle_at", libc::EPERM),
    ("chmod(setuid)", libc::EPERM),
    ("personality", libc::EPERM),
    ("getpid(x32)", libc::EPERM),
];

/// Forks a root child that enters a private mount namespace, loads
/// `programs` (if any) and makes each call of `TRIAL_CALLS`; returns the
/// errno of each (0: it succeeded). Everything the child touches is
/// allocated before the fork, and nothing it does outlives it.
fn filter_trial(programs: Option<&Vec<Vec<u8>>>, target: &Path, file: &Path) -> Vec<i32> {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    let filters: Vec<Vec<libc::sock_filter>> = programs
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    p.chunks_exact(8)
                        .map(|c| libc::sock_filter {
                            code: u16::from_ne_bytes([c[0], c[1]]),
                            jt: c[2],
                            jf: c[3],
                            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
                        })
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default();
    let fprogs: Vec<libc::sock_fprog> = filters
        .iter()
        .map(|f| libc::sock_fprog {
            len: f.len() as u16,
            filter: f.as_ptr() as *mut libc::sock_filter,
        })
        .collect();
    let target = CString::new(target.to_str().unwrap()).unwrap();
    let file = CString::new(file.to_str().unwrap()).unwrap();
    let netns = std::fs::File::open("/proc/self/ns/net").unwrap();
    let mut bpf_attr = [0u8; 128];
    bpf_attr[0..4].copy_from_slice(&2u32.to_ne_bytes()); // BPF_MAP_TYPE_ARRAY
    bpf_attr[4..8].copy_from_slice(&4u32.to_ne_bytes()); // key size
    bpf_attr[8..12].copy_from_slice(&4u32.to_ne_bytes()); // value size
    bpf_attr[12..16].copy_from_slice(&1u32.to_ne_bytes()); // entries
    let mut perf_attr = [0u8; 64];
    perf_attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // PERF_TYPE_SOFTWARE
    perf_attr[4..8].copy_from_slice(&64u32.to_ne_bytes()); // PERF_ATTR_SIZE_VER0
    perf_attr[8..16].copy_from_slice(&9u64.to_ne_bytes()); // PERF_COUNT_SW_DUMMY
    let mut handle = [0u8; 8 + 128];
    handle[0..4].copy_from_slice(&128u32.to_ne_bytes());
    let mut mount_id: libc::c_int = 0;
    let mut results = [0i32; TRIAL_CALLS.len()];
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    // SAFETY: the child makes only system calls on memory allocated above,
    // writes its results to the pipe and exits.
    match unsafe { nix::unistd::fork() }.unwrap() {
        // SAFETY: system calls on memory and descriptors allocated above.
        nix::unistd::ForkResult::Child => unsafe {
            let errno = |rc: libc::c_long| {
                if rc < 0 { *libc::__errno_location() } else { 0 }
            };
            libc::close(read_end.as_raw_fd());
            // Nothing below may touch the host's mounts: without a private
            // namespace, stop here.
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
            {
                libc::_exit(4);
            }
            if !fprogs.is_empty() {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                for prog in &fprogs {
                    let rc = libc::syscall(
                        libc::SYS_seccomp,
                        1, // SECCOMP_SET_MODE_FILTER
                        0,
                        prog as *const libc::sock_fprog,
                    );
                    if rc != 0 {
                        libc::_exit(3);
                    }
                }
            }
            results[0] = errno(libc::syscall(libc::SYS_keyctl, 1, std::ptr::null::<u8>()));
            results[1] = errno(libc::mount(
                c"none".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            ) as libc::c_long);
            results[2] = errno(libc::umount2(target.as_ptr(), 0) as libc::c_long);
            results[3] = errno(libc::setns(netns.as_raw_fd(), 0) as libc::c_long);
            results[4] = errno(libc::unshare(libc::CLONE_NEWUTS) as libc::c_long);
            let pid = libc::syscall(
                libc::SYS_clone,
                (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_long,
                0,
                0,
                0,
                0,
            );
            if pid == 0 {
                libc::_exit(0);
            }
            if pid > 0 {
                libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0);
            }
            results[5] = errno(pid);
            results[6] = errno(libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0));
            results[7] = errno(libc::syscall(libc::SYS_bpf, 0, bpf_attr.as_ptr(), 128));
            results[8] = errno(libc::syscall(
                libc::SYS_perf_event_open,
                perf_attr.as_ptr(),
                0,
                -1,
                -1,
                0,
            ));
            results[9] = errno(libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC));
            results[10] = errno(libc::syscall(
                libc::SYS_name_to_handle_at,
                libc::AT_FDCWD,
                c"/".as_ptr(),
                handle.as_mut_ptr(),
                &mut mount_id as *mut libc::c_int,
                0,
            ));
            results[11] = errno(libc::chmod(file.as_ptr(), 0o4755) as libc::c_long);
            results[12] = errno(libc::syscall(libc::SYS_personality, 0x0040000));
            results[13] = if cfg!(target_arch = "x86_64") {
                errno(libc::syscall(libc::SYS_getpid | 0x4000_0000))
            } else {
                libc::EPERM
            };
            libc::write(
                write_end.as_raw_fd(),
                results.as_ptr().cast(),
                std::mem::size_of_val(&results),
            );
            libc::_exit(0);
        },
        nix::unistd::ForkResult::Parent { child } => {
            drop(write_end);
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::fs::File::from(read_end), &mut bytes).unwrap();
            let status = nix::sys::wait::waitpid(child, None).unwrap();
            assert_eq!(
                status,
                nix::sys::wait::WaitStatus::Exited(child, 0),
                "the trial child failed"
            );
            bytes
                .chunks_exact(4)
                .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        }
    }
}
