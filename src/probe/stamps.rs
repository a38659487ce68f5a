//! The kernel's software timestamps of a data socket (`SO_TIMESTAMPING`, Documentation/
//! networking/timestamping.rst): when a received packet reached the stack (RX
//! SOFTWARE, with `recvmsg`), and, read back from the error queue, when a sent one
//! left it (TX SOFTWARE, `SCM_TSTAMP_SND`) and, for TCP, when its last byte was
//! acknowledged (TX ACK, `SCM_TSTAMP_ACK`). They split a transaction into what each
//! host's stack and application did and what the path took (`rr --anatomy`). All are
//! CLOCK_REALTIME, as `kernel::realtime_ns` is.
//!
//! The kernel turns receive stamping on lazily: the first packets after the option is
//! set may carry none, so a missing stamp is an `Option`, never an error.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;

/// Turn on software RX and TX stamps (and TX ACK for TCP) on `fd`. TX stamps come back
/// on the error queue without the packet (`OPT_TSONLY`), numbered (`OPT_ID`).
///
/// # Errors
/// The kernel refused the option.
pub fn enable(fd: RawFd, tcp: bool) -> io::Result<()> {
    let mut flags = libc::SOF_TIMESTAMPING_RX_SOFTWARE
        | libc::SOF_TIMESTAMPING_TX_SOFTWARE
        | libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    if tcp {
        flags |= libc::SOF_TIMESTAMPING_TX_ACK;
    }
    set(fd, flags)
}

/// Turn on RX software stamps alone. On a socket held open (a listener, an idle UDP
/// socket) this keeps the kernel's receive stamping on (`net_enable_timestamp`) for the
/// connections that come and go, each of which would otherwise find it off; unlike
/// [`enable`] it needs no established connection (`OPT_ID` does).
///
/// # Errors
/// The kernel refused the option.
pub fn hold_rx(fd: RawFd) -> io::Result<()> {
    set(
        fd,
        libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE,
    )
}

/// The kernel's receive stamping held on for as long as this lives, by a loopback UDP
/// socket of its own ([`hold_rx`]): a run's sockets come and go (TCP_CRR's each
/// transaction), and each last one closed lets the kernel turn stamping off again.
pub struct StampingHeld {
    _sock: std::net::UdpSocket,
}

impl StampingHeld {
    /// Hold receive stamping on, and wait (at most `limit`) until the kernel stamps
    /// what it receives. The switch is not immediate: the first socket to ask for
    /// stamps makes `net_enable_timestamp` (net/core/dev.c) defer it to a work item,
    /// which a busy machine runs late (a run's first 24 of 30 transactions went
    /// unstamped beside a CPU hog). Asked by datagrams to itself, until one comes back
    /// stamped; past `limit` the hold stays and the run goes on.
    ///
    /// # Errors
    /// No loopback here to bind (a namespace whose `lo` is down), or the kernel
    /// refused the option.
    pub fn on(limit: std::time::Duration) -> io::Result<Self> {
        use std::os::fd::AsRawFd;
        let sock = std::net::UdpSocket::bind(("127.0.0.1", 0))?;
        let fd = sock.as_raw_fd();
        hold_rx(fd)?;
        sock.set_read_timeout(Some(std::time::Duration::from_millis(50)))?;
        let me = sock.local_addr()?;
        let started = std::time::Instant::now();
        let mut buf = [0u8; 1];
        while started.elapsed() < limit && sock.send_to(&[0], me).is_ok() {
            if let Ok((_, Some(_))) = recv(fd, &mut buf, 0) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(Self { _sock: sock })
    }
}

fn set(fd: RawFd, flags: libc::c_uint) -> io::Result<()> {
    let v = flags as libc::c_int;
    crate::kernel::sockopt::set(
        fd,
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        &v,
        "setsockopt(SO_TIMESTAMPING)",
    )
    .map_err(|e| e.source)
}

/// `recvmsg` into `buf`: the bytes read and the RX software stamp of the (last) packet
/// they came from, when the kernel gave one.
///
/// # Errors
/// As `recvmsg` (a receive timeout is `WouldBlock`).
pub fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<(usize, Option<u64>)> {
    recv_from(fd, buf, flags, None)
}

/// As [`recv`], with the sender's address written into `from` when given.
///
/// # Errors
/// As `recvmsg`.
pub fn recv_from(
    fd: RawFd,
    buf: &mut [u8],
    flags: libc::c_int,
    from: Option<&mut libc::sockaddr_storage>,
) -> io::Result<(usize, Option<u64>)> {
    let mut cbuf = [0u64; 16];
    let (n, msg) = recvmsg(fd, buf, &mut cbuf, flags, from)?;
    let mut ts = None;
    for_each_cmsg(&msg, |level, ty, data| {
        if level == libc::SOL_SOCKET && ty == libc::SO_TIMESTAMPING {
            ts = software_stamp(data);
        }
    });
    Ok((n, ts))
}

/// `ee_info` of a TX stamp (include/uapi/linux/errqueue.h; not in the libc crate).
const SCM_TSTAMP_SND: u32 = 0;
const SCM_TSTAMP_ACK: u32 = 2;

/// What a TX stamp on the error queue says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxKind {
    /// The packet left the stack for the device (`SCM_TSTAMP_SND`).
    Sent,
    /// TCP: the data up to this byte was acknowledged (`SCM_TSTAMP_ACK`).
    Acked,
}

