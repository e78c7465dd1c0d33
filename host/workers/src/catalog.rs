//! Provider profiles: how each agent CLI is called. The shipped ones are
//! bounded-loops 0.7's; a `--providers` TOML catalog adds or overrides
//! entries under `[providers.<name>]`, with bounded-loops' keys. A catalog
//! holds the NAMES of environment variables to forward, never values.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptVia {
    Stdin,
    Arg,
}

/// The JSON a metered CLI must answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    /// Plain stdout is the reply; tokens are not reported.
    Plain,
    Claude,
    Grok,
    Agy,
}

impl Envelope {
    pub fn name(self) -> &'static str {
        match self {
            Envelope::Plain => "",
            Envelope::Claude => "claude",
            Envelope::Grok => "grok",
            Envelope::Agy => "agy",
        }
    }

    fn parse(name: &str) -> Option<Envelope> {
        [
            Envelope::Plain,
            Envelope::Claude,
            Envelope::Grok,
            Envelope::Agy,
        ]
        .into_iter()
        .find(|e| e.name() == name)
    }

    /// Whether spend on this CLI can be metered.
    pub fn metered(self) -> bool {
        self != Envelope::Plain
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    pub binary: String,
    pub args: Vec<String>,
    pub prompt_via: PromptVia,
    pub post_prompt_args: Vec<String>,
    /// Put before the work directory, when the CLI must be told it.
    pub workspace_arg: Option<String>,
    /// Arguments that make the CLI answer in its envelope (last).
    pub usage_args: Vec<String>,
    pub envelope: Envelope,
    pub env_grant: Vec<String>,
    pub unset_env: Vec<String>,
    /// The hosts (`host` or `host:port`, 443 when left out) the CLI must
    /// reach to work: a caged loop runner gets these through the allowlist
    /// proxy, and nothing else.
    pub egress_hosts: Vec<String>,
    /// Where the CLI keeps its login and session files, relative to the
    /// operator's home (`.claude`, `.codex`, …): a caged CLI reads and
    /// writes these, and sees nothing else of that home.
    pub home_paths: Vec<String>,
    /// Within those, what the caged CLI may read but not change: its
    /// settings (hooks, MCP servers), which an uncaged run would act on.
    pub home_read_only: Vec<String>,
}

impl Profile {
    /// What of the operator's home (`HOME` in `env`) a caged turn of this
    /// CLI sees: its `home_paths`.
    pub fn home_grant(&self, env: &[(String, String)]) -> Option<bl_core::HomeGrant> {
        let (_, home) = env.iter().rev().find(|(k, _)| k == "HOME")?;
        Some(bl_core::HomeGrant {
            dir: home.into(),
            paths: self.home_paths.iter().map(Into::into).collect(),
            read_only: self.home_read_only.iter().map(Into::into).collect(),
        })
    }

    /// The argv and stdin for one turn.
    pub fn argv(&self, binary: &Path, prompt: &str, workspace: &Path) -> (Vec<String>, Vec<u8>) {
        let mut argv = vec![binary.display().to_string()];
        argv.extend(self.args.iter().cloned());
        let mut stdin = Vec::new();
        match self.prompt_via {
            PromptVia::Arg => argv.push(prompt.to_string()),
            PromptVia::Stdin => stdin = prompt.as_bytes().to_vec(),
        }
        argv.extend(self.post_prompt_args.iter().cloned());
        if let Some(flag) = &self.workspace_arg {
            argv.push(flag.clone());
            argv.push(workspace.display().to_string());
        }
        argv.extend(self.usage_args.iter().cloned());
        (argv, stdin)
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn shipped(
    name: &str,
    args: &[&str],
    prompt_via: PromptVia,
    post: &[&str],
    workspace_arg: Option<&str>,
    envelope: Envelope,
) -> Profile {
    Profile {
        name: name.into(),
        binary: name.into(),
        args: strings(args),
        prompt_via,
        post_prompt_args: strings(post),
        workspace_arg: workspace_arg.map(str::to_string),
        usage_args: if envelope.metered() {
            strings(&["--output-format", "json"])
        } else {
            Vec::new()
        },
        envelope,
        env_grant: Vec::new(),
        unset_env: Vec::new(),
        egress_hosts: provider_hosts(name),
        home_paths: strings(provider_home(name)),
        home_read_only: strings(provider_settings(name)),
    }
}

/// Where each shipped CLI keeps settings that run code (hooks, MCP
/// servers, notify commands): read-only to a caged turn.
fn provider_settings(name: &str) -> &'static [&'static str] {
    match name {
        "claude" => &[
            ".claude.json",
            ".claude/settings.json",
            ".claude/settings.local.json",
            ".claude/hooks",
            ".claude/plugins",
        ],
        "codex" => &[".codex/config.toml"],
        "agy" => &[".gemini/settings.json"],
        _ => &[],
    }
}

/// Where each shipped CLI keeps its login and sessions in the home.
fn provider_home(name: &str) -> &'static [&'static str] {
    match name {
        "claude" => &[".claude", ".claude.json"],
        "codex" => &[".codex"],
        "grok" => &[".grok"],
        "agy" => &[".gemini", ".antigravity"],
        "muse" => &[".muse"],
        "dsh" => &[".dsh"],
        _ => &[],
    }
}

