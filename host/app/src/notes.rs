//! What a use case tells the person running it on the side (a warning, a
//! note, a workspace kept), without deciding where that goes: the front
//! end sets the sink once (the CLI: stderr); until then notes go to stderr.

use std::sync::OnceLock;

type Sink = Box<dyn Fn(&str) + Send + Sync>;

static SINK: OnceLock<Sink> = OnceLock::new();

/// Where notes go, for the rest of the process (set once; later calls are
/// ignored).
pub fn set_sink(sink: impl Fn(&str) + Send + Sync + 'static) {
    let _ = SINK.set(Box::new(sink));
}

/// Says `text` (one or more lines) to whoever runs the use case.
pub fn note(text: impl AsRef<str>) {
    match SINK.get() {
        Some(sink) => sink(text.as_ref()),
        None => eprintln!("{}", text.as_ref()),
    }
}
