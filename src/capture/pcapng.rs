//! pcapng: sections (either byte order), several interfaces each with its own link type
//! and timestamp resolution (if_tsresol) and offset (if_tsoffset), enhanced, simple and
//! obsolete packet blocks; every other block is skipped.

use super::buffer::Buffer;
use super::{CaptureError, Packet};
use std::io::Read;

/// Section header block type (the same in both byte orders).
pub const SHB_TYPE: u32 = 0x0a0d_0d0a;
const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
const IDB: u32 = 1;
const PB: u32 = 2;
const SPB: u32 = 3;
const EPB: u32 = 6;

#[derive(Debug, Clone, Copy)]
struct Interface {
    link: u32,
    snaplen: u32,
    /// Timestamp units per second.
    units: u64,
    offset_s: i64,
}

impl Interface {
    /// A packet's timestamp in this interface's units and offset, as ns since the epoch.
    fn ns_of(&self, ts: u64) -> u64 {
        // The common resolutions without a 128-bit division.
        let ns = match self.units {
            1_000_000_000 => u128::from(ts),
            1_000_000 => u128::from(ts) * 1000,
            u => u128::from(ts) * 1_000_000_000 / u128::from(u),
        };
        (ns as i128 + i128::from(self.offset_s) * 1_000_000_000).max(0) as u64
    }
}

/// A pcapng reader.
pub struct PcapngReader<R> {
    b: Buffer<R>,
    swapped: bool,
    interfaces: Vec<Interface>,
    pending: usize,
}

/// The largest number of interfaces a section may declare (bounds memory).
const MAX_INTERFACES: usize = 65_536;

impl<R: Read> PcapngReader<R> {
    /// Start reading at a section header block.
    ///
    /// # Errors
    /// See [`Self::next_packet`].
    pub fn with_buffer(b: Buffer<R>) -> Result<Self, CaptureError> {
        Ok(Self {
            b,
            swapped: false,
            interfaces: Vec::new(),
            pending: 0,
        })
    }

    /// `e`, or the cut that explains it ([`Buffer::cut_or`]).
    pub fn cut_or(&mut self, e: CaptureError) -> CaptureError {
        self.b.cut_or(e)
    }

