//! The per-invocation host state and the host side of every capability
//! interface. A fresh `HostState` is built for each call; nothing a plugin
//! does survives into the next one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bl_core::{CommandRunner, CommandSpec};
use wasmtime::ResourceLimiter;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::artifacts::{InputSet, OutputSink};
use crate::bindings::{artifacts, command, log, types, workspace};
use crate::limits::Limits;
use crate::workspace::WorkspaceDir;
use bl_core::plugin::{Capability, Grants};

/// One line of a plugin's structured log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogEntry {
    pub level: &'static str,
    pub message: String,
    pub fields: Vec<(String, String)>,
}

/// Why a host call ends the invocation instead of returning to the guest;
/// the runtime turns each into the matching [`crate::PluginError`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostStop {
    /// The plugin went over a byte limit (its log, its outputs).
    #[error("{what} went past {limit_bytes} bytes")]
    LimitExceeded {
        what: &'static str,
        limit_bytes: usize,
    },
    /// The call returned after the deadline: the guest is not resumed, so
    /// nothing it would decide afterwards can count.
    #[error("the deadline passed during a host call")]
    DeadlinePassed,
    /// A refused `memory.grow`: the guest traps instead of carrying on with
    /// the allocation it asked for missing.
    #[error("memory.grow past the limit")]
    MemoryRefused,
}

pub(crate) struct HostState {
    pub table: ResourceTable,
    wasi: WasiCtx,
    pub limiter: MemoryLimiter,
    grants: Grants,
    limits: Arc<Limits>,
    started: Instant,
    workspace_root: Option<PathBuf>,
    runner: Option<Arc<dyn CommandRunner>>,
    /// Paths the plugin tried to reach outside its workspace.
    pub escapes: Vec<String>,
    pub log: Vec<LogEntry>,
    log_bytes: usize,
    /// The last bytes the guest wrote to stderr (a Python traceback, a
    /// panic message), shown when it traps.
    pub stderr: StderrTail,
}

/// How much of a guest's stderr is kept: its tail.
pub(crate) const STDERR_TAIL_BYTES: usize = 4096;

/// A guest's stderr, of which only the last [`STDERR_TAIL_BYTES`] are kept.
#[derive(Clone, Default)]
pub(crate) struct StderrTail(Arc<std::sync::Mutex<std::collections::VecDeque<u8>>>);

impl StderrTail {
    pub fn text(&self) -> String {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&kept.iter().copied().collect::<Vec<u8>>()).into_owned()
    }
}

