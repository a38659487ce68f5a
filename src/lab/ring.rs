//! AF_PACKET sockets for the emulator: a TPACKET_V2 receive ring (frames and their
//! kernel arrival stamps without a system call per frame) and a transmit socket that
//! bypasses the qdisc layer (PACKET_QDISC_BYPASS), bound to one interface each.
//!
//! TPACKET_V2 rather than V3: V3 hands frames over a block at a time (when the block
//! fills or its timer retires it), which would add milliseconds to a lone ping; V2
//! hands over each frame as soon as it is written.

use crate::kernel::packet::{
    bind, map_ring, packet_statistics, setopt, socket, ETH_P_8021Q, ETH_P_ALL,
    PACKET_IGNORE_OUTGOING, PACKET_QDISC_BYPASS, PACKET_RX_RING, PACKET_VERSION, TPACKET_V2,
    TP_STATUS_COPY, TP_STATUS_KERNEL, TP_STATUS_USER, TP_STATUS_VLAN_TPID_VALID,
    TP_STATUS_VLAN_VALID,
};
use crate::kernel::SyscallError;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Slot size: a 1518-byte frame (VLAN tag included) after the 32-byte header and the
/// kernel's alignment padding.
pub const FRAME_SIZE: usize = 2048;
const BLOCK_SIZE: usize = 1 << 16;
const BLOCK_NR: usize = 128;

/// One received frame, borrowed from the ring.
pub struct RxFrame<'a> {
    /// Kernel arrival stamp, CLOCK_REALTIME nanoseconds.
    pub ts_ns: u64,
    /// The frame as captured (a VLAN tag the driver stripped is in `vlan`).
    pub data: &'a [u8],
    /// Stripped 802.1Q tag: (TPID, TCI).
    pub vlan: Option<(u16, u16)>,
    /// The frame was longer than a slot and is cut.
    pub truncated: bool,
}

impl RxFrame<'_> {
    /// The frame with any stripped VLAN tag put back after the MAC addresses, into
    /// `out` (cleared first).
    pub fn copy_to(&self, out: &mut Vec<u8>) {
        out.clear();
        match self.vlan {
            Some((tpid, tci)) if self.data.len() >= 12 => {
                out.extend_from_slice(&self.data[..12]);
                out.extend_from_slice(&tpid.to_be_bytes());
                out.extend_from_slice(&tci.to_be_bytes());
                out.extend_from_slice(&self.data[12..]);
            }
            _ => out.extend_from_slice(self.data),
        }
    }
}

/// A TPACKET_V2 receive ring bound to one interface, ignoring frames sent out of it.
pub struct RxRing {
    fd: OwnedFd,
    map: *mut u8,
    frames: usize,
    cur: usize,
}

