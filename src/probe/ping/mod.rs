//! `rttlab ping`: ICMP echo for IPv4 and IPv6 (the seeds' `ping` layer).
//!
//! Uses an unprivileged ICMP datagram socket where `net.ipv4.ping_group_range` allows
//! it, a raw socket otherwise. Replies are timed by the kernel's receive timestamp
//! (`SO_TIMESTAMPNS`), so the time user space takes to wake up is not counted — ping's
//! wake-up on an idle vCPU costs tens of µs here. The send time is read just before
//! `sendto()`, on the same clock (CLOCK_REALTIME, which the kernel stamps with).
//!
//! Requests go out on a fixed schedule (`-i`) whatever the replies do, as ping does;
//! `-i 0` sends the next request as soon as the previous reply (or its timeout) is in.

mod pinger;
mod socket;

pub(super) use pinger::pattern;
pub use pinger::{Ignored, Pinger, Request, Tally};
pub use socket::chosen_source;
pub(crate) use socket::recv_with_ts;
pub(super) use socket::{enable_timestamps, open};

use super::pacing::{self, PaceMode};
use crate::kernel::host::HostFacts;
use crate::stats::{HdrLogWriter, LatencyHistogram, Percentile, Summary};
use serde::Serialize;
use socket2::SockAddr;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Which socket carries the echoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SocketKind {
    /// Try datagram, fall back to raw.
    Auto,
    /// `socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP)`: no privilege, needs ping_group_range.
    Dgram,
    /// `SOCK_RAW`: needs CAP_NET_RAW.
    Raw,
}

/// Everything that shapes a ping run.
#[derive(Clone, Debug)]
pub struct PingSettings {
    /// The host pinged; its family picks ICMP or ICMPv6.
    pub target: IpAddr,
    /// Requests to send (`-c`); `None`: no count limit (`duration` or Ctrl-C ends the run).
    pub count: Option<u64>,
    /// Stop sending after this long (`-l`); `None`: no time limit.
    pub duration: Option<Duration>,
    /// Time between requests (`-i`); zero sends the next once the last reply (or its
    /// timeout) is in.
    pub interval: Duration,
    /// How to wait (`--pace`, `--spin`): every mode but `Sleep` busy-polls the socket
    /// the whole time.
    pub pace: PaceMode,
    /// ICMP payload bytes (ping's -s; default 56).
    pub size: usize,
    /// A request without a reply after this is lost.
    pub timeout: Duration,
    /// Which socket carries the echoes (`--socket`).
    pub socket: SocketKind,
    /// Percentiles the result's summary gives (`--percentiles`).
    pub percentiles: Vec<Percentile>,
    /// Write the round trips as an HdrHistogram interval log (one interval per second).
    pub hdr_log: Option<std::path::PathBuf>,
    /// Keep every reply as (seconds since the start, RTT in ns) in
    /// [`PingResult::series`] (memory grows with the count: for bounded runs).
    pub keep_series: bool,
    /// Send a request only once the last one is answered (or timed out) and the
    /// interval since it has passed, as netperf's TCP_RR `-w` with `-b 1` paces: an
    /// interval shorter than the RTT then stops meaning many requests in flight.
    pub one_in_flight: bool,
    /// IP TTL / IPv6 hop limit of the requests (ping's -t).
    pub ttl: Option<u8>,
    /// IPv4 TOS byte / IPv6 traffic class (ping's -Q).
    pub tos: Option<u8>,
    /// Send through this interface only (`SO_BINDTODEVICE`; ping's -I IFACE).
    pub device: Option<String>,
    /// Send from this address (ping's -I ADDR).
    pub source: Option<IpAddr>,
    /// Firewall mark of the requests (`SO_MARK`, ping's -m), for policy routing.
    pub mark: Option<u32>,
    /// Path MTU discovery (ping's -M).
    pub pmtu: Option<Pmtu>,
    /// iputils' `-w`: end the run this long after the start whatever is outstanding;
    /// with a count, keep sending until that many replies are in (ping_common.c's
    /// `pinger` goes on past `-c` when a deadline is set).
    pub deadline: Option<Duration>,
    /// Requests sent back to back at the start, not waiting for a reply (ping's -l).
    pub preload: u64,
    /// The payload's repeating bytes (ping's -p); empty: rttlab's own per-sequence
    /// pattern, which also catches a reply carrying another request's payload.
    pub pad: Vec<u8>,
    /// The socket's send buffer, bytes (ping's -S, `SO_SNDBUF`).
    pub sndbuf: Option<usize>,
    /// Send only to hosts on an attached network, bypassing the routing table (ping's
    /// -r, `SO_DONTROUTE`).
    pub dont_route: bool,
    /// Do not loop multicast requests back to this host (ping's -L).
    pub no_multicast_loop: bool,
    /// The echo identifier (ping's -e): a raw socket writes it; a datagram socket's
    /// identifier is its bound port, so it binds to this one.
    pub ident: Option<u16>,
    /// Time a reply when user space reads it, not by the kernel's receive stamp
    /// (ping's -U: the "user-to-user" latency, wake-up included).
    pub user_latency: bool,
    /// ping's -f and -A: with a zero interval, send the next request once the last is
    /// answered or 10 ms have passed, whichever is first (flood's "at least 100 a
    /// second"; -A's adaptive wait stays that short as a loss does not stall it).
    pub short_wait: bool,
    /// Bind to the source address the kernel picks at the start, so a route change
    /// cannot move it (ping's -B).
    pub pin_source: bool,
    /// An IPv4 option in every request (ping's -R, -T): the replies carry it back
    /// filled in, and [`ReplyEvent::options`] holds what came back.
    pub ip_option: Option<IpOption>,
}

