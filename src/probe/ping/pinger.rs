//! ping's loop as a state machine without I/O, in the manner of
//! `probe/server/conversation.rs`: the driver in `ping/mod.rs` asks it what to send
//! ([`Pinger::poll_transmit`]) and until when to wait ([`Pinger::poll_timeout`]), and
//! hands it what the socket received ([`Pinger::on_datagram`]). Time comes in as
//! arguments, so every rule here (iputils' schedule, -A's and -f's short waits, -w's
//! deadline, the wait after the last request, duplicates, reordering) is tested
//! without a socket or a clock.

use super::{PingEvent, PingSettings, ReplyEvent, ReplyOptions};
use crate::stats::LatencyHistogram;
use crate::wire::icmp::{self, Message, Unusable};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Sequence numbers remembered for duplicate detection and send times (one u16 cycle).
const SEQ_SPACE: usize = 1 << 16;

/// ping -f's most time between requests: "as fast as they come back or one hundred
/// times per second, whichever is more" (ping(8)).
const FLOOD_WAIT: Duration = Duration::from_millis(10);

/// Why a datagram the socket received was not a reply or an error about a request of
/// this run (a raw socket hears every ICMP message the host receives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignored {
    /// Shorter than its headers, or a header that is not one.
    Malformed,
    /// Another ICMP message: a request, a redirect, neighbour discovery, an error about
    /// something other than an echo request, or an error a datagram socket cannot carry.
    OtherMessage,
    /// A reply to another program's echo, or an error about one (its identifier).
    Foreign,
    /// About a sequence number not sent yet, or an error about a request already
    /// answered.
    Stale,
}

impl Ignored {
    /// Every reason, in counter order.
    pub const ALL: [Ignored; 4] = [
        Ignored::Malformed,
        Ignored::OtherMessage,
        Ignored::Foreign,
        Ignored::Stale,
    ];

    /// How the summary names it.
    pub fn name(self) -> &'static str {
        match self {
            Ignored::Malformed => "malformed",
            Ignored::OtherMessage => "other ICMP messages",
            Ignored::Foreign => "another program's echoes",
            Ignored::Stale => "about requests not outstanding",
        }
    }
}

impl From<Unusable> for Ignored {
    fn from(u: Unusable) -> Self {
        match u {
            Unusable::Truncated | Unusable::BadIpHeader => Ignored::Malformed,
            Unusable::OtherMessage => Ignored::OtherMessage,
        }
    }
}

/// A request [`Pinger::poll_transmit`] has written into [`Pinger::packet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Its ICMP sequence number: requests count from 1, as iputils' do.
    pub icmp_seq: u16,
    /// The request before it, if no reply to it is in yet (ping -O's "no answer yet").
    pub unanswered: Option<u16>,
}

/// What a run counted, once it is over.
#[derive(Debug)]
pub struct Tally {
    /// Requests sent.
    pub sent: u64,
    /// Requests answered within the timeout, each once.
    pub answered: u64,
    /// Second replies to a request already answered.
    pub duplicates: u64,
    /// Replies that came after the reply to a later request.
    pub reordered: u64,
    /// Replies whose payload was not the one sent.
    pub corrupted: u64,
    /// ICMP errors about the requests.
    pub errors: u64,
    /// The round trips within the timeout.
    pub histogram: LatencyHistogram,
    /// Every reply as (seconds since the start, RTT ns), when the settings keep them.
    pub series: Vec<(f64, u64)>,
    /// iputils' `pipe`: the most requests in flight when a reply came, its own counted.
    pub pipe: u64,
    /// iputils' smoothed round trip, µs × 8.
    pub ewma_us8: u64,
    /// Datagrams ignored, by [`Ignored::ALL`]'s order.
    pub ignored: [u64; Ignored::ALL.len()],
}

/// One ping run's schedule and bookkeeping.
pub struct Pinger {
    v6: bool,
    raw: bool,
    ident: u16,
    size: usize,
    pad: Vec<u8>,
    interval: Duration,
    timeout: Duration,
    /// The most a request waits for its reply before the next goes (zero interval).
    reply_wait: Duration,
    /// -i 0, -A, -f and --one-in-flight send once the last request is settled.
    waits_for_reply: bool,
    /// --one-in-flight: the last request waits for its reply as every other did, up to
    /// the reply wait, instead of iputils' two longest round trips.
    settles_last: bool,
    preload: u64,
    count: u64,
    keep_series: bool,
    start: Instant,
    stop_sending_at: Option<Instant>,
    deadline: Option<Instant>,
    packet: Vec<u8>,
    sent_at: Vec<u64>,
    answered: Vec<bool>,
    /// The `now` of the request being sent, and whether it was a preload.
    sending: Option<(Instant, bool)>,
    next_send: Instant,
    last_send: Instant,
    /// Once sending stops, how long the run waits after its last request, fixed then as
    /// iputils' static `waittime` is.
    linger: Option<Duration>,
    stopped: bool,
    highest: Option<u64>,
    max_rtt_ns: u64,
    tally: Tally,
}

