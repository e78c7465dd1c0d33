//! Test helper: publishes one effect through the run's publication ledger.
//!
//!     bl-test-publisher RUN_DIR KEY DIGEST EFFECTS_LOG [--crash-in-effect]
//!
//! The effect appends one line to EFFECTS_LOG; `--crash-in-effect` aborts
//! the process inside the effect, after the intent is durable.

use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, run_dir, key, digest, effects_log, rest @ ..] = args.as_slice() else {
        eprintln!("usage: bl-test-publisher RUN_DIR KEY DIGEST EFFECTS_LOG [--crash-in-effect]");
        std::process::exit(2);
    };
    let crash = rest.iter().any(|a| a == "--crash-in-effect");
    let ledger = bl_store::Ledger::new(std::path::Path::new(run_dir));
    let outcome = ledger.publish(key, digest, || {
        if crash {
            std::process::abort();
        }
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(effects_log)?;
        writeln!(log, "fired by {}", std::process::id())?;
        Ok(())
    });
    match outcome {
        Ok(outcome) => println!("{outcome:?}"),
        Err(e) => {
            println!("error: {e}");
            std::process::exit(1);
        }
    }
}
