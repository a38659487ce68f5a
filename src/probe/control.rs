//! The control protocol between `rttlab rr` and `rttlab serve`.
//!
//! A control connection carries frames: a 4-byte big-endian length, then that many
//! bytes of JSON. Frames over the reader's limit ([`MAX_HANDSHAKE_FRAME`] until the
//! handshake is over, [`MAX_FRAME`] after) are refused before anything is allocated
//! for them. The conversation is
//!
//! ```text
//! client: Hello{magic, version, nonce} server: Welcome{…} | Challenge{nonce} | Error
//! client: Auth{mac}   (if challenged)  server: Welcome (sealed) | Error (then close)
//! client: Start{spec}                  server: Ready{data_port} | Error
//!   … the test runs on the data port …
//! client: Done                         server: Result{report}
//! ```
//!
//! With a shared secret both ends prove they know it, and the proof is bound to this
//! connection (see [`Session`]): the client answers the server's nonce with
//! HMAC-SHA256(secret, "rttlab-auth-v2 client" ‖ client nonce ‖ server nonce), and from
//! Welcome on every frame in either direction carries an HMAC under a session key
//! derived from both nonces, with a per-direction sequence number. A server that does
//! not know the secret cannot produce a valid Welcome, and a relay in the middle can
//! neither alter, replay, reorder nor inject a frame after the handshake. Nothing is
//! encrypted: the secret buys authentication, not confidentiality. A reachable server
//! with a secret is therefore not an open load generator (netperf's netserver is).

use crate::kernel::cpu::Placement;
use crate::kernel::host::HostFacts;
use crate::kernel::tcp_info::TcpInfo;
use hmac::{Hmac, Mac};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use sha2::Sha256;
use std::io::{Read, Write};

/// Default TCP port of `rttlab serve` (netperf's 12865, plus one).
pub const DEFAULT_CONTROL_PORT: u16 = 12866;
/// First bytes of every Hello, so a wrong peer is told apart from a wrong version.
pub const MAGIC: &str = "rttlab";
/// Version of this protocol; both ends must speak the same one. Version 2 added the
/// client nonce, the server's proof and sealed frames.
pub const PROTOCOL_VERSION: u32 = 2;
/// Largest control frame either side accepts once the handshake is over (a server's
/// report carries one `tcp_info` per stream).
pub const MAX_FRAME: u32 = 256 * 1024;
/// Largest frame a server reads before a client has completed the handshake: Hello,
/// Auth and Start are a few hundred bytes, so an unauthenticated peer cannot make the
/// server allocate more than this per connection.
pub const MAX_HANDSHAKE_FRAME: u32 = 4 * 1024;
/// Bytes in each side's nonce.
pub const NONCE_LEN: usize = 32;
const CLIENT_PROOF_CONTEXT: &[u8] = b"rttlab-auth-v2 client";
const SESSION_CONTEXT: &[u8] = b"rttlab-session-v2";
/// Bytes of the HMAC-SHA256 tag in front of a sealed frame's JSON.
const TAG_LEN: usize = 32;
/// What sealing adds to a frame's body: its tag.
pub const SEAL_LEN: u32 = TAG_LEN as u32;

/// The request/response tests.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum TestKind {
    /// One TCP connection, request and response back and forth (netperf TCP_RR).
    #[serde(rename = "TCP_RR")]
    TcpRr,
    /// The same over UDP, with per-request timeouts (netperf UDP_RR).
    #[serde(rename = "UDP_RR")]
    UdpRr,
    /// A new TCP connection per transaction (netperf TCP_CRR).
    #[serde(rename = "TCP_CRR")]
    TcpCrr,
}

impl TestKind {
    /// netperf's name.
    pub fn name(self) -> &'static str {
        match self {
            TestKind::TcpRr => "TCP_RR",
            TestKind::UdpRr => "UDP_RR",
            TestKind::TcpCrr => "TCP_CRR",
        }
    }
}

