//! The client side of the control protocol: connect, prove both ends know the
//! secret, start the test, and collect the server's report.

use super::settings::{RrError, CONNECT_TIMEOUT};
use crate::kernel::host::HostFacts;
use crate::probe::control::{
    self, ClientMsg, ControlError, Limits, Role, ServerMsg, ServerReport, Session, TestSpec, MAGIC,
    PROTOCOL_VERSION,
};
use crate::probe::path::PathOptions;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
/// A client's control connection.
pub struct ControlClient {
    stream: TcpStream,
    /// Seals every frame after the handshake when a secret is shared.
    session: Option<Session>,
    /// The server's host facts.
    pub server_host: HostFacts,
    /// The server's limits.
    pub limits: Limits,
}

impl ControlClient {
    /// Connect, check the version, and with a secret prove it and check the server's
    /// proof (a Welcome sealed under the session key only the secret's holder can
    /// derive).
    ///
    /// # Errors
    /// Unreachable, not rttlab, another version, authentication refused either way.
    pub fn connect(
        addr: SocketAddr,
        secret: Option<&[u8]>,
        path: &PathOptions,
    ) -> Result<Self, RrError> {
        Self::handshake(addr, secret, path).map_err(|e| match e {
            RrError::Control(ControlError::Io(io)) if cut_off(&io) => {
                RrError::ClosedInHandshake(addr)
            }
            RrError::Control(ControlError::Io(io))
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                RrError::NoGreeting(addr)
            }
            other => other,
        })
    }

    fn handshake(
        addr: SocketAddr,
        secret: Option<&[u8]>,
        path: &PathOptions,
    ) -> Result<Self, RrError> {
        let mut stream = connect_on(addr, path)?;
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(GREETING_TIMEOUT))
            .map_err(ControlError::Io)?;
        let client_nonce = control::nonce()?;
        control::write_msg(
            &mut stream,
            &ClientMsg::Hello {
                magic: MAGIC.into(),
                version: PROTOCOL_VERSION,
                nonce_hex: control::to_hex(&client_nonce),
            },
        )?;
        let first = control::read_first_server_msg(&mut stream)?;
        let (msg, session) = match (first, secret) {
            (ServerMsg::Challenge { nonce_hex }, Some(secret)) => {
                let server_nonce = control::from_hex(&nonce_hex)
                    .filter(|n| n.len() == control::NONCE_LEN)
                    .ok_or_else(|| ControlError::Malformed("bad nonce".into()))?;
                let mac_hex =
                    control::to_hex(&control::client_proof(secret, &client_nonce, &server_nonce));
                control::write_msg(&mut stream, &ClientMsg::Auth { mac_hex })?;
                let mut session =
                    Session::derive(secret, &client_nonce, &server_nonce, Role::Client);
                // A refusal comes as a plain Error; a Welcome must be sealed.
                let frame = read_sealed_or_error(&mut stream, &mut session)?;
                (frame, Some(session))
            }
            (ServerMsg::Challenge { .. }, None) => return Err(RrError::SecretRequired),
            (ServerMsg::Welcome { .. }, Some(_)) => {
                return Err(RrError::ServerUnauthenticated(addr))
            }
            (other, _) => (other, None),
        };
        match msg {
            ServerMsg::Welcome {
                version,
                host,
                limits,
            } => {
                if version != PROTOCOL_VERSION {
                    return Err(ControlError::Version {
                        ours: PROTOCOL_VERSION,
                        theirs: version,
                    }
                    .into());
                }
                Ok(Self {
                    stream,
                    session,
                    server_host: host,
                    limits,
                })
            }
            ServerMsg::Error { message } => Err(ControlError::Remote(message).into()),
            other => Err(ControlError::Unexpected(format!("{other:?}")).into()),
        }
    }

    fn send(&mut self, msg: &ClientMsg) -> Result<(), ControlError> {
        match &mut self.session {
            Some(s) => s.write(&mut self.stream, msg),
            None => control::write_msg(&mut self.stream, msg),
        }
    }

    fn recv(&mut self) -> Result<ServerMsg, ControlError> {
        match &mut self.session {
            Some(s) => s.read(&mut self.stream),
            None => control::read_msg(&mut self.stream),
        }
    }

    /// Ask for a test; returns the data port.
    ///
    /// # Errors
    /// The server refused the test or the connection failed.
    pub fn start(&mut self, spec: &TestSpec) -> Result<u16, RrError> {
        self.send(&ClientMsg::Start { spec: spec.clone() })?;
        match self.recv()? {
            ServerMsg::Ready { data_port } => Ok(data_port),
            ServerMsg::Error { message } => Err(ControlError::Remote(message).into()),
            other => Err(ControlError::Unexpected(format!("{other:?}")).into()),
        }
    }

    /// Say the test is over and collect the server's report, waiting at most `wait`.
    ///
    /// # Errors
    /// The server went away, did not answer in time, or answered with an error.
    pub fn finish(&mut self, wait: Duration) -> Result<ServerReport, RrError> {
        self.stream
            .set_read_timeout(Some(wait))
            .map_err(ControlError::Io)?;
        self.send(&ClientMsg::Done)?;
        match self.recv()? {
            ServerMsg::Result { report } => Ok(*report),
            ServerMsg::Error { message } => Err(ControlError::Remote(message).into()),
            other => Err(ControlError::Unexpected(format!("{other:?}")).into()),
        }
    }
}

/// The connection ended under a read or a write: closed (EOF inside a frame, "failed
/// to fill whole buffer") or reset by the peer.
fn cut_off(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(
        e.kind(),
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
    )
}

/// The frame after Auth: a sealed Welcome, or a plain Error when the server refused
/// our proof (it has no session to seal with then). Anything else is forged.
pub(super) fn read_sealed_or_error(
    stream: &mut TcpStream,
    session: &mut Session,
) -> Result<ServerMsg, ControlError> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let n = u32::from_be_bytes(len);
    if n > control::MAX_FRAME {
        return Err(ControlError::TooLarge {
            len: n,
            max: control::MAX_FRAME,
        });
    }
    let mut body = vec![0u8; n as usize];
    stream.read_exact(&mut body)?;
    if let Ok(ServerMsg::Error { message }) = control::decode::<ServerMsg>(&body) {
        return Err(ControlError::Remote(message));
    }
    let mut frame = len.to_vec();
    frame.extend_from_slice(&body);
    session.read(&mut &frame[..]).map_err(|e| match e {
        ControlError::Forged => ControlError::Remote(
            "the server could not prove it knows the secret (a different secret, or a relay in the middle)".into(),
        ),
        other => other,
    })
}

/// The control connection, on the path asked for (interface, source, mark): a path
/// this end cannot take (an address not its own, a mark without CAP_NET_ADMIN) is this
/// end's error, not an unreachable server.
fn connect_on(addr: SocketAddr, path: &PathOptions) -> Result<TcpStream, RrError> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(RrError::LocalPath)?;
    path.route(&sock, addr).map_err(RrError::LocalPath)?;
    sock.connect_timeout(&SockAddr::from(addr), CONNECT_TIMEOUT)
        .map_err(|source| RrError::Connect { addr, source })?;
    Ok(sock.into())
}

/// How long a server that accepted the control connection has to greet us: rttlab
/// serve answers at once; something else (netserver on 12865) never does.
const GREETING_TIMEOUT: Duration = Duration::from_secs(10);
