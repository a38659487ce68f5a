//! AF_PACKET primitives shared by the lab's emulator rings and live capture: the
//! socket, its SOL_PACKET options, binding to an interface, mapping a ring, the
//! kernel's counters, and attaching a classic BPF socket filter (linux/if_packet.h,
//! linux/filter.h, Documentation/networking/packet_mmap.rst).

use super::{sockopt, SyscallError};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// PACKET_VERSION value of a ring handing over one frame at a time (`tpacket2_hdr`);
/// the lab's emulator uses it.
pub const TPACKET_V2: libc::c_int = 1;
/// PACKET_VERSION value of a ring handing over blocks of frames (`tpacket3_hdr`);
/// live capture uses it.
pub const TPACKET_V3: libc::c_int = 2;
/// SOL_PACKET option giving the socket a receive ring (a `tpacket_req` or
/// `tpacket_req3` of block and frame sizes).
pub const PACKET_RX_RING: libc::c_int = 5;
/// SOL_PACKET option reading the socket's frame and drop counters (reading resets
/// them).
pub const PACKET_STATISTICS: libc::c_int = 6;
/// SOL_PACKET option choosing the ring's header layout (a `TPACKET_V*`); set before
/// PACKET_RX_RING.
pub const PACKET_VERSION: libc::c_int = 10;
/// SOL_PACKET option sending frames straight to the driver, past the qdisc layer.
pub const PACKET_QDISC_BYPASS: libc::c_int = 20;
/// SOL_PACKET option leaving out frames the host sends from the interface.
pub const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// A ring slot's or block's status: the kernel's to fill. Written back to return it.
pub const TP_STATUS_KERNEL: u32 = 0;
/// Status bit: the slot or block is filled and the reader's.
pub const TP_STATUS_USER: u32 = 1;
/// Status bit: the frame was longer than its slot and was cut to fit.
pub const TP_STATUS_COPY: u32 = 2;
/// Status bit: the header's `tp_vlan_tci` holds a VLAN tag taken off the frame.
pub const TP_STATUS_VLAN_VALID: u32 = 0x10;
/// Status bit: the header's `tp_vlan_tpid` holds that tag's TPID (else 802.1Q is
/// assumed).
pub const TP_STATUS_VLAN_TPID_VALID: u32 = 0x40;
/// Protocol (EtherType) that receives frames of every protocol, for bind(2).
pub const ETH_P_ALL: u16 = 0x0003;
/// TPID of an 802.1Q VLAN tag; the one assumed when the kernel gives none.
pub const ETH_P_8021Q: u16 = 0x8100;
/// `sll_pkttype` of a frame the host sent.
pub const PACKET_OUTGOING: u8 = 4;
/// Hardware type (SIOCGIFHWADDR's `sa_family`) of an Ethernet interface: frames
/// start with a MAC header.
pub const ARPHRD_ETHER: u16 = 1;
/// Hardware type of a loopback interface: frames carry an Ethernet header too, and
/// each is seen both leaving and arriving.
pub const ARPHRD_LOOPBACK: u16 = 772;

/// A raw packet socket for `protocol` (0: none until bound, so an unbound socket does
/// not queue every interface's frames).
///
/// # Errors
/// socket(2) failed (EPERM without CAP_NET_RAW).
pub fn socket(protocol: u16) -> Result<OwnedFd, SyscallError> {
    // SAFETY: plain socket(2); the fd is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(protocol.to_be()),
        )
    };
    if fd < 0 {
        return Err(SyscallError::last("socket(AF_PACKET)"));
    }
    // SAFETY: fresh fd owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A SOL_PACKET option.
///
/// # Errors
/// The kernel refused the option.
pub fn setopt<T>(
    fd: RawFd,
    name: libc::c_int,
    v: &T,
    call: &'static str,
) -> Result<(), SyscallError> {
    sockopt::set(fd, libc::SOL_PACKET, name, v, call)
}

/// Bind the socket to interface `ifindex` for `protocol`.
///
/// # Errors
/// bind(2) failed.
pub fn bind(fd: RawFd, ifindex: u32, protocol: u16) -> Result<(), SyscallError> {
    // SAFETY: sockaddr_ll is plain data.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = protocol.to_be();
    sa.sll_ifindex = ifindex as i32;
    // SAFETY: binding a valid sockaddr_ll of its own size.
    let rc = unsafe {
        libc::bind(
            fd,
            (&sa as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(SyscallError::last("bind(AF_PACKET)"))
    }
}

/// Map the ring of `len` bytes the kernel allocated for the socket (PACKET_RX_RING),
/// locked in memory when `locked` and the memlock limit allows, else unlocked.
///
/// # Errors
/// mmap(2) failed.
pub fn map_ring(fd: RawFd, len: usize, locked: bool) -> Result<*mut u8, SyscallError> {
    let map = |flags: libc::c_int| {
        // SAFETY: mapping the ring the kernel allocated for this socket.
        unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        }
    };
    let mut m = if locked {
        map(libc::MAP_SHARED | libc::MAP_LOCKED)
    } else {
        libc::MAP_FAILED
    };
    if m == libc::MAP_FAILED {
        m = map(libc::MAP_SHARED);
    }
    if m == libc::MAP_FAILED {
        Err(SyscallError::last("mmap(PACKET_RX_RING)"))
    } else {
        Ok(m.cast())
    }
}

/// PACKET_STATISTICS of a packet socket: (frames passed to it, frames dropped because
/// its ring was full) since the last call, which resets them. The buffer fits
/// tpacket_stats_v3 (a third word, freeze_q_cnt, unused); V2 sockets fill two words.
pub fn packet_statistics(fd: RawFd) -> Option<(u64, u64)> {
    let mut st = [0u32; 3];
    let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
    // SAFETY: getsockopt writes at most len bytes into st.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            PACKET_STATISTICS,
            st.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (rc == 0).then(|| (u64::from(st[0]), u64::from(st[1])))
}

/// One classic BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockFilter {
    /// The opcode: instruction class, size, mode and operation bits ORed together.
    pub code: u16,
    /// For a conditional jump: instructions to skip when the test holds.
    pub jt: u8,
    /// For a conditional jump: instructions to skip when it fails.
    pub jf: u8,
    /// The operand: a constant, an offset into the frame, a jump's distance, or for
    /// `ret` the bytes of the frame to keep.
    pub k: u32,
}

/// Attach a classic BPF program to the socket (SO_ATTACH_FILTER): the kernel runs it
/// on each frame before copying it into the ring, keeping as many bytes as it returns.
///
/// # Errors
/// The kernel's checker refused the program.
pub fn attach_filter(fd: RawFd, prog: &[SockFilter]) -> Result<(), SyscallError> {
    let fprog = libc::sock_fprog {
        len: u16::try_from(prog.len()).unwrap_or(u16::MAX),
        filter: prog.as_ptr().cast_mut().cast(),
    };
    sockopt::set(
        fd,
        libc::SOL_SOCKET,
        libc::SO_ATTACH_FILTER,
        &fprog,
        "SO_ATTACH_FILTER",
    )
}
