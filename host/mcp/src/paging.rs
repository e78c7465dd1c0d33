//! Long answers in pages. Any tool's answer longer than
//! [`MAX_RESULT_BYTES`] is kept here once and handed out a slice at a
//! time: each page is one JSON object (`_page`, and `text`, a slice of the
//! whole answer's JSON) no longer than `MAX_RESULT_BYTES` itself, and
//! `next_cursor` names the next slice of that same kept answer. A call
//! with a cursor reads the kept answer and runs nothing, so a preview is
//! never re-made with a new token between its pages, and a confirmed call
//! is never made twice by paging it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

/// At most this many bytes in one answer (a result of megabytes breaks
/// some clients' transports).
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// Room a page keeps for its own fields around the slice, and for the
/// message around the page (its JSON-RPC fields, the audit `_meta`).
const ENVELOPE_BYTES: usize = 4 * 1024;

/// How long a long answer is kept for its pages, and how many are.
const KEPT_FOR: Duration = Duration::from_secs(15 * 60);
const KEPT_AT_MOST: usize = 64;

/// The long answers of one server, by id.
#[derive(Default)]
pub struct Pages {
    kept: Mutex<HashMap<String, (Instant, Arc<String>)>>,
}

/// The bytes `c` takes inside a JSON string.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// The bytes `c` of a slice takes in the message: escaped in the page's
/// JSON, which is escaped again as the message's text block.
fn carried_len(c: char) -> usize {
    match c {
        // `"` becomes `\"`, then `\\\"`; a newline `\n`, then `\\n`.
        '"' | '\\' => 4,
        '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 3,
        // `\u00XX`, then `\\u00XX`.
        c if (c as u32) < 0x20 => 7,
        c => escaped_len(c),
    }
}

fn text_of(result: &CallToolResult) -> Option<&str> {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.as_str())
}

impl Pages {
    /// `result` as it goes back: itself when short, else its first page
    /// (the whole kept for the rest).
    pub fn first(&self, mut result: CallToolResult) -> CallToolResult {
        let Some(text) = text_of(&result).filter(|t| t.len() > MAX_RESULT_BYTES) else {
            return result;
        };
        let text = Arc::new(text.to_string());
        let mut random = [0u8; 8];
        // Without randomness the cursor is still this server's own: it only
        // names a kept answer, it grants nothing.
        let _ = getrandom::fill(&mut random);
        let id = format!(
            "{}{}",
            hex::encode(random),
            self.kept.lock().map_or(0, |k| k.len())
        );
        {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.retain(|_, (at, _)| at.elapsed() < KEPT_FOR);
            if kept.len() >= KEPT_AT_MOST
                && let Some(oldest) = kept
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone())
            {
                kept.remove(&oldest);
            }
            kept.insert(id.clone(), (Instant::now(), text.clone()));
        }
        result.content = vec![ContentBlock::text(page(&id, &text, 0))];
        result
    }

    /// The page `cursor` names, of an answer kept here.
    pub fn next(&self, cursor: &str) -> Result<CallToolResult, ErrorData> {
        let unknown = || {
            ErrorData::invalid_params(
                format!(
                    "cursor {cursor:?} is not one a result of this server gave (or it is over 15 minutes old): call the tool again without a cursor"
                ),
                None,
            )
        };
        let (id, from) = cursor.split_once('.').ok_or_else(unknown)?;
        let from: usize = from.parse().map_err(|_| unknown())?;
        let text = self
            .kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .filter(|(at, _)| at.elapsed() < KEPT_FOR)
            .map(|(_, text)| text.clone())
            .ok_or_else(unknown)?;
        if from >= text.len() || !text.is_char_boundary(from) {
            return Err(unknown());
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(page(
            id, &text, from,
        ))]))
    }
}

/// The page of `text` that starts at byte `from`: as much as fits.
fn page(id: &str, text: &str, from: usize) -> String {
    let mut room = MAX_RESULT_BYTES - ENVELOPE_BYTES;
    let mut end = from;
    for c in text[from..].chars() {
        let n = carried_len(c);
        if n > room {
            break;
        }
        room -= n;
        end += c.len_utf8();
    }
    let page = json!({
        "_page": {
            "from": from,
            "to": end,
            "bytes": text.len(),
            "next_cursor": (end < text.len()).then(|| format!("{id}.{end}")),
            "what": "this result is longer than one answer: `text` is a slice of its JSON; call the same tool with cursor = next_cursor for the next slice (nothing runs again), and join the slices",
        },
        "text": &text[from..end],
    });
    serde_json::to_string(&page).expect("a JSON value serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn a_long_result_comes_back_in_pages_each_within_the_cap_that_join_to_the_whole() {
        // Quotes and newlines grow when escaped: the cap holds for the page.
        let big =
            json!({"rows": (0..20_000).map(|i| format!("row \"{i}\" ü\n")).collect::<Vec<_>>()});
        let whole = serde_json::to_string_pretty(&big).unwrap();
        let pages = Pages::default();
        let mut result = pages.first(CallToolResult::success(vec![ContentBlock::text(
            whole.clone(),
        )]));
        let mut joined = String::new();
        loop {
            let text = text_of(&result).unwrap().to_string();
            // The whole message, the text block escaped again, fits too.
            let message = serde_json::to_string(&result).unwrap();
            assert!(message.len() <= MAX_RESULT_BYTES, "{}", message.len());
            let page: Value = serde_json::from_str(&text).unwrap();
            joined.push_str(page["text"].as_str().unwrap());
            match page["_page"]["next_cursor"].as_str() {
                Some(next) => result = pages.next(next).unwrap(),
                None => break,
            }
        }
        assert_eq!(joined, whole);
        assert!(pages.next("no").is_err());
        assert!(pages.next("0123456789abcdef.0").is_err());
        let short = CallToolResult::success(vec![ContentBlock::text("{}")]);
        assert_eq!(text_of(&pages.first(short)), Some("{}"));
    }
}
