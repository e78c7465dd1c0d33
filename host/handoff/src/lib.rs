//! bl's artifact handoff at run time, seed 002's artifact graph made real.
//! [`Handoff`] implements bl-run's [`Stage`] and [`Judge`] ports for one run
//! directory:
//!
//! - **staging** makes each attempt's workspace and hands it its inputs:
//!   every producer's published file is re-hashed against the digest the
//!   event log recorded for it (a changed byte stops the run), a
//!   `system_only` file is handed to transforms only, and the copies are
//!   read-only;
//! - **judging** decides a node from its workspace once the worker is done:
//!   each declared output must be fresh (written in this attempt), non-empty
//!   and well-formed for its type, then the completion contracts for it and
//!   the node's gate plugin decide; what passes is published into the run's
//!   `workspace/` with an output manifest;
//! - [`TransformWorker`] runs `transform:<plugin>@vN` nodes as wasm, with the
//!   seed the host derives from the run id and the input digests.
//!
//! Plugins come through [`Plugins`] (the CLI composes the runtime and the
//! search path); this crate never decides a verdict itself beyond the
//! generic checks seed 002 names, and it touches only the run directory.

pub mod plugins;

use std::collections::BTreeMap;
use std::io::{Read, Write};

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bl_plugins::ContractRequest;
use bl_run::executor::{
    InputToStage, Judge, JudgeFuture, JudgeRequest, Judgement, PublishedOutput, Ruling, Stage,
    StageError, StageRequest, StagedInput, Task, WorkFuture, WorkReply, WorkRequest, Worker,
    media_type_of,
};
use bl_run::reply::{ReplyRequest, ReplyRuling};
use bl_run::schedule::OutputPort;
use serde_json::{Value, json};

pub use plugins::Plugins;

/// The largest artifact a node may publish or be handed.
pub const MAX_ARTIFACT_BYTES: u64 = 64 << 20;

/// Where the ledger keeps its integrity records, in the run's workspace and
/// in every attempt's (seed 002's reserved `workspace/manifests/`).
pub const MANIFESTS: &str = "workspace/manifests";
/// Where an attempt's inputs are staged: `workspace/inputs/<node>/<port>/`.
pub const INPUTS: &str = "workspace/inputs";

/// The first-party completion contracts: output basename pattern → the
/// kind the `contracts` plugin checks it as.
pub const FIRST_PARTY_CONTRACTS: &[&str] =
    &["implementer-summary.json", "plan.json", "*.diff", "*.patch"];
/// The plugin that implements them.
pub const CONTRACTS_PLUGIN: &str = "contracts";

/// Checks a subgraph node's child run from the receipt its worker wrote:
/// `Ok` with why it holds, `Err` with why not.
pub trait SubgraphCheck: Send + Sync {
    fn check(&self, receipt: &[u8]) -> Result<String, ChildRunRefused>;
}

/// Why a subgraph node's child run does not hold up, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ChildRunRefused(pub String);

/// The handoff for one run directory.
#[derive(Clone)]
pub struct Handoff {
    /// The run directory; published outputs live under its `workspace/`.
    pub run_dir: PathBuf,
    /// Where attempt workspaces are made (`<run>/work/<run_id>`).
    pub work_root: PathBuf,
    pub plugins: Arc<Plugins>,
    pub subgraphs: Option<Arc<dyn SubgraphCheck>>,
}

impl Handoff {
    pub fn new(run_dir: &Path, work_root: &Path, plugins: Arc<Plugins>) -> Self {
        // Absolute: cages bind these paths, and a relative one means
        // something else inside.
        Handoff {
            run_dir: std::path::absolute(run_dir).unwrap_or(run_dir.to_path_buf()),
            work_root: std::path::absolute(work_root).unwrap_or(work_root.to_path_buf()),
            plugins,
            subgraphs: None,
        }
    }
}