impl Pinger {
    /// A run of `settings` from `start`, on a raw socket or not, with echo identifier
    /// `ident` (a datagram socket's is the kernel's: replies are not checked against it).
    pub fn new(settings: &PingSettings, raw: bool, ident: u16, start: Instant) -> Self {
        let v6 = settings.target.is_ipv6();
        Self {
            v6,
            raw,
            ident,
            size: settings.size,
            pad: settings.pad.clone(),
            interval: settings.interval,
            timeout: settings.timeout,
            reply_wait: if settings.short_wait {
                FLOOD_WAIT.min(settings.timeout)
            } else {
                settings.timeout
            },
            waits_for_reply: settings.interval.is_zero() || settings.one_in_flight,
            settles_last: settings.one_in_flight,
            preload: settings.preload,
            count: settings.count.unwrap_or(u64::MAX),
            keep_series: settings.keep_series,
            start,
            stop_sending_at: settings.duration.map(|d| start + d),
            deadline: settings.deadline.map(|d| start + d),
            packet: vec![0u8; 8 + settings.size],
            sent_at: vec![0u64; SEQ_SPACE],
            answered: vec![false; SEQ_SPACE],
            sending: None,
            next_send: start,
            last_send: start,
            linger: None,
            stopped: false,
            highest: None,
            max_rtt_ns: 0,
            tally: Tally {
                sent: 0,
                answered: 0,
                duplicates: 0,
                reordered: 0,
                corrupted: 0,
                errors: 0,
                histogram: LatencyHistogram::new(),
                series: Vec::new(),
                pipe: 0,
                ewma_us8: 0,
                ignored: [0; Ignored::ALL.len()],
            },
        }
    }

    /// Ctrl-C: no more requests, and no wait for outstanding replies.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// Requests answered so far.
    #[inline]
    fn unique(&self) -> u64 {
        self.tally.answered
    }

    /// The request sent last (icmp_seq = sent) is settled: -A, -f and -i 0 wait for
    /// that one only, so one lost request does not slow every later one.
    #[inline]
    fn last_answered(&self) -> bool {
        self.tally.sent == 0 || self.answered[usize::from(self.tally.sent as u16)]
    }

    /// More requests are due: the count, -l's and -w's times, Ctrl-C. With -w, iputils
    /// goes on sending past -c until -c replies are in.
    #[inline]
    fn wants_more(&self, now: Instant) -> bool {
        let counted = if self.deadline.is_some() {
            self.unique() < self.count
        } else {
            self.tally.sent < self.count
        };
        counted
            && self.stop_sending_at.is_none_or(|d| now < d)
            && self.deadline.is_none_or(|d| now < d)
            && !self.stopped
    }

