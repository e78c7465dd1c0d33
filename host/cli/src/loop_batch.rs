//! `bl run DIR DIR…`: several loops side by side. Each loop runs as its own
//! `bl run DIR` process, so it gets its own scratch workspace, cage, ledger
//! and exit code, exactly as it would alone. This module hands the loops
//! out to `--jobs` workers, relays each one's output whole and in the
//! order given, and answers with the largest exit code of any loop.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use crate::exit::{CliError, Exit};
use crate::loop_args::RunArgs;
use crate::output::errln;

/// What one loop's process left: its output and its exit code (128 + N
/// when signal N ended it).
struct Finished {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    code: u8,
}

/// Runs every loop in `args.loop_dirs`, at most `--jobs` at a time.
pub fn run(args: &RunArgs, json_out: bool) -> Result<Exit, CliError> {
    let dirs = &args.loop_dirs;
    if !args.yes && args.gate_override.is_none() {
        return Err(CliError::refused(format!(
            "bl run: {} loops run side by side, so none of them can stop to ask: pass --yes to confirm them all (`bl show DIR` prints what each one would run)",
            dirs.len()
        )));
    }
    refuse_repeats(dirs)?;
    let exe = std::env::current_exe()
        .map_err(|e| CliError::refused(format!("bl run: cannot find the bl binary: {e}")))?;
    let flags = args.child_flags(json_out);
    let jobs = args
        .jobs
        .map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            usize::from,
        )
        .min(dirs.len());
    // Held until every loop's output is relayed: an interrupted bl waits
    // for the loops (each with its own grace) rather than exiting under them.
    let _relaying = bl_core::interrupt::Running::start();
    crate::interrupt::outlast_children();

    let next = Arc::new(AtomicUsize::new(0));
    let (sent, finished) = mpsc::channel::<(usize, Finished)>();
    let workers: Vec<_> = (0..jobs)
        .map(|_| {
            let (dirs, exe, flags, next, sent) = (
                dirs.clone(),
                exe.clone(),
                flags.clone(),
                next.clone(),
                sent.clone(),
            );
            std::thread::spawn(move || {
                // Once bl is asked to stop, no loop starts.
                while bl_core::interrupt::requested().is_none() {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    let Some(dir) = dirs.get(index) else { return };
                    if sent.send((index, run_one(&exe, dir, &flags))).is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    drop(sent);

    // Relay in the order given: a loop's output waits for the ones before it.
    let mut pending = BTreeMap::new();
    let mut codes = BTreeMap::new();
    let mut next_to_relay = 0;
    for (index, done) in finished {
        pending.insert(index, done);
        while let Some(done) = pending.remove(&next_to_relay) {
            relay(&done);
            codes.insert(next_to_relay, done.code);
            next_to_relay += 1;
        }
    }
    for worker in workers {
        let _ = worker.join();
    }
    // After a stop, a loop that finished behind one that never started.
    for (index, done) in pending {
        relay(&done);
        codes.insert(index, done.code);
    }
    if !json_out {
        summarize(dirs, &codes, jobs);
    }
    Ok(batch_exit(codes.values().copied()))
}

/// Two entries for one package would append to one ledger at once and break
/// its chain.
fn refuse_repeats(dirs: &[PathBuf]) -> Result<(), CliError> {
    let mut seen = HashMap::new();
    for dir in dirs {
        let key = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        if let Some(first) = seen.insert(key, dir) {
            return Err(CliError::refused(format!(
                "bl run: {} and {} are the same loop: two runs of one loop side by side would write one ledger at once; name it once",
                first.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

/// One loop, as `bl run DIR` alone runs it (see bl_app::loop_process).
fn run_one(exe: &Path, dir: &Path, flags: &[OsString]) -> Finished {
    let ran = bl_app::loop_process::run_loop_process(exe, dir, flags);
    match ran.status {
        Ok(status) => Finished {
            stdout: ran.stdout,
            stderr: ran.stderr,
            code: Exit::of_status(status).code(),
        },
        Err(e) => Finished {
            stdout: Vec::new(),
            stderr: format!("error: bl run {}: {e}\n", dir.display()).into_bytes(),
            code: Exit::Undecided.code(),
        },
    }
}

fn relay(done: &Finished) {
    crate::output::stdout_bytes(&done.stdout);
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(&done.stderr).and_then(|_| err.flush());
}

/// One line on stderr for people: how the loops ended, and which did not
/// exit 0 or never started.
fn summarize(dirs: &[PathBuf], codes: &BTreeMap<usize, u8>, jobs: usize) {
    let mut by_code: BTreeMap<u8, Vec<String>> = BTreeMap::new();
    let mut not_started = Vec::new();
    for (index, dir) in dirs.iter().enumerate() {
        match codes.get(&index) {
            Some(code) => by_code
                .entry(*code)
                .or_default()
                .push(dir.display().to_string()),
            None => not_started.push(dir.display().to_string()),
        }
    }
    let exited_0 = by_code.remove(&0).map_or(0, |d| d.len());
    let mut line = format!(
        "bl run: {} loops ({jobs} at a time): {exited_0} exited 0",
        dirs.len()
    );
    for (code, names) in &by_code {
        line.push_str(&format!("; exit {code}: {}", names.join(", ")));
    }
    if !not_started.is_empty() {
        line.push_str(&format!("; not started: {}", not_started.join(", ")));
    }
    errln!("{line}");
}

/// The batch's exit code: 0 when every loop exited 0, else the largest of
/// their codes (1 not done, 2 refused, 3 undecided, 128 + N stopped).
fn batch_exit(codes: impl Iterator<Item = u8>) -> Exit {
    match codes.max().unwrap_or(0) {
        0 => Exit::Success,
        code => Exit::Code(code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_answers_with_the_largest_code() {
        assert_eq!(batch_exit([0u8, 0].into_iter()).code(), 0);
        assert_eq!(batch_exit([0u8, 1, 0].into_iter()).code(), 1);
        assert_eq!(batch_exit([1u8, 3, 2].into_iter()).code(), 3);
        assert_eq!(batch_exit([0u8, 143].into_iter()).code(), 143);
        assert_eq!(batch_exit(std::iter::empty()).code(), 0);
    }

    #[derive(clap::Parser)]
    struct Parsed {
        #[command(flatten)]
        args: RunArgs,
    }

    fn parse<I: Into<OsString> + Clone>(argv: impl IntoIterator<Item = I>) -> RunArgs {
        use clap::Parser;
        Parsed::parse_from(argv).args
    }

    #[test]
    fn each_loop_runs_with_every_flag_the_batch_was_given() {
        // Every flag a loop takes, none at its default.
        const FLAGS: [&str; 13] = [
            "--runner",
            "shell",
            "--gate-override",
            "true",
            "--max-iterations",
            "4",
            "--keep-workspace",
            "--run-id",
            "r1",
            "--resume",
            "--redact",
            "paths",
            "--yes",
        ];
        let batch = parse(["bl", "a", "b", "--jobs", "3"].into_iter().chain(FLAGS));
        let flags = batch.child_flags(true);
        assert!(flags.contains(&"--json".into()));
        let one = parse(
            ["bl".into(), "a".into()]
                .into_iter()
                .chain(flags.into_iter().filter(|f| f != "--json")),
        );
        let expected = parse(["bl", "a"].into_iter().chain(FLAGS));
        assert_eq!(format!("{one:?}"), format!("{expected:?}"));
        // Without flags, only the confirmation and the default redaction.
        assert_eq!(
            parse(["bl", "a", "b"]).child_flags(false),
            ["--yes", "--redact", "off"].map(OsString::from)
        );
    }

    #[test]
    fn one_loop_named_twice_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::create_dir(&a).unwrap();
        let again = dir.path().join("a/../a");
        let e = refuse_repeats(&[a.clone(), dir.path().join("b"), again]).unwrap_err();
        assert!(e.to_string().contains("are the same loop"), "{e}");
        assert!(refuse_repeats(&[a, dir.path().join("b")]).is_ok());
    }
}