/// The attempt's workspace (`<node>-<32 hex>`, as bounded-loops names it).
/// Whether `path` is named as [`work_dir`] names `node`'s workspaces in
/// `root`: nothing else (`..`, another node's) passes.
fn names_work_dir(root: &Path, node: &str, path: &Path) -> bool {
    let nonce = path
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.strip_prefix(node)?.strip_prefix('-'));
    path.parent() == Some(root)
        && nonce.is_some_and(|n| n.len() == 32 && n.bytes().all(|b| b.is_ascii_hexdigit()))
}

pub fn work_dir(root: &Path, node: &str) -> std::io::Result<PathBuf> {
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| std::io::Error::other(e.to_string()))?;
    let dir = root.join(format!("{node}-{}", hex::encode(nonce)));
    match std::fs::create_dir(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(root)?;
            std::fs::create_dir(&dir)?;
        }
        other => other?,
    }
    Ok(dir)
}

/// The components of a relative path, refusing anything but plain names
/// (no `..`, no absolute path, no `.`).
fn names(rel: &str) -> std::io::Result<Vec<&std::ffi::OsStr>> {
    let mut out = Vec::new();
    for c in Path::new(rel).components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            _ => {
                return Err(std::io::Error::other(format!(
                    "'{rel}' is not a plain relative path"
                )));
            }
        }
    }
    if out.is_empty() {
        return Err(std::io::Error::other("an empty path"));
    }
    Ok(out)
}

/// Opens `root`, confined (cap-std: nothing outside it can be reached).
fn confined(root: &Path) -> std::io::Result<Dir> {
    if std::fs::symlink_metadata(root)?.file_type().is_symlink() {
        return Err(std::io::Error::other(format!(
            "{} is a symlink",
            root.display()
        )));
    }
    Dir::open_ambient_dir(root, cap_std::ambient_authority())
}

/// The directory holding `rel`'s last name, walked from `root` one name at
/// a time with a symlink anywhere on the way refused (not only one that
/// leads out), made on the way when `make`.
fn parent_of(root: &Path, rel: &str, make: bool) -> std::io::Result<(Dir, std::ffi::OsString)> {
    let parts = names(rel)?;
    let mut dir = confined(root)?;
    for name in &parts[..parts.len() - 1] {
        if make {
            // Nodes publish in parallel: another may make it first.
            match dir.create_dir(name) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
        }
        match dir.symlink_metadata(name) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(std::io::Error::other(format!(
                    "'{rel}' passes through a symlink ({}); a published or declared file never does",
                    name.to_string_lossy()
                )));
            }
            Ok(m) if !m.is_dir() => {
                return Err(std::io::Error::other(format!(
                    "'{rel}': {} is not a directory",
                    name.to_string_lossy()
                )));
            }
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        dir = dir.open_dir(name)?;
    }
    Ok((dir, parts[parts.len() - 1].to_os_string()))
}

