//! What `bl doctor` reports: one [`Check`] per thing the machine can or
//! cannot do, each problem with its fix. The adapters that know how to
//! look (the sandbox, the plugin toolchain) produce them; the CLI prints.

use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Ok,
    Warn,
    Fail,
}

/// One line of the doctor's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: &'static str,
    #[serde(rename = "status")]
    pub health: Health,
    pub detail: String,
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            health: Health::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            health: Health::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn fail(name: &'static str, detail: impl Into<String>, fix: Option<String>) -> Check {
        Check {
            name,
            health: Health::Fail,
            detail: detail.into(),
            fix,
        }
    }
}
