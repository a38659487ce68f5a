//! One control connection's conversation as a state machine with no I/O and no clock:
//! bytes and the current time go in, frames to send and actions for the driver come
//! out ([`Conversation::poll_action`]), and [`Conversation::deadline`] says when it
//! must next be woken ([`Conversation::on_timeout`]) — the shape of quinn-proto's
//! `Connection::handle_timeout(now)`. It is driven by one thread per connection
//! (`connection`), and by unit tests and a fuzz target on a synthetic clock.
//!
//! ```text
//! Hello ──Hello──▶ (Auth ──Auth──▶) Start ──Start──▶ Opening ──test_started──▶ Running
//!   │ handshake deadline for all three      │ test_refused              │ Done
//!   ▼                                       ▼                           ▼
//! Closed ◀─────────────── Error ◀──── deadline, idle ◀──────────── Finishing ──Result──▶ Closed
//! ```
//!
//! Every state that waits on the peer has a deadline, and a frame counts only once it
//! is whole, so bytes trickled into a frame's body cannot extend anything:
//!
//! - **Handshake** (Hello, the secret's Auth, Start): one deadline for all of it,
//!   `--handshake-timeout` from accept; frames of at most [`MAX_HANDSHAKE_FRAME`].
//! - **Running**, waiting for Done: the test's announced length plus its interval plus
//!   [`END_GRACE`], and the idle rule (no data on the test's streams for the idle
//!   timeout plus the interval, as the driver reports with [`Conversation::data_heard`]);
//!   frames of at most [`MAX_FRAME`]. A frame begun here must be whole by then: before,
//!   the server read such a frame with a per-read timeout and checked neither rule
//!   meanwhile, so a length prefix and one byte every 25 s held a test slot for as
//!   long as the peer liked (44 s past a 1 s test with a 3 s idle timeout, measured).
//! - **Opening** and **Finishing** wait on the driver, not the peer: no deadline.
//!
//! With a secret, frames from Welcome on are sealed ([`Session`]); the Error that ends
//! a conversation is sealed too once a session exists.

use crate::kernel::host::HostFacts;
use crate::probe::control::{
    self, ClientMsg, ControlError, Limits, Role, ServerMsg, ServerReport, Session, TestSpec, MAGIC,
    MAX_FRAME, MAX_HANDSHAKE_FRAME, NONCE_LEN, PROTOCOL_VERSION, SEAL_LEN,
};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Extra time after a test's announced length (and interval) before the server ends
/// it: the client's last transaction may take its in-flight grace (5 s) and its Done
/// must still arrive.
pub const END_GRACE: Duration = Duration::from_secs(10);

/// What every conversation of one server shares.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Shared secret both ends prove; `None` serves anyone.
    pub secret: Option<Vec<u8>>,
    /// Time a connection has, in all, from accept to a valid Start.
    pub handshake_timeout: Duration,
    /// A running test whose client has sent no data this long (plus the test's
    /// interval) is ended.
    pub idle_timeout: Duration,
    /// Announced in Welcome.
    pub host: HostFacts,
    /// Announced in Welcome.
    pub limits: Limits,
}

/// What the driver must do, in order.
#[derive(Debug, PartialEq)]
pub enum Action {
    /// Write these bytes (whole frames) to the peer.
    Send(Vec<u8>),
    /// The peer said a valid Hello: a client at work.
    SaidHello,
    /// The peer asks for this test: check it against the limits and budgets, open its
    /// data socket, and answer with [`Conversation::test_started`] or
    /// [`Conversation::test_refused`].
    Open(Box<TestSpec>),
    /// The client said Done: stop the test and answer with
    /// [`Conversation::test_finished`].
    Finish,
    /// The conversation is over: close the connection, stopping any test.
    Close(Ending),
}

/// How a conversation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    /// Which way it ended: completed, refused, failed proof, protocol error, ….
    pub kind: EndKind,
    /// One line saying why (what the peer was told, when it was told anything).
    pub message: String,
}

