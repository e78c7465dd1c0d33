//! The loop engine's adapters for a turn: the scratch workspace (a copy of
//! the package's `seed/`, its content digest for the no-progress bound,
//! and the guard over the paths in `forbid`), and the runners that take
//! turns in it: the stub (a cassette), a shell command, a Python callable
//! and the agent CLIs, each through a [`CommandRunner`] (bwrap when the
//! bounds ask for the sandbox).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use bl_core::{CommandRunner, CommandSpec};
use bl_loops::cassette::{Action, Cassette};
use bl_loops::engine::{Runner, RunnerError, Turn, TurnRequest, Workspace, WorkspaceDigest};
use sha2::{Digest, Sha256};

use crate::catalog::Profile;

/// Marks a directory as a scratch workspace bl made (and may remove).
pub const SCRATCH_MARKER: &str = ".bounded-loops-scratch";
/// Where a runner's last account of its turn is left for the gate to read.
pub const AGENT_OUTPUT: &str = "agent_output.txt";

/// Names never part of the workspace's content: bl's own files, and
/// caches a tool may write while it runs.
fn is_bookkeeping(name: &str) -> bool {
    matches!(
        name,
        SCRATCH_MARKER | AGENT_OUTPUT | ".git" | "__pycache__" | ".pytest_cache"
    )
}

/// A scratch copy of a package's `seed/` in which the turns are taken.
pub struct ScratchWorkspace {
    root: PathBuf,
    forbid: Vec<String>,
    /// The forbidden paths' content in the package: what they must stay.
    /// Taken from the package, never from the workspace, so a resumed run
    /// cannot inherit an anchor a previous run tampered with.
    anchors: BTreeMap<String, Option<[u8; 32]>>,
    /// Seed entries quarantine kept out (`seed/...`).
    withheld: Vec<String>,
}

/// How a workspace is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepare {
    /// A fresh copy of the seed, removed with the run.
    Scratch,
    /// A fresh copy kept with the run (`--run-id`).
    Persistent,
    /// The workspace a resumed run left, as it is.
    Resume,
}

impl ScratchWorkspace {
    /// Copies `package/seed` into `root/seed` (withholding credential-like
    /// names when `quarantine` is on), or opens the workspace a resumed run
    /// left there.
    pub fn prepare(
        package: &Path,
        root: &Path,
        forbid: &[String],
        how: Prepare,
        quarantine: bool,
    ) -> std::io::Result<ScratchWorkspace> {
        let mut withheld = Vec::new();
        if how != Prepare::Resume {
            std::fs::create_dir_all(root)?;
            let seed = package.join("seed");
            if seed.is_dir() {
                let mut keep = |rel: &str, name: &str| {
                    let out = quarantine && bl_loops::quarantine::withheld(name);
                    if out {
                        withheld.push(format!("seed/{rel}"));
                    }
                    !out
                };
                copy_filtered(&seed, &root.join("seed"), "", &mut keep)?;
            }
            let marker = match how {
                Prepare::Persistent => "bounded-loops persistent run workspace\n",
                _ => "bounded-loops scratch workspace\n",
            };
            write_no_follow(&root.join(SCRATCH_MARKER), marker.as_bytes())?;
        }
        withheld.sort();
        // What the anchors must be: the package's, less what quarantine keeps out.
        let mut anchors = anchor_hashes(package, forbid);
        if quarantine {
            anchors.retain(|path, _| {
                !Path::new(path)
                    .components()
                    .any(|c| bl_loops::quarantine::withheld(&c.as_os_str().to_string_lossy()))
            });
        }
        Ok(ScratchWorkspace {
            root: root.to_path_buf(),
            forbid: forbid.to_vec(),
            anchors,
            withheld,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What quarantine kept out of the workspace.
    pub fn withheld(&self) -> &[String] {
        &self.withheld
    }
}

/// The content of every file under the `forbid` paths of `base`, caches
/// included (a planted `__pycache__` entry can stand in for a module).
fn anchor_hashes(base: &Path, forbid: &[String]) -> BTreeMap<String, Option<[u8; 32]>> {
    let mut hashes = BTreeMap::new();
    for path in forbid {
        let path = path.trim_end_matches('/');
        let full = base.join(path);
        match std::fs::symlink_metadata(&full) {
            Ok(meta) if meta.is_dir() => {
                for file in walk(&full) {
                    hashes.insert(format!("{path}/{}", file.path), Some(file.hash));
                }
            }
            _ => {
                hashes.insert(path.to_string(), hash_entry(&full));
            }
        }
    }
    hashes
}

impl Workspace for ScratchWorkspace {
    fn digest(&mut self) -> Result<WorkspaceDigest, bl_loops::engine::PortError> {
        let mut content = Sha256::new();
        let mut all = Sha256::new();
        for file in walk(&self.root) {
            for hasher in [&mut all]
                .into_iter()
                .chain((!file.bookkeeping).then_some(&mut content))
            {
                hasher.update(file.path.as_bytes());
                hasher.update([0]);
                hasher.update(file.hash);
            }
        }
        Ok(WorkspaceDigest {
            content: hex::encode(content.finalize()),
            all: hex::encode(all.finalize()),
        })
    }

    fn forbidden_changes(&mut self) -> Result<Vec<String>, bl_loops::engine::PortError> {
        let now = anchor_hashes(&self.root, &self.forbid);
        let mut changed: Vec<String> = now
            .iter()
            .filter(|(path, hash)| self.anchors.get(*path) != Some(hash))
            .map(|(path, _)| path.clone())
            .collect();
        changed.extend(
            self.anchors
                .keys()
                .filter(|p| !now.contains_key(*p))
                .cloned(),
        );
        changed.sort();
        changed.dedup();
        Ok(changed)
    }
}

fn sha256(bytes: Vec<u8>) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// One file of a workspace walk.
struct WalkedFile {
    path: String,
    hash: [u8; 32],
    /// Under a bookkeeping name (bl's own files, caches): not progress.
    bookkeeping: bool,
}

/// The hash of one entry: a file's bytes, a symlink's target text.
fn hash_entry(path: &Path) -> Option<[u8; 32]> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).ok()?;
        Some(sha256(target.as_os_str().as_encoded_bytes().to_vec()))
    } else if meta.is_file() {
        std::fs::read(path).ok().map(sha256)
    } else {
        None
    }
}

