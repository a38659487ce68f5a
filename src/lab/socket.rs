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
    After {
        /// Delay after the request is handled, ns (`lab set --at +1s`).
        ns: u64,
    },
    /// At this CLOCK_REALTIME time.
    At {
        /// CLOCK_REALTIME time, ns since the Unix epoch.
        realtime_ns: u64,
    },
}

/// A request to the lab's owner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The lab's settings and counters (`lab list`); answered with [`Reply::Status`].
    Status,
    /// `link`: a star's host whose link changes; `None`: every link.
    Set {
        /// The link that changes (`lab set --link`): a star's host, a fleet's rack or
        /// zone; `None`: every link.
        #[serde(default)]
        link: Option<String>,
        /// Directions to change (`--dir`); in a star, `a2b` is from the host into the hub.
        dirs: Vec<Dir>,
        /// The impairments to change; those it leaves out keep their values.
        patch: ImpairmentPatch,
    },
    /// Schedule a blackout (`lab set --blackout`); answered with [`Reply::Blackout`].
    Blackout {
        /// The link blacked out (`lab set --link`); `None`: every link.
        #[serde(default)]
        link: Option<String>,
        /// Directions blacked out (`--dir`).
        dirs: Vec<Dir>,
        /// How long the blackout lasts, ns (`--blackout`).
        duration_ns: u64,
        /// Drop only TCP/UDP packets with this source or destination port (`--port`);
        /// `None`: every frame.
        port: Option<u16>,
        /// When it starts (`--at` gives [`Start::After`]).
        start: Start,
    },
    /// Stop the lab (`lab down`); refused with [`LabError::NotADaemon`] unless the
    /// lab is a `lab up` daemon.
    Shutdown,
}

/// The state of a running lab.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// The lab's names, namespaces, addresses and owner, as in its `lab.json`.
    pub info: LabInfo,
    /// `running`, or why the emulator stopped.
    pub emulator: String,
    /// Host a to host b (in a star, `a`'s link into the hub).
    pub a2b: DirStatus,
    /// Host b to host a (in a star, the hub back to `a`).
    pub b2a: DirStatus,
    /// A star's links, host by host (`a2b`/`b2a` above are `a`'s up and down); a
    /// fleet's, rack by rack then zone by zone (`a2b`/`b2a` are the first rack's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkStatus>,
}

/// One link of a star or a fleet: `up` from the hosts towards the core, `down` back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkStatus {
    /// The link's name: a star's host (`a`, `b`, `c`, …), a fleet's `rackN` or
    /// `zoneN`. (The key stays "host", as the schema rttlab.lab/1 publishes it.)
    pub host: String,
    /// From the host into the hub (the link's `a2b`).
    pub up: DirStatus,
    /// From the hub back to the host (the link's `b2a`).
    pub down: DirStatus,
}

/// One direction's impairments, scheduled blackouts and counters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirStatus {
    /// The impairments in force now.
    pub impairments: Impairments,
    /// Blackouts scheduled or under way; the emulator forgets ended ones within about
    /// a second.
    pub blackouts: Vec<Blackout>,
    /// Frames and bytes forwarded and dropped, since the lab came up.
    pub counters: CounterSnapshot,
}

/// A reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// A `Set` or `Shutdown` was done.
    Ok,
    /// The answer to a `Status` request.
    Status(Box<Status>),
    /// The blackout a `Blackout` request scheduled.
    Blackout {
        /// Its start and end (CLOCK_REALTIME ns) and port.
        window: Blackout,
    },
    /// The request was refused.
    Error {
        /// Why: the error and its sources, joined into one line.
        message: String,
    },
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
