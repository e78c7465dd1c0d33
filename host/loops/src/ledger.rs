//! One line of a loop's ledger, as bounded-loops 0.7 writes it: a compact
//! JSON object with its keys in bounded-loops' order (not sorted, also
//! inside the evidence), UTF-8 written raw, and `prev` the hex sha256 of
//! the previous line's exact bytes (64 zeros first). The chain check lives
//! in bl-store (`loop_ledger`); this module only builds lines.

use serde::Serialize;
use serde_json::Value;

/// `prev` of a ledger's first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What the engine decided at the end of a lap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LapDecision {
    Done,
    Continue,
    Halt,
    Pause,
    Killed,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictRecord {
    pub passed: bool,
    pub detail: String,
    pub evidence: Ordered,
}

/// JSON whose objects keep their keys in the order they were built, as
/// the ledger's evidence does (`{"mode": …, "children": […]}`).
#[derive(Debug, Clone, PartialEq)]
pub enum Ordered {
    Json(Value),
    Object(Vec<(String, Ordered)>),
    Array(Vec<Ordered>),
}

impl Ordered {
    /// `{}`.
    pub fn empty() -> Ordered {
        Ordered::Object(Vec::new())
    }

    /// An object from `(key, value)` pairs, in order.
    pub fn object<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Ordered)>) -> Ordered {
        Ordered::Object(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// The same value as plain (key-sorted) JSON.
    pub fn to_json(&self) -> Value {
        match self {
            Ordered::Json(v) => v.clone(),
            Ordered::Object(pairs) => Value::Object(
                pairs
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
            Ordered::Array(items) => Value::Array(items.iter().map(Ordered::to_json).collect()),
        }
    }
}

impl<T: Into<Value>> From<T> for Ordered {
    fn from(value: T) -> Ordered {
        Ordered::Json(value.into())
    }
}

impl Serialize for Ordered {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Ordered::Json(v) => v.serialize(serializer),
            Ordered::Object(pairs) => {
                let mut map = serializer.serialize_map(Some(pairs.len()))?;
                for (k, v) in pairs {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            Ordered::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetSpent {
    pub laps: u32,
    pub tokens: u64,
    /// Seconds since the run started, rounded to hundredths.
    pub wallclock_s: f64,
}

/// Which gate judged, as the ledger names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateRecord {
    pub kind: String,
    /// `shipped` for the loop's own gate, `override` for `--gate-override`.
    pub source: String,
    pub implementation: String,
    /// The wasm component that judged (`sha256:…`): bl's addition, so a
    /// ledger names the exact gate code, not only its kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetDeclared {
    pub attempts: u32,
    pub tokens: Option<u64>,
    pub wallclock_s: u64,
    /// `wallclock_s` less the handoff reserve: the time work turns may use.
    pub wallclock_work_s: f64,
}

/// One lap's record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerLine {
    pub prev: String,
    pub lap: u32,
    pub ts: String,
    pub verdict: VerdictRecord,
    pub decision: LapDecision,
    /// `None` is written `{}` (a killed lap spends nothing).
    #[serde(serialize_with = "spent_or_empty")]
    pub budget_spent: Option<BudgetSpent>,
    /// Whether a work turn ran in this lap (a lap stopped by a bound before
    /// its turn records `false`).
    pub attempted: bool,
    /// `HANDOFF.md` when this lap ended the run on a bound and one was written.
    pub handoff: String,
    pub gate: GateRecord,
    pub budget_declared: BudgetDeclared,
}

fn spent_or_empty<S: serde::Serializer>(
    spent: &Option<BudgetSpent>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    match spent {
        Some(spent) => spent.serialize(serializer),
        None => serializer.serialize_map(Some(0))?.end(),
    }
}

impl LedgerLine {
    /// The line's bytes, without the newline.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a ledger line always serializes")
    }
}

/// Non-ASCII escaped as Python's `json.dumps` does (receipts are written
/// this way); shared with the other records in bl-core.
pub use bl_core::canonical::ascii_escaped;

/// Rounds seconds to hundredths, as the ledger records them.
pub fn hundredths(seconds: f64) -> f64 {
    (seconds * 100.0).round() / 100.0
}

#[cfg(any(test, feature = "test-support"))]
/// The line bounded-loops wrote for the a11y loop's DONE lap: a real
/// line for tests, here and in the crates that use the ledger.
pub fn sample_line() -> LedgerLine {
    LedgerLine {
        prev: GENESIS.into(),
        lap: 1,
        ts: "2026-11-30T02:08:04.367348Z".into(),
        verdict: VerdictRecord {
            passed: true,
            detail: "gate passed (exit 0)".into(),
            evidence: Ordered::object([
                ("cmd", "python3 seed/a11y_lint.py seed/index.html".into()),
                ("code", 0.into()),
                (
                    "tail",
                    "a11y_lint: no static accessibility violations in seed/index.html\n".into(),
                ),
            ]),
        },
        decision: LapDecision::Done,
        budget_spent: Some(BudgetSpent {
            laps: 1,
            tokens: 214,
            wallclock_s: 0.15,
        }),
        attempted: true,
        handoff: String::new(),
        gate: GateRecord {
            kind: "command".into(),
            source: "shipped".into(),
            implementation: "CommandGate".into(),
            component: None,
        },
        budget_declared: BudgetDeclared {
            attempts: 10,
            tokens: None,
            wallclock_s: 990,
            wallclock_work_s: 900.0,
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn line() -> LedgerLine {
        sample_line()
    }

    #[test]
    fn a_line_is_byte_for_byte_the_one_bounded_loops_wrote() {
        // tests/corpus/loop-ledgers/upstream-run/ledger.jsonl, written by
        // bounded-loops 0.7.6's own `bl run --run-id`.
        let recorded = include_str!("../../../tests/corpus/loop-ledgers/upstream-run/ledger.jsonl");
        assert_eq!(format!("{}\n", line().to_line()), recorded);
    }

    #[test]
    fn evidence_keeps_its_order_and_utf8_is_raw() {
        let mut l = line();
        l.verdict.detail = "rejected — anchor".into();
        l.verdict.evidence = Ordered::object([
            ("mode", "all".into()),
            ("children", Ordered::Array(vec![Ordered::empty()])),
        ]);
        let text = l.to_line();
        assert!(
            text.contains(
                r#""detail":"rejected — anchor","evidence":{"mode":"all","children":[{}]}"#
            ),
            "{text}"
        );
    }
}
