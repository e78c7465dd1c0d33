//! The stub runner's script: `cassettes/default.json`, a list of recorded
//! turns, each for one lap or for every lap not listed (`"lap": "*"`).
//! Reading it is pure; applying its actions is the stub runner's job.

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Cassette {
    pub interactions: Vec<Interaction>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Interaction {
    /// A lap number, or `"*"` for any lap without its own entry.
    pub lap: Value,
    #[serde(default)]
    pub agent_output: String,
    #[serde(default)]
    pub actions: Vec<Action>,
    /// Recorded, never trusted: only the gate decides.
    #[serde(default)]
    pub agent_claimed_done: bool,
    #[serde(default)]
    pub tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    WriteFile { path: String, content: String },
    Noop,
}

/// A cassette that does not parse, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the cassette is not valid: {0}")]
pub struct CassetteError(String);

impl Cassette {
    pub fn parse(text: &str) -> Result<Cassette, CassetteError> {
        serde_json::from_str(text).map_err(|e| CassetteError(e.to_string()))
    }

    /// The turn recorded for `lap`: its own entry, else the `"*"` entry.
    pub fn for_lap(&self, lap: u32) -> Option<&Interaction> {
        let own = self
            .interactions
            .iter()
            .find(|i| i.lap.as_u64() == Some(u64::from(lap)));
        own.or_else(|| self.interactions.iter().find(|i| i.lap == "*"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lap_gets_its_own_turn_else_the_fallback() {
        let c = Cassette::parse(r#"{"version":1,"interactions":[
            {"lap":1,"agent_output":"one","actions":[{"type":"write_file","path":"a","content":"x"}],"tokens":5,"changed":true},
            {"lap":"*","agent_output":"any","actions":[{"type":"noop"}]}]}"#).unwrap();
        assert_eq!(c.for_lap(1).unwrap().agent_output, "one");
        assert_eq!(
            c.for_lap(1).unwrap().actions,
            vec![Action::WriteFile {
                path: "a".into(),
                content: "x".into()
            }]
        );
        assert_eq!(c.for_lap(7).unwrap().agent_output, "any");
        assert_eq!(c.for_lap(7).unwrap().actions, vec![Action::Noop]);
    }
}