/// Reads the regular file at `rel` under `root`: never through a symlink,
/// never a FIFO or device, at most `cap` bytes.
fn read_beneath(root: &Path, rel: &str, cap: u64) -> std::io::Result<Vec<u8>> {
    let (dir, name) = parent_of(root, rel, false)?;
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = dir.open_with(&name, &options)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > cap {
        return Err(std::io::Error::other(format!(
            "{} bytes, over the {cap}-byte limit",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.into_std().take(cap + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Writes `bytes` at `rel` under `root` (making its directories), never
/// through a symlink: a new file beside it, renamed over it.
fn write_beneath(root: &Path, rel: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(root)?;
    let (dir, name) = parent_of(root, rel, true)?;
    let tmp = format!(".{}.bl-tmp", name.to_string_lossy());
    let _ = dir.remove_file(&tmp);
    let mut options = OpenOptions::new();
    options
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW);
    let mut file = dir.open_with(&tmp, &options)?.into_std();
    file.write_all(bytes)?;
    drop(file);
    dir.rename(&tmp, &dir, &name)
}

fn write_json(root: &Path, rel: &str, value: &Value) -> std::io::Result<()> {
    write_beneath(root, rel, bl_core::python_json(value).as_bytes(), 0o644)
}

impl Stage for Handoff {
    fn stage(&self, request: &StageRequest) -> Result<(PathBuf, Vec<StagedInput>), StageError> {
        let workspace = work_dir(&self.work_root, &request.node_id)
            .map_err(|e| StageError::Io(format!("cannot make the work directory: {e}")))?;
        let mut staged = Vec::new();
        for input in &request.inputs {
            staged.push(self.stage_input(request, input, &workspace)?);
        }
        if !staged.is_empty() {
            let manifest = json!({
                "attempt": request.attempt, "node_id": request.node_id,
                "inputs": staged.iter().map(|i| json!({
                    "digest": i.digest, "from_node": i.from_node, "from_port": i.from_port,
                    "kind": i.kind, "path": i.path, "port": i.port, "size": i.size,
                })).collect::<Vec<_>>(),
                "repair_round": request.round,
            });
            let name = format!("{MANIFESTS}/{}.inputs.json", request.node_id);
            for root in [&workspace, &self.run_dir] {
                write_json(root, &name, &manifest)
                    .map_err(|e| StageError::Io(format!("cannot write {name}: {e}")))?;
            }
        }
        Ok((workspace, staged))
    }

    /// Writes the dispatch marker (`.bl-dispatched`) and returns its own
    /// modification time: the file system stamps outputs with a coarse
    /// clock, so freshness compares stamps of one clock, never a stamp
    /// with the wall clock.
    fn mark_dispatch(&self, workspace: &Path) -> u64 {
        let marker = workspace.join(DISPATCH_MARKER);
        let stamped = std::fs::write(&marker, b"")
            .and_then(|_| std::fs::metadata(&marker))
            .and_then(|m| m.modified());
        match stamped {
            Ok(t) => t
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            // Without a marker, the wall clock less a tick of the coarse one.
            Err(_) => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| (d.as_millis() as u64).saturating_sub(10)),
        }
    }

    /// Only one of the node's own workspaces in this run's work root
    /// (`<node>-<nonce>`, as [`work_dir`] names them), reached through no
    /// symlink: the record names it, and a record is not trusted to point
    /// anywhere else.
    fn kept(&self, node_id: &str, workspace: &Path) -> bool {
        names_work_dir(&self.work_root, node_id, workspace)
            && std::fs::symlink_metadata(workspace).is_ok_and(|m| m.is_dir())
    }
}

/// The file whose stamp marks when an attempt's worker was dispatched.
pub const DISPATCH_MARKER: &str = ".bl-dispatched";

impl Handoff {
    fn stage_input(
        &self,
        request: &StageRequest,
        input: &InputToStage,
        workspace: &Path,
    ) -> Result<StagedInput, StageError> {
        let node = &request.node_id;
        let port = format!("{node}.{}", input.port);
        let producer = format!("{}.{}", input.from_node, input.from_port);
        if input.system_only && !request.transform {
            return Err(StageError::Integrity(format!(
                "input {port}: {producer} is system_only, and only a transform may be handed it; '{node}' is not started"
            )));
        }
        let bytes = read_beneath(&self.run_dir, &input.source, MAX_ARTIFACT_BYTES).map_err(|e| {
            StageError::Integrity(format!(
                "input {port}: {} published by {producer} cannot be read ({e}); '{node}' is not started",
                input.source
            ))
        })?;
        let actual = bl_core::Sha256Digest::of(&bytes).to_string();
        if actual != input.digest {
            return Err(StageError::Integrity(format!(
                "input {port}: {} published by {producer} as {} now hashes to {actual}: it changed after it was published, so '{node}' is not started",
                input.source, input.digest
            )));
        }
        let basename = Path::new(&input.source)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| input.port.clone());
        let rel = format!("{INPUTS}/{node}/{}/{basename}", input.port);
        write_beneath(workspace, &rel, &bytes, 0o444)
            .map_err(|e| StageError::Io(format!("cannot stage {rel}: {e}")))?;
        Ok(StagedInput {
            port: input.port.clone(),
            from_node: input.from_node.clone(),
            from_port: input.from_port.clone(),
            path: rel,
            digest: actual,
            size: bytes.len() as u64,
            kind: input.kind.clone(),
        })
    }
}

/// A declared output as the judge read it.
struct Output<'a> {
    port: &'a OutputPort,
    bytes: Vec<u8>,
}

/// Why a declared output is not accepted (missing, a symlink, stale,
/// empty, malformed), in words: the attempt is rejected, and retried.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unaccepted(String);

/// Reads a declared output and checks seed 002's generic rules: a regular
/// file, written in this attempt, non-empty, well-formed for its type.
fn read_output(workspace: &Path, port: &OutputPort, since_ms: u64) -> Result<Vec<u8>, Unaccepted> {
    let at = &port.path;
    let (dir, name) = parent_of(workspace, at, false).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Unaccepted(format!(
            "{at}: declared output '{}' was not written",
            port.port
        )),
        _ => Unaccepted(format!("{at}: {e}")),
    })?;
    let meta = dir.symlink_metadata(&name).map_err(|_| {
        Unaccepted(format!(
            "{at}: declared output '{}' was not written",
            port.port
        ))
    })?;
    if meta.file_type().is_symlink() {
        return Err(Unaccepted(format!(
            "{at}: is a symlink; a declared output must be a regular file"
        )));
    }
    if !meta.is_file() {
        return Err(Unaccepted(format!("{at}: is not a regular file")));
    }
    let modified_ms = meta
        .modified()
        .ok()
        .map(|t| t.into_std())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    if modified_ms < since_ms {
        return Err(Unaccepted(format!(
            "{at}: is stale: it was last written before this attempt started"
        )));
    }
    if meta.len() == 0 {
        return Err(Unaccepted(format!("{at}: is empty")));
    }
    let bytes = read_beneath(workspace, at, MAX_ARTIFACT_BYTES)
        .map_err(|e| Unaccepted(format!("{at}: {e}")))?;
    well_formed(port, &bytes).map_err(|why| Unaccepted(format!("{at}: {}", why.0)))?;
    Ok(bytes)
}

