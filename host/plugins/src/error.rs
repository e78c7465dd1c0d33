use std::time::Duration;

/// Every way a plugin invocation can fail to produce a decision. Each names
/// the plugin and, where one applies, the limit it hit.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("plugin {plugin}: cannot load: {message}")]
    Load { plugin: String, message: String },
    #[error("plugin {plugin}: ran past its deadline of {}ms and was stopped", deadline.as_millis())]
    Timeout { plugin: String, deadline: Duration },
    #[error("plugin {plugin}: tried to grow its memory past the limit of {limit_bytes} bytes")]
    MemoryLimit { plugin: String, limit_bytes: usize },
    #[error("plugin {plugin}: trapped: {message}")]
    Trap { plugin: String, message: String },
    #[error("plugin {plugin}: bad config: {message}")]
    BadConfig { plugin: String, message: String },
    #[error("plugin {plugin}: capability refused: {message}")]
    Capability { plugin: String, message: String },
    #[error("plugin {plugin}: could not decide: {message}")]
    Internal { plugin: String, message: String },
    #[error("workspace {path}: {message}")]
    Workspace { path: String, message: String },
    #[error("plugin runtime: {0}")]
    Runtime(String),
}
