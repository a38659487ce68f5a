//! The readers' one buffer: `need(n)` makes n bytes from the current position
//! contiguous (moving the unread tail to the front and reading more), `consume(n)`
//! advances. Grows only for a record larger than itself, up to a bound.

use super::CaptureError;
use std::io::Read;

const INITIAL: usize = 1 << 20;
/// The largest record accepted (pcapng blocks of jumbo frames stay far below).
pub const MAX_RECORD: usize = 16 << 20;

/// A refillable window over a reader.
pub struct Buffer<R> {
    r: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// File offset of `buf[start]`.
    offset: u64,
}

impl<R: Read> Buffer<R> {
    pub fn new(r: R) -> Self {
        Self {
            r,
            buf: vec![0; INITIAL],
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
        }
    }

    /// File offset of the current position.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Make `n` bytes available; fewer only at the end of the input.
    ///
    /// # Errors
    /// A read error, or `n` over [`MAX_RECORD`].
    pub fn fill(&mut self, n: usize) -> Result<&[u8], CaptureError> {
        if n > MAX_RECORD {
            return Err(CaptureError::Corrupt {
                offset: self.offset,
                why: format!("a record of {n} bytes (over {MAX_RECORD})"),
            });
        }
        if self.end - self.start < n && !self.eof {
            if self.start + n > self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
                if n > self.buf.len() {
                    self.buf.resize(n.next_power_of_two(), 0);
                }
            }
            while self.end - self.start < n {
                let k = match self.r.read(&mut self.buf[self.end..]) {
                    Ok(k) => k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e.into()),
                };
                if k == 0 {
                    self.eof = true;
                    break;
                }
                self.end += k;
            }
        }
        Ok(&self.buf[self.start..self.end])
    }

    /// Exactly `n` bytes, or `Truncated` naming `why`; `Ok(None)` at a clean end
    /// (nothing left at all).
    ///
    /// # Errors
    /// See [`Self::fill`]; a partial record is `Truncated`.
    pub fn exact(&mut self, n: usize, why: &'static str) -> Result<Option<&[u8]>, CaptureError> {
        let offset = self.offset;
        let got = self.fill(n)?.len();
        if got == 0 {
            return Ok(None);
        }
        if got < n {
            return Err(CaptureError::Truncated { offset, why });
        }
        Ok(Some(&self.buf[self.start..self.start + n]))
    }

    /// The first four bytes, little-endian, without consuming them.
    ///
    /// # Errors
    /// Fewer than four bytes.
    pub fn peek_u32_le(&mut self) -> Result<u32, CaptureError> {
        let b = self.fill(4)?;
        if b.len() < 4 {
            return Err(CaptureError::Truncated {
                offset: 0,
                why: "file header",
            });
        }
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Bytes `[from, to)` of the current window (after a successful `exact`).
    pub fn slice(&self, from: usize, to: usize) -> &[u8] {
        &self.buf[self.start + from..self.start + to]
    }

    /// Advance past `n` bytes.
    pub fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }
}
