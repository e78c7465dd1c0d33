//! Egress postures: how much network a node's sandbox gets.
//!
//! `open` (the default) leaves the network alone; `allowlist` gives the
//! sandbox no network but a CONNECT proxy that admits only listed
//! `host[:port]`s, and only to public addresses; `broker` gives it none,
//! its one request going through the broker. The posture comes from
//! `BOUNDED_LOOPS_EGRESS_POSTURE`, else the config file
//! (`BOUNDED_LOOPS_EGRESS_CONFIG`, else `~/.bounded-loops/egress.json`, the
//! file `bl graph init` writes), else `open`.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

pub const POSTURE_VAR: &str = "BOUNDED_LOOPS_EGRESS_POSTURE";
pub const CONFIG_VAR: &str = "BOUNDED_LOOPS_EGRESS_CONFIG";

/// Why a posture, an allowlist or the egress config file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostureError {
    #[error("posture {0:?} is not one of open, allowlist, broker")]
    UnknownPosture(String),
    #[error("{0:?}: the port must be 1-65535")]
    BadPort(String),
    #[error("{0:?} is not a host name or host:port")]
    BadHost(String),
    #[error("{entry:?} is refused: {reason}; an allowlist names public hosts only")]
    NotPublic { entry: String, reason: String },
    #[error(
        "--allowlist was given but the posture is '{0}' — allowlist hosts only apply with --posture allowlist"
    )]
    AllowlistWithoutPosture(&'static str),
    #[error("the allowlist posture needs at least one --allowlist host")]
    EmptyAllowlist,
    /// The config file's JSON is malformed or has the wrong shape.
    #[error("{0}")]
    Shape(String),
    #[error("{var}: {source}")]
    Variable {
        var: &'static str,
        source: Box<PostureError>,
    },
    #[error(
        "{}: {source}. Fix the file, or write it anew with `bl graph init --yes`",
        path.display()
    )]
    File {
        path: PathBuf,
        source: Box<PostureError>,
    },
    #[error("{POSTURE_VAR}=allowlist, but {} lists no hosts; run `bl graph init --posture allowlist --allowlist HOST`", .0.display())]
    FileListsNoHosts(PathBuf),
    #[error("{POSTURE_VAR}=allowlist, but there is no {} to list the hosts", .0.display())]
    NoFile(PathBuf),
    #[error(
        "{CONFIG_VAR} names {}, which does not exist; write it with `bl graph init --config {}`, or unset {CONFIG_VAR}",
        .0.display(),
        .0.display()
    )]
    NamedFileMissing(PathBuf),
    #[error("{} is a symlink; refusing to write through or replace it — remove it and re-run", .0.display())]
    Symlink(PathBuf),
    #[error("{} exists; pass --yes to replace it", .0.display())]
    Exists(PathBuf),
    #[error("{} does not exist; create it, or pass --parents to have it made", .0.display())]
    NoParent(PathBuf),
    #[error("{}: the written config does not read back the same; nothing was replaced", .0.display())]
    ReadBack(PathBuf),
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    #[error("{0}")]
    Random(String),
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> PostureError + '_ {
    move |e| PostureError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posture {
    Open,
    Allowlist,
    Broker,
}

impl Posture {
    pub fn parse(text: &str) -> Result<Posture, PostureError> {
        match text {
            "open" => Ok(Posture::Open),
            "allowlist" => Ok(Posture::Allowlist),
            "broker" => Ok(Posture::Broker),
            other => Err(PostureError::UnknownPosture(other.to_string())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Posture::Open => "open",
            Posture::Allowlist => "allowlist",
            Posture::Broker => "broker",
        }
    }
}

/// One allowlist entry; the port defaults to 443.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AllowedHost {
    pub host: String,
    pub port: u16,
}

impl AllowedHost {
    pub fn parse(text: &str) -> Result<AllowedHost, PostureError> {
        let text = text.trim();
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (
                host,
                port.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| PostureError::BadPort(text.to_string()))?,
            ),
            _ => (text, 443),
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let valid = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !valid {
            return Err(PostureError::BadHost(text.to_string()));
        }
        Ok(AllowedHost { host, port })
    }

    /// [`AllowedHost::parse`], then the same judge as every request: an
    /// allowlist in a config can only narrow what egress allows, never open
    /// loopback, private or internal destinations.
    pub fn parse_public(text: &str) -> Result<AllowedHost, PostureError> {
        let allowed = AllowedHost::parse(text)?;
        let url = format!("https://{}:{}/", allowed.host, allowed.port);
        if let crate::UrlDecision::Deny(denial) = crate::judge_url(&url) {
            return Err(PostureError::NotPublic {
                entry: text.trim().to_string(),
                reason: denial.to_string(),
            });
        }
        Ok(allowed)
    }
}

impl std::fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// The egress config file: `{"posture": …, "allowlist": [host[:port]…]}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressConfig {
    pub posture: Posture,
    /// As written (`host` or `host:port`); see [`EgressConfig::allowed`].
    pub allowlist: Vec<String>,
}

