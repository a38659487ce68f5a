//! Live capture from an interface through an AF_PACKET TPACKET_V3 ring: the kernel
//! fills blocks of frames with their arrival stamps, and a block is handed over when
//! it is full or its timer retires it, so a busy link costs one wake-up per block
//! rather than one system call per packet. Optionally inside a named network
//! namespace. Kernel drops (ring full) are read from PACKET_STATISTICS.

use super::expression::{Expression, ExpressionError};
use super::filter::{self, Selection};
use crate::kernel::packet::{
    attach_filter, bind, map_ring, packet_statistics, setopt, socket, SockFilter, ARPHRD_ETHER,
    ARPHRD_LOOPBACK, ETH_P_ALL, PACKET_OUTGOING, PACKET_RX_RING, PACKET_VERSION, TPACKET_V3,
    TP_STATUS_KERNEL, TP_STATUS_USER,
};
use crate::kernel::{netns, SyscallError};
use crate::wire::LinkType;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Ring geometry: 64 blocks of 256 KiB (16 MiB), a block retired after 10 ms so a
/// quiet link still shows its samples promptly.
const BLOCK_SIZE: u32 = 1 << 18;
const BLOCK_NR: u32 = 64;
const FRAME_SIZE: u32 = 2048;
const RETIRE_MS: u32 = 10;

/// Why a live capture could not start.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The interface does not exist (in the namespace, if one was given).
    #[error("no interface named {name:?}{place}; list them with `ip link`")]
    NoInterface {
        /// The interface name asked for.
        name: String,
        /// Empty, or " in network namespace NAME".
        place: String,
    },
    /// Opening the AF_PACKET socket failed with EPERM: no CAP_NET_RAW.
    #[error("capturing needs CAP_NET_RAW: run as root, or `{}`", crate::kernel::privilege::Capability::NetRaw.setcap())]
    NotPermitted,
    /// Entering the named network namespace failed.
    #[error(transparent)]
    Netns(#[from] netns::NetnsError),
    /// libpcap refused the filter expression for the interface's link type, or its
    /// program is too long for the kernel.
    #[error(transparent)]
    Expression(#[from] ExpressionError),
    /// A system call setting up the capture failed: the socket, the ring's socket
    /// options, the filter, the mmap or the bind.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
}

/// Kernel counters of the ring since the capture started.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct LiveStats {
    /// Frames the kernel passed to the socket (including dropped ones).
    pub packets: u64,
    /// Frames dropped because the ring was full.
    pub drops: u64,
}

/// A live capture on one interface.
pub struct LiveCapture {
    fd: OwnedFd,
    map: *mut u8,
    block: u32,
    link: LinkType,
    /// Skip the outgoing copy of loopback frames (each is seen leaving and arriving).
    loopback: bool,
    /// The interface's addresses (the capture host's own).
    pub addresses: Vec<IpAddr>,
    stats: LiveStats,
}

// SAFETY: the mapping is owned by this value and only touched through &mut self.
unsafe impl Send for LiveCapture {}

fn ifindex_and_type(name: &str) -> Option<(u32, u16)> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: if_nametoindex reads a NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        return None;
    }
    // SAFETY: a datagram socket for the ioctl, closed on drop.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return None;
    }
    // SAFETY: ifreq is plain data; the name fits (if_nametoindex accepted it).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, &b) in req.ifr_name.iter_mut().zip(c.as_bytes()) {
        *d = b as libc::c_char;
    }
    // SAFETY: SIOCGIFHWADDR fills req.ifr_ifru.ifru_hwaddr.
    let rc = unsafe { libc::ioctl(s, libc::SIOCGIFHWADDR, &mut req) };
    // SAFETY: closing the socket made above.
    unsafe { libc::close(s) };
    // SAFETY: the union member the ioctl filled.
    let family = unsafe { req.ifr_ifru.ifru_hwaddr.sa_family };
    Some((index, if rc == 0 { family } else { 0 }))
}

