//! The plugin registry directory. A registry is a directory (a local path,
//! a checkout, a copied static tree) holding `index.json` and, under
//! `plugins/<name>/<version>/`, each version's component. The index lists
//! every plugin's versions; each version records what a user must know
//! before running it (the component's sha256, its world and WIT version,
//! the capabilities it asks for, where its source is, how to rebuild it,
//! and who published it) and carries the publisher's Ed25519 signature
//! over a statement that binds all of that.
//!
//! What this crate owns: the index format, the statement a signature
//! covers, reading a registry fail-closed (a symlink, an oversized index,
//! a name that is a path, an unreadable entry are refused, naming the
//! place), verifying signatures offline against trusted keys (each at most
//! once per load, and only when that version is asked about), semver
//! resolution among the versions that verify, reading a component only
//! when its bytes match the signed digest, and publishing
//! (adding a signed version). Installing, pinning in a lock and running
//! are the application's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bl_store::{SigningKey, VerifierKey};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

/// The index's format tag.
pub const FORMAT: &str = "bl-registry/1";

/// The file that lists the plugins.
pub const INDEX: &str = "index.json";

/// The largest index read: a registry is a list, not a data store.
pub const MAX_INDEX_BYTES: u64 = 4 * 1024 * 1024;

/// The largest component read.
pub const MAX_COMPONENT_BYTES: u64 = 256 * 1024 * 1024;

/// What a registry refuses, naming the place and the fix.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: is a symlink; a registry is read only through plain files and directories, so that what is read is what was signed"
    )]
    Symlink { path: PathBuf },
    #[error("{path}: {size} bytes, over the {limit}-byte cap")]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error("{path} at {pointer}: {message}")]
    Malformed {
        path: PathBuf,
        pointer: String,
        message: String,
    },
    #[error("no plugin {name:?} in the registry at {registry}")]
    NoSuchPlugin { name: String, registry: PathBuf },
    #[error("{name}: no version that may be used matches {wanted} (usable: {usable}){refused}")]
    NoMatch {
        name: String,
        wanted: String,
        usable: String,
        /// The versions left out and why, each as `; VERSION is TRUST: why`.
        refused: String,
    },
    #[error(
        "{name}@{version}: the component's sha256 is {found}, but the signed index says {signed}; refused"
    )]
    DigestMismatch {
        name: String,
        version: String,
        signed: String,
        found: String,
    },
    #[error("{name}@{version} cannot be published: {why}")]
    Publish {
        name: String,
        version: String,
        why: String,
    },
}

/// Where a version's source is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// A repository and the commit built, when the source is public.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Else the sha256 of the source tree built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// How to build the component again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// rust, python or js.
    pub language: String,
    /// The toolchain and its version, for example `rustc 1.95.0`.
    pub toolchain: String,
    /// The command that builds it, from the source's root.
    pub command: String,
}

/// One published version of a plugin, as the index records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Version {
    pub version: String,
    /// `sha256:<hex>` of the component's bytes.
    pub component_sha256: String,
    /// The WIT world it implements, and the WIT package version.
    pub world: String,
    pub wit_version: String,
    /// The capabilities it asks to be granted.
    pub capabilities: Vec<String>,
    pub source: Source,
    pub recipe: Recipe,
    /// What the plugin says it is (its manifest's description).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The JSON Schema the plugin's config must meet: an installing
    /// project checks a config against it before anything runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<serde_json::Value>,
    /// The files a completion contract plugin applies to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contract_patterns: Vec<String>,
    /// The key id (8 hex digits) of the key that signed it.
    pub publisher_key_id: String,
    /// Base64 of the Ed25519 signature over [`statement`]; absent when
    /// the version was published unsigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// The index file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    pub format: String,
    /// Each plugin's versions, by name.
    pub plugins: BTreeMap<String, Vec<Version>>,
}

/// What a version's signature says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Signed by a trusted key, and the signature holds.
    Verified { key: String },
    /// No signature.
    NotSigned,
    /// Signed, but by no key this user trusts.
    UntrustedKey { key_id: String },
    /// The signature does not hold for what the index says (the entry was
    /// edited after signing, or the signature is damaged).
    VerificationFailed { why: String },
}

