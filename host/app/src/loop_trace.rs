//! The `trace` bound: one OpenTelemetry span per lap, exported over
//! OTLP/HTTP (JSON) to the collector that the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) names. Without
//! either, or with `trace: false`, it does nothing. A collector that is
//! down costs a failed export, never the run: traces are telemetry, the
//! ledger is the record.

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
    redact: crate::loop_run::Redact,
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
    pub fn new(enabled: bool, loop_name: &str, redact: crate::loop_run::Redact) -> LapSpans {
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