    /// The next request, if one is due at `now`: written into [`Self::packet`], to be
    /// sent and then confirmed by [`Self::on_sent`].
    #[inline]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Request> {
        let sent = self.tally.sent;
        let preloading = sent < self.preload;
        let due = preloading
            || (now >= self.next_send
                && (!self.waits_for_reply
                    || self.last_answered()
                    || now - self.last_send >= self.reply_wait));
        if !(due && self.wants_more(now)) {
            return None;
        }
        // icmp_seq counts from 1, as iputils ping's.
        let seq = (sent + 1) as u16;
        let previous = seq.wrapping_sub(1);
        let pad = &self.pad;
        icmp::write_request(&mut self.packet, self.v6, self.ident, seq, |i| {
            payload_byte(pad, seq, i)
        });
        self.answered[usize::from(seq)] = false;
        self.sending = Some((now, preloading));
        Some(Request {
            icmp_seq: seq,
            unanswered: (sent > 0 && !self.answered[usize::from(previous)]).then_some(previous),
        })
    }

    /// The request [`Self::poll_transmit`] wrote.
    #[inline]
    pub fn packet(&self) -> &[u8] {
        &self.packet
    }

    /// The request went out: `sent_ns` is the send time read just before `sendto()`
    /// (CLOCK_REALTIME, the clock the kernel stamps replies with), `now` the moment
    /// after it.
    #[inline]
    pub fn on_sent(&mut self, sent_ns: u64, now: Instant) {
        let Some((asked, preloading)) = self.sending.take() else {
            return;
        };
        self.tally.sent += 1;
        self.sent_at[usize::from(self.tally.sent as u16)] = sent_ns;
        self.last_send = now;
        self.next_send += self.interval;
        if self.next_send < asked || preloading {
            self.next_send = asked + self.interval;
        }
    }

    /// A preload is still going out: the next request goes back to back, before any
    /// reply is read (ping -l).
    #[inline]
    pub fn preloading(&self) -> bool {
        self.tally.sent < self.preload
    }

    /// Until when to wait for a datagram; `None`: the run is over (nothing more to send
    /// and the last request has had its wait, or -w's deadline has come, or -w's count
    /// of replies is in).
    #[inline]
    pub fn poll_timeout(&mut self, now: Instant) -> Option<Instant> {
        let unique = self.unique();
        let sent = self.tally.sent;
        let outstanding = sent - (unique + self.tally.errors).min(sent);
        if self
            .deadline
            .is_some_and(|d| now >= d || unique >= self.count)
        {
            return None;
        }
        let linger = if self.wants_more(now) {
            None
        } else {
            let (max_rtt_ns, interval, timeout) = (self.max_rtt_ns, self.interval, self.timeout);
            let (settles_last, reply_wait) = (self.settles_last, self.reply_wait);
            Some(*self.linger.get_or_insert_with(|| {
                if settles_last {
                    reply_wait
                } else {
                    exit_wait(unique, max_rtt_ns, interval, timeout)
                }
            }))
        };
        if linger.is_some_and(|l| outstanding == 0 || now - self.last_send >= l || self.stopped) {
            return None;
        }
        let waiting = self.waits_for_reply && !self.last_answered();
        let wait_until = match linger {
            Some(l) => self.last_send + l,
            None if waiting => self.last_send + self.reply_wait,
            None => self.next_send,
        };
        Some(self.deadline.map_or(wait_until, |d| wait_until.min(d)))
    }

    /// A datagram from the socket, received at `received_ns` (the kernel's stamp, or the
    /// clock for -U) and `now`, from `from`; `ttl` is the kernel's (`IP_RECVTTL`) when
    /// the datagram carries no IP header. Returns what to tell the caller: a reply
    /// (duplicates too, as iputils prints them) or an error about a request; nothing
    /// for what was ignored or a reply past its timeout, which counts as lost.
    #[inline]
    pub fn on_datagram(
        &mut self,
        now: Instant,
        datagram: &[u8],
        received_ns: u64,
        from: IpAddr,
        ttl: Option<u8>,
    ) -> Option<PingEvent> {
        match self.classify(datagram, ttl) {
            Ok((Message::Reply(echo), ttl, options)) => {
                self.reply(now, echo, received_ns, from, ttl, options)
            }
            Ok((
                Message::Error {
                    kind,
                    code,
                    request,
                },
                ..,
            )) => self.error(request.seq(), from, error_words(self.v6, kind, code)?),
            Err(why) => {
                self.tally.ignored[why as usize] += 1;
                None
            }
        }
    }

    /// A reply to this run, or an error about one of its requests, with the reply's
    /// TTL and IPv4 options.
    #[inline]
    fn classify<'a>(
        &self,
        datagram: &'a [u8],
        ttl: Option<u8>,
    ) -> Result<(Message<'a>, Option<u8>, Option<ReplyOptions>), Ignored> {
        // A raw IPv4 socket hands over the IP header: its TTL and options, then ICMP.
        let (icmp, ttl, options) = if self.raw && !self.v6 {
            let head = icmp::ipv4_head(datagram)?;
            let options = (!head.options.is_empty()).then(|| {
                let mut bytes = [0u8; 40];
                bytes[..head.options.len()].copy_from_slice(head.options);
                ReplyOptions {
                    len: head.options.len() as u8,
                    bytes,
                }
            });
            (head.icmp, Some(head.ttl), options)
        } else {
            (datagram, ttl, None)
        };
        let message = icmp::message(icmp, self.v6)?;
        let echo = match message {
            Message::Reply(echo) if echo.code() != 0 => return Err(Ignored::OtherMessage),
            Message::Reply(echo) => echo,
            // A datagram socket hears only its own replies; errors come on its error queue.
            Message::Error { .. } if !self.raw => return Err(Ignored::OtherMessage),
            Message::Error { request, .. } => request,
        };
        // A datagram socket's replies are filtered by the kernel, which owns the
        // identifier; a raw socket hears every program's.
        if self.raw && echo.ident() != self.ident {
            return Err(Ignored::Foreign);
        }
        Ok((message, ttl, options))
    }

    /// An error about request `icmp_seq` (iputils' "From 10.0.0.1 icmp_seq=3
    /// Destination Host Unreachable", counted as `+N errors`).
    #[inline]
    fn error(&mut self, icmp_seq: u16, from: IpAddr, what: &'static str) -> Option<PingEvent> {
        let slot = usize::from(icmp_seq);
        if u64::from(icmp_seq) > self.tally.sent.min(0xffff) || self.answered[slot] {
            self.tally.ignored[Ignored::Stale as usize] += 1;
            return None;
        }
        self.tally.errors += 1;
        // Settled: the end and -A's pacing stop waiting for it.
        self.answered[slot] = true;
        Some(PingEvent::Error {
            from,
            icmp_seq,
            what,
        })
    }

    #[inline]
    fn reply(
        &mut self,
        now: Instant,
        echo: icmp::Echo<'_>,
        received_ns: u64,
        from: IpAddr,
        ttl: Option<u8>,
        options: Option<ReplyOptions>,
    ) -> Option<PingEvent> {
        let seq = echo.seq();
        let sent = self.tally.sent;
        // The full sequence number nearest below what was sent (the request numbered k
        // went out with icmp_seq k + 1).
        let mut full = (sent.saturating_sub(1) & !0xffff) | u64::from(seq.wrapping_sub(1));
        if full >= sent {
            if full < 0x1_0000 {
                self.tally.ignored[Ignored::Stale as usize] += 1;
                return None;
            }
            full -= 0x1_0000;
        }
        let slot = usize::from(seq);
        let rtt = received_ns.saturating_sub(self.sent_at[slot]);
        let event = |rtt_ns: u64, duplicate: bool| {
            PingEvent::Reply(ReplyEvent {
                bytes: 8 + echo.payload().len(),
                from,
                icmp_seq: seq,
                ttl,
                rtt_ns,
                received_ns,
                ident: echo.ident(),
                duplicate,
                options,
            })
        };
        if self.answered[slot] {
            // iputils prints a duplicate's line too, marked (DUP!).
            self.tally.duplicates += 1;
            return Some(event(rtt, true));
        }
        self.answered[slot] = true;
        let payload = echo.payload();
        let intact = payload.len() == self.size
            && payload
                .iter()
                .enumerate()
                .all(|(i, &b)| b == payload_byte(&self.pad, seq, i));
        if !intact {
            self.tally.corrupted += 1;
        }
        if self.highest.is_some_and(|h| full < h) {
            self.tally.reordered += 1;
        }
        self.highest = Some(self.highest.map_or(full, |h| h.max(full)));
        if rtt > crate::stats::units::ns(self.timeout) {
            // Arrived after its timeout: counted as lost, like ping -W.
            return None;
        }
        let t = &mut self.tally;
        t.answered += 1;
        t.histogram.record_ns(rtt);
        self.max_rtt_ns = self.max_rtt_ns.max(rtt);
        t.pipe = t.pipe.max(sent - full);
        let trip_us = rtt / 1000;
        t.ewma_us8 = if t.ewma_us8 == 0 {
            trip_us * 8
        } else {
            (t.ewma_us8 + trip_us).saturating_sub(t.ewma_us8 / 8)
        };
        if self.keep_series {
            t.series
                .push((now.saturating_duration_since(self.start).as_secs_f64(), rtt));
        }
        Some(event(rtt, false))
    }

    /// What the run counted.
    pub fn finish(self) -> Tally {
        self.tally
    }
}