/// The kinds of [`Ending`], for counting and logging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndKind {
    /// The test ran and its Result was sent.
    Completed,
    /// The test was refused: a limit or a budget.
    Refused,
    /// The client's proof of the secret was wrong.
    AuthFailed,
    /// The peer broke the protocol (a malformed, oversized, forged or unexpected
    /// frame) or the test's data connections failed.
    Protocol,
    /// The server ended a running test: past its length and grace, or idle.
    EndedByServer,
    /// The handshake did not finish within its deadline.
    TimedOut,
    /// Dropped from the handshake pool to make room.
    Dropped,
    /// The peer closed the connection or it failed; nothing could be told.
    Gone,
}

#[derive(Debug)]
enum State {
    Hello,
    Auth { client_nonce: Vec<u8> },
    Start,
    Opening { spec: Box<TestSpec> },
    Running(Running),
    Finishing,
    Closed,
}

#[derive(Debug)]
struct Running {
    /// Announced length + interval + [`END_GRACE`] after the test started.
    ends: Instant,
    /// The idle timeout plus the test's interval.
    idle: Duration,
    /// When the client's data was last seen.
    heard: Instant,
}

/// One control connection's conversation.
pub struct Conversation<'a> {
    settings: &'a Settings,
    state: State,
    /// When the handshake must be over.
    handshake_ends: Instant,
    server_nonce: [u8; NONCE_LEN],
    session: Option<Session>,
    /// Bytes received and not yet part of a whole frame (at most one frame ahead).
    inbuf: Vec<u8>,
    actions: VecDeque<Action>,
}

impl<'a> Conversation<'a> {
    /// A conversation with a peer accepted at `now`; `server_nonce` (fresh random
    /// bytes) goes into the Challenge when a secret is set.
    pub fn new(now: Instant, settings: &'a Settings, server_nonce: [u8; NONCE_LEN]) -> Self {
        Self {
            settings,
            state: State::Hello,
            handshake_ends: now + settings.handshake_timeout,
            server_nonce,
            session: None,
            inbuf: Vec::new(),
            actions: VecDeque::new(),
        }
    }

    /// The next thing for the driver to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Whether the conversation is over.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Whether the conversation waits on the peer (the driver should read).
    pub fn wants_bytes(&self) -> bool {
        matches!(
            self.state,
            State::Hello | State::Auth { .. } | State::Start | State::Running(_)
        )
    }

    /// When [`on_timeout`](Self::on_timeout) must be called if nothing else happens
    /// first; `None` while the driver has the next move, or once closed.
    pub fn deadline(&self) -> Option<Instant> {
        match &self.state {
            State::Hello | State::Auth { .. } | State::Start => Some(self.handshake_ends),
            State::Running(r) => Some(r.ends.min(r.heard + r.idle)),
            State::Opening { .. } | State::Finishing | State::Closed => None,
        }
    }

    /// The largest frame body accepted in the current state.
    pub fn frame_limit(&self) -> u32 {
        let plain = match self.state {
            State::Hello | State::Auth { .. } | State::Start => MAX_HANDSHAKE_FRAME,
            _ => MAX_FRAME,
        };
        if self.session.is_some() {
            plain + SEAL_LEN
        } else {
            plain
        }
    }

    /// Bytes from the peer, received at `now`.
    pub fn on_bytes(&mut self, bytes: &[u8], now: Instant) {
        if self.is_closed() {
            return;
        }
        if self.deadline().is_some_and(|d| now >= d) {
            // Bytes after the deadline count for nothing: the state has ended.
            self.on_timeout(now);
            return;
        }
        if !self.wants_bytes() {
            // A client waits for Ready or Result before it sends again: anything
            // more than one frame ahead breaks the protocol.
            let room = (4 + self.frame_limit() as usize).saturating_sub(self.inbuf.len());
            if bytes.len() > room {
                self.fail(ControlError::Unexpected(
                    "more than one frame sent ahead of the server's answer".into(),
                ));
                return;
            }
        }
        self.inbuf.extend_from_slice(bytes);
        self.process();
    }

    /// The peer closed the connection (or it failed).
    pub fn on_eof(&mut self) {
        if self.is_closed() {
            return;
        }
        let message = if matches!(self.state, State::Running(_)) {
            "the client closed the control connection during the test"
        } else {
            "the client closed the connection"
        };
        self.close(EndKind::Gone, message.into());
    }

