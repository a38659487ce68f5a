//! Responses from an untrusted server under `rr --anatomy`: whatever its trailers say
//! (sequence numbers, counts, stamps anywhere on the clock), reading one never panics,
//! one that reads re-writes to bytes that read the same, and joining a run of them to
//! the client's own stamps, then the statistics, the slowest share and the one-way
//! delays never panic, and every transaction joined still adds up to its round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rttlab::probe::anatomy::{
    ClientPart, Recorder, Sends, ServerPart, TailPlan, MIN_RESPONSE, TAIL_PPM,
};
use rttlab::stats::Percentile;

fuzz_target!(|data: &[u8]| {
    // Each chunk is one response's trailer: the server's part of the transaction
    // before (none in the first).
    let parts: Vec<Option<ServerPart>> = data
        .chunks(MIN_RESPONSE as usize)
        .map(ServerPart::read)
        .collect();
    for p in parts.iter().flatten() {
        let mut again = vec![0u8; MIN_RESPONSE as usize];
        p.write(&mut again);
        assert_eq!(ServerPart::read(&again).as_ref(), Some(p));
    }
    // The client's own stamps, plausible: each transaction sent, left, came back and
    // returned 100 µs apart, its number and sequence from 1.
    let client = |n: u64| {
        let sent = 1_795_000_000_000_000_000 + n * 1_000_000;
        ClientPart {
            seq: n as u32,
            number: n,
            sent,
            sends: Sends::once(sent + 5_000),
            rx: Some(sent + 90_000),
            returned: sent + 100_000,
            acked: Some(sent + 80_000),
            ..ClientPart::default()
        }
    };
    let ps = [Percentile(50.0), Percentile(99.9)];
    for one_way in [false, true] {
        let mut r = Recorder::new(TailPlan::new(TAIL_PPM, parts.len() as u64, 1), one_way);
        let mut joined = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            joined.extend(r.record(client(i as u64 + 1), *p, 0));
        }
        // The last transaction's part, as the server's report brings it.
        if let Some(p) = parts.iter().flatten().last() {
            joined.extend(r.record_last(*p, 0));
        }
        for l in &joined {
            let t = &l.t;
            assert_eq!(
                t.client_send_ns
                    + t.network_ns
                    + t.server_recv_ns
                    + t.server_app_ns
                    + t.client_recv_ns,
                t.rtt_ns
            );
        }
        let _ = r.result(&ps, !one_way);
        // Every joined transaction was offered: the tail is exact and is their top.
        let (slow, exact) = r.slowest();
        assert!(exact);
        let mut by_rtt = joined.clone();
        by_rtt.sort_unstable_by(|a, b| b.cmp(a));
        by_rtt.truncate(slow.len());
        assert!(slow.iter().all(|l| by_rtt.contains(l)));
        let _ = r.one_way(false, 3, 1, &ps);
        let _ = r.one_way(true, 3, 1, &ps);
    }
});