impl Trust {
    /// Its label and why, in words.
    pub fn explain(&self) -> String {
        match self {
            Trust::Verified { key } => format!("Verified (signed by {key})"),
            Trust::NotSigned => "NotSigned (it carries no signature)".into(),
            Trust::UntrustedKey { key_id } => {
                format!("UntrustedKey (signed by key {key_id}, which is not in the trust file)")
            }
            Trust::VerificationFailed { why } => format!("VerificationFailed ({why})"),
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Trust::Verified { .. } => "Verified",
            Trust::NotSigned => "NotSigned",
            Trust::UntrustedKey { .. } => "UntrustedKey",
            Trust::VerificationFailed { .. } => "VerificationFailed",
        }
    }
}

/// The statement a version's signature covers: the plugin's name and every
/// recorded field but the signature, as canonical JSON, behind a tag that
/// keeps it from being any other signed thing.
pub fn statement(name: &str, version: &Version) -> Vec<u8> {
    let mut fields = serde_json::to_value(version).expect("a version serialises");
    if let Some(map) = fields.as_object_mut() {
        map.remove("signature");
        map.insert("name".into(), json!(name));
    }
    let mut bytes = format!("{FORMAT} statement\n").into_bytes();
    bytes.extend_from_slice(bl_core::canonical_json(&fields).as_bytes());
    bytes
}

/// The id a key is named by in an index (`publisher_key_id`).
pub fn key_id(key: &VerifierKey) -> String {
    key.to_text()
        .split('+')
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

/// A plugin name that is a name, never a path: 1-64 of `a-z`, `0-9`, `-`,
/// starting with a letter.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A registry, read; each version's signature is checked when it is first
/// asked about (a run asks about one plugin, not the whole index).
#[derive(Debug)]
pub struct Registry {
    pub root: PathBuf,
    pub index: Index,
    trusted: Vec<VerifierKey>,
    /// Each version's trust, by (name, version), once checked.
    trust: BTreeMap<(String, String), std::sync::OnceLock<Trust>>,
}

/// Reads `path` as a plain file of at most `limit` bytes.
fn read_plain(path: &Path, limit: u64) -> Result<Vec<u8>, RegistryError> {
    let io = |source| RegistryError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    if meta.file_type().is_symlink() {
        return Err(RegistryError::Symlink {
            path: path.to_path_buf(),
        });
    }
    if meta.len() > limit {
        return Err(RegistryError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            limit,
        });
    }
    std::fs::read(path).map_err(io)
}

/// Refuses a symlink anywhere from `root` down to `path`.
fn no_links_between(root: &Path, path: &Path) -> Result<(), RegistryError> {
    let mut at = root.to_path_buf();
    if let Ok(rest) = path.strip_prefix(root) {
        for part in rest.components() {
            at.push(part);
            if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(RegistryError::Symlink { path: at });
            }
        }
    }
    Ok(())
}

fn check_version(name: &str, v: &Version, trusted: &[VerifierKey]) -> Trust {
    let Some(signature) = &v.signature else {
        return Trust::NotSigned;
    };
    let Some(key) = trusted.iter().find(|k| key_id(k) == v.publisher_key_id) else {
        return Trust::UntrustedKey {
            key_id: v.publisher_key_id.clone(),
        };
    };
    let bytes = match B64.decode(signature) {
        Ok(bytes) => bytes,
        Err(e) => {
            return Trust::VerificationFailed {
                why: format!("the signature is not base64: {e}"),
            };
        }
    };
    let Ok(signature) = <[u8; 64]>::try_from(bytes.as_slice()) else {
        return Trust::VerificationFailed {
            why: format!("the signature is {} bytes, not 64", bytes.len()),
        };
    };
    if key.verify(&statement(name, v), &signature) {
        Trust::Verified {
            key: key.name().to_string(),
        }
    } else {
        Trust::VerificationFailed {
            why: format!(
                "the signature by {} does not hold for this entry: it was changed after signing",
                key.name()
            ),
        }
    }
}

