//! The cage a command runs in: the sandbox for an isolation tier, with the
//! user a caged command runs as when bl runs as root.

use bl_sandbox::{CagedUser, Sandbox, Tier};

use crate::error::AppError;

/// The runner for `tier`, with the caged user (when bl runs as root) from
/// `BL_SANDBOX_UID`, `BL_SANDBOX_GID` and `BL_SANDBOX_OWNERSHIP`.
pub fn sandbox(tier: Tier) -> Result<Sandbox, AppError> {
    Ok(Sandbox::new(tier).with_caged_user(caged_user()?))
}

/// As [`sandbox`], making nothing ahead until its user says commands will
/// run (`CommandRunner::expect_commands`): a loop may run none.
pub fn sandbox_on_demand(tier: Tier) -> Result<Sandbox, AppError> {
    Ok(Sandbox::on_demand(tier).with_caged_user(caged_user()?))
}

fn caged_user() -> Result<CagedUser, AppError> {
    CagedUser::from_env(|name| std::env::var(name).ok())
        .map_err(|e| AppError::Sandbox(e.to_string()))
}
