//! `rttlab serve`: one process serving many concurrent request/response tests, made
//! to be left running on a production host, often as root.
//!
//! What a peer can make the server do is bounded at every stage:
//!
//! - **Admission.** A connection that has not finished the handshake (Hello, the
//!   secret's proof when one is set, and Start) holds no test slot. Such connections
//!   sit in a pool of their own, capped globally and per source address (an IPv4
//!   address, or an IPv6 /64); when either cap is reached the oldest waiting
//!   connection is dropped for the new one (the oldest that has not yet sent a whole
//!   Hello, when there is one: a client at work outlives idle and slow peers), and
//!   each must finish its whole handshake
//!   within one deadline (not per read), so idle or one-byte-a-second peers cannot
//!   lock anyone out. Handshake frames are at most 4 KiB.
//! - **Authentication** (with a secret): mutual and bound to the connection
//!   ([`super::control::Session`]); failed attempts are counted per source address, and
//!   a source over its allowance is refused at connect until its window passes.
//! - **What a test may ask.** Payloads, streams, length and interval are checked
//!   against [`Limits`]; data ports only inside the server's range, never below 1024,
//!   and never shared with a socket someone else holds (UDP sockets are bound without
//!   `SO_REUSEADDR`; TCP listeners keep it only to rebind over their own `TIME_WAIT`,
//!   and Linux refuses it over another listener); congestion control only from
//!   `net.ipv4.tcp_allowed_congestion_control` and the admin's `--allow-cc`, and
//!   only algorithms already registered (anything else could make a root process
//!   load a kernel module, `tcp_ca_find_autoload`); CPUs only from the
//!   server's own affinity mask; and the test's estimated memory, descriptors and
//!   threads must fit the global budgets (`budget`). Every refusal is an Error
//!   message naming the limit and its value.
//! - **A running test** ends when the client has sent no data for the idle timeout
//!   (plus the test's interval), or when its announced length plus a short grace has
//!   passed without Done, however the bytes of a frame trickle (`conversation`).
//!
//! Nothing a peer sends can panic or stop the server; a broken rule gets an Error
//! message and the connection dropped, and everyone else is served on. Refusals are
//! logged at most once per source per interval (`refusals`).
//!
//! The parts: `admission` (the handshake pool and the lockout), `conversation` (one
//! connection's protocol as a state machine that takes the time, no I/O),
//! `connection` (the thread that drives it over a socket), `budget` (limits and
//! budgets) and `data` (the data sockets and the threads that serve them).

mod admission;
mod budget;
mod connection;
pub mod conversation;
mod data;
mod refusal;
mod refusal_log;
pub mod served;
mod serving;
mod shares;
mod stamped;

pub use budget::{test_memory_bytes, validate, Cost};
pub use refusal::Refusal;

use crate::kernel::cpu;
use crate::kernel::host::HostFacts;
use crate::probe::control::{self, Limits};
use admission::{ControlThread, SourceKey};
use budget::Budgets;
use refusal_log::RefusalLog;
use served::ServedStreams;
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Stack of a control (handshake) thread.
const CONTROL_THREAD_STACK: usize = 256 * 1024;
/// Control threads allowed beyond the handshake pool and the test slots: dropped
/// connections' threads on their way out.
const CONTROL_THREAD_SLACK: usize = 8;

