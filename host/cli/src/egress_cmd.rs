//! `bl egress check URL`: would the broker let a request go there?
//! `bl egress send`: one request through the broker, as an https connector
//! node's would go.

use crate::output::{errln, outln};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Subcommand;

use crate::exit::{CliError, CliResult, Exit};

#[derive(Subcommand)]
#[command(defer = true)]
pub enum EgressCommand {
    /// Resolve (where the name resolves) and classify a URL's destination
    /// without connecting. Exit 0 allow, 1 deny.
    Check {
        /// The URL whose destination to classify.
        url: String,
    },
    /// Send one request to an admitted connection's endpoint through the
    /// broker: a single-use lease, the destination resolved once and pinned,
    /// the credential read from the environment variable the record names
    /// and added here, redirects re-checked, the response capped. Prints the
    /// response body; the broker's decisions go to stderr as `BL_EGRESS`
    /// lines. Exit 0 on a 2xx answer, 1 on another answer, 2 when refused.
    Send {
        /// The admitted-connection records (`{connection_id: record}`).
        #[arg(long)]
        admitted: PathBuf,
        /// The connection id in the --admitted records.
        #[arg(long)]
        connection: String,
        /// The request body: JSON text, or @FILE.
        #[arg(long, default_value = "{}")]
        body: String,
        /// Give up on the request after this many seconds.
        #[arg(long, default_value_t = 120)]
        timeout_s: u64,
        /// The largest response accepted, in bytes.
        #[arg(long, default_value_t = 8 << 20)]
        max_bytes: usize,
        /// Also record every decision in RUN_DIR/egress-events.jsonl (the
        /// run's identity, hash-chained, durable before the request leaves).
        #[arg(long)]
        run_dir: Option<PathBuf>,
    },
}

pub fn run(cmd: EgressCommand) -> CliResult {
    match cmd {
        EgressCommand::Check { url } => check(&url, crate::output::json()),
        EgressCommand::Send {
            admitted,
            connection,
            body,
            timeout_s,
            max_bytes,
            run_dir,
        } => send(
            &admitted,
            &connection,
            &body,
            timeout_s,
            max_bytes,
            run_dir.as_deref(),
        ),
    }
}

fn check(url: &str, json: bool) -> CliResult {
    let report = bl_egress::check(url);
    if json {
        outln!(
            "{}",
            serde_json::to_string(&report).expect("reports serialize")
        );
    } else {
        outln!("{}  {url}", if report.allow { "ALLOW" } else { "DENY " });
        for a in &report.addresses {
            outln!("  {:<40} {}", a.address, a.class);
        }
        if let Some(denial) = &report.denial {
            outln!("  {denial}");
        }
    }
    Ok(if report.allow {
        Exit::Success
    } else {
        Exit::No
    })
}

/// Prints each broker decision as it happens, after recording it in the
/// run's egress log when there is one.
struct StderrAudit(Option<bl_store::EgressLog>);

impl bl_egress::EgressAudit for StderrAudit {
    fn record(&self, event: bl_egress::EgressEvent) -> Result<(), bl_egress::AuditError> {
        errln!(
            "BL_EGRESS {}",
            serde_json::to_string(&event).expect("events serialize")
        );
        match &self.0 {
            Some(log) => log.record(event),
            None => Ok(()),
        }
    }
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

fn send(
    admitted: &std::path::Path,
    connection: &str,
    body: &str,
    timeout_s: u64,
    max_bytes: usize,
    run_dir: Option<&std::path::Path>,
) -> CliResult {
    let opened = run_dir
        .map(|dir| bl_store::EgressLog::open(dir, now_rfc3339))
        .transpose()
        .map_err(|e| format!("--run-dir: {e}"));
    let audit: Arc<dyn bl_egress::EgressAudit> = match opened {
        Ok(log) => Arc::new(StderrAudit(log)),
        Err(e) => {
            return Err(CliError::refused(format!("egress send: {e}")));
        }
    };
    let records = std::fs::read_to_string(admitted)
        .map_err(|e| format!("{}: {e}", admitted.display()))
        .and_then(|text| {
            serde_json::from_str(&text)
                .map_err(|e| format!("{}: not JSON: {e}", admitted.display()))
        })
        .and_then(|value| {
            bl_egress::parse_admitted(&value)
                .map_err(|e| format!("invalid --admitted record \u{2014} {e}"))
        });
    let records = match records {
        Ok(r) => r,
        Err(e) => {
            return Err(CliError::refused(format!("egress send: {e}")));
        }
    };
    let body = match body.strip_prefix('@') {
        Some(path) => match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) => {
                return Err(CliError::refused(format!("egress send: {path}: {e}")));
            }
        },
        None => body.as_bytes().to_vec(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            return Err(CliError::refused(format!("egress send: {e}")));
        }
    };
    let result = runtime.block_on(async {
        let resolver = bl_egress::Resolver::system().map_err(|e| e.to_string())?;
        let broker = bl_egress::Broker::new(
            records,
            resolver,
            bl_egress::AddressPolicy::production(),
            bl_egress::BrokerLimits {
                response_bytes: max_bytes,
                timeout: Duration::from_secs(timeout_s),
                ..bl_egress::BrokerLimits::default()
            },
            Box::new(bl_egress::EnvCredentials),
            audit,
        );
        let lease = broker
            .issue_lease(connection, Duration::from_secs(timeout_s + 5))
            .map_err(|e| e.to_string())?;
        broker
            .forward(
                &lease.id,
                &lease.effect,
                bl_egress::OutboundRequest {
                    method: "POST".into(),
                    content_type: Some("application/json".into()),
                    body,
                },
            )
            .await
            .map_err(|e| e.to_string())
    });
    match result {
        Ok(response) => {
            if crate::output::json() {
                crate::output::outln!(
                    "{}",
                    serde_json::json!({
                        "status": response.status,
                        "body": String::from_utf8_lossy(&response.body),
                    })
                );
            } else {
                crate::output::stdout_bytes(&response.body);
            }
            if (200..300).contains(&response.status) {
                Ok(Exit::Success)
            } else {
                Ok(Exit::No)
            }
        }
        Err(e) => Err(CliError::refused(format!("egress send: {e}"))),
    }
}
