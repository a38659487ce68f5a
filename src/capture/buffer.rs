//! The readers' one buffer: `need(n)` makes n bytes from the current position
//! contiguous (moving the unread tail to the front and reading more), `consume(n)`
//! advances. Grows only for a record larger than itself, up to a bound.
//!
//! A regular file can instead be mapped: records are then read in place (no read(2)
//! copy, a sixth of a whole run), and pages already passed are released from the
//! mapping every 4 MiB so the resident set stays bounded however long the file; the
//! next 2 MiB are mapped ahead in one call rather than faulted in page by page. A
//! mapped file cut while it is read (see [`super::mapped`]) ends the reading at the
//! cut with [`CaptureError::Cut`]: its size is looked at every 2 MiB, and a record
//! whose pages fault is never handed out.

use super::mapped::{self, MappedFile};
use super::CaptureError;
use std::io::Read;

const INITIAL: usize = 1 << 20;
/// The largest record accepted (pcapng blocks of jumbo frames stay far below).
pub const MAX_RECORD: usize = 16 << 20;

/// Pages behind the read position are dropped from the mapping in steps this big.
const RELEASE_STEP: usize = 4 << 20;

/// Pages ahead of the read position are mapped in steps this big.
const POPULATE_STEP: usize = 2 << 20;

/// Pages ahead of the read position are touched (checked for a cut) in steps this big.
const TOUCH_STEP: usize = 64 << 10;

/// A refillable window over a reader, or a mapped file.
pub struct Buffer<R> {
    r: Option<R>,
    buf: Vec<u8>,
    map: Option<MappedFile>,
    /// The mapped file was found cut to this length.
    cut: Option<usize>,
    /// Mapped bytes before this offset have been touched (and were there then).
    touched: usize,
    /// Mapped bytes before this offset were released.
    released: usize,
    /// Mapped bytes before this offset were populated ahead of the reader.
    populated: usize,
    start: usize,
    end: usize,
    eof: bool,
    /// File offset of `buf[start]`.
    offset: u64,
}

impl<R: Read> Buffer<R> {
    /// Read `r` through a 1 MiB buffer, grown only for a record larger than that (up to
    /// [`MAX_RECORD`]).
    pub fn new(r: R) -> Self {
        Self {
            r: Some(r),
            buf: vec![0; INITIAL],
            map: None,
            cut: None,
            touched: 0,
            released: 0,
            populated: 0,
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
        }
    }

    /// Read a mapped file in place.
    pub fn mapped(map: MappedFile) -> Self {
        let _ = map.map_ref().advise(memmap2::Advice::Sequential);
        Self {
            r: None,
            buf: Vec::new(),
            start: 0,
            end: map.current_len(),
            map: Some(map),
            cut: None,
            touched: 0,
            released: 0,
            populated: 0,
            eof: true,
            offset: 0,
        }
    }

    #[inline]
    fn bytes(&self) -> &[u8] {
        match &self.map {
            Some(m) => m.map_ref(),
            None => &self.buf,
        }
    }

    /// Look at the mapped file's size again; a shorter file moves the end there.
    fn recheck_len(&mut self) {
        if let Some(m) = &self.map {
            let len = m.current_len();
            if len < self.end {
                self.end = len.max(self.start);
                self.cut = Some(len);
            }
        }
    }

    /// For a mapped file: fault in `[start, start + n)` and one page past it before
    /// anyone reads them, and if a page turned out cut, learn where the file ends. A
    /// file cut inside the record's last page keeps that page (its tail zeroed by the
    /// kernel) but loses the next one, whose fault reveals the cut before the record
    /// is handed out; the mapping's last page has no next page, so there the size is
    /// asked directly. Pages are touched [`TOUCH_STEP`] at a time as records reach
    /// them; a cut after that shows as a fault when the engine reads the record, and
    /// the fault flag is looked at before every record, so at most that one record
    /// can have read zeros (past a cut inside a page touched before it, the zeros
    /// that follow are asked about by the reader: [`Self::past_cut`]). The common
    /// case is two comparisons and one load.
    #[inline]
    fn check_mapped(&mut self, n: usize) {
        if self.map.is_some()
            && (self.start + n + mapped::page_size() > self.touched || mapped::fault_seen())
        {
            self.check_mapped_slow(n);
        }
    }

    #[cold]
    #[inline(never)]
    fn check_mapped_slow(&mut self, n: usize) {
        let Some(m) = &self.map else { return };
        if self.cut.is_some() {
            return;
        }
        let len = m.map_ref().len();
        let need = (self.start + n)
            .saturating_add(mapped::page_size())
            .min(len);
        if need > self.touched {
            let ahead = (need + TOUCH_STEP).min(len);
            mapped::touch(&m.map_ref()[self.touched.max(self.start)..ahead]);
            self.touched = ahead;
        }
        if !self.learn_fault() && need == len {
            self.recheck_len();
        }
    }