    /// The client's data was last seen at `at` (a running test's streams).
    pub fn data_heard(&mut self, at: Instant) {
        if let State::Running(r) = &mut self.state {
            r.heard = r.heard.max(at);
        }
    }

    /// Time passed: end the state whose deadline is at or before `now`.
    pub fn on_timeout(&mut self, now: Instant) {
        let Some(deadline) = self.deadline() else {
            return;
        };
        if now < deadline {
            return;
        }
        let pending = self.pending_frame();
        match &self.state {
            State::Running(r) if now >= r.ends => self.tell(
                EndKind::EndedByServer,
                format!("the test ran past its announced length and grace{pending}: ended by the server"),
            ),
            State::Running(r) => {
                let quiet = now.saturating_duration_since(r.heard);
                let idle = r.idle;
                self.tell(
                    EndKind::EndedByServer,
                    format!(
                        "no data from the client for {:.1} s (idle timeout {:.1} s){pending}: test ended by the server",
                        quiet.as_secs_f64(),
                        idle.as_secs_f64()
                    ),
                );
            }
            _ => self.tell(
                EndKind::TimedOut,
                format!(
                    "the handshake took too long (--handshake-timeout {:.1} s){pending}",
                    self.settings.handshake_timeout.as_secs_f64()
                ),
            ),
        }
    }

    /// The driver opened the test asked for at `now`, its data socket on `port`.
    pub fn test_started(&mut self, port: u16, now: Instant) {
        let State::Opening { spec } = &self.state else {
            return;
        };
        let interval = Duration::from_millis(spec.interval_ms);
        let ends = now + Duration::from_millis(spec.max_duration_ms) + interval + END_GRACE;
        let idle = self.settings.idle_timeout + interval;
        self.state = State::Running(Running {
            ends,
            idle,
            heard: now,
        });
        self.send(&ServerMsg::Ready { data_port: port });
        self.process();
    }

    /// The driver refused the test asked for (the reason names the limit).
    pub fn test_refused(&mut self, reason: &super::refusal::Refusal) {
        if matches!(self.state, State::Opening { .. }) {
            self.tell(EndKind::Refused, reason.to_string());
        }
    }

    /// The running test's data connections failed.
    pub fn test_failed(&mut self, reason: &str) {
        if matches!(self.state, State::Running(_)) {
            self.tell(EndKind::Protocol, format!("data connection: {reason}"));
        }
    }

    /// The driver stopped the test the client said Done to.
    pub fn test_finished(&mut self, report: ServerReport) {
        if !matches!(self.state, State::Finishing) {
            return;
        }
        let summary = format!("done: {} transactions", report.transactions);
        self.send(&ServerMsg::Result {
            report: Box::new(report),
        });
        self.close(EndKind::Completed, summary);
    }

    /// The running test was ended for another source's ([`super::shares`]): `why`
    /// says so to the peer.
    pub fn gave_way(&mut self, why: &super::refusal::Refusal) {
        if matches!(self.state, State::Running(_) | State::Finishing) {
            self.tell(EndKind::EndedByServer, why.to_string());
        }
    }

    /// The connection was dropped from the handshake pool (`why` says so to the peer).
    pub fn dropped(&mut self, why: &super::refusal::Refusal) {
        if !self.is_closed() {
            self.tell(EndKind::Dropped, why.to_string());
        }
    }

    /// Decode every whole frame buffered, while the state reads frames.
    fn process(&mut self) {
        while self.wants_bytes() {
            let len = match control::frame_len(&self.inbuf, self.frame_limit()) {
                Ok(Some(len)) if len <= self.inbuf.len() => len,
                Ok(_) => return,
                Err(e) => return self.fail(e),
            };
            let frame: Vec<u8> = self.inbuf.drain(..len).collect();
            let msg = match &mut self.session {
                Some(s) => s.open::<ClientMsg>(&frame[4..]),
                None => control::decode::<ClientMsg>(&frame[4..]),
            };
            match msg {
                Ok(m) => self.on_msg(m),
                // Anything but a well-formed Auth is a failed proof.
                Err(_) if matches!(self.state, State::Auth { .. }) => self.auth_failed(),
                Err(e) => self.fail(e),
            }
        }
    }

