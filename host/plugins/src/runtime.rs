//! The engine, loading (with capability admission) and the per-invocation
//! store, limits and error mapping that every world shares.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bl_core::CommandRunner;
use wasmtime::component::{Component, HasSelf, InstancePre, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};

use crate::bindings;
use crate::cache::{ComponentCache, ComponentSource};
use crate::error::PluginError;
use crate::host::{HostState, HostStop, LogEntry};
use crate::limits::Limits;
use bl_core::plugin::World;
use bl_core::plugin::{Capability, Grants, Import, admit};

/// How often the epoch ticker advances; the deadline's resolution.
const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Options every loader takes.
#[derive(Clone, Default)]
pub struct LoadOptions<'a> {
    /// The capabilities the plugin's manifest requests; `None` when there is
    /// no manifest, and the component's imports are taken as its requests.
    pub declared: Option<&'a [Capability]>,
    pub grants: Grants,
    /// What this plugin's `command` capability runs through; the runtime's
    /// own when `None`.
    pub commands: Option<Arc<dyn CommandRunner>>,
    /// This plugin's per-call deadline; the runtime's when `None`.
    pub deadline: Option<Duration>,
    /// The longest one of its commands may take; the runtime's when `None`.
    pub command_timeout: Option<Duration>,
    /// The component's sha256 (hex) when the caller took it already, so a
    /// large component (a Python one is 18 MB) is hashed once, not twice.
    pub hex_digest: Option<&'a str>,
}

/// How instances get their memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllocatorChoice {
    /// The pooling allocator when a probe shows the machine can reserve its
    /// pool, otherwise on demand.
    #[default]
    Auto,
    Pooling,
    OnDemand,
}

#[derive(Clone, Default)]
pub struct RuntimeConfig {
    /// Where compiled components are cached; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
    pub limits: Limits,
    pub allocator: AllocatorChoice,
    /// What the `command` capability runs through. `None` refuses every
    /// command even where the capability is granted.
    pub command_runner: Option<Arc<dyn CommandRunner>>,
}

/// One wasmtime engine and everything shared across invocations.
pub struct Runtime {
    engine: Engine,
    /// bl's own interfaces, for components that import nothing of WASI
    /// (every first-party plugin): linking WASI's hundreds of functions
    /// too took about 0.1 ms at every start of bl.
    linker: Linker<HostState>,
    /// bl's interfaces and WASI, made the first time a component needs it
    /// (Python and JavaScript plugins do).
    linker_with_wasi: OnceLock<Linker<HostState>>,
    cache: Option<ComponentCache>,
    limits: Arc<Limits>,
    pooling: bool,
    runner: Option<Arc<dyn CommandRunner>>,
    ticker: EpochTicker,
}

/// Advances the engine's epoch (the clock plugin deadlines are counted in)
/// every [`EPOCH_TICK`] while a call is in flight, and sleeps otherwise: a
/// bl that waits (a service between requests, a loop while its command
/// runs) is not woken 200 times a second for nothing.
struct EpochTicker {
    shared: Arc<TickerShared>,
    thread: std::thread::Thread,
}

#[derive(Default)]
struct TickerShared {
    calls_in_flight: AtomicUsize,
    stop: AtomicBool,
    #[cfg(test)]
    ticks: std::sync::atomic::AtomicU64,
}

/// One call in flight: the epoch advances until it is dropped.
struct Ticking<'a>(&'a TickerShared);

impl EpochTicker {
    fn start(engine: Engine) -> Result<Self, PluginError> {
        let shared = Arc::new(TickerShared::default());
        let ticking = shared.clone();
        let handle = std::thread::Builder::new()
            .name("bl-epoch-ticker".into())
            .spawn(move || {
                while !ticking.stop.load(Ordering::Acquire) {
                    if ticking.calls_in_flight.load(Ordering::Acquire) == 0 {
                        // Woken by the next call (or the stop); a wake-up
                        // for nothing only goes round again.
                        std::thread::park();
                        continue;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                    #[cfg(test)]
                    ticking.ticks.fetch_add(1, Ordering::Relaxed);
                }
            })
            .map_err(|e| PluginError::Runtime(format!("cannot start the epoch ticker: {e}")))?;
        Ok(EpochTicker {
            shared,
            thread: handle.thread().clone(),
        })
    }

    /// Ticks until the guard is dropped. A call's deadline is set after
    /// this, so its ticks are counted from its own start.
    fn during_call(&self) -> Ticking<'_> {
        if self.shared.calls_in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.thread.unpark();
        }
        Ticking(&self.shared)
    }
}