/// How to run a server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Control addresses to listen on (IPv4 and/or IPv6).
    pub listen: Vec<SocketAddr>,
    /// Shared secret both ends prove; `None` serves anyone.
    pub secret: Option<Vec<u8>>,
    /// What a test may ask for, announced to clients in Welcome (`--max-payload`,
    /// `--max-streams`, `--max-duration`, `--max-tests`, `--data-ports`).
    pub limits: Limits,
    /// A control connection silent this long between tests, or a test whose client
    /// has sent no data this long (plus the test's interval), is dropped.
    pub idle_timeout: Duration,
    /// Time a connection has, in all, from accept to a valid Start.
    pub handshake_timeout: Duration,
    /// Connections in the handshake at once, from all sources.
    pub max_handshakes: usize,
    /// Connections in the handshake at once from one source address (IPv6: one /64).
    pub max_handshakes_per_source: usize,
    /// Tests running at once from one source address (IPv6: one /64); `None`: half
    /// of `limits.max_concurrent_tests`.
    pub max_tests_per_source: Option<u32>,
    /// Memory all running tests together may be estimated to use, in bytes.
    pub max_memory_bytes: u64,
    /// Data threads all running tests together may use (one per stream).
    pub max_threads: u64,
    /// Descriptors the rest of the process needs besides the server (the agent's
    /// probes and metrics connections): kept out of the tests' descriptor budget,
    /// which is what is left of `RLIMIT_NOFILE` after these, the listeners, the
    /// handshake pool and the process's own few.
    pub reserved_descriptors: u64,
    /// Which congestion controls a client may ask for.
    pub congestion: CongestionPolicy,
    /// Log one line per test on stderr.
    pub log: bool,
}

/// Which congestion-control algorithms a client may choose for the server's sockets.
/// Every policy accepts only algorithms the kernel has already registered
/// (`tcp_available_congestion_control`), so no request can make the kernel load a
/// module (`tcp_ca_find_autoload` would, for a root process).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CongestionPolicy {
    /// What the host's admin lets unprivileged users choose
    /// (`net.ipv4.tcp_allowed_congestion_control`), plus these names.
    Allowed(Vec<String>),
    /// Any registered algorithm: a server serving its own run only.
    AnyRegistered,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: vec![SocketAddr::from((
                [0, 0, 0, 0, 0, 0, 0, 0],
                control::DEFAULT_CONTROL_PORT,
            ))],
            secret: None,
            limits: Limits::default(),
            idle_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(5),
            max_handshakes: 64,
            max_handshakes_per_source: 8,
            max_tests_per_source: None,
            max_memory_bytes: 512 << 20,
            max_threads: 4096,
            reserved_descriptors: 0,
            congestion: CongestionPolicy::Allowed(Vec::new()),
            log: false,
        }
    }
}

impl ServerConfig {
    /// A server for one run's own use: inside a lab namespace the run created, or on
    /// loopback for the run's lifetime. Limits are those of the experiments (hundreds
    /// of streams, any unprivileged data port); admission and authentication rules are
    /// the same as everywhere.
    pub fn for_own_run(listen: SocketAddr) -> Self {
        Self {
            listen: vec![listen],
            limits: Limits::own_run(),
            max_memory_bytes: 4 << 30,
            max_threads: 16384,
            congestion: CongestionPolicy::AnyRegistered,
            ..Self::default()
        }
    }
}

/// What to do about a failed bind: the capability for a low port, else the port.
fn bind_hint(addr: SocketAddr, e: &io::Error) -> String {
    if crate::kernel::privilege::is_refusal(e) {
        crate::kernel::privilege::low_port_fix(addr.port())
    } else {
        "is another server listening there? pick another address or port".into()
    }
}

/// Errors starting a server (a running server reports nothing fatal).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr} ({why})", why = bind_hint(*.addr, .source))]
    Bind {
        /// The address that could not be bound.
        addr: SocketAddr,
        /// The OS error from binding.
        #[source]
        source: io::Error,
    },
    /// A setting is out of range.
    #[error("{0}")]
    Config(String),
}

/// Counters of a running server.
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// Tests admitted (within the limits and given a budget slot), counted before their
    /// data socket opens: one whose socket then fails to open counts in `rejected` too.
    pub tests_started: AtomicU64,
    /// Tests that ran and whose Result was sent to the client.
    pub tests_completed: AtomicU64,
    /// Tests refused: busy, over the memory budget, or a spec the limits forbid.
    pub rejected: AtomicU64,
    /// Conversations ended because the client's proof of the secret was wrong; each also
    /// counts towards its source's lockout.
    pub auth_failures: AtomicU64,
    /// Connections refused at accept because their source failed too often.
    pub auth_locked_out: AtomicU64,
    /// Connections dropped from the handshake pool (oldest first) or past its deadline.
    pub handshakes_dropped: AtomicU64,
    /// Conversations ended because the peer broke the protocol (a malformed, oversized,
    /// forged or unexpected frame) or the test's data connections failed.
    pub protocol_errors: AtomicU64,
    /// Tests the server ended: the client went silent or overran its length.
    pub tests_ended_by_server: AtomicU64,
}

