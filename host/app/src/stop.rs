//! The stop a process-wide signal requests ([`bl_core::interrupt`]), or a
//! cancel of one drive alone, as a graph drive takes it: no new attempt
//! after it, and a record to put down before a second signal may end the
//! process.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The signal number a cancelled run records as its stop (SIGTERM's): a
/// cancel is a polite stop, and `resume` continues the run.
pub const CANCEL_SIGNAL: i32 = 15;

/// A stop asked of one run, not of the whole process.
#[derive(Debug, Default)]
pub struct Cancel(AtomicBool);

impl Cancel {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A drive's view of the process's stop request, and of its own cancel.
pub struct ProcessStop {
    record: bl_core::interrupt::Record,
    cancel: Option<Arc<Cancel>>,
}

impl ProcessStop {
    pub fn new(cancel: Option<Arc<Cancel>>) -> ProcessStop {
        ProcessStop {
            record: bl_core::interrupt::Record::open(),
            cancel,
        }
    }
}

impl bl_run::executor::Stop for ProcessStop {
    fn requested(&self) -> Option<i32> {
        bl_core::interrupt::requested().or_else(|| {
            self.cancel
                .as_ref()
                .filter(|c| c.is_cancelled())
                .map(|_| CANCEL_SIGNAL)
        })
    }

    fn recorded(&self) {
        self.record.done();
    }
}
