//! word-count: a gate that passes when `file` has at least `min_words`
//! words. Config: `{ "file": "report.md", "min_words": 200 }`.

use bl_plugin_sdk::{Finding, FsError, Gate, PluginError, Severity, Verdict, Workspace};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub file: String,
    pub min_words: usize,
}

pub struct WordCount;

impl Gate for WordCount {
    type Config = Config;

    fn check(ws: &dyn Workspace, config: Config) -> Result<Verdict, PluginError> {
        let text = match ws.read_to_string(&config.file) {
            Ok(text) => text,
            Err(FsError::NotFound(_)) => {
                return Ok(Verdict::fail(format!("{} is missing", config.file)));
            }
            // Any other refusal is an error (never a failed verdict); `into`
            // words it for the run's record.
            Err(e) => return Err(e.into()),
        };
        let words = text.split_whitespace().count();
        if words >= config.min_words {
            Ok(Verdict::pass(format!("{} has {words} words", config.file)))
        } else {
            Ok(Verdict::fail(format!(
                "{} has {words} words, fewer than {}",
                config.file, config.min_words
            ))
            .with_findings(vec![
                Finding::new(Severity::Medium, "too short")
                    .rule("word-count/min")
                    .at(&config.file),
            ]))
        }
    }
}

bl_plugin_sdk::export_gate!(WordCount);

#[cfg(test)]
mod tests {
    use super::*;
    use bl_plugin_sdk::testing::NativeWorkspace;

    #[test]
    fn counts_words_natively() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("r.md"), "one two three").unwrap();
        let ws = NativeWorkspace::new(dir.path()).unwrap();
        let run = |min: usize| {
            bl_plugin_sdk::run_gate::<WordCount>(
                &ws,
                &format!(r#"{{"file": "r.md", "min_words": {min}}}"#),
            )
            .unwrap()
        };
        assert!(run(3).passed);
        assert!(!run(4).passed);
    }
}
