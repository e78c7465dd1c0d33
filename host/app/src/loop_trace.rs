//! The `trace` bound: one OpenTelemetry span per lap, exported over
//! OTLP/HTTP (JSON) to the collector that the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) names. Without
//! either, or with `trace: false`, it does nothing. A collector that is
//! down costs a failed export, never the run: traces are telemetry, the
//! ledger is the record, and a lap's span goes out only once its ledger
//! line is durable. The ledger's redaction ([`Redact`]) lives here too:
//! spans say what the ledger says.

use std::time::SystemTime;

use bl_loops::engine::Trace;
use bl_loops::ledger::LedgerLine;
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span, Tracer, TracerProvider};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter};

pub struct LapSpans {
    exporter: Option<(SdkTracerProvider, opentelemetry_sdk::trace::SdkTracer)>,
    /// `--redact` reaches the spans too: they say what the ledger says.
    redact: Redact,
    loop_name: String,
    lap_started: SystemTime,
    /// The last lap (its line as the ledger has it, its start and end),
    /// held until that line is durable: a trace never tells of a lap the
    /// ledger could still lose.
    held: Option<(LedgerLine, SystemTime, SystemTime)>,
}

/// Whether the environment names a collector.
fn endpoint_configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()))
}

impl LapSpans {
    pub fn new(enabled: bool, loop_name: &str, redact: Redact) -> LapSpans {
        let exporter = (enabled && endpoint_configured())
            .then(|| {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpJson)
                    .build()
                    .map_err(|e| {
                        crate::notes::note(format!(
                            "[bl] trace: no OTLP exporter ({e}); laps are not traced"
                        ))
                    })
                    .ok()?;
                Some(exporter)
            })
            .flatten();
        LapSpans::exporting_to(exporter, loop_name, redact)
    }

    /// Spans exported to `exporter` (none: nothing is exported).
    fn exporting_to(
        exporter: Option<impl SpanExporter + 'static>,
        loop_name: &str,
        redact: Redact,
    ) -> LapSpans {
        let exporter = exporter.map(|exporter| {
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name("bl")
                .build();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(exporter)
                .with_resource(resource)
                .build();
            let tracer = provider.tracer("bl.loops");
            (provider, tracer)
        });
        LapSpans {
            exporter,
            redact,
            loop_name: loop_name.to_string(),
            lap_started: SystemTime::now(),
            held: None,
        }
    }

    /// Exports the last lap's span if its line was made durable, then
    /// flushes and stops the exporter.
    pub fn finish(mut self, last_line_durable: bool) {
        if last_line_durable {
            self.release();
        }
        if let Some((provider, _)) = self.exporter {
            let _ = provider.shutdown();
        }
    }

    /// Exports the span held back, if any.
    fn release(&mut self) {
        let (Some((_, tracer)), Some((line, started, ended))) = (&self.exporter, self.held.take())
        else {
            return;
        };
        let decision = serde_json::to_value(line.decision)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let mut attributes = vec![
            KeyValue::new("bl.loop", self.loop_name.clone()),
            KeyValue::new("bl.lap", i64::from(line.lap)),
            KeyValue::new("bl.decision", decision),
            KeyValue::new("bl.verdict.passed", line.verdict.passed),
            KeyValue::new("bl.verdict.detail", line.verdict.detail.clone()),
            KeyValue::new("bl.attempted", line.attempted),
            KeyValue::new("bl.gate.kind", line.gate.kind.clone()),
        ];
        if let Some(spent) = &line.budget_spent {
            attributes.push(KeyValue::new("bl.tokens", spent.tokens as i64));
        }
        let mut span = tracer
            .span_builder("bl.loop.lap")
            .with_start_time(started)
            .with_attributes(attributes)
            .start(tracer);
        span.end_with_timestamp(ended);
    }
}

impl Trace for LapSpans {
    fn lap(&mut self, line: &LedgerLine) {
        let now = SystemTime::now();
        let started = std::mem::replace(&mut self.lap_started, now);
        if self.exporter.is_none() {
            return;
        }
        // The ledger made the lap before durable before it took this line.
        self.release();
        self.held = Some((self.redact.apply(line), started, now));
    }

    fn settled(&mut self) {
        self.release();
    }
}

/// `--redact`: applied to each line before it is written and hashed.
pub struct Redact {
    mode: bl_loops::redact::Mode,
    loop_dir: String,
}

impl Redact {
    pub fn new(mode: &str, loop_dir: &std::path::Path) -> Redact {
        Redact {
            mode: bl_loops::redact::Mode::parse(mode).unwrap_or(bl_loops::redact::Mode::Off),
            loop_dir: loop_dir.display().to_string(),
        }
    }

    pub fn line(&self, line: &LedgerLine) -> String {
        self.apply(line).to_line()
    }

    /// The line as the ledger keeps it (and the trace may export it).
    pub fn apply(&self, line: &LedgerLine) -> LedgerLine {
        bl_loops::redact::redact_line(line, self.mode, &self.loop_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::trace::SpanData;
    use std::sync::{Arc, Mutex};

    /// Keeps the lap number of each span it is given.
    #[derive(Debug, Clone, Default)]
    struct Collected(Arc<Mutex<Vec<i64>>>);

    impl SpanExporter for Collected {
        async fn export(&self, batch: Vec<SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
            let laps = batch.iter().filter_map(|span| {
                let lap = span
                    .attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == "bl.lap")?;
                match lap.value {
                    opentelemetry::Value::I64(n) => Some(n),
                    _ => None,
                }
            });
            self.0.lock().unwrap().extend(laps);
            Ok(())
        }
    }

    fn line(lap: u32) -> LedgerLine {
        LedgerLine {
            lap,
            ..bl_loops::ledger::sample_line()
        }
    }

    /// A lap's span goes out once the ledger took the next line (which it
    /// does only after this one is durable), and the last one only if the
    /// run's last line was made durable.
    #[test]
    fn a_laps_span_waits_until_its_ledger_line_is_durable() {
        let redact = || Redact::new("off", std::path::Path::new("/loop"));
        for durable in [true, false] {
            let collected = Collected::default();
            let mut spans = LapSpans::exporting_to(Some(collected.clone()), "l", redact());
            spans.lap(&line(1));
            assert!(collected.0.lock().unwrap().is_empty(), "lap 1 is held");
            spans.lap(&line(2));
            assert_eq!(*collected.0.lock().unwrap(), vec![1]);
            // Settled before the next turn: lap 2 need not wait for lap 3.
            spans.settled();
            assert_eq!(*collected.0.lock().unwrap(), vec![1, 2]);
            spans.lap(&line(3));
            spans.finish(durable);
            let expected = if durable { vec![1, 2, 3] } else { vec![1, 2] };
            assert_eq!(*collected.0.lock().unwrap(), expected, "durable: {durable}");
        }
    }
}
