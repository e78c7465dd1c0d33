//! The stop a process-wide signal requests ([`bl_core::interrupt`]), as a
//! graph drive takes it (or a cancel of that drive alone): no new attempt
//! after it, and a record to put down
//! before a second signal may end the process.

use std::sync::Arc;

use crate::runtime::{CANCEL_SIGNAL, Cancel};

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
