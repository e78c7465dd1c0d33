//! The pages bl draws for people: a graph run's arena, one self-contained
//! HTML file (every asset inline, no network) that checks in the browser
//! what it shows; the approval consoles' pages (a graph run's, an evidence service's); a loop run's report; the studio, where a
//! manifest is drawn and linted as it is typed. Pure: run material in,
//! HTML text out; the application layer and the servers do the rest.

mod arena;
mod console;
mod evidence_console;
mod layout;
mod monitor;
mod report;
mod studio;

pub use arena::{ArenaInput, ChildRun, PageError, arena_html};
pub use console::{ConsoleApproval, ConsoleEvidence, console_html};
pub use evidence_console::{EvidenceCard, Reviewing, evidence_console_html};
pub use layout::{Layout, Placed, layout};
pub use monitor::monitor_html;
pub use report::{LoopReportInput, loop_report_html};
pub use studio::{
    LayoutCache, studio_html, studio_report, studio_report_cached, studio_report_since, studio_yaml,
};
