//! The macOS adapter: a Seatbelt (SBPL) profile generated per command and
//! run with `sandbox-exec -p`. The profile is plain text, so it is tested
//! here on every platform; only running it needs a Mac.
//!
//! `workspace_only` runs uncaged as on Linux; `process_restricted` denies
//! the network; `container_restricted` denies everything by default and then
//! allows reading the system, reading (and, when asked, writing) the
//! workspace, writing a private temp directory, and never writing the
//! protected paths.

use std::path::Path;

use crate::{PROTECTED, Tier};

/// Quotes a path as an SBPL string literal.
fn literal(path: &Path) -> String {
    let text = path.display().to_string();
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The profile for one command in `tier`, or `None` for tiers Seatbelt does
/// not cage (`workspace_only`, `customer_managed_worker`).
pub fn profile(tier: Tier, workspace: &Path, writable: bool, private_tmp: &Path) -> Option<String> {
    let ws = literal(workspace);
    let mut out = String::from("(version 1)\n");
    match tier {
        Tier::WorkspaceOnly | Tier::CustomerManagedWorker => return None,
        Tier::ProcessRestricted => {
            out.push_str("(allow default)\n(deny network*)\n");
        }
        Tier::ContainerRestricted => {
            out.push_str("(deny default)\n");
            out.push_str("(allow process-exec process-fork signal (target same-sandbox))\n");
            out.push_str("(allow sysctl-read mach-lookup ipc-posix-shm-read-data)\n");
            out.push_str(
                "(allow file-read* (subpath \"/usr\") (subpath \"/bin\") (subpath \"/sbin\") \
                 (subpath \"/System\") (subpath \"/Library\") (subpath \"/private/etc\") \
                 (subpath \"/dev\") (literal \"/\"))\n",
            );
            out.push_str(&format!("(allow file-read* (subpath {ws}))\n"));
            out.push_str(&format!(
                "(allow file-read* file-write* (subpath {}))\n",
                literal(private_tmp)
            ));
            out.push_str("(allow file-write* (literal \"/dev/null\"))\n");
            if writable {
                out.push_str(&format!("(allow file-write* (subpath {ws}))\n"));
            }
            for protected in PROTECTED {
                out.push_str(&format!(
                    "(deny file-write* (subpath {}))\n",
                    literal(&workspace.join(protected))
                ));
            }
            out.push_str("(deny network*)\n(deny process-info* (target others))\n");
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_profile_denies_by_default_and_scopes_writes() {
        let p = profile(
            Tier::ContainerRestricted,
            Path::new("/w/s"),
            true,
            Path::new("/t"),
        )
        .unwrap();
        assert!(p.starts_with("(version 1)\n(deny default)\n"), "{p}");
        assert!(p.contains("(allow file-write* (subpath \"/w/s\"))"));
        assert!(p.contains("(deny file-write* (subpath \"/w/s/.git\"))"));
        assert!(p.contains("(deny network*)"));
        // A deny after the allow wins in SBPL: .git comes after the workspace.
        assert!(
            p.find("(subpath \"/w/s/.git\")").unwrap()
                > p.find("(allow file-write* (subpath \"/w/s\"))").unwrap()
        );
        let read_only = profile(
            Tier::ContainerRestricted,
            Path::new("/w/s"),
            false,
            Path::new("/t"),
        )
        .unwrap();
        assert!(!read_only.contains("(allow file-write* (subpath \"/w/s\"))"));
    }

    #[test]
    fn tiers_and_quoting() {
        assert!(profile(Tier::WorkspaceOnly, Path::new("/w"), true, Path::new("/t")).is_none());
        let p = profile(
            Tier::ProcessRestricted,
            Path::new("/w"),
            true,
            Path::new("/t"),
        )
        .unwrap();
        assert_eq!(p, "(version 1)\n(allow default)\n(deny network*)\n");
        let odd = profile(
            Tier::ContainerRestricted,
            Path::new("/w/a\"b\\c"),
            true,
            Path::new("/t"),
        )
        .unwrap();
        assert!(odd.contains("(subpath \"/w/a\\\"b\\\\c\")"), "{odd}");
    }
}

/// Runs `spec` under the generated profile with `sandbox-exec`.
#[cfg(target_os = "macos")]
pub(crate) fn run(
    tier: Tier,
    spec: &bl_core::CommandSpec,
) -> Result<bl_core::CommandResult, bl_core::CommandError> {
    use crate::subprocess::{PrivateDirs, execute, scrub_env};
    use bl_core::CommandError;
    let private = PrivateDirs::for_spec(spec)?;
    let workspace = spec.workspace.canonicalize().map_err(|e| {
        CommandError::Denied(format!("workspace {}: {e}", spec.workspace.display()))
    })?;
    let profile = profile(tier, &workspace, spec.workspace_writable, &private.tmp)
        .ok_or_else(|| CommandError::Denied(format!("{} has no Seatbelt profile", tier.name())))?;
    let mut command = std::process::Command::new("/usr/bin/sandbox-exec");
    command
        .arg("-p")
        .arg(profile)
        .args(&spec.argv)
        .current_dir(&workspace);
    scrub_env(&mut command, &private.home, &private.tmp, &spec.env);
    execute(command, spec, &mut crate::containment::Contained::new())
}