/// What the client asks the server to run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TestSpec {
    /// Which test to run.
    pub test: TestKind,
    /// Bytes in each request (`rr -r REQ,RESP`); at most the server's `max_payload`.
    pub request_size: u32,
    /// Bytes in each response (`rr -r REQ,RESP`); at most the server's `max_payload`.
    pub response_size: u32,
    /// Upper bound on the test's length; the server ends it after this plus a grace.
    pub max_duration_ms: u64,
    /// Longest pause the client makes between transactions (the server's idle
    /// timeout on data sockets is extended by it).
    pub interval_ms: u64,
    /// Data port to listen on; 0 lets the kernel choose.
    pub data_port: u16,
    /// Parallel data connections (`rr --streams`); at most the server's `max_streams`.
    pub streams: u32,
    /// Set TCP_NODELAY on the server's data sockets (rttlab's client always asks for it).
    pub nodelay: bool,
    /// Set TCP_THIN_LINEAR_TIMEOUTS on the server's data sockets
    /// (`rr --thin-linear-timeouts`).
    pub thin_linear_timeouts: bool,
    /// Congestion control for the server's data sockets.
    pub congestion: Option<String>,
    /// CPU to pin the server's data threads to (netperf `-T ,RCPU`).
    pub server_cpu: Option<usize>,
    /// UDP_RR: the server drops one request in N on purpose (to test loss accounting).
    pub udp_drop_one_in: Option<u32>,
    /// The TOS byte (DSCP) the server's data sockets send with, as the client's: a
    /// traffic class is measured both ways. ECN's two bits are the kernel's and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    /// `rr --anatomy`: the server stamps its data sockets and returns its part of each
    /// transaction in the next response (`probe::anatomy`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub anatomy: bool,
    /// The server waits this long between reading a request and answering it (a
    /// server that thinks), µs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub server_delay_us: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The longest `server_delay_us` a server accepts: a test of a thinking server, not
/// a way to hold its threads.
pub const MAX_SERVER_DELAY_US: u64 = 1_000_000;

impl TestSpec {
    /// One stream of `test` with these sizes and length, nothing else asked for: the
    /// server chooses the data port, its default congestion control and CPUs.
    pub fn basic(
        test: TestKind,
        request_size: u32,
        response_size: u32,
        max_duration_ms: u64,
    ) -> Self {
        Self {
            test,
            request_size,
            response_size,
            max_duration_ms,
            interval_ms: 0,
            data_port: 0,
            streams: 1,
            nodelay: true,
            thin_linear_timeouts: false,
            congestion: None,
            server_cpu: None,
            udp_drop_one_in: None,
            tos: None,
            anatomy: false,
            server_delay_us: 0,
        }
    }
}

/// What the server measured, returned at the end of a test.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServerReport {
    /// Requests answered, over every stream.
    pub transactions: u64,
    /// Request bytes: requests received × `request_size`, computed rather than counted
    /// (UDP_RR: the requests dropped on purpose included).
    pub bytes_received: u64,
    /// Response bytes: responses sent × `response_size`, computed rather than counted.
    pub bytes_sent: u64,
    /// TCP_CRR: connections accepted.
    pub connections: u64,
    /// UDP_RR: requests dropped because `udp_drop_one_in` said so.
    pub dropped_on_purpose: u64,
    /// `tcp_info` of each data socket just before the end (TCP_CRR: the last one).
    pub tcp_info: Vec<TcpInfo>,
    /// Sum of `total_retrans` over every data socket the server had.
    pub total_retrans: u64,
    /// Congestion control of the data sockets: read from the first one, else the one the
    /// spec asked for; `None` when neither.
    pub congestion: Option<String>,
    /// Where the server's data threads ran: the CPU pinned to, the CPUs allowed and seen.
    pub placement: Placement,
    /// The server's machine; `None` when no test was running when Done came.
    pub host: Option<HostFacts>,
    /// The server machine's CPU ticks when the test started and ended (netperf's
    /// `-C`: netserver measures its own machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_ticks: Option<[crate::kernel::cpu::MachineTicks; 2]>,
    /// The wall time between those two readings, ns (netserver's elapsed time, which
    /// netperf's remote service demand is computed with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_elapsed_ns: Option<u64>,
    /// `--anatomy` (TCP_RR, UDP_RR): each stream's last transaction as the server saw
    /// it, which no response carried back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_parts: Vec<crate::probe::anatomy::LastPart>,
}