    /// If a page of the mapping faulted (the file was cut under it), end the input at
    /// the file's size now, and say so.
    fn learn_fault(&mut self) -> bool {
        let Some(m) = &self.map else { return false };
        let Some(fault) = m.fault_offset() else {
            return false;
        };
        let now = m.current_len().min(fault);
        self.end = now.max(self.start).min(self.end);
        self.cut = Some(now);
        true
    }

    /// `e`, unless the mapped file was cut under the reader: then the cut. Bytes past a
    /// cut read as zeros until the fault is looked at, and zeros look like a corrupt
    /// record (a pcapng block of length 0), so every error a reader gives is held to
    /// this first ([`super::CaptureReader::next_packet`]'s caller).
    pub fn cut_or(&mut self, e: CaptureError) -> CaptureError {
        self.ask_for_cut();
        self.cut_error().unwrap_or(e)
    }

    /// Whether the `n` bytes at the current position lie past a cut of the mapped file,
    /// asked of the file now. A cut inside a page the reader has already touched
    /// makes no fault: the kernel keeps that page, its tail zeroed, so records of
    /// zeros follow the cut until the next page faults (a pcap record header of zeros
    /// is what its reader asks this of).
    pub fn past_cut(&mut self, n: usize) -> bool {
        self.ask_for_cut();
        self.cut.is_some() && self.end < self.start + n
    }

    /// Learn of a cut of the mapped file from a fault, or else from its size now.
    fn ask_for_cut(&mut self) {
        if self.map.is_some() && self.cut.is_none() && !self.learn_fault() {
            self.recheck_len();
        }
    }

    fn cut_error(&self) -> Option<CaptureError> {
        self.cut.map(|len| CaptureError::Cut {
            len: len as u64,
            offset: self.offset,
        })
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
        self.check_mapped(n);
        if self.end - self.start < n && !self.eof {
            let Some(r) = self.r.as_mut() else {
                return Ok(&[]);
            };
            if self.start + n > self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
                if n > self.buf.len() {
                    self.buf.resize(n.next_power_of_two(), 0);
                }
            }
            while self.end - self.start < n {
                let k = match r.read(&mut self.buf[self.end..]) {
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
        Ok(&self.bytes()[self.start..self.end])
    }

    /// Exactly `n` bytes, or `Truncated` naming `why`; `Ok(None)` at a clean end
    /// (nothing left at all).
    ///
    /// # Errors
    /// See [`Self::fill`]; a partial record is `Truncated`.
    pub fn exact(&mut self, n: usize, why: &'static str) -> Result<Option<&[u8]>, CaptureError> {
        let offset = self.offset;
        let got = self.fill(n)?.len();
        if got < n {
            if let Some(e) = self.cut_error() {
                return Err(e);
            }
        }
        if got == 0 {
            return Ok(None);
        }
        if got < n {
            return Err(CaptureError::Truncated { offset, why });
        }
        Ok(Some(&self.bytes()[self.start..self.start + n]))
    }

    /// The first four bytes, little-endian, without consuming them.
    ///
    /// # Errors
    /// Fewer than four bytes.
    pub fn peek_u32_le(&mut self) -> Result<u32, CaptureError> {
        let b = self.fill(4)?;
        if b.is_empty() {
            return Err(CaptureError::Empty);
        }
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
        &self.bytes()[self.start + from..self.start + to]
    }

    /// Advance past `n` bytes.
    pub fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
        let populate = self.map.as_ref().is_some_and(|m| {
            self.start + POPULATE_STEP > self.populated && self.populated < m.map_ref().len()
        });
        if populate {
            // Once per step: has the file been cut since?
            self.recheck_len();
        }
        if let Some(m) = self.map.as_ref().map(MappedFile::map_ref) {
            if populate {
                // Map the next step's pages in one call (MADV_POPULATE_READ, Linux
                // 5.14) rather than one fault per 64 KiB as the reader reaches them;
                // older kernels refuse it and the faults happen as before.
                let len = POPULATE_STEP.min(m.len() - self.populated);
                let _ = m.advise_range(memmap2::Advice::PopulateRead, self.populated, len);
                self.populated += len;
            }
            if self.start - self.released >= RELEASE_STEP {
                let upto = self.start & !(page_size() - 1);
                // Nothing borrows the passed bytes any more (packets borrow the
                // reader mutably until the next call).
                // SAFETY: [released, upto) lies inside the mapping; MADV_DONTNEED on
                // a read-only file mapping only drops our page-table entries, the
                // file's pages stay in the page cache and would be faulted in again.
                unsafe {
                    let _ = m.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        self.released,
                        upto - self.released,
                    );
                }
                self.released = upto;
            }
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096).max(4096)
}
