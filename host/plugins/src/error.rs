use std::time::Duration;

/// Every way a plugin invocation can fail to produce a decision. Each names
/// the plugin and, where one applies, the limit it hit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    #[error("plugin {plugin}: cannot load: {message}")]
    Load { plugin: String, message: String },
    #[error("plugin {plugin}: ran past its deadline of {}ms and was stopped", deadline.as_millis())]
    Timeout { plugin: String, deadline: Duration },
    #[error("plugin {plugin}: used up its fuel of {fuel} units and was stopped")]
    FuelExhausted { plugin: String, fuel: u64 },
    #[error("plugin {plugin}: tried to grow its memory past the limit of {limit_bytes} bytes")]
    MemoryLimit { plugin: String, limit_bytes: usize },
    #[error("plugin {plugin}: {what} went past the output limit of {limit_bytes} bytes")]
    OutputLimit {
        plugin: String,
        what: String,
        limit_bytes: usize,
    },
    #[error("plugin {plugin}: trapped: {message}")]
    Trap { plugin: String, message: String },
    #[error("plugin {plugin}: bad config: {message}")]
    BadConfig { plugin: String, message: String },
    #[error("plugin {plugin}: capability refused: {message}")]
    Capability { plugin: String, message: String },
    #[error(
        "plugin {plugin}: tried to reach `{path}` outside its workspace; the attempt was refused and the call fails"
    )]
    Escape { plugin: String, path: String },
    #[error("plugin {plugin}: did not publish its declared output `{output}`")]
    MissingOutput { plugin: String, output: String },
    #[error("plugin {plugin}: could not decide: {message}")]
    Internal { plugin: String, message: String },
    #[error("workspace {path}: {message}")]
    Workspace { path: String, message: String },
    #[error("plugin runtime: {0}")]
    Runtime(String),
}

impl PluginError {
    /// What kind of failure it is, in one word, the same whatever the
    /// plugin's language (`bad-config`, `trap`, `timeout`, …): what a
    /// conformance corpus compares when a gate cannot decide.
    pub fn kind(&self) -> &'static str {
        match self {
            PluginError::Load { .. } => "load",
            PluginError::Timeout { .. } => "timeout",
            PluginError::FuelExhausted { .. } => "fuel",
            PluginError::MemoryLimit { .. } => "memory-limit",
            PluginError::OutputLimit { .. } => "output-limit",
            PluginError::Trap { .. } => "trap",
            PluginError::BadConfig { .. } => "bad-config",
            PluginError::Capability { .. } => "capability",
            PluginError::Escape { .. } => "escape",
            PluginError::MissingOutput { .. } => "missing-output",
            PluginError::Internal { .. } => "internal",
            PluginError::Workspace { .. } => "workspace",
            PluginError::Runtime(_) => "runtime",
        }
    }

    /// The plugin the error is about, when it is about one.
    pub fn plugin(&self) -> Option<&str> {
        match self {
            PluginError::Load { plugin, .. }
            | PluginError::Timeout { plugin, .. }
            | PluginError::FuelExhausted { plugin, .. }
            | PluginError::MemoryLimit { plugin, .. }
            | PluginError::OutputLimit { plugin, .. }
            | PluginError::Trap { plugin, .. }
            | PluginError::BadConfig { plugin, .. }
            | PluginError::Capability { plugin, .. }
            | PluginError::Escape { plugin, .. }
            | PluginError::MissingOutput { plugin, .. }
            | PluginError::Internal { plugin, .. } => Some(plugin),
            PluginError::Workspace { .. } | PluginError::Runtime(_) => None,
        }
    }
}