/// Payload byte `i` of request `seq`: a pattern the reply must carry back intact.
#[inline]
pub(in crate::probe) fn pattern(seq: u16, i: usize) -> u8 {
    (i as u8).wrapping_add(seq as u8)
}

/// Payload byte `i` of request `seq`: ping -p's `pad` repeated, or [`pattern`], which
/// also catches a reply carrying another request's payload.
#[inline]
fn payload_byte(pad: &[u8], seq: u16, i: usize) -> u8 {
    if pad.is_empty() {
        pattern(seq, i)
    } else {
        pad[i % pad.len()]
    }
}

/// iputils' words for an ICMP (`v6`: ICMPv6) error's type and code (`pr_icmph` in
/// ping.c, `print_icmp` in ping6_common.c); `None` for a type it does not name.
fn error_words(v6: bool, kind: u8, code: u8) -> Option<&'static str> {
    Some(if v6 {
        match (kind, code) {
            (1, 0) => "Destination unreachable: No route",
            (1, 1) => "Destination unreachable: Administratively prohibited",
            (1, 2) => "Destination unreachable: Beyond scope of source address",
            (1, 3) => "Destination unreachable: Address unreachable",
            (1, 4) => "Destination unreachable: Port unreachable",
            (1, _) => "Destination unreachable",
            (2, _) => "Packet too big",
            (3, 0) => "Time exceeded: Hop limit",
            (3, _) => "Time exceeded: Defragmentation failure",
            (4, _) => "Parameter problem",
            _ => return None,
        }
    } else {
        match (kind, code) {
            (3, 0) => "Destination Net Unreachable",
            (3, 1) => "Destination Host Unreachable",
            (3, 2) => "Destination Protocol Unreachable",
            (3, 3) => "Destination Port Unreachable",
            (3, 4) => "Frag needed and DF set",
            (3, 5) => "Source Route Failed",
            (3, 6) => "Destination Net Unknown",
            (3, 7) => "Destination Host Unknown",
            (3, 8) => "Source Host Isolated",
            (3, 9) => "Destination Net Prohibited",
            (3, 10) => "Destination Host Prohibited",
            (3, 11) => "Destination Net Unreachable for Type of Service",
            (3, 12) => "Destination Host Unreachable for Type of Service",
            (3, 13) => "Packet filtered",
            (3, 14) => "Precedence Violation",
            (3, 15) => "Precedence Cutoff",
            (3, _) => "Dest Unreachable",
            (11, 0) => "Time to live exceeded",
            (11, _) => "Frag reassembly time exceeded",
            (12, _) => "Parameter problem",
            (4, _) => "Source Quench",
            (5, _) => "Redirect",
            _ => return None,
        }
    })
}

