//! TCP sockets and their `tcp_info` from NETLINK_SOCK_DIAG (what `ss -ti` reads),
//! filtered in the kernel: states by the request's state mask, ports and address
//! prefixes by inet_diag bytecode (`inet_diag_bc_run` in net/ipv4/inet_diag.c), so a
//! host with 100 000 sockets sends back only the ones asked for.

use super::netlink::{ip_from, push_attr, Attrs, NetlinkSocket};
use super::netns::{self, NetnsError};
use super::tcp_info::TcpInfo;
use super::SyscallError;
use serde::Serialize;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const INET_DIAG_REQ_BYTECODE: u16 = 1;
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_CONG: u16 = 4;
const INET_DIAG_SKMEMINFO: u16 = 7;
const BC_S_GE: u8 = 2;
const BC_S_LE: u8 = 3;
const BC_D_GE: u8 = 4;
const BC_D_LE: u8 = 5;
const BC_S_COND: u8 = 7;
const BC_D_COND: u8 = 8;
const MSG_LEN: usize = 72;

/// TCP states, as numbered by the kernel (include/net/tcp_states.h).
pub const TCP_STATES: [&str; 12] = [
    "?",
    "ESTAB",
    "SYN-SENT",
    "SYN-RECV",
    "FIN-WAIT-1",
    "FIN-WAIT-2",
    "TIME-WAIT",
    "UNCONN",
    "CLOSE-WAIT",
    "LAST-ACK",
    "LISTEN",
    "CLOSING",
];

/// Every state but LISTEN and TIME-WAIT and CLOSE: the connections `ss -t` shows.
pub const CONNECTED: u32 = 0xfff & !(1 << 10) & !(1 << 6) & !(1 << 7);
/// All states.
pub const ALL_STATES: u32 = 0xfff;

/// Which sockets to dump.
#[derive(Clone, Debug)]
pub struct DiagFilter {
    /// Bit `1 << state` for each state wanted.
    pub states: u32,
    /// Local port, exactly (`rttlab tcpinfo --sport`).
    pub sport: Option<u16>,
    /// Remote port, exactly (`rttlab tcpinfo --dport`).
    pub dport: Option<u16>,
    /// Local ports LOW..=HIGH.
    pub sports: Option<(u16, u16)>,
    /// Local address prefix.
    pub src: Option<(IpAddr, u8)>,
    /// Remote address prefix.
    pub dst: Option<(IpAddr, u8)>,
    /// Dump AF_INET sockets (`-6` turns it off).
    pub ipv4: bool,
    /// Dump AF_INET6 sockets, dual-stack ones included (`-4` turns it off).
    pub ipv6: bool,
}

impl Default for DiagFilter {
    fn default() -> Self {
        Self {
            states: CONNECTED,
            sport: None,
            dport: None,
            sports: None,
            src: None,
            dst: None,
            ipv4: true,
            ipv6: true,
        }
    }
}

/// Socket memory (`INET_DIAG_SKMEMINFO`, as `ss -m` shows it).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct SkMem {
    /// `SK_MEMINFO_RMEM_ALLOC` (`r`): memory held by received data not yet read, bytes.
    pub rmem_alloc: u32,
    /// `SK_MEMINFO_RCVBUF` (`rb`): the receive buffer limit (`SO_RCVBUF`), bytes.
    pub rcvbuf: u32,
    /// `SK_MEMINFO_WMEM_ALLOC` (`t`): memory of sent packets still below TCP (qdisc,
    /// driver), bytes.
    pub wmem_alloc: u32,
    /// `SK_MEMINFO_SNDBUF` (`tb`): the send buffer limit (`SO_SNDBUF`), bytes.
    pub sndbuf: u32,
    /// `SK_MEMINFO_FWD_ALLOC` (`f`): memory reserved for the socket and not yet used, bytes.
    pub fwd_alloc: u32,
    /// `SK_MEMINFO_WMEM_QUEUED` (`w`): memory of the write queue (unsent and unacked
    /// data), bytes.
    pub wmem_queued: u32,
    /// `SK_MEMINFO_OPTMEM` (`o`): memory for socket options and ancillary data, bytes.
    pub optmem: u32,
    /// `SK_MEMINFO_BACKLOG` (`bl`): memory of packets queued while the socket was
    /// locked by its user, bytes.
    pub backlog: u32,
    /// `SK_MEMINFO_DROPS` (`d`): packets dropped before reaching the socket, a count.
    pub drops: u32,
}

