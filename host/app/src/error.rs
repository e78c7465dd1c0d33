//! What a use case reports when it cannot do what it was asked, by kind:
//! a front end maps each kind to its own answer (the CLI to an exit code).

/// Why a use case stopped. The message says what happened, where, and the
/// fix, in the user's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppError {
    /// Bad input, an unreadable file, a run refused before it starts:
    /// nothing ran, or nothing more (bounded-loops' exit 2).
    #[error("{0}")]
    Refused(String),
    /// Nothing could decide: a gate or the plugin runtime could not start.
    /// Never a pass, never a fail (exit 3).
    #[error("{0}")]
    Undecided(String),
    /// The sandbox would not run it at all (exit 125).
    #[error("{0}")]
    Sandbox(String),
    /// A manifest refused before anything ran, as `Refused`, with where in
    /// the file (for a front end that shows the place apart).
    #[error("{message}")]
    Manifest {
        message: String,
        refusal: Box<crate::graph_plan::ManifestRefusal>,
    },
}

impl AppError {
    pub fn refused(message: impl Into<String>) -> AppError {
        AppError::Refused(message.into())
    }

    /// A refused manifest, described as lint describes it.
    pub fn manifest(refusal: crate::graph_plan::ManifestRefusal) -> AppError {
        AppError::Manifest {
            message: refusal.describe(),
            refusal: Box::new(refusal),
        }
    }

    pub fn message(&self) -> &str {
        match self {
            AppError::Refused(m) | AppError::Undecided(m) | AppError::Sandbox(m) => m,
            AppError::Manifest { message, .. } => message,
        }
    }
}

/// A run store that cannot do what was asked: nothing more is done.
impl From<bl_store::StoreError> for AppError {
    fn from(error: bl_store::StoreError) -> AppError {
        AppError::Refused(error.to_string())
    }
}

pub type AppResult<T> = Result<T, AppError>;