/// The addresses of interface `name` (getifaddrs, in the caller's namespace).
fn addresses_of(name: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        // SAFETY: ifa_name is a NUL-terminated string.
        let n = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if n.to_bytes() == name.as_bytes() && !ifa.ifa_addr.is_null() {
            // SAFETY: the family says which sockaddr this is.
            unsafe {
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let a = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                        out.push(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()));
                    }
                    libc::AF_INET6 => {
                        let a = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                        out.push(IpAddr::from(a.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: freeing the list getifaddrs returned.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// The socket filter for `expression` on frames of `link`: libpcap's program, then
/// rttlab's selection and snap length ([`filter::and_then`]); with a selection too long
/// to fit beside the expression, every TCP frame the expression keeps, the selection
/// left to the analysis.
fn kernel_program(
    expression: &Expression,
    link: LinkType,
    select: &Selection,
    snaplen: u32,
) -> Result<Vec<SockFilter>, ExpressionError> {
    let first = expression.compile(link)?.instructions();
    let mut p = filter::and_then(&first, &filter::program(link, select, snaplen));
    if p.len() > filter::MAX_INSNS {
        p = filter::and_then(
            &first,
            &filter::program(link, &Selection::default(), snaplen),
        );
    }
    if p.len() > filter::MAX_INSNS {
        return Err(ExpressionError::TooLong {
            text: expression.text().into(),
            len: p.len(),
            max: filter::MAX_INSNS,
        });
    }
    Ok(p)
}

/// What a live engine needs to know of an interface before it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceFacts {
    /// How its frames start: Ethernet (Ethernet, veth, loopback, bridges) or raw IP
    /// (tun, WireGuard and other layer-3 devices).
    pub link: LinkType,
    /// Loopback: every frame is seen leaving and arriving.
    pub loopback: bool,
    /// Its addresses (the capture host's own).
    pub addresses: Vec<IpAddr>,
}

/// The facts of `interface`, in network namespace `netns` if given.
///
/// # Errors
/// No such interface or namespace.
pub fn interface_facts(interface: &str, netns: Option<&str>) -> Result<InterfaceFacts, LiveError> {
    let name = interface.to_string();
    netns::run_in(netns, move || {
        let (_, hwtype) = ifindex_and_type(&name).ok_or_else(|| LiveError::NoInterface {
            name: name.clone(),
            place: String::new(),
        })?;
        Ok(InterfaceFacts {
            link: if matches!(hwtype, ARPHRD_ETHER | ARPHRD_LOOPBACK) {
                LinkType::Ethernet
            } else {
                LinkType::Raw
            },
            loopback: hwtype == ARPHRD_LOOPBACK,
            addresses: addresses_of(&name),
        })
    })?
    .map_err(|e| match (e, netns) {
        (LiveError::NoInterface { name, .. }, Some(n)) => LiveError::NoInterface {
            name,
            place: format!(" in network namespace {n}"),
        },
        (e, _) => e,
    })
}

impl LiveCapture {
    /// Start capturing on `interface`, inside network namespace `netns` if given.
    ///
    /// # Errors
    /// No such interface or namespace, no CAP_NET_RAW, ring set-up failed.
    pub fn open(interface: &str, netns: Option<&str>) -> Result<Self, LiveError> {
        Self::open_with(interface, netns, &Selection::default(), None, 0)
    }

    /// As [`Self::open`], keeping only frames `expression` keeps (a tcpdump filter,
    /// compiled by libpcap for the frames' link type) that `select` may match, and at
    /// most `snaplen` bytes of each (0: whole frames): one classic BPF program the
    /// kernel runs before copying a frame into the ring, so a busy interface's other
    /// traffic costs no copy ([`filter::program`], [`filter::and_then`]).
    ///
    /// # Errors
    /// As [`Self::open`]; libpcap refused the expression for this interface's link
    /// type; the kernel refused the filter.
    pub fn open_with(
        interface: &str,
        netns: Option<&str>,
        select: &Selection,
        expression: Option<&Expression>,
        snaplen: u32,
    ) -> Result<Self, LiveError> {
        let iface = interface.to_string();
        let select = select.clone();
        let expression = expression.cloned();
        netns::run_in(netns, move || {
            Self::open_here(&iface, &select, expression.as_ref(), snaplen)
        })?
        .map_err(|e| match (e, netns) {
            (LiveError::NoInterface { name, .. }, Some(n)) => LiveError::NoInterface {
                name,
                place: format!(" in network namespace {n}"),
            },
            (e, _) => e,
        })
    }

    fn open_here(
        interface: &str,
        select: &Selection,
        expression: Option<&Expression>,
        snaplen: u32,
    ) -> Result<Self, LiveError> {
        let (index, hwtype) =
            ifindex_and_type(interface).ok_or_else(|| LiveError::NoInterface {
                name: interface.into(),
                place: String::new(),
            })?;
        // A packet socket of type SOCK_RAW hands out frames from the MAC header where
        // the device has one: Ethernet and loopback (whose frames carry an Ethernet
        // header); elsewhere (tun, WireGuard) the frame starts at the IP header.
        let link = if matches!(hwtype, ARPHRD_ETHER | ARPHRD_LOOPBACK) {
            LinkType::Ethernet
        } else {
            LinkType::Raw
        };
        // Before anything is opened: an expression this link type refuses ends here.
        let program = match expression {
            Some(e) => Some(kernel_program(e, link, select, snaplen)?),
            None if !select.is_empty() || snaplen != 0 => {
                Some(filter::program(link, select, snaplen))
            }
            None => None,
        };
        let fd = socket(0).map_err(|e| {
            if e.source.raw_os_error() == Some(libc::EPERM) {
                LiveError::NotPermitted
            } else {
                e.into()
            }
        })?;
        let raw = fd.as_raw_fd();
        setopt(raw, PACKET_VERSION, &TPACKET_V3, "PACKET_VERSION")?;
        // struct tpacket_req3.
        let req: [u32; 7] = [
            BLOCK_SIZE,
            BLOCK_NR,
            FRAME_SIZE,
            BLOCK_SIZE / FRAME_SIZE * BLOCK_NR,
            RETIRE_MS,
            0,
            0,
        ];
        setopt(raw, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
        // Before the ring fills: from here on only frames the program keeps are copied.
        if let Some(p) = &program {
            attach_filter(raw, p)?;
        }
        let map = map_ring(raw, (BLOCK_SIZE * BLOCK_NR) as usize, true)?;
        let mut cap = Self {
            fd,
            map: map.cast(),
            block: 0,
            link,
            loopback: hwtype == ARPHRD_LOOPBACK,
            addresses: addresses_of(interface),
            stats: LiveStats::default(),
        };
        bind(raw, index, ETH_P_ALL)?;
        // Counters start now.
        cap.read_stats();
        cap.stats = LiveStats::default();
        Ok(cap)
    }

    /// The link type of the frames handed out.
    pub fn link(&self) -> LinkType {
        self.link
    }

    fn block_ptr(&self, i: u32) -> *mut u8 {
        // SAFETY: i < BLOCK_NR; blocks tile the mapping.
        unsafe { self.map.add((i * BLOCK_SIZE) as usize) }
    }

    fn block_status(&self, i: u32) -> &AtomicU32 {
        // SAFETY: block_status is the 4-byte aligned word at offset 8 of the block
        // descriptor (tpacket_block_desc.hdr.bh1), shared with the kernel.
        unsafe { &*self.block_ptr(i).add(8).cast::<AtomicU32>() }
    }

    /// Wait up to `timeout_ms` for a block, then hand each frame in every ready block
    /// to `f` as (arrival ns since the epoch, frame); returns how many were handed.
    ///
    /// # Errors
    /// poll(2) failed (other than by a signal).
    pub fn poll(
        &mut self,
        timeout_ms: i32,
        mut f: impl FnMut(u64, &[u8]),
    ) -> Result<usize, SyscallError> {
        if self.block_status(self.block).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut p, 1, timeout_ms) } < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(SyscallError {
                        call: "poll(AF_PACKET)",
                        source: e,
                    });
                }
            }
        }
        let mut n = 0;
        while self.block_status(self.block).load(Ordering::Acquire) & TP_STATUS_USER != 0 {
            let b = self.block_ptr(self.block);
            // SAFETY: reading the descriptor of a block the kernel handed to us:
            // num_pkts at 12, offset_to_first_pkt at 16 (tpacket_hdr_v1).
            let (num, first) = unsafe {
                (
                    b.add(12).cast::<u32>().read(),
                    b.add(16).cast::<u32>().read(),
                )
            };
            let mut off = first as usize;
            for _ in 0..num {
                if off + 48 > BLOCK_SIZE as usize {
                    break;
                }
                // SAFETY: a tpacket3_hdr inside the block (checked above): next offset
                // at 0, sec 4, nsec 8, snaplen 12, mac 24, net 26; the sockaddr_ll
                // after the 48-byte aligned header has sll_pkttype at 10.
                let (next, sec, nsec, snap, mac, net, pkttype) = unsafe {
                    let h = b.add(off);
                    (
                        h.cast::<u32>().read(),
                        h.add(4).cast::<u32>().read(),
                        h.add(8).cast::<u32>().read(),
                        h.add(12).cast::<u32>().read(),
                        h.add(24).cast::<u16>().read(),
                        h.add(26).cast::<u16>().read(),
                        h.add(48 + 10).read(),
                    )
                };
                let start = off + usize::from(if self.link == LinkType::Raw { net } else { mac });
                let end = off + usize::from(mac) + snap as usize;
                if start <= end
                    && end <= BLOCK_SIZE as usize
                    && !(self.loopback && pkttype == PACKET_OUTGOING)
                {
                    // SAFETY: [start, end) lies inside this block (checked).
                    let data = unsafe { std::slice::from_raw_parts(b.add(start), end - start) };
                    f(u64::from(sec) * 1_000_000_000 + u64::from(nsec), data);
                    n += 1;
                }
                if next == 0 {
                    break;
                }
                off += next as usize;
            }
            self.block_status(self.block)
                .store(TP_STATUS_KERNEL, Ordering::Release);
            self.block = (self.block + 1) % BLOCK_NR;
        }
        Ok(n)
    }

    fn read_stats(&mut self) {
        if let Some((packets, drops)) = packet_statistics(self.fd.as_raw_fd()) {
            self.stats.packets += packets;
            self.stats.drops += drops;
        }
    }

    /// Kernel counters since the capture started.
    pub fn stats(&mut self) -> LiveStats {
        self.read_stats();
        self.stats
    }
}

impl Drop for LiveCapture {
    fn drop(&mut self) {
        // SAFETY: unmapping the ring mapped in open.
        unsafe { libc::munmap(self.map.cast(), (BLOCK_SIZE * BLOCK_NR) as usize) };
    }
}
