//! Signs an evidence workspace's checkpoints on a thread of its own, off
//! the path of the answers: a request's lines are durable before it is
//! answered, and the checkpoint over them follows a moment later. Heads
//! asked for while one is being written are coalesced into the newest.
//! Each checkpoint replaces the one this sealer wrote before it; the one
//! the store wrote, synced, when it opened stays.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use bl_store::SigningKey;
use bl_store::merkle::Hash;
use bl_store::provable::{Durability, TreeHead, write_checkpoint_at};

#[derive(Default)]
struct Progress {
    /// The newest head asked for and not yet written.
    wanted: Option<(u64, Hash)>,
    /// The size of the newest head written.
    written: u64,
    /// Why a checkpoint could not be written; the store stops recording.
    failed: Option<String>,
    stop: bool,
    /// Someone waits for the checkpoint: write it now.
    flushing: bool,
}

type Shared = Arc<(Mutex<Progress>, Condvar)>;

/// How long a checkpoint waits for more requests to cover.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(50);

pub(crate) struct Sealer {
    shared: Shared,
    thread: Option<JoinHandle<()>>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, Progress> {
    shared.0.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sealer {
    /// A sealer for the workspace `dir`, whose log `key` signs, with `run_id`
    /// in its checkpoints' origin; heads up to `written` are already sealed.
    pub(crate) fn start(
        dir: PathBuf,
        run_id: &'static str,
        key: SigningKey,
        written: u64,
    ) -> Sealer {
        let shared: Shared = Arc::new((
            Mutex::new(Progress {
                written,
                ..Progress::default()
            }),
            Condvar::new(),
        ));
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("bl-evidence-sealer".into())
            .spawn(move || seal_until_stopped(&worker, &dir, run_id, &key))
            .expect("a thread can be started");
        Sealer {
            shared,
            thread: Some(thread),
        }
    }

    /// Asks for the checkpoint of the log at `size` leaves with `root`.
    /// Returns why an earlier one failed, if one did.
    pub(crate) fn request(&self, size: u64, root: Hash) -> Option<String> {
        let mut progress = lock(&self.shared);
        if progress.failed.is_none() {
            // A sealer that already has a head to write is coalescing and
            // takes the newest when it wakes; waking it on every request
            // would cost a context switch per answer.
            let idle = progress.wanted.is_none();
            progress.wanted = Some((size, root));
            if idle {
                self.shared.1.notify_all();
            }
        }
        progress.failed.clone()
    }

    /// Waits until every head asked for is written; why one failed, if
    /// one did.
    pub(crate) fn flush(&self) -> Option<String> {
        let mut progress = lock(&self.shared);
        progress.flushing = true;
        self.shared.1.notify_all();
        while progress.wanted.is_some() && progress.failed.is_none() {
            progress = self
                .shared
                .1
                .wait(progress)
                .unwrap_or_else(|e| e.into_inner());
        }
        progress.flushing = false;
        progress.failed.clone()
    }
}

impl Drop for Sealer {
    fn drop(&mut self) {
        lock(&self.shared).stop = true;
        self.shared.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn seal_until_stopped(shared: &Shared, dir: &std::path::Path, run_id: &str, key: &SigningKey) {
    let mut superseded: Option<PathBuf> = None;
    loop {
        let (size, root) = {
            let mut progress = lock(shared);
            while progress.wanted.is_none() && !progress.stop {
                progress = shared.1.wait(progress).unwrap_or_else(|e| e.into_inner());
            }
            // The requests of a burst become one checkpoint, and its disk
            // writes stay out of the answers' way; a stop, or a flush,
            // does not wait.
            progress = shared
                .1
                .wait_timeout_while(progress, COALESCE, |p| !p.stop && !p.flushing)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            // What was asked for before a stop is still written.
            match progress.wanted {
                Some(head) => head,
                None => return,
            }
        };
        let head = TreeHead { run_id, size, root };
        // Not synced: a sync here would stall the answers' own (one disk).
        // The log is durable, and the next start signs it again and sets
        // aside a checkpoint a lost machine left damaged.
        let written = write_checkpoint_at(dir, &head, Some(key), Durability::Written);
        let mut progress = lock(shared);
        match written {
            Ok((path, _)) => {
                if let Some(old) = superseded.replace(path.clone()).filter(|old| *old != path) {
                    // Left behind, it would still verify against the
                    // log's prefix: harmless.
                    let _ = std::fs::remove_file(old);
                }
                progress.written = progress.written.max(size);
                if progress.wanted == Some((size, root)) {
                    progress.wanted = None;
                }
            }
            Err(e) => {
                progress.failed = Some(format!("{}: checkpoint: {e}", dir.display()));
                progress.wanted = None;
            }
        }
        shared.1.notify_all();
    }
}
