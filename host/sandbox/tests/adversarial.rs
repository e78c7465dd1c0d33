//! Escape attempts against the container_restricted tier, with real
//! bubblewrap and real processes. Every one must be denied by the OS; a
//! write inside the workspace must persist. On a machine where bwrap cannot
//! run at all these tests say so loudly and skip.

use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::time::Duration;

use bl_core::{CommandError, CommandRunner, CommandSpec};
use bl_sandbox::{Sandbox, Tier};

fn spec(ws: &Path, script: &str) -> CommandSpec {
    CommandSpec {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        workspace: ws.to_path_buf(),
        workspace_writable: true,
        stdin: Vec::new(),
        timeout: Duration::from_secs(20),
        output_cap: 64 << 10,
    }
}

/// The cage, or `None` (after saying why) when this machine cannot run bwrap.
fn cage() -> Option<Sandbox> {
    let sandbox = Sandbox::new(Tier::ContainerRestricted);
    let ws = tempfile::tempdir().unwrap();
    match sandbox.run(&spec(ws.path(), "true")) {
        Ok(r) if r.exit_code == Some(0) => Some(sandbox),
        other => {
            eprintln!(
                "SKIPPED: bubblewrap cannot run on this machine ({other:?}); the sandbox tests did not run"
            );
            None
        }
    }
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
    assert_eq!((code, out.trim()), (Some(0), "done"), "{err}");
    for denied in ["/etc/bl-escape", "/var/tmp/bl-escape", "/usr/bl-escape"] {
        assert!(!Path::new(denied).exists(), "{denied} was written");
    }
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
