//! Reading a caged process from the host, outside its cage: who it is to
//! the kernel, what its mounts are, whether a seccomp filter holds it, and
//! how many kernel keys its user owns. This is the independent half of the
//! probe and of the adversarial tests: it never asks the caged process.

use std::path::Path;
use std::time::{Duration, Instant};

/// One line of `/proc/PID/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted, as the process sees its root.
    pub point: String,
    /// The per-mount options (`ro`, `nosuid`, …).
    pub options: Vec<String>,
    pub fs_type: String,
}

/// What the host sees of one process.
#[derive(Debug, Clone)]
pub struct HostView {
    pub pid: i32,
    /// Real, effective, saved and file-system uid, as host ids.
    pub uids: [u32; 4],
    pub gids: [u32; 4],
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// The effective capability set.
    pub cap_eff: u64,
    /// The capability bounding set: what an exec could ever regain.
    pub cap_bnd: u64,
    /// 0 none, 1 strict, 2 filter.
    pub seccomp_mode: u8,
    pub no_new_privs: bool,
    pub mounts: Vec<Mount>,
}

impl HostView {
    /// Reads `/proc/PID/status` and `/proc/PID/mountinfo`.
    pub fn read(pid: i32) -> std::io::Result<HostView> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or("")
                .to_string()
        };
        let ids = |name: &str| -> std::io::Result<[u32; 4]> {
            let parsed: Vec<u32> = field(name)
                .split_whitespace()
                .filter_map(|s| s.parse().ok())
                .collect();
            parsed
                .try_into()
                .map_err(|_| std::io::Error::other(format!("/proc/{pid}/status has no {name}")))
        };
        let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
        Ok(HostView {
            pid,
            uids: ids("Uid:")?,
            gids: ids("Gid:")?,
            groups: field("Groups:")
                .split_whitespace()
                .filter_map(|s| s.parse().ok())
                .collect(),
            cap_eff: u64::from_str_radix(&field("CapEff:"), 16).unwrap_or(u64::MAX),
            cap_bnd: u64::from_str_radix(&field("CapBnd:"), 16).unwrap_or(u64::MAX),
            seccomp_mode: field("Seccomp:").parse().unwrap_or(0),
            no_new_privs: field("NoNewPrivs:") == "1",
            mounts: mountinfo.lines().filter_map(parse_mount).collect(),
        })
    }

    /// Whether any of its uids, gids or groups is host root's.
    pub fn is_host_root(&self) -> bool {
        self.uids.contains(&0) || self.gids.contains(&0) || self.groups.contains(&0)
    }

    /// Whether it is exactly `uid`:`gid`, with no group beyond `gid` and
    /// `also` (an ordinary user's cage keeps that user's own groups).
    pub fn is_only(&self, uid: u32, gid: u32, also: &[u32]) -> bool {
        self.uids == [uid; 4]
            && self.gids == [gid; 4]
            && self.groups.iter().all(|g| *g == gid || also.contains(g))
    }

    /// The mount that `path` is on for this process (the top one when
    /// several are stacked at one point; the nearest one above otherwise).
    pub fn mount_of(&self, path: &str) -> Option<&Mount> {
        Path::new(path).ancestors().find_map(|dir| {
            let dir = dir.to_str()?;
            self.mounts.iter().rev().find(|m| m.point == dir)
        })
    }

    /// Whether `path` is on a read-only mount for this process.
    pub fn read_only(&self, path: &str) -> bool {
        self.mount_of(path)
            .is_some_and(|m| m.options.iter().any(|o| o == "ro"))
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        if bytes[i] == b'\\'
            && let Some(v) = octal
        {
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_mount(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let fields: Vec<&str> = before.split(' ').collect();
    Some(Mount {
        point: unescape(fields.get(4)?),
        options: fields.get(5)?.split(',').map(str::to_string).collect(),
        fs_type: after.split(' ').next()?.to_string(),
    })
}

/// The host pid of a process whose argv[0] is `program` and whose argv
/// holds `marker` (bwrap's own processes carry the same arguments, but
/// their argv[0] is bwrap).
pub fn find_process(program: &str, marker: &str) -> Option<i32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let mut args = cmdline.split(|b| *b == 0);
        if args.next() == Some(program.as_bytes()) && args.any(|a| a == marker.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

/// [`find_process`], retried until `timeout`.
pub fn wait_for_process(program: &str, marker: &str, timeout: Duration) -> Option<i32> {
    let started = Instant::now();
    loop {
        if let Some(pid) = find_process(program, marker) {
            return Some(pid);
        }
        if started.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How many kernel keys each user owns, from `/proc/key-users` (`None`
/// when the kernel has no keys support).
pub fn keys_by_user() -> Option<std::collections::HashMap<u32, u64>> {
    let text = std::fs::read_to_string("/proc/key-users").ok()?;
    Some(
        text.lines()
            .filter_map(|line| {
                let (who, rest) = line.trim().split_once(':')?;
                // "<usage> <nkeys>/<nikeys> …"
                let keys = rest
                    .split_whitespace()
                    .nth(1)?
                    .split('/')
                    .next()?
                    .parse()
                    .ok()?;
                Some((who.trim().parse().ok()?, keys))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_as_itself() {
        let view = HostView::read(std::process::id() as i32).unwrap();
        assert_eq!(view.uids[0], nix::unistd::getuid().as_raw());
        assert!(view.mount_of("/proc/self").is_some());
        assert!(view.mount_of("/").is_some());
    }

    #[test]
    fn mountinfo_lines_parse_with_escapes() {
        let m = parse_mount(
            "36 35 98:0 /mnt1 /mnt/with\\040space ro,noatime master:1 - ext3 /dev/root rw",
        )
        .unwrap();
        assert_eq!(m.point, "/mnt/with space");
        assert_eq!(m.options, ["ro", "noatime"]);
        assert_eq!(m.fs_type, "ext3");
    }
}
