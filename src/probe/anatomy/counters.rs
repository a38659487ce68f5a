//! What the kernel counts of a message's sends: its SND stamps ([`Sends`]), the
//! sender's retransmission counters read around it ([`RetransCounters`]), whether the
//! connection probes tail losses, and the CPU a thread runs on.

/// The SND stamps of one message's last byte: the first says when it left the stack;
/// every later one is a retransmission of the segment holding that byte (the kernel
/// stamps each transmission of a stamped skb, `tcp_transmit_skb` → `skb_tx_timestamp`).
/// A message of one segment (an RR request or response) is counted whole by them; a
/// longer one's earlier segments are not stamped, so its retransmissions are the
/// kernel's count instead ([`RetransCounters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sends {
    /// The first SND stamp, when the byte left the stack (CLOCK_REALTIME ns); `None` until
    /// one came.
    pub first: Option<u64>,
    /// How many SND stamps came after the first: the byte's retransmissions (saturating).
    pub again: u8,
    /// The latest of those retransmissions' stamps (CLOCK_REALTIME ns); `None` without one.
    pub last: Option<u64>,
    /// Of the retransmissions, those the RTO timer sent, as the sender's kernel
    /// counted them ([`RetransCounters`]); none where it does not count.
    pub rtos: Option<u8>,
    /// Of the retransmissions of a message longer than a segment, those loss recovery
    /// sent: all but the RTO timer's (`tcp_xmit_retransmit_queue` after SACKs or
    /// duplicate ACKs, RACK, the rest of the window after an RTO, a tail loss probe;
    /// tcp_info does not tell these apart). Zero for a message of one segment, whose
    /// copies only a timer sends.
    pub recovery: u8,
}

impl Sends {
    /// Sent once, at `ns`.
    pub fn once(ns: u64) -> Self {
        Self {
            first: Some(ns),
            ..Self::default()
        }
    }

    /// One more SND stamp of the byte.
    pub fn add(&mut self, ns: u64) {
        if self.first.is_none() {
            self.first = Some(ns);
        } else {
            self.again = self.again.saturating_add(1);
            self.last = Some(ns);
        }
    }

    /// µs from the first send to the last retransmission of the last segment.
    pub fn retransmitted_after_us(&self) -> Option<u32> {
        let us = self.last?.checked_sub(self.first?)? / 1_000;
        Some(u32::try_from(us).unwrap_or(u32::MAX))
    }
}

/// A connection's retransmissions as its kernel counts them (tcp_info): RTO timer
/// firings (`tcpi_total_rto`, incremented by `tcp_retransmit_timer`, Linux 6.7+) and
/// segments sent again (`tcpi_total_retrans`, `tcp_retransmit_skb`). One message is in
/// flight at a time, and the one before it was wholly acknowledged when this one was
/// sent (the peer answered it), so the counts' growth over a message is that message's.
///
/// A message of one segment is read only after its stamps showed a copy (a system call
/// saved per transaction): its firings are its RTOs, its other retransmissions the tail
/// loss probe. Which timer sends a lone segment's first copy is the kernel's to decide:
/// no probe while an earlier probe is unresolved (`tcp_send_loss_probe`: at most one
/// outstanding, `tlp_high_seq`) or after an RTO until the connection is Open again
/// (`tcp_schedule_loss_probe`), so it cannot be told from the settings alone. A message
/// longer than a segment (the connection's `tcpi_snd_mss` when it was opened) is read
/// after every send: only its last byte is stamped, so a lost earlier segment shows in
/// the kernel's count alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct RetransCounters {
    /// (RTO firings, segments retransmitted) at the last read.
    seen: (Option<u16>, Option<u32>),
    /// The messages are longer than a segment: read after each.
    every: bool,
}

impl RetransCounters {
    /// The counts now on `fd`'s connection, whose messages are `len` bytes (on kernels
    /// without `tcpi_total_rto`, no RTO count).
    pub fn new(fd: std::os::fd::RawFd, len: u64) -> Self {
        let info = crate::kernel::sockopt::tcp_info_fd(fd).ok();
        Self {
            seen: info
                .as_ref()
                .map_or((None, None), |t| (t.total_rto, Some(t.total_retrans))),
            every: info.is_some_and(|t| len > u64::from(t.snd_mss)),
        }
    }

    /// After a message was acknowledged: how many times `sends` were retransmitted
    /// and which by the RTO timer.
    pub fn note(&mut self, fd: std::os::fd::RawFd, sends: &mut Sends) {
        if sends.again == 0 && !self.every {
            return;
        }
        let Ok(now) = crate::kernel::sockopt::tcp_info_fd(fd) else {
            return;
        };
        let (rto_before, retrans_before) = self.seen;
        self.seen = (now.total_rto.or(rto_before), Some(now.total_retrans));
        if self.every {
            if let Some(before) = retrans_before {
                let again = now.total_retrans.wrapping_sub(before);
                sends.again = sends.again.max(u8::try_from(again).unwrap_or(u8::MAX));
            }
        }
        sends.rtos = rto_before
            .zip(now.total_rto)
            .and_then(|(before, now)| u8::try_from(now.wrapping_sub(before)).ok())
            .map(|r| r.min(sends.again));
        if self.every {
            sends.recovery = sends.again - sends.rtos.unwrap_or(0);
        }
    }
}

/// Whether `again` timer retransmissions of one message began with a tail loss probe:
/// all but the kernel's RTOs, when it counted them (at most one probe per message:
/// after the first RTO the connection is in Loss); otherwise the first, when the
/// sender probes at all.
pub(super) fn probed(again: u8, rtos: Option<u8>, probes: bool) -> bool {
    again > 0 && rtos.map_or(probes, |r| again > r)
}

/// The kernel sends a lone segment again only from a timer (TLP, RTO; no duplicate
/// ACKs can come with one segment in flight), and no timer fires within a jiffy of the
/// send, at least 1 ms at HZ ≤ 1000. A request that arrived sooner after the response
/// left found that response sent once, so the server stops reading stamps at its first
/// (saving a read that finds the queue empty, a system call per transaction).
pub const NO_RETRANSMISSION_WITHIN_NS: u64 = 1_000_000;

/// Whether the kernel sends a tail loss probe before the RTO on `fd`'s connection
/// (`tcp_schedule_loss_probe`: net.ipv4.tcp_early_retrans 3 or 4, and SACK on the
/// connection). Then a lone segment's first retransmission is the probe and every
/// later one an RTO (no probe after the first RTO: the state is Loss; KERNEL_RTO §5–6);
/// without it every retransmission is an RTO.
pub fn probes_tail_loss(fd: std::os::fd::RawFd) -> bool {
    /// `TCPI_OPT_SACK` (include/uapi/linux/tcp.h).
    const SACK: u8 = 2;
    let early = crate::kernel::sysctl::read(None, "net.ipv4.tcp_early_retrans")
        .ok()
        .and_then(|v| v.parse::<u8>().ok());
    let sack = crate::kernel::sockopt::tcp_info_fd(fd).is_ok_and(|t| t.options & SACK != 0);
    matches!(early, Some(3 | 4)) && sack
}

/// The CPU the calling thread runs on (`getcpu`, a vDSO call: no system call).
pub fn current_cpu() -> u32 {
    // SAFETY: no arguments; returns -1 only where getcpu is unsupported.
    u32::try_from(unsafe { libc::sched_getcpu() }).unwrap_or(u32::MAX)
}
