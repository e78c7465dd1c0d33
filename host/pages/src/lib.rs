//! The pages bl draws for people. Today: a graph run's arena, one
//! self-contained HTML file (every asset inline, no network) that checks
//! in the browser what it shows. Pure: run material in, HTML text out; the
//! application layer reads the run and writes the file.

mod arena;
mod layout;

pub use arena::{ArenaInput, PageError, arena_html};
pub use layout::{Layout, Placed, layout};
