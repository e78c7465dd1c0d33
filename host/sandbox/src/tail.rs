//! Keeping only the end of a stream that may be arbitrarily long.

use std::collections::VecDeque;
use std::io::{Read, Write};

/// The last `cap` bytes of everything pushed into it.
#[derive(Debug)]
pub struct TailBuffer {
    cap: usize,
    bytes: VecDeque<u8>,
    dropped: u64,
}

impl TailBuffer {
    pub fn new(cap: usize) -> Self {
        TailBuffer {
            cap,
            bytes: VecDeque::with_capacity(cap.min(64 << 10)),
            dropped: 0,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        let chunk = if chunk.len() > self.cap {
            self.dropped += (chunk.len() - self.cap) as u64;
            &chunk[chunk.len() - self.cap..]
        } else {
            chunk
        };
        let overflow = (self.bytes.len() + chunk.len()).saturating_sub(self.cap);
        self.bytes.drain(..overflow);
        self.dropped += overflow as u64;
        self.bytes.extend(chunk);
    }

    /// Reads `reader` to its end, keeping the tail.
    pub fn drain_from(self, reader: impl Read) -> std::io::Result<Self> {
        self.drain_teeing(reader, std::io::sink())
    }

    /// Reads `reader` to its end, keeping the tail and copying each chunk
    /// to `tee` as it comes (a closed `tee` is ignored: the tail is what
    /// matters).
    pub fn drain_teeing(
        mut self,
        mut reader: impl Read,
        mut tee: impl Write,
    ) -> std::io::Result<Self> {
        let mut chunk = [0u8; 16 << 10];
        loop {
            match reader.read(&mut chunk) {
                Ok(0) => return Ok(self),
                Ok(n) => {
                    let _ = tee.write_all(&chunk[..n]).and_then(|_| tee.flush());
                    self.push(&chunk[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    pub fn truncated(&self) -> bool {
        self.dropped > 0
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_bytes_across_chunks() {
        let mut tail = TailBuffer::new(4);
        tail.push(b"abc");
        assert!(!tail.truncated());
        tail.push(b"def");
        assert!(tail.truncated());
        tail.push(b"0123456789");
        assert_eq!(tail.into_bytes(), b"6789");
    }
}
