//! One loader and one call per world: gates, completion contracts,
//! transforms and publication policies.

use std::path::Path;

use bl_core::{Finding, GateOutcome, Location, Severity, Verdict};
use wasmtime::component::Resource;

use crate::artifacts::{InputArtifact, InputSet, OutputDeclaration, OutputSink, PublishedOutput};
use crate::bindings::{self, types};
use crate::cache::ComponentSource;
use crate::error::PluginError;
use crate::runtime::{CallContext, Invocation, LoadOptions, Loaded, Runtime};
use crate::workspace::WorkspaceDir;
use bl_core::plugin::Capability;
use bl_core::plugin::World;

macro_rules! plugin_handle {
    ($(#[$doc:meta])* $name:ident, $pre:ty) => {
        $(#[$doc])*
        pub struct $name(pub(crate) Loaded<$pre>);

        impl $name {
            pub fn name(&self) -> &str {
                &self.0.name
            }

            /// `sha256:` and the hex digest of the component that was loaded.
            pub fn component_digest(&self) -> &str {
                &self.0.digest
            }

            /// The capabilities the component imports.
            pub fn requested(&self) -> &[Capability] {
                &self.0.requested
            }
        }
    };
}

plugin_handle!(
    /// A gate, compiled, admitted and linked.
    GatePlugin,
    bindings::gate::GatePre<crate::host::HostState>
);
plugin_handle!(
    /// A completion contract, compiled, admitted and linked.
    ContractPlugin,
    bindings::contract::CompletionContractPre<crate::host::HostState>
);
plugin_handle!(
    /// A transform, compiled, admitted and linked.
    TransformPlugin,
    bindings::transform::TransformPre<crate::host::HostState>
);
plugin_handle!(
    /// A publication policy, compiled, admitted and linked.
    PolicyPlugin,
    bindings::policy::PublicationPolicyPre<crate::host::HostState>
);

/// What a contract is asked about (see the WIT `contract-request`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractRequest {
    /// The output's path relative to the workspace root.
    pub artifact: String,
    /// When the node was dispatched, in milliseconds since the Unix epoch.
    pub dispatch_started_ms: u64,
}

/// An approval as a policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub name: String,
    pub approver: String,
    pub approved: bool,
}

/// One effect about to fire, as a policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishRequest {
    pub effect_key: String,
    pub kind: String,
    pub target: String,
    pub payload_digest: String,
    pub approvals: Vec<Approval>,
}

/// A policy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishDecision {
    pub allow: bool,
    pub reason: String,
}

/// What a transform published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformOutput {
    pub summary: String,
    pub outputs: Vec<PublishedOutput>,
}

