//! A one-pass reader for event lines that are already canonical.
//!
//! Verifying a log by parsing every line into a tree and serialising it back
//! costs more than hashing it. Almost every line a writer produced is
//! canonical, so [`scan`] checks canonical form while it walks the bytes
//! once, hashes the line without its `event_hash` member in place, and hands
//! back the fields as byte slices. Whenever a line is anything but the plain
//! case (an escape in an identity field, a float, a key that needs escaping,
//! deep nesting, whitespace, an unknown escape), it returns `None` and the
//! caller falls back to the full parser, which decides and explains. So the
//! fast path only ever accepts lines the full parser would accept identically.

use sha2::{Digest, Sha256};

/// The fifteen keys of an event line, in the order they are written.
pub const EVENT_KEYS: [&str; 15] = [
    "actor",
    "event_hash",
    "event_id",
    "event_type",
    "graph_digest",
    "idempotency_key",
    "organization_id",
    "payload",
    "plan_digest",
    "policy_digest",
    "previous_hash",
    "project_id",
    "run_id",
    "sequence",
    "timestamp",
];

/// Index of each field in [`EVENT_KEYS`] order.
pub(crate) mod field {
    pub const EVENT_HASH: usize = 1;
    pub const EVENT_ID: usize = 2;
    pub const GRAPH_DIGEST: usize = 4;
    pub const IDEMPOTENCY_KEY: usize = 5;
    pub const ORGANIZATION_ID: usize = 6;
    pub const PAYLOAD: usize = 7;
    pub const PLAN_DIGEST: usize = 8;
    pub const POLICY_DIGEST: usize = 9;
    pub const PREVIOUS_HASH: usize = 10;
    pub const PROJECT_ID: usize = 11;
    pub const RUN_ID: usize = 12;
    pub const SEQUENCE: usize = 13;
    pub const TIMESTAMP: usize = 14;
}

/// A canonical event line, read in place.
pub(crate) struct ScannedLine<'a> {
    /// Every field's value: string contents without quotes (they hold no
    /// escapes), the payload's canonical JSON, the sequence's digits.
    pub fields: [&'a [u8]; 15],
    /// sha256 of the line without its `event_hash` member.
    pub computed_hash: [u8; 32],
}

/// Deeper payloads go to the full parser, whose own limit then applies.
const MAX_DEPTH: usize = 64;
/// Longer integers might not fit the full parser's integer types.
const MAX_INTEGER_DIGITS: usize = 18;

pub(crate) fn scan(line: &[u8]) -> Option<ScannedLine<'_>> {
    // A canonical line holds no raw control characters anywhere (strings
    // escape them, and there is no whitespace), so one pass over the whole
    // line replaces a check per string. The fold has no early exit, so it
    // vectorises; so does the ASCII test that lets most lines skip UTF-8
    // validation.
    let (lowest, high_bits) = line.iter().fold((u8::MAX, 0u8), |(lowest, high), b| {
        (lowest.min(*b), high | *b)
    });
    if lowest < 0x20 {
        return None;
    }
    if high_bits >= 0x80 {
        std::str::from_utf8(line).ok()?;
    }
    let mut reader = Reader { bytes: line, at: 0 };
    let mut fields: [&[u8]; 15] = [&[]; 15];
    let mut hash_member = (0, 0);
    reader.expect(b"{")?;
    for (index, key) in EVENT_KEYS.iter().enumerate() {
        let member_start = reader.at;
        if index > 0 {
            reader.expect(b",")?;
        }
        reader.expect(b"\"")?;
        reader.expect(key.as_bytes())?;
        reader.expect(b"\":")?;
        let value_start = reader.at;
        match index {
            field::PAYLOAD => {
                reader.value(0)?;
                fields[index] = &line[value_start..reader.at];
            }
            field::SEQUENCE => {
                let digits = reader.unsigned_integer()?;
                fields[index] = digits;
            }
            _ => fields[index] = reader.plain_string()?,
        }
        if index == field::EVENT_HASH {
            hash_member = (member_start, reader.at);
        }
    }
    reader.expect(b"}")?;
    if reader.at != line.len() {
        return None;
    }
    let mut hasher = Sha256::new();
    hasher.update(&line[..hash_member.0]);
    hasher.update(&line[hash_member.1..]);
    Some(ScannedLine {
        fields,
        computed_hash: hasher.finalize().into(),
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn expect(&mut self, token: &[u8]) -> Option<()> {
        if self.bytes[self.at..].starts_with(token) {
            self.at += token.len();
            Some(())
        } else {
            None
        }
    }

    /// A string with no escapes at all; returns its contents.
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.expect(b"\"")?;
        let start = self.at;
        let len = memchr::memchr2(b'"', b'\\', &self.bytes[start..])?;
        let contents = &self.bytes[start..start + len];
        if self.bytes[start + len] == b'\\' {
            return None;
        }
        self.at = start + len + 1;
        Some(contents)
    }

    /// A string written exactly as the canonical serialiser writes it.
    fn canonical_string(&mut self) -> Option<()> {
        self.expect(b"\"")?;
        loop {
            // Skip a run of plain bytes at once; stop at a quote or escape.
            self.at += memchr::memchr2(b'"', b'\\', &self.bytes[self.at..])?;
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                b'\\' => {
                    self.at += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            // Only control characters without a short form.
                            let hex = self.bytes.get(self.at + 1..self.at + 5)?;
                            let code = match hex {
                                [b'0', b'0', hi @ (b'0' | b'1'), lo] => {
                                    let lo = match lo {
                                        b'0'..=b'9' => lo - b'0',
                                        b'a'..=b'f' => lo - b'a' + 10,
                                        _ => return None,
                                    };
                                    (hi - b'0') * 16 + lo
                                }
                                _ => return None,
                            };
                            if matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                                return None;
                            }
                            self.at += 5;
                        }
                        _ => return None,
                    }
                }
                _ => unreachable!("memchr2 stopped at a quote or a backslash"),
            }
        }
    }

    /// `0` or a digit run without a leading zero; returns the digits.
    fn unsigned_integer(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        let digits = &self.bytes[start..self.at];
        let canonical = match digits {
            [] => false,
            [b'0'] => true,
            [b'0', ..] => false,
            _ => digits.len() <= MAX_INTEGER_DIGITS,
        };
        // A fraction or exponent after the digits is a float: full parser.
        if !canonical || matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(digits)
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.canonical_string(),
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b't' => self.expect(b"true"),
            b'f' => self.expect(b"false"),
            b'n' => self.expect(b"null"),
            b'-' => {
                self.at += 1;
                // `-0` reads back as a float.
                if self.peek()? == b'0' {
                    return None;
                }
                self.unsigned_integer().map(|_| ())
            }
            b'0'..=b'9' => self.unsigned_integer().map(|_| ()),
            _ => None,
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.expect(b"[")?;
        if self.expect(b"]").is_some() {
            return Some(());
        }
        loop {
            self.value(depth + 1)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        self.expect(b"{")?;
        if self.expect(b"}").is_some() {
            return Some(());
        }
        let mut previous: Option<&[u8]> = None;
        loop {
            // Keys with escapes would need decoding to compare in code-point
            // order; UTF-8 bytes of plain keys already compare that way.
            let key = self.plain_string()?;
            if previous.is_some_and(|p| p >= key) {
                return None;
            }
            previous = Some(key);
            self.expect(b":")?;
            self.value(depth + 1)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}
