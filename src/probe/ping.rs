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

use super::pacing::{self, PaceMode};
use crate::kernel::host::HostFacts;
use crate::stats::{HdrLogWriter, LatencyHistogram, Percentile, Summary};
use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Sequence numbers remembered for duplicate detection and send times (one u16 cycle).
const SEQ_SPACE: usize = 1 << 16;

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

/// An ICMP error about one of our echo requests.
#[derive(Debug, PartialEq, Eq)]
pub struct IcmpError {
    /// The request's sequence number, from the copy of it the error quotes.
    pub icmp_seq: u16,
    /// iputils' words for the error's type and code.
    pub what: &'static str,
}

/// An ICMP (v6: ICMPv6) error quoting an echo request of ours with `ident`, from a
/// raw socket (IPv4 with its IP header, IPv6 without). Words from iputils' `pr_icmph`.
pub fn parse_error(buf: &[u8], v6: bool, ident: u16) -> Option<IcmpError> {
    let icmp = if v6 {
        buf
    } else {
        let ihl = usize::from(buf.first()? & 0x0f) * 4;
        buf.get(ihl..)?
    };
    let (ty, code) = (*icmp.first()?, *icmp.get(1)?);
    // The quoted packet starts 8 bytes in: its IP header, then our echo's header.
    let quoted = icmp.get(8..)?;
    let echo = if v6 {
        // A fixed IPv6 header; extension headers are not followed.
        (*quoted.get(6)? == 58).then(|| quoted.get(40..))??
    } else {
        let ihl = usize::from(quoted.first()? & 0x0f) * 4;
        (*quoted.get(9)? == 1).then(|| quoted.get(ihl..))??
    };
    let request = if v6 { 128 } else { 8 };
    if echo.len() < 8 || echo[0] != request || u16::from_be_bytes([echo[4], echo[5]]) != ident {
        return None;
    }
    let what = if v6 {
        match (ty, code) {
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
        match (ty, code) {
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
    };
    Some(IcmpError {
        icmp_seq: u16::from_be_bytes([echo[6], echo[7]]),
        what,
    })
}

/// ping -f's most time between requests: "as fast as they come back or one hundred
/// times per second, whichever is more" (ping(8)).
const FLOOD_WAIT: Duration = Duration::from_millis(10);

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

/// An ICMP socket for `target`'s family: datagram, raw, or the first that opens.
pub(super) fn open(target: IpAddr, kind: SocketKind) -> Result<(Socket, SocketKind), PingError> {
    let (domain, proto) = match target {
        IpAddr::V4(_) => (Domain::IPV4, Protocol::ICMPV4),
        IpAddr::V6(_) => (Domain::IPV6, Protocol::ICMPV6),
    };
    let try_kind = |kind: SocketKind| {
        let ty = if kind == SocketKind::Dgram {
            Type::DGRAM
        } else {
            Type::RAW
        };
        Socket::new(domain, ty, Some(proto)).map(|s| (s, kind))
    };
    let r = match kind {
        SocketKind::Auto => try_kind(SocketKind::Dgram).or_else(|_| try_kind(SocketKind::Raw)),
        k => try_kind(k),
    };
    r.map_err(PingError::Socket)
}

/// Have the kernel stamp every received datagram (`SO_TIMESTAMPNS`, CLOCK_REALTIME).
pub(super) fn enable_timestamps(sock: &impl AsRawFd) -> Result<(), PingError> {
    let one: libc::c_int = 1;
    // SAFETY: passing a pointer to a live c_int.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&one as *const libc::c_int).cast(),
            4,
        )
    };
    if rc != 0 {
        return Err(PingError::Timestamps(io::Error::last_os_error()));
    }
    Ok(())
}

pub(super) fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Payload byte `i` of request `seq`: a pattern the reply must carry back intact.
pub(super) fn pattern(seq: u16, i: usize) -> u8 {
    (i as u8).wrapping_add(seq as u8)
}

/// Payload byte `i` of request `seq`: ping -p's `pad` repeated, or [`pattern`].
fn payload_byte(pad: &[u8], seq: u16, i: usize) -> u8 {
    if pad.is_empty() {
        pattern(seq, i)
    } else {
        pad[i % pad.len()]
    }
}