/// Whether `bytes` parse as the port's type (JSON for `json` or a `.json`
/// name, YAML for `yaml`, UTF-8 text for `markdown` and `text`).
fn well_formed(port: &OutputPort, bytes: &[u8]) -> Result<(), Unaccepted> {
    let name = port.path.to_ascii_lowercase();
    let kind = port.kind.as_str();
    if kind == "json" || name.ends_with(".json") {
        return serde_json::from_slice::<Value>(bytes)
            .map(|_| ())
            .map_err(|e| Unaccepted(format!("is not valid JSON: {e}")));
    }
    let textual = matches!(kind, "markdown" | "text" | "yaml")
        || [".md", ".txt", ".yaml", ".yml"]
            .iter()
            .any(|ext| name.ends_with(ext));
    if !textual {
        return Ok(());
    }
    let text =
        std::str::from_utf8(bytes).map_err(|_| Unaccepted(format!("is not UTF-8 {kind}")))?;
    if kind == "yaml" || name.ends_with(".yaml") || name.ends_with(".yml") {
        bl_graph::yaml::parse_yaml(text)
            .map(|_| ())
            .map_err(|e| Unaccepted(format!("is not valid YAML: {e}")))?;
    }
    Ok(())
}

/// The contracts an output must pass: (pattern, plugin, config). A port's
/// own `contract` is a first-party kind or a contract plugin's name; with
/// none, the first-party kinds its basename matches.
pub fn contracts_for(port: &OutputPort) -> Vec<(String, String, String)> {
    if let Some(named) = &port.contract {
        return if FIRST_PARTY_CONTRACTS.contains(&named.as_str()) {
            vec![(
                named.clone(),
                CONTRACTS_PLUGIN.to_string(),
                json!({"kind": named}).to_string(),
            )]
        } else {
            vec![(named.clone(), named.clone(), "{}".to_string())]
        };
    }
    let basename = port.path.rsplit('/').next().unwrap_or(&port.path);
    FIRST_PARTY_CONTRACTS
        .iter()
        .filter(|pattern| match pattern.strip_prefix('*') {
            Some(suffix) => basename.ends_with(suffix),
            None => basename == **pattern,
        })
        .map(|p| {
            (
                p.to_string(),
                CONTRACTS_PLUGIN.to_string(),
                "{}".to_string(),
            )
        })
        .collect()
}

