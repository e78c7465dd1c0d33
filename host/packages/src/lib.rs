//! Loop packages on disk: computing a package's content digest from a real
//! directory, and finding the packages a graph may name under its
//! `--loop-roots`.
//!
//! The digest's encoding and its ignore rules are domain rules and live in
//! `bl_core::package`; this crate only walks the file system and feeds them.
//! It reads and never writes. The rules for what is refused follow
//! bounded-loops 0.7: a symlink or a special file anywhere in a package makes
//! it undigestable (a package must be self-contained to be content-addressed),
//! and two packages with one digest make the whole catalogue unusable, since a
//! digest would then not say which directory runs.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bl_core::package::{PackageDigest, SizeMismatch, is_ignored};

/// The file that makes a directory a loop package.
pub const MANIFEST: &str = "loop.yaml";
/// The file that makes a directory a graph package (bl's: a subgraph
/// node names one by digest, found under the same roots).
pub const GRAPH_MANIFEST: &str = "graph.yaml";

/// Whether `dir` is a package: it holds `loop.yaml` or `graph.yaml`.
pub fn is_package(dir: &Path) -> bool {
    dir.join(MANIFEST).is_file() || dir.join(GRAPH_MANIFEST).is_file()
}

#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("'{0}' is not a directory")]
    NotADirectory(PathBuf),
    #[error(
        "no loop.yaml in '{0}' — a loop package is a directory containing loop.yaml. \
         Point this at the package, not at its parent."
    )]
    NoManifest(PathBuf),
    #[error(
        "loop package {package} contains a symlink ({path}); a package must be \
         self-contained to be content-addressed"
    )]
    Symlink { package: PathBuf, path: String },
    #[error(
        "loop package {package} contains a non-regular file ({path}); a package must be \
         plain files and directories to be content-addressed"
    )]
    NotRegular { package: PathBuf, path: String },
    #[error("cannot digest '{package}' — the name {path:?} is not valid UTF-8; rename it")]
    NotUtf8 { package: PathBuf, path: String },
    #[error("cannot digest '{package}' — {path}: {source}")]
    Io {
        package: PathBuf,
        path: String,
        source: std::io::Error,
    },
    #[error("cannot digest '{package}' — {source}")]
    Changed {
        package: PathBuf,
        source: SizeMismatch,
    },
    #[error("two loop packages share digest {digest}: {first} and {second}")]
    SharedDigest {
        digest: String,
        first: PathBuf,
        second: PathBuf,
    },
}

/// The content digest (`sha256:<hex>`) of the loop package at `package`,
/// byte-compatible with bounded-loops' `bl graph digest`.
pub fn digest(package: &Path) -> Result<String, PackageError> {
    if !package.is_dir() {
        return Err(PackageError::NotADirectory(package.to_owned()));
    }
    if !is_package(package) {
        return Err(PackageError::NoManifest(package.to_owned()));
    }
    let mut walk = Walk {
        package,
        digest: PackageDigest::new(),
        buffer: vec![0; 64 * 1024],
    };
    walk.directory(package, "")?;
    walk.digest
        .finish()
        .map_err(|source| PackageError::Changed {
            package: package.to_owned(),
            source,
        })
}

struct Walk<'a> {
    package: &'a Path,
    digest: PackageDigest,
    buffer: Vec<u8>,
}

