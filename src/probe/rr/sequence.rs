//! The sequence number a UDP request carries in its first bytes and the server echoes
//! (little-endian, as many bytes as the shorter message holds, up to 8), so a reply is
//! matched to its request, a late one told from a lost one ([`GaveUp`]).

use super::settings::RrSettings;

/// The bits of a sequence number that `k` sequence bytes carry.
pub(super) fn seq_mask(k: usize) -> u64 {
    if k >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * k)) - 1
    }
}

/// Sequence bytes carried at the start of a UDP request and echoed by the server.
pub(super) fn seq_len(s: &RrSettings) -> usize {
    (s.request_size.min(s.response_size) as usize).min(8)
}

/// Write `seq`'s low `k` bytes at the start of `buf`.
pub(super) fn put_seq(buf: &mut [u8], seq: u64, k: usize) {
    buf[..k].copy_from_slice(&seq.to_le_bytes()[..k]);
}

/// The `k`-byte sequence number at the start of `buf`.
pub(super) fn get_seq(buf: &[u8], k: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..k].copy_from_slice(&buf[..k]);
    u64::from_le_bytes(b)
}

/// The UDP requests given up on most recently, at most [`GAVE_UP_MAX`], oldest first:
/// a reply later than that many more timeouts is a stray. Closed loop keeps
/// [`GivenUp`]s, open loop its pending requests.
pub(super) struct GaveUp<T>(std::collections::VecDeque<T>);

impl<T> Default for GaveUp<T> {
    fn default() -> Self {
        Self(std::collections::VecDeque::new())
    }
}

/// Requests given up on that a late reply can still be matched to.
pub(super) const GAVE_UP_MAX: usize = 64;

impl<T> GaveUp<T> {
    /// Keep `g`; the oldest, forgotten to make room, is returned.
    pub(super) fn push(&mut self, g: T) -> Option<T> {
        let old = if self.0.len() == GAVE_UP_MAX {
            self.0.pop_front()
        } else {
            None
        };
        self.0.push_back(g);
        old
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut()
    }

    /// Every request still kept, oldest first, taken out.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.0.drain(..)
    }

    /// The newest request a reply answers (`is`: the sequence bytes may wrap, so the
    /// newest with that echo), taken out, and how many given up on after it are still
    /// unanswered.
    pub(super) fn take_newest(&mut self, is: impl Fn(&T) -> bool) -> Option<(T, u64)> {
        let i = self.0.iter().rposition(is)?;
        let g = self.0.remove(i)?;
        Some((g, (self.0.len() - i) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: the bytes written and read back (the sequence number rides in the
    /// first bytes of a request, little-endian, as many as the shorter message holds, up
    /// to 8).
    #[test]
    fn sequence_numbers_round_trip_through_a_request() {
        let mut buf = [0u8; 8];
        put_seq(&mut buf, 0x0102_0304_0506_0708, 8);
        assert_eq!(buf, [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(get_seq(&buf, 8), 0x0102_0304_0506_0708);
        let mut short = [0u8; 3];
        put_seq(&mut short, 0x0a0b_0c0d, 3);
        assert_eq!(short, [0x0d, 0x0c, 0x0b]);
        assert_eq!(get_seq(&short, 3), 0x0b_0c0d);
        let mut s = RrSettings::new("127.0.0.1:1".parse().unwrap());
        (s.request_size, s.response_size) = (1, 2);
        assert_eq!(seq_len(&s), 1);
        (s.request_size, s.response_size) = (100, 64);
        assert_eq!(seq_len(&s), 8);
    }
}