/// A received datagram.
pub(crate) struct Received {
    pub len: usize,
    /// The kernel's receive time (`SO_TIMESTAMPNS`).
    pub ts_ns: Option<u64>,
    /// TTL / hop limit, with `IP_RECVTTL` / `IPV6_RECVHOPLIMIT` on.
    pub ttl: Option<u8>,
}

/// One received datagram; its sender in `from` when given.
pub(crate) fn recv_with_ts(
    fd: i32,
    buf: &mut [u8],
    nonblocking: bool,
    from: Option<&mut libc::sockaddr_storage>,
) -> io::Result<Received> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 16];
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    if let Some(f) = from {
        msg.msg_name = (f as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
    }
    let flags = if nonblocking { libc::MSG_DONTWAIT } else { 0 };
    // SAFETY: msg is fully initialised and its buffers are valid.
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut ts = None;
    let mut ttl = None;
    // SAFETY: walking the control buffer the kernel filled, with the libc macros.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_SOCKET, libc::SO_TIMESTAMPNS) => {
                    let t: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    ts = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
                }
                (libc::IPPROTO_IP, libc::IP_TTL) | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                    let v: libc::c_int = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    ttl = u8::try_from(v).ok();
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Received {
        len: n as usize,
        ts_ns: ts,
        ttl,
    })
}

/// Apply the settings' TTL, TOS, PMTU, interface and source address to `sock`, and
/// ask for each reply's TTL.
fn configure(sock: &Socket, kind: SocketKind, s: &PingSettings) -> Result<(), PingError> {
    let fd = sock.as_raw_fd();
    let opt = |what: &str| {
        let what = what.to_string();
        move |e: crate::kernel::SyscallError| PingError::Option {
            what,
            source: e.source,
        }
    };
    let set = |level, name, v: libc::c_int, what: &str| {
        crate::kernel::sockopt::set(fd, level, name, &v, "setsockopt").map_err(opt(what))
    };
    let v6 = s.target.is_ipv6();
    if v6 {
        set(
            libc::IPPROTO_IPV6,
            libc::IPV6_RECVHOPLIMIT,
            1,
            "IPV6_RECVHOPLIMIT",
        )?;
    } else {
        set(libc::IPPROTO_IP, libc::IP_RECVTTL, 1, "IP_RECVTTL")?;
    }
    if let Some(t) = s.ttl {
        let t = libc::c_int::from(t);
        if v6 {
            set(
                libc::IPPROTO_IPV6,
                libc::IPV6_UNICAST_HOPS,
                t,
                "-t (IPV6_UNICAST_HOPS)",
            )?;
        } else {
            set(libc::IPPROTO_IP, libc::IP_TTL, t, "-t (IP_TTL)")?;
        }
    }
    if let Some(q) = s.tos {
        let q = libc::c_int::from(q);
        if v6 {
            set(libc::IPPROTO_IPV6, libc::IPV6_TCLASS, q, "-Q (IPV6_TCLASS)")?;
        } else {
            set(libc::IPPROTO_IP, libc::IP_TOS, q, "-Q (IP_TOS)")?;
        }
    }
    if let Some(m) = s.pmtu {
        let v = match m {
            Pmtu::Do => libc::IP_PMTUDISC_DO,
            Pmtu::Dont => libc::IP_PMTUDISC_DONT,
            Pmtu::Want => libc::IP_PMTUDISC_WANT,
        };
        if v6 {
            set(
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                v,
                "-M (IPV6_MTU_DISCOVER)",
            )?;
        } else {
            set(
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                v,
                "-M (IP_MTU_DISCOVER)",
            )?;
        }
    }
    if let Some(d) = &s.device {
        sock.bind_device(Some(d.as_bytes()))
            .map_err(|source| PingError::Option {
                what: format!("-I {d}: binding to the interface (SO_BINDTODEVICE)"),
                source,
            })?;
    }
    if let Some(m) = s.mark {
        sock.set_mark(m).map_err(|source| PingError::Option {
            what: format!(
                "-m {m}: marking the requests (SO_MARK needs CAP_NET_ADMIN: run as root or `{}`)",
                crate::kernel::privilege::Capability::NetAdmin.setcap()
            ),
            source,
        })?;
    }
    if let Some(b) = s.sndbuf {
        sock.set_send_buffer_size(b)
            .map_err(|source| PingError::Option {
                what: format!("-S {b} (SO_SNDBUF)"),
                source,
            })?;
    }
    if s.dont_route {
        set(libc::SOL_SOCKET, libc::SO_DONTROUTE, 1, "-r (SO_DONTROUTE)")?;
    }
    if let Some(o) = s.ip_option {
        if v6 {
            return Err(PingError::Option {
                what: "-R/-T: IPv4 options; IPv6 has none of these".into(),
                source: io::Error::from(io::ErrorKind::Unsupported),
            });
        }
        let b = o.request_bytes();
        // SAFETY: a pointer to 40 live bytes and their length.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_OPTIONS,
                b.as_ptr().cast(),
                40,
            )
        };
        if rc != 0 {
            return Err(PingError::Option {
                what: "-R/-T (IP_OPTIONS)".into(),
                source: io::Error::last_os_error(),
            });
        }
    }
    if s.no_multicast_loop {
        if v6 {
            set(
                libc::IPPROTO_IPV6,
                libc::IPV6_MULTICAST_LOOP,
                0,
                "-L (IPV6_MULTICAST_LOOP)",
            )?;
        } else {
            set(
                libc::IPPROTO_IP,
                libc::IP_MULTICAST_LOOP,
                0,
                "-L (IP_MULTICAST_LOOP)",
            )?;
        }
    }
    // The address: -I ADDR, or with -B the one the kernel would pick now. A datagram
    // socket's echo identifier is its port (ping_bind in net/ipv4/ping.c): -e binds it.
    let source = match s.source {
        Some(a) => Some(a),
        None if s.pin_source => Some(source_towards(s.target, s.device.as_deref()).map_err(
            |source| PingError::Option {
                what: format!("-B: finding the source address towards {}", s.target),
                source,
            },
        )?),
        None => None,
    };
    let port = if kind == SocketKind::Dgram {
        s.ident.unwrap_or(0)
    } else {
        0
    };
    if source.is_some() || port != 0 {
        let a = source.unwrap_or(if v6 {
            IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED)
        });
        sock.bind(&SockAddr::from(SocketAddr::new(a, port)))
            .map_err(|source| PingError::Option {
                what: match (s.source, port) {
                    (Some(a), _) => format!("-I {a}: sending from this address"),
                    (None, 0) => format!("-B: binding to {a}"),
                    (None, p) => format!("-e {p}: the identifier (a datagram socket's port)"),
                },
                source,
            })?;
    }
    Ok(())
}

