//! `bl doctor`: what this machine can and cannot do, each problem with its
//! fix. The sandbox and the plugin toolchain say what they can; this file
//! adds the cache and prints.

use crate::output::outln;
use std::path::Path;

use bl_core::health::{Check, Health};
use serde_json::json;

use bl_app::paths;

use crate::exit::{CliResult, Exit};

fn cache_check() -> Check {
    let Some(dir) = paths::component_cache_dir() else {
        return Check::warn(
            "cache",
            "no cache directory (no HOME, XDG_CACHE_HOME or BL_CACHE_DIR)",
            "set BL_CACHE_DIR; without it every run compiles its plugins",
        );
    };
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    let writable = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(&probe, b"ok"))
        .is_ok();
    let _ = std::fs::remove_file(&probe);
    if writable {
        Check::ok("cache", format!("{} is writable", dir.display()))
    } else {
        Check::warn(
            "cache",
            format!("{} is not writable", dir.display()),
            format!(
                "fix the permissions of {} or set BL_CACHE_DIR",
                display_parent(&dir)
            ),
        )
    }
}

fn display_parent(p: &Path) -> String {
    p.parent().unwrap_or(p).display().to_string()
}

pub fn doctor(as_json: bool) -> CliResult {
    let mut checks = match bl_sandbox::CagedUser::from_env(|name| std::env::var(name).ok()) {
        Ok(user) => bl_sandbox::doctor::checks(user),
        Err(e) => vec![Check::fail(
            "cage identity",
            e.to_string(),
            Some("fix or unset the variable".into()),
        )],
    };
    checks.push(bl_pluginbuild::doctor_check());
    checks.push(bl_egress::posture::doctor_check(|name| {
        std::env::var(name).ok()
    }));
    checks.push(cache_check());
    let failed = checks.iter().any(|c| c.health == Health::Fail);
    let label = |h: Health| match h {
        Health::Ok => "ok",
        Health::Warn => "warn",
        Health::Fail => "fail",
    };
    if as_json {
        outln!("{}", json!({"ok": !failed, "checks": checks}));
    } else {
        for c in &checks {
            outln!("{:<5} {:<15} {}", label(c.health), c.name, c.detail);
            if let Some(fix) = &c.fix {
                outln!("      {:<15} fix: {fix}", "");
            }
        }
    }
    Ok(if failed { Exit::No } else { Exit::Success })
}
