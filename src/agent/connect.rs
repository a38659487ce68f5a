//! tcp_connect: a TCP handshake to the target's port and nothing more (SYN →
//! SYN/ACK, then a close, no payload), to any host, one that runs no rttlab too:
//! TCPing's measurement, which Phanekham and Jones ("What a trip!") list beside ping
//! among TCP latency tools. The time is `connect()`'s, as an application waits for
//! it: the handshake's round trip and the two kernels' work. A refusal is counted by
//! how the host refused: a reset (nothing listens), an ICMP unreachable or no route,
//! or no answer within the timeout.

use super::peers::Peer;
use super::prober::{ErrorReason, ProbeSettings, Resolved, Series};
use crate::probe::tcping::Refusal;
use std::net::TcpStream;
use std::time::Instant;

/// How a connect that failed is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    /// `rttlab_probe_errors_total` of this reason.
    Error(ErrorReason),
    /// `rttlab_probes_timed_out_total`: no answer at all within the timeout.
    TimedOut,
}

/// How a failed `connect()` is counted: by [`Refusal::of`] its error.
pub fn failed(e: &std::io::Error) -> Failed {
    match Refusal::of(e) {
        Refusal::Reset => Failed::Error(ErrorReason::Refused),
        Refusal::Unreachable => Failed::Error(ErrorReason::Unreachable),
        Refusal::TimedOut => Failed::TimedOut,
        Refusal::NotSent => Failed::Error(ErrorReason::Send),
    }
}

/// One connect and close; false when the host could not be reached (back off).
pub fn probe(peer: &Peer, s: &ProbeSettings, series: &Series, addr: &mut Resolved) -> bool {
    let Some(target) = addr.lookup(peer, series) else {
        return false;
    };
    series.sent.inc();
    let start = Instant::now();
    match TcpStream::connect_timeout(&target, s.timeout) {
        Ok(stream) => {
            let took = start.elapsed();
            // Closed at once: a FIN, no payload.
            drop(stream);
            series.rtt.observe(took.as_secs_f64());
            series.errors.answered();
            true
        }
        Err(e) => {
            match failed(&e) {
                Failed::TimedOut => series.timed_out.iter().for_each(|c| {
                    c.inc();
                }),
                Failed::Error(reason) => series
                    .errors
                    .fail(reason, || format!("connect to {target}: {e}")),
            }
            // The name may point elsewhere now.
            addr.set(None);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: connect(2)'s errors, made by the kernel: a port of loopback where
    /// nothing listens answers with a reset.
    #[test]
    fn each_refusal_is_counted_by_its_reason() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = free.local_addr().unwrap();
        drop(free);
        let e = TcpStream::connect(closed).unwrap_err();
        assert_eq!(failed(&e), Failed::Error(ErrorReason::Refused));
        let of = |errno| failed(&std::io::Error::from_raw_os_error(errno));
        assert_eq!(
            of(libc::EHOSTUNREACH),
            Failed::Error(ErrorReason::Unreachable)
        );
        assert_eq!(
            of(libc::ENETUNREACH),
            Failed::Error(ErrorReason::Unreachable)
        );
        assert_eq!(of(libc::ETIMEDOUT), Failed::TimedOut);
        assert_eq!(of(libc::EADDRNOTAVAIL), Failed::Error(ErrorReason::Send));
        let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "connection timed out");
        assert_eq!(failed(&timeout), Failed::TimedOut);
    }
}
