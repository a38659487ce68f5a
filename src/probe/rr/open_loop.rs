//! Open loop: a sender thread sends on the schedule whatever the replies do, and
//! the stream's thread matches the replies (coordinated omission shows in the
//! response time).

use super::closed::{Ctx, Tally};
use super::outcome::StreamError;
use super::sequence::{get_seq, put_seq, seq_len, seq_mask};
use super::settings::OpenLoop;
use super::udp::{udp_socket, GaveUp};
use crate::kernel::cpu::{self};
use crate::kernel::sockopt;
use crate::probe::io::{read_full, write_full, ReadEnd};
use crate::probe::pacing::{self, Arrivals};
use std::collections::VecDeque;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
pub(super) enum Endpoint {
    Tcp(Option<TcpStream>),
    Udp,
}

pub(super) struct Pending {
    pub(super) seq: u64,
    pub(super) intended: Instant,
    pub(super) sent: Instant,
}

/// Open loop: a sender thread sends on the schedule; this thread receives and matches
/// replies (TCP: in order; UDP: by the echoed sequence number).
pub(super) fn open_loop(cx: &Ctx<'_>, ol: OpenLoop, ep: Endpoint, tally: &mut Tally) {
    let (mut tx_tcp, mut rx_tcp, udp) = match ep {
        Endpoint::Tcp(Some(s)) => match s.try_clone() {
            Ok(c) => (Some(c), Some(s), None),
            Err(e) => {
                tally.out.error = Some(StreamError::DataSocket(e));
                return;
            }
        },
        Endpoint::Tcp(None) => {
            tally.out.error = Some(StreamError::NoConnection);
            return;
        }
        Endpoint::Udp => match udp_socket(cx) {
            Ok(u) => (None, None, Some(u)),
            Err(e) => {
                tally.out.error = Some(StreamError::UdpSocket(e));
                return;
            }
        },
    };
    tally.out.local_addr = rx_tcp
        .as_ref()
        .and_then(|s| s.local_addr().ok())
        .or(udp.as_ref().and_then(|u| u.local_addr().ok()));
    let k = seq_len(cx.s);
    let mask = seq_mask(k);
    let pending: Mutex<VecDeque<Pending>> = Mutex::new(VecDeque::new());
    let sender_done = AtomicBool::new(false);
    let send_error: Mutex<Option<StreamError>> = Mutex::new(None);
    let late_sends = std::thread::scope(|scope| {
        let sender = scope.spawn(|| {
            if let Some(c) = cx.s.local_cpu {
                let _ = cpu::pin_current_thread(c);
            }
            pacing::tighten_timer_slack();
            let mut arrivals = Arrivals::new(
                ol.rate_per_s,
                ol.schedule,
                0x9e37_79b9 ^ cx.start.elapsed().as_nanos() as u64,
            );
            let mut req = vec![0u8; cx.s.request_size as usize];
            let (mut seq, mut late) = (0u64, 0u64);
            while seq < cx.quota && !cx.ctl.stop.load(Ordering::Relaxed) {
                let intended = cx.start + arrivals.next_offset();
                if intended >= cx.deadline {
                    break;
                }
                if !pacing::wait_until(cx.s.pace, intended, || !cx.ctl.stop.load(Ordering::Relaxed))
                {
                    break;
                }
                while pending.lock().map_or(0, |p| p.len()) >= ol.max_outstanding as usize
                    && cx.keep()
                {
                    std::thread::sleep(Duration::from_micros(50));
                }
                seq += 1;
                put_seq(&mut req, seq, k);
                let sent = Instant::now();
                if sent - intended > Duration::from_millis(1) {
                    late += 1;
                }
                if let Ok(mut p) = pending.lock() {
                    p.push_back(Pending {
                        seq,
                        intended,
                        sent,
                    });
                }
                let r = match (&mut tx_tcp, &udp) {
                    (Some(t), _) => write_full(t, &req, || cx.keep()),
                    (None, Some(u)) => u.send(&req).map(|_| ()),
                    (None, None) => Ok(()),
                };
                if let Err(e) = r {
                    *send_error.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(StreamError::Send(e));
                    break;
                }
            }
            sender_done.store(true, Ordering::Release);
            late
        });
        let mut resp = vec![0u8; cx.s.response_size as usize + 1];
        let rlen = cx.s.response_size as usize;
        // UDP: requests given up on, newest last: a reply to one is late, not lost.
        let mut gave_up = GaveUp::<Pending>::default();
        loop {
            let idle = sender_done.load(Ordering::Acquire)
                && pending.lock().map_or(true, |p| p.is_empty());
            if idle || !cx.keep() {
                break;
            }
            if let Some(s) = rx_tcp.as_mut() {
                match read_full(s, &mut resp[..rlen], || {
                    cx.keep()
                        && !(sender_done.load(Ordering::Acquire)
                            && pending.lock().map_or(true, |p| p.is_empty()))
                }) {
                    Ok(ReadEnd::Full) => {
                        let t1 = Instant::now();
                        let front = pending.lock().ok().and_then(|mut p| p.pop_front());
                        if let Some(p) = front {
                            tally.record(cx, p.sent, t1);
                            tally.out.intended.record_ns(
                                u64::try_from((t1 - p.intended).as_nanos()).unwrap_or(u64::MAX),
                            );
                        }
                    }
                    Ok(ReadEnd::Stopped { .. }) => break,
                    Ok(ReadEnd::Closed { .. }) | Err(_) => {
                        tally.out.error = Some(StreamError::Broke);
                        break;
                    }
                }
            } else if let Some(u) = &udp {
                match u.recv(&mut resp) {
                    Ok(n) if n == rlen => {
                        let t1 = Instant::now();
                        let got = get_seq(&resp, k);
                        let matched = pending.lock().ok().and_then(|mut p| {
                            p.iter()
                                .position(|x| x.seq & mask == got)
                                .and_then(|i| p.remove(i))
                        });
                        // Else a request given up on: late, not lost, a transaction
                        // with its round trip.
                        let (answered, late) = match matched {
                            Some(p) => (Some(p), false),
                            None => (
                                gave_up.take_newest(|x| x.seq & mask == got).map(|(p, _)| p),
                                true,
                            ),
                        };
                        match answered {
                            Some(p) => {
                                tally.record(cx, p.sent, t1);
                                tally.out.intended.record_ns(
                                    u64::try_from((t1 - p.intended).as_nanos()).unwrap_or(u64::MAX),
                                );
                                if late {
                                    tally.out.lost = tally.out.lost.saturating_sub(1);
                                    tally.out.late_replies += 1;
                                }
                            }
                            None => tally.out.stray_replies += 1,
                        }
                    }
                    Ok(_) => tally.out.stray_replies += 1,
                    Err(e) if crate::probe::io::is_timeout(&e) => {}
                    Err(e) => {
                        tally.out.error = Some(StreamError::Receive(e));
                        break;
                    }
                }
                // Requests older than the timeout are lost.
                let now = Instant::now();
                if let Ok(mut p) = pending.lock() {
                    while p.front().is_some_and(|x| now - x.sent >= cx.s.timeout) {
                        if let Some(x) = p.pop_front() {
                            gave_up.push(x);
                        }
                        tally.out.lost += 1;
                    }
                }
            }
        }
        sender.join().unwrap_or(0)
    });
    tally.out.late_sends = late_sends;
    tally.out.unanswered = pending.lock().map_or(0, |p| p.len() as u64);
    if tally.out.error.is_none() {
        tally.out.error = send_error.into_inner().unwrap_or_else(|p| p.into_inner());
    }
    if let Some(s) = &rx_tcp {
        if let Ok(ti) = sockopt::tcp_info(s) {
            tally.out.retrans = u64::from(ti.total_retrans);
            tally.out.info = vec![ti];
        }
    }
}