    /// The next packet, or `None` at the end.
    ///
    /// # Errors
    /// Truncated or corrupt block, read error.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, CaptureError> {
        loop {
            self.b.consume(self.pending);
            self.pending = 0;
            let offset = self.b.offset();
            let corrupt = |why: String| CaptureError::Corrupt { offset, why };
            let Some(h) = self.b.exact(12, "block header")? else {
                return Ok(None);
            };
            let raw_type = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
            if raw_type == SHB_TYPE {
                let bom = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
                self.swapped = match bom {
                    BYTE_ORDER_MAGIC => false,
                    x if x == BYTE_ORDER_MAGIC.swap_bytes() => true,
                    x => return Err(corrupt(format!("byte-order magic {x:#010x}"))),
                };
                self.interfaces.clear();
            }
            let sw = self.swapped;
            let ty = u32_at(sw, h, 0);
            let len = u32_at(sw, h, 4) as usize;
            if len < 12 || len % 4 != 0 {
                return Err(corrupt(format!("block length {len}")));
            }
            let block = self.b.exact(len, "block")?.ok_or(CaptureError::Truncated {
                offset,
                why: "block",
            })?;
            if u32_at(sw, block, len - 4) as usize != len {
                return Err(corrupt("trailing block length differs".into()));
            }
            self.pending = len;
            let body = &block[8..len - 4];
            match ty {
                IDB => {
                    if self.interfaces.len() >= MAX_INTERFACES {
                        return Err(corrupt("interface description".into()));
                    }
                    self.interfaces
                        .push(Self::parse_idb(sw, body).map_err(corrupt)?);
                }
                EPB | PB => {
                    let (ifid, ts, cap, orig) =
                        Self::packet_fields(sw, ty, body).map_err(corrupt)?;
                    let Some(ifc) = self.interfaces.get(ifid).copied() else {
                        return Err(corrupt(format!("packet of undeclared interface {ifid}")));
                    };
                    if 20 + cap > body.len() {
                        return Err(corrupt(format!("captured length {cap} past the block")));
                    }
                    return Ok(Some(Packet {
                        ts_ns: ifc.ns_of(ts),
                        link: ifc.link,
                        data: self.b.slice(8 + 20, 8 + 20 + cap),
                        orig_len: orig,
                    }));
                }
                SPB => {
                    let Some(ifc) = self.interfaces.first().copied() else {
                        return Err(corrupt("simple packet before any interface".into()));
                    };
                    if body.len() < 4 {
                        return Err(corrupt("simple packet block too short".into()));
                    }
                    let orig = u32_at(sw, body, 0);
                    let snap = if ifc.snaplen == 0 {
                        u32::MAX
                    } else {
                        ifc.snaplen
                    };
                    let cap = (orig.min(snap) as usize).min(body.len() - 4);
                    // No timestamp in a simple packet block.
                    return Ok(Some(Packet {
                        ts_ns: 0,
                        link: ifc.link,
                        data: self.b.slice(8 + 4, 8 + 4 + cap),
                        orig_len: orig,
                    }));
                }
                _ => {}
            }
        }
    }

    /// An interface description block's body: link type, snap length, and the
    /// options `if_tsresol` (9) and `if_tsoffset` (14).
    fn parse_idb(sw: bool, body: &[u8]) -> Result<Interface, String> {
        if body.len() < 8 {
            return Err("interface description".into());
        }
        let link = u32::from(u16::from_le_bytes([body[0], body[1]]));
        let link = if sw {
            u32::from((link as u16).swap_bytes())
        } else {
            link
        };
        let mut ifc = Interface {
            link,
            snaplen: u32_at(sw, body, 4),
            units: 1_000_000,
            offset_s: 0,
        };
        Self::options(sw, &body[8..], |code, v| match (code, v.len()) {
            (9, 1) => {
                let r = v[0];
                ifc.units = if r & 0x80 == 0 {
                    10u64.checked_pow(u32::from(r)).unwrap_or(0)
                } else {
                    1u64.checked_shl(u32::from(r & 0x7f)).unwrap_or(0)
                };
            }
            (14, 8) => {
                let mut a = [0u8; 8];
                a.copy_from_slice(v);
                let x = i64::from_le_bytes(a);
                ifc.offset_s = if sw { x.swap_bytes() } else { x };
            }
            _ => {}
        });
        if ifc.units == 0 {
            return Err("if_tsresol out of range".into());
        }
        Ok(ifc)
    }

    /// An enhanced (or obsolete) packet block's fixed fields: interface, timestamp in
    /// the interface's units, captured length and original length.
    fn packet_fields(sw: bool, ty: u32, body: &[u8]) -> Result<(usize, u64, usize, u32), String> {
        if body.len() < 20 {
            return Err("packet block too short".into());
        }
        let ifid = if ty == EPB {
            u32_at(sw, body, 0) as usize
        } else {
            let id = u16::from_le_bytes([body[0], body[1]]);
            usize::from(if sw { id.swap_bytes() } else { id })
        };
        let ts = (u64::from(u32_at(sw, body, 4)) << 32) | u64::from(u32_at(sw, body, 8));
        Ok((
            ifid,
            ts,
            u32_at(sw, body, 12) as usize,
            u32_at(sw, body, 16),
        ))
    }

    /// Walk options (code u16, length u16, value padded to 4) until opt_endofopt.
    fn options(swapped: bool, mut o: &[u8], mut f: impl FnMut(u16, &[u8])) {
        while o.len() >= 4 {
            let rd = |a: u8, b: u8| {
                let v = u16::from_le_bytes([a, b]);
                if swapped {
                    v.swap_bytes()
                } else {
                    v
                }
            };
            let (code, len) = (rd(o[0], o[1]), usize::from(rd(o[2], o[3])));
            if code == 0 {
                return;
            }
            let Some(v) = o.get(4..4 + len) else { return };
            f(code, v);
            o = o.get(4 + len.div_ceil(4) * 4..).unwrap_or(&[]);
        }
    }
}

