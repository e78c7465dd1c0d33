//! `bl run DIR DIR…`: several loops side by side. Each loop runs as its own
//! `bl run DIR` process, so it gets its own scratch workspace, cage, ledger
//! and exit code, exactly as it would alone. This module hands the loops
//! out to `--jobs` workers, relays each one's output whole and in the
//! order given, and answers with the largest exit code of any loop.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::exit::{CliError, Exit};
use crate::loop_cmd::RunArgs;
use crate::output::errln;

/// How often the relay looks up from waiting to see whether bl was asked
/// to stop.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// What one loop's process left: its output, and its exit code (128 + N
/// when a signal ended it).
struct Finished {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    code: i32,
}

/// Runs every loop in `args.loop_dirs`, at most `jobs` at a time.
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

    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let running: Arc<Mutex<HashMap<usize, u32>>> = Arc::default();
    let (sent, finished) = mpsc::channel::<(usize, Finished)>();
    let workers: Vec<_> = (0..jobs)
        .map(|_| {
            let (dirs, exe, flags) = (dirs.clone(), exe.clone(), flags.clone());
            let (next, stop, running, sent) =
                (next.clone(), stop.clone(), running.clone(), sent.clone());
            std::thread::spawn(move || {
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    if index >= dirs.len() || stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let _guard = bl_core::interrupt::Running::start();
                    let done = run_one(&exe, &dirs[index], &flags, |pid| {
                        running.lock().unwrap().insert(index, pid);
                    });
                    running.lock().unwrap().remove(&index);
                    if sent.send((index, done)).is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    drop(sent);

    // Relay in the order given: a loop's output waits for the ones before it.
    let mut pending = BTreeMap::new();
    let mut relayed = 0;
    let mut codes = Vec::with_capacity(dirs.len());
    let mut forwarded = false;
    loop {
        match finished.recv_timeout(SIGNAL_POLL) {
            Ok((index, done)) => {
                pending.insert(index, done);
                while let Some(done) = pending.remove(&relayed) {
                    relay(&done);
                    codes.push((relayed, done.code));
                    relayed += 1;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if let Some(signal) = bl_core::interrupt::requested()
            && !forwarded
        {
            // Each loop runs in its own process group, so the terminal's
            // signal reached only this process: pass it on, once.
            stop.store(true, Ordering::SeqCst);
            for pid in running.lock().unwrap().values() {
                // SAFETY: kill(2) with a pid this process started and has not
                // yet waited for, so the pid cannot have been reused.
                unsafe { libc::kill(*pid as libc::pid_t, signal) };
            }
            forwarded = true;
        }
    }
    for worker in workers {
        let _ = worker.join();
    }
    // Loops that finished after an earlier one that never started (bl was
    // stopped) still have their say.
    for (index, done) in pending {
        relay(&done);
        codes.push((index, done.code));
    }
    summarize(dirs, &codes, jobs);
    Ok(batch_exit(codes.iter().map(|(_, code)| *code)))
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

/// One loop, as `bl run DIR` alone runs it, in its own process group and
/// with no terminal to ask (a rung that needs approval pauses).
fn run_one(exe: &Path, dir: &Path, flags: &[OsString], started: impl FnOnce(u32)) -> Finished {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let child = Command::new(exe)
        .arg("run")
        .arg(dir)
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn();
    let output = child.and_then(|child| {
        started(child.id());
        child.wait_with_output()
    });
    match output {
        Ok(Output {
            status,
            stdout,
            stderr,
        }) => Finished {
            stdout,
            stderr,
            code: status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(Exit::Undecided.code().into()),
        },
        Err(e) => Finished {
            stdout: Vec::new(),
            stderr: format!("error: bl run {}: cannot start: {e}\n", dir.display()).into_bytes(),
            code: Exit::Undecided.code().into(),
        },
    }
}

fn relay(done: &Finished) {
    crate::output::stdout_bytes(&done.stdout);
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(&done.stderr).and_then(|_| err.flush());
}

/// One line on stderr: how many loops ran and which did not exit 0.
fn summarize(dirs: &[PathBuf], codes: &[(usize, i32)], jobs: usize) {
    let mut not_done: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for (index, code) in codes.iter().filter(|(_, code)| *code != 0) {
        not_done
            .entry(*code)
            .or_default()
            .push(dirs[*index].display().to_string());
    }
    let exited_0 = codes.len() - not_done.values().map(Vec::len).sum::<usize>();
    let mut line = format!(
        "bl run: {} of {} loops ran ({jobs} at a time); {exited_0} exited 0",
        codes.len(),
        dirs.len()
    );
    for (code, names) in &not_done {
        line.push_str(&format!("; exit {code}: {}", names.join(", ")));
    }
    errln!("{line}");
}

/// The batch's exit code: 0 when every loop exited 0, else the largest of
/// their codes (1 not done, 2 refused, 3 undecided, 128 + N stopped).
fn batch_exit(codes: impl Iterator<Item = i32>) -> Exit {
    match codes.max().unwrap_or(0) {
        0 => Exit::Success,
        code => Exit::Code(u8::try_from(code).unwrap_or(u8::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_answers_with_the_largest_code() {
        assert_eq!(batch_exit([0, 0].into_iter()).code(), 0);
        assert_eq!(batch_exit([0, 1, 0].into_iter()).code(), 1);
        assert_eq!(batch_exit([1, 3, 2].into_iter()).code(), 3);
        assert_eq!(batch_exit([0, 143].into_iter()).code(), 143);
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
        let batch = parse([
            "bl",
            "a",
            "b",
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
            "--jobs",
            "3",
        ]);
        let flags = batch.child_flags(true);
        assert!(flags.contains(&"--json".into()));
        let one = parse(
            ["bl".into(), "a".into()]
                .into_iter()
                .chain(flags.into_iter().filter(|f| f != "--json")),
        );
        let expected = parse([
            "bl",
            "a",
            "--yes",
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
        ]);
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
