//! The TCP header and its options (RFC 9293 §3.1, RFC 7323 timestamps and window scale,
//! RFC 2018 SACK); unknown options are kept as (kind, data).

use super::{be16, be32, Skip};

/// A TCP segment: header and the payload the capture holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tcp<'a> {
    header: &'a [u8],
    payload: &'a [u8],
}

/// Flag bits.
pub const FIN: u8 = 0x01;
/// SYN: synchronise sequence numbers (opens a connection).
pub const SYN: u8 = 0x02;
/// RST: reset the connection.
pub const RST: u8 = 0x04;
/// PSH: push the data to the application.
pub const PSH: u8 = 0x08;
/// ACK: the acknowledgment number is valid.
pub const ACK: u8 = 0x10;

/// One option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// Maximum segment size (kind 2), bytes.
    Mss(u16),
    /// Window scale shift count (kind 3).
    WindowScale(u8),
    /// SACK permitted (kind 4).
    SackPermitted,
    /// SACK blocks as (left, right) edges.
    Sack(SackBlocks<'a>),
    /// Timestamps (kind 8, RFC 7323).
    Timestamps {
        /// TSval: the sender's timestamp clock.
        val: u32,
        /// TSecr: the TSval echoed back to the peer.
        ecr: u32,
    },
    /// Any other option, or a known kind with an unexpected length.
    Unknown {
        /// The option's kind byte.
        kind: u8,
        /// The option's bytes after kind and length.
        data: &'a [u8],
    },
}

/// The blocks of a SACK option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SackBlocks<'a>(&'a [u8]);

impl Iterator for SackBlocks<'_> {
    type Item = (u32, u32);
    fn next(&mut self) -> Option<(u32, u32)> {
        let b = (be32(self.0, 0)?, be32(self.0, 4)?);
        self.0 = &self.0[8..];
        Some(b)
    }
}

impl<'a> Tcp<'a> {
    /// View `bytes` (the IP payload) as TCP.
    ///
    /// # Errors
    /// Shorter than 20 bytes or than its data offset; a data offset below 5 words.
    pub fn new(bytes: &'a [u8]) -> Result<Self, Skip> {
        let off = usize::from(bytes.get(12).ok_or(Skip::Truncated)? >> 4) * 4;
        if off < 20 {
            return Err(Skip::BadTcpHeader);
        }
        let header = bytes.get(..off).ok_or(Skip::Truncated)?;
        Ok(Self {
            header,
            payload: &bytes[off..],
        })
    }

    fn u16_at(&self, at: usize) -> u16 {
        be16(self.header, at).unwrap_or(0)
    }

    fn u32_at(&self, at: usize) -> u32 {
        be32(self.header, at).unwrap_or(0)
    }

    /// Source port (header bytes 0–1).
    pub fn src_port(&self) -> u16 {
        self.u16_at(0)
    }
    /// Destination port (header bytes 2–3).
    pub fn dst_port(&self) -> u16 {
        self.u16_at(2)
    }
    /// Sequence number (header bytes 4–7).
    pub fn seq(&self) -> u32 {
        self.u32_at(4)
    }
    /// Acknowledgment number (header bytes 8–11); meaningful with [`ACK`] set.
    pub fn ack(&self) -> u32 {
        self.u32_at(8)
    }
    /// FIN, SYN, RST, PSH, ACK, URG, ECE, CWR bits.
    pub fn flags(&self) -> u8 {
        self.header[13]
    }
    /// Receive window as sent (header bytes 14–15), before window scaling.
    pub fn window(&self) -> u16 {
        self.u16_at(14)
    }
    /// The header's length in bytes (data offset × 4).
    pub fn header_len(&self) -> u32 {
        self.header.len() as u32
    }
    /// The payload bytes the capture holds (fewer than sent if the snap length cut it).
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// The options, in order; a malformed tail ends the iteration.
    pub fn options(&self) -> TcpOptions<'a> {
        TcpOptions(&self.header[20..])
    }

    /// The timestamps option, if present (the fast path of the TS engine).
    pub fn timestamps(&self) -> Option<(u32, u32)> {
        let o = &self.header[20..];
        // Linux and most stacks put it first after two NOPs: NOP NOP 8 10 val ecr.
        if o.len() >= 12 && o[..4] == [1, 1, 8, 10] {
            return Some((be32(o, 4)?, be32(o, 8)?));
        }
        self.options().find_map(|x| match x {
            TcpOption::Timestamps { val, ecr } => Some((val, ecr)),
            _ => None,
        })
    }
}

/// Iterator over a header's options.
#[derive(Debug, Clone, Copy)]
pub struct TcpOptions<'a>(&'a [u8]);