// SAFETY: the mapping is owned by this value and only touched through &mut self.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Open a ring on interface `ifindex` (in the caller's namespace).
    ///
    /// # Errors
    /// Socket, ring set-up, mmap or bind failed (needs CAP_NET_RAW).
    pub fn open(ifindex: u32) -> Result<Self, SyscallError> {
        // Protocol 0 until bound: an unbound ETH_P_ALL socket would queue every
        // interface's frames into the ring.
        let fd = socket(0)?;
        let raw = fd.as_raw_fd();
        setopt(raw, PACKET_VERSION, &TPACKET_V2, "PACKET_VERSION")?;
        let frames = BLOCK_SIZE / FRAME_SIZE * BLOCK_NR;
        let req = [
            BLOCK_SIZE as u32,
            BLOCK_NR as u32,
            FRAME_SIZE as u32,
            frames as u32,
        ];
        setopt(raw, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
        setopt(raw, PACKET_IGNORE_OUTGOING, &1i32, "PACKET_IGNORE_OUTGOING")?;
        // Ask for receive timestamps: this turns on the kernel's early stamping
        // (net.core.netdev_tstamp_prequeue), so a frame is stamped when the sender's
        // veth hands it over, not when a possibly deferred softirq (ksoftirqd on a busy
        // vCPU) delivers it to the ring; the ring then reports that stamp.
        crate::kernel::sockopt::set(
            raw,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &1i32,
            "SO_TIMESTAMPNS",
        )?;
        let map = map_ring(raw, BLOCK_SIZE * BLOCK_NR, false)?;
        let ring = Self {
            fd,
            map: map.cast(),
            frames,
            cur: 0,
        };
        bind(raw, ifindex, ETH_P_ALL)?;
        Ok(ring)
    }

    /// The socket, for poll(2).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn slot(&self, i: usize) -> *mut u8 {
        // SAFETY: i < frames, and frames tile the mapping (BLOCK_SIZE is a multiple of
        // FRAME_SIZE), so the offset is inside it.
        unsafe { self.map.add(i * FRAME_SIZE) }
    }

    fn status(&self, i: usize) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: tp_status is the first, 4-byte aligned word of the slot, shared with
        // the kernel; atomics give the ordering the ring protocol needs.
        unsafe { &*self.slot(i).cast::<std::sync::atomic::AtomicU32>() }
    }

    /// Hand the next ready frame to `f`, then give its slot back to the kernel.
    pub fn next<R>(&mut self, f: impl FnOnce(RxFrame<'_>) -> R) -> Option<R> {
        use std::sync::atomic::Ordering;
        let st = self.status(self.cur).load(Ordering::Acquire);
        if st & TP_STATUS_USER == 0 {
            return None;
        }
        let base = self.slot(self.cur);
        let rd16 = |off: usize| {
            // SAFETY: the 32-byte tpacket2_hdr lies at the start of the slot.
            unsafe { base.add(off).cast::<u16>().read_unaligned() }
        };
        let rd32 = |off: usize| {
            // SAFETY: as above.
            unsafe { base.add(off).cast::<u32>().read_unaligned() }
        };
        let snaplen = rd32(8) as usize;
        let mac = usize::from(rd16(12));
        let ts_ns = u64::from(rd32(16)) * 1_000_000_000 + u64::from(rd32(20));
        let vlan = (st & TP_STATUS_VLAN_VALID != 0).then(|| {
            let tpid = if st & TP_STATUS_VLAN_TPID_VALID != 0 {
                rd16(26)
            } else {
                ETH_P_8021Q
            };
            (tpid, rd16(24))
        });
        let len = snaplen.min(FRAME_SIZE.saturating_sub(mac));
        // SAFETY: mac + len ≤ FRAME_SIZE, inside the slot the kernel filled.
        let data = unsafe { std::slice::from_raw_parts(base.add(mac), len) };
        let r = f(RxFrame {
            ts_ns,
            data,
            vlan,
            truncated: st & TP_STATUS_COPY != 0,
        });
        self.status(self.cur)
            .store(TP_STATUS_KERNEL, Ordering::Release);
        self.cur = (self.cur + 1) % self.frames;
        Some(r)
    }

    /// Frames the kernel dropped because the ring was full, since the last call
    /// (PACKET_STATISTICS resets on read).
    pub fn kernel_drops(&self) -> u64 {
        packet_statistics(self.fd.as_raw_fd()).map_or(0, |(_, drops)| drops)
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in open.
        unsafe { libc::munmap(self.map.cast(), BLOCK_SIZE * BLOCK_NR) };
    }
}

/// A transmit-only packet socket bound to one interface.
pub struct TxSocket {
    fd: OwnedFd,
}

impl TxSocket {
    /// Open on `ifindex`, bypassing the qdisc (the emulator is the queue).
    ///
    /// # Errors
    /// Socket or bind failed.
    pub fn open(ifindex: u32) -> Result<Self, SyscallError> {
        let fd = socket(0)?;
        setopt(
            fd.as_raw_fd(),
            PACKET_QDISC_BYPASS,
            &1i32,
            "PACKET_QDISC_BYPASS",
        )?;
        bind(fd.as_raw_fd(), ifindex, 0)?;
        Ok(Self { fd })
    }

    /// Send one frame.
    ///
    /// # Errors
    /// The kernel refused it (interface down, no buffer).
    pub fn send(&self, frame: &[u8]) -> Result<(), SyscallError> {
        // SAFETY: frame is valid for its length.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            Err(SyscallError::last("send(AF_PACKET)"))
        } else {
            Ok(())
        }
    }
}