impl tokio::io::AsyncWrite for StderrTail {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.extend(buf);
        let over = kept.len().saturating_sub(STDERR_TAIL_BYTES);
        kept.drain(..over);
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

impl wasmtime_wasi::cli::IsTerminal for StderrTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for StderrTail {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl HostState {
    pub fn new(
        grants: Grants,
        limits: Arc<Limits>,
        workspace_root: Option<PathBuf>,
        runner: Option<Arc<dyn CommandRunner>>,
    ) -> Self {
        let stderr = StderrTail::default();
        HostState {
            table: ResourceTable::new(),
            wasi: deny_all_wasi(&grants, &stderr),
            stderr,
            limiter: MemoryLimiter {
                limit: limits.memory_bytes,
                hit: false,
            },
            grants,
            limits,
            started: Instant::now(),
            workspace_root,
            runner,
            escapes: Vec::new(),
            log: Vec::new(),
            log_bytes: 0,
        }
    }
}

/// WASI with nothing in it: no environment, arguments, files or sockets, an
/// empty stdin and discarded stdout/stderr. Clocks are frozen at the epoch
/// and randomness is a fixed stream unless `clock` / `random` were granted.
fn deny_all_wasi(grants: &Grants, stderr: &StderrTail) -> WasiCtx {
    let mut builder = WasiCtxBuilder::new();
    builder
        .stderr(stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    if !grants.allows(Capability::Clock) {
        builder.wall_clock(FrozenClock).monotonic_clock(FrozenClock);
    }
    if !grants.allows(Capability::Random) {
        builder
            .secure_random(wasmtime_wasi::Deterministic::new(vec![0]))
            .insecure_random(wasmtime_wasi::Deterministic::new(vec![0]))
            .insecure_random_seed(0);
    }
    builder.build()
}

struct FrozenClock;

impl wasmtime_wasi::HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

pub(crate) struct MemoryLimiter {
    limit: usize,
    pub hit: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.hit = true;
            // An error (not `Ok(false)`, which makes memory.grow return -1)
            // traps: a guest that ignored the -1 could still return a verdict.
            return Err(wasmtime::Error::new(HostStop::MemoryRefused));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

impl types::Host for HostState {}
impl workspace::Host for HostState {}
impl artifacts::Host for HostState {}

impl HostState {
    /// Every host call ends with this: past the deadline, the call traps
    /// rather than hand control back to the guest.
    fn in_time<T>(&self, value: T) -> wasmtime::Result<T> {
        if self.started.elapsed() >= self.limits.deadline {
            return Err(wasmtime::Error::new(HostStop::DeadlinePassed));
        }
        Ok(value)
    }

    fn note_escape<T>(&mut self, result: &Result<T, workspace::FsError>) {
        if let Err(workspace::FsError::Escape(path)) = result {
            self.escapes.push(path.clone());
        }
    }
}

impl workspace::HostDir for HostState {
    fn read(
        &mut self,
        dir: Resource<WorkspaceDir>,
        path: String,
    ) -> wasmtime::Result<Result<Vec<u8>, workspace::FsError>> {
        let result = self.table.get(&dir)?.read(&path);
        self.note_escape(&result);
        self.in_time(result)
    }

    fn list_dir(
        &mut self,
        dir: Resource<WorkspaceDir>,
        path: String,
    ) -> wasmtime::Result<Result<Vec<workspace::Entry>, workspace::FsError>> {
        let result = self.table.get(&dir)?.list(&path);
        self.note_escape(&result);
        self.in_time(result)
    }

    fn stat(
        &mut self,
        dir: Resource<WorkspaceDir>,
        path: String,
    ) -> wasmtime::Result<Result<Option<workspace::Entry>, workspace::FsError>> {
        let result = self.table.get(&dir)?.stat(&path);
        self.note_escape(&result);
        self.in_time(result)
    }

    fn drop(&mut self, dir: Resource<WorkspaceDir>) -> wasmtime::Result<()> {
        self.table.delete(dir)?;
        Ok(())
    }
}

impl artifacts::HostInputSet for HostState {
    fn entries(&mut self, set: Resource<InputSet>) -> wasmtime::Result<Vec<artifacts::InputInfo>> {
        Ok(self.table.get(&set)?.list())
    }

    fn read(
        &mut self,
        set: Resource<InputSet>,
        name: String,
    ) -> wasmtime::Result<Result<Vec<u8>, artifacts::ArtifactError>> {
        let result = self.table.get(&set)?.read(&name);
        self.in_time(result)
    }

    fn drop(&mut self, set: Resource<InputSet>) -> wasmtime::Result<()> {
        self.table.delete(set)?;
        Ok(())
    }
}

impl artifacts::HostOutputSink for HostState {
    fn declared(
        &mut self,
        sink: Resource<OutputSink>,
    ) -> wasmtime::Result<Vec<artifacts::OutputDecl>> {
        Ok(self.table.get(&sink)?.declared())
    }

    fn write(
        &mut self,
        sink: Resource<OutputSink>,
        name: String,
        bytes: Vec<u8>,
    ) -> wasmtime::Result<Result<(), artifacts::ArtifactError>> {
        let sink = self.table.get_mut(&sink)?;
        match sink.write(name, bytes) {
            // Past the cap the call ends: a transform does not get to decide
            // whether to publish a truncated set of outputs.
            Err(artifacts::ArtifactError::TooLarge(_)) => {
                Err(wasmtime::Error::new(HostStop::LimitExceeded {
                    what: "its outputs",
                    limit_bytes: sink.limit_bytes(),
                }))
            }
            result => self.in_time(result),
        }
    }

    fn drop(&mut self, sink: Resource<OutputSink>) -> wasmtime::Result<()> {
        // The runtime takes the sink out of the table itself after the call.
        let _ = sink;
        Ok(())
    }
}

impl command::Host for HostState {
    fn run(
        &mut self,
        request: command::CommandRequest,
    ) -> wasmtime::Result<Result<command::CommandOutput, command::CommandError>> {
        use command::CommandError as E;
        if !self.grants.allows(Capability::Command) {
            return Ok(Err(E::Denied(
                "the command capability was not granted".into(),
            )));
        }
        let (Some(root), Some(runner)) = (&self.workspace_root, &self.runner) else {
            return Ok(Err(E::Denied(
                "this invocation has no workspace or no command runner".into(),
            )));
        };
        // Never past the plugin's own deadline: the wasm deadline cannot
        // interrupt a host call, so the command must end in time by itself.
        let remaining = self.limits.deadline.saturating_sub(self.started.elapsed());
        let mut timeout = self.limits.command_timeout.min(remaining);
        if let Some(ms) = request.timeout_ms {
            timeout = timeout.min(Duration::from_millis(ms.into()));
        }
        let spec = CommandSpec {
            argv: request.argv,
            workspace: root.clone(),
            workspace_writable: false,
            stdin: request.stdin.unwrap_or_default(),
            timeout,
            output_cap: self.limits.command_output_bytes,
            stream: false,
            env: Vec::new(),
            private_dir: None,
            home: None,
        };
        let result = match runner.run(&spec) {
            Ok(result) => Ok(command::CommandOutput {
                exit_code: result.exit_code,
                stdout_tail: result.stdout_tail,
                stderr_tail: result.stderr_tail,
                truncated: result.truncated,
                timed_out: result.timed_out,
                duration_ms: result.duration.as_millis() as u64,
            }),
            Err(bl_core::CommandError::Denied(m)) => Err(E::Denied(m)),
            Err(bl_core::CommandError::Spawn(m)) => Err(E::Spawn(m)),
            Err(e @ bl_core::CommandError::Interrupted(_)) => Err(E::Spawn(e.to_string())),
        };
        self.in_time(result)
    }
}

impl log::Host for HostState {
    fn emit(
        &mut self,
        level: log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        if !self.grants.allows(Capability::Log) {
            // Admission refuses an ungranted log import; this is the backstop.
            return Err(wasmtime::Error::msg("the log capability was not granted"));
        }
        self.log_bytes +=
            message.len() + fields.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        if self.log_bytes > self.limits.max_log_bytes {
            return Err(wasmtime::Error::new(HostStop::LimitExceeded {
                what: "its log",
                limit_bytes: self.limits.max_log_bytes,
            }));
        }
        let level = match level {
            log::Level::Debug => "debug",
            log::Level::Info => "info",
            log::Level::Warn => "warn",
            log::Level::Error => "error",
        };
        self.log.push(LogEntry {
            level,
            message,
            fields,
        });
        Ok(())
    }
}
