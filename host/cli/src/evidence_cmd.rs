//! `bl evidence …`: the decision evidence plane (seed 004) for apps built
//! on other agent frameworks.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Subcommand;

use crate::exit::{CliError, CliResult, Exit};
use crate::output;

#[derive(Subcommand)]
#[command(defer = true)]
pub enum EvidenceCommand {
    /// Serve a workspace's decision evidence to an app, on loopback, behind
    /// a bearer token; prints `evidence: URL` when it listens.
    Serve {
        /// The workspace directory (made if missing): its evidence log and
        /// signed checkpoints.
        #[arg(long)]
        workspace: PathBuf,
        /// The loopback address to listen on (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0", conflicts_with = "socket")]
        http: SocketAddr,
        /// Listen on a unix socket at this path instead (made owner-only; a
        /// socket a stopped service left is replaced, any other file is
        /// refused). Prints `evidence: unix:PATH`.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Keep the bearer token in this file (made, mode 0600, if missing);
        /// without it a fresh token is printed on stderr.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// The key that signs the checkpoints (default: the workspace's
        /// own, made on first use in ~/.config/bl/keys).
        #[arg(long)]
        key: Option<PathBuf>,
        /// A reviewer's verifier key (a file, or the key text) whose signed
        /// reviews are recorded; repeat for each reviewer.
        #[arg(long = "reviewer")]
        reviewers: Vec<String>,
        /// The publication-policy plugin that decides every decision.
        #[arg(long)]
        policy: String,
        /// That policy's config, as JSON.
        #[arg(long, default_value = "{}")]
        policy_config: String,
    },
    /// Sign a review (JSON: approve, reject or reconcile) with a reviewer's
    /// key, and print it as `POST /v1/reviews` takes it.
    SignReview {
        /// The reviewer's private key (`bl keys generate --name NAME`).
        #[arg(long)]
        key: PathBuf,
        /// The workspace's verifier key (printed by `serve`, a file or the
        /// text): the review is authority there only.
        #[arg(long = "for")]
        workspace: String,
        /// The review, a JSON file.
        review: PathBuf,
    },
    /// Copy a workspace's evidence into a new directory that verifies
    /// with the workspace's public key alone (`bl verify DIR --pubkey K`).
    Export {
        /// The workspace directory.
        workspace: PathBuf,
        /// The new directory to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Serve a page on 127.0.0.1 where you approve, reject or reconcile
    /// what waits for a person at a service; each click is signed with
    /// your key, bound to what the page showed. Prints `console: URL`;
    /// stops on Ctrl-C, or after 15 minutes unused.
    Console {
        #[command(flatten)]
        at: ServiceArgs,
        /// How long an approval given on the page holds, e.g. `15m`.
        #[arg(long, default_value = "1h", value_parser = approval_validity)]
        valid_for: std::time::Duration,
        /// The port on 127.0.0.1 (0: any free port).
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
    /// Approve the pause a decision is at: read it from the service, sign
    /// the approval with your key (bound to the decision, its arguments,
    /// the policy's version, the pause, an expiry) and submit it.
    Approve {
        #[command(flatten)]
        reviewer: Reviewer,
        /// How long the approval holds, e.g. `15m` or `1h`.
        #[arg(long, default_value = "1h", value_parser = approval_validity)]
        valid_for: std::time::Duration,
    },
    /// Reject a decision, for good: nothing leads to its action after.
    Reject {
        #[command(flatten)]
        reviewer: Reviewer,
        /// Why, recorded with the rejection.
        #[arg(long)]
        reason: String,
    },
    /// Say what happened to a decision awaiting reconciliation.
    Reconcile {
        #[command(flatten)]
        reviewer: Reviewer,
        /// Whether the tool did run (`true`) or did not (`false`).
        #[arg(long, action = clap::ArgAction::Set)]
        executed: bool,
    },
}

// Who reviews which decision, at which service (plain comments: clap shows doc ones as help).
#[derive(clap::Args)]
pub struct Reviewer {
    /// The decision's operation id.
    operation_id: String,
    #[command(flatten)]
    at: ServiceArgs,
    /// Show what would be signed, from the decision as it stands; sign
    /// and submit nothing.
    #[arg(long)]
    dry_run: bool,
}

// A reviewer's key, and the service it reviews at.
#[derive(clap::Args)]
pub struct ServiceArgs {
    /// The reviewer's private key (`bl keys generate --name NAME`); a
    /// review names NAME as its reviewer.
    #[arg(long)]
    key: PathBuf,
    /// The service, as `serve` printed it (`http://127.0.0.1:PORT/v1` or
    /// `unix:PATH`).
    #[arg(long)]
    url: String,
    /// The file holding the service's bearer token.
    #[arg(long)]
    token_file: PathBuf,
    /// The workspace key you expect the service to sign with (a file or
    /// the text); a service signing with another is refused.
    #[arg(long = "for")]
    workspace: Option<String>,
}

pub fn run(cmd: EvidenceCommand) -> CliResult {
    match cmd {
        EvidenceCommand::Serve {
            workspace,
            http,
            socket,
            token_file,
            key,
            reviewers,
            policy,
            policy_config,
        } => {
            let key = match key {
                Some(path) => signing_key(&path)?,
                None => bl_app::evidence::workspace_key(&workspace)?,
            };
            let verifier = key.verifier().to_text();
            let reviewers = reviewers
                .iter()
                .map(|k| bl_app::keys::read_verifier_key_for("--reviewer", k))
                .collect::<Result<Vec<_>, _>>()?;
            let (token, told) = match &token_file {
                Some(file) => (
                    bl_web::bearer::token_in(file).map_err(|e| {
                        CliError::refused(format!("evidence: token file {}: {e}", file.display()))
                    })?,
                    format!("in {}", file.display()),
                ),
                None => {
                    let token = bl_web::bearer::fresh_token()
                        .map_err(|e| CliError::refused(format!("evidence: no token: {e}")))?;
                    (token.clone(), token)
                }
            };
            let mut store = bl_app::evidence::EvidenceStore::open(&workspace, key, reviewers)
                .map_err(|e| CliError::refused(format!("evidence: {e}")))?;
            // Said at once: opening recorded it, whatever stops serve next.
            if let [first, ..] = store.lost_at_open() {
                output::errln!(
                    "bl evidence: {} decision(s) were reserved when the service last stopped ({}); whether their tools ran is unknown, so they now await reconciliation: bl evidence reconcile {first} --executed true|false --key KEY --url URL --token-file FILE (or bl evidence console)",
                    store.lost_at_open().len(),
                    store.lost_at_open().join(", ")
                );
            }
            // A long-lived service asks its policy for every decision: a
            // pool of instances, reserved once, pays.
            let plugins = bl_app::plugin_host::install(bl_plugins::AllocatorChoice::Auto);
            store
                .check_policy(&plugins, &policy, &policy_config)
                .map_err(|e| {
                    CliError::refused(format!(
                        "evidence: --policy {policy} --policy-config {policy_config}: {e}; nothing was served"
                    ))
                })?;
            let listener = match &socket {
                Some(path) => {
                    let listener = bl_app::evidence::bind_owner_only_socket(path)?;
                    output::outln!("evidence: unix:{}", path.display());
                    bl_evidence::Listener::Socket(listener)
                }
                None => {
                    let listener = std::net::TcpListener::bind(http).map_err(|e| {
                        CliError::refused(format!("evidence: cannot listen on {http}: {e}"))
                    })?;
                    let at = listener
                        .local_addr()
                        .map_err(|e| CliError::refused(format!("evidence: {e}")))?;
                    output::outln!("evidence: http://{at}/v1");
                    bl_evidence::Listener::Loopback(listener)
                }
            };
            output::errln!("bl evidence: bearer token {told}");
            output::errln!("bl evidence: checkpoints are signed by {verifier}");
            let served = bl_evidence::serve(
                bl_evidence::ServeOptions {
                    store,
                    listener,
                    token,
                    policy: (policy, policy_config),
                    plugins,
                },
                || bl_core::interrupt::requested().is_some(),
            );
            if let Some(path) = &socket {
                let _ = std::fs::remove_file(path);
            }
            served.map_err(|e| CliError::refused(e.to_string()))?;
            Ok(Exit::Success)
        }
        EvidenceCommand::SignReview {
            key,
            workspace,
            review,
        } => {
            let key = signing_key(&key)?;
            let workspace = bl_app::keys::read_verifier_key_for("--for", &workspace)?.to_text();
            let text = std::fs::read_to_string(&review)
                .map_err(|e| CliError::refused(format!("evidence: {}: {e}", review.display())))?;
            let review: bl_app::evidence::Review = serde_json::from_str(&text).map_err(|e| {
                CliError::refused(format!(
                    "evidence: {}: not a review ({e}); write {{\"review\": \"approve\" | \"reject\" | \"reconcile\", …}}",
                    review.display()
                ))
            })?;
            // The service accepts a review only from the key of the person
            // it names: refused here, before it is signed.
            if review.reviewer() != key.name() {
                return Err(CliError::refused(format!(
                    "evidence: the review names {:?} as its reviewer, but --key is {:?}'s; a review is signed by the person it names",
                    review.reviewer(),
                    key.name()
                )));
            }
            output::outln!(
                "{}",
                serde_json::to_string(&bl_app::evidence::sign_review(review, &workspace, &key))
                    .expect("a signed review is JSON")
            );
            Ok(Exit::Success)
        }
        EvidenceCommand::Export { workspace, out } => {
            let exported = bl_app::evidence::export(&workspace, &out)?;
            output::outln!(
                "exported {} events and {} signed checkpoint(s) to {}; verify with: bl verify {} --pubkey WORKSPACE_KEY",
                exported.events,
                exported.checkpoints,
                out.display(),
                out.display()
            );
            if exported.left_out > 0 {
                output::errln!(
                    "bl evidence: the newest {} event(s) are under no signed checkpoint yet and were left out; export again once the service has signed them (within 50 ms), or after it stops",
                    exported.left_out
                );
            }
            Ok(Exit::Success)
        }
        EvidenceCommand::Console {
            at,
            valid_for,
            port,
        } => {
            let reviewer = reviewer(at)?;
            // Refused here, before anything is served: a service that
            // cannot be read, or that signs with another workspace's key.
            reviewer.waiting()?;
            let page = output::serving(port, "console")?;
            bl_web::serve_evidence_console(
                bl_web::EvidenceConsole {
                    reviewer,
                    valid_for,
                },
                page,
                || bl_core::interrupt::requested().is_some(),
            )
            .map_err(|e| CliError::refused(format!("evidence console: {e}")))?;
            Ok(Exit::Success)
        }
        EvidenceCommand::Approve {
            reviewer,
            valid_for,
        } => submit(
            reviewer,
            bl_app::evidence_reviewer::Verdict::Approve { valid_for },
        ),
        EvidenceCommand::Reject { reviewer, reason } => submit(
            reviewer,
            bl_app::evidence_reviewer::Verdict::Reject { reason },
        ),
        EvidenceCommand::Reconcile { reviewer, executed } => submit(
            reviewer,
            bl_app::evidence_reviewer::Verdict::Reconcile { executed },
        ),
    }
}

/// The reviewer `at` names: their key, at the service.
fn reviewer(at: ServiceArgs) -> Result<bl_app::evidence_reviewer::Reviewer, CliError> {
    let token = bl_web::bearer::token_of(&at.token_file).map_err(|e| {
        CliError::refused(format!(
            "evidence: token file {}: {e}",
            at.token_file.display()
        ))
    })?;
    Ok(bl_app::evidence_reviewer::Reviewer {
        service: bl_app::evidence_reviewer::Service { url: at.url, token },
        key: signing_key(&at.key)?,
        workspace: match &at.workspace {
            Some(k) => Some(bl_app::keys::read_verifier_key_for("--for", k)?.to_text()),
            None => {
                output::errln!(
                    "bl evidence: no --for: the review is signed for the workspace key the service names; give --for WORKSPACE.pub to sign only for the one you mean"
                );
                None
            }
        },
    })
}

fn submit(asked: Reviewer, verdict: bl_app::evidence_reviewer::Verdict) -> CliResult {
    use bl_app::evidence_reviewer::Submit;
    let reviewed = reviewer(asked.at)?.review(
        &asked.operation_id,
        verdict,
        bl_app::evidence::unix_now(),
        if asked.dry_run {
            Submit::DryRun
        } else {
            Submit::SignAndSubmit
        },
    )?;
    // What the reviewer's key signed (or would sign), in full.
    if output::json() {
        output::outln!(
            "{}",
            serde_json::json!({
                "dry_run": asked.dry_run,
                "review": reviewed.review,
                "workspace": reviewed.workspace,
                "answer": reviewed.answer,
            })
        );
    } else {
        output::outln!("{}", reviewed.summary());
    }
    Ok(Exit::Success)
}

/// `--valid-for`: a duration, from a second to the longest an approval
/// may hold.
fn approval_validity(text: &str) -> Result<std::time::Duration, String> {
    let valid_for = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    let longest = bl_app::evidence_reviewer::LONGEST_APPROVAL;
    if valid_for.as_secs() == 0 || valid_for > longest {
        return Err(format!(
            "an approval holds from 1s to {} days; give a duration in that range, e.g. 15m or 1h",
            longest.as_secs() / 86_400
        ));
    }
    Ok(valid_for)
}

/// `--key`: a private key file, its errors naming the option.
fn signing_key(path: &std::path::Path) -> Result<bl_store::SigningKey, CliError> {
    bl_app::keys::read_signing_key(path)
        .map_err(|e| CliError::refused(format!("evidence: --key {}", e.message())))
}
