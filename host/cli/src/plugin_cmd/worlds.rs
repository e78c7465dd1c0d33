//! `bl plugin run` for the worlds that do not judge a workspace: a
//! transform run over input files, and a publication policy asked about
//! one effect. So every kind `bl plugin new` scaffolds can be run by hand.

use std::path::PathBuf;

use bl_plugins::{
    Approval, InputArtifact, OutputDeclaration, PublishRequest, Visibility, transform_seed,
};
use clap::Args;
use serde_json::json;

use crate::exit::{CliError, CliResult, Exit};
use crate::output::outln;
use bl_app::plugin_run::Opened;

/// The arguments a transform takes.
#[derive(Args, Debug, Default)]
pub struct TransformArgs {
    /// For a transform: an input artifact (repeatable), named by its file name.
    #[arg(long = "input", value_name = "PATH")]
    pub inputs: Vec<PathBuf>,
    /// For a transform: an output it must publish (repeatable), `NAME` or
    /// `NAME:system-only`. Its media type follows its extension.
    #[arg(long = "output", value_name = "NAME")]
    pub outputs: Vec<String>,
    /// For a transform: the directory its outputs are written into (by
    /// default they are only listed, with their digests).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// For a transform: the run id its seed is derived from.
    #[arg(long, default_value = "local")]
    pub run_id: String,
}

/// The arguments a publication policy takes: the effect it decides on.
#[derive(Args, Debug, Default)]
pub struct PolicyArgs {
    /// For a policy: the effect's idempotency key.
    #[arg(long)]
    pub effect_key: Option<String>,
    /// For a policy: the kind of effect (e.g. `outbox`).
    #[arg(long)]
    pub effect_kind: Option<String>,
    /// For a policy: where the effect goes.
    #[arg(long)]
    pub target: Option<String>,
    /// For a policy: the payload file; the policy sees its digest.
    #[arg(long)]
    pub payload: Option<PathBuf>,
    /// For a policy: an approval (repeatable), `NAME=APPROVER`, or
    /// `NAME=APPROVER:rejected`.
    #[arg(long = "approval", value_name = "NAME=APPROVER")]
    pub approvals: Vec<String>,
}

fn media_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("json") => "application/json",
        Some("md") => "text/markdown",
        Some("txt") => "text/plain",
        Some("yaml" | "yml") => "application/yaml",
        _ => "application/octet-stream",
    }
}

fn undecided(message: String) -> CliError {
    CliError::with_exit(Exit::Undecided, message)
}

pub fn run_transform(opened: &Opened, config: &str, args: &TransformArgs) -> CliResult {
    let name = opened.name();
    let mut inputs = Vec::new();
    for path in &args.inputs {
        let bytes = bl_app::paths::read_capped(path, 64 << 20)
            .map_err(|e| CliError::refused(format!("--input {}: {e}", path.display())))?;
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        inputs.push(InputArtifact {
            media_type: media_type(&file).into(),
            name: file,
            bytes,
        });
    }
    if args.outputs.is_empty() {
        return Err(CliError::refused(format!(
            "{name} is a transform: declare what it must publish with --output NAME (repeatable)"
        )));
    }
    let outputs: Vec<OutputDeclaration> = args
        .outputs
        .iter()
        .map(|spec| {
            let (name, visibility) = match spec.strip_suffix(":system-only") {
                Some(name) => (name, Visibility::SystemOnly),
                None => (spec.as_str(), Visibility::Consumer),
            };
            OutputDeclaration {
                name: name.to_string(),
                media_type: media_type(name).into(),
                visibility,
            }
        })
        .collect();
    let seed = transform_seed(&args.run_id, &inputs);
    let result = opened
        .host
        .load_transform(&opened.found, &opened.grant)
        .and_then(|plugin| {
            opened
                .runtime()?
                .transform(&plugin, inputs, outputs, &seed, config)
        });
    let invocation = result.map_err(|e| undecided(format!("{name}: {e}")))?;
    let published = &invocation.value.outputs;
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::refused(format!("--out {}: {e}", dir.display())))?;
        for output in published {
            let path = dir.join(&output.name);
            std::fs::write(&path, &output.bytes)
                .map_err(|e| CliError::refused(format!("{}: {e}", path.display())))?;
        }
    }
    crate::output::answer(
        || {
            json!({
                "plugin": name, "summary": invocation.value.summary,
                "outputs": published.iter().map(|o| json!({
                    "name": o.name, "digest": o.digest, "size": o.bytes.len(),
                    "system_only": o.visibility == Visibility::SystemOnly,
                })).collect::<Vec<_>>(),
                "written_to": args.out,
            })
        },
        || {
            let mut text = format!("DONE  {name}\n  {}", invocation.value.summary);
            for o in published {
                text.push_str(&format!(
                    "\n  - {} {} ({} bytes{})",
                    o.name,
                    o.digest,
                    o.bytes.len(),
                    if o.visibility == Visibility::SystemOnly {
                        ", system-only"
                    } else {
                        ""
                    }
                ));
            }
            if let Some(dir) = &args.out {
                text.push_str(&format!("\n  written into {}", dir.display()));
            }
            text
        },
    );
    Ok(Exit::Success)
}

fn approval(spec: &str) -> Result<Approval, CliError> {
    let (name, rest) = spec.split_once('=').ok_or_else(|| {
        CliError::refused(format!(
            "--approval {spec}: write NAME=APPROVER or NAME=APPROVER:rejected"
        ))
    })?;
    let (approver, approved) = match rest.strip_suffix(":rejected") {
        Some(approver) => (approver, false),
        None => (rest, true),
    };
    Ok(Approval {
        name: name.to_string(),
        approver: approver.to_string(),
        approved,
    })
}

pub fn run_policy(opened: &Opened, config: &str, args: &PolicyArgs) -> CliResult {
    let name = opened.name();
    let missing = |flag: &str| {
        CliError::refused(format!(
            "{name} is a publication policy: give the effect's {flag}"
        ))
    };
    let payload = args
        .payload
        .as_ref()
        .ok_or_else(|| missing("--payload FILE"))?;
    let bytes = bl_app::paths::read_capped(payload, 64 << 20)
        .map_err(|e| CliError::refused(format!("--payload {}: {e}", payload.display())))?;
    let request = PublishRequest {
        effect_key: args
            .effect_key
            .clone()
            .ok_or_else(|| missing("--effect-key"))?,
        kind: args
            .effect_kind
            .clone()
            .ok_or_else(|| missing("--effect-kind"))?,
        target: args.target.clone().ok_or_else(|| missing("--target"))?,
        payload_digest: bl_core::Sha256Digest::of(&bytes).to_string(),
        approvals: args
            .approvals
            .iter()
            .map(|a| approval(a))
            .collect::<Result<_, _>>()?,
    };
    let decision = opened
        .host
        .load_policy(&opened.found, &opened.grant)
        .and_then(|policy| opened.runtime()?.decide(&policy, &request, config))
        .map_err(|e| undecided(format!("{name}: {e}")))?
        .value;
    if crate::output::json() {
        outln!(
            "{}",
            json!({"plugin": name, "allow": decision.allow, "reason": decision.reason,
                   "payload_digest": request.payload_digest})
        );
    } else {
        outln!(
            "{}  {name}  {}\n  {}",
            if decision.allow { "ALLOW" } else { "DENY " },
            request.effect_key,
            decision.reason
        );
    }
    Ok(if decision.allow {
        Exit::Success
    } else {
        Exit::No
    })
}