impl<'a> Iterator for TcpOptions<'a> {
    type Item = TcpOption<'a>;
    fn next(&mut self) -> Option<TcpOption<'a>> {
        loop {
            let kind = *self.0.first()?;
            match kind {
                0 => {
                    self.0 = &[];
                    return None;
                }
                1 => {
                    self.0 = &self.0[1..];
                    continue;
                }
                _ => {}
            }
            let len = usize::from(*self.0.get(1)?);
            let Some(data) = self.0.get(2..len.max(2)).filter(|_| len >= 2) else {
                self.0 = &[];
                return None;
            };
            self.0 = &self.0[len..];
            return Some(match (kind, data.len()) {
                (2, 2) => TcpOption::Mss(u16::from_be_bytes([data[0], data[1]])),
                (3, 1) => TcpOption::WindowScale(data[0]),
                (4, 0) => TcpOption::SackPermitted,
                (5, n) if n % 8 == 0 => TcpOption::Sack(SackBlocks(data)),
                (8, 8) => TcpOption::Timestamps {
                    val: u32::from_be_bytes([data[0], data[1], data[2], data[3]]),
                    ecr: u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
                },
                _ => TcpOption::Unknown { kind, data },
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(opts: &[u8], payload: &[u8]) -> Vec<u8> {
        let off = 20 + opts.len();
        let mut s = vec![0x9c, 0x40, 0x13, 0x89, 0, 0, 0, 7, 0, 0, 0, 9];
        s.push(((off / 4) as u8) << 4);
        s.extend_from_slice(&[SYN | ACK, 0xff, 0xff, 0, 0, 0, 0]);
        s.extend_from_slice(opts);
        s.extend_from_slice(payload);
        s
    }

    #[test]
    fn header_fields_and_every_option() {
        let opts = [
            2, 4, 0x05, 0xb4, // MSS 1460
            4, 2, // SACK permitted
            8, 10, 0, 0, 0, 5, 0, 0, 0, 6, // TS 5 6
            1, 3, 3, 7, // NOP, window scale 7
            5, 10, 0, 0, 0, 1, 0, 0, 0, 9, // SACK 1-9
            30, 4, 0xaa, 0xbb, // unknown kind 30 (MPTCP)
        ];
        let mut o = opts.to_vec();
        while o.len() % 4 != 0 {
            o.push(0);
        }
        let b = seg(&o, b"xy");
        let t = Tcp::new(&b).unwrap();
        assert_eq!(
            (t.src_port(), t.dst_port(), t.seq(), t.ack()),
            (40000, 5001, 7, 9)
        );
        assert_eq!(
            (t.flags(), t.window(), t.payload()),
            (SYN | ACK, 0xffff, &b"xy"[..])
        );
        let v: Vec<TcpOption> = t.options().collect();
        assert_eq!(v[0], TcpOption::Mss(1460));
        assert_eq!(v[1], TcpOption::SackPermitted);
        assert_eq!(v[2], TcpOption::Timestamps { val: 5, ecr: 6 });
        assert_eq!(v[3], TcpOption::WindowScale(7));
        match v[4] {
            TcpOption::Sack(blocks) => assert_eq!(blocks.collect::<Vec<_>>(), vec![(1, 9)]),
            x => panic!("{x:?}"),
        }
        assert_eq!(
            v[5],
            TcpOption::Unknown {
                kind: 30,
                data: &[0xaa, 0xbb]
            }
        );
        assert_eq!(v.len(), 6);
        assert_eq!(t.timestamps(), Some((5, 6)));
        // Linux's layout hits the fast path.
        let linux = seg(&[1, 1, 8, 10, 0, 0, 1, 0, 0, 0, 2, 0], b"");
        assert_eq!(Tcp::new(&linux).unwrap().timestamps(), Some((256, 512)));
    }

    #[test]
    fn malformed_headers_and_options() {
        let b = seg(&[], b"");
        for cut in 0..20 {
            assert!(Tcp::new(&b[..cut]).is_err());
        }
        let mut short = b.clone();
        short[12] = 0x40;
        assert_eq!(Tcp::new(&short), Err(Skip::BadTcpHeader));
        // An option whose length runs past the header, or is 0/1: iteration ends.
        for opts in [[8u8, 40, 0, 0], [2, 0, 0, 0], [3, 1, 1, 1]] {
            let s = seg(&opts, b"");
            assert!(Tcp::new(&s).unwrap().options().count() <= 1);
            assert_eq!(Tcp::new(&s).unwrap().timestamps(), None);
        }
    }
}