impl Registry {
    /// Reads the registry at `root`, whose versions' signatures are checked
    /// against `trusted` when first asked about. A registry that cannot be
    /// read safely is refused as a whole; a version that does not verify is
    /// kept, with its [`Trust`] saying why, so that it can be listed but not
    /// used.
    pub fn load(root: &Path, trusted: &[VerifierKey]) -> Result<Registry, RegistryError> {
        let path = root.join(INDEX);
        no_links_between(root, &path)?;
        let bytes = read_plain(&path, MAX_INDEX_BYTES)?;
        let malformed = |pointer: String, message: String| RegistryError::Malformed {
            path: path.clone(),
            pointer,
            message,
        };
        let index: Index = serde_json::from_slice(&bytes).map_err(|e| {
            malformed(
                "/".into(),
                format!("{e} (line {}, column {})", e.line(), e.column()),
            )
        })?;
        if index.format != FORMAT {
            return Err(malformed(
                "/format".into(),
                format!("{:?} is not {FORMAT:?}", index.format),
            ));
        }
        let mut trust = BTreeMap::new();
        for (name, versions) in &index.plugins {
            if !valid_name(name) {
                return Err(malformed(
                    format!("/plugins/{name}"),
                    "a plugin name is 1-64 of a-z, 0-9 and '-', starting with a letter: never a path".into(),
                ));
            }
            for (i, v) in versions.iter().enumerate() {
                if semver::Version::parse(&v.version).is_err() {
                    return Err(malformed(
                        format!("/plugins/{name}/{i}/version"),
                        format!(
                            "{:?} is not a semantic version (MAJOR.MINOR.PATCH)",
                            v.version
                        ),
                    ));
                }
                let key = (name.clone(), v.version.clone());
                if trust.contains_key(&key) {
                    return Err(malformed(
                        format!("/plugins/{name}/{i}/version"),
                        format!("{} is listed twice; a version is published once", v.version),
                    ));
                }
                trust.insert(key, std::sync::OnceLock::new());
            }
        }
        Ok(Registry {
            root: root.to_path_buf(),
            index,
            trusted: trusted.to_vec(),
            trust,
        })
    }

    /// The highest version of `name` that matches `wanted` (a semver
    /// requirement such as `^1.2` or `=1.0.0`; `*` for any) and verifies.
    pub fn resolve(&self, name: &str, wanted: &str) -> Result<&Version, RegistryError> {
        self.resolve_among(name, wanted, |t| matches!(t, Trust::Verified { .. }))
    }