/// The source address the kernel's routing picks towards `target` now, through
/// `device` if given: a connected UDP socket's own address (connecting sends nothing).
fn source_towards(target: IpAddr, device: Option<&str>) -> io::Result<IpAddr> {
    let domain = if target.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let u = Socket::new(domain, Type::DGRAM, None)?;
    if let Some(d) = device {
        u.bind_device(Some(d.as_bytes()))?;
    }
    u.connect(&SockAddr::from(SocketAddr::new(target, 9)))?;
    u.local_addr()?
        .as_socket()
        .map(|a| a.ip())
        .ok_or_else(|| io::Error::other("no address"))
}

/// The address the requests leave from when the settings choose one (-I ADDR, or -I
/// IFACE and -B, where the kernel's pick at the start is it), as iputils' header names
/// it; `None` when the kernel picks per request.
pub fn chosen_source(s: &PingSettings) -> Option<IpAddr> {
    s.source.or_else(|| {
        (s.pin_source || s.device.is_some())
            .then(|| source_towards(s.target, s.device.as_deref()).ok())
            .flatten()
    })
}

/// An echo reply found in a received datagram.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    /// Its sequence number.
    pub seq: u16,
    /// Its identifier (a datagram socket's: the kernel's, its bound port).
    pub ident: u16,
    /// The payload is the one that was sent (right length, right pattern).
    pub intact: bool,
}