struct Shared {
    config: ServerConfig,
    /// What every conversation is told and checked against.
    settings: conversation::Settings,
    /// CPUs the server may run on, read once at start: a client may pin only to these.
    cpus: Vec<usize>,
    budgets: Budgets,
    pool: Mutex<admission::Pool>,
    /// The running tests, for a source's share to shrink when others wait.
    shares: Mutex<shares::Shares>,
    /// Control threads alive: those in the pool, those running a test, and dropped
    /// ones still on their way out.
    control_threads: Mutex<usize>,
    control_thread_ended: Condvar,
    failures: Mutex<HashMap<SourceKey, admission::Failures>>,
    refusals: Mutex<RefusalLog>,
    stop: AtomicBool,
    counters: ServerCounters,
    /// The TCP_RR streams the running tests hold.
    served: Arc<ServedStreams>,
}

impl Shared {
    /// Log a line on stderr (unless quiet).
    fn log(&self, msg: &str) {
        if self.config.log {
            eprintln!("rttlab serve: {msg}");
        }
    }

    /// Log a refused or failed conversation with `peer`, at most one line per source
    /// per interval and a summary of the rest ([`RefusalLog`]).
    fn refused(&self, peer: SocketAddr, why: &'static str, message: &str) {
        if !self.config.log {
            return;
        }
        let lines = self
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .note(
                Instant::now(),
                SourceKey::of(peer.ip()).0,
                why,
                format!("{peer}: {message}"),
            );
        for l in lines {
            self.log(&l);
        }
    }
}

/// A bound, not yet running server.
pub struct Server {
    listeners: Vec<TcpListener>,
    shared: Arc<Shared>,
}

/// A server running on background threads; stops when dropped.
pub struct ServerHandle {
    shared: Arc<Shared>,
    addrs: Vec<SocketAddr>,
    listener_fds: Vec<i32>,
    threads: Vec<JoinHandle<()>>,
    _listeners: Vec<TcpListener>,
}

fn listen_socket(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        // An explicit [::] listens to IPv6 and IPv4-mapped both, like netserver -6.
        s.set_only_v6(false)?;
    }
    s.bind(&addr.into())?;
    s.listen(1024)?;
    Ok(s.into())
}

impl Server {
    /// Bind every listen address.
    ///
    /// # Errors
    /// An address is in use or not available, or a setting is out of range.
    pub fn bind(config: ServerConfig) -> Result<Self, ServerError> {
        if config.max_handshakes == 0 || config.max_handshakes_per_source == 0 {
            return Err(ServerError::Config(
                "the handshake pool needs room for at least one connection".into(),
            ));
        }
        if config.handshake_timeout.is_zero() || config.idle_timeout.is_zero() {
            return Err(ServerError::Config(
                "the handshake and idle timeouts must be more than 0".into(),
            ));
        }
        let listeners = config
            .listen
            .iter()
            .map(|&addr| listen_socket(addr).map_err(|source| ServerError::Bind { addr, source }))
            .collect::<Result<Vec<_>, _>>()?;
        // What the process may open now (the caller raised it to the hard limit, if
        // it would: `kernel::rlimit::raise_open_files`).
        let open_files = crate::kernel::rlimit::open_files().map_or(1024, |l| l.soft);
        let budgets = Budgets::new(&config, listeners.len(), open_files);
        let settings = conversation::Settings {
            secret: config.secret.clone(),
            handshake_timeout: config.handshake_timeout,
            idle_timeout: config.idle_timeout,
            host: HostFacts::collect(),
            limits: config.limits.clone(),
        };
        Ok(Self {
            listeners,
            shared: Arc::new(Shared {
                config,
                settings,
                cpus: cpu::current_affinity(),
                budgets,
                pool: Mutex::new(admission::Pool::default()),
                shares: Mutex::new(shares::Shares::default()),
                control_threads: Mutex::new(0),
                control_thread_ended: Condvar::new(),
                failures: Mutex::new(HashMap::new()),
                refusals: Mutex::new(RefusalLog::new(Instant::now())),
                stop: AtomicBool::new(false),
                counters: ServerCounters::default(),
                served: Arc::default(),
            }),
        })
    }

