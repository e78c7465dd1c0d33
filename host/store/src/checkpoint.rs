//! Signed checkpoints over the event log, in the signed-note /
//! tlog-checkpoint format, and the Ed25519 keys that sign them.
//!
//! A checkpoint body is three lines: the origin (`bl.run/<run_id>`), the
//! tree size, and the base64 RFC 6962 root of the first `size` events, then
//! one extension line per file of the run directory the checkpoint seals:
//! `file sha256:<hex> <path>` (sorted by path). The note adds a blank line
//! and one signature line per key (none when the run has no key):
//! `— <name> <base64(key id || signature)>`, where the key id is the first
//! four bytes of `SHA-256(name || "\n" || 0x01 || public key)`.
//!
//! Keys use the note text forms: private `PRIVATE+KEY+<name>+<id>+<base64>`,
//! verifier `<name>+<id>+<base64>` (the base64 carries `0x01 || key`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer, Verifier};
use sha2::{Digest, Sha256};

use crate::merkle::Hash;

const ED25519: u8 = 0x01;
const SIGNATURE_PREFIX: &str = "\u{2014} ";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error("not a key: {0}")]
    Key(String),
    #[error("not a checkpoint: {0}")]
    Format(String),
    #[error("no signature by key {name} ({key_id}) on this checkpoint")]
    Unsigned { name: String, key_id: String },
    #[error(
        "the signature by key {0} does not verify: the checkpoint was altered or signed by another key"
    )]
    BadSignature(String),
}

fn key_id(name: &str, public: &[u8; 32]) -> [u8; 4] {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([ED25519]);
    h.update(public);
    let d = h.finalize();
    [d[0], d[1], d[2], d[3]]
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('+') && !name.chars().any(char::is_whitespace)
}

/// A key that signs checkpoints (and, later, approval decisions).
pub struct SigningKey {
    name: String,
    key: ed25519_dalek::SigningKey,
}

/// The public half, which verifiers hold out of band.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierKey {
    name: String,
    id: [u8; 4],
    key: ed25519_dalek::VerifyingKey,
}

impl SigningKey {
    /// A new key from the OS's entropy.
    pub fn generate(name: &str) -> Result<Self, NoteError> {
        if !valid_name(name) {
            return Err(NoteError::Key(format!(
                "{name:?}: a key name has no `+` and no spaces"
            )));
        }
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| NoteError::Key(format!("no entropy: {e}")))?;
        Ok(SigningKey {
            name: name.to_string(),
            key: ed25519_dalek::SigningKey::from_bytes(&seed),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `PRIVATE+KEY+<name>+<id>+<base64(0x01 || seed)>`.
    pub fn to_text(&self) -> String {
        let public = self.key.verifying_key().to_bytes();
        let mut blob = vec![ED25519];
        blob.extend_from_slice(&self.key.to_bytes());
        format!(
            "PRIVATE+KEY+{}+{}+{}",
            self.name,
            hex::encode(key_id(&self.name, &public)),
            B64.encode(blob)
        )
    }

    pub fn parse(text: &str) -> Result<Self, NoteError> {
        // base64 may itself contain `+`: split off only the leading fields.
        let parts: Vec<&str> = text.trim().splitn(5, '+').collect();
        let ["PRIVATE", "KEY", name, id, blob] = parts.as_slice() else {
            return Err(NoteError::Key(
                "expected PRIVATE+KEY+<name>+<id>+<key>".into(),
            ));
        };
        let bytes = B64
            .decode(blob)
            .map_err(|e| NoteError::Key(e.to_string()))?;
        let seed: [u8; 32] = match bytes.as_slice() {
            [ED25519, rest @ ..] => rest
                .try_into()
                .map_err(|_| NoteError::Key("wrong key length".into()))?,
            _ => return Err(NoteError::Key("not an Ed25519 key".into())),
        };
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        if hex::encode(key_id(name, &key.verifying_key().to_bytes())) != *id {
            return Err(NoteError::Key("the key id does not match the key".into()));
        }
        Ok(SigningKey {
            name: name.to_string(),
            key,
        })
    }

    pub fn verifier(&self) -> VerifierKey {
        let key = self.key.verifying_key();
        VerifierKey {
            name: self.name.clone(),
            id: key_id(&self.name, &key.to_bytes()),
            key,
        }
    }

    /// Signs `message`: the raw Ed25519 signature.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }
}

impl VerifierKey {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `<name>+<id>+<base64(0x01 || public key)>`.
    pub fn to_text(&self) -> String {
        let mut blob = vec![ED25519];
        blob.extend_from_slice(self.key.as_bytes());
        format!(
            "{}+{}+{}",
            self.name,
            hex::encode(self.id),
            B64.encode(blob)
        )
    }

    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let parts: Vec<&str> = text.trim().splitn(3, '+').collect();
        let [name, id, blob] = parts.as_slice() else {
            return Err(NoteError::Key("expected <name>+<id>+<key>".into()));
        };
        let bytes = B64
            .decode(blob)
            .map_err(|e| NoteError::Key(e.to_string()))?;
        let public: [u8; 32] = match bytes.as_slice() {
            [ED25519, rest @ ..] => rest
                .try_into()
                .map_err(|_| NoteError::Key("wrong key length".into()))?,
            _ => return Err(NoteError::Key("not an Ed25519 key".into())),
        };
        let key = ed25519_dalek::VerifyingKey::from_bytes(&public)
            .map_err(|e| NoteError::Key(e.to_string()))?;
        let expected = key_id(name, &public);
        if hex::encode(expected) != *id {
            return Err(NoteError::Key("the key id does not match the key".into()));
        }
        Ok(VerifierKey {
            name: name.to_string(),
            id: expected,
            key,
        })
    }

    pub fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        self.key
            .verify(message, &ed25519_dalek::Signature::from_bytes(signature))
            .is_ok()
    }
}