/// The IPv4 options ping asks routers to fill in (RFC 791 §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpOption {
    /// Record route (-R): the addresses of the hops, up to nine.
    RecordRoute,
    /// Internet timestamp (-T tsonly): each hop's ms since midnight UTC.
    Timestamps,
    /// Internet timestamp with each hop's address (-T tsandaddr).
    TimestampsAndAddresses,
}

impl IpOption {
    /// The 40 option bytes of the request, as iputils lays them out (ping.c): a NOP
    /// and RR of 39 bytes pointing at 4; TS of 40 (tsonly) or 36 bytes pointing at 5
    /// with its flag.
    pub fn request_bytes(self) -> [u8; 40] {
        let mut b = [0u8; 40];
        match self {
            IpOption::RecordRoute => b[..4].copy_from_slice(&[1, 7, 39, 4]),
            IpOption::Timestamps => b[..4].copy_from_slice(&[68, 40, 5, 0]),
            IpOption::TimestampsAndAddresses => b[..4].copy_from_slice(&[68, 36, 5, 1]),
        }
        b
    }
}

/// The IPv4 options of a reply's header, as they came (at most 40 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyOptions {
    /// Bytes used of `bytes`.
    pub len: u8,
    /// The options, from the first byte after the fixed header.
    pub bytes: [u8; 40],
}

/// What [`run_each`] tells its caller as the run goes.
#[derive(Clone, Copy, Debug)]
pub enum PingEvent {
    /// The socket is open and set up: the first request goes next (ping prints its
    /// header now, so a refused socket prints nothing but the reason).
    Ready,
    /// A request is about to go out; `unanswered` is the previous request's icmp_seq
    /// when no reply to it is in yet (ping's -O prints "no answer yet").
    Sending {
        /// The request's ICMP sequence number.
        icmp_seq: u16,
        /// The request before it, if it is still unanswered.
        unanswered: Option<u16>,
    },
    /// A reply within the timeout.
    Reply(ReplyEvent),
    /// An ICMP error a request drew (raw sockets), as iputils words it.
    Error {
        /// The router or host that sent it.
        from: IpAddr,
        /// The request it is about.
        icmp_seq: u16,
        /// iputils' text: "Destination Host Unreachable", "Time to live exceeded", ….
        what: &'static str,
    },
}

