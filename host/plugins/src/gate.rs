//! Loading and calling `gate` components.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bl_core::{Finding, GateOutcome, Location, Severity, Verdict};
use wasmtime::component::{HasSelf, Linker, Resource, ResourceTable};
use wasmtime::{Config, Engine, ResourceLimiter, Store, Trap};

use crate::cache::ComponentCache;
use crate::error::PluginError;
use crate::workspace::WorkspaceDir;

pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit/plugin",
        world: "gate",
        with: { "bl:plugin/workspace.dir": crate::workspace::WorkspaceDir },
        imports: { default: trappable },
    });
}

use bindings::bl::plugin::{types, workspace};

/// How often the epoch ticker advances; the deadline's resolution.
const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Per-invocation limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wall clock for one call, from instantiation to return.
    pub deadline: Duration,
    /// The most linear memory a plugin instance may grow to.
    pub memory_bytes: usize,
    /// The largest file one `workspace.dir.read` returns.
    pub max_read_bytes: u64,
    /// The most bytes of summary and findings text a verdict may carry.
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(10),
            memory_bytes: 256 << 20,
            max_read_bytes: 16 << 20,
            max_output_bytes: 1 << 20,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct RuntimeConfig {
    /// Where compiled components are cached; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
    pub limits: Limits,
}

/// One wasmtime engine and everything shared across invocations.
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    cache: Option<ComponentCache>,
    limits: Limits,
    ticker_stop: Arc<AtomicBool>,
}

/// A gate component compiled and linked, ready to instantiate cheaply.
pub struct GatePlugin {
    name: String,
    pre: bindings::GatePre<HostState>,
}

impl GatePlugin {
    pub fn name(&self) -> &str {
        &self.name
    }
}

pub(crate) struct HostState {
    table: ResourceTable,
    limiter: MemoryLimiter,
}

struct MemoryLimiter {
    limit: usize,
    hit: bool,
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
            return Ok(false);
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

impl workspace::HostDir for HostState {
    fn read(
        &mut self,
        dir: Resource<WorkspaceDir>,
        path: String,
    ) -> wasmtime::Result<Result<Vec<u8>, workspace::FsError>> {
        Ok(self.table.get(&dir)?.read(&path))
    }

    fn list_dir(
        &mut self,
        dir: Resource<WorkspaceDir>,
        path: String,
    ) -> wasmtime::Result<Result<Vec<workspace::Entry>, workspace::FsError>> {
        Ok(self.table.get(&dir)?.list(&path))
    }

    fn stat(
        &mut self,
        dir: Resource<WorkspaceDir>,
        path: String,
    ) -> wasmtime::Result<Result<Option<workspace::Entry>, workspace::FsError>> {
        Ok(self.table.get(&dir)?.stat(&path))
    }

