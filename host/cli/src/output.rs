//! Writing to stdout and stderr without ever panicking. `println!` panics
//! when its stream is closed (`bl graph schema | head -c 10`); through
//! [`outln!`] and [`out!`], a closed stdout ends bl quietly with exit 141,
//! as a command that SIGPIPE stopped ends (any other write error is said on
//! stderr, exit 74), and a closed stderr is ignored.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static JSON: AtomicBool = AtomicBool::new(false);

/// Sets whether this run answers in JSON (`--json`, a global flag).
pub fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

/// Whether this run answers in JSON.
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Exit code of a command that wrote to a closed pipe (128 + SIGPIPE).
const CLOSED_PIPE: i32 = 141;
/// Exit code when stdout fails otherwise (EX_IOERR).
const WRITE_FAILED: i32 = 74;

/// `print!` to stdout; on a closed stdout, bl stops quietly.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::stdout(format_args!($($arg)*), false) };
}

/// `println!` to stdout; on a closed stdout, bl stops quietly.
macro_rules! outln {
    () => { $crate::output::stdout(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::output::stdout(format_args!($($arg)*), true) };
}

/// `eprintln!` that ignores a closed stderr.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::output::stderr(format_args!($($arg)*)) };
}

pub(crate) use {errln, out, outln};

pub fn stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|_| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    if let Err(e) = written {
        stop_on_write_error(e);
    }
}

/// Raw bytes to stdout (a command's output, a response body), flushed.
pub fn stdout_bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|_| out.flush()) {
        stop_on_write_error(e);
    }
}

pub fn stderr(args: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|_| err.write_all(b"\n"));
}

/// Nobody reads what bl would print (a closed pipe): nothing more is worth
/// doing. Any other failure to write (a full disk) is said on stderr.
fn stop_on_write_error(error: std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(CLOSED_PIPE)
    }
    stderr(format_args!("error: cannot write to stdout: {error}"));
    std::process::exit(WRITE_FAILED)
}

/// Flushes stdout at the end of a command; a reader that went away before
/// the last bytes is the same quiet stop.
pub fn flush() {
    if let Err(e) = std::io::stdout().lock().flush() {
        stop_on_write_error(e);
    }
}

/// A command's answer: `json` as one line under `--json`, else `text`
/// (a newline is added to either).
pub fn answer(json: impl FnOnce() -> serde_json::Value, text: impl FnOnce() -> String) {
    crate::interrupt::answer(|| {
        if self::json() {
            outln!("{}", json());
        } else {
            outln!("{}", text());
        }
    })
}

pub use bl_core::table::table_lines;

/// A page's loopback listener on `port`, its address printed as `SAYS:
/// URL` (and flushed, for whoever waits for it) before anything is served.
pub fn serving(port: u16, says: &str) -> Result<bl_web::Loopback, crate::exit::CliError> {
    let page = bl_web::Loopback::bind(port)
        .map_err(|e| crate::exit::CliError::refused(format!("{says}: {e}")))?;
    crate::output::outln!("{says}: {}", page.url);
    flush();
    Ok(page)
}