/// Path MTU discovery for the requests, as ping's `-M`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pmtu {
    /// Set DF, never fragment (`IP_PMTUDISC_DO`).
    Do,
    /// Fragment locally, no DF (`IP_PMTUDISC_DONT`).
    Dont,
    /// DF unless the path MTU is known smaller (`IP_PMTUDISC_WANT`).
    Want,
}

/// One reply as ping prints it.
#[derive(Clone, Copy, Debug)]
pub struct ReplyEvent {
    /// ICMP bytes (header and payload: 64 for the default 56).
    pub bytes: usize,
    /// The reply's source address (the target when the kernel gave none).
    pub from: IpAddr,
    /// Its ICMP sequence number: requests count from 1, as iputils' ping's do, and wrap
    /// after 65535.
    pub icmp_seq: u16,
    /// TTL or hop limit of the reply, when the kernel gave it.
    pub ttl: Option<u8>,
    /// The round trip, ns: the kernel's receive stamp minus the send time read just
    /// before `sendto()`.
    pub rtt_ns: u64,
    /// When it arrived (CLOCK_REALTIME ns), for ping's -D.
    pub received_ns: u64,
    /// The echo identifier it carries (ping -v prints it).
    pub ident: u16,
    /// A second reply to a request already answered (iputils' `(DUP!)`), its time
    /// from the request's send; not in the statistics.
    pub duplicate: bool,
    /// The reply's IPv4 options (raw sockets, when the request carried -R or -T).
    pub options: Option<ReplyOptions>,
}

impl PingSettings {
    /// ping's defaults: 1 s interval, 56 bytes, 5 requests.
    pub fn new(target: IpAddr) -> Self {
        Self {
            target,
            count: Some(5),
            duration: None,
            interval: Duration::from_secs(1),
            pace: PaceMode::Sleep,
            size: 56,
            timeout: Duration::from_secs(2),
            socket: SocketKind::Auto,
            percentiles: crate::stats::DEFAULT_PERCENTILES.to_vec(),
            hdr_log: None,
            keep_series: false,
            one_in_flight: false,
            ttl: None,
            tos: None,
            device: None,
            source: None,
            mark: None,
            pmtu: None,
            deadline: None,
            preload: 0,
            pad: Vec::new(),
            sndbuf: None,
            dont_route: false,
            no_multicast_loop: false,
            ident: None,
            user_latency: false,
            short_wait: false,
            pin_source: false,
            ip_option: None,
        }
    }
}

