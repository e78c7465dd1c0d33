//! `bl egress check URL`: would the broker let a request go there?

use clap::Subcommand;

#[derive(Subcommand)]
pub enum EgressCommand {
    /// Resolve (where the name resolves) and classify a URL's destination
    /// without connecting. Exit 0 allow, 1 deny.
    Check {
        url: String,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: EgressCommand) -> u8 {
    let EgressCommand::Check { url, json } = cmd;
    let report = bl_egress::check(&url);
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("reports serialize")
        );
    } else {
        println!("{}  {url}", if report.allow { "ALLOW" } else { "DENY " });
        for a in &report.addresses {
            println!("  {:<40} {}", a.address, a.class);
        }
        if let Some(denial) = &report.denial {
            println!("  {denial}");
        }
    }
    if report.allow { 0 } else { 1 }
}