impl Judge for Handoff {
    fn rule_on_reply(&self, request: &ReplyRequest) -> ReplyRuling {
        bl_run::reply::rule(request)
    }

    fn judge(&self, request: JudgeRequest) -> JudgeFuture {
        let this = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || this.judge_now(&request))
                .await
                .unwrap_or_else(|e| Judgement {
                    decision: Ruling::Broken(format!("the judge task failed: {e}")),
                    ..empty_judgement()
                })
        })
    }
}

fn empty_judgement() -> Judgement {
    Judgement {
        decision: Ruling::Pass(String::new()),
        route: None,
        published: Vec::new(),
        checked: Vec::new(),
        contracts: BTreeMap::new(),
        plugins: Vec::new(),
        evidence_digest: None,
    }
}

impl Handoff {
    fn judge_now(&self, request: &JudgeRequest) -> Judgement {
        let mut judgement = empty_judgement();
        let decision = self.decide(request, &mut judgement);
        judgement.decision = decision;
        judgement
    }

    fn decide(&self, request: &JudgeRequest, j: &mut Judgement) -> Ruling {
        let mut reasons = Vec::new();
        if let Some(receipt) = &request.subgraph_receipt {
            let Some(check) = &self.subgraphs else {
                return Ruling::Broken("no subgraph check is composed into this run".into());
            };
            match check.check(receipt) {
                Ok(why) => reasons.push(why),
                Err(why) => return Ruling::Reject(why.0),
            }
        }
        let mut outputs = Vec::new();
        for port in &request.outputs {
            j.checked.push(port.path.clone());
            match read_output(&request.workspace, port, request.dispatched_ms) {
                Ok(bytes) => outputs.push(Output { port, bytes }),
                Err(why) => return Ruling::Reject(format!("artifact_contract: {}", why.0)),
            }
        }
        if !outputs.is_empty() {
            let paths: Vec<&str> = outputs.iter().map(|o| o.port.path.as_str()).collect();
            reasons.push(format!(
                "artifact completion: {} declared output(s) fresh, non-empty and well-formed ({})",
                outputs.len(),
                paths.join(", ")
            ));
        }
        for output in &outputs {
            if let Err(decision) = self.run_contracts(request, output.port, j) {
                return decision;
            }
        }
        if !j.contracts.is_empty() {
            let names: Vec<&str> = j.contracts.keys().map(String::as_str).collect();
            reasons.push(format!("contracts passed: {}", names.join(", ")));
        }
        if let Some(gate) = &request.gate {
            let mut grants = gate.grants.clone();
            grants.extend(request.grants.iter().cloned());
            let (plugin, used) = match self.plugins.gate(&gate.plugin, &grants) {
                Ok(loaded) => loaded,
                Err((e, found)) => {
                    j.plugins.extend(found);
                    return Ruling::Broken(format!("gate plugin '{}': {e}", gate.plugin));
                }
            };
            j.plugins.push(used);
            let runtime = match self.plugins.runtime() {
                Ok(r) => r,
                Err(e) => return Ruling::Broken(e.0),
            };
            let verdict = match runtime.check(&plugin, &request.workspace, &gate.config) {
                Ok(invocation) => invocation.value,
                Err(e) => return Ruling::Broken(format!("gate plugin '{}': {e}", gate.plugin)),
            };
            j.evidence_digest = verdict.evidence_digest.clone();
            if let Some(routes) = &request.routes {
                j.route = Some(bl_run::reply::route_of_gate(routes, verdict.passed));
                reasons.push(format!(
                    "gate plugin '{}' {}: {}",
                    gate.plugin,
                    if verdict.passed {
                        "passed"
                    } else {
                        "did not pass"
                    },
                    verdict.summary
                ));
            } else if verdict.passed {
                reasons.push(format!(
                    "gate plugin '{}' passed: {}",
                    gate.plugin, verdict.summary
                ));
            } else {
                return Ruling::Reject(format!(
                    "gate plugin '{}' rejected the workspace: {}",
                    gate.plugin, verdict.summary
                ));
            }
        }
        if let Err(why) = self.publish(request, &outputs, j) {
            return Ruling::Broken(why.to_string());
        }
        Ruling::Pass(reasons.join("; "))
    }