/// One socket of a dump.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SockEntry {
    /// TCP state as `ss` names it ([`TCP_STATES`], e.g. "ESTAB"); "?" for an unknown number.
    pub state: &'static str,
    /// Local address and port; an IPv4-mapped IPv6 address is shown as IPv4.
    pub local: SocketAddr,
    /// Remote address and port, mapped the same way.
    pub remote: SocketAddr,
    /// `idiag_inode`: the socket's inode (`socket:[N]` in /proc/PID/fd); 0 for TIME-WAIT.
    pub inode: u32,
    /// `idiag_uid`: the owning user id.
    pub uid: u32,
    /// `idiag_rqueue` (`ss` Recv-Q): bytes received and not yet read by the application;
    /// for LISTEN, connections waiting to be accepted.
    pub recv_q: u32,
    /// `idiag_wqueue` (`ss` Send-Q): bytes sent and not yet acknowledged; for LISTEN,
    /// the accept backlog limit.
    pub send_q: u32,
    /// `INET_DIAG_CONG`: the congestion control algorithm, e.g. "cubic"; `None` if not sent.
    pub congestion: Option<String>,
    /// `INET_DIAG_INFO` decoded; `None` if not sent or not decodable.
    pub tcp_info: Option<TcpInfo>,
    /// `INET_DIAG_SKMEMINFO`; `None` if not sent or shorter than nine values.
    pub skmem: Option<SkMem>,
}

