//! The stop a process-wide signal requests ([`bl_core::interrupt`]), as a
//! graph drive takes it: no new attempt after it, and a record to put down
//! before a second signal may end the process.

/// A drive's view of the process's stop request.
pub struct ProcessStop {
    record: bl_core::interrupt::Record,
}

impl ProcessStop {
    pub fn new() -> ProcessStop {
        ProcessStop {
            record: bl_core::interrupt::Record::open(),
        }
    }
}

impl Default for ProcessStop {
    fn default() -> Self {
        Self::new()
    }
}

impl bl_run::executor::Stop for ProcessStop {
    fn requested(&self) -> Option<i32> {
        bl_core::interrupt::requested()
    }

    fn recorded(&self) {
        self.record.done();
    }
}
