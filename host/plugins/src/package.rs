//! A plugin as it sits on disk: the component (`x.wasm`), the manifest
//! beside it (`x.plugin.json`, written by `bl plugin build`), its name, its
//! world and the capabilities it declares. What `bl plugin run` and the
//! executor load.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bl_core::plugin::{Capability, PluginManifest, World};

use crate::{PluginError, Runtime};

/// Why a plugin package could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a plugin manifest: {message}", path.display())]
    Manifest { path: PathBuf, message: String },
    #[error("{}: unknown world `{world}`", path.display())]
    UnknownWorld { path: PathBuf, world: String },
    #[error("{}: {source}", path.display())]
    Capability {
        path: PathBuf,
        source: bl_core::plugin::GrantError,
    },
    #[error(
        "{}: not a bl plugin component: it exports {exports:?}, which matches no bl world \
         (gate and completion-contract export `check`, transform `run`, publication-policy `decide`)",
        path.display()
    )]
    NotAPlugin { path: PathBuf, exports: Vec<String> },
    #[error("{0}")]
    Load(PluginError),
}

/// A component and the manifest beside it. The component's bytes are read
/// on first need: a run whose compiled component is cached, and whose
/// digest is known, never reads them.
#[derive(Debug, Clone)]
pub struct PluginPackage {
    pub path: PathBuf,
    pub manifest: Option<PluginManifest>,
    bytes: OnceLock<Vec<u8>>,
}

impl PluginPackage {
    /// Opens the component at `path` (a file, read on first need) and
    /// reads the manifest beside it, if there is one.
    pub fn open(path: &Path) -> Result<PluginPackage, PackageError> {
        let read_error = |source| PackageError::Read {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(read_error)?;
        if !meta.is_file() {
            return Err(read_error(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a file",
            )));
        }
        let manifest_path = path.with_extension("plugin.json");
        let manifest = match std::fs::read(&manifest_path) {
            Ok(text) => {
                Some(
                    serde_json::from_slice(&text).map_err(|e| PackageError::Manifest {
                        path: manifest_path.clone(),
                        message: e.to_string(),
                    })?,
                )
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(PackageError::Read {
                    path: manifest_path,
                    source,
                });
            }
        };
        Ok(PluginPackage {
            path: path.to_path_buf(),
            manifest,
            bytes: OnceLock::new(),
        })
    }

    /// The component's bytes, read the first time they are asked for.
    pub fn bytes(&self) -> Result<&[u8], PackageError> {
        if let Some(bytes) = self.bytes.get() {
            return Ok(bytes);
        }
        let bytes = std::fs::read(&self.path).map_err(|source| PackageError::Read {
            path: self.path.clone(),
            source,
        })?;
        Ok(self.bytes.get_or_init(|| bytes))
    }

    /// The manifest's name, else the file's stem.
    pub fn name(&self) -> String {
        match &self.manifest {
            Some(m) => m.name.clone(),
            None => self
                .path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| self.path.display().to_string()),
        }
    }

    /// The capabilities the manifest declares (`None` without a manifest:
    /// the component's imports are then its requests).
    pub fn declared(&self) -> Result<Option<Vec<Capability>>, PackageError> {
        let Some(manifest) = &self.manifest else {
            return Ok(None);
        };
        manifest
            .capabilities
            .iter()
            .map(|c| Capability::parse(c))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
            .map_err(|source| PackageError::Capability {
                path: self.path.clone(),
                source,
            })
    }

    /// The world: the manifest's, else the one the component's exports
    /// implement (compiled with `runtime`, and so cached).
    pub fn world(&self, runtime: &Runtime) -> Result<World, PackageError> {
        if let Some(manifest) = &self.manifest {
            return World::from_wit_name(&manifest.world).ok_or_else(|| {
                PackageError::UnknownWorld {
                    path: self.path.clone(),
                    world: manifest.world.clone(),
                }
            });
        }
        let exports = runtime
            .exports(&self.name(), self.bytes()?)
            .map_err(PackageError::Load)?;
        world_by_exports(&exports).ok_or_else(|| PackageError::NotAPlugin {
            path: self.path.clone(),
            exports: exports.into_iter().map(|(name, _)| name).collect(),
        })
    }
}

/// Each world by the function it exports and that function's arity.
fn world_by_exports(exports: &[(String, usize)]) -> Option<World> {
    [
        ("check", 2, World::Gate),
        ("check", 3, World::CompletionContract),
        ("run", 4, World::Transform),
        ("decide", 2, World::PublicationPolicy),
    ]
    .into_iter()
    .find(|(name, arity, _)| exports.iter().any(|(n, a)| n == name && a == arity))
    .map(|(_, _, world)| world)
}