    /// As [`Registry::resolve`], among the versions whose trust `usable`
    /// accepts (an operator may allow one plugin unsigned; a version whose
    /// signature fails is never usable).
    pub fn resolve_among(
        &self,
        name: &str,
        wanted: &str,
        usable: impl Fn(&Trust) -> bool,
    ) -> Result<&Version, RegistryError> {
        let versions = self
            .index
            .plugins
            .get(name)
            .ok_or_else(|| RegistryError::NoSuchPlugin {
                name: name.into(),
                registry: self.root.clone(),
            })?;
        let requirement =
            semver::VersionReq::parse(wanted).map_err(|e| RegistryError::Malformed {
                path: self.root.join(INDEX),
                pointer: format!("/plugins/{name}"),
                message: format!("{wanted:?} is not a version requirement: {e}"),
            })?;
        let verified: Vec<&Version> = versions
            .iter()
            .filter(|v| self.trust_of(name, &v.version).is_some_and(&usable))
            .collect();
        verified
            .iter()
            .filter_map(|v| {
                semver::Version::parse(&v.version)
                    .ok()
                    .map(|parsed| (parsed, *v))
            })
            .filter(|(parsed, _)| requirement.matches(parsed))
            .max_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, v)| v)
            .ok_or_else(|| RegistryError::NoMatch {
                name: name.into(),
                wanted: wanted.into(),
                usable: if verified.is_empty() {
                    "none".into()
                } else {
                    verified
                        .iter()
                        .map(|v| v.version.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                refused: versions
                    .iter()
                    .filter_map(|v| {
                        let trust = self.trust_of(name, &v.version)?;
                        (!usable(trust)).then(|| format!("; {} is {}", v.version, trust.explain()))
                    })
                    .collect(),
            })
    }

    /// Whether a version whose component digest is `digest` has a
    /// signature that verifies under a trusted key (only those versions'
    /// signatures are checked).
    pub fn signs(&self, digest: &str) -> bool {
        self.index
            .plugins
            .iter()
            .flat_map(|(name, versions)| versions.iter().map(move |v| (name, v)))
            .filter(|(_, v)| v.component_sha256 == digest)
            .any(|(name, v)| {
                matches!(
                    self.trust_of(name, &v.version),
                    Some(Trust::Verified { .. })
                )
            })
    }

    /// The highest version of `name` a trusted key signed as built from
    /// the sources whose digest is `source_digest`, with that key's name.
    pub fn signed_build_of(&self, name: &str, source_digest: &str) -> Option<(&Version, &str)> {
        self.index
            .plugins
            .get(name)?
            .iter()
            .filter(|v| v.source.digest.as_deref() == Some(source_digest))
            .filter_map(|v| match self.trust_of(name, &v.version) {
                Some(Trust::Verified { key }) => Some((v, key.as_str())),
                _ => None,
            })
            .max_by_key(|(v, _)| semver::Version::parse(&v.version).ok())
    }

    pub fn trust_of(&self, name: &str, version: &str) -> Option<&Trust> {
        let checked = self.trust.get(&(name.to_string(), version.to_string()))?;
        let listed = self
            .index
            .plugins
            .get(name)?
            .iter()
            .find(|v| v.version == version)?;
        Some(checked.get_or_init(|| check_version(name, listed, &self.trusted)))
    }

    /// The component of `name@version`, read only when its bytes are the
    /// ones the index signed (never a symlink on the way).
    pub fn component(&self, name: &str, version: &Version) -> Result<Vec<u8>, RegistryError> {
        let path = component_path(&self.root, name, &version.version);
        no_links_between(&self.root, &path)?;
        let bytes = read_plain(&path, MAX_COMPONENT_BYTES)?;
        let found = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        if found != version.component_sha256 {
            return Err(RegistryError::DigestMismatch {
                name: name.into(),
                version: version.version.clone(),
                signed: version.component_sha256.clone(),
                found,
            });
        }
        Ok(bytes)
    }

    /// Versions matching `text` in their name (or every one for ""), as
    /// listed: name, version, trust and what each asks for.
    pub fn search(&self, text: &str) -> Vec<Hit> {
        let text = text.to_lowercase();
        self.index
            .plugins
            .iter()
            .filter(|(name, _)| name.contains(&text))
            .flat_map(|(name, versions)| {
                versions.iter().map(move |v| Hit {
                    name: name.clone(),
                    version: v.version.clone(),
                    world: v.world.clone(),
                    capabilities: v.capabilities.clone(),
                    component_sha256: v.component_sha256.clone(),
                    trust: self
                        .trust_of(name, &v.version)
                        .map_or("NotSigned", Trust::label),
                })
            })
            .collect()
    }
}

/// One version a search found.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub name: String,
    pub version: String,
    pub world: String,
    pub capabilities: Vec<String>,
    pub component_sha256: String,
    pub trust: &'static str,
}

/// Where `name@version`'s component lives in a registry.
pub fn component_path(root: &Path, name: &str, version: &str) -> PathBuf {
    root.join("plugins")
        .join(name)
        .join(version)
        .join(format!("{name}.wasm"))
}

