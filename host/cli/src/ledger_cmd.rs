//! `bl ledger reconcile`: what an operator found out about an effect whose
//! outcome the publication ledger could not know.

use std::path::Path;

use clap::Subcommand;

use crate::exit::{CliError, CliResult, Exit};

#[derive(Subcommand)]
#[command(defer = true)]
pub enum LedgerCommand {
    /// Record what an operator found out about an effect whose outcome is
    /// ambiguous (an intent with no outcome, after a crash).
    Reconcile {
        /// The run directory holding published-effects.json.
        run_dir: std::path::PathBuf,
        /// The effect key, `<run_id>/<plan_id>/<node_id>`.
        key: String,
        /// The effect did happen: record it as published.
        #[arg(
            long,
            conflicts_with = "not_published",
            required_unless_present = "not_published"
        )]
        published: bool,
        /// The effect did not happen: clear the intent so it may fire again.
        #[arg(long)]
        not_published: bool,
    },
}

pub fn run(cmd: LedgerCommand) -> CliResult {
    match cmd {
        LedgerCommand::Reconcile {
            run_dir,
            key,
            published,
            ..
        } => reconcile(&run_dir, &key, published),
    }
}

fn reconcile(run_dir: &Path, key: &str, published: bool) -> CliResult {
    let decision = if published {
        bl_store::Reconciliation::Published
    } else {
        bl_store::Reconciliation::NotPublished
    };
    match bl_store::Ledger::new(run_dir).reconcile(key, decision) {
        Ok(()) => {
            let what = if published {
                "recorded as published"
            } else {
                "cleared; it may fire again"
            };
            crate::output::answer(
                || serde_json::json!({"key": key, "published": published}),
                || format!("{key}: {what}"),
            );
            Ok(Exit::Success)
        }
        Err(e) => Err(CliError::refused(format!("ledger reconcile: {e}"))),
    }
}
