//! [`Sha256Digest`]: a SHA-256 as bl and bounded-loops write it,
//! `sha256:<64 lower-case hex digits>`. Every content, component, source,
//! plan and artifact digest is one; nothing formats the prefix by hand.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// A SHA-256, shown as `sha256:<hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256Digest([u8; 32]);

impl Sha256Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Sha256Digest {
        Sha256Digest(Sha256::digest(bytes).into())
    }

    /// What a streaming hasher computed.
    pub fn finish(hasher: Sha256) -> Sha256Digest {
        Sha256Digest(hasher.finalize().into())
    }

    pub fn from_bytes(bytes: [u8; 32]) -> Sha256Digest {
        Sha256Digest(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 hex digits, without the prefix.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Text that is not `sha256:` and 64 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a digest: expected sha256: and 64 lower-case hex digits")]
pub struct NotADigest(pub String);

impl FromStr for Sha256Digest {
    type Err = NotADigest;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let hex_part = text
            .strip_prefix("sha256:")
            .filter(|h| {
                h.len() == 64
                    && h.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            })
            .ok_or_else(|| NotADigest(text.to_string()))?;
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut bytes).map_err(|_| NotADigest(text.to_string()))?;
        Ok(Sha256Digest(bytes))
    }
}

impl serde::Serialize for Sha256Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Sha256Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_reads_and_writes_the_prefixed_form() {
        let empty = Sha256Digest::of(b"");
        let text = empty.to_string();
        assert_eq!(
            text,
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(text.parse::<Sha256Digest>().unwrap(), empty);
        for bad in [
            "e3b0",
            "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "sha256:xyz",
        ] {
            assert!(bad.parse::<Sha256Digest>().is_err(), "{bad}");
        }
        assert_eq!(
            serde_json::to_string(&empty).unwrap(),
            format!("\"{text}\"")
        );
    }
}
