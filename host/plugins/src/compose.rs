//! Composition inside the host: a composite gate (mode `all`) and the
//! completion-contract dispatcher keyed by output basename.

use std::collections::BTreeMap;
use std::path::Path;

use bl_core::{Finding, GateOutcome, Verdict};
use globset::{Glob, GlobMatcher};

use crate::error::PluginError;
use crate::runtime::Runtime;
use crate::worlds::{ContractPlugin, ContractRequest, GatePlugin};

/// Runs every gate on the same workspace. Passes only when all pass; any
/// gate that errs makes the whole composite ERROR (never a pass or a fail).
pub fn judge_all(
    runtime: &Runtime,
    gates: &[(&GatePlugin, &str)],
    workspace: &Path,
) -> GateOutcome {
    if gates.is_empty() {
        return GateOutcome::Error("a composite gate with no gates cannot decide".into());
    }
    let mut findings = Vec::new();
    let mut failed = Vec::new();
    for (gate, config) in gates {
        match runtime.check(gate, workspace, config) {
            Err(error) => return GateOutcome::Error(error.to_string()),
            Ok(invocation) => {
                let verdict = invocation.value;
                if !verdict.passed {
                    failed.push(format!("{}: {}", gate.name(), verdict.summary));
                }
                findings.extend(verdict.findings.into_iter().map(|f| Finding {
                    message: format!("[{}] {}", gate.name(), f.message),
                    ..f
                }));
            }
        }
    }
    let summary = if failed.is_empty() {
        format!("all {} gates passed", gates.len())
    } else {
        format!(
            "{} of {} gates failed: {}",
            failed.len(),
            gates.len(),
            failed.join("; ")
        )
    };
    GateOutcome::from_verdict(Verdict {
        passed: failed.is_empty(),
        summary,
        findings,
        evidence_digest: None,
    })
}

struct Registered {
    pattern: String,
    matcher: GlobMatcher,
    plugin: ContractPlugin,
    config: String,
}

/// Completion contracts keyed by output basename (`plan.json`, `*.diff`).
/// New kinds are registered, never coded into the dispatcher.
#[derive(Default)]
pub struct ContractRegistry {
    contracts: Vec<Registered>,
}

/// What the contracts made of one output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractReport {
    /// Pattern → `"pass"` or `"fail"`, for every contract that matched.
    pub contracts: BTreeMap<String, &'static str>,
    /// The first failure, shaped `<path>: <pattern> contract: <reason>`.
    pub failure: Option<String>,
}

/// Why a contract's pattern cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("contract pattern `{0}` must match a basename, without `/`")]
    NotABasename(String),
    #[error("contract pattern `{pattern}`: {detail}")]
    Glob { pattern: String, detail: String },
}

impl ContractRegistry {
    pub fn new() -> Self {
        ContractRegistry::default()
    }

    /// Registers `plugin` for output basenames matching `pattern`.
    pub fn register(
        &mut self,
        pattern: &str,
        plugin: ContractPlugin,
        config: &str,
    ) -> Result<(), PatternError> {
        if pattern.contains('/') {
            return Err(PatternError::NotABasename(pattern.to_string()));
        }
        let matcher = Glob::new(pattern)
            .map_err(|e| PatternError::Glob {
                pattern: pattern.to_string(),
                detail: e.to_string(),
            })?
            .compile_matcher();
        self.contracts.push(Registered {
            pattern: pattern.to_string(),
            matcher,
            plugin,
            config: config.to_string(),
        });
        Ok(())
    }

    pub fn patterns(&self) -> impl Iterator<Item = &str> {
        self.contracts.iter().map(|c| c.pattern.as_str())
    }

    /// Checks one declared output against every contract whose pattern
    /// matches its basename; stops at the first failure. Unknown basenames
    /// get an empty report. A contract that errs is an error, not a failure.
    pub fn check(
        &self,
        runtime: &Runtime,
        workspace: &Path,
        request: &ContractRequest,
    ) -> Result<ContractReport, PluginError> {
        let basename = request
            .artifact
            .rsplit('/')
            .next()
            .unwrap_or(&request.artifact);
        let mut report = ContractReport {
            contracts: BTreeMap::new(),
            failure: None,
        };
        for contract in self
            .contracts
            .iter()
            .filter(|c| c.matcher.is_match(basename))
        {
            let verdict = runtime
                .check_contract(&contract.plugin, workspace, request, &contract.config)?
                .value;
            if verdict.passed {
                report.contracts.insert(contract.pattern.clone(), "pass");
            } else {
                report.contracts.insert(contract.pattern.clone(), "fail");
                report.failure = Some(format!(
                    "{}: {} contract: {}",
                    request.artifact, contract.pattern, verdict.summary
                ));
                break;
            }
        }
        Ok(report)
    }
}