    fn run_contracts(
        &self,
        request: &JudgeRequest,
        port: &OutputPort,
        j: &mut Judgement,
    ) -> Result<(), Ruling> {
        for (pattern, plugin, config) in contracts_for(port) {
            let (contract, used) = self
                .plugins
                .contract(&plugin)
                .map_err(|e| Ruling::Broken(format!("{}: {pattern} contract: {e}", port.path)))?;
            if !j
                .plugins
                .iter()
                .any(|p| p.component_digest == used.component_digest)
            {
                j.plugins.push(used);
            }
            let runtime = self.plugins.runtime().map_err(|e| Ruling::Broken(e.0))?;
            let asked = ContractRequest {
                artifact: port.path.clone(),
                dispatch_started_ms: request.dispatched_ms,
            };
            let verdict = runtime
                .check_contract(&contract, &request.workspace, &asked, &config)
                .map_err(|e| {
                    Ruling::Broken(format!(
                        "{}: {pattern} contract could not decide: {e}",
                        port.path
                    ))
                })?
                .value;
            if !verdict.passed {
                j.contracts.insert(pattern.clone(), "fail".into());
                return Err(Ruling::ContractBroken(format!(
                    "{}: {pattern} contract: {}",
                    port.path, verdict.summary
                )));
            }
            j.contracts.insert(pattern, "pass".into());
        }
        Ok(())
    }

    /// Publishes what passed: each output into the run's workspace at its
    /// declared path, and the node's output manifest beside the others.
    fn publish(
        &self,
        request: &JudgeRequest,
        outputs: &[Output],
        j: &mut Judgement,
    ) -> std::io::Result<()> {
        if outputs.is_empty() {
            return Ok(());
        }
        for output in outputs {
            let port = output.port;
            // A system_only output is for the operator: not even the
            // caged user may read the published copy.
            let mode = if port.system_only { 0o600 } else { 0o644 };
            write_beneath(&self.run_dir, &port.path, &output.bytes, mode).map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot publish {}: {e}", port.path))
            })?;
            j.published.push(PublishedOutput {
                port: port.port.clone(),
                path: port.path.clone(),
                kind: port.kind.clone(),
                system_only: port.system_only,
                digest: bl_core::Sha256Digest::of(&output.bytes).to_string(),
                size: output.bytes.len() as u64,
                bytes: output.bytes.clone(),
            });
        }
        let manifest = json!({
            "attempt": request.attempt, "node_id": request.node_id,
            "outputs": j.published.iter().map(|o| json!({
                "digest": o.digest, "kind": o.kind, "path": o.path, "port": o.port,
                "sha256": o.digest.trim_start_matches("sha256:"), "size": o.size,
                "visibility": if o.system_only { "system_only" } else { "consumer" },
            })).collect::<Vec<_>>(),
            "repair_round": request.round,
        });
        let name = format!("{MANIFESTS}/{}.outputs.json", request.node_id);
        write_json(&self.run_dir, &name, &manifest)
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {name}: {e}")))
    }
}