    /// Descriptors the server's tests may hold together: what `RLIMIT_NOFILE` leaves
    /// after the listeners, the handshake pool and the process's own needs.
    pub fn descriptor_budget(&self) -> u64 {
        self.shared.budgets.max_descriptors()
    }

    /// Whether the descriptor budget holds the most tests the limits let run at once,
    /// each of `streams` TCP_RR streams (`serve`: its `--max-streams`, the widest a
    /// client may ask for; the agent: one, what its peers' probes ask).
    pub fn descriptors_suffice(&self, streams: u32) -> bool {
        let limits = &self.shared.config.limits;
        let widest = Cost::of(&control::TestSpec {
            streams,
            ..control::TestSpec::basic(control::TestKind::TcpRr, 1, 1, 1)
        });
        self.descriptor_budget()
            >= u64::from(limits.max_concurrent_tests).saturating_mul(widest.descriptors)
    }

    /// The addresses actually bound (port 0 resolved).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Serve on background threads.
    ///
    /// # Errors
    /// A thread could not be started.
    pub fn spawn(self) -> io::Result<ServerHandle> {
        let addrs = self.local_addrs();
        let mut threads = Vec::new();
        let mut fds = Vec::new();
        let mut kept = Vec::new();
        for l in self.listeners {
            fds.push(l.as_raw_fd());
            let mine = l.try_clone()?;
            kept.push(l);
            let shared = Arc::clone(&self.shared);
            threads.push(
                std::thread::Builder::new()
                    .name("serve-accept".into())
                    .spawn(move || accept_loop(&mine, &shared))?,
            );
        }
        Ok(ServerHandle {
            shared: self.shared,
            addrs,
            listener_fds: fds,
            threads,
            _listeners: kept,
        })
    }

    /// Serve on the calling thread until the process ends.
    ///
    /// # Errors
    /// A thread could not be started.
    pub fn run(self) -> io::Result<()> {
        let mut handle = self.spawn()?;
        for t in std::mem::take(&mut handle.threads) {
            let _ = t.join();
        }
        Ok(())
    }
}

impl ServerHandle {
    /// Addresses the server listens on.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The server's counters.
    pub fn counters(&self) -> &ServerCounters {
        &self.shared.counters
    }

    /// The TCP_RR streams its tests hold now, kept up to date as tests come and go.
    pub fn served(&self) -> Arc<ServedStreams> {
        Arc::clone(&self.shared.served)
    }

    /// Stop accepting and wait for the accept threads. Tests under way end on their own
    /// (their sockets time out or the client finishes).
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for &fd in &self.listener_fds {
            // SAFETY: the listeners are still open (owned by self); shutdown wakes accept().
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                accept_one(stream, peer, shared);
            }
            Err(_) if shared.stop.load(Ordering::SeqCst) => return,
            // EMFILE and friends: back off instead of spinning; never exit.
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Let a new connection into the handshake pool and start the thread that drives its
/// conversation.
fn accept_one(stream: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) {
    let Some(id) = admission::admit(&stream, peer, shared) else {
        return;
    };
    let s = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("serve-control".into())
        .stack_size(CONTROL_THREAD_STACK)
        .spawn(move || {
            let _alive = ControlThread(&s);
            connection::serve(&stream, peer, id, &s);
        });
    if spawned.is_err() {
        let _ = admission::leave_pool(shared, id);
        drop(ControlThread(shared));
        shared.log("cannot start a thread for a control connection");
    }
}