/// Every file and symlink under `dir`, by relative path, with its hash.
/// Symlinks are never followed.
fn walk(dir: &Path) -> Vec<WalkedFile> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new(), false)];
    while let Some((path, rel, bookkeeping)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let bookkeeping = bookkeeping || is_bookkeeping(&name);
            let child_rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push((entry.path(), child_rel, bookkeeping));
            } else if let Some(hash) = hash_entry(&entry.path()) {
                out.push(WalkedFile {
                    path: child_rel,
                    hash,
                    bookkeeping,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Writes `bytes` to `path` as a new file, replacing whatever entry was
/// there without following it: a symlink a turn left in its place is
/// removed, never written through.
fn write_no_follow(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path)?,
        Ok(_) => std::fs::remove_file(path)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?
        .write_all(bytes)
}

/// Copies the entries `keep(relative path, name)` accepts (files,
/// directories, and symlinks as links).
fn copy_filtered(
    from: &Path,
    to: &Path,
    rel: &str,
    keep: &mut dyn FnMut(&str, &str) -> bool,
) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let child_rel = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if !keep(&child_rel, &name) {
            continue;
        }
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_filtered(&entry.path(), &target, &child_rel, keep)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// The normal form of a relative path (`./a//b` is `a/b`); `None` for an
/// absolute path, one with `..`, or an empty one.
fn normal(path: &str) -> Option<PathBuf> {
    let mut clean = PathBuf::new();
    for part in Path::new(path).components() {
        match part {
            Component::Normal(p) => clean.push(p),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!clean.as_os_str().is_empty()).then_some(clean)
}

/// Where a relative path lands in the workspace, if it stays inside: no
/// `..`, not absolute, and no directory on the way that is a symlink (a
/// seed may carry one pointing anywhere).
fn inside(root: &Path, path: &str) -> Option<PathBuf> {
    let clean = normal(path)?;
    let mut at = root.to_path_buf();
    let parts: Vec<_> = clean.components().collect();
    for part in &parts[..parts.len() - 1] {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => return None,
            _ => {}
        }
    }
    Some(root.join(clean))
}

fn runner_error(runner: &str, message: String) -> RunnerError {
    RunnerError {
        kind: "RunnerError".into(),
        message: format!("{runner}: {message}"),
    }
}

/// Replays a cassette: each lap's recorded output, tokens and file writes.
/// A write to a path under `forbid` or outside the workspace is refused
/// before anything is written.
pub struct StubRunner {
    cassette: Cassette,
    root: PathBuf,
    forbid: Vec<String>,
}

impl StubRunner {
    pub fn new(cassette: Cassette, root: &Path, forbid: &[String]) -> StubRunner {
        StubRunner {
            cassette,
            root: root.to_path_buf(),
            forbid: forbid.to_vec(),
        }
    }

    fn forbidden(&self, path: &str) -> bool {
        let Some(path) = normal(path) else {
            return false;
        };
        self.forbid
            .iter()
            .filter_map(|f| normal(f))
            .any(|f| path.starts_with(&f))
    }
}

impl Runner for StubRunner {
    fn turn(&mut self, request: &TurnRequest) -> Result<Turn, RunnerError> {
        let Some(turn) = self.cassette.for_lap(request.lap) else {
            return Err(runner_error(
                "StubRunner",
                format!(
                    "the cassette has no interaction for lap {} and no \"*\" fallback",
                    request.lap
                ),
            ));
        };
        // The wind-down turn is an account, not work: its writes are not made.
        if !request.wind_down {
            for action in &turn.actions {
                let Action::WriteFile { path, .. } = action else {
                    continue;
                };
                if self.forbidden(path) {
                    return Err(runner_error(
                        "StubRunner",
                        format!(
                            "cassette action writes '{path}', which matches a forbidden path in the loop's spec (forbid={}) — rejected. A cassette may not overwrite the gate's verification anchor.",
                            python_list(&self.forbid)
                        ),
                    ));
                }
                if inside(&self.root, path).is_none() {
                    return Err(runner_error(
                        "StubRunner",
                        format!(
                            "cassette action writes '{path}', which is outside the workspace — rejected"
                        ),
                    ));
                }
            }
            for action in &turn.actions {
                if let Action::WriteFile { path, content } = action {
                    let target = inside(&self.root, path).expect("checked above");
                    let write = || -> std::io::Result<()> {
                        if let Some(parent) = target.parent() {
                            std::fs::create_dir_all(parent)?;
                        }
                        write_no_follow(&target, content.as_bytes())
                    };
                    write().map_err(|e| {
                        runner_error("StubRunner", format!("could not write '{path}': {e}"))
                    })?;
                }
            }
            write_no_follow(&self.root.join(AGENT_OUTPUT), turn.agent_output.as_bytes()).map_err(
                |e| runner_error("StubRunner", format!("could not write {AGENT_OUTPUT}: {e}")),
            )?;
        }
        Ok(Turn {
            output: turn.agent_output.clone(),
            tokens: turn.tokens,
            claimed_done: turn.agent_claimed_done,
        })
    }
}

fn python_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The text a command-line runner is given on stdin: the spec, then the
/// gate's last word when there is one.
fn prompt_text(request: &TurnRequest) -> String {
    if request.wind_down {
        let why = request.feedback.unwrap_or("a declared bound");
        return format!(
            "# Stop: the budget is spent\n\n\
             This run ended on a declared bound: {why}\n\n\
             Do not continue the task and do not change any file: nothing you start now can finish.\n\n\
             Use this one short turn to hand over to whoever runs this next (perhaps a fresh run of you, \
             with no memory of this one). Write to stdout, under three headings:\n\n\
             1. **Done**: what you changed, and where.\n\
             2. **Left**: what remains, as precisely as you can.\n\
             3. **Next**: what you would do first with more budget, and anything costly to work out again.\n"
        );
    }
    let mut prompt = request.prompt.to_string();
    if let Some(feedback) = request.feedback {
        prompt.push_str("\n\n# The gate's last verdict\n\n");
        prompt.push_str(feedback);
        prompt.push('\n');
    }
    prompt
}

/// How a command runner's turn is made into a [`Turn`].
enum Reading {
    /// stdout is the account; tokens are not reported.
    Plain,
    /// An agent CLI's envelope, read with its profile.
    Profile(Box<Profile>),
}

/// Runs one command per turn in the workspace, through the sandbox.
pub struct CommandTurns {
    name: String,
    argv: Vec<String>,
    root: PathBuf,
    runner: Arc<dyn CommandRunner>,
    env: Vec<(String, String)>,
    reading: Reading,
    /// The prompt goes on stdin (shell) or into argv (agent CLIs).
    prompt_on_stdin: bool,
    /// `module.function` of a Python callable.
    callable: Option<String>,
}

impl CommandTurns {
    /// The shell runner: `agent_cmd` (already checked against the
    /// allowlist), the prompt on stdin, stdout as the account.
    pub fn shell(argv: Vec<String>, root: &Path, runner: Arc<dyn CommandRunner>) -> Self {
        CommandTurns {
            name: "ShellRunner".into(),
            argv,
            root: root.to_path_buf(),
            runner,
            env: Vec::new(),
            reading: Reading::Plain,
            prompt_on_stdin: true,
            callable: None,
        }
    }

    /// Variables set for every turn (the operator-allowed passthrough).
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Self {
        self.env.extend(env);
        self
    }

    /// An agent CLI (claude-code, codex, antigravity) by its profile.
    pub fn agent(
        name: &str,
        profile: Profile,
        binary: PathBuf,
        root: &Path,
        runner: Arc<dyn CommandRunner>,
        env: Vec<(String, String)>,
    ) -> Self {
        CommandTurns {
            name: name.into(),
            argv: vec![binary.display().to_string()],
            root: root.to_path_buf(),
            runner,
            env,
            reading: Reading::Profile(Box::new(profile)),
            prompt_on_stdin: false,
            callable: None,
        }
    }

    /// A Python callable `module:function`, called by a small driver with
    /// the prompt and the workspace, in the sandbox.
    pub fn python_callable(
        module: &str,
        function: &str,
        import_root: &Path,
        root: &Path,
        runner: Arc<dyn CommandRunner>,
    ) -> Self {
        let driver = format!(
            "import importlib, json, sys\n\
             sys.path.insert(0, {root:?})\n\
             name, fn = {module:?}, {function:?}\n\
             try:\n    mod = importlib.import_module(name)\n\
             except Exception as e:\n    print(f\"could not import '{{name}}': {{e}}\", file=sys.stderr); sys.exit(97)\n\
             prompt = sys.stdin.read()\n\
             try:\n    out = getattr(mod, fn)(prompt=prompt, workspace='.')\n\
             except Exception as e:\n    print(f'{{type(e).__name__}}: {{e}}', file=sys.stderr); sys.exit(98)\n\
             if not isinstance(out, dict): out = {{'output': '' if out is None else str(out)}}\n\
             print(json.dumps(out))\n",
            root = import_root.display().to_string(),
        );
        CommandTurns {
            name: "PythonCallableRunner".into(),
            callable: Some(format!("{module}.{function}")),
            argv: vec!["python3".into(), "-c".into(), driver],
            root: root.to_path_buf(),
            runner,
            env: Vec::new(),
            reading: Reading::Plain,
            prompt_on_stdin: true,
        }
    }
}

impl Runner for CommandTurns {
    fn turn(&mut self, request: &TurnRequest) -> Result<Turn, RunnerError> {
        let prompt = prompt_text(request);
        let (argv, stdin) = match &self.reading {
            Reading::Profile(profile) => {
                profile.argv(Path::new(&self.argv[0]), &prompt, &self.root)
            }
            Reading::Plain => (self.argv.clone(), prompt.clone().into_bytes()),
        };
        let stdin = if self.prompt_on_stdin {
            prompt.into_bytes()
        } else {
            stdin
        };
        let spec = CommandSpec {
            argv,
            workspace: self.root.clone(),
            workspace_writable: !request.wind_down,
            stdin,
            timeout: request.time_left,
            output_cap: 8 << 20,
            stream: false,
            env: self.env.clone(),
            private_dir: None,
            // An agent CLI keeps its login in the operator's home.
            home: match &self.reading {
                Reading::Profile(profile) => profile.home_grant(&self.env),
                Reading::Plain => None,
            },
        };
        let result = self.runner.run(&spec).map_err(|e| {
            let why = match e {
                bl_core::CommandError::Spawn(m) | bl_core::CommandError::Denied(m) => m,
                other => other.to_string(),
            };
            let shown = shlex::try_join(self.argv.iter().map(String::as_str)).unwrap_or_default();
            runner_error(
                &self.name,
                format!("could not launch agent command '{shown}': {why}"),
            )
        })?;
        if self.name == "ShellRunner" && !result.timed_out {
            // A shell agent's exit status is its own business: the gate
            // decides. Its account is what it printed.
            let stdout = String::from_utf8_lossy(&result.stdout_tail).into_owned();
            let stderr = String::from_utf8_lossy(&result.stderr_tail).into_owned();
            if !request.wind_down {
                write_no_follow(&self.root.join(AGENT_OUTPUT), stdout.as_bytes()).map_err(|e| {
                    runner_error(&self.name, format!("could not write {AGENT_OUTPUT}: {e}"))
                })?;
            }
            let shown = shlex::try_join(self.argv.iter().map(String::as_str)).unwrap_or_default();
            let code = result
                .exit_code
                .map_or("signal".to_string(), |c| c.to_string());
            let mut output = format!("[ShellRunner] cmd='{shown}' exit={code}\n");
            if !stderr.is_empty() {
                output.push_str(&format!("[stderr] {}\n", stderr.trim_end()));
            }
            output.push('\n');
            output.push_str(&stdout);
            return Ok(Turn {
                output,
                tokens: 0,
                claimed_done: false,
            });
        }
        if result.timed_out {
            return Err(RunnerError {
                kind: bl_loops::engine::TIMEOUT.into(),
                message: format!(
                    "{}: the turn ran past the time left ({:.1}s) and was stopped",
                    self.name,
                    request.time_left.as_secs_f64()
                ),
            });
        }
        let stderr = String::from_utf8_lossy(&result.stderr_tail)
            .trim()
            .to_string();
        if result.exit_code != Some(0) {
            let how = match result.exit_code {
                Some(code) => format!("exited {code}"),
                None => "was killed by a signal".into(),
            };
            let message = match (result.exit_code, &self.callable) {
                (Some(97 | 98), Some(callable)) => format!("{callable} raised: {stderr}"),
                _ => format!("{how}: {stderr}"),
            };
            return Err(runner_error(&self.name, message));
        }
        match &self.reading {
            Reading::Plain => {
                let stdout = String::from_utf8_lossy(&result.stdout_tail).into_owned();
                // A Python callable answers with JSON; a shell runner with text.
                if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(&stdout)
                    && self.callable.is_some()
                {
                    return Ok(Turn {
                        output: map
                            .get("output")
                            .and_then(|v| v.as_str())
                            .unwrap_or_default()
                            .to_string(),
                        tokens: map.get("tokens").and_then(|v| v.as_u64()).unwrap_or(0),
                        claimed_done: map
                            .get("claimed_done")
                            .and_then(|v| v.as_bool())
                            .unwrap_or(false),
                    });
                }
                Ok(Turn {
                    output: stdout,
                    tokens: 0,
                    claimed_done: false,
                })
            }
            Reading::Profile(profile) => match crate::read_reply(profile, result.stdout_tail) {
                bl_run::executor::WorkReply::Reply { bytes, usage, .. } => Ok(Turn {
                    output: String::from_utf8_lossy(&bytes).into_owned(),
                    tokens: usage.map_or(0, |u| u.input_tokens + u.output_tokens),
                    claimed_done: false,
                }),
                bl_run::executor::WorkReply::Fault(m)
                | bl_run::executor::WorkReply::Contract(m)
                | bl_run::executor::WorkReply::Denied(m)
                | bl_run::executor::WorkReply::ApprovalRejected(m) => {
                    Err(runner_error(&self.name, m))
                }
                bl_run::executor::WorkReply::AwaitingApproval(nodes) => Err(runner_error(
                    &self.name,
                    format!("awaits approval of {}", nodes.join(", ")),
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn request(lap: u32) -> TurnRequest<'static> {
        TurnRequest {
            lap,
            prompt: "fix it",
            feedback: None,
            time_left: Duration::from_secs(10),
            wind_down: false,
        }
    }

    fn package() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("seed")).unwrap();
        std::fs::write(dir.path().join("seed/check.py"), "print('ok')\n").unwrap();
        std::fs::write(dir.path().join("seed/doc.md"), "draft\n").unwrap();
        dir
    }

    #[test]
    fn the_digest_moves_with_content_and_ignores_bookkeeping() {
        let pkg = package();
        let root = pkg.path().join("ws");
        let mut ws =
            ScratchWorkspace::prepare(pkg.path(), &root, &[], Prepare::Scratch, true).unwrap();
        let first = ws.digest().unwrap();
        std::fs::write(root.join(AGENT_OUTPUT), "I did it").unwrap();
        std::fs::create_dir_all(root.join("seed/__pycache__")).unwrap();
        std::fs::write(root.join("seed/__pycache__/x.pyc"), "x").unwrap();
        let touched = ws.digest().unwrap();
        assert_eq!(
            touched.content, first.content,
            "bookkeeping is not progress"
        );
        assert_ne!(touched.all, first.all, "but a gate could read it");
        std::fs::write(root.join("seed/doc.md"), "draft\n").unwrap();
        assert_eq!(
            ws.digest().unwrap(),
            touched,
            "rewriting the same bytes is not progress"
        );
        std::fs::write(root.join("seed/doc.md"), "final\n").unwrap();
        assert_ne!(ws.digest().unwrap().content, first.content);
    }

    #[test]
    fn quarantine_withholds_credential_names_and_reports_them() {
        let pkg = package();
        std::fs::create_dir_all(pkg.path().join("seed/sub")).unwrap();
        std::fs::write(pkg.path().join("seed/sub/.env"), "KEY=1").unwrap();
        std::fs::write(pkg.path().join("seed/key.pem"), "x").unwrap();
        let root = pkg.path().join("ws");
        let ws = ScratchWorkspace::prepare(pkg.path(), &root, &[], Prepare::Scratch, true).unwrap();
        assert_eq!(ws.withheld(), ["seed/key.pem", "seed/sub/.env"]);
        assert!(!root.join("seed/sub/.env").exists() && root.join("seed/doc.md").exists());
        let open = pkg.path().join("open");
        let ws =
            ScratchWorkspace::prepare(pkg.path(), &open, &[], Prepare::Scratch, false).unwrap();
        assert!(ws.withheld().is_empty() && open.join("seed/sub/.env").exists());
    }

    #[test]
    fn the_guard_sees_a_forbidden_path_change_or_vanish() {
        let pkg = package();
        let root = pkg.path().join("ws");
        let forbid = vec!["seed/check.py".to_string()];
        let mut ws =
            ScratchWorkspace::prepare(pkg.path(), &root, &forbid, Prepare::Scratch, true).unwrap();
        assert!(ws.forbidden_changes().unwrap().is_empty());
        std::fs::write(root.join("seed/check.py"), "raise SystemExit(0)\n").unwrap();
        assert_eq!(ws.forbidden_changes().unwrap(), forbid);
        std::fs::remove_file(root.join("seed/check.py")).unwrap();
        assert_eq!(ws.forbidden_changes().unwrap(), forbid);
    }

    #[test]
    fn the_stub_refuses_forbidden_and_escaping_writes_before_writing_anything() {
        let pkg = package();
        let root = pkg.path().join("ws");
        ScratchWorkspace::prepare(pkg.path(), &root, &[], Prepare::Scratch, true).unwrap();
        let cassette = |path: &str| {
            Cassette::parse(&format!(
                r#"{{"interactions":[{{"lap":"*","agent_output":"done","tokens":3,"actions":[
                    {{"type":"write_file","path":"seed/doc.md","content":"new"}},
                    {{"type":"write_file","path":"{path}","content":"x"}}]}}]}}"#
            ))
            .unwrap()
        };
        let forbid = vec!["seed/check.py".to_string()];
        let mut stub = StubRunner::new(cassette("seed/check.py"), &root, &forbid);
        let e = stub.turn(&request(1)).unwrap_err();
        assert!(e.message.contains("matches a forbidden path"), "{e:?}");
        let mut stub = StubRunner::new(cassette("../outside"), &root, &forbid);
        assert!(
            stub.turn(&request(1))
                .unwrap_err()
                .message
                .contains("outside the workspace")
        );
        assert_eq!(
            std::fs::read_to_string(root.join("seed/doc.md")).unwrap(),
            "draft\n"
        );
        let mut stub = StubRunner::new(cassette("seed/new.md"), &root, &forbid);
        let turn = stub.turn(&request(1)).unwrap();
        assert_eq!((turn.tokens, turn.output.as_str()), (3, "done"));
        assert_eq!(
            std::fs::read_to_string(root.join("seed/doc.md")).unwrap(),
            "new"
        );
        assert_eq!(
            std::fs::read_to_string(root.join(AGENT_OUTPUT)).unwrap(),
            "done"
        );
    }
}