/// A range of ports, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRange {
    /// First port of the range (included).
    pub low: u16,
    /// Last port of the range (included).
    pub high: u16,
}

impl PortRange {
    /// The default data ports: above netperf's and rttlab's control ports and below
    /// Linux's default ephemeral range (32768–60999, `net.ipv4.ip_local_port_range`),
    /// so a data port never collides with the source port of an outgoing connection.
    pub const DEFAULT: PortRange = PortRange {
        low: 12867,
        high: 32767,
    };
    /// Every unprivileged port (servers inside a lab or a single run's own process).
    pub const UNPRIVILEGED: PortRange = PortRange {
        low: 1024,
        high: 65535,
    };

    /// Whether `port` is inside.
    pub fn contains(self, port: u16) -> bool {
        (self.low..=self.high).contains(&port)
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.low, self.high)
    }
}

/// A `--data-ports` value that is not a range of unprivileged ports.
#[derive(Debug, thiserror::Error)]
pub enum PortRangeError {
    /// No `-`.
    #[error("{0:?}: expected LOW-HIGH, e.g. 12867-32767")]
    Syntax(String),
    /// An end that is not a port number.
    #[error("{0:?} is not a port number")]
    Port(String),
    /// A privileged port.
    #[error("data ports must be 1024 or above (privileged ports are never served), not {0}")]
    Privileged(u16),
    /// LOW above HIGH.
    #[error("{0}: the low port is above the high one")]
    Reversed(String),
}

impl std::str::FromStr for PortRange {
    type Err = PortRangeError;
    fn from_str(s: &str) -> Result<Self, PortRangeError> {
        let (low, high) = s
            .split_once('-')
            .ok_or_else(|| PortRangeError::Syntax(s.into()))?;
        let parse = |v: &str| {
            v.trim()
                .parse::<u16>()
                .map_err(|_| PortRangeError::Port(v.into()))
        };
        let r = PortRange {
            low: parse(low)?,
            high: parse(high)?,
        };
        if r.low < 1024 {
            return Err(PortRangeError::Privileged(r.low));
        }
        if r.low > r.high {
            return Err(PortRangeError::Reversed(s.into()));
        }
        Ok(r)
    }
}

/// The server's limits, announced in Welcome so a client can check before it asks.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Limits {
    /// Largest request or response, bytes (`serve --max-payload`).
    pub max_payload: u32,
    /// Most parallel streams in one test (`serve --max-streams`).
    pub max_streams: u32,
    /// Longest test a client may announce, ms (`serve --max-duration`).
    pub max_duration_ms: u64,
    /// Longest interval plus per-request timeout a test may announce: the server waits
    /// this long on a quiet data socket, so it bounds how long a test can idle.
    pub max_interval_ms: u64,
    /// Most tests served at once (`serve --max-tests`).
    pub max_concurrent_tests: u32,
    /// Data ports a client may ask for; with port 0 the server picks one of them.
    pub data_ports: PortRange,
}

impl Default for Limits {
    /// Sized for a production host that others can reach: request/response payloads
    /// up to 64 KiB (netperf's RR tests use bytes to a few KiB), 64 streams, one-hour
    /// tests, 32 at once (within the memory budget), intervals up to a minute.
    fn default() -> Self {
        Self {
            max_payload: 64 << 10,
            max_streams: 64,
            max_duration_ms: 3_600_000,
            max_interval_ms: 60_000,
            max_concurrent_tests: 32,
            data_ports: PortRange::DEFAULT,
        }
    }
}

