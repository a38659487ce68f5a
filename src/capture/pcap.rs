//! The classic pcap format (libpcap's savefile): microsecond or nanosecond magic, in
//! either byte order, any snap length.

use super::buffer::Buffer;
use super::{CaptureError, Packet};
use std::io::Read;

const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// The largest record libpcap itself accepts (its MAXIMUM_SNAPLEN).
const MAX_INCL: u32 = 262_144;

/// Whether `m` (read little-endian) is a pcap magic in either byte order.
pub fn is_magic(m: u32) -> bool {
    [MAGIC_US, MAGIC_NS]
        .iter()
        .any(|&x| m == x || m == x.swap_bytes())
}

/// A pcap reader.
pub struct PcapReader<R> {
    b: Buffer<R>,
    swapped: bool,
    nanos: bool,
    link: u32,
    snaplen: u32,
    pending: usize,
}

impl<R: Read> PcapReader<R> {
    /// Read the file header from `b`.
    ///
    /// # Errors
    /// Not pcap, or the header is cut short.
    pub fn with_buffer(mut b: Buffer<R>) -> Result<Self, CaptureError> {
        let h = b.exact(24, "file header")?.ok_or(CaptureError::Empty)?;
        let m = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let swapped = m == MAGIC_US.swap_bytes() || m == MAGIC_NS.swap_bytes();
        let nanos = m == MAGIC_NS || m == MAGIC_NS.swap_bytes();
        if !is_magic(m) {
            return Err(CaptureError::NotACapture(m));
        }
        let rd = |at: usize| {
            let v = u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
            if swapped {
                v.swap_bytes()
            } else {
                v
            }
        };
        let snaplen = rd(16);
        // The low 28 bits are the link type; the top carries FCS information.
        let link = rd(20) & 0x0fff_ffff;
        b.consume(24);
        Ok(Self {
            b,
            swapped,
            nanos,
            link,
            snaplen,
            pending: 0,
        })
    }

    /// The link type of every packet.
    pub fn link(&self) -> u32 {
        self.link
    }

    /// The file's snap length.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// `e`, or the cut that explains it ([`Buffer::cut_or`]).
    pub fn cut_or(&mut self, e: CaptureError) -> CaptureError {
        self.b.cut_or(e)
    }

    /// The next packet, or `None` at the end of the file.
    ///
    /// # Errors
    /// Truncated record, impossible length, read error.
    // Inlined into its one caller whichever codegen unit the caller lands in: left to
    // the partition, an unrelated change once moved it out, 1 % more instructions a
    // packet and 3 % more time (cachegrind, bench/RESULTS-hot-paths.md).
    #[inline]
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, CaptureError> {
        self.b.consume(self.pending);
        self.pending = 0;
        let offset = self.b.offset();
        let Some(h) = self.b.exact(16, "record header")? else {
            return Ok(None);
        };
        let swapped = self.swapped;
        let rd = |at: usize| {
            let v = u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
            if swapped {
                v.swap_bytes()
            } else {
                v
            }
        };
        let (sec, frac, incl, orig) = (rd(0), rd(4), rd(8), rd(12));
        // No packet is 0 bytes long on the wire: a header of zeros is most likely the
        // zeroed tail of a page past a cut (`Buffer::past_cut`).
        if orig == 0 && self.b.past_cut(16) {
            return Err(self.b.cut_or(CaptureError::Truncated {
                offset,
                why: "record header",
            }));
        }
        if incl > MAX_INCL.max(self.snaplen) || (self.nanos && frac >= 1_000_000_000) {
            return Err(CaptureError::Corrupt {
                offset,
                why: format!("record header says {incl} bytes captured, {frac} sub-second units"),
            });
        }
        let total = 16 + incl as usize;
        self.b
            .exact(total, "packet data")?
            .ok_or(CaptureError::Truncated {
                offset,
                why: "packet data",
            })?;
        self.pending = total;
        let ts_ns = u64::from(sec) * 1_000_000_000
            + if self.nanos {
                u64::from(frac)
            } else {
                u64::from(frac) * 1000
            };
        Ok(Some(Packet {
            ts_ns,
            link: self.link,
            data: self.b.slice(16, total),
            orig_len: orig,
        }))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::CaptureReader;
    use super::*;

    /// A pcap file: magic, link type, and (sec, frac, data) records; big-endian when `be`.
    pub fn file(magic: u32, be: bool, link: u32, recs: &[(u32, u32, &[u8])]) -> Vec<u8> {
        let w = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut f = Vec::new();
        f.extend_from_slice(&w(magic));
        f.extend_from_slice(&(if be { [0, 2, 0, 4] } else { [2, 0, 4, 0] }));
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&w(65535));
        f.extend_from_slice(&w(link));
        for (s, fr, d) in recs {
            f.extend_from_slice(&w(*s));
            f.extend_from_slice(&w(*fr));
            f.extend_from_slice(&w(d.len() as u32));
            f.extend_from_slice(&w(d.len() as u32 + 10));
            f.extend_from_slice(d);
        }
        f
    }

    /// Every packet read (timestamp, bytes, original length), and the error that ended it.
    type ReadAll = (Vec<(u64, Vec<u8>, u32)>, Option<CaptureError>);

    fn all(f: &[u8]) -> ReadAll {
        let mut r = match CaptureReader::new(f) {
            Ok(r) => r,
            Err(e) => return (vec![], Some(e)),
        };
        let mut v = Vec::new();
        loop {
            match r.next_packet() {
                Ok(Some(p)) => v.push((p.ts_ns, p.data.to_vec(), p.orig_len)),
                Ok(None) => return (v, None),
                Err(e) => return (v, Some(e)),
            }
        }
    }

    #[test]
    fn both_byte_orders_and_resolutions() {
        let recs: &[(u32, u32, &[u8])] = &[(1, 500, b"abc"), (2, 7, b"")];
        for be in [false, true] {
            let (v, e) = all(&file(MAGIC_US, be, 1, recs));
            assert!(e.is_none());
            assert_eq!(
                v,
                vec![
                    (1_000_500_000, b"abc".to_vec(), 13),
                    (2_000_007_000, vec![], 10)
                ]
            );
            let (v, _) = all(&file(MAGIC_NS, be, 1, recs));
            assert_eq!(v[0].0, 1_000_000_500);
        }
    }

    #[test]
    fn truncation_keeps_what_was_read_and_says_where() {
        let f = file(MAGIC_US, false, 1, &[(1, 0, b"abcd"), (2, 0, b"efgh")]);
        let (v, e) = all(&f[..f.len() - 2]);
        assert_eq!(v.len(), 1);
        let e = e.unwrap().to_string();
        assert!(e.contains("byte 44") && e.contains("packet data"), "{e}");
        let (v, e) = all(&f[..50]);
        assert_eq!(v.len(), 1);
        assert!(e.unwrap().to_string().contains("record header"));
        // An impossible length is corrupt, not a 4 GiB read.
        let mut bad = f.clone();
        bad[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            all(&bad).1,
            Some(CaptureError::Corrupt { offset: 24, .. })
        ));
        assert!(matches!(
            all(b"hello world").1,
            Some(CaptureError::NotACapture(_))
        ));
        for cut in 0..f.len() {
            let _ = all(&f[..cut]);
        }
    }
}
