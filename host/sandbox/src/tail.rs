//! Keeping only the end of a stream that may be arbitrarily long.

use std::collections::VecDeque;

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