/// Errors of a dump.
#[derive(Debug, thiserror::Error)]
pub enum DiagError {
    /// The named network namespace does not exist or could not be entered.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// The netlink socket could not be opened or used, or the kernel refused the dump.
    #[error("sock_diag (is the inet_diag/tcp_diag module available?)")]
    Syscall(#[from] SyscallError),
    /// A filter the kernel's bytecode cannot express.
    #[error("prefix /{prefix} is longer than the address ({bits} bits)")]
    Prefix {
        /// The prefix length asked for.
        prefix: u8,
        /// The address's length.
        bits: u8,
    },
}

/// A sock_diag socket, possibly inside another network namespace.
pub struct SockDiag {
    sock: NetlinkSocket,
}

fn addr_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// The bytecode of `f`: an AND of conditions. Each op jumps to the next when true and
/// past the end (rejecting the socket) when false.
///
/// # Errors
/// A prefix longer than its address.
pub fn bytecode(f: &DiagFilter) -> Result<Vec<u8>, DiagError> {
    // (code, operand bytes)
    let mut ops: Vec<(u8, Vec<u8>)> = Vec::new();
    let port_ops = |ops: &mut Vec<(u8, Vec<u8>)>, ge: u8, le: u8, (lo, hi): (u16, u16)| {
        // Comparison ops carry the port in the `no` field of a second op.
        let operand = |p: u16| [0u8, 0, p.to_ne_bytes()[0], p.to_ne_bytes()[1]].to_vec();
        ops.push((ge, operand(lo)));
        ops.push((le, operand(hi)));
    };
    if let Some(p) = f.sport {
        port_ops(&mut ops, BC_S_GE, BC_S_LE, (p, p));
    }
    if let Some(r) = f.sports {
        port_ops(&mut ops, BC_S_GE, BC_S_LE, r);
    }
    if let Some(p) = f.dport {
        port_ops(&mut ops, BC_D_GE, BC_D_LE, (p, p));
    }
    for (code, cond) in [(BC_S_COND, f.src), (BC_D_COND, f.dst)] {
        if let Some((ip, prefix)) = cond {
            let (family, bits) = if ip.is_ipv4() {
                (libc::AF_INET as u8, 32)
            } else {
                (libc::AF_INET6 as u8, 128)
            };
            if prefix > bits {
                return Err(DiagError::Prefix { prefix, bits });
            }
            // struct inet_diag_hostcond { u8 family; u8 prefix_len; int port; __be32 addr[]; }
            let mut h = vec![family, prefix, 0, 0];
            h.extend_from_slice(&(-1i32).to_ne_bytes());
            h.extend_from_slice(&addr_bytes(ip));
            ops.push((code, h));
        }
    }
    let total: usize = ops.iter().map(|(_, d)| 4 + d.len()).sum();
    let mut out = Vec::with_capacity(total);
    let mut remaining = total;
    for (code, data) in ops {
        let len = 4 + data.len();
        // struct inet_diag_bc_op { u8 code; u8 yes; u16 no; }
        out.push(code);
        out.push(len as u8);
        out.extend_from_slice(&((remaining + 4) as u16).to_ne_bytes());
        out.extend_from_slice(&data);
        remaining -= len;
    }
    Ok(out)
}

fn sockaddr(family: u8, port: &[u8], addr: &[u8]) -> SocketAddr {
    let port = u16::from_be_bytes([port[0], port[1]]);
    // A dual-stack socket's IPv4 peer shows as ::ffff:a.b.c.d; report it as IPv4.
    let ip = match ip_from(family, addr) {
        Some(IpAddr::V6(v6)) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        Some(v4) => v4,
        None => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, port)
}

/// Decode one `inet_diag_msg` and its attributes.
pub fn parse_entry(p: &[u8]) -> Option<SockEntry> {
    if p.len() < MSG_LEN {
        return None;
    }
    let u32at = |o: usize| u32::from_ne_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]]);
    let family = p[0];
    let mut e = SockEntry {
        state: TCP_STATES.get(usize::from(p[1])).copied().unwrap_or("?"),
        local: sockaddr(family, &p[4..6], &p[8..24]),
        remote: sockaddr(family, &p[6..8], &p[24..40]),
        inode: u32at(68),
        uid: u32at(64),
        recv_q: u32at(56),
        send_q: u32at(60),
        congestion: None,
        tcp_info: None,
        skmem: None,
    };
    for (ty, data) in Attrs(&p[MSG_LEN..]) {
        match ty {
            INET_DIAG_INFO => e.tcp_info = TcpInfo::decode(data).ok(),
            INET_DIAG_CONG => {
                let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                e.congestion = Some(String::from_utf8_lossy(&data[..end]).into_owned());
            }
            INET_DIAG_SKMEMINFO if data.len() >= 36 => {
                let v = |i: usize| {
                    u32::from_ne_bytes([
                        data[4 * i],
                        data[4 * i + 1],
                        data[4 * i + 2],
                        data[4 * i + 3],
                    ])
                };
                e.skmem = Some(SkMem {
                    rmem_alloc: v(0),
                    rcvbuf: v(1),
                    wmem_alloc: v(2),
                    sndbuf: v(3),
                    fwd_alloc: v(4),
                    wmem_queued: v(5),
                    optmem: v(6),
                    backlog: v(7),
                    drops: v(8),
                });
            }
            _ => {}
        }
    }
    Some(e)
}

impl SockDiag {
    /// Open a sock_diag socket in namespace `netns` (`None`: this one).
    ///
    /// # Errors
    /// The namespace does not exist or the socket cannot be opened.
    pub fn open(netns: Option<&str>) -> Result<Self, DiagError> {
        let sock = netns::run_in(netns, || NetlinkSocket::open(NETLINK_SOCK_DIAG))??;
        Ok(Self { sock })
    }

    /// Dump the TCP sockets matching `f`, calling `each` for every one.
    ///
    /// # Errors
    /// The kernel refused the request (bad filter, no inet_diag).
    pub fn dump_tcp(
        &mut self,
        f: &DiagFilter,
        mut each: impl FnMut(SockEntry),
    ) -> Result<(), DiagError> {
        let bc = bytecode(f)?;
        for (wanted, family) in [(f.ipv4, libc::AF_INET), (f.ipv6, libc::AF_INET6)] {
            if !wanted {
                continue;
            }
            // struct inet_diag_req_v2 + the bytecode attribute.
            let mut req = vec![0u8; 56];
            req[0] = family as u8;
            req[1] = libc::IPPROTO_TCP as u8;
            req[2] = (1 << (INET_DIAG_INFO - 1))
                | (1 << (INET_DIAG_CONG - 1))
                | (1 << (INET_DIAG_SKMEMINFO - 1));
            req[4..8].copy_from_slice(&f.states.to_ne_bytes());
            // No cookie: INET_DIAG_NOCOOKIE.
            req[48..56].copy_from_slice(&[0xff; 8]);
            if !bc.is_empty() {
                push_attr(&mut req, INET_DIAG_REQ_BYTECODE, &bc);
            }
            let seq = self
                .sock
                .send(SOCK_DIAG_BY_FAMILY, libc::NLM_F_DUMP as u16, &req)?;
            self.sock.replies(seq, |ty, payload| {
                if ty == SOCK_DIAG_BY_FAMILY {
                    if let Some(e) = parse_entry(payload) {
                        each(e);
                    }
                }
            })?;
        }
        Ok(())
    }
}

