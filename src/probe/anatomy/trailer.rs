//! The trailer a response carries: the server's two intervals of the previous
//! transaction and what its kernel counted, encoded after the sequence bytes
//! ([`TRAILER_AT`]); the server's bookkeeping that fills it ([`ServerStamps`]) and the
//! last transaction's part, which no response carries ([`LastPart`]).

use super::counters::Sends;

/// Where the trailer starts in a response (after UDP_RR's echoed sequence bytes).
pub const TRAILER_AT: usize = 8;
/// The trailer, little-endian: the transaction's number plus one (u32; 0: no
/// transaction, as in the first response), server_recv ns (u32), server_app ns (u32)
/// (`u32::MAX` for a stamp the kernel did not give), the requests the server has
/// answered including this one (u32), the request's RX stamp on the server's clock
/// (u64 ns, 0 when missing; the response's TX stamp is RX + server_recv + server_app),
/// the response's retransmissions (u8), flags (u8: bit 0, the server handled the
/// request on another CPU than the one before; bit 1, the server's first
/// retransmission is a tail loss probe; bit 2, the next byte is its kernel's count),
/// how many of the retransmissions the RTO timer sent (u8), how many loss recovery
/// sent (u8, [`Sends::recovery`]), and µs from the response's first send to its last
/// segment's last retransmission (u32; `u32::MAX`: that segment was sent once).
pub const TRAILER_LEN: usize = 32;
/// The smallest response that carries a trailer.
pub const MIN_RESPONSE: u32 = (TRAILER_AT + TRAILER_LEN) as u32;
const MISSING: u32 = u32::MAX;

/// What the server measured of one transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerPart {
    /// TCP: the transaction's number from 1; UDP: the low 32 bits of its sequence.
    pub seq: u32,
    /// Request arrived (RX stamp) → the server's `recv()` returned.
    pub recv_ns: Option<u32>,
    /// `recv()` returned → the response left the stack (TX stamp).
    pub app_ns: Option<u32>,
    /// Requests the server answered, the one this response answers included.
    pub answered: u32,
    /// The request's RX stamp and the response's TX stamp, server's CLOCK_REALTIME.
    pub rx_ns: Option<u64>,
    /// The response's TX stamp (its first SND stamp), ns. A trailer does not carry it:
    /// read from one, it is `rx_ns + recv_ns + app_ns`, `None` if any is missing.
    pub tx_ns: Option<u64>,
    /// The response's retransmissions, and when its last segment's last one left after
    /// the first send.
    pub retransmissions: u8,
    /// µs from the response's first send to its last segment's last retransmission;
    /// `None` when that segment went once.
    pub retransmitted_after_us: Option<u32>,
    /// The server read this request on another CPU than the request before it.
    pub migrated: bool,
    /// The server's kernel probes a tail loss first ([`probes_tail_loss`](super::probes_tail_loss)).
    pub tlp: bool,
    /// Of the retransmissions, those the server's RTO timer sent ([`RetransCounters`](super::RetransCounters)).
    pub rtos: Option<u8>,
    /// Of the retransmissions, those the server's loss recovery sent ([`Sends::recovery`]).
    pub recovery: u8,
}

impl ServerPart {
    /// Write into `resp` (at least [`MIN_RESPONSE`] bytes).
    pub fn write(&self, resp: &mut [u8]) {
        let t = &mut resp[TRAILER_AT..TRAILER_AT + TRAILER_LEN];
        t[0..4].copy_from_slice(&self.seq.wrapping_add(1).to_le_bytes());
        t[4..8].copy_from_slice(&self.recv_ns.unwrap_or(MISSING).to_le_bytes());
        t[8..12].copy_from_slice(&self.app_ns.unwrap_or(MISSING).to_le_bytes());
        t[12..16].copy_from_slice(&self.answered.to_le_bytes());
        t[16..24].copy_from_slice(&self.rx_ns.unwrap_or(0).to_le_bytes());
        t[24] = self.retransmissions;
        t[25] = u8::from(self.migrated)
            | (u8::from(self.tlp) << 1)
            | (u8::from(self.rtos.is_some()) << 2);
        t[26] = self.rtos.unwrap_or(0);
        t[27] = self.recovery;
        t[28..32].copy_from_slice(&self.retransmitted_after_us.unwrap_or(MISSING).to_le_bytes());
    }

