//! The lab's socket: one JSON request per line on a Unix socket in the lab's
//! state directory, one JSON reply per line. `lab set`, `lab list` and `lab down` use
//! it to reach the process that runs the emulator, whether that is a `lab up` daemon
//! or an experiment holding a [`super::Lab`].

use super::emulator::{CounterSnapshot, Dir};
use super::impair::{Blackout, ImpairmentPatch, Impairments};
use super::topology::LabInfo;
use super::LabError;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// When a blackout starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Start {
    /// When the emulator's controller handles the request.
    Now,
    /// This long after that.
    After { ns: u64 },
    /// At this CLOCK_REALTIME time.
    At { realtime_ns: u64 },
}

/// A request to the lab's owner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Status,
    /// `link`: a star's host whose link changes; `None`: every link.
    Set {
        #[serde(default)]
        link: Option<String>,
        dirs: Vec<Dir>,
        patch: ImpairmentPatch,
    },
    Blackout {
        #[serde(default)]
        link: Option<String>,
        dirs: Vec<Dir>,
        duration_ns: u64,
        port: Option<u16>,
        start: Start,
    },
    Shutdown,
}

/// The state of a running lab.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub info: LabInfo,
    /// `running`, or why the emulator stopped.
    pub emulator: String,
    pub a2b: DirStatus,
    pub b2a: DirStatus,
    /// A star's links, host by host (`a2b`/`b2a` above are `a`'s up and down).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkStatus>,
}

/// One link of a star: `up` from the host into the hub, `down` back to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkStatus {
    pub host: String,
    pub up: DirStatus,
    pub down: DirStatus,
}

/// One direction's impairments, scheduled blackouts and counters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirStatus {
    pub impairments: Impairments,
    pub blackouts: Vec<Blackout>,
    pub counters: CounterSnapshot,
}

/// A reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Ok,
    Status(Box<Status>),
    Blackout { window: Blackout },
    Error { message: String },
}

/// Send one request to the lab whose socket is `path`.
///
/// # Errors
/// The socket is gone or silent (the owner died), or the owner answered with an error.
pub fn request(path: &Path, req: &Request) -> Result<Reply, LabError> {
    let gone = |e: std::io::Error| LabError::Unreachable {
        path: path.display().to_string(),
        source: e.into(),
    };
    let mut s = UnixStream::connect(path).map_err(gone)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(gone)?;
    let mut line = serde_json::to_vec(req).map_err(super::setup("encoding a control request"))?;
    line.push(b'\n');
    s.write_all(&line).map_err(gone)?;
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).map_err(gone)?;
    match serde_json::from_str(&reply) {
        Ok(Reply::Error { message }) => Err(LabError::Refused(message)),
        Ok(r) => Ok(r),
        Err(e) => Err(LabError::Unreachable {
            path: path.display().to_string(),
            source: format!("its reply is not one this rttlab understands: {e}").into(),
        }),
    }
}

/// Serve requests on `listener` with `handle` until `stop` is set (wake the accept
/// with a connection after setting it). Requests are small and handled one at a time.
pub fn serve(
    listener: std::os::unix::net::UnixListener,
    stop: &std::sync::atomic::AtomicBool,
    handle: impl Fn(Request) -> Reply,
) {
    for conn in listener.incoming() {
        if stop.load(std::sync::atomic::Ordering::Acquire) {
            break;
        }
        let Ok(conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
        let mut line = String::new();
        let mut r = BufReader::new(&conn).take(64 * 1024);
        if r.read_line(&mut line).is_err() {
            continue;
        }
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(req) => handle(req),
            Err(e) => Reply::Error {
                message: format!("bad request: {}", crate::error_chain(&e)),
            },
        };
        if let Ok(mut out) = serde_json::to_vec(&reply) {
            out.push(b'\n');
            let _ = (&conn).write_all(&out);
        }
    }
}
