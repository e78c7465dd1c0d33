//! SIGINT and SIGTERM: recorded for whatever is running
//! ([`bl_core::interrupt`]), which kills its children's process groups,
//! waits for them and removes its temporary directories; `main` then exits
//! with 128 + the signal. With nothing running, bl exits at once.
//!
//! A graph run takes a stop as a pause: it records the attempts in flight
//! as interrupted, and says how to resume. A second signal ends bl at once:
//! once every drive has put its stop on record (at most a moment), every
//! process bl started is killed and bl exits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// How long the work in progress gets to clean up before bl exits anyway.
const CLEANUP_GRACE: Duration = Duration::from_secs(10);
/// What a bl running other bl processes allows beyond their own grace: they
/// hear of the signal a moment after it does.
const CHILDREN_MARGIN: Duration = Duration::from_secs(2);
/// How long a second signal waits for the stop to be on record.
const RECORD_WAIT: Duration = Duration::from_secs(1);

static RUNS_CHILDREN: AtomicBool = AtomicBool::new(false);
/// The command that continues what is running, if it can be continued:
/// said when a second signal ends bl before the run can say it itself.
static CONTINUE_WITH: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
/// Whether the run's one answer is printed: its own, or that it stopped.
static ANSWERED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Prints a command's answer (`print`), which says how the run ended,
/// stopped or not: no answer that it stopped follows it under `--json`,
/// nor comes out in the middle of it (a signal waits for it).
pub fn answer(print: impl FnOnce()) {
    let mut answered = ANSWERED.lock().unwrap_or_else(|e| e.into_inner());
    print();
    *answered = true;
}

/// Under `--json`, says that the run was stopped by `signal`, unless the
/// run has answered.
pub fn answer_stopped(signal: i32) {
    if crate::output::json() {
        let mut answered = ANSWERED.lock().unwrap_or_else(|e| e.into_inner());
        say_stopped(&mut answered, signal, print_line);
    }
}

fn say_stopped(answered: &mut bool, signal: i32, print: impl FnOnce(String)) {
    if !std::mem::replace(answered, true) {
        print(stopped(signal).to_json().to_string());
    }
}

fn print_line(line: String) {
    crate::output::outln!("{line}");
    crate::output::flush();
}

/// Ends bl with 128 + `signal`, said under `--json` unless the run answered
/// (nothing prints after); an answer stuck on a full pipe waits a moment.
fn end_stopped(signal: i32) -> ! {
    let asked = Instant::now();
    while crate::output::json() && asked.elapsed() < RECORD_WAIT {
        let answered = match ANSWERED.try_lock() {
            Ok(held) => Some(held),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        if let Some(mut answered) = answered {
            say_stopped(&mut answered, signal, print_line);
            std::process::exit(128 + signal);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::process::exit(128 + signal)
}

/// Called by a command whose work a stop leaves to be continued, with the
/// command that continues it.
pub fn continue_with(command: String) {
    *CONTINUE_WITH.lock().unwrap_or_else(|e| e.into_inner()) = Some(command);
}

/// A second signal ends bl before the run reports: on stderr, what that
/// left and how to continue (stdout stays the run's, or its JSON answer).
fn say_ended_at_once(signal: i32) {
    let continued = CONTINUE_WITH
        .try_lock()
        .ok()
        .and_then(|held| held.clone())
        .map(|command| {
            format!(
                " Nothing that finished is lost, and the run is not over.\nContinue it:  {command}"
            )
        })
        .unwrap_or_default();
    crate::output::errln!(
        "stopped at once by a second {}: everything bl started was ended.{continued}",
        bl_run::events::signal_name(signal)
    );
}

/// Called by a command whose children are bl processes, each with its own
/// [`CLEANUP_GRACE`]: an interrupted bl waits that much longer for them.
pub fn outlast_children() {
    RUNS_CHILDREN.store(true, Ordering::SeqCst);
}

/// The error a run stopped by `signal` answers with.
pub fn stopped(signal: i32) -> crate::exit::CliError {
    crate::exit::CliError::with_exit(
        crate::exit::Exit::Signalled(signal),
        format!("stopped by signal {signal}; everything bl started was ended"),
    )
}

pub fn install() {
    let Ok(mut signals) = Signals::new([SIGINT, SIGTERM]) else {
        // Without handlers the default action still stops bl; only the
        // cleanup is lost, so this is no reason to refuse to run.
        return;
    };
    std::thread::Builder::new()
        .name("bl-signals".into())
        .spawn(move || {
            let mut signals = signals.forever();
            let Some(signal) = signals.next() else {
                return;
            };
            bl_core::interrupt::request(signal);
            std::thread::Builder::new()
                .name("bl-stop".into())
                .spawn(move || patient_stop(signal))
                .ok();
            // A second signal: no more waiting (bl still ends by the first).
            if signals.next().is_some() {
                let asked = Instant::now();
                while bl_core::interrupt::unrecorded() > 0 && asked.elapsed() < RECORD_WAIT {
                    std::thread::sleep(Duration::from_millis(5));
                }
                bl_sandbox::containment::kill_all();
                say_ended_at_once(signal);
                end_stopped(signal);
            }
        })
        .ok();
}

/// The first signal: the work in progress ends its children and reports;
/// bl exits by `main` (or here, once the grace has passed).
fn patient_stop(signal: i32) {
    let asked = Instant::now();
    let grace = if RUNS_CHILDREN.load(Ordering::SeqCst) {
        CLEANUP_GRACE + CHILDREN_MARGIN
    } else {
        CLEANUP_GRACE
    };
    while bl_core::interrupt::running() > 0 && asked.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Give the command a moment to return and report through `main`,
    // which exits with the same code.
    std::thread::sleep(Duration::from_millis(200));
    end_stopped(signal);
}

#[cfg(test)]
mod tests {
    /// Said once, and never after the run answered.
    #[test]
    fn a_stop_is_said_only_when_nothing_else_answered() {
        let mut said = Vec::new();
        for mut answered in [true, false] {
            super::say_stopped(&mut answered, 2, |l| said.push(l));
            super::say_stopped(&mut answered, 2, |l| said.push(l));
        }
        assert_eq!(said.len(), 1, "{said:?}");
    }
}