    fn on_msg(&mut self, msg: ClientMsg) {
        match (std::mem::replace(&mut self.state, State::Closed), msg) {
            (
                State::Hello,
                ClientMsg::Hello {
                    magic,
                    version,
                    nonce_hex,
                },
            ) => self.on_hello(&magic, version, &nonce_hex),
            (State::Auth { client_nonce }, ClientMsg::Auth { mac_hex }) => {
                self.on_auth(&client_nonce, &mac_hex)
            }
            (State::Auth { .. }, _) => self.auth_failed(),
            (State::Start, ClientMsg::Start { spec }) => {
                let spec = Box::new(spec);
                self.actions.push_back(Action::Open(spec.clone()));
                self.state = State::Opening { spec };
            }
            (State::Running(_), ClientMsg::Done) => {
                self.state = State::Finishing;
                self.actions.push_back(Action::Finish);
            }
            (state, other) => {
                let expected = match &state {
                    State::Hello => "before Hello",
                    State::Start => "instead of Start",
                    _ => "instead of Done",
                };
                self.state = state;
                self.fail(ControlError::Unexpected(format!("{other:?} {expected}")));
            }
        }
    }

    fn on_hello(&mut self, magic: &str, version: u32, nonce_hex: &str) {
        if magic != MAGIC {
            return self.fail(ControlError::NotRttlab);
        }
        if version != PROTOCOL_VERSION {
            return self.fail(ControlError::Version {
                ours: PROTOCOL_VERSION,
                theirs: version,
            });
        }
        self.actions.push_back(Action::SaidHello);
        if self.settings.secret.is_none() {
            self.state = State::Start;
            return self.welcome();
        }
        let Some(client_nonce) = control::from_hex(nonce_hex).filter(|n| n.len() == NONCE_LEN)
        else {
            return self.fail(ControlError::Malformed(
                "Hello without a valid nonce".into(),
            ));
        };
        self.state = State::Auth { client_nonce };
        self.send(&ServerMsg::Challenge {
            nonce_hex: control::to_hex(&self.server_nonce),
        });
    }

    fn on_auth(&mut self, client_nonce: &[u8], mac_hex: &str) {
        let Some(secret) = &self.settings.secret else {
            return self.auth_failed();
        };
        let proved = control::from_hex(mac_hex).is_some_and(|mac| {
            control::verify_client_proof(secret, client_nonce, &self.server_nonce, &mac)
        });
        if !proved {
            return self.auth_failed();
        }
        self.session = Some(Session::derive(
            secret,
            client_nonce,
            &self.server_nonce,
            Role::Server,
        ));
        self.state = State::Start;
        self.welcome();
    }

    fn welcome(&mut self) {
        self.send(&ServerMsg::Welcome {
            version: PROTOCOL_VERSION,
            host: self.settings.host.clone(),
            limits: self.settings.limits.clone(),
        });
    }

    fn auth_failed(&mut self) {
        self.tell(
            EndKind::AuthFailed,
            "authentication failed: the client's secret does not match the server's".into(),
        );
    }

    /// " with a control frame still incomplete (N of M bytes)" when one is.
    fn pending_frame(&self) -> String {
        match control::frame_len(&self.inbuf, u32::MAX) {
            Ok(Some(len)) => format!(
                " with a control frame still incomplete ({} of {} bytes)",
                self.inbuf.len().saturating_sub(4),
                len - 4
            ),
            _ if !self.inbuf.is_empty() => {
                " with a control frame still incomplete (its length unfinished)".into()
            }
            _ => String::new(),
        }
    }

    /// The peer broke the protocol: tell it and close.
    fn fail(&mut self, e: ControlError) {
        let message = match e {
            ControlError::Remote(m) => m,
            other => crate::error_chain(&other),
        };
        self.tell(EndKind::Protocol, message);
    }

    /// Send an Error saying `message` (sealed once a session exists) and close.
    fn tell(&mut self, kind: EndKind, message: String) {
        self.send(&ServerMsg::Error {
            message: message.clone(),
        });
        self.close(kind, message);
    }

    fn close(&mut self, kind: EndKind, message: String) {
        self.state = State::Closed;
        self.inbuf = Vec::new();
        self.actions
            .push_back(Action::Close(Ending { kind, message }));
    }

