//! The ledger of a bounded loop (`ledger.jsonl` in a loop run directory,
//! `.ledger.jsonl` in a loop package), checked over bytes (no I/O), with
//! the statuses and wording bounded-loops' `bl verify` reports.
//!
//! One compact JSON object per lap. `prev` is the hex sha256 of the previous
//! line's exact bytes (64 zeros on the first line); the head is the sha256
//! of the last line the chain accepted. Ledgers written before chaining
//! existed carry no `prev` at all.

use serde_json::Value;

use crate::chain::GENESIS_HASH;

/// What the chain check concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainStatus {
    Verified,
    Broken,
    TornTail,
    /// No line carries `prev` (written before chaining existed).
    Unchained,
    /// An unchained prefix followed by chained lines.
    Mixed,
}

impl ChainStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ChainStatus::Verified => "VERIFIED",
            ChainStatus::Broken => "BROKEN",
            ChainStatus::TornTail => "TORN_TAIL",
            ChainStatus::Unchained => "UNCHAINED",
            ChainStatus::Mixed => "MIXED",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerChain {
    pub status: ChainStatus,
    pub detail: String,
    /// Lines in the file, a torn last one included.
    pub lines: usize,
    /// Lines whose `prev` chained.
    pub verified_lines: usize,
    /// sha256 of the last line the chain accepted (64 zeros if none).
    pub head: String,
}

/// What the chain check reads of a line: its `prev`, if it has one. The
/// rest of the line is checked to be JSON but not kept: a ledger of ten
/// thousand laps took 45 ms more to open as whole `Value`s, at every run.
struct ChainRow {
    prev: Option<Value>,
}