/// Runs `transform:<plugin>@vN` nodes: the plugin reads the staged inputs
/// (re-verified), writes the declared outputs, and is handed the seed the
/// host derives from the run id and the input digests, so a re-run of the
/// same inputs publishes the same bytes.
pub struct TransformWorker {
    pub plugins: Arc<Plugins>,
}

impl Worker for TransformWorker {
    fn work(&self, request: WorkRequest) -> WorkFuture {
        let plugins = self.plugins.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || transform(&plugins, &request))
                .await
                .unwrap_or_else(|e| WorkReply::Fault(format!("transform task failed: {e}")))
        })
    }
}

fn transform(plugins: &Plugins, request: &WorkRequest) -> WorkReply {
    let Task::Transform {
        plugin,
        major,
        config,
    } = &request.task
    else {
        return WorkReply::Fault(format!("node '{}' is not a transform", request.node_id));
    };
    let (loaded, used) = match plugins.transform(plugin, *major) {
        Ok(l) => l,
        Err(e) => {
            return WorkReply::Denied(format!("transform:{plugin}@v{major} cannot run: {e}"));
        }
    };
    let mut inputs = Vec::new();
    for input in &request.inputs {
        let bytes = match read_beneath(&request.workspace, &input.path, MAX_ARTIFACT_BYTES) {
            Ok(b) => b,
            Err(e) => return WorkReply::Fault(format!("{}: {e}", input.path)),
        };
        if bl_core::Sha256Digest::of(&bytes).to_string() != input.digest {
            return WorkReply::Denied(format!(
                "{}: changed after it was staged; the transform is not run",
                input.path
            ));
        }
        let basename = input.path.rsplit('/').next().unwrap_or(&input.path);
        inputs.push(bl_plugins::InputArtifact {
            name: format!("{}/{basename}", input.port),
            media_type: media_type_of(&input.kind).to_string(),
            bytes,
        });
    }
    let outputs: Vec<bl_plugins::OutputDeclaration> = request
        .outputs
        .iter()
        .map(|o| bl_plugins::OutputDeclaration {
            name: o.port.clone(),
            media_type: media_type_of(&o.kind).to_string(),
            visibility: if o.system_only {
                bl_plugins::Visibility::SystemOnly
            } else {
                bl_plugins::Visibility::Consumer
            },
        })
        .collect();
    let seed = bl_plugins::transform_seed(&request.run_id, &inputs);
    let runtime = match plugins.runtime() {
        Ok(r) => r,
        Err(e) => return WorkReply::Denied(e.0),
    };
    let done = match runtime.transform(&loaded, inputs, outputs, &seed, config) {
        Ok(d) => d.value,
        Err(e) => {
            return WorkReply::Denied(format!("transform:{plugin}@v{major} could not run: {e}"));
        }
    };
    for published in &done.outputs {
        let Some(port) = request.outputs.iter().find(|o| o.port == published.name) else {
            continue;
        };
        if let Err(e) = write_beneath(&request.workspace, &port.path, &published.bytes, 0o644) {
            return WorkReply::Fault(format!("cannot write {}: {e}", port.path));
        }
    }
    WorkReply::Reply {
        bytes: done.summary.into_bytes(),
        usage: None,
        reported_by: format!("transform:{plugin}"),
        plugins: vec![used],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace a record names is judged again only if it is one the
    /// node's own staging would have made.
    #[test]
    fn only_a_nodes_own_work_dir_is_taken_from_a_record() {
        let root = tempfile::tempdir().unwrap();
        let made = work_dir(root.path(), "a").unwrap();
        assert!(names_work_dir(root.path(), "a", &made));
        assert!(!names_work_dir(root.path(), "ab", &made), "another node's");
        assert!(!names_work_dir(root.path(), "a", &root.path().join("..")));
        assert!(!names_work_dir(root.path(), "a", root.path()));
        assert!(!names_work_dir(root.path(), "a", &root.path().join("a-x")));
        let nested = made.join(made.file_name().unwrap());
        assert!(
            !names_work_dir(root.path(), "a", &nested),
            "not in the root"
        );
    }
}
