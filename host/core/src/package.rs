//! The content digest of a loop package, as bounded-loops 0.7 computes it.
//!
//! A graph names each loop by this digest (`loop_package: sha256:…`), so a
//! package that changes underneath a graph is refused. The digest is one
//! sha256 over the package's entries, walked depth-first with each
//! directory's names in code-point order and a directory before its
//! contents:
//!
//! ```text
//! directory:  d:<chars>:<path>:
//! file:       f:<chars>:<path>:<x>:<size>:<bytes>
//! ```
//!
//! `<path>` is relative to the package with `/` separators, in UTF-8;
//! `<chars>` is its length in Unicode scalar values (not bytes); `<x>` is
//! `1` when any execute bit is set, else `0`; `<size>` is the byte count,
//! followed by exactly that many content bytes. Nothing separates entries:
//! the lengths make the stream unambiguous.
//!
//! This module owns the encoding and the rule for what is left out; walking
//! a real directory is an adapter's job (`bl-packages`).

use sha2::{Digest, Sha256};

/// Names left out wherever they appear, as files or as directories: caches
/// and version-control or run metadata, never part of what a loop is.
pub const IGNORED_NAMES: &[&str] = &[
    ".git",
    ".bounded-loops",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".DS_Store",
];

/// File-name endings left out (compiled Python). A directory with such a
/// name is kept.
pub const IGNORED_FILE_SUFFIXES: &[&str] = &[".pyc", ".pyo"];

/// Whether an entry named `name` (raw bytes, as the file system has it) is
/// left out of the digest. Case matters: `X.PYC` is kept.
pub fn is_ignored(name: &[u8], is_file: bool) -> bool {
    IGNORED_NAMES.iter().any(|n| n.as_bytes() == name)
        || (is_file
            && IGNORED_FILE_SUFFIXES
                .iter()
                .any(|suffix| name.ends_with(suffix.as_bytes())))
}

/// The encoder was fed out of order: content bytes that do not match the
/// size announced for the file. An adapter that sees this read a file that
/// changed while it was being digested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeMismatch {
    pub path: String,
    pub announced: u64,
    pub written: u64,
}

impl std::fmt::Display for SizeMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} bytes announced, {} written (did the file change while it was read?)",
            self.path, self.announced, self.written
        )
    }
}

impl std::error::Error for SizeMismatch {}

/// Streaming encoder for the package digest. Feed entries in walk order:
/// [`directory`](Self::directory), or [`file`](Self::file) followed by
/// exactly `size` bytes of [`content`](Self::content).
#[derive(Default)]
pub struct PackageDigest {
    sha: Sha256,
    open_file: Option<OpenFile>,
}

struct OpenFile {
    path: String,
    announced: u64,
    written: u64,
}

impl PackageDigest {
    pub fn new() -> Self {
        Self::default()
    }

    /// A directory, empty or not, at `path` relative to the package.
    pub fn directory(&mut self, path: &str) -> Result<(), SizeMismatch> {
        self.close_file()?;
        self.sha
            .update(format!("d:{}:{path}:", path.chars().count()));
        Ok(())
    }

    /// A regular file's header; its `size` content bytes must follow.
    pub fn file(&mut self, path: &str, executable: bool, size: u64) -> Result<(), SizeMismatch> {
        self.close_file()?;
        self.sha.update(format!(
            "f:{}:{path}:{}:{size}:",
            path.chars().count(),
            u8::from(executable)
        ));
        self.open_file = Some(OpenFile {
            path: path.to_owned(),
            announced: size,
            written: 0,
        });
        Ok(())
    }

    /// Bytes of the file whose header came last.
    pub fn content(&mut self, bytes: &[u8]) -> Result<(), SizeMismatch> {
        let Some(open) = self.open_file.as_mut() else {
            return Err(SizeMismatch {
                path: String::new(),
                announced: 0,
                written: bytes.len() as u64,
            });
        };
        open.written += bytes.len() as u64;
        if open.written > open.announced {
            return Err(SizeMismatch {
                path: open.path.clone(),
                announced: open.announced,
                written: open.written,
            });
        }
        self.sha.update(bytes);
        Ok(())
    }

    /// `sha256:<hex>` over everything fed.
    pub fn finish(mut self) -> Result<String, SizeMismatch> {
        self.close_file()?;
        Ok(crate::Sha256Digest::finish(self.sha).to_string())
    }

    fn close_file(&mut self) -> Result<(), SizeMismatch> {
        match self.open_file.take() {
            Some(open) if open.written != open.announced => Err(SizeMismatch {
                path: open.path,
                announced: open.announced,
                written: open.written,
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_file(path: &str, executable: bool, bytes: &[u8]) -> String {
        let mut d = PackageDigest::new();
        d.file(path, executable, bytes.len() as u64).unwrap();
        d.content(bytes).unwrap();
        d.finish().unwrap()
    }

    // Values printed by bounded-loops 0.7.6 `bl graph digest` for the same trees.
    #[test]
    fn matches_bounded_loops_for_a_one_file_package() {
        assert_eq!(
            one_file("loop.yaml", false, b"x"),
            "sha256:abda728013af9bdb8c793ff246b71f553db458fff66767cd40a777794ed7515b"
        );
    }

    #[test]
    fn matches_bounded_loops_for_nested_directories() {
        let mut d = PackageDigest::new();
        d.directory("inner").unwrap();
        d.file("inner/loop.yaml", false, 1).unwrap();
        d.content(b"y").unwrap();
        d.file("loop.yaml", false, 1).unwrap();
        d.content(b"x").unwrap();
        assert_eq!(
            d.finish().unwrap(),
            "sha256:13791bf7286d519802104fb153843557b6921c203f36ee39587c1b2884f42ebb"
        );
    }

    #[test]
    fn path_length_counts_characters_not_bytes() {
        let mut a = PackageDigest::new();
        a.file("é", false, 0).unwrap();
        let mut sha = Sha256::new();
        sha.update("f:1:é:0:0:");
        assert_eq!(
            a.finish().unwrap(),
            crate::Sha256Digest::finish(sha).to_string()
        );
    }

    #[test]
    fn the_executable_bit_changes_the_digest() {
        assert_ne!(
            one_file("run.sh", true, b"x"),
            one_file("run.sh", false, b"x")
        );
    }

    #[test]
    fn content_must_match_the_announced_size() {
        let mut short = PackageDigest::new();
        short.file("a", false, 2).unwrap();
        short.content(b"x").unwrap();
        assert_eq!(short.finish().unwrap_err().written, 1);

        let mut long = PackageDigest::new();
        long.file("a", false, 1).unwrap();
        assert!(long.content(b"xy").is_err());

        let mut next = PackageDigest::new();
        next.file("a", false, 1).unwrap();
        assert!(next.directory("b").is_err());

        assert!(PackageDigest::new().content(b"x").is_err());
    }

    #[test]
    fn ignore_rules_follow_bounded_loops() {
        for name in IGNORED_NAMES {
            assert!(is_ignored(name.as_bytes(), true));
            assert!(is_ignored(name.as_bytes(), false));
        }
        assert!(is_ignored(b"m.pyc", true));
        assert!(is_ignored(b"m.pyo", true));
        assert!(
            !is_ignored(b"m.pyc", false),
            "a directory named *.pyc is kept"
        );
        assert!(!is_ignored(b"M.PYC", true), "case matters");
        assert!(!is_ignored(b".env", true));
        assert!(!is_ignored(b".gitignore", true));
    }
}
