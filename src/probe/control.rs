//! The control protocol between `rttlab rr` and `rttlab serve`.
//!
//! A control connection carries frames: a 4-byte big-endian length, then that many
//! bytes of JSON. Frames over [`MAX_FRAME`] are refused before anything is allocated
//! for them. The conversation is
//!
//! ```text
//! client: Hello{magic, version}      server: Welcome{…} | Challenge{nonce} | Error
//! client: Auth{mac}   (if challenged) server: Welcome | Error (then close)
//! client: Start{spec}                 server: Ready{data_port} | Error
//!   … the test runs on the data port …
//! client: Done                        server: Result{report}
//! ```
//!
//! With a shared secret the server sends a random nonce and the client answers
//! HMAC-SHA256(secret, "rttlab-auth-v1" ‖ nonce), so a reachable server is not an open
//! load generator (netperf's netserver is).

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
/// Version of this protocol; both ends must speak the same one.
pub const PROTOCOL_VERSION: u32 = 1;
/// Largest control frame either side accepts.
pub const MAX_FRAME: u32 = 64 * 1024;
const AUTH_CONTEXT: &[u8] = b"rttlab-auth-v1";

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
    pub test: TestKind,
    pub request_size: u32,
    pub response_size: u32,
    /// Upper bound on the test's length; the server ends it after this plus a grace.
    pub max_duration_ms: u64,
    /// Longest pause the client makes between transactions (the server's idle
    /// timeout on data sockets is extended by it).
    pub interval_ms: u64,
    /// Data port to listen on; 0 lets the kernel choose.
    pub data_port: u16,
    pub streams: u32,
    pub nodelay: bool,
    pub thin_linear_timeouts: bool,
    /// Congestion control for the server's data sockets.
    pub congestion: Option<String>,
    /// CPU to pin the server's data threads to (netperf `-T ,RCPU`).
    pub server_cpu: Option<usize>,
    /// UDP_RR: the server drops one request in N on purpose (to test loss accounting).
    pub udp_drop_one_in: Option<u32>,
}

/// What the server measured, returned at the end of a test.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServerReport {
    pub transactions: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    /// TCP_CRR: connections accepted.
    pub connections: u64,
    /// UDP_RR: requests dropped because `udp_drop_one_in` said so.
    pub dropped_on_purpose: u64,
    /// `tcp_info` of each data socket just before the end (TCP_CRR: the last one).
    pub tcp_info: Vec<TcpInfo>,
    /// Sum of `total_retrans` over every data socket the server had.
    pub total_retrans: u64,
    pub congestion: Option<String>,
    pub placement: Placement,
    pub host: Option<HostFacts>,
}

/// The server's limits, announced in Welcome so a client can check before it asks.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Limits {
    pub max_payload: u32,
    pub max_streams: u32,
    pub max_duration_ms: u64,
    pub max_concurrent_tests: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_payload: 1 << 20,
            max_streams: 256,
            max_duration_ms: 3_600_000,
            max_concurrent_tests: 64,
        }
    }
}

/// Client → server.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMsg {
    Hello { magic: String, version: u32 },
    Auth { mac_hex: String },
    Start { spec: TestSpec },
    Done,
}

/// Server → client.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    Challenge {
        nonce_hex: String,
    },
    Welcome {
        version: u32,
        host: HostFacts,
        limits: Limits,
    },
    Ready {
        data_port: u16,
    },
    Result {
        report: Box<ServerReport>,
    },
    Error {
        message: String,
    },
}

/// Everything that can go wrong on a control connection.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Reading or writing the socket failed.
    #[error("control connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer announced a frame larger than [`MAX_FRAME`].
    #[error("control frame of {0} bytes exceeds the limit of {MAX_FRAME}")]
    TooLarge(u32),
    /// The frame is not a message of this protocol.
    #[error("malformed control message: {0}")]
    Malformed(String),
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: we speak {ours}, the peer {theirs}; use the same rttlab release on both ends")]
    Version { ours: u32, theirs: u32 },
    /// The peer is not rttlab.
    #[error("the peer is not an rttlab server or client (bad magic)")]
    NotRttlab,
    /// The peer reported an error.
    #[error("server: {0}")]
    Remote(String),
    /// A message arrived that does not fit the conversation.
    #[error("unexpected control message: {0}")]
    Unexpected(String),
}

/// Decode one frame's body.
///
/// # Errors
/// Not a valid message.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ControlError> {
    serde_json::from_slice(body).map_err(|e| ControlError::Malformed(e.to_string()))
}

/// Write one message as a frame.
///
/// # Errors
/// The socket failed or the message is too large (a bug).
pub fn write_msg<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), ControlError> {
    let body = serde_json::to_vec(msg).map_err(|e| ControlError::Malformed(e.to_string()))?;
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    if len > MAX_FRAME {
        return Err(ControlError::TooLarge(len));
    }
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Read one frame and decode it.
///
/// # Errors
/// The socket failed or timed out, the frame is too large, or not a valid message.
pub fn read_msg<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<T, ControlError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME {
        return Err(ControlError::TooLarge(len));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    decode(&body)
}

/// HMAC-SHA256 of the nonce under the shared secret.
pub fn auth_mac(secret: &[u8], nonce: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(AUTH_CONTEXT);
    mac.update(nonce);
    mac.finalize().into_bytes().to_vec()
}

/// Check a client's answer in constant time.
pub fn auth_verify(secret: &[u8], nonce: &[u8], answer: &[u8]) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(AUTH_CONTEXT);
    mac.update(nonce);
    mac.verify_slice(answer).is_ok()
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
        assert!(matches!(r, Err(ControlError::TooLarge(n)) if n == MAX_FRAME + 1));
    }

    #[test]
    fn garbage_and_truncation_are_errors_not_panics() {
        let mut buf = 5u32.to_be_bytes().to_vec();
        buf.extend_from_slice(b"hello");
        assert!(matches!(
            read_msg::<_, ClientMsg>(&mut &buf[..]),
            Err(ControlError::Malformed(_))
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
    fn hmac_accepts_the_secret_and_nothing_else() {
        let nonce = [7u8; 32];
        let mac = auth_mac(b"s3cret", &nonce);
        assert!(auth_verify(b"s3cret", &nonce, &mac));
        assert!(!auth_verify(b"other", &nonce, &mac));
        assert!(!auth_verify(b"s3cret", &[8u8; 32], &mac));
        assert!(!auth_verify(b"s3cret", &nonce, &mac[..31]));
        assert_eq!(from_hex(&to_hex(&mac)), Some(mac));
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex("abc"), None);
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