impl Limits {
    /// The limits of a server that serves one run of its own (in a lab namespace or
    /// on loopback for the run's lifetime): the experiments' hundreds of streams and
    /// any unprivileged data port.
    pub fn own_run() -> Self {
        Self {
            max_payload: 1 << 20,
            max_streams: 1024,
            max_concurrent_tests: 64,
            data_ports: PortRange::UNPRIVILEGED,
            ..Self::default()
        }
    }
}

/// Client → server.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMsg {
    /// The first frame: the client names its protocol and version and brings its nonce.
    Hello {
        /// Must be [`MAGIC`].
        magic: String,
        /// The client's [`PROTOCOL_VERSION`]; the server refuses any other.
        version: u32,
        /// The client's nonce, hex (absent from version-1 clients, which are then told
        /// their version is wrong rather than that their Hello is malformed).
        #[serde(default)]
        nonce_hex: String,
    },
    /// The answer to a Challenge: proof that the client knows the secret.
    Auth {
        /// [`client_proof`] of both nonces, hex.
        mac_hex: String,
    },
    /// Ask for a test; the server answers Ready or Error.
    Start {
        /// The test to run.
        spec: TestSpec,
    },
    /// The client's transactions are over: the server stops the test and answers Result.
    Done,
}

/// Server → client.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    /// The server has a secret: the client must answer with Auth.
    Challenge {
        /// The server's nonce ([`NONCE_LEN`] bytes), hex.
        nonce_hex: String,
    },
    /// The handshake is over (sealed when a secret was proved); the client may send Start.
    Welcome {
        /// The server's [`PROTOCOL_VERSION`], checked before the rest is decoded.
        version: u32,
        /// The server's machine.
        host: HostFacts,
        /// What the server accepts, so the client can check its test first.
        limits: Limits,
    },
    /// The test is set up; the client opens its streams to the data port.
    Ready {
        /// The server's data port for this test.
        data_port: u16,
    },
    /// The answer to Done: what the server measured.
    Result {
        /// The server's counters, `tcp_info` and placement.
        report: Box<ServerReport>,
    },
    /// A refusal or a protocol failure; the server then closes the connection.
    Error {
        /// One line saying why.
        message: String,
    },
}

/// Everything that can go wrong on a control connection.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Reading or writing the socket failed.
    #[error("control connection")]
    Io(#[from] std::io::Error),
    /// The peer announced a frame larger than the limit where it was read
    /// ([`MAX_FRAME`], or [`MAX_HANDSHAKE_FRAME`] during the handshake).
    #[error("control frame of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Bytes the frame's header announced.
        len: u32,
        /// The limit it was read under.
        max: u32,
    },
    /// The frame is not a message of this protocol.
    #[error("malformed control message: {0}")]
    Malformed(String),
    /// The frame is not JSON of a message of this protocol.
    #[error("malformed control message")]
    Json(#[from] serde_json::Error),
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: we speak {ours}, the peer {theirs}; use the same rttlab release on both ends")]
    Version {
        /// This end's [`PROTOCOL_VERSION`].
        ours: u32,
        /// The version the peer announced.
        theirs: u32,
    },
    /// The peer is not rttlab.
    #[error("the peer is not an rttlab server or client (bad magic)")]
    NotRttlab,
    /// The peer reported an error.
    #[error("server: {0}")]
    Remote(String),
    /// A sealed frame's tag did not verify: altered, replayed, reordered or injected.
    #[error("a control frame failed authentication (altered, replayed or injected on the way); the test is ended")]
    Forged,
    /// A message arrived that does not fit the conversation.
    #[error("unexpected control message: {0}")]
    Unexpected(String),
}

/// Decode one frame's body.
///
/// # Errors
/// Not a valid message.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ControlError> {
    Ok(serde_json::from_slice(body)?)
}

/// Read a server's first message. Its version is checked before the rest is decoded,
/// so a server of another release is named as such even when its Welcome has other
/// fields than ours.
///
/// # Errors
/// The socket failed, the frame is too large, another version, or not a message.
pub fn read_first_server_msg<R: Read>(r: &mut R) -> Result<ServerMsg, ControlError> {
    let body = read_frame(r, MAX_FRAME)?;
    #[derive(Deserialize)]
    struct Versioned {
        version: Option<u32>,
    }
    if let Ok(Versioned {
        version: Some(theirs),
    }) = serde_json::from_slice(&body)
    {
        if theirs != PROTOCOL_VERSION {
            return Err(ControlError::Version {
                ours: PROTOCOL_VERSION,
                theirs,
            });
        }
    }
    decode(&body)
}

