//! tcp_connect: a TCP handshake to the target's port and nothing more (SYN →
//! SYN/ACK, then a close, no payload), to any host, one that runs no rttlab too:
//! TCPing's measurement, which Phanekham and Jones ("What a trip!") list beside ping
//! among TCP latency tools. The time is `connect()`'s, as an application waits for
//! it: the handshake's round trip and the two kernels' work. A refusal is counted by
//! how the host refused: a reset (nothing listens), an ICMP unreachable or no route,
//! or no answer within the timeout.

use super::peers::Peer;
use super::prober::{ErrorReason, ProbeSettings, Resolved, Series};
use crate::probe::tcping::{self, Outcome};
use std::sync::atomic::AtomicBool;

/// How a handshake that did not open is counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failed {
    /// `rttlab_probe_errors_total` of this reason, and the kernel's words.
    Error(ErrorReason, String),
    /// `rttlab_probes_timed_out_total`: no answer at all within the timeout.
    TimedOut,
}

/// How `o` is counted: `None` for an open port (timed) and a stop (not counted).
pub fn failed(o: &Outcome) -> Option<Failed> {
    match o {
        Outcome::Open(_) | Outcome::Interrupted => None,
        Outcome::Closed(_) => Some(Failed::Error(
            ErrorReason::Refused,
            "refused (a reset: nothing listens)".into(),
        )),
        Outcome::Unreachable(_, why) => Some(Failed::Error(ErrorReason::Unreachable, why.clone())),
        Outcome::TimedOut => Some(Failed::TimedOut),
        Outcome::NotSent(why) => Some(Failed::Error(ErrorReason::Send, why.clone())),
    }
}

/// One handshake and close ([`tcping::handshake`], as `rttlab ping --tcp` makes it);
/// false when the host could not be reached (back off). `stop` ends a wait early.
pub fn probe(
    peer: &Peer,
    s: &ProbeSettings,
    series: &Series,
    addr: &mut Resolved,
    stop: &AtomicBool,
) -> bool {
    let Some(target) = addr.lookup(peer, series) else {
        return false;
    };
    let socket = match tcping::socket(target, &tcping::SocketOptions::default()) {
        Ok(socket) => socket,
        Err(e) => {
            series
                .errors
                .fail(ErrorReason::Send, || format!("a socket for {target}: {e}"));
            return false;
        }
    };
    series.sent.inc();
    let outcome = tcping::handshake(socket, target, s.timeout, stop);
    if let Outcome::Open(took) = outcome {
        series.rtt.observe(took.as_secs_f64());
        series.errors.answered();
        return true;
    }
    match failed(&outcome) {
        Some(Failed::TimedOut) => series.timed_out.iter().for_each(|c| {
            c.inc();
        }),
        Some(Failed::Error(reason, why)) => series
            .errors
            .fail(reason, || format!("connect to {target}: {why}")),
        None => return false,
    }
    // The name may point elsewhere now.
    addr.set(None);
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Witness: the kernel's answers to real handshakes on loopback — a reset from a
    /// port where nothing listens, a SYN/ACK from one where something does — and
    /// connect(2)'s errors for the rest.
    #[test]
    fn each_refusal_is_counted_by_its_reason() {
        let stop = AtomicBool::new(false);
        let shake = |target: std::net::SocketAddr| {
            let s = tcping::socket(target, &tcping::SocketOptions::default()).unwrap();
            tcping::handshake(s, target, Duration::from_secs(5), &stop)
        };
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = free.local_addr().unwrap();
        drop(free);
        assert!(matches!(
            failed(&shake(closed)),
            Some(Failed::Error(ErrorReason::Refused, _))
        ));
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let o = shake(open.local_addr().unwrap());
        assert!(matches!(o, Outcome::Open(_)), "{o:?}");
        assert_eq!(failed(&o), None);
        let unreachable = Outcome::Unreachable(Duration::ZERO, "no route to host".into());
        assert_eq!(
            failed(&unreachable),
            Some(Failed::Error(
                ErrorReason::Unreachable,
                "no route to host".into()
            ))
        );
        assert_eq!(failed(&Outcome::TimedOut), Some(Failed::TimedOut));
        assert_eq!(failed(&Outcome::Interrupted), None);
        assert!(matches!(
            failed(&Outcome::NotSent("x".into())),
            Some(Failed::Error(ErrorReason::Send, _))
        ));
    }
}