impl<'de> serde::Deserialize<'de> for ChainRow {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Row;
        impl<'de> serde::de::Visitor<'de> for Row {
            type Value = ChainRow;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<ChainRow, M::Error> {
                let mut prev = None;
                while let Some(is_prev) = map.next_key::<IsPrev>()? {
                    if is_prev.0 {
                        // A key given twice counts as its last, as in a `Map`.
                        prev = Some(map.next_value::<Value>()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(ChainRow { prev })
            }
        }
        deserializer.deserialize_map(Row)
    }
}

/// Whether a key is `prev` (escaped or not), without keeping it.
struct IsPrev(bool);

impl<'de> serde::Deserialize<'de> for IsPrev {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Key;
        impl serde::de::Visitor<'_> for Key {
            type Value = IsPrev;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<IsPrev, E> {
                Ok(IsPrev(key == "prev"))
            }
        }
        deserializer.deserialize_str(Key)
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// Walks the ledger's lines in order and stops at the first that breaks.
pub fn verify_ledger(bytes: &[u8]) -> LedgerChain {
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if bytes.ends_with(b"\n") || bytes.is_empty() {
        lines.pop();
    }
    let count = lines.len();
    let mut head = GENESIS_HASH.to_string();
    let mut verified = 0;
    let mut unchained_prefix = 0;
    let broken = |status, detail: String, verified, head: String| LedgerChain {
        status,
        detail,
        lines: count,
        verified_lines: verified,
        head,
    };
    for (index, line) in lines.iter().enumerate() {
        let number = index + 1;
        if line.is_empty() {
            return broken(
                ChainStatus::Broken,
                format!("blank line at {number}: the writer never emits one"),
                verified,
                head,
            );
        }
        let row: ChainRow = match serde_json::from_slice(line) {
            Ok(row) => row,
            Err(e) => {
                // Valid JSON that is not an object, or not JSON at all:
                // which one, by JSON's syntax alone.
                let syntax = if e.is_data() {
                    serde_json::from_slice::<serde::de::IgnoredAny>(line).err()
                } else {
                    Some(e)
                };
                return match syntax {
                    None => broken(
                        ChainStatus::Broken,
                        format!("line {number} is not a JSON object"),
                        verified,
                        head,
                    ),
                    Some(_) if number == count => broken(
                        ChainStatus::TornTail,
                        format!(
                            "line {number} is not complete JSON, and it is the last line: a run interrupted mid-write, not an edited ledger"
                        ),
                        verified,
                        head,
                    ),
                    Some(e) => broken(
                        ChainStatus::Broken,
                        format!("invalid JSON at line {number}: {}", json_error_words(&e)),
                        verified,
                        head,
                    ),
                };
            }
        };
        match row.prev {
            None if verified == 0 => unchained_prefix += 1,
            None => {
                return broken(
                    ChainStatus::Broken,
                    format!(
                        "line {number} carries no prev but line {} did: the chain was removed",
                        number - 1
                    ),
                    verified,
                    head,
                );
            }
            Some(prev) => {
                // An unchained prefix is covered by the first chained line,
                // whose prev is the hash of the line before it.
                let recorded = match prev {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                if recorded != head {
                    return broken(
                        ChainStatus::Broken,
                        format!(
                            "prev mismatch at line {number}: the ledger records {} but line {} hashes to {}",
                            short(&recorded),
                            number - 1,
                            short(&head)
                        ),
                        verified,
                        head,
                    );
                }
                verified += 1;
            }
        }
        head = bl_core::sha256_hex(line);
    }
    let (status, detail) = if unchained_prefix == count && count > 0 {
        (
            ChainStatus::Unchained,
            "no line carries prev: written before 0.6.6, so integrity cannot be checked either way"
                .to_string(),
        )
    } else if unchained_prefix > 0 {
        (
            ChainStatus::Mixed,
            format!(
                "lines 1-{unchained_prefix} predate chaining; lines {}-{count} verify, and their chain covers the bytes of the unchained prefix",
                unchained_prefix + 1
            ),
        )
    } else {
        (
            ChainStatus::Verified,
            format!("{verified} of {count} lines chained and matching"),
        )
    };
    LedgerChain {
        status,
        detail,
        lines: count,
        verified_lines: verified,
        head,
    }
}

/// The first words of a JSON error as Python's `json` module words the
/// common case ("Expecting value"); the position is left out.
fn json_error_words(error: &serde_json::Error) -> String {
    let text = error.to_string();
    if text.starts_with("expected value") || text.starts_with("expected ident") {
        "Expecting value".to_string()
    } else {
        text.split(" at line ").next().unwrap_or(&text).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chained(rows: usize) -> Vec<String> {
        let mut prev = GENESIS_HASH.to_string();
        (1..=rows)
            .map(|lap| {
                let line = format!(r#"{{"prev":"{prev}","lap":{lap}}}"#);
                prev = bl_core::sha256_hex(line.as_bytes());
                line
            })
            .collect()
    }

    fn ledger(lines: &[String]) -> Vec<u8> {
        lines
            .iter()
            .flat_map(|l| format!("{l}\n").into_bytes())
            .collect()
    }

    #[test]
    fn an_intact_ledger_verifies_and_heads_at_its_last_line() {
        let lines = chained(3);
        let result = verify_ledger(&ledger(&lines));
        assert_eq!(result.status, ChainStatus::Verified);
        assert_eq!(result.detail, "3 of 3 lines chained and matching");
        assert_eq!((result.lines, result.verified_lines), (3, 3));
        assert_eq!(result.head, bl_core::sha256_hex(lines[2].as_bytes()));
    }

    #[test]
    fn an_edited_line_breaks_the_chain_at_the_next_line() {
        let mut lines = chained(3);
        lines[1] = lines[1].replace("\"lap\":2", "\"lap\":7");
        let result = verify_ledger(&ledger(&lines));
        assert_eq!(result.status, ChainStatus::Broken);
        assert!(
            result
                .detail
                .starts_with("prev mismatch at line 3: the ledger records ")
        );
        assert_eq!(result.verified_lines, 2);
        assert_eq!(result.head, bl_core::sha256_hex(lines[1].as_bytes()));
    }

    /// A ledger of `lines`, each chained to the one before with the
    /// `prev` written as `shape` writes it (`{prev}` is the hash).
    fn chained_as(lines: &[&str]) -> Vec<u8> {
        let mut prev = GENESIS_HASH.to_string();
        let mut out = Vec::new();
        for shape in lines {
            let line = shape.replace("{prev}", &prev);
            prev = bl_core::sha256_hex(line.as_bytes());
            out.extend_from_slice(format!("{line}\n").as_bytes());
        }
        out
    }

    #[test]
    fn a_line_is_read_as_any_json_reader_reads_it() {
        // An escaped key is the key; a key given twice counts as its last.
        let escaped = verify_ledger(&chained_as(&[
            r#"{"pr\u0065v":"{prev}","x":{"y":[1,{"z":"\u00e9 \" }"}]}}"#,
            r#"{ "lap" : 2 , "prev":"stale", "prev" : "{prev}" }"#,
        ]));
        assert_eq!(escaped.status, ChainStatus::Verified, "{}", escaped.detail);
        let last_counts = verify_ledger(&chained_as(&[r#"{"prev":"{prev}","prev":"stale"}"#]));
        assert!(
            last_counts
                .detail
                .starts_with("prev mismatch at line 1: the ledger records stale")
        );
        // A prev that is not a string is compared as its JSON text.
        let null = verify_ledger(&chained_as(&[r#"{"prev":null}"#]));
        assert!(
            null.detail
                .starts_with("prev mismatch at line 1: the ledger records null")
        );

        // JSON that is not an object, anywhere; JSON cut short, last or not.
        let lines = chained(1);
        for (tail, status, detail) in [
            ("[1]", ChainStatus::Broken, "line 2 is not a JSON object"),
            ("5", ChainStatus::Broken, "line 2 is not a JSON object"),
            (
                "[1, 2",
                ChainStatus::TornTail,
                "line 2 is not complete JSON, and it is the last line: a run interrupted mid-write, not an edited ledger",
            ),
            (
                "{\"prev\":1,}",
                ChainStatus::TornTail,
                "line 2 is not complete JSON, and it is the last line: a run interrupted mid-write, not an edited ledger",
            ),
        ] {
            let mut bytes = ledger(&lines);
            bytes.extend_from_slice(tail.as_bytes());
            let result = verify_ledger(&bytes);
            assert_eq!(
                (result.status, result.detail.as_str()),
                (status, detail),
                "{tail}"
            );
            bytes.extend_from_slice(format!("\n{}\n", lines[0]).as_bytes());
            let middle = verify_ledger(&bytes);
            assert_eq!(
                middle.status,
                ChainStatus::Broken,
                "{tail} before another line"
            );
        }
        let mut bytes = ledger(&lines);
        bytes.extend_from_slice(b"[1, 2\n{}\n");
        assert_eq!(
            verify_ledger(&bytes).detail,
            "invalid JSON at line 2: EOF while parsing a list"
        );
    }

    #[test]
    fn torn_blank_and_legacy_ledgers_are_named() {
        let lines = chained(2);
        let mut torn = ledger(&lines);
        torn.extend_from_slice(b"{\"prev\":\"ab");
        let result = verify_ledger(&torn);
        assert_eq!(
            (result.status, result.lines, result.verified_lines),
            (ChainStatus::TornTail, 3, 2)
        );

        let blank = verify_ledger(b"\n");
        assert_eq!(blank.status, ChainStatus::Broken);
        assert_eq!(blank.detail, "blank line at 1: the writer never emits one");

        let legacy = verify_ledger(b"{\"lap\":1}\n{\"lap\":2}\n");
        assert_eq!(
            (legacy.status, legacy.verified_lines),
            (ChainStatus::Unchained, 0)
        );
        assert_eq!(legacy.head, bl_core::sha256_hex(b"{\"lap\":2}"));

        let first = "{\"lap\":1}";
        let mixed = format!(
            "{first}\n{{\"prev\":\"{}\",\"lap\":2}}\n",
            bl_core::sha256_hex(first.as_bytes())
        );
        let result = verify_ledger(mixed.as_bytes());
        assert_eq!(
            (result.status, result.verified_lines),
            (ChainStatus::Mixed, 1)
        );

        let removed = format!("{}\n{{\"lap\":2}}\n", lines[0]);
        assert_eq!(
            verify_ledger(removed.as_bytes()).detail,
            "line 2 carries no prev but line 1 did: the chain was removed"
        );
        let junk = format!("{}\njunk\n{}\n", lines[0], lines[1]);
        assert_eq!(
            verify_ledger(junk.as_bytes()).detail,
            "invalid JSON at line 2: Expecting value"
        );
    }
}
