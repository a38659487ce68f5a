//! `rr --anatomy`: each transaction split into what each host did and what the path
//! took, from the kernel's software stamps on both ends (`probe::stamps`).
//!
//! ```text
//! client:  send() ──client_send──▶ TX ······················· RX ──client_recv──▶ recv() returns
//! server:                      RX ──server_recv──▶ recv() ──server_app──▶ TX
//! ```
//!
//! The client's two intervals are on its clock, the server's two on its own, and the
//! network is what remains of the round trip: (client RX − client TX) − (server_recv +
//! server_app). The five add up to the round trip exactly and no clock is compared
//! with another (docs/ARCHITECTURE.md, "one transaction's anatomy").
//!
//! The server learns a response's TX stamp only after sending it, so each response
//! carries the server's two intervals of the *previous* transaction in a trailer after
//! the sequence bytes; the client joins them to what it kept of that transaction.

pub mod slowest;

pub mod counters;
pub mod recorder;
pub mod result;
pub mod slow_log;
pub mod trailer;

pub use counters::*;
pub use recorder::*;
pub use result::*;
pub use slow_log::*;
pub use trailer::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Percentile;

    fn part_of(seq: u32) -> ServerPart {
        ServerPart {
            seq,
            recv_ns: None,
            app_ns: None,
            answered: seq,
            ..ServerPart::default()
        }
    }

    /// Witness: arithmetic on stamps written by hand.
    #[test]
    fn components_add_up_to_the_round_trip() {
        let c = ClientPart {
            seq: 7,
            number: 7,
            sent: 1_000,
            sends: Sends::once(1_010),
            rx: Some(1_500),
            returned: 1_530,
            acked: Some(1_480),
            ..ClientPart::default()
        };
        let s = ServerPart {
            seq: 7,
            recv_ns: Some(40),
            app_ns: Some(60),
            ..part_of(7)
        };
        let t = join(&c, &s).unwrap();
        assert_eq!(t.rtt_ns, 530);
        assert_eq!(
            (
                t.client_send_ns,
                t.network_ns,
                t.server_recv_ns,
                t.server_app_ns,
                t.client_recv_ns
            ),
            (10, 390, 40, 60, 30)
        );
        assert_eq!(
            t.client_send_ns + t.network_ns + t.server_recv_ns + t.server_app_ns + t.client_recv_ns,
            t.rtt_ns
        );
        assert_eq!(t.tcp_ack_ns, Some(470));
        let unstamped = ClientPart { rx: None, ..c };
        assert_eq!(join(&unstamped, &s), Err(Missing::Unstamped));
        // The server says it held the request longer than the path took: a clock moved.
        let long = ServerPart {
            app_ns: Some(600),
            ..s
        };
        assert_eq!(join(&c, &long), Err(Missing::Inconsistent));
    }

    #[test]
    fn the_trailer_round_trips_and_the_first_response_carries_none() {
        let mut resp = vec![0u8; MIN_RESPONSE as usize];
        assert_eq!(ServerPart::read(&resp), None);
        let p = ServerPart {
            seq: 3,
            recv_ns: Some(12),
            app_ns: None,
            answered: 4,
            rx_ns: Some(1_795_000_000_000_000_000),
            tx_ns: None,
            retransmissions: 2,
            retransmitted_after_us: Some(600_000),
            migrated: true,
            tlp: true,
            rtos: Some(1),
            recovery: 0,
        };
        p.write(&mut resp);
        assert_eq!(ServerPart::read(&resp), Some(p));
        // A long response: its loss recovery's count, and its last segment sent once.
        let long = ServerPart {
            retransmissions: 7,
            retransmitted_after_us: None,
            recovery: 6,
            ..p
        };
        long.write(&mut resp);
        assert_eq!(ServerPart::read(&resp), Some(long));
        // A kernel that counts no RTOs: none said, not zero.
        let uncounted = ServerPart { rtos: None, ..p };
        uncounted.write(&mut resp);
        assert_eq!(ServerPart::read(&resp), Some(uncounted));
        // UDP_RR's echoed sequence wraps through 0 (one byte for 1-byte requests).
        let zero = ServerPart { seq: 0, ..p };
        zero.write(&mut resp);
        assert_eq!(ServerPart::read(&resp), Some(zero));
        assert_eq!(ServerPart::read(&resp[..10]), None);
        // A server whose RX stamp sits at the clock's end: its TX stamp would lie past
        // it, so there is none (witness: arithmetic, u64::MAX + 12 does not fit).
        let end = ServerPart {
            rx_ns: Some(u64::MAX),
            recv_ns: Some(12),
            app_ns: Some(0),
            ..p
        };
        end.write(&mut resp);
        assert_eq!(ServerPart::read(&resp).map(|p| p.tx_ns), Some(None));
    }

    #[test]
    fn the_server_reports_the_previous_transaction() {
        let mut s = ServerStamps::default();
        assert_eq!(s.next(1, Some(100), 130, 0, Sends::default(), 1), None);
        let mut sends = Sends::once(190);
        sends.add(210_190);
        let p = s.next(2, Some(500), 520, 1, sends, 2).unwrap();
        assert_eq!(
            p,
            ServerPart {
                seq: 1,
                recv_ns: Some(30),
                app_ns: Some(60),
                answered: 2,
                rx_ns: Some(100),
                tx_ns: Some(190),
                retransmissions: 1,
                retransmitted_after_us: Some(210),
                // Transaction 1 was the first: nothing to have migrated from.
                migrated: false,
                tlp: false,
                rtos: None,
                recovery: 0,
            }
        );
        // At the end, transaction 2's part (read on CPU 1 after 0: migrated), once.
        let last = s.last(Sends::once(580), 2).unwrap();
        assert_eq!(
            (last.seq, last.recv_ns, last.app_ns, last.migrated),
            (2, Some(20), Some(60), true)
        );
        assert_eq!(s.last(Sends::default(), 2), None);
        // In the report: the trailer's bytes, and nothing from too few of them.
        let peer = "127.0.0.1:40000".parse().unwrap();
        assert_eq!(LastPart::new(peer, &last).part(), Some(last));
        let short = LastPart {
            peer,
            trailer: vec![1; 12],
        };
        assert_eq!(short.part(), None);
    }

    #[test]
    fn the_recorder_joins_by_number_and_counts_what_it_cannot() {
        let mut r = Recorder::default();
        let part = |seq: u32, sent| ClientPart {
            seq,
            number: u64::from(seq),
            sent,
            sends: Sends::once(sent + 5),
            rx: Some(sent + 95),
            returned: sent + 100,
            acked: None,
            ..ClientPart::default()
        };
        r.record(part(1, 0), None, 0);
        r.record(
            part(2, 1_000),
            Some(ServerPart {
                seq: 1,
                recv_ns: Some(10),
                app_ns: Some(20),
                ..part_of(0)
            }),
            0,
        );
        assert_eq!(r.stamped, 1);
        assert_eq!(r.hist.network.count(), 1);
        // A part for another transaction (UDP: the one before was lost) joins nothing.
        r.record(
            part(3, 2_000),
            Some(ServerPart {
                seq: 1,
                recv_ns: Some(10),
                app_ns: Some(20),
                ..part_of(0)
            }),
            0,
        );
        assert_eq!(r.stamped, 1);
        r.record(
            part(4, 3_000),
            Some(ServerPart {
                seq: 3,
                recv_ns: None,
                app_ns: Some(20),
                ..part_of(3)
            }),
            0,
        );
        assert_eq!(r.unstamped, 1);
    }

    /// Witness: arithmetic. Two clocks 1 s apart, a path of 3 ms out and 7 ms back:
    /// with the clocks taken as one the delays carry the offset; estimated from the
    /// fastest transaction (whose path is taken as symmetric) the offset is found.
    /// One request lost on the way out, one response on the way back.
    #[test]
    fn one_way_delays_and_loss_by_direction() {
        let offset: u64 = 1_000_000_000;
        let mut r = Recorder::new(TailPlan::default(), true);
        let mut server = None;
        let mut answered = 0;
        for n in 1..=50u64 {
            if n == 20 {
                continue; // request lost: never answered
            }
            answered += 1;
            let sent = n * 100_000_000;
            let (out, back) = if n == 10 {
                (5_000_000, 5_000_000)
            } else {
                (3_000_000 + n, 7_000_000)
            };
            let srx = sent + 100 + out + offset;
            let stx = srx + 1_000;
            let part = ClientPart {
                seq: n as u32,
                number: n,
                sent,
                sends: Sends::once(sent + 100),
                rx: Some(stx - offset + back),
                returned: stx - offset + back + 50,
                acked: None,
                ..ClientPart::default()
            };
            let s = server.map(|p: ServerPart| ServerPart { answered, ..p });
            r.record(part, s, 0);
            server = Some(ServerPart {
                seq: n as u32,
                recv_ns: Some(500),
                app_ns: Some(500),
                answered,
                rx_ns: Some(srx),
                tx_ns: Some(stx),
                ..ServerPart::default()
            });
        }
        let p = [Percentile(50.0)];
        let same = r.one_way(true, 2, 0, &p).unwrap();
        assert_eq!(same.negative, 48, "every response 'arrives before it left'");
        let w = r.one_way(false, 2, 0, &p).unwrap();
        assert_eq!(w.clock, "estimated");
        // The fastest transaction is n = 10 (5 + 5 ms): symmetric, so the offset is exact.
        assert_eq!(w.offset_us, 1_000_000.0);
        assert!(
            (w.request.percentile_us(Percentile(50.0)).flatten().unwrap() - 3_000.0).abs() < 5.0
        );
        assert!(
            (w.response
                .percentile_us(Percentile(50.0))
                .flatten()
                .unwrap()
                - 7_000.0)
                .abs()
                < 10.0
        );
        // Consecutive forward delays differ by 1 ns (3 ms + n).
        assert!(
            w.ipdv_request
                .percentile_us(Percentile(50.0))
                .flatten()
                .unwrap()
                < 0.01
        );
        assert_eq!((w.request_lost, w.response_lost), (1, 1));
    }

    /// Witness: arithmetic on stamps written by hand, and the kernel's rules the
    /// events stand for (a second SND stamp of a byte is its retransmission; an ACK
    /// alone ≥ 40 ms after the request is the delayed-ACK timer's).
    #[test]
    fn events_say_what_touched_a_transaction() {
        let mut sends = Sends::once(1_000);
        sends.add(201_000_000);
        sends.add(601_000_000);
        let c = ClientPart {
            seq: 1,
            number: 1,
            sent: 900,
            rx: Some(700_000_000),
            returned: 700_000_100,
            acked: Some(650_000_000),
            sends,
            cpu_sent: 0,
            cpu_returned: 1,
            tlp: false,
            connect_ns: None,
        };
        let s = ServerPart {
            seq: 1,
            recv_ns: Some(100),
            app_ns: Some(100),
            retransmissions: 1,
            retransmitted_after_us: Some(200_000),
            ..part_of(1)
        };
        let e = join(&c, &s).unwrap().events;
        assert_eq!(
            (e.request_retransmissions, e.request_retransmitted_after_us),
            (2, Some(600_999))
        );
        assert_eq!(
            (
                e.response_retransmissions,
                e.response_retransmitted_after_us
            ),
            (1, Some(200_000))
        );
        assert!(e.client_migrated && !e.server_migrated);
        // The ACK came alone, but after the request was sent again: not the timer's.
        assert!(!e.delayed_ack);
        // Without tail loss probes (the parts say none), every one was an RTO.
        assert_eq!(e.by_kind(), (0, 3, 0));
        // Waited for: the network part (~700 ms) outlasts the last copies (601, 200 ms).
        let t = join(&c, &s).unwrap();
        assert_eq!(e.cause(1, &t, true), Some("rto"));
        // The client's wake-up, on another CPU: a migration, not the retransmission.
        assert_eq!(e.cause(4, &t, true), Some("migration"));
        assert_eq!(e.cause(3, &t, true), None, "the server's own time");
        // A copy sent after the response was on its way (an ACK lost): spurious, it
        // cost nothing.
        let quick = Transaction {
            network_ns: 150_000_000,
            ..t
        };
        assert_eq!(e.cause(1, &quick, true), None);
        // A request held 45 ms in the client's stack waited for an ACK (Nagle, a
        // window): the peer's delayed-ACK timer's. Not on UDP, which has none.
        let held = join(
            &ClientPart {
                sends: Sends::once(45_000_900),
                acked: Some(46_000_000),
                ..c
            },
            &ServerPart {
                retransmissions: 0,
                retransmitted_after_us: None,
                ..s
            },
        )
        .unwrap();
        assert!(held.events.delayed_ack);
        assert_eq!(held.events.cause(0, &held, true), Some("delayed_ack"));
        assert_eq!(held.events.cause(0, &held, false), None);
        assert_eq!(e.cause(0, &t, true), None, "sent at once");
        let probed = join(
            &ClientPart { tlp: true, ..c },
            &ServerPart { tlp: true, ..s },
        )
        .unwrap()
        .events;
        assert_eq!((probed.request_tlp, probed.response_tlp), (true, true));
        assert_eq!(probed.by_kind(), (2, 1, 0));
        // Where the kernels counted their RTOs, the counts decide: a client that
        // probes but whose two retransmissions were both RTOs (an earlier probe still
        // unresolved), a server whose one was not.
        let counted = join(
            &ClientPart {
                tlp: true,
                sends: Sends {
                    rtos: Some(2),
                    ..c.sends
                },
                ..c
            },
            &ServerPart {
                tlp: false,
                rtos: Some(0),
                ..s
            },
        )
        .unwrap()
        .events;
        assert_eq!((counted.request_tlp, counted.response_tlp), (false, true));
        assert_eq!(counted.by_kind(), (1, 2, 0));
        // Long messages: the kernel counted 5 request segments sent again, one by the
        // RTO timer, and 3 response segments, none by it; the rest were loss recovery,
        // and no probe is claimed (tcp_info does not tell one apart).
        let long = join(
            &ClientPart {
                tlp: true,
                sends: Sends {
                    again: 5,
                    rtos: Some(1),
                    recovery: 4,
                    ..c.sends
                },
                ..c
            },
            &ServerPart {
                tlp: true,
                retransmissions: 3,
                rtos: Some(0),
                recovery: 3,
                ..s
            },
        )
        .unwrap()
        .events;
        assert_eq!((long.request_tlp, long.response_tlp), (false, false));
        assert_eq!(long.by_kind(), (0, 1, 7));
        let recovered = Events {
            response_retransmissions: 2,
            response_recovery: 2,
            ..Events::default()
        };
        assert_eq!(recovered.by_kind(), (0, 0, 2));
        // The last segment went once (no time known): the message waited for the rest.
        assert_eq!(recovered.cause(1, &t, true), Some("recovery"));
        let quiet = Events {
            client_migrated: true,
            ..Events::default()
        };
        assert_eq!(quiet.cause(4, &t, false), Some("migration"));
        assert_eq!(quiet.cause(2, &t, true), None, "the server did not move");
        assert_eq!(quiet.cause(1, &t, true), None, "nothing sent again");
        // Sent once, its ACK alone 650 ms later, before the response: the timer's.
        let once = ClientPart {
            sends: Sends::once(1_000),
            ..c
        };
        let alone = ServerPart {
            retransmissions: 0,
            retransmitted_after_us: None,
            ..s
        };
        assert!(join(&once, &alone).unwrap().events.delayed_ack);
        // The piggybacked ACK (with the response) is no delayed ACK.
        let piggy = ClientPart {
            acked: Some(700_000_000),
            ..once
        };
        assert!(!join(&piggy, &alone).unwrap().events.delayed_ack);
        let mut counts = EventCounts::default();
        counts.add(&e);
        counts.add(&quiet);
        assert_eq!(
            (
                counts.retransmitted,
                counts.request_retransmissions,
                counts.response_retransmissions,
                counts.client_migrated
            ),
            (1, 2, 1, 2)
        );
    }

    /// Witness: arithmetic. 200 transactions, two of them slow, one by its server's
    /// think time and one by its network: the tail is those two, one cause each.
    #[test]
    fn the_tail_names_each_slow_transactions_cause() {
        let mut r = Recorder::new(TailPlan::default(), false);
        let mut server = None;
        for seq in 1..=201u32 {
            let sent = u64::from(seq) * 10_000;
            let (net, app) = match seq {
                50 => (90, 5_000),
                120 => (8_000, 20),
                _ => (90, 20),
            };
            let part = ClientPart {
                seq,
                number: u64::from(seq),
                sent,
                sends: Sends::once(sent + 5),
                rx: Some(sent + 5 + net + 10 + app),
                returned: sent + 5 + net + 10 + app + 7,
                acked: None,
                ..ClientPart::default()
            };
            r.record(part, server, 0);
            server = Some(ServerPart {
                seq,
                recv_ns: Some(10),
                app_ns: Some(app as u32),
                // Transaction 120's response was sent again.
                retransmissions: u8::from(seq == 120),
                ..part_of(seq)
            });
        }
        assert_eq!(r.stamped, 200);
        assert_eq!(r.events.retransmitted, 1);
        let (slow, exact) = r.slowest();
        assert!(exact);
        assert_eq!(slow.iter().map(|l| l.seq).collect::<Vec<_>>(), [50, 120]);
        let tail = r.tail().unwrap();
        assert_eq!(tail.transactions, 2);
        let names: Vec<_> = tail.causes.iter().map(|c| c.component.as_str()).collect();
        assert!(
            names.contains(&"server_app") && names.contains(&"network"),
            "{names:?}"
        );
        let app = tail
            .causes
            .iter()
            .find(|c| c.component == "server_app")
            .unwrap();
        assert_eq!(app.share_pct, 50.0);
        assert!((app.mean_added_us - 4.98).abs() < 0.01, "{app:?}");
        assert_eq!(app.event, None);
        let net = tail.causes.iter().find(|c| c.component == "network");
        assert_eq!(net.unwrap().event.as_deref(), Some("rto"));
        // Witness: arithmetic. P50 is one of the 198 ordinary transactions (145 ns:
        // 5 + 90 + 10 + 20 + 7 + the server's 10 + 3 of rounding in the hand-made
        // stamps); P99.9 is the slowest band, transaction 120 alone.
        let c = r.bands.composition(Percentile(50.0)).unwrap();
        assert_eq!(c.transactions, 198);
        assert!((c.parts_us.network * 1e3 - 90.0).abs() < 1e-9, "{c:?}");
        let top = r.bands.composition(Percentile(99.9)).unwrap();
        assert_eq!(top.transactions, 1);
        assert!(
            (top.parts_us.network * 1e3 - 8_000.0).abs() < 1e-9,
            "{top:?}"
        );
        for c in [&c, &top] {
            let sum: f64 = c.parts_us.parts().iter().map(|(_, v)| **v).sum();
            assert!((sum - c.parts_us.rtt).abs() < 1e-9, "{c:?}");
        }
    }
}