/// Adds `name@version` (its component `bytes`) to the registry at `root`,
/// signed with `key`: the component is written under `plugins/`, and the
/// index gains the signed entry. A version already published is refused:
/// what was signed is never rewritten.
pub fn publish(
    root: &Path,
    name: &str,
    mut version: Version,
    bytes: &[u8],
    key: &SigningKey,
) -> Result<Version, RegistryError> {
    let refused = |why: String| RegistryError::Publish {
        name: name.into(),
        version: version.version.clone(),
        why,
    };
    if !valid_name(name) {
        return Err(refused(
            "the name is 1-64 of a-z, 0-9 and '-', starting with a letter".into(),
        ));
    }
    if semver::Version::parse(&version.version).is_err() {
        return Err(refused("the version is not MAJOR.MINOR.PATCH".into()));
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RegistryError::Io { path, source }
    };
    let index_path = root.join(INDEX);
    let mut index = if index_path.exists() {
        // Read as any reader does, trusting nothing: only the format matters here.
        Registry::load(root, &[])?.index
    } else {
        Index {
            format: FORMAT.into(),
            plugins: BTreeMap::new(),
        }
    };
    if index
        .plugins
        .get(name)
        .is_some_and(|vs| vs.iter().any(|v| v.version == version.version))
    {
        return Err(refused("that version is already in the registry, and a signed version is never rewritten: publish a new version".into()));
    }
    version.component_sha256 = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
    version.publisher_key_id = key_id(&key.verifier());
    version.signature = None;
    version.signature = Some(B64.encode(key.sign(&statement(name, &version))));
    let component = component_path(root, name, &version.version);
    let dir = component.parent().unwrap_or(root);
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    no_links_between(root, &component)?;
    std::fs::write(&component, bytes).map_err(io(&component))?;
    index
        .plugins
        .entry(name.to_string())
        .or_default()
        .push(version.clone());
    let text = serde_json::to_string_pretty(&index).expect("an index serialises");
    let staged = root.join(format!(".{INDEX}.new"));
    std::fs::write(&staged, text).map_err(io(&staged))?;
    std::fs::rename(&staged, &index_path).map_err(io(&index_path))?;
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn version(v: &str) -> Version {
        Version {
            version: v.into(),
            component_sha256: String::new(),
            world: "bl:plugin/gate".into(),
            wit_version: "0.1.0".into(),
            capabilities: vec!["workspace-read".into()],
            source: Source {
                repository: Some("https://example.invalid/files".into()),
                commit: Some("0123abcd".into()),
                digest: None,
            },
            recipe: Recipe {
                language: "rust".into(),
                toolchain: "rustc 1.95.0".into(),
                command: "bl plugin build .".into(),
            },
            description: String::new(),
            config_schema: None,
            contract_patterns: Vec::new(),
            publisher_key_id: String::new(),
            signature: None,
        }
    }

    fn published() -> (tempfile::TempDir, SigningKey) {
        let root = tempfile::tempdir().unwrap();
        let key = SigningKey::generate("publisher").unwrap();
        for (v, bytes) in [
            ("1.0.0", b"one".as_slice()),
            ("1.2.0", b"one-two"),
            ("2.0.0", b"two"),
        ] {
            publish(root.path(), "files", version(v), bytes, &key).unwrap();
        }
        (root, key)
    }

    fn edit_index(root: &Path, change: impl FnOnce(&mut Value)) {
        let path = root.join(INDEX);
        let mut index: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        change(&mut index);
        std::fs::write(&path, serde_json::to_vec(&index).unwrap()).unwrap();
    }

    #[test]
    fn a_published_version_verifies_and_resolves_by_semver() {
        let (root, key) = published();
        let registry = Registry::load(root.path(), &[key.verifier()]).unwrap();
        assert_eq!(registry.resolve("files", "^1").unwrap().version, "1.2.0");
        assert_eq!(registry.resolve("files", "*").unwrap().version, "2.0.0");
        assert_eq!(
            registry.resolve("files", "=1.0.0").unwrap().version,
            "1.0.0"
        );
        assert!(matches!(
            registry.resolve("files", "^3"),
            Err(RegistryError::NoMatch { .. })
        ));
        assert!(matches!(
            registry.resolve("nope", "*"),
            Err(RegistryError::NoSuchPlugin { .. })
        ));
        let v = registry.resolve("files", "^1").unwrap();
        assert_eq!(registry.component("files", v).unwrap(), b"one-two");
        assert_eq!(registry.search("fil")[0].trust, "Verified");
        // Another key is not trusted; no key at all trusts nothing.
        let stranger = SigningKey::generate("stranger").unwrap();
        let untrusted = Registry::load(root.path(), &[stranger.verifier()]).unwrap();
        assert!(matches!(
            untrusted.trust_of("files", "1.0.0"),
            Some(Trust::UntrustedKey { .. })
        ));
        assert!(matches!(
            untrusted.resolve("files", "*"),
            Err(RegistryError::NoMatch { .. })
        ));
        // A version is never published twice.
        assert!(matches!(
            publish(root.path(), "files", version("1.0.0"), b"other", &key),
            Err(RegistryError::Publish { .. })
        ));
    }

    #[test]
    fn an_entry_edited_after_signing_or_a_damaged_signature_fails_verification() {
        let (root, key) = published();
        edit_index(root.path(), |index| {
            index["plugins"]["files"][0]["capabilities"] = json!(["workspace-read", "network"]);
            let signature = index["plugins"]["files"][1]["signature"]
                .as_str()
                .unwrap()
                .to_string();
            index["plugins"]["files"][1]["signature"] = json!(&signature[..signature.len() - 8]);
            index["plugins"]["files"][2]
                .as_object_mut()
                .unwrap()
                .remove("signature");
        });
        let registry = Registry::load(root.path(), &[key.verifier()]).unwrap();
        let edited = registry.trust_of("files", "1.0.0").unwrap();
        assert!(
            matches!(edited, Trust::VerificationFailed { why } if why.contains("changed after signing")),
            "{edited:?}"
        );
        let truncated = registry.trust_of("files", "1.2.0").unwrap();
        assert!(
            matches!(truncated, Trust::VerificationFailed { .. }),
            "{truncated:?}"
        );
        assert_eq!(registry.trust_of("files", "2.0.0"), Some(&Trust::NotSigned));
        assert!(
            matches!(registry.resolve("files", "*"), Err(RegistryError::NoMatch { usable, .. }) if usable == "none")
        );
    }

    #[test]
    fn a_version_listed_twice_refuses_the_registry() {
        let (root, key) = published();
        edit_index(root.path(), |index| {
            let mut copy = index["plugins"]["files"][0].clone();
            copy.as_object_mut().unwrap().remove("signature");
            index["plugins"]["files"].as_array_mut().unwrap().push(copy);
        });
        let refused = Registry::load(root.path(), &[key.verifier()])
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("/plugins/files/3/version") && refused.contains("listed twice"),
            "{refused}"
        );
    }

    #[test]
    fn a_tampered_component_is_refused_naming_both_digests() {
        let (root, key) = published();
        std::fs::write(component_path(root.path(), "files", "2.0.0"), b"evil").unwrap();
        let registry = Registry::load(root.path(), &[key.verifier()]).unwrap();
        let v = registry.resolve("files", "^2").unwrap();
        let refused = registry.component("files", v).unwrap_err().to_string();
        assert!(
            refused.contains("the signed index says sha256:") && refused.contains("is sha256:"),
            "{refused}"
        );
    }

    #[test]
    fn a_path_for_a_name_a_symlink_or_an_oversized_index_refuses_the_registry() {
        let (root, key) = published();
        edit_index(root.path(), |index| {
            let entry = index["plugins"]["files"].clone();
            index["plugins"]["../etc"] = entry;
        });
        let refused = Registry::load(root.path(), &[key.verifier()])
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("/plugins/../etc") && refused.contains("never a path"),
            "{refused}"
        );

        let (root, key) = published();
        let component = component_path(root.path(), "files", "2.0.0");
        std::fs::remove_file(&component).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &component).unwrap();
        let registry = Registry::load(root.path(), &[key.verifier()]).unwrap();
        let v = registry.resolve("files", "^2").unwrap();
        assert!(matches!(
            registry.component("files", v),
            Err(RegistryError::Symlink { .. })
        ));

        let (root, key) = published();
        let index = root.path().join(INDEX);
        let real = root.path().join("real-index.json");
        std::fs::rename(&index, &real).unwrap();
        std::os::unix::fs::symlink(&real, &index).unwrap();
        assert!(matches!(
            Registry::load(root.path(), &[key.verifier()]),
            Err(RegistryError::Symlink { .. })
        ));

        let (root, key) = published();
        let big = std::fs::File::options()
            .append(true)
            .open(root.path().join(INDEX))
            .unwrap();
        big.set_len(MAX_INDEX_BYTES + 1).unwrap();
        assert!(matches!(
            Registry::load(root.path(), &[key.verifier()]),
            Err(RegistryError::TooLarge { .. })
        ));
    }
}
