//! The isolation tiers a manifest can ask for, by their bounded-loops names.

/// A tier name that is none of [`Tier::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown isolation tier `{0}`; the tiers are {names}", names = Tier::ALL.map(Tier::name).join(", "))]
pub struct UnknownTier(pub String);

/// How much of the host a command may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// No OS cage: a scrubbed environment in the workspace, as the caller.
    WorkspaceOnly,
    /// The host's file system, but no network, its own processes and /proc,
    /// the seccomp filter, and never host root.
    ProcessRestricted,
    /// The full cage: only the system directories and the workspace.
    ContainerRestricted,
    /// Never run on this host.
    CustomerManagedWorker,
}

impl Tier {
    pub const ALL: [Tier; 4] = [
        Tier::WorkspaceOnly,
        Tier::ProcessRestricted,
        Tier::ContainerRestricted,
        Tier::CustomerManagedWorker,
    ];

    /// The name used in manifests and `--isolation`.
    pub fn name(self) -> &'static str {
        match self {
            Tier::WorkspaceOnly => "workspace_only",
            Tier::ProcessRestricted => "process_restricted",
            Tier::ContainerRestricted => "container_restricted",
            Tier::CustomerManagedWorker => "customer_managed_worker",
        }
    }

    pub fn parse(name: &str) -> Result<Tier, UnknownTier> {
        Tier::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| UnknownTier(name.to_string()))
    }

    /// Whether commands in this tier run under bubblewrap (or Seatbelt).
    pub fn is_caged(self) -> bool {
        matches!(self, Tier::ProcessRestricted | Tier::ContainerRestricted)
    }
}
