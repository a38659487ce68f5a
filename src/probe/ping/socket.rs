//! ping's socket: datagram or raw ICMP, the kernel's receive stamps, and the options
//! ping's flags set (TTL, TOS, path MTU discovery, interface, mark, source address, IP
//! options). Shared with `echo` (many targets) and `rr` (the receive stamps).

use super::{PingError, PingSettings, Pmtu, SocketKind};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

/// An ICMP socket for `target`'s family: datagram, raw, or the first that opens.
pub(in crate::probe) fn open(
    target: IpAddr,
    kind: SocketKind,
) -> Result<(Socket, SocketKind), PingError> {
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
    let (sock, kind) = match kind {
        SocketKind::Auto => try_kind(SocketKind::Dgram).or_else(|_| try_kind(SocketKind::Raw)),
        k => try_kind(k),
    }
    .map_err(PingError::Socket)?;
    if kind == SocketKind::Raw {
        hear_only_replies_and_errors(&sock, target.is_ipv6())?;
    }
    Ok((sock, kind))
}

/// ICMP types a raw socket still hears: echo replies and the errors a request can draw
/// (destination unreachable, source quench, redirect, time exceeded, parameter
/// problem; IPv6's unreachable, packet too big, time exceeded, parameter problem).
const HEARD_V4: [u8; 6] = [0, 3, 4, 5, 11, 12];
const HEARD_V6: [u8; 5] = [129, 1, 2, 3, 4];

/// Have the kernel drop every other ICMP message before it reaches a raw socket, as
/// iputils' ping does (ping.c's `ICMP_FILTER`, ping6_common.c's `ICMP6_FILTER`): a raw
/// socket otherwise hears the host's own echo requests too, on loopback one per
/// request, and each costs a wake-up and a read (a flood's rate halves). A set bit
/// blocks its type (net/ipv4/raw.c `icmp_filter`, net/ipv6/raw.c `icmpv6_filter`);
/// the options' numbers are `ICMP_FILTER` of include/uapi/linux/icmp.h and
/// `ICMPV6_FILTER` of include/uapi/linux/icmpv6.h, at `SOL_RAW` and `SOL_ICMPV6`.
fn hear_only_replies_and_errors(sock: &Socket, v6: bool) -> Result<(), PingError> {
    const ICMP_FILTER: libc::c_int = 1;
    const ICMPV6_FILTER: libc::c_int = 1;
    let fd = sock.as_raw_fd();
    let failed = |source: crate::kernel::SyscallError| PingError::Option {
        what: "the raw socket's ICMP filter (ICMP_FILTER)".into(),
        source: source.source,
    };
    if v6 {
        let mut blocked = [u32::MAX; 8];
        for t in HEARD_V6 {
            blocked[usize::from(t >> 5)] &= !(1u32 << (t & 31));
        }
        crate::kernel::sockopt::set(
            fd,
            libc::IPPROTO_ICMPV6,
            ICMPV6_FILTER,
            &blocked,
            "setsockopt",
        )
        .map_err(failed)
    } else {
        let blocked = HEARD_V4.iter().fold(u32::MAX, |b, &t| b & !(1u32 << t));
        crate::kernel::sockopt::set(fd, libc::SOL_RAW, ICMP_FILTER, &blocked, "setsockopt")
            .map_err(failed)
    }
}

/// Have the kernel drop, before they are queued, echo replies carrying another
/// program's identifier, as iputils' ping does (ping4_install_filter and
/// ping6_install_filter in ping.c / ping6_common.c): a raw socket hears every reply on
/// the host, and beside another flood the other program's replies fill its receive
/// queue until the kernel drops some of its own. Errors pass whatever they quote (the
/// pinger matches them), as do all other types the ICMP filter lets through.
///
/// The datagrams queued between `socket()` and the attachment were not filtered: they
/// are read and dropped here, before the first request goes out, so none is ours (at
/// most a receive buffer's worth: a flood of errors cannot keep it reading).
///
/// # Errors
/// The kernel refused the program.
pub(super) fn hear_only_our_replies(sock: &Socket, v6: bool, ident: u16) -> Result<(), PingError> {
    use crate::kernel::packet::{attach_filter, SockFilter};
    let op = |code: u32, jt: u8, jf: u8, k: u32| SockFilter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let echo_reply = if v6 { 129 } else { 0 };
    let mut prog = Vec::with_capacity(8);
    // IPv4's raw socket gets the IP header first: X = its length (4 × IHL); IPv6's
    // starts at the ICMP header, X stays 0.
    if !v6 {
        prog.push(op(libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH, 0, 0, 0));
    }
    prog.extend([
        // The echo identifier (ICMP bytes 4–5, network order as loaded).
        op(libc::BPF_LD | libc::BPF_H | libc::BPF_IND, 0, 0, 4),
        op(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            0,
            1,
            u32::from(ident),
        ),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX),
        // Not ours: dropped only when it is an echo reply.
        op(libc::BPF_LD | libc::BPF_B | libc::BPF_IND, 0, 0, 0),
        op(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            1,
            0,
            echo_reply,
        ),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
    ]);
    attach_filter(sock.as_raw_fd(), &prog).map_err(|e| PingError::Option {
        what: "the raw socket's echo identifier filter (SO_ATTACH_FILTER)".into(),
        source: e.source,
    })?;
    let mut drop = [0u8; 1];
    for _ in 0..QUEUED_AT_MOST {
        // SAFETY: reading into a live one-byte buffer (a longer datagram is truncated
        // and dropped whole, which is the point).
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                drop.as_mut_ptr().cast(),
                drop.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            break;
        }
    }
    Ok(())
}

/// More datagrams than a raw socket's default receive buffer (`net.core.rmem_default`,
/// 208 KiB) can hold: each small one is charged about 1 KiB of it.
const QUEUED_AT_MOST: usize = 1024;

/// Have the kernel stamp every received datagram (`SO_TIMESTAMPNS`, CLOCK_REALTIME).
pub(in crate::probe) fn enable_timestamps(sock: &impl AsRawFd) -> Result<(), PingError> {
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
pub(super) fn configure(
    sock: &Socket,
    kind: SocketKind,
    s: &PingSettings,
) -> Result<(), PingError> {
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
