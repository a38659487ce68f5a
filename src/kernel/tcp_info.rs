//! `struct tcp_info` (include/uapi/linux/tcp.h), decoded by the length the kernel
//! returned: the struct has grown in almost every release (min_rtt in 4.6, delivery
//! rate in 4.9, total_rto in 6.7, …), and an older kernel simply returns fewer bytes.
//! Fields the kernel did not return are `None`, never zero.
//!
//! Used for `getsockopt(TCP_INFO)` and for the INET_DIAG_INFO attribute of sock_diag,
//! which carries the same struct.

use serde::{Deserialize, Serialize};

/// The fields rttlab reports. Times are microseconds, as the kernel gives them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TcpInfo {
    /// Bytes the kernel returned (tells which fields exist).
    pub len: usize,
    /// `tcpi_state`: the TCP state number (include/net/tcp_states.h: 1 ESTABLISHED,
    /// 10 LISTEN, …).
    pub state: u8,
    /// `tcpi_ca_state`: congestion-control state: 0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss.
    pub ca_state: u8,
    /// Consecutive RTOs of the current episode (`icsk_retransmits`).
    pub retransmits: u8,
    /// `tcpi_probes`: unanswered zero-window or keepalive probes (`icsk_probes_out`).
    pub probes: u8,
    /// `tcpi_backoff`: how many times the RTO has been doubled (`icsk_backoff`).
    pub backoff: u8,
    /// `tcpi_options`: bits of the options in use: 1 timestamps, 2 SACK, 4 window scaling,
    /// 8 ECN, 16 ECN seen, 32 data in SYN.
    pub options: u8,
    /// `tcpi_rto`: the current retransmission timeout, µs (a whole number of jiffies).
    pub rto_us: u32,
    /// `tcpi_ato`: the delayed-ACK timeout, µs.
    pub ato_us: u32,
    /// `tcpi_snd_mss`: the MSS used for sending, bytes.
    pub snd_mss: u32,
    /// `tcpi_rcv_mss`: the MSS estimated for the peer's segments, bytes.
    pub rcv_mss: u32,
    /// `tcpi_unacked`: segments sent and not yet acknowledged (`packets_out`); for LISTEN,
    /// connections waiting to be accepted.
    pub unacked: u32,
    /// `tcpi_sacked`: segments SACKed (`sacked_out`); for LISTEN, the accept backlog limit.
    pub sacked: u32,
    /// `tcpi_lost`: segments presumed lost (`lost_out`).
    pub lost: u32,
    /// `tcpi_retrans`: retransmitted segments not yet acknowledged (`retrans_out`).
    pub retrans: u32,
    /// `tcpi_last_data_sent`: ms since data was last sent.
    pub last_data_sent_ms: u32,
    /// `tcpi_last_data_recv`: ms since data was last received.
    pub last_data_recv_ms: u32,
    /// `tcpi_last_ack_recv`: ms since an ACK was last received.
    pub last_ack_recv_ms: u32,
    /// `tcpi_pmtu`: the path MTU, bytes.
    pub pmtu: u32,
    /// Smoothed RTT (`srtt_us >> 3`).
    pub rtt_us: u32,
    /// `tcpi_rttvar`: the RTT's mean deviation (`mdev_us >> 2`), µs.
    pub rttvar_us: u32,
    /// `tcpi_snd_ssthresh`: the slow-start threshold, segments; 2147483647
    /// (`TCP_INFINITE_SSTHRESH`) until the first loss.
    pub snd_ssthresh: u32,
    /// `tcpi_snd_cwnd`: the congestion window, segments.
    pub snd_cwnd: u32,
    /// `tcpi_reordering`: how much reordering the sender tolerates before it calls a
    /// segment lost, segments (starts at `net.ipv4.tcp_reordering`, 3).
    pub reordering: u32,
    /// `tcpi_rcv_rtt`: the RTT as this side estimates it while receiving (`rcv_rtt_est`),
    /// µs; 0 until measured.
    pub rcv_rtt_us: u32,
    /// Retransmitted segments over the connection's life.
    pub total_retrans: u32,
    /// `tcpi_pacing_rate`: bytes per second; `u64::MAX` when not paced.
    pub pacing_rate: Option<u64>,
    /// `tcpi_bytes_acked`: bytes the peer acknowledged.
    pub bytes_acked: Option<u64>,
    /// `tcpi_bytes_received`: bytes received in sequence.
    pub bytes_received: Option<u64>,
    /// `tcpi_segs_out`: segments sent, retransmissions and pure ACKs included.
    pub segs_out: Option<u32>,
    /// `tcpi_segs_in`: segments received, pure ACKs included.
    pub segs_in: Option<u32>,
    /// `tcpi_notsent_bytes`: bytes written by the application and not yet sent.
    pub notsent_bytes: Option<u32>,
    /// Windowed minimum RTT (Linux ≥ 4.6).
    pub min_rtt_us: Option<u32>,
    /// `tcpi_data_segs_in`: segments received that carry data.
    pub data_segs_in: Option<u32>,
    /// `tcpi_data_segs_out`: segments sent that carry data, retransmissions included.
    pub data_segs_out: Option<u32>,
    /// Bytes per second (Linux ≥ 4.9).
    pub delivery_rate: Option<u64>,
    /// `tcpi_busy_time`: time spent busy sending data, µs.
    pub busy_time_us: Option<u64>,
    /// `tcpi_rwnd_limited`: time sending was limited by the peer's receive window, µs.
    pub rwnd_limited_us: Option<u64>,
    /// `tcpi_sndbuf_limited`: time sending was limited by the send buffer, µs.
    pub sndbuf_limited_us: Option<u64>,
    /// `tcpi_delivered`: segments the peer acknowledged or SACKed, retransmissions included.
    pub delivered: Option<u32>,
    /// `tcpi_delivered_ce`: of those, segments the peer reported CE-marked (ECN).
    pub delivered_ce: Option<u32>,
    /// `tcpi_bytes_sent`: data bytes sent, retransmissions included.
    pub bytes_sent: Option<u64>,
    /// `tcpi_bytes_retrans`: data bytes retransmitted.
    pub bytes_retrans: Option<u64>,
    /// `tcpi_dsack_dups`: segments the peer reported as received twice (DSACK).
    pub dsack_dups: Option<u32>,
    /// `tcpi_reord_seen`: reordering events the sender detected.
    pub reord_seen: Option<u32>,
    /// `tcpi_rcv_ooopack`: packets received out of order.
    pub rcv_ooopack: Option<u32>,
    /// `tcpi_snd_wnd`: the peer's advertised receive window after scaling, bytes.
    pub snd_wnd: Option<u32>,
    /// `tcpi_rcv_wnd`: the receive window this side advertises, after scaling, bytes.
    pub rcv_wnd: Option<u32>,
    /// `tcpi_rehash`: times the flow was moved to another path (new hash) after timeouts or
    /// by PLB.
    pub rehash: Option<u32>,
    /// RTO timeouts over the connection's life (Linux ≥ 6.7).
    pub total_rto: Option<u16>,
    /// `tcpi_total_rto_recoveries`: RTO recoveries, an unfinished one included (Linux ≥ 6.7).
    pub total_rto_recoveries: Option<u16>,
    /// `tcpi_total_rto_time`: time spent in RTO recoveries, ms, an unfinished one included
    /// (Linux ≥ 6.7).
    pub total_rto_time_ms: Option<u32>,
}