    /// Read from a response; `None` when it is too short or carries no transaction
    /// (the first response has nothing before it).
    pub fn read(resp: &[u8]) -> Option<Self> {
        let t = resp.get(TRAILER_AT..TRAILER_AT + TRAILER_LEN)?;
        let word = |i: usize| u32::from_le_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
        let long = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&t[i..i + 8]);
            Some(u64::from_le_bytes(b)).filter(|&v| v != 0)
        };
        let opt = |v: u32| (v != MISSING).then_some(v);
        let seq = word(0);
        let (recv_ns, app_ns, rx_ns) = (opt(word(4)), opt(word(8)), long(16));
        let retransmissions = t[24];
        (seq != 0).then(|| Self {
            seq: seq - 1,
            recv_ns,
            app_ns,
            answered: word(12),
            rx_ns,
            tx_ns: rx_ns
                .zip(recv_ns.zip(app_ns))
                .and_then(|(rx, (r, a))| rx.checked_add(u64::from(r))?.checked_add(u64::from(a))),
            retransmissions,
            retransmitted_after_us: (retransmissions > 0).then(|| word(28)).and_then(opt),
            migrated: t[25] & 1 != 0,
            tlp: t[25] & 2 != 0,
            rtos: (t[25] & 4 != 0).then_some(t[26]),
            recovery: t[27],
        })
    }
}

/// ns between two CLOCK_REALTIME stamps as a trailer field (saturating).
pub fn interval_u32(from: u64, to: u64) -> Option<u32> {
    to.checked_sub(from)
        .map(|d| u32::try_from(d).unwrap_or(MISSING - 1))
}

/// The server's bookkeeping for one data socket: the transaction in hand becomes the
/// previous one once its response is sent.
#[derive(Default)]
pub struct ServerStamps {
    /// The connection's first retransmissions are tail loss probes.
    pub tlp: bool,
    /// (number, RX stamp, when recv() returned, read on another CPU) of the last
    /// transaction answered.
    prev: Option<(u32, Option<u64>, u64, bool)>,
    /// The CPU the last request was read on.
    cpu: Option<u32>,
}

impl ServerStamps {
    /// Before sending the response to transaction `seq` (received at `rx`, read at
    /// `returned` on `cpu`): the previous transaction's part, given the SND stamps of
    /// its response, and remember this one.
    pub fn next(
        &mut self,
        seq: u32,
        rx: Option<u64>,
        returned: u64,
        cpu: u32,
        prev_sends: Sends,
        answered: u32,
    ) -> Option<ServerPart> {
        let part = self.prev.map(|(pseq, prx, pret, migrated)| ServerPart {
            seq: pseq,
            recv_ns: prx.and_then(|r| interval_u32(r, pret)),
            app_ns: prev_sends.first.and_then(|t| interval_u32(pret, t)),
            answered,
            rx_ns: prx,
            tx_ns: prev_sends.first,
            retransmissions: prev_sends.again,
            retransmitted_after_us: prev_sends.retransmitted_after_us(),
            migrated,
            tlp: self.tlp,
            rtos: prev_sends.rtos,
            recovery: prev_sends.recovery,
        });
        let migrated = self.cpu.is_some_and(|c| c != cpu);
        self.cpu = Some(cpu);
        self.prev = Some((seq, rx, returned, migrated));
        part
    }

    /// At the end of the stream: the last transaction's part, which no response will
    /// carry (it goes back with the server's report), given its response's SND stamps.
    pub fn last(&mut self, sends: Sends, answered: u32) -> Option<ServerPart> {
        let part = self.next(0, None, 0, self.cpu.unwrap_or(0), sends, answered);
        self.prev = None;
        part
    }
}

/// The server's part of a stream's last transaction, in the server's report: the
/// trailer bytes a response would have carried, and which client stream it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LastPart {
    /// The client's end of the stream, as the server saw it.
    pub peer: std::net::SocketAddr,
    /// [`MIN_RESPONSE`] bytes, the trailer where [`ServerPart::write`] puts it.
    pub trailer: Vec<u8>,
}

impl LastPart {
    /// `part` encoded as a trailer, for the stream whose client end is `peer`.
    pub fn new(peer: std::net::SocketAddr, part: &ServerPart) -> Self {
        let mut trailer = vec![0u8; MIN_RESPONSE as usize];
        part.write(&mut trailer);
        Self { peer, trailer }
    }

    /// The part, when the bytes hold one (a report is untrusted input).
    pub fn part(&self) -> Option<ServerPart> {
        (self.trailer.len() >= MIN_RESPONSE as usize)
            .then(|| ServerPart::read(&self.trailer))
            .flatten()
    }
}