impl EgressConfig {
    /// Builds a config from `--posture` and `--allowlist` values (each may
    /// be comma-separated). An allowlist needs the allowlist posture.
    pub fn new(posture: Posture, allowlist: &[String]) -> Result<EgressConfig, PostureError> {
        let entries: Vec<String> = allowlist
            .iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        // Written as bounded-loops writes them: `host`, with `:port` only
        // when it is not 443.
        let entries: Vec<String> = entries
            .iter()
            .map(|entry| {
                AllowedHost::parse_public(entry).map(|h| match h.port {
                    443 => h.host,
                    port => format!("{}:{port}", h.host),
                })
            })
            .collect::<Result<_, _>>()?;
        if posture != Posture::Allowlist && !entries.is_empty() {
            return Err(PostureError::AllowlistWithoutPosture(posture.as_str()));
        }
        if posture == Posture::Allowlist && entries.is_empty() {
            return Err(PostureError::EmptyAllowlist);
        }
        Ok(EgressConfig {
            posture,
            allowlist: entries,
        })
    }

    pub fn allowed(&self) -> Vec<AllowedHost> {
        self.allowlist
            .iter()
            .filter_map(|e| AllowedHost::parse(e).ok())
            .collect()
    }

    /// The file's bytes: Python's `json.dumps(indent=2, sort_keys=True)`
    /// and a newline, as bounded-loops writes it.
    pub fn to_text(&self) -> String {
        let mut value = json!({"posture": self.posture.as_str()});
        if self.posture == Posture::Allowlist {
            value["allowlist"] = json!(self.allowlist);
        }
        let mut out = serde_json::to_string_pretty(&value).expect("a JSON value");
        out.push('\n');
        out
    }

    pub fn parse(text: &str) -> Result<EgressConfig, PostureError> {
        let shape = |m: &str| PostureError::Shape(m.to_string());
        let value: Value =
            serde_json::from_str(text).map_err(|e| PostureError::Shape(e.to_string()))?;
        let object = value
            .as_object()
            .ok_or_else(|| shape("not a JSON object"))?;
        if let Some(unknown) = object.keys().find(|k| *k != "posture" && *k != "allowlist") {
            return Err(PostureError::Shape(format!("unknown key {unknown:?}")));
        }
        let posture = Posture::parse(
            object
                .get("posture")
                .and_then(Value::as_str)
                .ok_or_else(|| shape("no \"posture\""))?,
        )?;
        let allowlist: Vec<String> = match object.get("allowlist") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| shape("allowlist entries are strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(shape("\"allowlist\" must be a list")),
        };
        EgressConfig::new(posture, &allowlist)
    }
}

/// Where the config lives: `BOUNDED_LOOPS_EGRESS_CONFIG`, else
/// `~/.bounded-loops/egress.json`.
pub fn default_config_path(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    env(CONFIG_VAR)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|home| Path::new(&home).join(".bounded-loops/egress.json")))
}

/// The posture in force: the variable, else the file, else `open`. A bad
/// variable or a bad file is an error, never a silent `open`.
pub fn resolve_posture(env: impl Fn(&str) -> Option<String>) -> Result<EgressConfig, PostureError> {
    let from_var = env(POSTURE_VAR)
        .filter(|v| !v.is_empty())
        .map(|value| {
            Posture::parse(&value).map_err(|e| PostureError::Variable {
                var: POSTURE_VAR,
                source: Box::new(e),
            })
        })
        .transpose()?;
    // Only the allowlist posture needs the file: it holds the hosts.
    if let Some(posture) = from_var
        && posture != Posture::Allowlist
    {
        return EgressConfig::new(posture, &[]);
    }
    let Some(path) = default_config_path(&env) else {
        return EgressConfig::new(Posture::Open, &[]);
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let config = EgressConfig::parse(&text).map_err(|e| PostureError::File {
                path: path.clone(),
                source: Box::new(e),
            })?;
            if from_var.is_some() && config.posture != Posture::Allowlist {
                return Err(PostureError::FileListsNoHosts(path));
            }
            Ok(config)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let named = env(CONFIG_VAR).is_some_and(|p| !p.is_empty());
            match from_var {
                Some(_) => Err(PostureError::NoFile(path)),
                // A file named on purpose and missing is a mistake, never
                // a silent open posture.
                None if named => Err(PostureError::NamedFileMissing(path)),
                None => EgressConfig::new(Posture::Open, &[]),
            }
        }
        Err(e) => Err(io(&path)(e)),
    }
}

/// The doctor's line for the egress posture: the one in force, or why the
/// config that every sandboxed run reads is broken (which fails them all).
pub fn doctor_check(env: impl Fn(&str) -> Option<String>) -> bl_core::health::Check {
    use bl_core::health::Check;
    match resolve_posture(env) {
        Ok(config) if config.posture == Posture::Allowlist => Check::ok(
            "egress config",
            format!("posture allowlist: {}", config.allowlist.join(", ")),
        ),
        Ok(config) => Check::ok("egress config", format!("posture {}", config.posture.as_str())),
        Err(e) => Check::fail(
            "egress config",
            e.to_string(),
            Some(
                "fix or rewrite the file (`bl graph init --yes`); until then every sandboxed run refuses to start"
                    .into(),
            ),
        ),
    }
}