/// The oldest layout we accept: everything up to `tcpi_total_retrans` (Linux 2.6.x).
pub const MIN_LEN: usize = 104;

/// Room for the largest struct any kernel returns today, with margin.
pub const BUF_LEN: usize = 512;

/// The buffer was shorter than the oldest `tcp_info`.
#[derive(Clone, Copy, Debug, thiserror::Error, PartialEq, Eq)]
#[error("tcp_info of {0} bytes is shorter than the minimum {MIN_LEN}")]
pub struct TooShort(pub usize);

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u8(&self, off: usize) -> u8 {
        self.0[off]
    }
    fn u16o(&self, off: usize) -> Option<u16> {
        self.0
            .get(off..off + 2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
    }
    fn u32o(&self, off: usize) -> Option<u32> {
        self.0
            .get(off..off + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64o(&self, off: usize) -> Option<u64> {
        self.0
            .get(off..off + 8)
            .map(|b| u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }
    fn u32(&self, off: usize) -> u32 {
        self.u32o(off).unwrap_or(0)
    }
}

impl TcpInfo {
    /// Decode the bytes the kernel returned (native byte order; offsets from the uapi
    /// header).
    ///
    /// # Errors
    /// Fewer than [`MIN_LEN`] bytes.
    pub fn decode(buf: &[u8]) -> Result<Self, TooShort> {
        if buf.len() < MIN_LEN {
            return Err(TooShort(buf.len()));
        }
        let r = Reader(buf);
        Ok(Self {
            len: buf.len(),
            state: r.u8(0),
            ca_state: r.u8(1),
            retransmits: r.u8(2),
            probes: r.u8(3),
            backoff: r.u8(4),
            options: r.u8(5),
            rto_us: r.u32(8),
            ato_us: r.u32(12),
            snd_mss: r.u32(16),
            rcv_mss: r.u32(20),
            unacked: r.u32(24),
            sacked: r.u32(28),
            lost: r.u32(32),
            retrans: r.u32(36),
            last_data_sent_ms: r.u32(44),
            last_data_recv_ms: r.u32(52),
            last_ack_recv_ms: r.u32(56),
            pmtu: r.u32(60),
            rtt_us: r.u32(68),
            rttvar_us: r.u32(72),
            snd_ssthresh: r.u32(76),
            snd_cwnd: r.u32(80),
            reordering: r.u32(88),
            rcv_rtt_us: r.u32(92),
            total_retrans: r.u32(100),
            pacing_rate: r.u64o(104),
            bytes_acked: r.u64o(120),
            bytes_received: r.u64o(128),
            segs_out: r.u32o(136),
            segs_in: r.u32o(140),
            notsent_bytes: r.u32o(144),
            min_rtt_us: r.u32o(148),
            data_segs_in: r.u32o(152),
            data_segs_out: r.u32o(156),
            delivery_rate: r.u64o(160),
            busy_time_us: r.u64o(168),
            rwnd_limited_us: r.u64o(176),
            sndbuf_limited_us: r.u64o(184),
            delivered: r.u32o(192),
            delivered_ce: r.u32o(196),
            bytes_sent: r.u64o(200),
            bytes_retrans: r.u64o(208),
            dsack_dups: r.u32o(216),
            reord_seen: r.u32o(220),
            rcv_ooopack: r.u32o(224),
            snd_wnd: r.u32o(228),
            rcv_wnd: r.u32o(232),
            rehash: r.u32o(236),
            total_rto: r.u16o(240),
            total_rto_recoveries: r.u16o(242),
            total_rto_time_ms: r.u32o(244),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }

    #[test]
    fn decodes_by_returned_length() {
        let mut b = vec![0u8; 248];
        b[0] = 1; // ESTABLISHED
        b[2] = 3;
        put32(&mut b, 8, 204_000);
        put32(&mut b, 68, 57);
        put32(&mut b, 72, 200_000);
        put32(&mut b, 100, 9);
        put32(&mut b, 148, 31);
        b[240..242].copy_from_slice(&4u16.to_ne_bytes());
        let full = TcpInfo::decode(&b).unwrap();
        assert_eq!(
            (full.state, full.retransmits, full.rto_us, full.rtt_us),
            (1, 3, 204_000, 57)
        );
        assert_eq!(
            (full.rttvar_us, full.total_retrans, full.min_rtt_us),
            (200_000, 9, Some(31))
        );
        assert_eq!(full.total_rto, Some(4));

        // A 4.5-era kernel stops before min_rtt: those fields are absent, not zero.
        let old = TcpInfo::decode(&b[..144]).unwrap();
        assert_eq!(old.min_rtt_us, None);
        assert_eq!(old.total_rto, None);
        assert_eq!(old.rtt_us, 57);
        assert_eq!(TcpInfo::decode(&b[..100]), Err(TooShort(100)));
    }

    #[test]
    fn never_panics_on_any_length() {
        let b = vec![0xffu8; BUF_LEN];
        for n in 0..=BUF_LEN {
            let _ = TcpInfo::decode(&b[..n]);
        }
    }
}