    fn send(&mut self, msg: &ServerMsg) {
        let frame = match &mut self.session {
            Some(s) => s.seal(msg),
            None => control::encode_frame(msg),
        };
        // Only a Result over MAX_FRAME could fail here (its tcp_info per stream):
        // the peer is told so instead.
        let frame = frame.or_else(|e| {
            let error = ServerMsg::Error {
                message: crate::error_chain(&e),
            };
            match &mut self.session {
                Some(s) => s.seal(&error),
                None => control::encode_frame(&error),
            }
        });
        if let Ok(frame) = frame {
            self.actions.push_back(Action::Send(frame));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::control::{encode_frame, TestKind};

    const SECOND: Duration = Duration::from_secs(1);

    fn settings(secret: Option<&[u8]>) -> Settings {
        Settings {
            secret: secret.map(<[u8]>::to_vec),
            handshake_timeout: 5 * SECOND,
            idle_timeout: 3 * SECOND,
            host: HostFacts::collect(),
            limits: Limits::default(),
        }
    }

    fn hello(nonce: &[u8]) -> Vec<u8> {
        encode_frame(&ClientMsg::Hello {
            magic: MAGIC.into(),
            version: PROTOCOL_VERSION,
            nonce_hex: control::to_hex(nonce),
        })
        .unwrap()
    }

    /// A one-second TCP_RR test.
    fn spec() -> TestSpec {
        TestSpec::basic(TestKind::TcpRr, 1, 1, 1000)
    }

    fn start() -> Vec<u8> {
        encode_frame(&ClientMsg::Start { spec: spec() }).unwrap()
    }

    fn actions(c: &mut Conversation<'_>) -> Vec<Action> {
        std::iter::from_fn(|| c.poll_action()).collect()
    }

    /// The message of a plain frame.
    fn plain(frame: &[u8]) -> ServerMsg {
        control::decode(&frame[4..]).unwrap()
    }

    fn ending(a: &[Action]) -> Option<&Ending> {
        a.iter().find_map(|a| match a {
            Action::Close(e) => Some(e),
            _ => None,
        })
    }

    /// A conversation without a secret, its test started at `t0` + 1 ms.
    fn running(s: &Settings, t0: Instant) -> Conversation<'_> {
        let mut c = Conversation::new(t0, s, [0; NONCE_LEN]);
        c.on_bytes(&[hello(&[]), start()].concat(), t0);
        let a = actions(&mut c);
        assert_eq!(a.last(), Some(&Action::Open(Box::new(spec()))));
        c.test_started(20000, t0 + Duration::from_millis(1));
        let a = actions(&mut c);
        assert!(
            matches!(&a[..], [Action::Send(f)] if plain(f) == ServerMsg::Ready { data_port: 20000 })
        );
        c
    }

    #[test]
    fn hello_start_done_result_without_a_secret() {
        let s = settings(None);
        let t0 = Instant::now();
        let mut c = Conversation::new(t0, &s, [0; NONCE_LEN]);
        assert_eq!(c.deadline(), Some(t0 + 5 * SECOND));
        c.on_bytes(&hello(&[]), t0);
        let a = actions(&mut c);
        assert_eq!(a[0], Action::SaidHello);
        assert!(matches!(&a[1], Action::Send(f) if matches!(plain(f), ServerMsg::Welcome { .. })));
        c.on_bytes(&start(), t0 + SECOND);
        assert_eq!(actions(&mut c), vec![Action::Open(Box::new(spec()))]);
        assert_eq!(c.deadline(), None, "the driver has the next move");
        c.test_started(20000, t0 + SECOND);
        let a = actions(&mut c);
        assert!(
            matches!(&a[..], [Action::Send(f)] if plain(f) == ServerMsg::Ready { data_port: 20000 })
        );
        // 1 s of test, no interval, 10 s of grace; idle 3 s from the start.
        assert_eq!(c.deadline(), Some(t0 + 4 * SECOND));
        c.data_heard(t0 + 2 * SECOND);
        assert_eq!(c.deadline(), Some(t0 + 5 * SECOND));
        c.on_bytes(&encode_frame(&ClientMsg::Done).unwrap(), t0 + 2 * SECOND);
        assert_eq!(actions(&mut c), vec![Action::Finish]);
        let report = ServerReport {
            transactions: 7,
            ..ServerReport::default()
        };
        c.test_finished(report.clone());
        let a = actions(&mut c);
        assert!(
            matches!(&a[0], Action::Send(f) if plain(f) == ServerMsg::Result { report: Box::new(report) })
        );
        assert_eq!(ending(&a).unwrap().kind, EndKind::Completed);
        assert!(c.is_closed());
        assert_eq!(c.deadline(), None);
    }

    #[test]
    fn a_frame_split_at_every_byte_reads_the_same() {
        let s = settings(None);
        let t0 = Instant::now();
        let bytes = [hello(&[]), start()].concat();
        let whole = {
            let mut c = Conversation::new(t0, &s, [0; NONCE_LEN]);
            c.on_bytes(&bytes, t0);
            actions(&mut c)
        };
        for at in 0..=bytes.len() {
            let mut c = Conversation::new(t0, &s, [0; NONCE_LEN]);
            c.on_bytes(&bytes[..at], t0);
            c.on_bytes(&bytes[at..], t0);
            assert_eq!(actions(&mut c), whole, "split at {at}");
        }
        let mut c = Conversation::new(t0, &s, [0; NONCE_LEN]);
        for b in &bytes {
            c.on_bytes(std::slice::from_ref(b), t0);
        }
        assert_eq!(actions(&mut c), whole, "one byte at a time");
    }

    #[test]
    fn the_handshake_has_one_deadline_however_the_bytes_trickle() {
        let s = settings(None);
        let t0 = Instant::now();
        let mut c = Conversation::new(t0, &s, [0; NONCE_LEN]);
        let bytes = hello(&[]);
        for (i, b) in bytes.iter().enumerate().take(5) {
            c.on_bytes(std::slice::from_ref(b), t0 + i as u32 * SECOND);
            assert_eq!(c.deadline(), Some(t0 + 5 * SECOND));
            c.on_timeout(t0 + i as u32 * SECOND);
        }
        assert!(actions(&mut c).is_empty());
        // The byte that would complete nothing arrives at the deadline: too late.
        c.on_bytes(&bytes[5..], t0 + 5 * SECOND);
        let a = actions(&mut c);
        let e = ending(&a).unwrap();
        assert_eq!(e.kind, EndKind::TimedOut);
        assert!(
            e.message.contains("handshake took too long"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("still incomplete (1 of"),
            "{}",
            e.message
        );
        assert!(matches!(&a[0], Action::Send(f) if matches!(plain(f), ServerMsg::Error { .. })));
        assert_eq!(c.deadline(), None);
    }

    /// The slow-frame attack: a Done frame's length announcing 200 000 bytes, then a
    /// byte a second, while the data streams stay busy. Before, the slot was held as
    /// long as bytes came; now the test ends at its length plus grace.
    #[test]
    fn a_trickled_frame_cannot_outlive_the_tests_end() {
        let s = settings(None);
        let t0 = Instant::now();
        let mut c = running(&s, t0);
        let ends = t0 + Duration::from_millis(1) + SECOND + END_GRACE;
        c.on_bytes(&200_000u32.to_be_bytes(), t0 + SECOND);
        let mut now = t0 + SECOND;
        while !c.is_closed() {
            now += SECOND;
            assert!(now <= ends + SECOND, "still alive at {:?}", now - t0);
            c.data_heard(now);
            if c.deadline().is_some_and(|d| d <= now) {
                c.on_timeout(now);
            } else {
                c.on_bytes(b"x", now);
            }
        }
        assert!(now >= ends);
        let a = actions(&mut c);
        let e = ending(&a).unwrap();
        assert_eq!(e.kind, EndKind::EndedByServer);
        assert!(
            e.message.contains("past its announced length and grace with a control frame still incomplete (10 of 200000 bytes)"),
            "{}",
            e.message
        );
    }

    /// The same frame while the data streams are silent: the idle rule runs while the
    /// frame is being read.
    #[test]
    fn a_trickled_frame_does_not_stop_the_idle_rule() {
        let s = settings(None);
        let t0 = Instant::now();
        let mut c = running(&s, t0);
        c.on_bytes(&200_000u32.to_be_bytes(), t0 + SECOND);
        c.on_bytes(b"x", t0 + 2 * SECOND);
        assert!(!c.is_closed());
        let idle_ends = t0 + Duration::from_millis(1) + 3 * SECOND;
        assert_eq!(c.deadline(), Some(idle_ends));
        c.on_timeout(idle_ends);
        let a = actions(&mut c);
        let e = ending(&a).unwrap();
        assert_eq!(e.kind, EndKind::EndedByServer);
        assert!(
            e.message.starts_with("no data from the client for 3.0 s"),
            "{}",
            e.message
        );
    }

    #[test]
    fn oversized_lengths_are_refused_from_the_header() {
        let s = settings(None);
        let t0 = Instant::now();
        let mut c = Conversation::new(t0, &s, [0; NONCE_LEN]);
        c.on_bytes(&(MAX_HANDSHAKE_FRAME + 1).to_be_bytes(), t0);
        let a = actions(&mut c);
        assert_eq!(ending(&a).unwrap().kind, EndKind::Protocol);
        assert!(ending(&a).unwrap().message.contains("4097 bytes"));
        // Exactly the limit is awaited.
        let mut c = Conversation::new(t0, &s, [0; NONCE_LEN]);
        c.on_bytes(&MAX_HANDSHAKE_FRAME.to_be_bytes(), t0);
        assert!(actions(&mut c).is_empty());
        // After the handshake, the larger limit.
        let mut c = running(&s, t0);
        assert_eq!(c.frame_limit(), MAX_FRAME);
        c.on_bytes(&MAX_FRAME.to_be_bytes(), t0);
        assert!(!c.is_closed());
        let mut c = running(&s, t0);
        c.on_bytes(&(MAX_FRAME + 1).to_be_bytes(), t0);
        assert_eq!(ending(&actions(&mut c)).unwrap().kind, EndKind::Protocol);
    }

    #[test]
    fn a_secret_is_proved_and_the_rest_is_sealed() {
        let s = settings(Some(b"k"));
        let t0 = Instant::now();
        let (client_nonce, server_nonce) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let mut c = Conversation::new(t0, &s, server_nonce);
        c.on_bytes(&hello(&client_nonce), t0);
        let a = actions(&mut c);
        assert!(
            matches!(&a[1], Action::Send(f) if plain(f) == ServerMsg::Challenge { nonce_hex: control::to_hex(&server_nonce) })
        );
        assert_eq!(c.frame_limit(), MAX_HANDSHAKE_FRAME);
        let mac_hex = control::to_hex(&control::client_proof(b"k", &client_nonce, &server_nonce));
        c.on_bytes(&encode_frame(&ClientMsg::Auth { mac_hex }).unwrap(), t0);
        let mut client = Session::derive(b"k", &client_nonce, &server_nonce, Role::Client);
        let a = actions(&mut c);
        let Action::Send(f) = &a[0] else {
            panic!("{a:?}")
        };
        assert!(matches!(
            client.open::<ServerMsg>(&f[4..]).unwrap(),
            ServerMsg::Welcome { .. }
        ));
        assert_eq!(c.frame_limit(), MAX_HANDSHAKE_FRAME + SEAL_LEN);
        // A plain Start where a sealed one is due is forged.
        let mut forged = Conversation::new(t0, &s, server_nonce);
        forged.on_bytes(&hello(&client_nonce), t0);
        let mac_hex = control::to_hex(&control::client_proof(b"k", &client_nonce, &server_nonce));
        forged.on_bytes(&encode_frame(&ClientMsg::Auth { mac_hex }).unwrap(), t0);
        forged.on_bytes(&start(), t0);
        let e = actions(&mut forged);
        assert!(ending(&e)
            .unwrap()
            .message
            .contains("failed authentication"));
        // A sealed Start is taken.
        c.on_bytes(
            &client.seal(&ClientMsg::Start { spec: spec() }).unwrap(),
            t0,
        );
        assert_eq!(actions(&mut c), vec![Action::Open(Box::new(spec()))]);
        c.test_refused(&crate::probe::server::Refusal::Busy { used: 2, limit: 2 });
        let a = actions(&mut c);
        let Action::Send(f) = &a[0] else {
            panic!("{a:?}")
        };
        assert!(
            matches!(client.open::<ServerMsg>(&f[4..]).unwrap(), ServerMsg::Error { message } if message.starts_with("server busy"))
        );
        assert_eq!(ending(&a).unwrap().kind, EndKind::Refused);
    }

    #[test]
    fn a_wrong_proof_fails_authentication_in_plain() {
        let s = settings(Some(b"k"));
        let t0 = Instant::now();
        for auth in [
            encode_frame(&ClientMsg::Auth {
                mac_hex: control::to_hex(&[0u8; 32]),
            })
            .unwrap(),
            encode_frame(&ClientMsg::Done).unwrap(),
            b"\x00\x00\x00\x01{".to_vec(),
        ] {
            let mut c = Conversation::new(t0, &s, [2; NONCE_LEN]);
            c.on_bytes(&hello(&[1; NONCE_LEN]), t0);
            actions(&mut c);
            c.on_bytes(&auth, t0);
            let a = actions(&mut c);
            assert!(
                matches!(&a[0], Action::Send(f) if matches!(plain(f), ServerMsg::Error { message } if message.starts_with("authentication failed")))
            );
            assert_eq!(ending(&a).unwrap().kind, EndKind::AuthFailed);
        }
        // A Hello without a nonce cannot be challenged.
        let mut c = Conversation::new(t0, &s, [2; NONCE_LEN]);
        c.on_bytes(&hello(&[]), t0);
        assert_eq!(ending(&actions(&mut c)).unwrap().kind, EndKind::Protocol);
    }

    #[test]
    fn done_sent_ahead_of_ready_is_read_once_the_test_runs() {
        let s = settings(None);
        let t0 = Instant::now();
        let mut c = Conversation::new(t0, &s, [0; NONCE_LEN]);
        let done = encode_frame(&ClientMsg::Done).unwrap();
        c.on_bytes(&[hello(&[]), start(), done.clone()].concat(), t0);
        actions(&mut c);
        c.test_started(20000, t0);
        let a = actions(&mut c);
        assert_eq!(a.last(), Some(&Action::Finish));
        // More than a frame ahead is refused.
        let mut c = Conversation::new(t0, &s, [0; NONCE_LEN]);
        c.on_bytes(&[hello(&[]), start()].concat(), t0);
        actions(&mut c);
        c.on_bytes(&vec![0u8; 4 + MAX_FRAME as usize + 1], t0);
        assert_eq!(ending(&actions(&mut c)).unwrap().kind, EndKind::Protocol);
    }

    #[test]
    fn a_connection_dropped_from_the_pool_is_told_why() {
        let s = settings(None);
        let t0 = Instant::now();
        let mut c = Conversation::new(t0, &s, [0; NONCE_LEN]);
        c.on_bytes(&hello(&[])[..3], t0);
        c.dropped(&crate::probe::server::Refusal::Handshakes {
            waiting: 64,
            limit: 64,
        });
        let a = actions(&mut c);
        assert!(
            matches!(&a[0], Action::Send(f) if plain(f) == ServerMsg::Error { message: "server busy: dropped from the handshake pool, 64 connections waiting (--max-handshakes 64); try again".into() })
        );
        assert_eq!(ending(&a).unwrap().kind, EndKind::Dropped);
        c.on_bytes(&hello(&[]), t0);
        c.on_eof();
        assert!(actions(&mut c).is_empty(), "nothing after the end");
    }

    #[test]
    fn unexpected_messages_and_eof_end_the_conversation() {
        let s = settings(None);
        let t0 = Instant::now();
        let mut c = Conversation::new(t0, &s, [0; NONCE_LEN]);
        c.on_bytes(&encode_frame(&ClientMsg::Done).unwrap(), t0);
        let a = actions(&mut c);
        assert!(ending(&a).unwrap().message.contains("Done before Hello"));
        let mut c = running(&s, t0);
        c.on_bytes(&start(), t0);
        let a = actions(&mut c);
        assert!(ending(&a).unwrap().message.contains("instead of Done"));
        let mut c = running(&s, t0);
        c.on_eof();
        assert_eq!(
            actions(&mut c),
            vec![Action::Close(Ending {
                kind: EndKind::Gone,
                message: "the client closed the control connection during the test".into()
            })]
        );
    }
}