impl Runtime {
    pub fn load_gate<'a>(
        &self,
        name: &str,
        source: impl Into<ComponentSource<'a>>,
        options: &LoadOptions,
    ) -> Result<GatePlugin, PluginError> {
        self.load(
            name,
            source.into(),
            World::Gate,
            options,
            bindings::gate::GatePre::new,
        )
        .map(GatePlugin)
    }

    pub fn load_contract<'a>(
        &self,
        name: &str,
        source: impl Into<ComponentSource<'a>>,
        options: &LoadOptions,
    ) -> Result<ContractPlugin, PluginError> {
        self.load(
            name,
            source.into(),
            World::CompletionContract,
            options,
            bindings::contract::CompletionContractPre::new,
        )
        .map(ContractPlugin)
    }

    pub fn load_transform<'a>(
        &self,
        name: &str,
        source: impl Into<ComponentSource<'a>>,
        options: &LoadOptions,
    ) -> Result<TransformPlugin, PluginError> {
        self.load(
            name,
            source.into(),
            World::Transform,
            options,
            bindings::transform::TransformPre::new,
        )
        .map(TransformPlugin)
    }

    pub fn load_policy<'a>(
        &self,
        name: &str,
        source: impl Into<ComponentSource<'a>>,
        options: &LoadOptions,
    ) -> Result<PolicyPlugin, PluginError> {
        self.load(
            name,
            source.into(),
            World::PublicationPolicy,
            options,
            bindings::policy::PublicationPolicyPre::new,
        )
        .map(PolicyPlugin)
    }

    fn open_workspace(&self, workspace: &Path) -> Result<WorkspaceDir, PluginError> {
        WorkspaceDir::open(workspace, self.limits().max_read_bytes).map_err(|e| {
            PluginError::Workspace {
                path: workspace.display().to_string(),
                message: e.to_string(),
            }
        })
    }

    /// Runs a gate on `workspace` with the operator's JSON `config`.
    pub fn check(
        &self,
        gate: &GatePlugin,
        workspace: &Path,
        config: &str,
    ) -> Result<Invocation<Verdict>, PluginError> {
        no_byte_order_mark(&gate.0.name, config)?;
        let dir = self.open_workspace(workspace)?;
        let context = CallContext {
            workspace_root: Some(workspace.to_path_buf()),
        };
        let invocation = self.invoke(&gate.0, context, |store, pre| {
            let instance = pre.instantiate(&mut *store)?;
            let handle = store.data_mut().table.push(dir)?;
            let root = Resource::<WorkspaceDir>::new_borrow(handle.rep());
            let result = instance.call_check(&mut *store, root, config)?;
            store.data_mut().table.delete(handle)?;
            Ok(result)
        })?;
        self.accept_verdict(&gate.0.name, invocation)
    }

    /// Runs a gate and folds every failure into `GateOutcome::Error`.
    pub fn judge(&self, gate: &GatePlugin, workspace: &Path, config: &str) -> GateOutcome {
        outcome(self.check(gate, workspace, config))
    }

    /// Runs a completion contract on one declared output.
    pub fn check_contract(
        &self,
        contract: &ContractPlugin,
        workspace: &Path,
        request: &ContractRequest,
        config: &str,
    ) -> Result<Invocation<Verdict>, PluginError> {
        no_byte_order_mark(&contract.0.name, config)?;
        let dir = self.open_workspace(workspace)?;
        let context = CallContext {
            workspace_root: Some(workspace.to_path_buf()),
        };
        let wit_request = types::ContractRequest {
            artifact: request.artifact.clone(),
            dispatch_started_ms: request.dispatch_started_ms,
        };
        let invocation = self.invoke(&contract.0, context, |store, pre| {
            let instance = pre.instantiate(&mut *store)?;
            let handle = store.data_mut().table.push(dir)?;
            let root = Resource::<WorkspaceDir>::new_borrow(handle.rep());
            let result = instance.call_check(&mut *store, root, &wit_request, config)?;
            store.data_mut().table.delete(handle)?;
            Ok(result)
        })?;
        self.accept_verdict(&contract.0.name, invocation)
    }

    /// Runs a transform over `inputs`, which must publish exactly `outputs`.
    pub fn transform(
        &self,
        transform: &TransformPlugin,
        inputs: Vec<InputArtifact>,
        outputs: Vec<OutputDeclaration>,
        seed: &[u8],
        config: &str,
    ) -> Result<Invocation<TransformOutput>, PluginError> {
        let context = CallContext {
            workspace_root: None,
        };
        let limit = self.limits().max_artifact_bytes;
        let name = transform.0.name.clone();
        let invocation = self.invoke(&transform.0, context, |store, pre| {
            let instance = pre.instantiate(&mut *store)?;
            let input_handle = store.data_mut().table.push(InputSet::new(inputs))?;
            let sink_handle = store
                .data_mut()
                .table
                .push(OutputSink::new(outputs, limit))?;
            let result = instance.call_run(
                &mut *store,
                Resource::new_borrow(input_handle.rep()),
                Resource::new_borrow(sink_handle.rep()),
                seed,
                config,
            )?;
            store.data_mut().table.delete(input_handle)?;
            let sink = store.data_mut().table.delete(sink_handle)?;
            Ok(result.map(|report| (report.summary, sink)))
        })?;
        let (summary, sink) = invocation.value;
        let outputs = sink
            .finish()
            .map_err(|unwritten| PluginError::MissingOutput {
                plugin: name,
                output: unwritten.0,
            })?;
        Ok(Invocation {
            value: TransformOutput { summary, outputs },
            log: invocation.log,
            elapsed: invocation.elapsed,
        })
    }

    /// Asks a publication policy whether one effect may fire.
    pub fn decide(
        &self,
        policy: &PolicyPlugin,
        request: &PublishRequest,
        config: &str,
    ) -> Result<Invocation<PublishDecision>, PluginError> {
        let context = CallContext {
            workspace_root: None,
        };
        let wit_request = types::PublishRequest {
            effect_key: request.effect_key.clone(),
            kind: request.kind.clone(),
            target: request.target.clone(),
            payload_digest: request.payload_digest.clone(),
            approvals: request
                .approvals
                .iter()
                .map(|a| types::Approval {
                    name: a.name.clone(),
                    approver: a.approver.clone(),
                    approved: a.approved,
                })
                .collect(),
        };
        let invocation = self.invoke(&policy.0, context, |store, pre| {
            let instance = pre.instantiate(&mut *store)?;
            instance.call_decide(&mut *store, &wit_request, config)
        })?;
        let reason_len = invocation.value.reason.len();
        if reason_len > self.limits().max_output_bytes {
            return Err(PluginError::OutputLimit {
                plugin: policy.0.name.clone(),
                what: "its decision".into(),
                limit_bytes: self.limits().max_output_bytes,
            });
        }
        Ok(Invocation {
            value: PublishDecision {
                allow: invocation.value.allow,
                reason: invocation.value.reason,
            },
            log: invocation.log,
            elapsed: invocation.elapsed,
        })
    }

    fn accept_verdict(
        &self,
        plugin: &str,
        invocation: Invocation<types::Verdict>,
    ) -> Result<Invocation<Verdict>, PluginError> {
        let verdict = invocation.value;
        let size = verdict.summary.len()
            + verdict
                .findings
                .iter()
                .map(|f| {
                    f.message.len()
                        + f.rule.as_ref().map_or(0, String::len)
                        + f.location.as_ref().map_or(0, |l| l.path.len())
                })
                .sum::<usize>();
        if size > self.limits().max_output_bytes {
            return Err(PluginError::OutputLimit {
                plugin: plugin.to_string(),
                what: "its verdict".into(),
                limit_bytes: self.limits().max_output_bytes,
            });
        }
        Ok(Invocation {
            value: Verdict {
                passed: verdict.passed,
                summary: verdict.summary,
                findings: verdict.findings.into_iter().map(convert_finding).collect(),
                evidence_digest: verdict.evidence_digest,
            },
            log: invocation.log,
            elapsed: invocation.elapsed,
        })
    }
}

/// A config that starts with a byte-order mark is refused before any
/// plugin sees it: JSON text must not start with one, serde refuses it, and
/// some languages' bindings drop it silently, so one plugin would judge
/// what another refuses.
fn no_byte_order_mark(plugin: &str, config: &str) -> Result<(), PluginError> {
    match config.starts_with('\u{feff}') {
        true => Err(PluginError::BadConfig {
            plugin: plugin.to_string(),
            message: "the config starts with a byte-order mark (U+FEFF); JSON text must not: save it without one".into(),
        }),
        false => Ok(()),
    }
}

/// A verdict or an error as the one outcome a caller branches on.
pub fn outcome(result: Result<Invocation<Verdict>, PluginError>) -> GateOutcome {
    match result {
        Ok(invocation) => GateOutcome::from_verdict(invocation.value),
        Err(error) => GateOutcome::Error(error.to_string()),
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