    fn drop(&mut self, dir: Resource<WorkspaceDir>) -> wasmtime::Result<()> {
        self.table.delete(dir)?;
        Ok(())
    }
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self, PluginError> {
        let mut wasm = Config::new();
        wasm.epoch_interruption(true);
        let engine = Engine::new(&wasm).map_err(|e| PluginError::Runtime(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        bindings::Gate::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
            .map_err(|e| PluginError::Runtime(format!("{e:#}")))?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (ticking_engine, stop) = (engine.clone(), ticker_stop.clone());
        std::thread::Builder::new()
            .name("bl-epoch-ticker".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    ticking_engine.increment_epoch();
                }
            })
            .map_err(|e| PluginError::Runtime(format!("cannot start the epoch ticker: {e}")))?;

        let cache = config
            .cache_dir
            .map(|dir| ComponentCache::new(dir, &engine));
        Ok(Runtime {
            engine,
            linker,
            cache,
            limits: config.limits,
            ticker_stop,
        })
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether `bytes` is already compiled in the on-disk cache.
    pub fn is_cached(&self, bytes: &[u8]) -> bool {
        self.cache.as_ref().is_some_and(|c| c.is_cached(bytes))
    }

    /// Compiles (or loads from the cache) and links a gate component.
    pub fn load_gate(&self, name: &str, bytes: &[u8]) -> Result<GatePlugin, PluginError> {
        let load_error = |e: wasmtime::Error| PluginError::Load {
            plugin: name.to_string(),
            message: format!("{e:#}"),
        };
        let component = match &self.cache {
            Some(cache) => cache.load(&self.engine, bytes),
            None => wasmtime::component::Component::new(&self.engine, bytes),
        }
        .map_err(load_error)?;
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(load_error)?;
        let pre = bindings::GatePre::new(instance_pre).map_err(load_error)?;
        Ok(GatePlugin {
            name: name.to_string(),
            pre,
        })
    }

    /// Runs the gate on `workspace` with the operator's JSON `config`, in a
    /// fresh store with this runtime's limits.
    pub fn check(
        &self,
        gate: &GatePlugin,
        workspace: &Path,
        config: &str,
    ) -> Result<Verdict, PluginError> {
        let plugin = gate.name.clone();
        let dir = WorkspaceDir::open(workspace, self.limits.max_read_bytes).map_err(|e| {
            PluginError::Workspace {
                path: workspace.display().to_string(),
                message: e.to_string(),
            }
        })?;
        let state = HostState {
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                limit: self.limits.memory_bytes,
                hit: false,
            },
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        let ticks = (self.limits.deadline.as_nanos() / EPOCH_TICK.as_nanos()).max(1) as u64;
        store.set_epoch_deadline(ticks);

        let result = (|| {
            let instance = gate.pre.instantiate(&mut store)?;
            let handle = store.data_mut().table.push(dir)?;
            let borrowed = Resource::<WorkspaceDir>::new_borrow(handle.rep());
            let result = instance.call_check(&mut store, borrowed, config)?;
            store.data_mut().table.delete(handle)?;
            Ok::<_, wasmtime::Error>(result)
        })();

        match result {
            Ok(Ok(verdict)) => self.accept_verdict(&plugin, verdict),
            Ok(Err(types::PluginError::BadConfig(message))) => {
                Err(PluginError::BadConfig { plugin, message })
            }
            Ok(Err(types::PluginError::Capability(message))) => {
                Err(PluginError::Capability { plugin, message })
            }
            Ok(Err(types::PluginError::Internal(message))) => {
                Err(PluginError::Internal { plugin, message })
            }
            Err(error) => Err(self.classify_trap(plugin, error, store.data().limiter.hit)),
        }
    }

    /// Runs the gate and folds every failure into `GateOutcome::Error`.
    pub fn judge(&self, gate: &GatePlugin, workspace: &Path, config: &str) -> GateOutcome {
        match self.check(gate, workspace, config) {
            Ok(verdict) => GateOutcome::from_verdict(verdict),
            Err(error) => GateOutcome::Error(error.to_string()),
        }
    }

    fn classify_trap(
        &self,
        plugin: String,
        error: wasmtime::Error,
        memory_hit: bool,
    ) -> PluginError {
        if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            return PluginError::Timeout {
                plugin,
                deadline: self.limits.deadline,
            };
        }
        if memory_hit {
            return PluginError::MemoryLimit {
                plugin,
                limit_bytes: self.limits.memory_bytes,
            };
        }
        PluginError::Trap {
            plugin,
            message: format!("{error:#}"),
        }
    }

    fn accept_verdict(
        &self,
        plugin: &str,
        verdict: types::Verdict,
    ) -> Result<Verdict, PluginError> {
        let size = verdict.summary.len()
            + verdict
                .findings
                .iter()
                .map(|f| f.message.len() + f.rule.as_ref().map_or(0, String::len))
                .sum::<usize>();
        if size > self.limits.max_output_bytes {
            return Err(PluginError::Internal {
                plugin: plugin.to_string(),
                message: format!(
                    "verdict is {size} bytes, over the output limit of {} bytes",
                    self.limits.max_output_bytes
                ),
            });
        }
        Ok(Verdict {
            passed: verdict.passed,
            summary: verdict.summary,
            findings: verdict.findings.into_iter().map(convert_finding).collect(),
            evidence_digest: verdict.evidence_digest,
        })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

fn convert_finding(finding: types::Finding) -> Finding {
    Finding {
        severity: match finding.severity {
            types::Severity::Info => Severity::Info,
            types::Severity::Low => Severity::Low,
            types::Severity::Medium => Severity::Medium,
            types::Severity::High => Severity::High,
            types::Severity::Critical => Severity::Critical,
        },
        message: finding.message,
        rule: finding.rule,
        location: finding.location.map(|l| Location {
            path: l.path,
            line: l.line,
            column: l.column,
        }),
    }
}
