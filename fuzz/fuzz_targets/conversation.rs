//! The server's conversation (`probe::server::conversation`) driven by arbitrary byte
//! chunks, clock jumps and driver answers. Invariants, checked against a frame
//! splitter of the harness's own over the same bytes:
//!
//! - no frame over its state's limit is ever taken: a Hello (said) and a Start (Open)
//!   are at most `MAX_HANDSHAKE_FRAME` (plus the seal's tag), a Done (Finish) at most
//!   `MAX_FRAME` (plus the tag);
//! - nothing is taken at or past the deadline of the state it arrives in: a Start only
//!   before the handshake deadline, a Done only before the test's length + interval +
//!   grace; after any call at time `now` the conversation is closed or its deadline is
//!   later than `now`;
//! - it closes once, and says nothing after; it never panics.
//!
//! Input: one byte of flags (bit 0: a secret is set), then operations: `0 L bytes…`
//! bytes from the peer, `1 HI LO` the clock moves on by HI·256+LO ms, `2 B` the driver
//! answers what it was asked (B odd: the test is refused), `3` the data streams were
//! heard, `4 B` the peer closed (B odd: dropped from the pool instead).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rttlab::kernel::host::HostFacts;
use rttlab::probe::control::{Limits, ServerReport, MAX_FRAME, MAX_HANDSHAKE_FRAME, SEAL_LEN};
use rttlab::probe::server::conversation::{Action, Conversation, Settings, END_GRACE};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn settings(secret: bool) -> &'static Settings {
    static PLAIN: OnceLock<Settings> = OnceLock::new();
    static SECRET: OnceLock<Settings> = OnceLock::new();
    let make = |secret: Option<Vec<u8>>| Settings {
        secret,
        handshake_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(3),
        host: HostFacts::collect(),
        limits: Limits::default(),
    };
    if secret {
        SECRET.get_or_init(|| make(Some(b"fuzz".to_vec())))
    } else {
        PLAIN.get_or_init(|| make(None))
    }
}

/// The lengths of the whole frames in `stream`, in order.
fn frames(stream: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(head) = stream.get(at..at + 4) {
        let len = u32::from_be_bytes(head.try_into().unwrap()) as usize;
        if stream.len() < at + 4 + len {
            break;
        }
        out.push(len);
        at += 4 + len;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut ops)) = data.split_first() else {
        return;
    };
    let secret = flags & 1 == 1;
    let seal = if secret { SEAL_LEN } else { 0 };
    let t0 = Instant::now();
    let mut now = t0;
    let mut conv = Conversation::new(t0, settings(secret), [7; 32]);
    let mut stream = Vec::new();
    let mut asked: Option<Action> = None;
    let mut test_ends: Option<Instant> = None;
    let mut closed = false;
    while let Some((&op, rest)) = ops.split_first() {
        ops = rest;
        match op % 5 {
            0 => {
                let (&len, rest) = ops.split_first().unwrap_or((&0, &[]));
                let n = usize::from(len).min(rest.len());
                let (chunk, rest) = rest.split_at(n);
                ops = rest;
                stream.extend_from_slice(chunk);
                conv.on_bytes(chunk, now);
            }
            1 => {
                let ms = ops
                    .iter()
                    .take(2)
                    .fold(0u64, |a, &b| a * 256 + u64::from(b));
                ops = ops.get(2..).unwrap_or(&[]);
                now += Duration::from_millis(ms);
                conv.on_timeout(now);
            }
            2 => {
                let refuse = ops.first().is_some_and(|b| b & 1 == 1);
                ops = ops.get(1..).unwrap_or(&[]);
                match asked.take() {
                    Some(Action::Open(_)) if refuse => conv.test_refused(&rttlab::probe::server::Refusal::Busy { used: 1, limit: 1 }),
                    Some(Action::Open(spec)) => {
                        test_ends = Some(
                            now + Duration::from_millis(spec.max_duration_ms)
                                + Duration::from_millis(spec.interval_ms)
                                + END_GRACE,
                        );
                        conv.test_started(20000, now);
                    }
                    Some(Action::Finish) => conv.test_finished(ServerReport::default()),
                    other => asked = other,
                }
            }
            3 => conv.data_heard(now),
            _ => {
                let dropped = ops.first().is_some_and(|b| b & 1 == 1);
                ops = ops.get(1..).unwrap_or(&[]);
                if dropped {
                    conv.dropped(&rttlab::probe::server::Refusal::Handshakes {
                        waiting: 1,
                        limit: 1,
                    });
                } else {
                    conv.on_eof();
                }
            }
        }
        let taken = frames(&stream);
        while let Some(action) = conv.poll_action() {
            assert!(!closed, "{action:?} after the conversation closed");
            match &action {
                Action::SaidHello => {
                    assert!(
                        taken[0] as u32 <= MAX_HANDSHAKE_FRAME,
                        "Hello of {}",
                        taken[0]
                    );
                }
                Action::Open(_) => {
                    assert!(
                        now < t0 + Duration::from_secs(5),
                        "Start taken after the deadline"
                    );
                    let start = taken[if secret { 2 } else { 1 }];
                    assert!(
                        start as u32 <= MAX_HANDSHAKE_FRAME + seal,
                        "Start of {start}"
                    );
                    asked = Some(action);
                }
                Action::Finish => {
                    assert!(
                        test_ends.is_some_and(|e| now < e),
                        "Done taken after the test's end"
                    );
                    let done = taken[if secret { 3 } else { 2 }];
                    assert!(done as u32 <= MAX_FRAME + seal, "Done of {done}");
                    asked = Some(action);
                }
                Action::Close(_) => closed = true,
                Action::Send(_) => {}
            }
        }
        assert_eq!(closed, conv.is_closed());
        assert!(
            closed || conv.deadline().is_none_or(|d| d > now),
            "alive at {:?} past its deadline {:?}",
            now - t0,
            conv.deadline().map(|d| d - t0)
        );
    }
});