/// A TX stamp: its kind, the `OPT_ID` counter (UDP: the datagram's number from 0; TCP:
/// the offset of the send's last byte) and the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxStamp {
    /// Which event was stamped: the packet leaving the stack, or TCP's ACK of it.
    pub kind: TxKind,
    /// The `OPT_ID` counter (`ee_data` of the error queue message): UDP's datagram
    /// number from 0, TCP's offset of the send's last byte.
    pub id: u32,
    /// The software stamp, CLOCK_REALTIME ns since the Unix epoch.
    pub ns: u64,
}

/// Read the TX stamps waiting on `fd`'s error queue (never blocks) until `each` says
/// it has what it came for (returns true) or the queue is empty: a caller that knows
/// which stamps are due saves the read that would find the queue empty (a system call
/// per transaction on each end), and one that finds an older stamp first reads on.
///
/// # Errors
/// An error queue read failed other than by being empty.
pub fn drain_tx(fd: RawFd, mut each: impl FnMut(TxStamp) -> bool) -> io::Result<()> {
    let mut cbuf = [0u64; 16];
    let mut none = [0u8; 0];
    loop {
        let msg = match recvmsg(
            fd,
            &mut none,
            &mut cbuf,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            None,
        ) {
            Ok((_, m)) => m,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let mut ns = None;
        let mut what = None;
        for_each_cmsg(&msg, |level, ty, data| match (level, ty) {
            (libc::SOL_SOCKET, libc::SO_TIMESTAMPING) => ns = software_stamp(data),
            (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR)
                if data.len() >= std::mem::size_of::<libc::sock_extended_err>() =>
            {
                // SAFETY: the kernel wrote a sock_extended_err here; read unaligned.
                let e: libc::sock_extended_err =
                    unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
                if e.ee_errno == libc::ENOMSG as u32
                    && e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                {
                    what = Some((e.ee_info, e.ee_data));
                }
            }
            _ => {}
        });
        let kind = match what {
            Some((SCM_TSTAMP_SND, _)) => TxKind::Sent,
            Some((SCM_TSTAMP_ACK, _)) => TxKind::Acked,
            _ => continue,
        };
        if let (Some(ns), Some((_, id))) = (ns, what) {
            if each(TxStamp { kind, id, ns }) {
                return Ok(());
            }
        }
    }
}

/// `struct scm_timestamping`'s first (software) stamp, in ns; none when it is zero.
fn software_stamp(data: &[u8]) -> Option<u64> {
    if data.len() < std::mem::size_of::<libc::timespec>() {
        return None;
    }
    // SAFETY: at least one timespec's bytes, read unaligned.
    let t: libc::timespec = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
    let ns = (t.tv_sec as u64)
        .checked_mul(1_000_000_000)?
        .checked_add(t.tv_nsec as u64)?;
    (ns != 0).then_some(ns)
}

fn recvmsg(
    fd: RawFd,
    buf: &mut [u8],
    cbuf: &mut [u64; 16],
    flags: libc::c_int,
    from: Option<&mut libc::sockaddr_storage>,
) -> io::Result<(usize, libc::msghdr)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(cbuf);
    if let Some(f) = from {
        msg.msg_name = (f as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
    }
    // SAFETY: msg is initialised and its buffers are valid for the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // The iovec and name pointers die here; only the control buffer is read afterwards.
    msg.msg_iov = std::ptr::null_mut();
    msg.msg_iovlen = 0;
    msg.msg_name = std::ptr::null_mut();
    Ok((n as usize, msg))
}

/// Call `each(level, type, data)` for every control message of `msg`, whose control
/// buffer the caller still holds.
fn for_each_cmsg(msg: &libc::msghdr, mut each: impl FnMut(i32, i32, &[u8])) {
    // SAFETY: walking a control buffer the kernel filled, with the libc macros; each
    // message's data lies inside the buffer (cmsg_len says how far).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let start = libc::CMSG_DATA(c);
            let len = ((*c).cmsg_len as usize).saturating_sub(start.offset_from(c.cast()) as usize);
            each(
                (*c).cmsg_level,
                (*c).cmsg_type,
                std::slice::from_raw_parts(start, len),
            );
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    /// Witness: the kernel's own stamps on loopback, against the clock read around them
    /// (a stamp is taken inside the call it belongs to, so it lies between the reads).
    #[test]
    fn tcp_stamps_lie_inside_the_calls_that_made_them() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        enable(c.as_raw_fd(), true).unwrap();
        enable(s.as_raw_fd(), true).unwrap();
        let mut stamped_rx = 0;
        for i in 0..20u32 {
            let before = crate::kernel::realtime_ns();
            c.write_all(b"abcd").unwrap();
            let after = crate::kernel::realtime_ns();
            let mut buf = [0u8; 4];
            let (n, rx) = recv(s.as_raw_fd(), &mut buf, 0).unwrap();
            let read = crate::kernel::realtime_ns();
            assert_eq!(n, 4);
            if let Some(rx) = rx {
                assert!(before <= rx && rx <= read, "{before} {rx} {read}");
                stamped_rx += 1;
            }
            // The request's ACK may come later (delayed ACK): wait for both stamps.
            let mut sent = None;
            let mut acked = None;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while (sent.is_none() || acked.is_none()) && std::time::Instant::now() < deadline {
                drain_tx(c.as_raw_fd(), |t| {
                    match t.kind {
                        TxKind::Sent => sent = Some(t),
                        TxKind::Acked => acked = Some(t),
                    }
                    false
                })
                .unwrap();
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            let sent = sent.expect("a TX SND stamp");
            // OPT_ID for TCP numbers the send's last byte from 0.
            assert_eq!(sent.id, 4 * i + 3);
            assert!(
                before <= sent.ns && sent.ns <= after,
                "{before} {} {after}",
                sent.ns
            );
            let acked = acked.expect("a TX ACK stamp");
            assert_eq!(acked.id, 4 * i + 3);
            assert!(acked.ns >= sent.ns);
        }
        // Receive stamping is switched on lazily, but not for long.
        assert!(stamped_rx >= 15, "{stamped_rx} of 20 stamped");
    }

    #[test]
    fn udp_datagrams_are_numbered_from_zero() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        enable(a.as_raw_fd(), false).unwrap();
        for _ in 0..3 {
            a.send(b"x").unwrap();
        }
        let mut ids = Vec::new();
        drain_tx(a.as_raw_fd(), |t| {
            assert_eq!(t.kind, TxKind::Sent);
            ids.push(t.id);
            false
        })
        .unwrap();
        assert_eq!(ids, [0, 1, 2]);
    }
}
