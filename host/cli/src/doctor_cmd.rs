//! `bl doctor`: what this machine can and cannot do, each problem with its fix.

use std::path::Path;
use std::time::Duration;

use bl_core::{CommandRunner, CommandSpec};
use bl_sandbox::{Sandbox, Tier};
use serde_json::json;

use crate::paths;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Ok,
    Warn,
    Fail,
}

struct Finding {
    name: &'static str,
    level: Level,
    detail: String,
    fix: Option<String>,
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

fn bwrap_check() -> Finding {
    let ws = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            return Finding {
                name: "bubblewrap",
                level: Level::Fail,
                detail: e.to_string(),
                fix: None,
            };
        }
    };
    let spec = CommandSpec {
        argv: vec!["true".into()],
        workspace: ws.path().to_path_buf(),
        workspace_writable: true,
        stdin: Vec::new(),
        timeout: Duration::from_secs(10),
        output_cap: 4096,
    };
    match Sandbox::new(Tier::ContainerRestricted).run(&spec) {
        Ok(r) if r.exit_code == Some(0) => Finding {
            name: "bubblewrap",
            level: Level::Ok,
            detail: format!(
                "container_restricted runs (user, pid, net, ipc, uts and mount namespaces, seccomp); {}",
                namespace_facts()
            ),
            fix: None,
        },
        Ok(r) => {
            let stderr = String::from_utf8_lossy(&r.stderr_tail).trim().to_string();
            let fix = if stderr.contains("setting up uid map")
                || stderr.contains("Operation not permitted")
                || stderr.contains("No permissions")
            {
                "unprivileged user namespaces are off or restricted: `sysctl -w kernel.unprivileged_userns_clone=1`, \
                 or on Ubuntu 24.04+ `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (or an AppArmor profile for bwrap); \
                 inside a container, run it with `--privileged` or a seccomp profile that allows unshare"
            } else {
                "run `bl sandbox run --isolation container_restricted --workspace . -- true` to see bwrap's own error"
            };
            Finding {
                name: "bubblewrap",
                level: Level::Fail,
                detail: format!("bwrap failed: {stderr} ({})", namespace_facts()),
                fix: Some(fix.into()),
            }
        }
        Err(e) => Finding {
            name: "bubblewrap",
            level: Level::Fail,
            detail: e.to_string(),
            fix: Some(
                "install bubblewrap (`apt-get install bubblewrap`, or `scripts/dev setup`)".into(),
            ),
        },
    }
}

fn seccomp_check() -> Finding {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    match status.lines().find(|l| l.starts_with("Seccomp:")) {
        Some(_) => Finding {
            name: "seccomp",
            level: Level::Ok,
            detail: "the kernel supports seccomp filters".into(),
            fix: None,
        },
        None => Finding {
            name: "seccomp",
            level: Level::Fail,
            detail: "no seccomp support in this kernel".into(),
            fix: Some("use a kernel built with CONFIG_SECCOMP_FILTER".into()),
        },
    }
}

fn landlock_check() -> Finding {
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
        Finding {
            name: "landlock",
            level: Level::Ok,
            detail: format!("Landlock ABI {abi}"),
            fix: None,
        }
    } else {
        Finding {
            name: "landlock",
            level: Level::Warn,
            detail: format!(
                "Landlock is unavailable ({})",
                std::io::Error::last_os_error()
            ),
            fix: Some(
                "boot with `lsm=landlock,…` on Linux 5.13+ (bl's cage does not need it today)"
                    .into(),
            ),
        }
    }
}

fn toolchain_check() -> Finding {
    match bl_pluginbuild::WasmToolchain::detect() {
        Ok(t) => Finding {
            name: "wasm toolchain",
            level: Level::Ok,
            detail: format!("{} can build plugins", t.name()),
            fix: None,
        },
        Err(e) => Finding {
            name: "wasm toolchain",
            level: Level::Warn,
            detail: e.to_string(),
            fix: Some(
                "run `scripts/dev setup`; only building plugins needs it, running them does not"
                    .into(),
            ),
        },
    }
}

fn cache_check() -> Finding {
    let Some(dir) = paths::component_cache_dir() else {
        return Finding {
            name: "cache",
            level: Level::Warn,
            detail: "no cache directory (no HOME, XDG_CACHE_HOME or BL_CACHE_DIR)".into(),
            fix: Some("set BL_CACHE_DIR; without it every run compiles its plugins".into()),
        };
    };
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    let writable = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(&probe, b"ok"))
        .is_ok();
    let _ = std::fs::remove_file(&probe);
    if writable {
        Finding {
            name: "cache",
            level: Level::Ok,
            detail: format!("{} is writable", dir.display()),
            fix: None,
        }
    } else {
        Finding {
            name: "cache",
            level: Level::Warn,
            detail: format!("{} is not writable", dir.display()),
            fix: Some(format!(
                "fix the permissions of {} or set BL_CACHE_DIR",
                display_parent(&dir)
            )),
        }
    }
}

fn display_parent(p: &Path) -> String {
    p.parent().unwrap_or(p).display().to_string()
}

pub fn doctor(as_json: bool) -> u8 {
    let findings = [
        bwrap_check(),
        seccomp_check(),
        landlock_check(),
        toolchain_check(),
        cache_check(),
    ];
    let failed = findings.iter().any(|f| f.level == Level::Fail);
    let label = |l: Level| match l {
        Level::Ok => "ok",
        Level::Warn => "warn",
        Level::Fail => "fail",
    };
    if as_json {
        let list: Vec<_> = findings
            .iter()
            .map(|f| json!({"name": f.name, "status": label(f.level), "detail": f.detail, "fix": f.fix}))
            .collect();
        println!("{}", json!({"ok": !failed, "checks": list}));
    } else {
        for f in &findings {
            println!("{:<5} {:<15} {}", label(f.level), f.name, f.detail);
            if let Some(fix) = &f.fix {
                println!("      {:<15} fix: {fix}", "");
            }
        }
    }
    if failed { 1 } else { 0 }
}