/// Find an echo reply to us in a received datagram: `raw` IPv4 sockets deliver the IP
/// header too; datagram sockets get replies already filtered by the kernel, raw ones
/// everything, so only raw replies are checked against `ident`. Anything else is `None`.
/// The payload must be `size` bytes of `pad` repeated (empty: [`pattern`]) to be intact.
pub fn parse_reply(
    buf: &[u8],
    v6: bool,
    raw: bool,
    ident: u16,
    size: usize,
    pad: &[u8],
) -> Option<Reply> {
    let icmp = if !v6 && raw {
        let ihl = usize::from(buf.first()? & 0x0f) * 4;
        buf.get(ihl..)?
    } else {
        buf
    };
    let (reply_type, _) = if v6 { (129u8, 0u8) } else { (0u8, 0u8) };
    if icmp.len() < 8 || icmp[0] != reply_type || icmp[1] != 0 {
        return None;
    }
    // Datagram sockets: the kernel owns the identifier and filters replies for us.
    if raw && u16::from_be_bytes([icmp[4], icmp[5]]) != ident {
        return None;
    }
    let seq = u16::from_be_bytes([icmp[6], icmp[7]]);
    let payload = &icmp[8..];
    let intact = payload.len() == size
        && payload
            .iter()
            .enumerate()
            .all(|(i, &b)| b == payload_byte(pad, seq, i));
    let ident = u16::from_be_bytes([icmp[4], icmp[5]]);
    Some(Reply { seq, ident, intact })
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
    configure(&sock, kind, settings)?;
    // The log is created once the socket is set up: a refused run leaves no file.
    let mut hdr = match &settings.hdr_log {
        Some(p) => Some(
            HdrLogWriter::start(
                crate::kernel::fs::create_replace(p)
                    .map_err(|e| PingError::HdrLog(io::Error::other(e)))?,
                1,
                Duration::from_secs(1),
                &format!(
                    "ICMP echo to {}, {} bytes, interval {:?}",
                    settings.target, settings.size, settings.interval
                ),
            )
            .map_err(PingError::HdrLog)?,
        ),
        None => None,
    };
    let mut recorder = hdr.as_mut().map(HdrLogWriter::recorder);
    on_event(&PingEvent::Ready);
    let fd = sock.as_raw_fd();
    let v6 = settings.target.is_ipv6();
    let raw = kind == SocketKind::Raw;
    let ident = settings
        .ident
        .unwrap_or((std::process::id() as u16) ^ 0x5254);
    let dest = SockAddr::from(SocketAddr::new(settings.target, 0));
    pacing::tighten_timer_slack();

    let mut pkt = vec![0u8; 8 + settings.size];
    pkt[0] = if v6 { 128 } else { 8 };
    pkt[4..6].copy_from_slice(&ident.to_be_bytes());
    let mut rbuf = vec![0u8; 65_536 + 60];
    let mut sent_at = vec![0u64; SEQ_SPACE];
    let mut answered = vec![false; SEQ_SPACE];
    let mut hist = LatencyHistogram::new();
    let mut series = Vec::new();
    let (mut sent, mut received, mut dups, mut reordered, mut corrupted) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut highest: Option<u64> = None;
    let (mut pipe, mut ewma_us8, mut max_rtt_ns, mut errors) = (0u64, 0u64, 0u64, 0u64);
    let mut error = None;
    let start = Instant::now();
    let started_unix_ns = crate::kernel::realtime_ns();
    let stop_sending_at = settings.duration.map(|d| start + d);
    let deadline = settings.deadline.map(|d| start + d);
    let count = settings.count.unwrap_or(u64::MAX);
    let spin = settings.pace != PaceMode::Sleep;
    let mut next_send = start;
    let mut last_send = start;
    // With -w, iputils goes on sending past -c until -c replies are in.
    let wants_more = |sent: u64, unique: u64, now: Instant| {
        let counted = if deadline.is_some() {
            unique < count
        } else {
            sent < count
        };
        counted
            && stop_sending_at.is_none_or(|d| now < d)
            && deadline.is_none_or(|d| now < d)
            && !ctl.stop.load(Ordering::Relaxed)
    };
    // The most a request waits for its reply before the next goes (zero interval).
    let reply_wait = if settings.short_wait {
        FLOOD_WAIT.min(settings.timeout)
    } else {
        settings.timeout
    };

    let waits_for_reply = settings.interval.is_zero() || settings.one_in_flight;
    let mut exit_wait_frozen: Option<Duration> = None;
    loop {
        let now = Instant::now();
        let unique = received - dups;
        // The request sent last (icmp_seq = sent) is answered: -A, -f and -i 0 wait for
        // that one only, so one lost request does not slow every later one.
        let last_answered = sent == 0 || answered[usize::from(sent as u16)];
        let preloading = sent < settings.preload;
        let can_send = wants_more(sent, unique, now)
            && (preloading
                || (now >= next_send
                    && (!waits_for_reply || last_answered || now - last_send >= reply_wait)));
        if can_send {
            // icmp_seq counts from 1, as iputils ping's.
            let seq = (sent + 1) as u16;
            let previous = seq.wrapping_sub(1);
            on_event(&PingEvent::Sending {
                icmp_seq: seq,
                unanswered: (sent > 0 && !answered[usize::from(previous)]).then_some(previous),
            });
            pkt[6..8].copy_from_slice(&seq.to_be_bytes());
            for (i, b) in pkt[8..].iter_mut().enumerate() {
                *b = payload_byte(&settings.pad, seq, i);
            }
            pkt[2] = 0;
            pkt[3] = 0;
            if !v6 {
                let c = checksum(&pkt);
                pkt[2..4].copy_from_slice(&c.to_be_bytes());
            }
            let slot = usize::from(seq);
            sent_at[slot] = crate::kernel::realtime_ns();
            answered[slot] = false;
            if let Err(e) = sock.send_to(&pkt, &dest) {
                error = Some(format!(
                    "sending echo request icmp_seq={seq}: {}",
                    crate::error_chain(&e)
                ));
                break;
            }
            last_send = Instant::now();
            sent += 1;
            next_send += settings.interval;
            if next_send < now || preloading {
                next_send = now + settings.interval;
            }
            // A preload goes out back to back, before any reply is read.
            if sent < settings.preload {
                continue;
            }
        }
        // Finished: nothing more to send and the last request has had its timeout, or
        // -w's deadline has come, or -w's count of replies is in.
        let now = Instant::now();
        let unique = received - dups;
        let outstanding = sent - (unique + errors).min(sent);
        let last_answered = sent == 0 || answered[usize::from(sent as u16)];
        if deadline.is_some_and(|d| now >= d || unique >= count) {
            break;
        }
        let sending = wants_more(sent, unique, now);
        // Once sending stops, how long the run waits after its last request, fixed then
        // as iputils' static `waittime` is.
        let linger = if sending {
            None
        } else {
            Some(*exit_wait_frozen.get_or_insert_with(|| {
                exit_wait(unique, max_rtt_ns, settings.interval, settings.timeout)
            }))
        };
        if linger.is_some_and(|l| {
            outstanding == 0 || now - last_send >= l || ctl.stop.load(Ordering::Relaxed)
        }) {
            break;
        }
        // Wait for a reply until the next send (or the timeout of the last one).
        let waiting = waits_for_reply && !last_answered;
        let wait_until = match linger {
            Some(l) => last_send + l,
            None if waiting => last_send + reply_wait,
            None => next_send,
        };
        let wait_until = deadline.map_or(wait_until, |d| wait_until.min(d));
        // SAFETY: plain data, zero is a valid value.
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let got = if spin {
            match recv_with_ts(fd, &mut rbuf, true, Some(&mut from)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= wait_until {
                        continue;
                    }
                    std::hint::spin_loop();
                    continue;
                }
                r => r,
            }
        } else {
            let ms = wait_until
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
            let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
            if ready <= 0 {
                continue;
            }
            recv_with_ts(fd, &mut rbuf, true, Some(&mut from))
        };
        let got = match got {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                error = Some(format!("receiving: {}", crate::error_chain(&e)));
                break;
            }
        };
        let n = got.len;
        let Some(reply) = parse_reply(&rbuf[..n], v6, raw, ident, settings.size, &settings.pad)
        else {
            // A raw socket also hears the ICMP errors our requests drew (iputils'
            // "From 10.0.0.1 icmp_seq=3 Destination Host Unreachable", `+N errors`).
            if let Some(e) = raw.then(|| parse_error(&rbuf[..n], v6, ident)).flatten() {
                let slot = usize::from(e.icmp_seq);
                if u64::from(e.icmp_seq) <= sent.min(0xffff) && !answered[slot] {
                    errors += 1;
                    // Settled: the end and -A's pacing stop waiting for it.
                    answered[slot] = true;
                    // SAFETY: the kernel filled `from` with a sockaddr of the socket's family.
                    let src = unsafe { SockAddr::new(from, std::mem::size_of_val(&from) as u32) }
                        .as_socket()
                        .map_or(settings.target, |a| a.ip());
                    on_event(&PingEvent::Error {
                        from: src,
                        icmp_seq: e.icmp_seq,
                        what: e.what,
                    });
                }
            }
            continue;
        };
        // -U: the time user space has the reply, its wake-up included.
        let rx_ns = match got.ts_ns {
            Some(ts) if !settings.user_latency => ts,
            _ => crate::kernel::realtime_ns(),
        };
        // Reconstruct the full sequence number nearest below what was sent (the
        // request numbered k went out with icmp_seq k + 1).
        let mut full = (sent.saturating_sub(1) & !0xffff) | u64::from(reply.seq.wrapping_sub(1));
        if full >= sent {
            if full < 0x1_0000 {
                continue;
            }
            full -= 0x1_0000;
        }
        let slot = usize::from(reply.seq);
        received += 1;
        // A raw IPv4 socket hands over the IP header: its TTL, and bytes after it.
        let ihl = if raw && !v6 {
            usize::from(rbuf[0] & 0x0f) * 4
        } else {
            0
        };
        let event = |rtt_ns: u64, duplicate: bool| ReplyEvent {
            bytes: n.saturating_sub(ihl),
            // SAFETY: the kernel filled `from` with a sockaddr of the socket's family.
            from: unsafe { SockAddr::new(from, std::mem::size_of_val(&from) as u32) }
                .as_socket()
                .map_or(settings.target, |a| a.ip()),
            icmp_seq: reply.seq,
            ttl: if ihl > 0 { Some(rbuf[8]) } else { got.ttl },
            rtt_ns,
            received_ns: rx_ns,
            ident: reply.ident,
            duplicate,
            options: (ihl > 20).then(|| {
                let mut bytes = [0u8; 40];
                let o = &rbuf[20..ihl.min(60)];
                bytes[..o.len()].copy_from_slice(o);
                ReplyOptions {
                    len: o.len() as u8,
                    bytes,
                }
            }),
        };
        if answered[slot] {
            dups += 1;
            // iputils prints a duplicate's line too, marked (DUP!).
            on_event(&PingEvent::Reply(event(
                rx_ns.saturating_sub(sent_at[slot]),
                true,
            )));
            continue;
        }
        answered[slot] = true;
        if !reply.intact {
            corrupted += 1;
        }
        if highest.is_some_and(|h| full < h) {
            reordered += 1;
        }
        highest = Some(highest.map_or(full, |h| h.max(full)));
        let rtt = rx_ns.saturating_sub(sent_at[slot]);
        if rtt > settings.timeout.as_nanos() as u64 {
            // Arrived after its timeout: counted as lost, like ping -W.
            received -= 1;
            continue;
        }
        hist.record_ns(rtt);
        max_rtt_ns = max_rtt_ns.max(rtt);
        pipe = pipe.max(sent - full);
        let trip_us = rtt / 1000;
        ewma_us8 = if ewma_us8 == 0 {
            trip_us * 8
        } else {
            (ewma_us8 + trip_us).saturating_sub(ewma_us8 / 8)
        };
        on_event(&PingEvent::Reply(event(rtt, false)));
        if settings.keep_series {
            series.push((start.elapsed().as_secs_f64(), rtt));
        }
        if let Some(r) = recorder.as_mut() {
            r.record(Instant::now(), rtt);
        }
        ctl.received.fetch_add(1, Ordering::Relaxed);
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
    let unique = received - dups;
    Ok(PingResult {
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
        elapsed_s: start.elapsed().as_secs_f64(),
        sent,
        received: unique,
        lost: sent.saturating_sub(unique),
        duplicates: dups,
        reordered,
        corrupted,
        errors,
        rtt: Summary::from_histogram(&hist, &settings.percentiles),
        histogram: hist,
        series,
        started_unix_ns,
        pipe,
        ewma_us8,
        error,
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

    /// Witness: iputils' `schedule_exit` by hand. A 64 µs loopback RTT at -i 0.2 waits
    /// the 200 ms interval (the reply a loaded machine delays past 128 µs is still
    /// caught, as iputils catches it); a 300 ms RTT waits 600 ms; no reply: -W.
    #[test]
    fn the_wait_after_the_last_request_is_iputils_schedule_exit() {
        let ms = Duration::from_millis;
        assert_eq!(exit_wait(2, 64_000, ms(200), ms(2000)), ms(200));
        assert_eq!(exit_wait(2, 300_000_000, ms(200), ms(2000)), ms(600));
        assert_eq!(exit_wait(2, 300_000_000, ms(0), ms(2000)), ms(600));
        assert_eq!(exit_wait(2, 1_500_000_000, ms(200), ms(2000)), ms(2000));
        assert_eq!(exit_wait(0, 64_000, ms(200), ms(2000)), ms(2000));
    }

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 §3 example words 0001 f203 f4f5 f6f7 sum to ddf2, complement 220d.
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
    }

    /// Witness: RFC 792's layout, built by hand: an IP header, ICMP type 3 code 1, the
    /// quoted IP header and the first 8 bytes of our echo request.
    #[test]
    fn errors_quoting_our_requests_are_named_as_iputils_names_them() {
        let mut p = vec![0x45u8];
        p.extend_from_slice(&[0; 19]);
        p.extend_from_slice(&[3, 1, 0, 0, 0, 0, 0, 0]);
        let mut quoted = vec![0x45u8, 0, 0, 0, 0, 0, 0, 0, 64, 1];
        quoted.extend_from_slice(&[0; 10]);
        quoted.extend_from_slice(&[8, 0, 0, 0, 0x12, 0x34, 0, 9]);
        p.extend_from_slice(&quoted);
        assert_eq!(
            parse_error(&p, false, 0x1234),
            Some(IcmpError {
                icmp_seq: 9,
                what: "Destination Host Unreachable"
            })
        );
        assert_eq!(parse_error(&p, false, 0x9999), None, "another's request");
        p[20] = 0;
        assert_eq!(parse_error(&p, false, 0x1234), None, "an echo reply");
        assert_eq!(parse_error(&p[..30], false, 0x1234), None, "truncated");
        // ICMPv6 destination unreachable (1, 3) quoting a 40-byte IPv6 header.
        let mut q = vec![1u8, 3, 0, 0, 0, 0, 0, 0];
        let mut ip6 = vec![0x60u8, 0, 0, 0, 0, 8, 58, 64];
        ip6.extend_from_slice(&[0; 32]);
        q.extend_from_slice(&ip6);
        q.extend_from_slice(&[128, 0, 0, 0, 0x12, 0x34, 0, 2]);
        assert_eq!(
            parse_error(&q, true, 0x1234).map(|e| (e.icmp_seq, e.what)),
            Some((2, "Destination unreachable: Address unreachable"))
        );
    }

    #[test]
    fn parses_raw_ipv4_reply_and_rejects_others() {
        let mut p = vec![0x45u8];
        p.extend_from_slice(&[0; 19]);
        let mut icmp = vec![0u8, 0, 0, 0, 0x12, 0x34, 0, 7];
        icmp.extend((0..4).map(|i| pattern(7, i)));
        p.extend_from_slice(&icmp);
        let r = parse_reply(&p, false, true, 0x1234, 4, &[]).unwrap();
        assert_eq!((r.seq, r.intact), (7, true));
        assert!(
            parse_reply(&p, false, true, 0x9999, 4, &[]).is_none(),
            "other identifier"
        );
        p[20] = 8;
        assert!(
            parse_reply(&p, false, true, 0x1234, 4, &[]).is_none(),
            "our own request"
        );
        assert!(
            parse_reply(&p[..22], false, true, 0x1234, 4, &[]).is_none(),
            "truncated"
        );
        assert!(parse_reply(&[], false, true, 0x1234, 4, &[]).is_none());
        // ping -p: the reply carries the pattern repeated, whatever its sequence.
        let n = p.len();
        p[20] = 0;
        p[n - 4..].copy_from_slice(&[0xab, 0xcd, 0xab, 0xcd]);
        let r = parse_reply(&p, false, true, 0x1234, 4, &[0xab, 0xcd]).unwrap();
        assert_eq!((r.seq, r.ident, r.intact), (7, 0x1234, true));
        let r = parse_reply(&p, false, true, 0x1234, 4, &[]).unwrap();
        assert!(!r.intact, "the pattern is not rttlab's own");
    }
}
