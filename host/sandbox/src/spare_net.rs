//! Network namespaces made ahead of the cages that use them. Making one
//! (its loopback device included) costs the kernel about 0.4 ms, which a
//! cage started with `CLONE_NEWNET` waits for. A thread of bl's makes the
//! next one while bl does other work; a cage takes it (`setns`) and it is
//! never given to another. Where none is ready, or none can be made (bl is
//! not root), the cage makes its own as before.

use nix::libc;
use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// At most one spare waits: a run that takes none wastes one at most.
static SPARE: Mutex<Option<OwnedFd>> = Mutex::new(None);
/// A thread is making one now.
static MAKING: AtomicBool = AtomicBool::new(false);

/// Starts making a spare unless one is ready or being made.
pub(crate) fn make_ahead() {
    if lock().is_some() || MAKING.swap(true, Ordering::SeqCst) {
        return;
    }
    let started = std::thread::Builder::new()
        .name("bl-netns".into())
        .spawn(|| {
            // A thread alone may enter a new network namespace; it ends
            // right after, and only the descriptor keeps the namespace.
            if let Ok(fd) = make() {
                *lock() = Some(fd);
            }
            MAKING.store(false, Ordering::SeqCst);
        });
    if started.is_err() {
        MAKING.store(false, Ordering::SeqCst);
    }
}

/// Whether a cage took one since the last was started: the next is made
/// once that cage's command has started ([`after_start`]).
static WANTED: AtomicBool = AtomicBool::new(false);

/// The spare, for one cage only. The next is made from the second cage
/// on: a process that makes one cage (a loop whose gate runs one command)
/// would only make a namespace to throw away, and the kernel tears one
/// down on another thread of its own, while the next run starts.
pub(crate) fn take() -> Option<OwnedFd> {
    static TAKEN: AtomicBool = AtomicBool::new(false);
    let spare = lock().take();
    if TAKEN.swap(true, Ordering::SeqCst) {
        WANTED.store(true, Ordering::SeqCst);
    }
    spare
}

/// Makes the next spare once a cage's command runs, not while the cage
/// starts: made then, its thread took the CPU the cage's child was about
/// to run on (0.5 ms on 2 cores), while the command's own run leaves the
/// other CPU idle.
pub(crate) fn after_start() {
    if WANTED.swap(false, Ordering::SeqCst) {
        make_ahead();
    }
}

fn lock() -> std::sync::MutexGuard<'static, Option<OwnedFd>> {
    SPARE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new network namespace with its loopback device up, as the cage's own
/// would be: made by this thread, which then lives in it.
fn make() -> std::io::Result<OwnedFd> {
    // SAFETY: unshare with a plain flag, for the calling thread.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    crate::root_cage::loopback_up()?;
    Ok(std::fs::File::open("/proc/thread-self/ns/net")?.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_spare_is_a_fresh_namespace_given_once() {
        if !nix::unistd::geteuid().is_root() {
            return; // Only root makes network namespaces outside a user namespace.
        }
        let own = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        make_ahead();
        let since = std::time::Instant::now();
        while lock().is_none() && since.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let first = take().expect("a spare was made");
        let first_ino = std::fs::File::from(first.try_clone().unwrap())
            .metadata()
            .unwrap()
            .ino();
        assert_ne!(first_ino, own, "the spare is not bl's own network");
        // The first cage's take makes none ahead; the second's does, once
        // its command started.
        after_start();
        assert!(lock().is_none() && !MAKING.load(Ordering::SeqCst));
        drop(take());
        assert!(!MAKING.load(Ordering::SeqCst), "not while the cage starts");
        after_start();
        let since = std::time::Instant::now();
        while lock().is_none() && since.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let second = take().expect("the next was made");
        let second_ino = std::fs::File::from(second).metadata().unwrap().ino();
        assert_ne!(second_ino, first_ino, "no namespace is given twice");
    }
}