/// One signature line of a note: the key name and `key id || signature`.
pub type NoteSignature = (String, Vec<u8>);

/// A tree head: the first `size` events hash to `root`; and the files of
/// the run directory as they were when it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
    /// (path relative to the run directory, `sha256:<hex>`), sorted by path.
    pub files: Vec<(String, String)>,
}

const FILE_LINE: &str = "file ";

impl Checkpoint {
    pub fn origin_for(run_id: &str) -> String {
        format!("bl.run/{run_id}")
    }

    /// The signed text: origin, size, base64 root and the file lines.
    pub fn body(&self) -> String {
        let mut body = format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.root)
        );
        for (path, digest) in &self.files {
            body.push_str(&format!("{FILE_LINE}{digest} {path}\n"));
        }
        body
    }

    /// The note with no signature, for a run without a signing key. It
    /// still seals: every byte of it is checked against the log and files.
    pub fn unsigned(&self) -> String {
        format!("{}\n", self.body())
    }

    /// The whole note, signed by `key`.
    pub fn sign(&self, key: &SigningKey) -> String {
        let body = self.body();
        let mut blob = key.verifier().id.to_vec();
        blob.extend_from_slice(&key.sign(body.as_bytes()));
        format!(
            "{body}\n{SIGNATURE_PREFIX}{} {}\n",
            key.name,
            B64.encode(blob)
        )
    }

    /// Parses a note without checking its signatures.
    pub fn parse(note: &str) -> Result<(Checkpoint, Vec<NoteSignature>), NoteError> {
        let (body, signatures) = note.split_once("\n\n").ok_or_else(|| {
            NoteError::Format("no blank line between the body and the signatures".into())
        })?;
        let mut lines = body.lines();
        let origin = lines
            .next()
            .filter(|l| !l.is_empty())
            .ok_or_else(|| NoteError::Format("no origin line".into()))?;
        let size = lines
            .next()
            .and_then(|l| l.parse::<u64>().ok())
            .ok_or_else(|| NoteError::Format("line 2 is not a tree size".into()))?;
        let root: Hash = lines
            .next()
            .and_then(|l| B64.decode(l).ok())
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| NoteError::Format("line 3 is not a base64 SHA-256 root".into()))?;
        let mut files = Vec::new();
        for (index, line) in lines.enumerate() {
            let sealed = line
                .strip_prefix(FILE_LINE)
                .and_then(|rest| rest.split_once(' '))
                .filter(|(digest, path)| {
                    digest.strip_prefix("sha256:").is_some_and(|hex| {
                        hex.len() == 64
                            && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                    }) && !path.is_empty()
                });
            let Some((digest, path)) = sealed else {
                return Err(NoteError::Format(format!(
                    "line {} is not `file sha256:<hex> <path>`",
                    index + 4
                )));
            };
            files.push((path.to_string(), digest.to_string()));
        }
        if files.windows(2).any(|pair| pair[0].0 >= pair[1].0) {
            return Err(NoteError::Format(
                "file lines must be sorted by path, each path once".into(),
            ));
        }
        let checkpoint = Checkpoint {
            origin: origin.to_string(),
            size,
            root,
            files,
        };
        // Only the exact text this type writes is a checkpoint, so no byte
        // of a note can change without the parse or a later check noticing.
        if checkpoint.body() != format!("{body}\n") {
            return Err(NoteError::Format(
                "the body is not in canonical form (order, spacing or encoding changed)".into(),
            ));
        }
        let mut sigs = Vec::new();
        for line in signatures.lines() {
            let rest = line
                .strip_prefix(SIGNATURE_PREFIX)
                .ok_or_else(|| NoteError::Format(format!("not a signature line: {line:?}")))?;
            let (name, blob) = rest
                .split_once(' ')
                .ok_or_else(|| NoteError::Format(format!("not a signature line: {line:?}")))?;
            let decoded = B64
                .decode(blob)
                .map_err(|e| NoteError::Format(e.to_string()))?;
            if decoded.len() != 68 || B64.encode(&decoded) != blob {
                return Err(NoteError::Format(format!(
                    "not an Ed25519 signature line: {line:?}"
                )));
            }
            sigs.push((name.to_string(), decoded));
        }
        if !note.ends_with('\n') || note.ends_with("\n\n\n") {
            return Err(NoteError::Format(
                "the note must end with one newline".into(),
            ));
        }
        Ok((checkpoint, sigs))
    }

    /// Parses a note and checks the signature by `key`.
    pub fn verify(note: &str, key: &VerifierKey) -> Result<Checkpoint, NoteError> {
        let (checkpoint, signatures) = Checkpoint::parse(note)?;
        let body = checkpoint.body();
        for (name, blob) in signatures {
            if name != key.name || blob.len() != 68 || blob[..4] != key.id {
                continue;
            }
            let sig: [u8; 64] = blob[4..].try_into().expect("68 - 4 bytes");
            // The body must be exactly what we re-render, so no unsigned
            // extra text rides along.
            if !note.starts_with(&body) || !key.verify(body.as_bytes(), &sig) {
                return Err(NoteError::BadSignature(key.name.clone()));
            }
            return Ok(checkpoint);
        }
        Err(NoteError::Unsigned {
            name: key.name.clone(),
            key_id: hex::encode(key.id),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_a_signed_checkpoint_verifies_only_intact() {
        let key = SigningKey::generate("ops").unwrap();
        let again = SigningKey::parse(&key.to_text()).unwrap();
        assert_eq!(again.verifier(), key.verifier());
        let verifier = VerifierKey::parse(&key.verifier().to_text()).unwrap();
        let cp = Checkpoint {
            origin: Checkpoint::origin_for("r1"),
            size: 3,
            root: [7; 32],
            files: vec![("plan.json".into(), format!("sha256:{}", "0".repeat(64)))],
        };
        let note = cp.sign(&key);
        assert!(note.contains("\n\n\u{2014} ops "));
        assert_eq!(Checkpoint::verify(&note, &verifier).unwrap(), cp);
        let tampered = note.replacen("\n3\n", "\n4\n", 1);
        assert!(matches!(
            Checkpoint::verify(&tampered, &verifier),
            Err(NoteError::BadSignature(_))
        ));
        let other = SigningKey::generate("ops").unwrap().verifier();
        assert!(matches!(
            Checkpoint::verify(&note, &other),
            Err(NoteError::Unsigned { .. })
        ));
    }

    #[test]
    fn keys_whose_base64_holds_a_plus_round_trip() {
        for _ in 0..64 {
            let key = SigningKey::generate("ops").unwrap();
            assert!(
                SigningKey::parse(&key.to_text()).is_ok(),
                "{}",
                key.to_text()
            );
            assert!(VerifierKey::parse(&key.verifier().to_text()).is_ok());
        }
    }

    #[test]
    fn a_key_whose_id_does_not_match_is_refused() {
        let key = SigningKey::generate("ops").unwrap();
        let text = key.verifier().to_text().replacen("ops+", "ops2+", 1);
        assert!(VerifierKey::parse(&text).is_err());
    }
}
