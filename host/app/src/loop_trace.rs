//! The `trace` bound: one OpenTelemetry span per lap, exported over
//! OTLP/HTTP (JSON) to the collector that the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) names. Without
//! either, or with `trace: false`, it does nothing. A collector that is
//! down costs a failed export, never the run: traces are telemetry, the
//! ledger is the record. The ledger's redaction ([`Redact`]) lives here
//! too: spans say what the ledger says.

use std::time::SystemTime;

use bl_loops::engine::Trace;
use bl_loops::ledger::LedgerLine;
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span, Tracer, TracerProvider};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;

pub struct LapSpans {
    exporter: Option<(SdkTracerProvider, opentelemetry_sdk::trace::SdkTracer)>,
    /// `--redact` reaches the spans too: they say what the ledger says.
    redact: Redact,
    loop_name: String,
    lap_started: SystemTime,
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
                let resource = opentelemetry_sdk::Resource::builder()
                    .with_service_name("bl")
                    .build();
                let provider = SdkTracerProvider::builder()
                    .with_simple_exporter(exporter)
                    .with_resource(resource)
                    .build();
                let tracer = provider.tracer("bl.loops");
                Some((provider, tracer))
            })
            .flatten();
        LapSpans {
            exporter,
            redact,
            loop_name: loop_name.to_string(),
            lap_started: SystemTime::now(),
        }
    }

    /// Flushes and stops the exporter.
    pub fn finish(self) {
        if let Some((provider, _)) = self.exporter {
            let _ = provider.shutdown();
        }
    }
}

impl Trace for LapSpans {
    fn lap(&mut self, line: &LedgerLine) {
        let now = SystemTime::now();
        let started = std::mem::replace(&mut self.lap_started, now);
        let Some((_, tracer)) = &self.exporter else {
            return;
        };
        let line = &self.redact.apply(line);
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
        span.end_with_timestamp(now);
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