/// A u32 in the section's byte order.
fn u32_at(swapped: bool, b: &[u8], at: usize) -> u32 {
    let v = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    if swapped {
        v.swap_bytes()
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::super::CaptureReader;
    use super::*;

    fn block(be: bool, ty: u32, body: &[u8]) -> Vec<u8> {
        let w = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut body = body.to_vec();
        while body.len() % 4 != 0 {
            body.push(0);
        }
        let len = 12 + body.len() as u32;
        let mut b = w(ty).to_vec();
        b.extend_from_slice(&w(len));
        b.extend_from_slice(&body);
        b.extend_from_slice(&w(len));
        b
    }

    /// Two interfaces (µs default; ns via if_tsresol 9) and an EPB on each, an SPB, an
    /// unknown block in between.
    fn file(be: bool) -> Vec<u8> {
        let w32 = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let w16 = |v: u16| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut shb = w32(BYTE_ORDER_MAGIC).to_vec();
        shb.extend_from_slice(&w16(1));
        shb.extend_from_slice(&w16(0));
        shb.extend_from_slice(&[0xff; 8]);
        let mut f = block(be, SHB_TYPE, &shb);
        let idb = |link: u16, opts: &[u8]| {
            let mut b = w16(link).to_vec();
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&w32(65535));
            b.extend_from_slice(opts);
            b
        };
        f.extend(block(be, IDB, &idb(1, &[])));
        let mut tsresol = w16(9).to_vec();
        tsresol.extend_from_slice(&w16(1));
        tsresol.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0]);
        f.extend(block(be, IDB, &idb(113, &tsresol)));
        let epb = |ifid: u32, ts: u64, data: &[u8]| {
            let mut b = w32(ifid).to_vec();
            b.extend_from_slice(&w32((ts >> 32) as u32));
            b.extend_from_slice(&w32(ts as u32));
            b.extend_from_slice(&w32(data.len() as u32));
            b.extend_from_slice(&w32(data.len() as u32));
            b.extend_from_slice(data);
            b
        };
        f.extend(block(be, EPB, &epb(0, 1_500_000, b"first")));
        f.extend(block(be, 0x0bad, b"unknown block"));
        f.extend(block(be, EPB, &epb(1, 2_000_000_123, b"second!")));
        let mut spb = w32(3).to_vec();
        spb.extend_from_slice(b"abc");
        f.extend(block(be, SPB, &spb));
        f
    }

    #[test]
    fn interfaces_resolutions_and_block_kinds_in_both_byte_orders() {
        for be in [false, true] {
            let f = file(be);
            let mut r = CaptureReader::new(&f[..]).unwrap();
            let mut v = Vec::new();
            while let Some(p) = r.next_packet().unwrap() {
                v.push((p.ts_ns, p.link, p.data.to_vec()));
            }
            assert_eq!(
                v,
                vec![
                    (1_500_000_000, 1, b"first".to_vec()),
                    (2_000_000_123, 113, b"second!".to_vec()),
                    (0, 1, b"abc".to_vec()),
                ],
                "big-endian: {be}"
            );
        }
    }

    #[test]
    fn truncated_and_corrupt_blocks() {
        let f = file(false);
        for cut in 0..f.len() {
            let mut r = match CaptureReader::new(&f[..cut]) {
                Ok(r) => r,
                Err(_) => continue,
            };
            let mut n = 0;
            let end = loop {
                match r.next_packet() {
                    Ok(Some(_)) => n += 1,
                    Ok(None) => break None,
                    Err(e) => break Some(e),
                }
            };
            assert!(n <= 3);
            if let Some(e) = end {
                assert!(matches!(e, CaptureError::Truncated { .. }), "{cut}: {e}");
            }
        }
        let mut bad = f.clone();
        bad[4] = 13;
        let mut r = CaptureReader::new(&bad[..]).unwrap();
        assert!(matches!(
            r.next_packet(),
            Err(CaptureError::Corrupt { offset: 0, .. })
        ));
    }
}