/// Write one message as a frame.
///
/// # Errors
/// The socket failed or the message is too large (a bug).
pub fn write_msg<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), ControlError> {
    let body = serde_json::to_vec(msg)?;
    write_frame(w, &body, MAX_FRAME)
}

/// One message as the bytes of its frame, for a caller that writes them itself (the
/// server's conversation, which does no I/O).
///
/// # Errors
/// The message is too large (a bug).
pub fn encode_frame<T: Serialize>(msg: &T) -> Result<Vec<u8>, ControlError> {
    frame_of(&serde_json::to_vec(msg)?, MAX_FRAME)
}

fn frame_of(body: &[u8], max: u32) -> Result<Vec<u8>, ControlError> {
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    if len > max {
        return Err(ControlError::TooLarge { len, max });
    }
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(body);
    Ok(frame)
}

fn write_frame<W: Write>(w: &mut W, body: &[u8], max: u32) -> Result<(), ControlError> {
    w.write_all(&frame_of(body, max)?)?;
    w.flush()?;
    Ok(())
}

/// The length of the frame at the start of `buf`, its 4-byte header included, as soon
/// as the header is there (`None` before); a frame announcing more than `max` bytes is
/// refused from its header alone, before any of its body is awaited.
///
/// # Errors
/// [`ControlError::TooLarge`].
pub fn frame_len(buf: &[u8], max: u32) -> Result<Option<usize>, ControlError> {
    let Some(head) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(*head);
    if len > max {
        return Err(ControlError::TooLarge { len, max });
    }
    Ok(Some(4 + len as usize))
}

/// Read one frame of at most `max` bytes and decode it.
///
/// # Errors
/// The socket failed or timed out, the frame is too large, or not a valid message.
pub fn read_msg_limited<R: Read, T: DeserializeOwned>(
    r: &mut R,
    max: u32,
) -> Result<T, ControlError> {
    decode(&read_frame(r, max)?)
}

/// Read one frame and decode it.
///
/// # Errors
/// The socket failed or timed out, the frame is too large, or not a valid message.
pub fn read_msg<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<T, ControlError> {
    read_msg_limited(r, MAX_FRAME)
}

/// One frame's body, refused before allocation when it announces more than `max` bytes.
fn read_frame<R: Read>(r: &mut R, max: u32) -> Result<Vec<u8>, ControlError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len);
    if len > max {
        return Err(ControlError::TooLarge { len, max });
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok(body)
}

fn hmac(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length")
}

/// The client's proof: HMAC-SHA256 of both nonces under the shared secret.
pub fn client_proof(secret: &[u8], client_nonce: &[u8], server_nonce: &[u8]) -> Vec<u8> {
    let mut mac = hmac(secret);
    mac.update(CLIENT_PROOF_CONTEXT);
    mac.update(client_nonce);
    mac.update(server_nonce);
    mac.finalize().into_bytes().to_vec()
}

/// Check a client's proof in constant time.
pub fn verify_client_proof(
    secret: &[u8],
    client_nonce: &[u8],
    server_nonce: &[u8],
    answer: &[u8],
) -> bool {
    let mut mac = hmac(secret);
    mac.update(CLIENT_PROOF_CONTEXT);
    mac.update(client_nonce);
    mac.update(server_nonce);
    mac.verify_slice(answer).is_ok()
}

/// Which end of the connection a [`Session`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The end that sends Hello (`rttlab rr`).
    Client,
    /// The end that answers it (`rttlab serve`).
    Server,
}

