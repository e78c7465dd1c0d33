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
static STOP_ANSWERED: AtomicBool = AtomicBool::new(false);

/// Called by a command that has printed its own answer to a stop (a graph
/// run's report, with what was interrupted): `main` then adds none.
pub fn stop_answered() {
    STOP_ANSWERED.store(true, Ordering::SeqCst);
}

/// Whether the command answered the stop itself.
pub fn was_stop_answered() -> bool {
    STOP_ANSWERED.load(Ordering::SeqCst)
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
            // A second signal: no more waiting.
            if let Some(again) = signals.next() {
                let asked = Instant::now();
                while bl_core::interrupt::unrecorded() > 0 && asked.elapsed() < RECORD_WAIT {
                    std::thread::sleep(Duration::from_millis(5));
                }
                bl_sandbox::containment::kill_all();
                if crate::output::json() {
                    crate::output::outln!("{}", stopped(again).to_json());
                    crate::output::flush();
                }
                std::process::exit(128 + again);
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
    if crate::output::json() {
        crate::output::outln!("{}", stopped(signal).to_json());
    }
    std::process::exit(128 + signal);
}
