//! What this machine's cage can do, for `bl doctor`: whether bubblewrap
//! runs, who a caged command is on the host and how its workspace is lent,
//! the /proc masks and the seccomp table, the probe's verdict, and the
//! kernel's seccomp and Landlock support. Each problem comes with its fix.

use std::path::Path;
use std::time::Duration;

use bl_core::health::Check;
use bl_core::{CommandRunner, CommandSpec};

use crate::caged_user::{CagedUser, Lending, lending_for};
use crate::{HIDDEN, READ_ONLY_PROC, Sandbox, Tier, seccomp};

/// Every check, with caged commands run as `user` when bl is root.
pub fn checks(user: CagedUser) -> Vec<Check> {
    let sandbox = Sandbox::new(Tier::ContainerRestricted).with_caged_user(user);
    let bwrap = bwrap_check(&sandbox);
    let mut checks = vec![bwrap.clone()];
    if bwrap.health == bl_core::health::Health::Ok {
        checks.push(identity_check(&sandbox));
        checks.push(probe_check(&sandbox));
    }
    checks.push(seccomp_check());
    checks.push(landlock_check());
    checks
}

/// What the kernel says about user namespaces and containers, for the
/// bubblewrap line.
fn namespace_facts() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let mut facts = Vec::new();
    if let Some(v) = read("/proc/sys/user/max_user_namespaces") {
        facts.push(format!("max_user_namespaces={v}"));
    }
    if let Some(v) = read("/proc/sys/kernel/unprivileged_userns_clone") {
        facts.push(format!("unprivileged_userns_clone={v}"));
    }
    if let Some(v) = read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
        facts.push(format!("apparmor_restrict_unprivileged_userns={v}"));
    }
    let in_container = Path::new("/.dockerenv").exists()
        || Path::new("/run/.containerenv").exists()
        || read("/proc/1/cgroup")
            .is_some_and(|c| c.contains("docker") || c.contains("kubepods") || c.contains("lxc"));
    if in_container {
        facts.push("inside a container".into());
    }
    facts.join(", ")
}

fn bwrap_check(sandbox: &Sandbox) -> Check {
    let ws = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return Check::fail("bubblewrap", e.to_string(), None),
    };
    let spec = CommandSpec {
        argv: vec!["true".into()],
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
    match sandbox.run(&spec) {
        Ok(r) if r.exit_code == Some(0) => Check::ok(
            "bubblewrap",
            format!(
                "container_restricted runs (user, pid, net, ipc, uts and mount namespaces, seccomp); {}",
                namespace_facts()
            ),
        ),
        Ok(r) => {
            let stderr = String::from_utf8_lossy(&r.stderr_tail).trim().to_string();
            let fix = if stderr.contains("setting up uid map")
                || stderr.contains("Operation not permitted")
                || stderr.contains("No permissions")
            {
                "unprivileged user namespaces are off or restricted (bl runs bwrap unprivileged, even as root): \
                 `sysctl -w kernel.unprivileged_userns_clone=1`, \
                 or on Ubuntu 24.04+ `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (or an AppArmor profile for bwrap); \
                 inside a container, run it with `--privileged` or a seccomp profile that allows unshare"
            } else {
                "run `bl sandbox run --isolation container_restricted --workspace . -- true` to see bwrap's own error"
            };
            Check::fail(
                "bubblewrap",
                format!("bwrap failed: {stderr} ({})", namespace_facts()),
                Some(fix.into()),
            )
        }
        Err(e) => Check::fail(
            "bubblewrap",
            e.to_string(),
            Some(
                "install bubblewrap (`apt-get install bubblewrap`, or `scripts/dev setup`)".into(),
            ),
        ),
    }
}

/// Who a caged command is, how its workspace is lent, what is masked, and
/// how many syscalls the filter refuses.
fn identity_check(sandbox: &Sandbox) -> Check {
    let masked = format!(
        "{} read-only and {} hidden /proc and /sys paths; seccomp refuses {} syscalls",
        READ_ONLY_PROC.len(),
        HIDDEN.len(),
        seccomp::table()
            .map(|r| r.name)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
    match sandbox.caged_user() {
        Some(user) => {
            let lending = tempfile::tempdir().map(|d| lending_for(d.path(), user));
            let who = format!(
                "bl runs as root; caged commands run as host uid {} gid {}, never root",
                user.uid, user.gid
            );
            match lending {
                Ok(Lending::Chown) if user.idmap => Check::warn(
                    "cage identity",
                    format!(
                        "{who}; but the temporary directory's file system has no idmapped mounts, so a workspace there \
                         is refused; {masked}"
                    ),
                    format!(
                        "keep workspaces on a file system with idmapped mounts (Linux 5.12+: ext4, xfs, btrfs; tmpfs from 6.3), \
                         or set {}=chown to lend them by chown",
                        crate::caged_user::OWNERSHIP_VAR
                    ),
                ),
                Ok(lending) => Check::ok(
                    "cage identity",
                    format!(
                        "{who}; workspaces are lent by {} (checked in the temporary directory); {masked}",
                        lending.describe()
                    ),
                ),
                Err(e) => Check::fail("cage identity", format!("{who}; {e}"), None),
            }
        }
        None => Check::ok(
            "cage identity",
            format!(
                "caged commands run as your own user (uid {}), mapped by bwrap; {masked}",
                nix::unistd::getuid()
            ),
        ),
    }
}

/// The probe, run for real: every denial proven from outside.
fn probe_check(sandbox: &Sandbox) -> Check {
    if !Path::new("/usr/bin/python3").is_file() {
        return Check::warn(
            "probe",
            "the sandbox probe needs /usr/bin/python3, which is missing",
            "install python3 to let bl doctor prove the cage",
        );
    }
    let out = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return Check::fail("probe", e.to_string(), None),
    };
    match crate::probe::run_probe(sandbox, sandbox.host_ids(), out.path()) {
        Ok(outcome) if outcome.passed => Check::ok(
            "probe",
            format!(
                "denied, as the host saw from outside: {}",
                outcome
                    .checks
                    .iter()
                    .skip(1)
                    .map(|(name, _, _)| name.trim_end_matches(" denied"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Ok(outcome) => Check::fail(
            "probe",
            outcome
                .checks
                .iter()
                .filter(|(_, ok, _)| !ok)
                .map(|(name, _, detail)| format!("{name}: {detail}"))
                .collect::<Vec<_>>()
                .join("; "),
            Some("run `bl sandbox probe` for the whole report".into()),
        ),
        Err(e) => Check::fail(
            "probe",
            e.to_string(),
            Some("run `bl sandbox probe` for the whole report".into()),
        ),
    }
}

fn seccomp_check() -> Check {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    match status.lines().find(|l| l.starts_with("Seccomp:")) {
        Some(_) => Check::ok("seccomp", "the kernel supports seccomp filters"),
        None => Check::fail(
            "seccomp",
            "no seccomp support in this kernel",
            Some("use a kernel built with CONFIG_SECCOMP_FILTER".into()),
        ),
    }
}

fn landlock_check() -> Check {
    // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) returns the ABI.
    // SAFETY: a query with a null attribute pointer and size 0 reads no memory.
    let abi = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    if abi > 0 {
        Check::ok("landlock", format!("Landlock ABI {abi}"))
    } else {
        Check::warn(
            "landlock",
            format!(
                "Landlock is unavailable ({})",
                std::io::Error::last_os_error()
            ),
            "boot with `lsm=landlock,…` on Linux 5.13+ (bl's cage does not need it today)",
        )
    }
}