/// The authenticated part of a conversation: every frame after the handshake carries
/// HMAC-SHA256(key, direction ‖ sequence ‖ body) in front of its JSON, the key being
/// HMAC-SHA256(secret, "rttlab-session-v2" ‖ client nonce ‖ server nonce). The
/// direction byte stops a frame being reflected back to its sender; the sequence
/// number, counted separately each way, stops replay and reordering; both nonces make
/// the key new for every connection.
pub struct Session {
    key: [u8; 32],
    role: Role,
    sent: u64,
    received: u64,
}

impl Session {
    /// The session of one connection, for one end of it.
    pub fn derive(secret: &[u8], client_nonce: &[u8], server_nonce: &[u8], role: Role) -> Self {
        let mut mac = hmac(secret);
        mac.update(SESSION_CONTEXT);
        mac.update(client_nonce);
        mac.update(server_nonce);
        Self {
            key: mac.finalize().into_bytes().into(),
            role,
            sent: 0,
            received: 0,
        }
    }

    fn mac(&self, from: Role, seq: u64, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = hmac(&self.key);
        mac.update(&[match from {
            Role::Client => b'C',
            Role::Server => b'S',
        }]);
        mac.update(&seq.to_be_bytes());
        mac.update(body);
        mac
    }

    /// Write `msg` as a sealed frame.
    ///
    /// # Errors
    /// The socket failed or the message is too large (a bug).
    pub fn write<W: Write, T: Serialize>(
        &mut self,
        w: &mut W,
        msg: &T,
    ) -> Result<(), ControlError> {
        w.write_all(&self.seal(msg)?)?;
        w.flush()?;
        Ok(())
    }

    /// `msg` as the bytes of a sealed frame, for a caller that writes them itself.
    ///
    /// # Errors
    /// The message is too large (a bug).
    pub fn seal<T: Serialize>(&mut self, msg: &T) -> Result<Vec<u8>, ControlError> {
        let body = serde_json::to_vec(msg)?;
        let tag = self
            .mac(self.role, self.sent, &body)
            .finalize()
            .into_bytes();
        let mut sealed = Vec::with_capacity(TAG_LEN + body.len());
        sealed.extend_from_slice(&tag);
        sealed.extend_from_slice(&body);
        let frame = frame_of(&sealed, MAX_FRAME + SEAL_LEN)?;
        self.sent += 1;
        Ok(frame)
    }

    /// Read one sealed frame and decode it.
    ///
    /// # Errors
    /// The socket failed, the frame is too large, its tag does not verify
    /// ([`ControlError::Forged`]), or it is not a valid message.
    pub fn read<R: Read, T: DeserializeOwned>(&mut self, r: &mut R) -> Result<T, ControlError> {
        self.open(&read_frame(r, MAX_FRAME + SEAL_LEN)?)
    }

    /// Verify and decode one sealed frame's body (the bytes after its length).
    ///
    /// # Errors
    /// Its tag does not verify ([`ControlError::Forged`]), or it is not a valid message.
    pub fn open<T: DeserializeOwned>(&mut self, frame: &[u8]) -> Result<T, ControlError> {
        let (tag, body) = frame
            .split_at_checked(TAG_LEN)
            .ok_or(ControlError::Forged)?;
        let peer = match self.role {
            Role::Client => Role::Server,
            Role::Server => Role::Client,
        };
        self.mac(peer, self.received, body)
            .verify_slice(tag)
            .map_err(|_| ControlError::Forged)?;
        self.received += 1;
        decode(body)
    }
}

/// A fresh random nonce.
///
/// # Errors
/// The kernel's random source failed.
pub fn nonce() -> Result<[u8; NONCE_LEN], ControlError> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::getrandom(&mut n).map_err(|e| {
        ControlError::Io(std::io::Error::other(format!(
            "no randomness for a nonce: {e}"
        )))
    })?;
    Ok(n)
}

