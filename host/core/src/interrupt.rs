//! Cooperative interruption. The CLI's signal handler records SIGINT or
//! SIGTERM here; whatever runs a child process polls [`requested`], ends
//! the child's whole process group, waits for it and cleans up, so `bl`
//! can exit with the conventional 128 + signal code leaving nothing behind.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

static SIGNAL: AtomicI32 = AtomicI32::new(0);
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Records that `signal` asked this process to stop.
pub fn request(signal: i32) {
    SIGNAL.store(signal, Ordering::SeqCst);
}

/// The signal that asked this process to stop, if one did.
pub fn requested() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// How many children are running now under a [`Running`] guard: while
/// any is, an interrupted process leaves their cleanup to the code that
/// started them.
pub fn running() -> usize {
    RUNNING.load(Ordering::SeqCst)
}

/// Held while a child runs, from before it starts until it has been waited
/// for and everything it used is removed.
pub struct Running(());

impl Running {
    pub fn start() -> Running {
        RUNNING.fetch_add(1, Ordering::SeqCst);
        Running(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

static UNRECORDED: AtomicUsize = AtomicUsize::new(0);

/// Held by a drive that must put a stop on record before its process may
/// end: a second signal that ends bl at once first waits (briefly) until
/// every such drive has said [`Record::done`], so what it leaves is the
/// same record a patient stop leaves.
pub struct Record {
    done: std::sync::atomic::AtomicBool,
}

impl Record {
    pub fn open() -> Record {
        UNRECORDED.fetch_add(1, Ordering::SeqCst);
        Record {
            done: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The stop is on record (or the drive ended): nothing is left to write.
    pub fn done(&self) {
        if !self.done.swap(true, Ordering::SeqCst) {
            UNRECORDED.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        self.done();
    }
}

/// How many drives still have a stop to put on record.
pub fn unrecorded() -> usize {
    UNRECORDED.load(Ordering::SeqCst)
}