/// Writes `config` to `path` atomically: a new temp file beside it
/// (O_EXCL, O_NOFOLLOW, mode 0600), fsync, read back and parsed to the same
/// config, then renamed over `path`, and the directory synced. A symlink at
/// `path` is refused; an existing file is replaced only with `overwrite`; a
/// missing directory is made (mode 0700) only with `create_parent`.
pub fn write_config(
    path: &Path,
    config: &EgressConfig,
    overwrite: bool,
    create_parent: bool,
) -> Result<(), PostureError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(PostureError::Symlink(path.to_path_buf()));
        }
        Ok(_) if !overwrite => {
            return Err(PostureError::Exists(path.to_path_buf()));
        }
        _ => {}
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        if !create_parent {
            return Err(PostureError::NoParent(dir.to_path_buf()));
        }
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
    }
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|e| PostureError::Random(e.to_string()))?;
    let tmp = dir.join(format!(".egress.{}.tmp", hex::encode(suffix)));
    let text = config.to_text();
    let write = || -> Result<(), PostureError> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(io(&tmp))?;
        // The mode passed to open is masked by the umask; set it exactly.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .and_then(|_| file.write_all(text.as_bytes()))
            .and_then(|_| file.sync_all())
            .map_err(io(&tmp))?;
        let back = std::fs::read_to_string(&tmp).map_err(io(&tmp))?;
        if EgressConfig::parse(&back).as_ref() != Ok(config) {
            return Err(PostureError::ReadBack(tmp.clone()));
        }
        std::fs::rename(&tmp, path).map_err(io(path))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir))
    };
    let result = write();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_written_as_bounded_loops_writes_them() {
        let config = EgressConfig::new(
            Posture::Allowlist,
            &[
                "api.anthropic.com,api.openai.com:443".into(),
                "example.org".into(),
            ],
        )
        .unwrap();
        assert_eq!(
            config.to_text(),
            "{\n  \"allowlist\": [\n    \"api.anthropic.com\",\n    \"api.openai.com\",\n    \"example.org\"\n  ],\n  \"posture\": \"allowlist\"\n}\n"
        );
        assert_eq!(
            EgressConfig::new(Posture::Open, &[]).unwrap().to_text(),
            "{\n  \"posture\": \"open\"\n}\n"
        );
        assert_eq!(
            config.allowed()[0],
            AllowedHost {
                host: "api.anthropic.com".into(),
                port: 443
            }
        );
        assert!(EgressConfig::new(Posture::Open, &["a.com".into()]).is_err());
        assert!(AllowedHost::parse("bad host").is_err());
        assert!(AllowedHost::parse("a.com:0").is_err());
    }

    #[test]
    fn the_posture_comes_from_the_variable_then_the_file_then_open() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("egress.json");
        let env = |vars: &'static [(&'static str, &'static str)], file: PathBuf| {
            move |name: &str| {
                if name == CONFIG_VAR {
                    return Some(file.display().to_string());
                }
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        // Named on purpose but missing: a mistake, not an open posture.
        assert!(matches!(
            resolve_posture(env(&[], file.clone())),
            Err(PostureError::NamedFileMissing(_))
        ));
        // The default file missing: open.
        let home = dir.path().display().to_string();
        assert_eq!(
            resolve_posture(|name: &str| (name == "HOME").then(|| home.clone()))
                .unwrap()
                .posture,
            Posture::Open
        );
        let config = EgressConfig::new(Posture::Allowlist, &["example.org".into()]).unwrap();
        write_config(&file, &config, false, true).unwrap();
        assert_eq!(resolve_posture(env(&[], file.clone())).unwrap(), config);
        assert_eq!(
            resolve_posture(env(&[(POSTURE_VAR, "broker")], file.clone()))
                .unwrap()
                .posture,
            Posture::Broker
        );
        assert!(resolve_posture(env(&[(POSTURE_VAR, "closed")], file.clone())).is_err());
        std::fs::write(&file, "{\"posture\": \"wide-open\"}").unwrap();
        assert!(
            resolve_posture(env(&[], file)).is_err(),
            "a bad file is not open"
        );
    }

    #[test]
    fn writing_is_atomic_private_and_refuses_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new/egress.json");
        let config = EgressConfig::new(Posture::Broker, &[]).unwrap();
        write_config(&path, &config, false, true).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert!(
            write_config(&path, &config, false, true)
                .unwrap_err()
                .to_string()
                .contains("--yes")
        );
        write_config(
            &path,
            &EgressConfig::new(Posture::Open, &[]).unwrap(),
            true,
            true,
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\n  \"posture\": \"open\"\n}\n"
        );
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(
            write_config(&link, &config, true, true)
                .unwrap_err()
                .to_string()
                .contains("symlink")
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\n  \"posture\": \"open\"\n}\n"
        );
        // No temp file is left behind.
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }
}