impl Walk<'_> {
    fn io(&self, path: &str, source: std::io::Error) -> PackageError {
        PackageError::Io {
            package: self.package.to_owned(),
            path: if path.is_empty() {
                ".".into()
            } else {
                path.into()
            },
            source,
        }
    }

    fn changed(&self, source: SizeMismatch) -> PackageError {
        PackageError::Changed {
            package: self.package.to_owned(),
            source,
        }
    }

    /// Feeds the entries of `dir` (at `prefix` inside the package), names in
    /// code-point order, each directory before its contents.
    fn directory(&mut self, dir: &Path, prefix: &str) -> Result<(), PackageError> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| self.io(prefix, e))? {
            let entry = entry.map_err(|e| self.io(prefix, e))?;
            let kind = entry.file_type().map_err(|e| self.io(prefix, e))?;
            let name = entry.file_name();
            // A cache or metadata name is skipped whatever it is, before any
            // other rule looks at it (a symlink inside `.git` is no concern).
            if is_ignored(name.as_bytes(), false) {
                continue;
            }
            entries.push((name, kind));
        }
        // UTF-8 byte order is code-point order, the order bounded-loops walks in.
        entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        for (name, kind) in entries {
            let lossy = name.to_string_lossy();
            let path = if prefix.is_empty() {
                lossy.to_string()
            } else {
                format!("{prefix}/{lossy}")
            };
            if kind.is_symlink() {
                return Err(PackageError::Symlink {
                    package: self.package.to_owned(),
                    path,
                });
            }
            if kind.is_file() && is_ignored(name.as_bytes(), true) {
                continue;
            }
            if name.to_str().is_none() {
                return Err(PackageError::NotUtf8 {
                    package: self.package.to_owned(),
                    path,
                });
            }
            let full = dir.join(&name);
            if kind.is_dir() {
                self.digest.directory(&path).map_err(|e| self.changed(e))?;
                self.directory(&full, &path)?;
            } else if kind.is_file() {
                self.file(&full, &path)?;
            } else {
                return Err(PackageError::NotRegular {
                    package: self.package.to_owned(),
                    path,
                });
            }
        }
        Ok(())
    }

    fn file(&mut self, full: &Path, path: &str) -> Result<(), PackageError> {
        let listed = std::fs::symlink_metadata(full).map_err(|e| self.io(path, e))?;
        let mut file = File::open(full).map_err(|e| self.io(path, e))?;
        let opened = file.metadata().map_err(|e| self.io(path, e))?;
        // The entry must still be the regular file that was listed: a swap
        // for a symlink or another file between listing and opening is
        // refused rather than digested.
        if !opened.is_file() || (opened.dev(), opened.ino()) != (listed.dev(), listed.ino()) {
            return Err(PackageError::Symlink {
                package: self.package.to_owned(),
                path: path.to_owned(),
            });
        }
        let executable = opened.permissions().mode() & 0o111 != 0;
        self.digest
            .file(path, executable, opened.len())
            .map_err(|e| self.changed(e))?;
        loop {
            let n = file.read(&mut self.buffer).map_err(|e| self.io(path, e))?;
            if n == 0 {
                return Ok(());
            }
            let (digest, chunk) = (&mut self.digest, &self.buffer[..n]);
            if let Err(e) = digest.content(chunk) {
                return Err(self.changed(e));
            }
        }
    }
}

/// The loop packages found under a set of roots, by digest.
#[derive(Debug, Default, Clone)]
pub struct Catalogue {
    by_digest: BTreeMap<String, PathBuf>,
}

impl Catalogue {
    /// Every immediate subdirectory of each root (in the order given, names
    /// sorted) that holds a `loop.yaml` (or, bl's, `graph.yaml`) file. A
    /// root is not itself a package.
    /// Roots that do not exist or are not directories contribute nothing.
    /// Paths are resolved, so a package reached twice (two roots, or a
    /// symlink) counts once; two different directories with one digest are
    /// refused.
    pub fn discover(roots: &[PathBuf]) -> Result<Self, PackageError> {
        let mut catalogue = Self::default();
        let mut seen = HashSet::new();
        for root in roots {
            let Ok(root) = root.canonicalize() else {
                continue;
            };
            let Ok(listing) = std::fs::read_dir(&root) else {
                continue;
            };
            let mut names: Vec<_> = listing
                .filter_map(|e| e.ok())
                .map(|e| e.file_name())
                .collect();
            names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            for name in names {
                let candidate = root.join(&name);
                if !candidate.is_dir() || !is_package(&candidate) {
                    continue;
                }
                let Ok(package) = candidate.canonicalize() else {
                    continue;
                };
                if !seen.insert(package.clone()) {
                    continue;
                }
                let digest = digest(&package)?;
                if let Some(first) = catalogue.by_digest.get(&digest) {
                    return Err(PackageError::SharedDigest {
                        digest: digest.trim_start_matches("sha256:").to_owned(),
                        first: first.clone(),
                        second: package,
                    });
                }
                catalogue.by_digest.insert(digest, package);
            }
        }
        Ok(catalogue)
    }

    /// The directory holding the package with this digest (`sha256:<hex>`).
    pub fn get(&self, digest: &str) -> Option<&Path> {
        self.by_digest.get(digest).map(PathBuf::as_path)
    }

    /// Every digest found, sorted.
    pub fn digests(&self) -> impl Iterator<Item = &str> {
        self.by_digest.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }
}