/// Dump every `interval`, `count` times or until `until` passes or `stop` is set;
/// `each(t, entry)` gets the time since the first dump. Dumps are timed from a fixed
/// schedule (t₀ + k·interval), so a slow dump does not shift the ones after it.
///
/// # Errors
/// A dump failed.
pub fn sample_every(
    d: &mut SockDiag,
    f: &DiagFilter,
    interval: std::time::Duration,
    count: Option<u64>,
    until: Option<std::time::Duration>,
    stop: &std::sync::atomic::AtomicBool,
    mut each: impl FnMut(std::time::Duration, SockEntry),
) -> Result<u64, DiagError> {
    use std::sync::atomic::Ordering;
    use std::time::Instant;
    let t0 = Instant::now();
    let mut k = 0u64;
    while count.is_none_or(|c| k < c) && !stop.load(Ordering::Relaxed) {
        let due = t0 + interval.saturating_mul(u32::try_from(k).unwrap_or(u32::MAX));
        if until.is_some_and(|u| due.duration_since(t0) >= u) {
            break;
        }
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let t = t0.elapsed();
        d.dump_tcp(f, |e| each(t, e))?;
        k += 1;
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// Checked against getsockopt(TCP_INFO) on the same socket: sock_diag returns the
    /// same struct, for exactly the sockets the filter names.
    #[test]
    fn dump_finds_our_connection_and_only_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let cport = c.local_addr().unwrap().port();
        let mut d = SockDiag::open(None).unwrap();
        let f = DiagFilter {
            sport: Some(cport),
            src: Some(("127.0.0.0".parse().unwrap(), 8)),
            ..DiagFilter::default()
        };
        let mut found = Vec::new();
        d.dump_tcp(&f, |e| found.push(e)).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        let e = &found[0];
        assert_eq!(e.local, c.local_addr().unwrap());
        assert_eq!(e.remote, c.peer_addr().unwrap());
        assert_eq!(e.state, "ESTAB");
        let direct = super::super::sockopt::tcp_info(&c).unwrap();
        let diag = e.tcp_info.as_ref().unwrap();
        assert_eq!(
            (diag.rto_us, diag.snd_mss, diag.len),
            (direct.rto_us, direct.snd_mss, direct.len)
        );
        assert!(e.congestion.is_some() && e.skmem.is_some());
        // The server side by destination port; and a port nobody uses finds nothing.
        let mut n = 0;
        d.dump_tcp(
            &DiagFilter {
                dport: Some(cport),
                ..DiagFilter::default()
            },
            |_| n += 1,
        )
        .unwrap();
        assert_eq!(n, 1);
        let mut none = 0;
        d.dump_tcp(
            &DiagFilter {
                sport: Some(cport),
                dst: Some(("10.0.0.0".parse().unwrap(), 8)),
                ..DiagFilter::default()
            },
            |_| none += 1,
        )
        .unwrap();
        assert_eq!(none, 0);
        drop(s);
    }

    #[test]
    fn bytecode_rejects_bad_prefixes_and_never_panics_parsing() {
        assert!(bytecode(&DiagFilter {
            src: Some(("10.0.0.0".parse().unwrap(), 33)),
            ..DiagFilter::default()
        })
        .is_err());
        let junk = [0xa5u8; 200];
        for n in 0..junk.len() {
            let _ = parse_entry(&junk[..n]);
        }
    }
}