impl Drop for Ticking<'_> {
    fn drop(&mut self) {
        self.0.calls_in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// A component compiled, admitted and linked, ready to instantiate cheaply.
pub(crate) struct Loaded<P> {
    pub name: String,
    /// `sha256:` and the hex digest of the component's bytes.
    pub digest: String,
    pub grants: Grants,
    pub requested: Vec<Capability>,
    pub pre: P,
    /// The runtime's limits with this plugin's own deadlines.
    pub limits: Arc<Limits>,
    pub runner: Option<Arc<dyn CommandRunner>>,
}

/// What one successful call returned, with what the plugin logged.
#[derive(Debug, Clone)]
pub struct Invocation<T> {
    pub value: T,
    pub log: Vec<LogEntry>,
    pub elapsed: Duration,
}

/// What the caller hands one invocation.
pub(crate) struct CallContext {
    pub workspace_root: Option<PathBuf>,
}

fn runtime_error(e: impl std::fmt::Display) -> PluginError {
    PluginError::Runtime(e.to_string())
}

fn engine_config(limits: &Limits, pooling: bool) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    if limits.fuel.is_some() {
        config.consume_fuel(true);
    }
    if pooling {
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(64)
            .total_core_instances(256)
            .total_memories(128)
            .total_tables(256)
            .max_memory_size(limits.memory_bytes)
            // Stacks are for async calls, and bl calls plugins synchronously.
            // The default pool of 1,000 costs a guard page each, protected
            // one by one when the engine is made: 1,000 mprotect calls and a
            // split mapping at every start of bl that loads a plugin.
            .total_stacks(0);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self, PluginError> {
        let limits = config.limits;
        let (engine, pooling) = match config.allocator {
            AllocatorChoice::OnDemand => (
                Engine::new(&engine_config(&limits, false)).map_err(runtime_error)?,
                false,
            ),
            AllocatorChoice::Pooling => (
                Engine::new(&engine_config(&limits, true)).map_err(|e| {
                    PluginError::Runtime(format!("the pooling allocator is unavailable: {e:#}"))
                })?,
                true,
            ),
            // The probe: reserving the pool is what fails on machines with a
            // small address-space limit; fall back rather than refuse.
            AllocatorChoice::Auto => match Engine::new(&engine_config(&limits, true)) {
                Ok(engine) => (engine, true),
                Err(_) => (
                    Engine::new(&engine_config(&limits, false)).map_err(runtime_error)?,
                    false,
                ),
            },
        };
        let mut linker = Linker::new(&engine);
        add_interfaces(&mut linker).map_err(runtime_error)?;

        let ticker = EpochTicker::start(engine.clone())?;

        let cache = config
            .cache_dir
            .map(|dir| ComponentCache::new(dir, &engine));
        Ok(Runtime {
            engine,
            linker,
            linker_with_wasi: OnceLock::new(),
            cache,
            limits: Arc::new(limits),
            pooling,
            runner: config.command_runner,
            ticker,
        })
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// `"pooling"` or `"on-demand"`: what the allocator probe chose.
    pub fn allocator(&self) -> &'static str {
        if self.pooling { "pooling" } else { "on-demand" }
    }

    /// Whether `bytes` is already compiled in the on-disk cache.
    pub fn is_cached(&self, bytes: &[u8]) -> bool {
        self.cache.as_ref().is_some_and(|c| c.is_cached(bytes))
    }

    /// Compiles (or loads from the cache) a component and returns its import
    /// names, for admission and for `bl plugin inspect`.
    pub(crate) fn compile(&self, name: &str, bytes: &[u8]) -> Result<Component, PluginError> {
        self.compile_with_digest(name, bytes.into(), &bl_core::sha256_hex(bytes))
    }

    fn compile_with_digest(
        &self,
        name: &str,
        source: ComponentSource,
        hex_digest: &str,
    ) -> Result<Component, PluginError> {
        match &self.cache {
            Some(cache) => cache.load(&self.engine, source, hex_digest),
            None => source
                .read(hex_digest)
                .and_then(|bytes| Component::new(&self.engine, &bytes)),
        }
        .map_err(|e| PluginError::Load {
            plugin: name.to_string(),
            message: format!("{e:#}"),
        })
    }

    /// A component's top-level function exports, each with its number of
    /// parameters (how a component without a manifest shows its world).
    pub fn exports(&self, name: &str, bytes: &[u8]) -> Result<Vec<(String, usize)>, PluginError> {
        use wasmtime::component::types::ComponentItem;
        let component = self.compile(name, bytes)?;
        Ok(component
            .component_type()
            .exports(&self.engine)
            .filter_map(|(export, item)| match item.ty {
                ComponentItem::ComponentFunc(func) => {
                    Some((export.to_string(), func.params().len()))
                }
                _ => None,
            })
            .collect())
    }

    /// A component's top-level imports, each with whether it brings any
    /// function (only those can be capabilities).
    /// The linker a component with these imports is linked by: WASI's
    /// only for one that imports some of it.
    fn linker_for(&self, imports: &[Import]) -> wasmtime::Result<&Linker<HostState>> {
        if !imports.iter().any(|i| i.name.starts_with("wasi:")) {
            return Ok(&self.linker);
        }
        if let Some(linker) = self.linker_with_wasi.get() {
            return Ok(linker);
        }
        let mut linker = self.linker.clone();
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        Ok(self.linker_with_wasi.get_or_init(|| linker))
    }

    pub(crate) fn imports(&self, component: &Component) -> Vec<Import> {
        use wasmtime::component::types::ComponentItem;
        component
            .component_type()
            .imports(&self.engine)
            .map(|(name, item)| {
                let has_functions = match item.ty {
                    ComponentItem::ComponentInstance(instance) => instance
                        .exports(&self.engine)
                        .any(|(_, item)| matches!(item.ty, ComponentItem::ComponentFunc(_))),
                    ComponentItem::Type(_) | ComponentItem::Resource(_) => false,
                    _ => true,
                };
                Import::new(name, has_functions)
            })
            .collect()
    }

    /// Compiles, admits (imports against world, manifest and grants) and
    /// links a component; `typed` checks its exports against the world.
    pub(crate) fn load<P>(
        &self,
        name: &str,
        source: ComponentSource,
        world: World,
        options: &LoadOptions,
        typed: impl FnOnce(InstancePre<HostState>) -> wasmtime::Result<P>,
    ) -> Result<Loaded<P>, PluginError> {
        let load_error = |message: String| PluginError::Load {
            plugin: name.to_string(),
            message,
        };
        // One hash of the bytes: the cache key and the digest the caller records.
        let hex_digest = match (options.hex_digest, source) {
            (Some(known), _) => known.to_string(),
            (None, ComponentSource::Bytes(bytes)) => bl_core::sha256_hex(bytes),
            (None, ComponentSource::File(path)) => {
                let bytes = std::fs::read(path)
                    .map_err(|e| load_error(format!("{}: {e}", path.display())))?;
                bl_core::sha256_hex(&bytes)
            }
        };
        let component = self.compile_with_digest(name, source, &hex_digest)?;
        let grants = &options.grants;
        let imports = self.imports(&component);
        let requested = admit(&imports, world, options.declared, grants)
            .map_err(|e| load_error(e.to_string()))?;
        let instance_pre = self
            .linker_for(&imports)
            .and_then(|linker| linker.instantiate_pre(&component))
            .map_err(|e| load_error(format!("{e:#}")))?;
        let pre = typed(instance_pre)
            .map_err(|e| load_error(format!("it is not a {world} component: {e:#}")))?;
        Ok(Loaded {
            name: name.to_string(),
            digest: format!("sha256:{hex_digest}"),
            grants: grants.clone(),
            requested: requested.into_iter().collect(),
            pre,
            limits: self.limits_for(options),
            runner: options.commands.clone().or_else(|| self.runner.clone()),
        })
    }

    /// The runtime's limits, with a plugin's own deadlines where it has them.
    fn limits_for(&self, options: &LoadOptions) -> Arc<Limits> {
        if options.deadline.is_none() && options.command_timeout.is_none() {
            return self.limits.clone();
        }
        let mut limits = (*self.limits).clone();
        if let Some(deadline) = options.deadline {
            limits.deadline = deadline;
        }
        if let Some(timeout) = options.command_timeout {
            limits.command_timeout = timeout;
        }
        Arc::new(limits)
    }

    /// Runs `call` in a fresh store with this runtime's limits and maps every
    /// way it can end to a value or a typed error.
    pub(crate) fn invoke<P, T>(
        &self,
        plugin: &Loaded<P>,
        context: CallContext,
        call: impl FnOnce(
            &mut Store<HostState>,
            &P,
        ) -> wasmtime::Result<Result<T, bindings::types::PluginError>>,
    ) -> Result<Invocation<T>, PluginError> {
        let started = Instant::now();
        let limits = &plugin.limits;
        let state = HostState::new(
            plugin.grants.clone(),
            limits.clone(),
            context.workspace_root,
            plugin.runner.clone(),
        );
        let _ticking = self.ticker.during_call();
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        let ticks = (limits.deadline.as_nanos() / EPOCH_TICK.as_nanos()).max(1) as u64;
        store.set_epoch_deadline(ticks);
        if let Some(fuel) = limits.fuel {
            store.set_fuel(fuel).map_err(runtime_error)?;
        }
        let result = call(&mut store, &plugin.pre);
        let name = plugin.name.clone();
        // An escape attempt fails the call whatever the plugin made of the
        // refusal: a plugin that probes its cage does not get a verdict.
        if let Some(path) = store.data().escapes.first() {
            return Err(PluginError::Escape {
                plugin: name,
                path: path.clone(),
            });
        }
        // A call that ended after its deadline counts for nothing, whatever
        // it returned: the epoch check may lag the deadline by a tick.
        if result.is_ok() && started.elapsed() > limits.deadline {
            return Err(PluginError::Timeout {
                plugin: name,
                deadline: limits.deadline,
            });
        }
        match result {
            Ok(Ok(value)) => Ok(Invocation {
                value,
                log: std::mem::take(&mut store.data_mut().log),
                elapsed: started.elapsed(),
            }),
            Ok(Err(error)) => Err(plugin_error(name, error)),
            Err(error) => {
                let stderr = store.data().stderr.text();
                Err(classify_trap(
                    limits,
                    name,
                    error,
                    store.data().limiter.hit,
                    &stderr,
                ))
            }
        }
    }
}

/// What a guest wrote on stderr, less what its runtime adds that tells the
/// plugin's author nothing: componentize-py's panic after a Python
/// traceback, and Rust's hint to set RUST_BACKTRACE (which a guest never
/// reads).
fn guest_words(stderr: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let mut lines = stderr.lines().peekable();
    while let Some(line) = lines.next() {
        if line.starts_with("thread '")
            && line.contains("panicked at runtime/src/lib.rs")
            && lines.peek() == Some(&"Python function threw an unexpected exception")
        {
            lines.next();
            continue;
        }
        if line.starts_with("note: run with `RUST_BACKTRACE=1`") {
            continue;
        }
        kept.push(line);
    }
    kept.join("\n")
}

fn classify_trap(
    limits: &Limits,
    plugin: String,
    error: wasmtime::Error,
    memory_hit: bool,
    stderr: &str,
) -> PluginError {
    match error.downcast_ref::<HostStop>() {
        Some(HostStop::LimitExceeded { what, limit_bytes }) => {
            return PluginError::OutputLimit {
                plugin,
                what: what.to_string(),
                limit_bytes: *limit_bytes,
            };
        }
        Some(HostStop::DeadlinePassed) => {
            return PluginError::Timeout {
                plugin,
                deadline: limits.deadline,
            };
        }
        // Classified by the limiter's record below.
        Some(HostStop::MemoryRefused) | None => {}
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => {
            return PluginError::Timeout {
                plugin,
                deadline: limits.deadline,
            };
        }
        Some(Trap::OutOfFuel) => {
            return PluginError::FuelExhausted {
                plugin,
                fuel: limits.fuel.unwrap_or_default(),
            };
        }
        _ => {}
    }
    if memory_hit {
        return PluginError::MemoryLimit {
            plugin,
            limit_bytes: limits.memory_bytes,
        };
    }
    // What the guest last said on stderr (a Python traceback, a Rust
    // panic's message) comes first: it says why in the plugin's own words.
    // After it, the trap alone: the wasm backtrace of a runtime's abort
    // (a Python exception ends in one) says nothing to the plugin's author.
    let message = match (guest_words(stderr).trim(), error.downcast_ref::<Trap>()) {
        ("", _) => format!("{error:#}"),
        (said, Some(trap)) => format!("its stderr ended with:\n{said}\n{trap}"),
        (said, None) => format!("its stderr ended with:\n{said}\n{error:#}"),
    };
    PluginError::Trap { plugin, message }
}

fn plugin_error(plugin: String, error: bindings::types::PluginError) -> PluginError {
    use bindings::types::PluginError as E;
    match error {
        E::BadConfig(message) => PluginError::BadConfig { plugin, message },
        E::Capability(message) => PluginError::Capability { plugin, message },
        E::Internal(message) => PluginError::Internal { plugin, message },
    }
}

/// Every interface bl provides, once each, but WASI (see
/// [`Runtime::linker_for`]). Admission decides per component which of them
/// it may actually import.
fn add_interfaces(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    type H = HasSelf<HostState>;
    fn get(state: &mut HostState) -> &mut HostState {
        state
    }
    bindings::types::add_to_linker::<_, H>(linker, get)?;
    bindings::workspace::add_to_linker::<_, H>(linker, get)?;
    bindings::command::add_to_linker::<_, H>(linker, get)?;
    bindings::log::add_to_linker::<_, H>(linker, get)?;
    bindings::artifacts::add_to_linker::<_, H>(linker, get)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mappings() -> usize {
        std::fs::read_to_string("/proc/self/maps")
            .expect("/proc/self/maps")
            .lines()
            .count()
    }

    #[test]
    fn a_pooling_engine_splits_the_address_space_only_a_little() {
        // wasmtime's default pool of 1,000 async stacks, a guard page each,
        // split its reservation into about 2,000 mappings.
        let before = mappings();
        let runtime = Runtime::new(RuntimeConfig {
            allocator: AllocatorChoice::Pooling,
            ..Default::default()
        })
        .expect("a pooling engine");
        let added = mappings().saturating_sub(before);
        assert!(runtime.pooling);
        assert!(
            added < 200,
            "making a pooling engine added {added} mappings"
        );
    }

    #[test]
    fn the_epoch_advances_only_while_a_call_is_in_flight() {
        let runtime = Runtime::new(RuntimeConfig::default()).expect("an engine");
        let ticks = || runtime.ticker.shared.ticks.load(Ordering::Relaxed);
        std::thread::sleep(EPOCH_TICK * 6);
        assert_eq!(ticks(), 0, "an idle runtime's ticker sleeps");
        let call = runtime.ticker.during_call();
        std::thread::sleep(EPOCH_TICK * 6);
        assert!(ticks() >= 2, "a call in flight is ticked for: {}", ticks());
        drop(call);
        // A tick already under way may still land.
        std::thread::sleep(EPOCH_TICK * 2);
        let after = ticks();
        std::thread::sleep(EPOCH_TICK * 6);
        assert_eq!(ticks(), after, "the ticker sleeps again after the call");
    }
}
