//! Confirm tokens: what a preview hands out and the confirmed call must
//! bring back. A token is `<issued, unix seconds>.<hex HMAC-SHA256>` over
//! the tool's name, the exact request (its arguments, less `confirm`,
//! `confirm_token` and `cursor`, as canonical JSON, plus what the preview
//! bound them to, such as a loop package's content digest) and the time it
//! was issued, under a key made for this server process. It holds for 15
//! minutes and is taken once. A token shows that the exact call was
//! previewed first; it is never an approval (only a person approves).

use std::collections::HashMap;
use std::sync::Mutex;

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// How long a token holds, unless the operator shortens it.
pub const TOKEN_LIFETIME_S: u64 = 15 * 60;

/// Why a confirmed call was not made (said as bounded-loops says it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "no confirm_token — call with confirm=false first, then pass the confirm_token from that response back with confirm=true"
    )]
    Missing,
    #[error("malformed confirm_token")]
    Malformed,
    #[error(
        "confirm_token does not match these arguments — it was issued for a different run. Preview again with confirm=false."
    )]
    Mismatch,
    #[error("confirm_token expired ({0}s limit). Preview again with confirm=false.")]
    Expired(u64),
    #[error("confirm_token is not yet valid (issued in the future)")]
    NotYetValid,
    #[error("confirm_token was already used: preview again with confirm=false")]
    Used,
}

/// The tokens of one server process.
pub struct Confirmations {
    key: [u8; 32],
    /// Seconds a token holds.
    lifetime_s: u64,
    /// Tokens taken, with when they were issued (forgotten once expired).
    taken: Mutex<HashMap<String, u64>>,
}

fn canonical(tool: &str, request: &Value) -> Vec<u8> {
    let mut bytes = tool.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend_from_slice(bl_core::canonical_json(request).as_bytes());
    bytes
}

impl Confirmations {
    /// Tokens under a fresh random key, each holding 15 minutes.
    pub fn new() -> Result<Confirmations, getrandom::Error> {
        Confirmations::lasting(TOKEN_LIFETIME_S)
    }

    /// Tokens that hold `lifetime_s` seconds (at most 15 minutes).
    pub fn lasting(lifetime_s: u64) -> Result<Confirmations, getrandom::Error> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key)?;
        Ok(Confirmations {
            key,
            lifetime_s: lifetime_s.min(TOKEN_LIFETIME_S),
            taken: Mutex::default(),
        })
    }

    fn mac(&self, tool: &str, request: &Value, issued: u64) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(&canonical(tool, request));
        mac.update(b"\0");
        mac.update(issued.to_string().as_bytes());
        mac
    }

    /// A token for `request` to `tool`, issued at `now`.
    pub fn issue(&self, tool: &str, request: &Value, now: u64) -> String {
        let tag = self.mac(tool, request, now).finalize().into_bytes();
        format!("{now}.{}", hex::encode(tag))
    }

    /// Takes `token` for `request` to `tool` at `now`: it must be one this
    /// server issued for exactly this request, within its lifetime, and
    /// not taken before.
    pub fn take(
        &self,
        tool: &str,
        request: &Value,
        token: Option<&str>,
        now: u64,
    ) -> Result<(), Refused> {
        let token = token.filter(|t| !t.is_empty()).ok_or(Refused::Missing)?;
        let (issued, tag) = token.split_once('.').ok_or(Refused::Malformed)?;
        let issued: u64 = issued.parse().map_err(|_| Refused::Malformed)?;
        let tag = hex::decode(tag).map_err(|_| Refused::Malformed)?;
        if tag.len() != 32 {
            return Err(Refused::Malformed);
        }
        // Compared in constant time by the MAC itself.
        self.mac(tool, request, issued)
            .verify_slice(&tag)
            .map_err(|_| Refused::Mismatch)?;
        if issued > now + 60 {
            return Err(Refused::NotYetValid);
        }
        if now.saturating_sub(issued) > self.lifetime_s {
            return Err(Refused::Expired(self.lifetime_s));
        }
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        taken.retain(|_, at| now.saturating_sub(*at) <= self.lifetime_s);
        if taken.insert(token.to_string(), issued).is_some() {
            return Err(Refused::Used);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_token_holds_once_for_its_exact_request_for_fifteen_minutes() {
        let tokens = Confirmations::new().unwrap();
        let request = json!({"loop_dir": "/w/loops/a", "max_iterations": 3});
        let token = tokens.issue("bl_run", &request, 1_000);
        let other = json!({"loop_dir": "/w/loops/a", "max_iterations": 4});
        assert_eq!(
            tokens.take("bl_run", &other, Some(&token), 1_001),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            tokens.take("graph_resume", &request, Some(&token), 1_001),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            tokens.take("bl_run", &request, None, 1_001),
            Err(Refused::Missing)
        );
        assert_eq!(
            tokens.take("bl_run", &request, Some("bogus"), 1_001),
            Err(Refused::Malformed)
        );
        assert_eq!(
            tokens.take(
                "bl_run",
                &request,
                Some(&token),
                1_000 + TOKEN_LIFETIME_S + 1
            ),
            Err(Refused::Expired(TOKEN_LIFETIME_S))
        );
        assert_eq!(tokens.take("bl_run", &request, Some(&token), 1_001), Ok(()));
        assert_eq!(
            tokens.take("bl_run", &request, Some(&token), 1_002),
            Err(Refused::Used)
        );
        // Another server's token (another key) is not this one's.
        let elsewhere = Confirmations::new()
            .unwrap()
            .issue("bl_run", &request, 1_000);
        assert_eq!(
            tokens.take("bl_run", &request, Some(&elsewhere), 1_001),
            Err(Refused::Mismatch)
        );
    }
}