/// Lower-case hex.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parse lower- or upper-case hex; `None` on anything else.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || s.len() > 1024 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        let m = ClientMsg::Hello {
            magic: MAGIC.into(),
            version: PROTOCOL_VERSION,
            nonce_hex: to_hex(&[1; NONCE_LEN]),
        };
        write_msg(&mut buf, &m).unwrap();
        assert_eq!(&buf[..4], &((buf.len() - 4) as u32).to_be_bytes());
        let back: ClientMsg = read_msg(&mut &buf[..]).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn oversized_frame_is_refused_before_reading_it() {
        let mut buf = (MAX_FRAME + 1).to_be_bytes().to_vec();
        buf.extend_from_slice(b"{}");
        let r: Result<ClientMsg, _> = read_msg(&mut &buf[..]);
        assert!(
            matches!(r, Err(ControlError::TooLarge { len, max }) if len == MAX_FRAME + 1 && max == MAX_FRAME)
        );
    }

    #[test]
    fn garbage_and_truncation_are_errors_not_panics() {
        let mut buf = 5u32.to_be_bytes().to_vec();
        buf.extend_from_slice(b"hello");
        assert!(matches!(
            read_msg::<_, ClientMsg>(&mut &buf[..]),
            Err(ControlError::Json(_))
        ));
        assert!(matches!(
            read_msg::<_, ClientMsg>(&mut &buf[..6]),
            Err(ControlError::Io(_))
        ));
        assert!(matches!(
            read_msg::<_, ClientMsg>(&mut &[0u8, 0][..]),
            Err(ControlError::Io(_))
        ));
    }

    #[test]
    fn client_proof_accepts_the_secret_and_these_nonces_only() {
        let (cn, sn) = ([7u8; 32], [9u8; 32]);
        let mac = client_proof(b"s3cret", &cn, &sn);
        assert!(verify_client_proof(b"s3cret", &cn, &sn, &mac));
        assert!(!verify_client_proof(b"other", &cn, &sn, &mac));
        assert!(!verify_client_proof(b"s3cret", &sn, &cn, &mac));
        assert!(!verify_client_proof(b"s3cret", &[8u8; 32], &sn, &mac));
        assert!(!verify_client_proof(b"s3cret", &cn, &sn, &mac[..31]));
        assert_eq!(from_hex(&to_hex(&mac)), Some(mac));
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex("abc"), None);
    }

    fn pair(secret: &[u8]) -> (Session, Session) {
        let (cn, sn) = ([1u8; 32], [2u8; 32]);
        (
            Session::derive(secret, &cn, &sn, Role::Client),
            Session::derive(secret, &cn, &sn, Role::Server),
        )
    }

    #[test]
    fn sealed_frames_pass_between_the_two_ends_of_one_session() {
        let (mut client, mut server) = pair(b"k");
        let mut wire = Vec::new();
        for _ in 0..3 {
            client.write(&mut wire, &ClientMsg::Done).unwrap();
        }
        let mut r = &wire[..];
        for _ in 0..3 {
            assert_eq!(
                server.read::<_, ClientMsg>(&mut r).unwrap(),
                ClientMsg::Done
            );
        }
        let mut back = Vec::new();
        server
            .write(&mut back, &ServerMsg::Ready { data_port: 5 })
            .unwrap();
        assert_eq!(
            client.read::<_, ServerMsg>(&mut &back[..]).unwrap(),
            ServerMsg::Ready { data_port: 5 }
        );
    }

    #[test]
    fn altered_replayed_reflected_or_foreign_frames_are_forged() {
        let start = ClientMsg::Start {
            spec: TestSpec::basic(TestKind::TcpRr, 1, 1, 1000),
        };
        // Altered: one byte of the JSON changed (1 byte → 2 bytes of request).
        let (mut client, mut server) = pair(b"k");
        let mut wire = Vec::new();
        client.write(&mut wire, &start).unwrap();
        let at = wire
            .windows(16)
            .position(|w| w == b"\"request_size\":1")
            .unwrap();
        wire[at + 15] = b'2';
        assert!(matches!(
            server.read::<_, ClientMsg>(&mut &wire[..]),
            Err(ControlError::Forged)
        ));
        // Replayed: the same valid frame twice.
        let (mut client, mut server) = pair(b"k");
        let mut wire = Vec::new();
        client.write(&mut wire, &ClientMsg::Done).unwrap();
        assert!(server.read::<_, ClientMsg>(&mut &wire[..]).is_ok());
        assert!(matches!(
            server.read::<_, ClientMsg>(&mut &wire[..]),
            Err(ControlError::Forged)
        ));
        // Reflected: a client frame fed back to the client.
        let (mut client, _) = pair(b"k");
        let mut wire = Vec::new();
        client.write(&mut wire, &ClientMsg::Done).unwrap();
        assert!(matches!(
            client.read::<_, ClientMsg>(&mut &wire[..]),
            Err(ControlError::Forged)
        ));
        // Another secret, or a plain frame where a sealed one is due.
        let (mut client, _) = pair(b"k");
        let (_, mut other) = pair(b"not k");
        let mut wire = Vec::new();
        client.write(&mut wire, &ClientMsg::Done).unwrap();
        assert!(matches!(
            other.read::<_, ClientMsg>(&mut &wire[..]),
            Err(ControlError::Forged)
        ));
        let (_, mut server) = pair(b"k");
        let mut plain = Vec::new();
        write_msg(&mut plain, &ClientMsg::Done).unwrap();
        assert!(matches!(
            server.read::<_, ClientMsg>(&mut &plain[..]),
            Err(ControlError::Forged)
        ));
    }

    #[test]
    fn a_version_one_hello_decodes_so_its_version_can_be_named() {
        let old = br#"{"type":"hello","magic":"rttlab","version":1}"#;
        let m: ClientMsg = decode(old).unwrap();
        assert!(matches!(m, ClientMsg::Hello { version: 1, .. }));
    }

    #[test]
    fn handshake_frames_have_their_own_small_limit() {
        let mut buf = (MAX_HANDSHAKE_FRAME + 1).to_be_bytes().to_vec();
        buf.extend_from_slice(&[b' '; 8]);
        let r: Result<ClientMsg, _> = read_msg_limited(&mut &buf[..], MAX_HANDSHAKE_FRAME);
        let e = r.unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "control frame of {} bytes exceeds the limit of {MAX_HANDSHAKE_FRAME}",
                MAX_HANDSHAKE_FRAME + 1
            ),
            "the handshake's limit is the one named"
        );
    }

    #[test]
    fn a_frame_is_measured_from_its_header_and_refused_by_it() {
        let frame = encode_frame(&ClientMsg::Done).unwrap();
        assert_eq!(frame_len(&frame[..3], 100).unwrap(), None);
        assert_eq!(frame_len(&frame[..4], 100).unwrap(), Some(frame.len()));
        assert!(matches!(
            frame_len(&frame, 3),
            Err(ControlError::TooLarge { len, max: 3 }) if len as usize == frame.len() - 4
        ));
        let back: ClientMsg = decode(&frame[4..]).unwrap();
        assert_eq!(back, ClientMsg::Done);
    }

    #[test]
    fn sealed_bytes_open_at_the_other_end_once() {
        let (mut client, mut server) = pair(b"k");
        let frame = client.seal(&ClientMsg::Done).unwrap();
        assert_eq!(
            frame_len(&frame, MAX_FRAME + SEAL_LEN).unwrap(),
            Some(frame.len())
        );
        assert_eq!(
            server.open::<ClientMsg>(&frame[4..]).unwrap(),
            ClientMsg::Done
        );
        assert!(matches!(
            server.open::<ClientMsg>(&frame[4..]),
            Err(ControlError::Forged)
        ));
    }

    proptest::proptest! {
        /// Whatever a peer sends, reading a frame returns a message or an error.
        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = read_msg::<_, ClientMsg>(&mut &bytes[..]);
            let _ = read_msg::<_, ServerMsg>(&mut &bytes[..]);
        }
    }

    #[test]
    fn test_names_are_netperfs() {
        let j = serde_json::to_string(&TestKind::TcpCrr).unwrap();
        assert_eq!(j, "\"TCP_CRR\"");
    }
}
