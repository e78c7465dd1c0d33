//! Paths spelled the way bounded-loops (Python's `pathlib`) prints them, so
//! messages and JSON that name a path match its output.

use std::path::{Component, Path, PathBuf};

/// `path` as `pathlib.Path` normalises it: `.` components, empty components
/// and trailing slashes dropped, `..` kept; nothing left is `.`.
pub fn pathlib_normal(path: &Path) -> PathBuf {
    let normal: PathBuf = path
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    if normal.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        normal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_like_pathlib() {
        for (given, shown) in [
            ("./root/p1/", "root/p1"),
            ("a//b/./c", "a/b/c"),
            ("/tmp/../x", "/tmp/../x"),
            ("./", "."),
            ("ledger.jsonl", "ledger.jsonl"),
        ] {
            assert_eq!(pathlib_normal(Path::new(given)), Path::new(shown));
        }
    }
}