/// Errors before any echo was sent.
#[derive(Debug, thiserror::Error)]
pub enum PingError {
    /// No ICMP socket could be opened.
    #[error(
        "cannot open an ICMP socket: {}",
        crate::kernel::privilege::icmp_socket_fix()
    )]
    Socket(#[source] io::Error),
    /// The socket option for kernel timestamps was refused.
    #[error("cannot enable kernel receive timestamps")]
    Timestamps(#[source] io::Error),
    /// Payload too large for one packet.
    #[error("payload of {0} bytes is too large (at most 65000)")]
    Size(usize),
    /// The HdrHistogram log could not be created.
    #[error("--hdr-log")]
    HdrLog(#[source] io::Error),
    /// A socket option the settings ask for was refused.
    #[error("{what}")]
    Option {
        /// The flag and the socket option, as the message shows it ("-t (IP_TTL)").
        what: String,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
}

/// Settings as the result reports them.
#[derive(Clone, Debug, Serialize)]
pub struct PingReportSettings {
    /// The host pinged.
    pub target: IpAddr,
    /// Time between requests (`-i`), µs.
    pub interval_us: f64,
    /// How the run waited: `sleep`, `spin` or `hybrid`.
    pub pacing: &'static str,
    /// ICMP payload bytes (`-s`).
    pub size: usize,
    /// Requests asked for (`-c`); `None`: no count limit.
    pub count_limit: Option<u64>,
    /// Sending time asked for (`--duration`), s; `None`: no time limit.
    pub duration_limit_s: Option<f64>,
    /// ping -w's deadline, s: the run ended then whatever was outstanding; `None`: none.
    pub deadline_s: Option<f64>,
    /// Requests sent back to back at the start (`-l`).
    pub preload: u64,
    /// How long a request waited for its reply before it counted as lost (`-W`), ms.
    pub timeout_ms: f64,
    /// Whether each request waited for the last one's reply (`--one-in-flight`).
    pub one_in_flight: bool,
    /// The socket that was used: `dgram` or `raw`, never `auto`.
    pub socket: SocketKind,
    /// How the round trips were timed: the kernel's receive stamp, a user-space send time.
    pub timestamps: &'static str,
    /// TTL / hop limit of the requests (`-t`); `None`: the system's default.
    pub ttl: Option<u8>,
    /// TOS byte / traffic class of the requests (`-Q`, `--dscp`); `None`: not set.
    pub tos: Option<u8>,
    /// The interface the socket was bound to (`-I IFACE`); `None`: not bound to one.
    pub device: Option<String>,
    /// The address the socket was bound to (`-I ADDR`, `--bind`); `None`: the kernel's
    /// choice.
    pub source: Option<IpAddr>,
    /// Firewall mark of the requests (`-m`); left out of the JSON when not set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mark: Option<u32>,
    /// Path MTU discovery (`-M`); `None`: the system's default.
    pub pmtu: Option<Pmtu>,
}

/// What a ping run measured.
#[derive(Clone, Debug, Serialize)]
pub struct PingResult {
    /// The settings the run used.
    pub settings: PingReportSettings,
    /// The machine that sent the requests.
    pub local_host: HostFacts,
    /// Run length, s: from the first request until the last reply or timeout.
    pub elapsed_s: f64,
    /// Echo requests sent.
    pub sent: u64,
    /// Requests answered within the timeout (duplicates and late replies not counted).
    pub received: u64,
    /// `sent - received`: requests without a reply within the timeout.
    pub lost: u64,
    /// Replies to a request that had been answered already.
    pub duplicates: u64,
    /// Replies that arrived after the reply to a later request.
    pub reordered: u64,
    /// Replies whose payload did not match what was sent.
    pub corrupted: u64,
    /// ICMP errors our requests drew (destination unreachable, TTL exceeded, …),
    /// heard on a raw socket; iputils' `+N errors`.
    pub errors: u64,
    /// Round trips of the replies within the timeout, µs.
    pub rtt: Summary,
    /// The same round trips as a histogram, ns (not in the JSON).
    #[serde(skip)]
    pub histogram: LatencyHistogram,
    /// Every reply as (seconds since the start, RTT ns), with `keep_series`.
    #[serde(skip)]
    pub series: Vec<(f64, u64)>,
    /// The start, CLOCK_REALTIME ns: where the series sits among other clocks' samples.
    #[serde(skip)]
    pub started_unix_ns: u64,
    /// The most requests in flight when a reply came, counting its own (iputils'
    /// `pipe`, ping_common.c's `acknowledge`).
    #[serde(skip)]
    pub pipe: u64,
    /// iputils' smoothed round trip, µs × 8: the first reply's, then each reply moves
    /// it an eighth of the way (`rtt += triptime - rtt / 8`), printed as `ewma`.
    #[serde(skip)]
    pub ewma_us8: u64,
    /// Datagrams the socket received that were not about this run's requests, by
    /// [`Ignored::ALL`]'s order (a raw socket hears every ICMP message the host gets).
    #[serde(skip)]
    pub ignored: [u64; Ignored::ALL.len()],
    /// What ended the run early (sending or receiving failed), or why the HdrHistogram
    /// log could not be written; `None` when neither happened.
    pub error: Option<String>,
}

/// Shared with a watcher (progress, Ctrl-C).
#[derive(Debug, Default)]
pub struct PingControl {
    /// Set to end the run (Ctrl-C): no more requests, and no wait for outstanding replies.
    pub stop: AtomicBool,
    /// Replies received within the timeout so far, for a progress line.
    pub received: AtomicU64,
}

/// Run ping.
///
/// # Errors
/// No socket could be opened; failures after the first send are in
/// [`PingResult::error`].
pub fn run(settings: &PingSettings, ctl: &PingControl) -> Result<PingResult, PingError> {
    run_each(settings, ctl, &mut |_| {})
}

/// [`run`], telling `on_event` of every request as it goes and every reply as it comes
/// (ping's per-reply lines, -O's and -f's marks).
///
/// # Errors
/// As [`run`].
pub fn run_each(
    settings: &PingSettings,
    ctl: &PingControl,
    on_event: &mut dyn FnMut(&PingEvent),
) -> Result<PingResult, PingError> {
    if settings.size > 65_000 {
        return Err(PingError::Size(settings.size));
    }
    let (sock, kind) = open(settings.target, settings.socket)?;
    enable_timestamps(&sock)?;
    socket::configure(&sock, kind, settings)?;
    // The log is created once the socket is set up: a refused run leaves no file.
    let mut hdr = settings
        .hdr_log
        .as_deref()
        .map(|p| hdr_log(p, settings))
        .transpose()?;
    let mut recorder = hdr.as_mut().map(HdrLogWriter::recorder);
    on_event(&PingEvent::Ready);
    let fd = sock.as_raw_fd();
    let ident = settings
        .ident
        .unwrap_or((std::process::id() as u16) ^ 0x5254);
    if kind == SocketKind::Raw {
        socket::hear_only_our_replies(&sock, settings.target.is_ipv6(), ident)?;
    }
    let dest = SockAddr::from(SocketAddr::new(settings.target, 0));
    pacing::tighten_timer_slack();
    let spin = settings.pace != PaceMode::Sleep;
    let mut rbuf = vec![0u8; 65_536 + 60];
    let mut error = None;
    let start = Instant::now();
    let started_unix_ns = crate::kernel::realtime_ns();
    let mut pinger = Pinger::new(settings, kind == SocketKind::Raw, ident, start);
    // Right after a send the reply may be in already (loopback answers within
    // `sendto`'s own softirq): read before waiting, one system call instead of two.
    let mut sent_since_read = false;
    loop {
        if ctl.stop.load(Ordering::Relaxed) {
            pinger.stop();
        }
        if let Some(request) = pinger.poll_transmit(Instant::now()) {
            on_event(&PingEvent::Sending {
                icmp_seq: request.icmp_seq,
                unanswered: request.unanswered,
            });
            let sent_ns = crate::kernel::realtime_ns();
            if let Err(e) = sock.send_to(pinger.packet(), &dest) {
                error = Some(format!(
                    "sending echo request icmp_seq={}: {}",
                    request.icmp_seq,
                    crate::error_chain(&e)
                ));
                break;
            }
            pinger.on_sent(sent_ns, Instant::now());
            sent_since_read = true;
            if pinger.preloading() {
                continue;
            }
        }
        let Some(wait_until) = pinger.poll_timeout(Instant::now()) else {
            break;
        };
        // SAFETY: plain data, zero is a valid value.
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let read_first = std::mem::take(&mut sent_since_read);
        if !spin && !read_first && !readable(fd, wait_until) {
            continue;
        }
        let got = match recv_with_ts(fd, &mut rbuf, true, Some(&mut from)) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                if spin {
                    std::hint::spin_loop();
                } else if read_first {
                    readable(fd, wait_until);
                }
                continue;
            }
            Err(e) => {
                error = Some(format!("receiving: {}", crate::error_chain(&e)));
                break;
            }
        };
        // -U: the time user space has the reply, its wake-up included.
        let received_ns = match got.ts_ns {
            Some(ts) if !settings.user_latency => ts,
            _ => crate::kernel::realtime_ns(),
        };
        // SAFETY: the kernel filled `from` with a sockaddr of the socket's family.
        let source = unsafe { SockAddr::new(from, std::mem::size_of_val(&from) as u32) }
            .as_socket()
            .map_or(settings.target, |a| a.ip());
        let now = Instant::now();
        let Some(event) = pinger.on_datagram(now, &rbuf[..got.len], received_ns, source, got.ttl)
        else {
            continue;
        };
        on_event(&event);
        if let PingEvent::Reply(r) = &event {
            if !r.duplicate {
                if let Some(rec) = recorder.as_mut() {
                    rec.record(now, r.rtt_ns);
                }
                ctl.received.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    drop(recorder);
    if let Some(h) = hdr {
        if let Err(e) = h.finish() {
            error = error.or(Some(format!(
                "writing the HdrHistogram log: {}",
                crate::error_chain(&e)
            )));
        }
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    Ok(result(
        settings,
        kind,
        pinger.finish(),
        elapsed_s,
        started_unix_ns,
        error,
    ))
}

/// What the run measured, with the settings as the result reports them.
fn result(
    settings: &PingSettings,
    kind: SocketKind,
    t: Tally,
    elapsed_s: f64,
    started_unix_ns: u64,
    error: Option<String>,
) -> PingResult {
    PingResult {
        settings: PingReportSettings {
            target: settings.target,
            interval_us: settings.interval.as_secs_f64() * 1e6,
            pacing: settings.pace.name(),
            size: settings.size,
            count_limit: settings.count,
            duration_limit_s: settings.duration.map(|d| d.as_secs_f64()),
            timeout_ms: settings.timeout.as_secs_f64() * 1e3,
            one_in_flight: settings.one_in_flight,
            socket: kind,
            timestamps: if settings.user_latency {
                "user-space receive (-U), user-space send"
            } else {
                "kernel receive (SO_TIMESTAMPNS), user-space send"
            },
            deadline_s: settings.deadline.map(|d| d.as_secs_f64()),
            preload: settings.preload,
            ttl: settings.ttl,
            tos: settings.tos,
            device: settings.device.clone(),
            source: settings.source,
            mark: settings.mark,
            pmtu: settings.pmtu,
        },
        local_host: HostFacts::collect(),
        elapsed_s,
        sent: t.sent,
        received: t.answered,
        lost: t.sent.saturating_sub(t.answered),
        duplicates: t.duplicates,
        reordered: t.reordered,
        corrupted: t.corrupted,
        errors: t.errors,
        rtt: Summary::from_histogram(&t.histogram, &settings.percentiles),
        histogram: t.histogram,
        series: t.series,
        started_unix_ns,
        pipe: t.pipe,
        ewma_us8: t.ewma_us8,
        ignored: t.ignored,
        error,
    }
}

/// Wait until `fd` is readable or `until` (at most 100 ms, so Ctrl-C is noticed):
/// whether it is.
fn readable(fd: i32, until: Instant) -> bool {
    let ms = until
        .saturating_duration_since(Instant::now())
        .as_micros()
        .div_ceil(1000)
        .min(100) as i32;
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
}

/// `--hdr-log`'s writer, one interval a second.
fn hdr_log(path: &std::path::Path, settings: &PingSettings) -> Result<HdrLogWriter, PingError> {
    HdrLogWriter::start(
        crate::kernel::fs::create_replace(path)
            .map_err(|e| PingError::HdrLog(io::Error::other(e)))?,
        1,
        Duration::from_secs(1),
        &format!(
            "ICMP echo to {}, {} bytes, interval {:?}",
            settings.target, settings.size, settings.interval
        ),
    )
    .map_err(PingError::HdrLog)
}
