//! What a gate decides, and what the host makes of it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Low,
    Medium,
    High,
    Critical,
}

impl Severity {
    /// The name as the JSON forms spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub severity: Severity,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

/// A gate's decision about a workspace. Only `passed` is ever branched on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub passed: bool,
    pub summary: String,
    pub findings: Vec<Finding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_digest: Option<String>,
}

/// The three outcomes of asking a gate. A gate that could not decide is an
/// `Error`: never a failed verdict, never a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateOutcome {
    Passed(Verdict),
    Failed(Verdict),
    Error(String),
}

impl GateOutcome {
    pub fn from_verdict(verdict: Verdict) -> Self {
        if verdict.passed {
            GateOutcome::Passed(verdict)
        } else {
            GateOutcome::Failed(verdict)
        }
    }

    /// The process exit code bl uses for this outcome: 0 pass, 1 fail, 3 error.
    pub fn exit_code(&self) -> i32 {
        match self {
            GateOutcome::Passed(_) => 0,
            GateOutcome::Failed(_) => 1,
            GateOutcome::Error(_) => 3,
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            GateOutcome::Passed(_) => "PASS",
            GateOutcome::Failed(_) => "FAIL",
            GateOutcome::Error(_) => "ERROR",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(passed: bool) -> Verdict {
        Verdict {
            passed,
            summary: String::new(),
            findings: vec![],
            evidence_digest: None,
        }
    }

    #[test]
    fn only_passed_field_decides_pass_or_fail() {
        assert_eq!(GateOutcome::from_verdict(verdict(true)).exit_code(), 0);
        assert_eq!(GateOutcome::from_verdict(verdict(false)).exit_code(), 1);
        assert_eq!(GateOutcome::Error("trap".into()).exit_code(), 3);
    }
}
