//! Socket options the probes set and read on data sockets.

use super::tcp_info::{TcpInfo, BUF_LEN};
use super::SyscallError;
use std::os::fd::{AsRawFd, RawFd};

/// `TCP_THIN_LINEAR_TIMEOUTS` (include/uapi/linux/tcp.h): per-socket form of the
/// `net.ipv4.tcp_thin_linear_timeouts` sysctl (seed 001).
const TCP_THIN_LINEAR_TIMEOUTS: libc::c_int = 16;

/// Errors reading or setting a socket option.
#[derive(Debug, thiserror::Error)]
pub enum SockoptError {
    /// The system call failed.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
    /// The kernel returned a `tcp_info` too short to decode.
    #[error(transparent)]
    TooShort(#[from] super::tcp_info::TooShort),
}

/// `getsockopt(TCP_INFO)` on a TCP socket.
///
/// # Errors
/// The call fails (not a TCP socket, closed) or returns a truncated struct.
pub fn tcp_info(sock: &impl AsRawFd) -> Result<TcpInfo, SockoptError> {
    tcp_info_fd(sock.as_raw_fd())
}

/// [`tcp_info`] on a raw descriptor.
///
/// # Errors
/// As [`tcp_info`].
pub fn tcp_info_fd(fd: RawFd) -> Result<TcpInfo, SockoptError> {
    let mut buf = [0u8; BUF_LEN];
    let mut len = BUF_LEN as libc::socklen_t;
    // SAFETY: buf is valid for `len` bytes and the kernel writes at most `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(SyscallError::last("getsockopt(TCP_INFO)").into());
    }
    Ok(TcpInfo::decode(&buf[..(len as usize).min(BUF_LEN)])?)
}

fn set_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
    call: &'static str,
) -> Result<(), SyscallError> {
    set(fd, level, opt, &v, call)
}

/// setsockopt(2) with a plain-data value at `level`.
///
/// # Errors
/// The kernel refused the option.
pub fn set<T>(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: &T,
    call: &'static str,
) -> Result<(), SyscallError> {
    // SAFETY: v is valid for size_of::<T>() bytes.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(SyscallError::last(call))
    }
}

/// Turn thin-stream linear timeouts on or off for one socket (`tp->thin_lto`, read by
/// `tcp_retransmit_timer`).
///
/// # Errors
/// The kernel refused the option.
pub fn set_thin_linear_timeouts(sock: &impl AsRawFd, on: bool) -> Result<(), SyscallError> {
    set_int(
        sock.as_raw_fd(),
        libc::IPPROTO_TCP,
        TCP_THIN_LINEAR_TIMEOUTS,
        i32::from(on),
        "setsockopt(TCP_THIN_LINEAR_TIMEOUTS)",
    )
}

/// Acknowledge the next data at once (`TCP_QUICKACK`: `inet_csk_enter_pingpong_mode`
/// is left and the ACK goes out from `tcp_rcv_established` instead of after the
/// delayed-ACK timer). Not sticky: the kernel may delay ACKs again afterwards, so it is
/// set before each read whose ACK the peer times.
///
/// # Errors
/// The kernel refused the option.
pub fn set_quickack(sock: &impl AsRawFd) -> Result<(), SyscallError> {
    set_int(
        sock.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_QUICKACK,
        1,
        "setsockopt(TCP_QUICKACK)",
    )
}

/// Choose the congestion control for one socket (`TCP_CONGESTION`).
///
/// # Errors
/// The algorithm is unknown to the kernel or not allowed for unprivileged users.
pub fn set_congestion(sock: &impl AsRawFd, name: &str) -> Result<(), SyscallError> {
    // SAFETY: the name buffer is valid for its length.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(SyscallError::last("setsockopt(TCP_CONGESTION)"));
    }
    Ok(())
}

/// The congestion control a socket uses.
///
/// # Errors
/// The call fails.
pub fn congestion(sock: &impl AsRawFd) -> Result<String, SyscallError> {
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf is valid for `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(SyscallError::last("getsockopt(TCP_CONGESTION)"));
    }
    let s = &buf[..(len as usize).min(buf.len())];
    let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
    Ok(String::from_utf8_lossy(&s[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// Checked against the kernel's own arithmetic: a fresh loopback connection has the
    /// default RTO floor (`TCP_RTO_MIN`, 200 ms, plus a jiffy or so) unless rto_min was
    /// changed, and a positive smoothed RTT after one exchange.
    #[test]
    fn loopback_connection_reports_rtt_and_rto() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        s.write_all(b"y").unwrap();
        c.read_exact(&mut b).unwrap();
        let ti = tcp_info(&c).unwrap();
        assert_eq!(ti.state, 1, "ESTABLISHED");
        assert!(ti.rtt_us > 0);
        assert!(ti.rto_us >= 1_000, "rto {}", ti.rto_us);
        assert!(
            ti.len >= 232,
            "this kernel returns a modern tcp_info, got {}",
            ti.len
        );
        set_thin_linear_timeouts(&c, true).unwrap();
        set_congestion(&c, "cubic").unwrap();
        assert_eq!(congestion(&c).unwrap(), "cubic");
    }
}