/// Whether `path` can name something in a home: relative, no `..`.
fn home_relative(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && p.is_relative()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Where each shipped CLI's provider answers.
fn provider_hosts(name: &str) -> Vec<String> {
    let hosts: &[&str] = match name {
        "claude" => &["api.anthropic.com"],
        "codex" => &["api.openai.com", "chatgpt.com"],
        "grok" => &["api.x.ai"],
        "agy" => &[
            "generativelanguage.googleapis.com",
            "cloudcode-pa.googleapis.com",
            "oauth2.googleapis.com",
        ],
        _ => &[],
    };
    strings(hosts)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    profiles: BTreeMap<String, Profile>,
}

#[derive(Debug, thiserror::Error)]
#[error("{file}: [provider_catalog] {pointer} — {message}")]
pub struct CatalogError {
    pub file: String,
    pub pointer: String,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    providers: BTreeMap<String, toml::Table>,
}

const KEYS: &[&str] = &[
    "args",
    "binary",
    "egress_hosts",
    "env_grant",
    "envelope",
    "home_paths",
    "home_read_only",
    "post_prompt_args",
    "prompt_via",
    "unset_env",
    "usage_args",
    "workspace_arg",
];

impl Default for Catalog {
    fn default() -> Self {
        Self::shipped()
    }
}

impl Catalog {
    /// The profiles bounded-loops 0.7 ships.
    pub fn shipped() -> Catalog {
        use Envelope::*;
        use PromptVia::*;
        let profiles = [
            shipped("claude", &["-p"], Stdin, &[], None, Claude),
            shipped(
                "codex",
                &["exec", "--skip-git-repo-check"],
                Arg,
                &[],
                None,
                Plain,
            ),
            shipped("muse", &["exec"], Arg, &[], None, Plain),
            shipped("dsh", &[], Arg, &[], None, Plain),
            shipped("grok", &["-p"], Arg, &[], None, Grok),
            shipped(
                "agy",
                &["-p"],
                Arg,
                &["--dangerously-skip-permissions"],
                Some("--add-dir"),
                Agy,
            ),
        ];
        Catalog {
            profiles: profiles.into_iter().map(|p| (p.name.clone(), p)).collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.profiles.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.profiles.keys().map(String::as_str)
    }

    pub fn profiles(&self) -> impl Iterator<Item = &Profile> {
        self.profiles.values()
    }

    /// Merges a TOML catalog over these profiles.
    pub fn merge_toml(&mut self, file: &str, text: &str) -> Result<(), CatalogError> {
        let err = |pointer: String, message: String| CatalogError {
            file: file.to_string(),
            pointer,
            message,
        };
        let parsed: CatalogFile = toml::from_str(text).map_err(|e| {
            let message = e.message().to_string();
            err("/".into(), message)
        })?;
        for (name, table) in parsed.providers {
            let at = format!("/providers/{name}");
            let unknown: Vec<&String> = table
                .keys()
                .filter(|k| !KEYS.contains(&k.as_str()))
                .collect();
            if !unknown.is_empty() {
                return Err(err(
                    at,
                    format!(
                        "unknown key(s) {unknown:?}; a silently ignored key would leave you believing this provider is configured when it is not. Known keys: {KEYS:?}"
                    ),
                ));
            }
            let text_of = |key: &str| -> Result<Option<String>, CatalogError> {
                match table.get(key) {
                    None => Ok(None),
                    Some(toml::Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(err(format!("{at}/{key}"), "must be a string".into())),
                }
            };
            let list_of = |key: &str| -> Result<Vec<String>, CatalogError> {
                match table.get(key) {
                    None => Ok(Vec::new()),
                    Some(toml::Value::Array(items)) => items
                        .iter()
                        .map(|i| {
                            i.as_str().map(str::to_string).ok_or_else(|| {
                                err(format!("{at}/{key}"), "must be a list of strings".into())
                            })
                        })
                        .collect(),
                    Some(_) => Err(err(
                        format!("{at}/{key}"),
                        "must be a list of strings".into(),
                    )),
                }
            };
            let env_grant = list_of("env_grant")?;
            if let Some(bad) = env_grant.iter().find(|n| {
                n.contains('=')
                    || n.is_empty()
                    || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            }) {
                return Err(err(
                    format!("{at}/env_grant"),
                    format!(
                        "'{bad}' is not an environment variable NAME; a catalog names variables and never carries their values"
                    ),
                ));
            }
            let home_paths = list_of("home_paths")?;
            let home_read_only = list_of("home_read_only")?;
            for (key, paths) in [
                ("home_paths", &home_paths),
                ("home_read_only", &home_read_only),
            ] {
                if let Some(bad) = paths.iter().find(|p| !home_relative(p)) {
                    return Err(err(
                        format!("{at}/{key}"),
                        format!(
                            "'{bad}' is not a path inside the home: write it relative to the home (such as '.mycli'), without '..'"
                        ),
                    ));
                }
            }
            let prompt_via = match text_of("prompt_via")?.as_deref() {
                None | Some("stdin") => PromptVia::Stdin,
                Some("arg") => PromptVia::Arg,
                Some(other) => {
                    return Err(err(
                        format!("{at}/prompt_via"),
                        format!("'{other}' is not one of 'stdin', 'arg'"),
                    ));
                }
            };
            let envelope_name = text_of("envelope")?.unwrap_or_default();
            let Some(envelope) = Envelope::parse(&envelope_name) else {
                return Err(err(
                    format!("{at}/envelope"),
                    format!("'{envelope_name}' is not one of '', 'claude', 'grok', 'agy'"),
                ));
            };
            let profile = Profile {
                name: name.clone(),
                binary: text_of("binary")?.unwrap_or_else(|| name.clone()),
                args: list_of("args")?,
                prompt_via,
                post_prompt_args: list_of("post_prompt_args")?,
                workspace_arg: text_of("workspace_arg")?,
                usage_args: list_of("usage_args")?,
                envelope,
                env_grant,
                unset_env: list_of("unset_env")?,
                egress_hosts: list_of("egress_hosts")?,
                home_paths,
                home_read_only,
            };
            self.profiles.insert(name, profile);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_argv_matches_what_bounded_loops_runs() {
        let c = Catalog::shipped();
        let ws = Path::new("/w");
        let (argv, stdin) = c.get("claude").unwrap().argv(Path::new("claude"), "hi", ws);
        assert_eq!(argv, ["claude", "-p", "--output-format", "json"]);
        assert_eq!(stdin, b"hi");
        let (argv, _) = c.get("agy").unwrap().argv(Path::new("agy"), "hi", ws);
        assert_eq!(
            argv,
            [
                "agy",
                "-p",
                "hi",
                "--dangerously-skip-permissions",
                "--add-dir",
                "/w",
                "--output-format",
                "json"
            ]
        );
        let (argv, _) = c.get("codex").unwrap().argv(Path::new("codex"), "hi", ws);
        assert_eq!(argv, ["codex", "exec", "--skip-git-repo-check", "hi"]);
    }

    #[test]
    fn a_catalog_adds_providers_and_refuses_unknown_keys_and_values() {
        let mut c = Catalog::shipped();
        c.merge_toml("p.toml", "[providers.foo]\nbinary = \"foo-cli\"\nprompt_via = \"arg\"\nenv_grant = [\"FOO_KEY\"]\n")
            .unwrap();
        assert_eq!(c.get("foo").unwrap().binary, "foo-cli");
        let e = c
            .merge_toml("p.toml", "[providers.foo]\nbogus = 1\n")
            .unwrap_err();
        assert!(e.to_string().contains("/providers/foo"), "{e}");
        let e = c
            .merge_toml("p.toml", "[providers.foo]\nenv_grant = [\"KEY=sk-123\"]\n")
            .unwrap_err();
        assert!(e.to_string().contains("never carries"), "{e}");
        assert!(c.merge_toml("p.toml", "[other]\n").is_err());
    }
}