/// How long a run waits for replies after its last request: with a reply in, two of
/// the longest round trips but never less than the interval; with none, the timeout
/// (iputils' ping_common.c `schedule_exit`). Capped by the timeout, past which a reply
/// counts as lost anyway.
fn exit_wait(answered: u64, max_rtt_ns: u64, interval: Duration, timeout: Duration) -> Duration {
    if answered == 0 {
        return timeout;
    }
    Duration::from_nanos(max_rtt_ns.saturating_mul(2))
        .max(interval)
        .min(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    const MS: u64 = 1_000_000;

    fn settings(change: impl FnOnce(&mut PingSettings)) -> PingSettings {
        let mut s = PingSettings::new(LOCALHOST);
        s.size = 4;
        change(&mut s);
        s
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Sends the request due at `now`, stamped `sent_ns`; its icmp_seq.
    fn send(p: &mut Pinger, now: Instant, sent_ns: u64) -> Request {
        let r = p.poll_transmit(now).expect("a request due");
        p.on_sent(sent_ns, now);
        r
    }

    /// What a datagram socket hands over for a reply to `seq`: the ICMP message, the
    /// payload as sent.
    fn reply(seq: u16) -> Vec<u8> {
        let mut r = vec![0u8; 12];
        icmp::write_request(&mut r, false, 0x1234, seq, |i| pattern(seq, i));
        r[0] = icmp::ECHO_REPLY_V4;
        r
    }

    fn rtt(event: Option<PingEvent>) -> Option<(u16, u64, bool)> {
        match event? {
            PingEvent::Reply(r) => Some((r.icmp_seq, r.rtt_ns, r.duplicate)),
            _ => None,
        }
    }

    /// Witness: iputils' schedule by hand (ping_common.c `pinger` and `schedule_exit`):
    /// -c 3 -i 1 sends at 0, 1 and 2 s whatever the replies do, -O's "no answer yet"
    /// names the request before, and after the last the run waits the interval (two
    /// 64 µs round trips being less) and ends.
    #[test]
    fn requests_go_on_iputils_schedule_and_the_run_ends_after_its_wait() {
        let t0 = Instant::now();
        let mut p = Pinger::new(&settings(|s| s.count = Some(3)), false, 0x1234, t0);
        let first = send(&mut p, t0, 0);
        assert_eq!(
            first,
            Request {
                icmp_seq: 1,
                unanswered: None
            }
        );
        assert_eq!(icmp::checksum(p.packet()), 0);
        assert_eq!(p.packet()[4..8], [0x12, 0x34, 0, 1]);
        assert_eq!(p.poll_transmit(t0 + ms(500)), None);
        assert_eq!(p.poll_timeout(t0 + ms(500)), Some(t0 + ms(1000)));
        let r = p.on_datagram(t0, &reply(1), 64_000, LOCALHOST, Some(64));
        assert_eq!(rtt(r), Some((1, 64_000, false)));
        assert_eq!(send(&mut p, t0 + ms(1000), 1000 * MS).unanswered, None);
        let third = send(&mut p, t0 + ms(2000), 2000 * MS);
        assert_eq!(
            third,
            Request {
                icmp_seq: 3,
                unanswered: Some(2)
            }
        );
        assert_eq!(p.poll_transmit(t0 + ms(3000)), None, "-c 3 sent");
        assert_eq!(p.poll_timeout(t0 + ms(2500)), Some(t0 + ms(3000)));
        assert_eq!(p.poll_timeout(t0 + ms(3000)), None);
        let t = p.finish();
        assert_eq!((t.sent, t.answered, t.ewma_us8), (3, 1, 64 * 8));
    }

    /// Witness: ping(8)'s -f ("as fast as they come back or one hundred times per
    /// second") and -i 0's wait for the last reply, by hand.
    #[test]
    fn a_zero_interval_waits_for_the_reply_and_flood_at_most_10_ms() {
        let t0 = Instant::now();
        let flood = settings(|s| {
            s.interval = Duration::ZERO;
            s.short_wait = true;
            s.count = None;
        });
        let mut p = Pinger::new(&flood, false, 0x1234, t0);
        send(&mut p, t0, 0);
        assert_eq!(p.poll_transmit(t0 + ms(5)), None);
        assert_eq!(p.poll_timeout(t0 + ms(5)), Some(t0 + ms(10)));
        let second = send(&mut p, t0 + ms(10), 10 * MS);
        assert_eq!(second.unanswered, Some(1));
        p.on_datagram(t0, &reply(2), 10 * MS + 30_000, LOCALHOST, None);
        assert_eq!(
            send(&mut p, t0 + ms(10), 10 * MS).icmp_seq,
            3,
            "answered: at once"
        );
        // -i 0 without -f waits for the reply up to -W.
        let zero = settings(|s| s.interval = Duration::ZERO);
        let mut p = Pinger::new(&zero, false, 0x1234, t0);
        send(&mut p, t0, 0);
        assert_eq!(p.poll_transmit(t0 + ms(10)), None);
        assert_eq!(p.poll_timeout(t0 + ms(10)), Some(t0 + ms(2000)));
        assert!(p.poll_transmit(t0 + ms(2000)).is_some());
    }

    /// Witness: the setting's own words, by hand ("send a request only once the last
    /// one is answered (or timed out)"): the last request of a run one in flight
    /// waits for its reply up to -W as every other did, where iputils' exit wait
    /// (two of the longest round trips, 0.2 ms here) would count a reply 1 ms late as
    /// lost. The interval sweep lost its last echo so under a busy CPU.
    #[test]
    fn one_in_flight_waits_for_the_last_reply_as_for_every_other() {
        let t0 = Instant::now();
        let one = settings(|s| {
            s.interval = Duration::from_micros(10);
            s.one_in_flight = true;
            s.count = Some(2);
        });
        let mut p = Pinger::new(&one, false, 0x1234, t0);
        send(&mut p, t0, 0);
        let r = p.on_datagram(t0, &reply(1), 100_000, LOCALHOST, None);
        assert_eq!(rtt(r), Some((1, 100_000, false)));
        let last = t0 + ms(1);
        send(&mut p, last, MS);
        assert_eq!(p.poll_transmit(last + ms(1)), None, "-c 2 sent");
        assert_eq!(p.poll_timeout(last + ms(1)), Some(last + ms(2000)));
        let r = p.on_datagram(last + ms(1), &reply(2), 2 * MS, LOCALHOST, None);
        assert_eq!(rtt(r), Some((2, MS, false)));
        assert_eq!(p.poll_timeout(last + ms(1)), None, "every reply in");
        let t = p.finish();
        assert_eq!((t.sent, t.answered), (2, 2));
    }

    /// Witness: each reply built by hand with its own round trip; the counts follow
    /// iputils' rules (a second reply is a duplicate and not in the statistics, a reply
    /// past -W is lost) and rttlab's (reordered, corrupted).
    #[test]
    fn duplicates_reordering_corruption_and_late_replies_are_told_apart() {
        let t0 = Instant::now();
        let mut p = Pinger::new(&settings(|s| s.count = Some(4)), false, 0x1234, t0);
        for k in 0..4u64 {
            send(&mut p, t0 + ms(1000 * k), 1000 * MS * k);
        }
        let at = |p: &mut Pinger, datagram: &[u8], ns: u64| {
            rtt(p.on_datagram(t0, datagram, ns, LOCALHOST, None))
        };
        assert_eq!(at(&mut p, &reply(2), 1050 * MS), Some((2, 50 * MS, false)));
        assert_eq!(
            at(&mut p, &reply(1), 1100 * MS),
            Some((1, 1100 * MS, false))
        );
        assert_eq!(at(&mut p, &reply(1), 1200 * MS), Some((1, 1200 * MS, true)));
        let mut wrong = reply(3);
        wrong[9] ^= 0xff;
        assert_eq!(at(&mut p, &wrong, 2001 * MS), Some((3, MS, false)));
        assert_eq!(at(&mut p, &reply(4), 6001 * MS), None, "past -W's 2 s");
        assert_eq!(at(&mut p, &reply(9), 6001 * MS), None, "never sent");
        assert_eq!(at(&mut p, &reply(1)[..6], 6001 * MS), None, "truncated");
        let t = p.finish();
        assert_eq!(
            (t.sent, t.answered, t.duplicates, t.reordered, t.corrupted),
            (4, 3, 1, 1, 1)
        );
        assert_eq!(t.histogram.count(), 3);
        assert_eq!(t.ignored, [1, 0, 0, 1]);
        assert_eq!(t.pipe, 4, "request 1 answered with all 4 in flight");
    }

    /// Witness: RFC 792's layouts built by hand, as a raw IPv4 socket delivers them: the
    /// IP header's TTL and options reach the reply, another program's echoes and errors
    /// are ignored, and an error about a request settles it, so the run ends without
    /// waiting for it (iputils' `+N errors`).
    #[test]
    fn a_raw_socket_hears_errors_and_other_programs_echoes() {
        let t0 = Instant::now();
        let mut p = Pinger::new(&settings(|s| s.count = Some(2)), true, 0x1234, t0);
        send(&mut p, t0, 0);
        send(&mut p, t0 + ms(1000), 1000 * MS);
        let ip = |ttl: u8, options: &[u8], icmp: &[u8]| {
            let mut d = vec![0x45 + options.len() as u8 / 4, 0, 0, 0, 0, 0, 0, 0, ttl, 1];
            d.extend_from_slice(&[0; 10]);
            d.extend_from_slice(options);
            d.extend_from_slice(icmp);
            d
        };
        let Some(PingEvent::Reply(r)) = p.on_datagram(
            t0,
            &ip(61, &[1, 7, 7, 4], &reply(1)),
            MS,
            LOCALHOST,
            Some(1),
        ) else {
            panic!("a reply");
        };
        assert_eq!((r.ttl, r.bytes), (Some(61), 12));
        assert_eq!(
            r.options.map(|o| o.bytes[..4].to_vec()),
            Some(vec![1, 7, 7, 4])
        );
        let mut foreign = reply(2);
        foreign[5] = 0x35;
        assert!(p
            .on_datagram(t0, &ip(64, &[], &foreign), MS, LOCALHOST, None)
            .is_none());
        let quoting = |ident: u8| {
            let mut e = vec![11u8, 0, 0, 0, 0, 0, 0, 0, 0x45, 0, 0, 0, 0, 0, 0, 0, 1, 1];
            e.extend_from_slice(&[0; 10]);
            e.extend_from_slice(&[8, 0, 0, 0, 0x12, ident, 0, 2]);
            e
        };
        let router = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        assert!(p
            .on_datagram(t0, &ip(64, &[], &quoting(0x35)), MS, router, None)
            .is_none());
        assert_eq!(p.poll_timeout(t0 + ms(1001)), Some(t0 + ms(2000)));
        let Some(PingEvent::Error {
            from,
            icmp_seq: 2,
            what,
        }) = p.on_datagram(t0, &ip(64, &[], &quoting(0x34)), MS, router, None)
        else {
            panic!("an error about request 2");
        };
        assert_eq!((from, what), (router, "Time to live exceeded"));
        assert!(p
            .on_datagram(t0, &ip(64, &[], &quoting(0x34)), MS, router, None)
            .is_none());
        assert_eq!(p.poll_timeout(t0 + ms(1001)), None, "nothing outstanding");
        let t = p.finish();
        assert_eq!((t.sent, t.answered, t.errors), (2, 1, 1));
        assert_eq!(t.ignored, [0, 0, 2, 1]);
    }

    /// Witness: ping -l sends its preload back to back; with -w a count is of replies
    /// (ping_common.c's `pinger` goes on past -c when a deadline is set), and the
    /// deadline ends the run whatever is outstanding.
    #[test]
    fn preload_goes_back_to_back_and_a_deadline_counts_replies() {
        let t0 = Instant::now();
        let mut p = Pinger::new(&settings(|s| s.preload = 3), false, 0x1234, t0);
        for seq in 1..=3 {
            assert_eq!(send(&mut p, t0, 0).icmp_seq, seq);
            assert_eq!(p.preloading(), seq < 3);
        }
        assert_eq!(p.poll_transmit(t0), None, "the preload is out");
        let mut p = Pinger::new(
            &settings(|s| {
                s.count = Some(2);
                s.deadline = Some(ms(10_000));
            }),
            false,
            0x1234,
            t0,
        );
        for k in 0..3u64 {
            send(&mut p, t0 + ms(1000 * k), 0);
        }
        assert!(p.poll_transmit(t0 + ms(3000)).is_some(), "2 replies not in");
        p.on_datagram(t0, &reply(1), MS, LOCALHOST, None);
        assert!(p.poll_timeout(t0 + ms(3001)).is_some());
        p.on_datagram(t0, &reply(3), MS, LOCALHOST, None);
        assert_eq!(p.poll_timeout(t0 + ms(3001)), None, "-c 2 replies in");
        let mut p = Pinger::new(
            &settings(|s| s.deadline = Some(ms(1500))),
            false,
            0x1234,
            t0,
        );
        send(&mut p, t0, 0);
        assert_eq!(p.poll_timeout(t0 + ms(1000)), Some(t0 + ms(1000)));
        assert_eq!(p.poll_timeout(t0 + ms(1500)), None, "-w's deadline");
    }

    /// Witness: arithmetic on the 16-bit sequence number. After 65 537 requests icmp_seq
    /// 1 is the last one's, so its reply finds one request in flight, not 65 537.
    #[test]
    fn sequence_numbers_wrap_to_the_latest_request() {
        let t0 = Instant::now();
        let mut p = Pinger::new(
            &settings(|s| {
                s.preload = u64::MAX;
                s.count = None;
            }),
            false,
            0x1234,
            t0,
        );
        for _ in 0..65_537 {
            send(&mut p, t0, 0);
        }
        assert_eq!(
            rtt(p.on_datagram(t0, &reply(1), 5, LOCALHOST, None)),
            Some((1, 5, false))
        );
        assert_eq!(p.finish().pipe, 1);
    }

    /// Witness: iputils' `schedule_exit` by hand. A 64 µs loopback RTT at -i 0.2 waits
    /// the 200 ms interval (the reply a loaded machine delays past 128 µs is still
    /// caught, as iputils catches it); a 300 ms RTT waits 600 ms; no reply: -W.
    #[test]
    fn the_wait_after_the_last_request_is_iputils_schedule_exit() {
        assert_eq!(exit_wait(2, 64_000, ms(200), ms(2000)), ms(200));
        assert_eq!(exit_wait(2, 300_000_000, ms(200), ms(2000)), ms(600));
        assert_eq!(exit_wait(2, 300_000_000, ms(0), ms(2000)), ms(600));
        assert_eq!(exit_wait(2, 1_500_000_000, ms(200), ms(2000)), ms(2000));
        assert_eq!(exit_wait(0, 64_000, ms(200), ms(2000)), ms(2000));
    }

    #[test]
    fn error_words_are_iputils() {
        assert_eq!(
            error_words(false, 3, 1),
            Some("Destination Host Unreachable")
        );
        assert_eq!(
            error_words(true, 1, 3),
            Some("Destination unreachable: Address unreachable")
        );
        assert_eq!(error_words(true, 5, 0), None);
    }
}
