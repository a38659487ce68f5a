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
//!   server's own affinity mask; and the test's estimated memory must fit the global
//!   budget. Every refusal is an Error message naming the limit and its value.
//! - **A running test** ends when the client has sent no data for the idle timeout
//!   (plus the test's interval), or when its announced length plus a short grace has
//!   passed without Done.
//!
//! Nothing a peer sends can panic or stop the server; a broken rule gets an Error
//! message and the connection dropped, and everyone else is served on.

use super::control::{
    self, ClientMsg, ControlError, Limits, PortRange, Role, ServerMsg, ServerReport, Session,
    TestKind, TestSpec, MAGIC, MAX_HANDSHAKE_FRAME, NONCE_LEN, PROTOCOL_VERSION,
};
use super::io::{read_full, write_full, ReadEnd};
use crate::kernel::cpu::{self, CpuTracker};
use crate::kernel::host::HostFacts;
use crate::kernel::sockopt;
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often blocked data threads look at their stop flag.
const POLL_TICK: Duration = Duration::from_millis(100);
/// How often the control thread looks at a running test's activity and deadline.
const WATCH_TICK: Duration = Duration::from_millis(250);
/// Time a client gets to connect its data streams after Ready.
const CONNECT_GRACE: Duration = Duration::from_secs(10);
/// Extra time after a test's announced length (and interval) before the server ends
/// it: the client's last transaction may take its in-flight grace (5 s) and its Done
/// must still arrive.
const END_GRACE: Duration = Duration::from_secs(10);
/// Stack of a data thread: its buffers live on the heap, so this is ample.
const DATA_THREAD_STACK: usize = 256 * 1024;
/// Stack of a control (handshake) thread.
const CONTROL_THREAD_STACK: usize = 256 * 1024;
/// Control threads allowed beyond the handshake pool and the test slots: dropped
/// connections' threads on their way out.
const CONTROL_THREAD_SLACK: usize = 8;
/// What one stream is assumed to cost besides its payload buffers: its thread's stack
/// and an allowance for its socket's kernel buffers.
const STREAM_OVERHEAD_BYTES: u64 = DATA_THREAD_STACK as u64 + 256 * 1024;
/// Failed authentications a source may make within [`FAILURE_WINDOW`].
const FAILURES_ALLOWED: u32 = 5;
/// The window over which failed authentications are counted per source.
const FAILURE_WINDOW: Duration = Duration::from_secs(30);
/// Most source addresses whose failures are remembered (older windows are forgotten
/// first, so the table cannot grow without bound).
const FAILURE_TABLE_MAX: usize = 4096;

/// How to run a server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Control addresses to listen on (IPv4 and/or IPv6).
    pub listen: Vec<SocketAddr>,
    /// Shared secret both ends prove; `None` serves anyone.
    pub secret: Option<Vec<u8>>,
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
    /// Memory all running tests together may be estimated to use, in bytes.
    pub max_memory_bytes: u64,
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
            max_memory_bytes: 512 << 20,
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
            congestion: CongestionPolicy::AnyRegistered,
            ..Self::default()
        }
    }
}

/// Errors starting a server (a running server reports nothing fatal).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr} (is another server running there? pick another port with --port or --listen)")]
    Bind {
        addr: SocketAddr,
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
    pub tests_started: AtomicU64,
    pub tests_completed: AtomicU64,
    /// Tests refused: busy, over the memory budget, or a spec the limits forbid.
    pub rejected: AtomicU64,
    pub auth_failures: AtomicU64,
    /// Connections refused at accept because their source failed too often.
    pub auth_locked_out: AtomicU64,
    /// Connections dropped from the handshake pool (oldest first) or past its deadline.
    pub handshakes_dropped: AtomicU64,
    pub protocol_errors: AtomicU64,
    /// Tests the server ended: the client went silent or overran its length.
    pub tests_ended_by_server: AtomicU64,
}

/// The key connections are counted under per source: an IPv4 address (IPv4-mapped
/// IPv6 included), or an IPv6 /64, the smallest block one user is usually given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SourceKey(IpAddr);

impl SourceKey {
    fn of(ip: IpAddr) -> Self {
        match canon(ip) {
            IpAddr::V6(v6) => {
                let s = v6.segments();
                SourceKey(IpAddr::V6(Ipv6Addr::new(
                    s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                )))
            }
            v4 => SourceKey(v4),
        }
    }
}

struct Waiting {
    id: u64,
    source: SourceKey,
    /// It has sent a valid Hello: a client at work, dropped only after the silent ones.
    said_hello: bool,
    /// A handle on the connection, to shut it down when it is dropped from the pool.
    stream: TcpStream,
}

/// Connections in the handshake, oldest first.
#[derive(Default)]
struct Pool {
    waiting: VecDeque<Waiting>,
    next_id: u64,
}

struct Failures {
    window_start: Instant,
    count: u32,
}

struct Shared {
    config: ServerConfig,
    host: HostFacts,
    /// CPUs the server may run on, read once at start: a client may pin only to these.
    cpus: Vec<usize>,
    active: AtomicU32,
    memory_in_use: AtomicU64,
    pool: Mutex<Pool>,
    /// Control threads alive: those in the pool, those running a test, and dropped
    /// ones still on their way out.
    control_threads: Mutex<usize>,
    control_thread_ended: Condvar,
    failures: Mutex<HashMap<SourceKey, Failures>>,
    stop: AtomicBool,
    counters: ServerCounters,
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
        Ok(Self {
            listeners,
            shared: Arc::new(Shared {
                config,
                host: HostFacts::collect(),
                cpus: cpu::current_affinity(),
                active: AtomicU32::new(0),
                memory_in_use: AtomicU64::new(0),
                pool: Mutex::new(Pool::default()),
                control_threads: Mutex::new(0),
                control_thread_ended: Condvar::new(),
                failures: Mutex::new(HashMap::new()),
                stop: AtomicBool::new(false),
                counters: ServerCounters::default(),
            }),
        })
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
                admit(stream, peer, shared);
            }
            Err(_) if shared.stop.load(Ordering::SeqCst) => return,
            // EMFILE and friends: back off instead of spinning; never exit.
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Put a new connection into the handshake pool (dropping the oldest waiting one when
/// a cap is reached) and start its thread; or refuse it at once when its source is
/// locked out for failed authentications.
fn admit(mut stream: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) {
    let source = SourceKey::of(peer.ip());
    if let Some(wait) = locked_out(shared, source) {
        shared
            .counters
            .auth_locked_out
            .fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
        let _ = control::write_msg(
            &mut stream,
            &ServerMsg::Error {
                message: format!(
                    "too many failed authentications from {}: refused for another {} s",
                    source.0,
                    wait.as_secs().max(1)
                ),
            },
        );
        return;
    }
    let Ok(handle) = stream.try_clone() else {
        return;
    };
    let id = {
        let mut pool = shared.pool.lock().unwrap_or_else(|p| p.into_inner());
        let from_source = pool.waiting.iter().filter(|w| w.source == source).count();
        if from_source >= shared.config.max_handshakes_per_source {
            let at = oldest(&pool, |w| w.source == source);
            evict(&mut pool, at, shared);
        }
        if pool.waiting.len() >= shared.config.max_handshakes {
            let at = oldest(&pool, |_| true);
            evict(&mut pool, at, shared);
        }
        pool.next_id += 1;
        let id = pool.next_id;
        pool.waiting.push_back(Waiting {
            id,
            source,
            said_hello: false,
            stream: handle,
        });
        id
    };
    // A dropped connection's thread takes a moment to end: wait for one to end rather
    // than let a burst of connections raise the thread count past the pool and the
    // test slots. Dropped threads end in microseconds, so this wait is short.
    let cap = shared.config.max_handshakes
        + shared.config.limits.max_concurrent_tests as usize
        + CONTROL_THREAD_SLACK;
    {
        let mut live = shared
            .control_threads
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        while *live >= cap {
            live = shared
                .control_thread_ended
                .wait_timeout(live, Duration::from_millis(10))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *live += 1;
    }
    let s = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("serve-control".into())
        .stack_size(CONTROL_THREAD_STACK)
        .spawn(move || {
            let _alive = ControlThread(&s);
            handle_control(stream, peer, id, &s);
        });
    if spawned.is_err() {
        leave_pool(shared, id);
        drop(ControlThread(shared));
        log(shared, "cannot start a thread for a control connection");
    }
}

/// Counts a control thread out when it ends, however it ends.
struct ControlThread<'a>(&'a Shared);

impl Drop for ControlThread<'_> {
    fn drop(&mut self) {
        let mut live = self
            .0
            .control_threads
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *live = live.saturating_sub(1);
        self.0.control_thread_ended.notify_one();
    }
}

/// The connection to drop among those `matching`: the oldest that has not sent a
/// whole Hello yet (an idle or slow peer), else the oldest.
fn oldest(pool: &Pool, matching: impl Fn(&Waiting) -> bool) -> Option<usize> {
    pool.waiting
        .iter()
        .position(|w| matching(w) && !w.said_hello)
        .or_else(|| pool.waiting.iter().position(matching))
}

/// Note that connection `id` has said a valid Hello.
fn said_hello(shared: &Shared, id: u64) {
    let mut pool = shared.pool.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(w) = pool.waiting.iter_mut().find(|w| w.id == id) {
        w.said_hello = true;
    }
}

fn evict(pool: &mut Pool, at: Option<usize>, shared: &Shared) {
    if let Some(w) = at.and_then(|i| pool.waiting.remove(i)) {
        let _ = w.stream.shutdown(std::net::Shutdown::Both);
        shared
            .counters
            .handshakes_dropped
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Take a connection out of the handshake pool; false when it was already dropped.
fn leave_pool(shared: &Shared, id: u64) -> bool {
    let mut pool = shared.pool.lock().unwrap_or_else(|p| p.into_inner());
    match pool.waiting.iter().position(|w| w.id == id) {
        Some(i) => {
            pool.waiting.remove(i);
            true
        }
        None => false,
    }
}

/// How much longer `source` is refused, if it is.
fn locked_out(shared: &Shared, source: SourceKey) -> Option<Duration> {
    let table = shared.failures.lock().unwrap_or_else(|p| p.into_inner());
    let f = table.get(&source)?;
    let left = FAILURE_WINDOW.checked_sub(f.window_start.elapsed())?;
    (f.count >= FAILURES_ALLOWED).then_some(left)
}

fn record_failure(shared: &Shared, source: SourceKey) {
    let mut table = shared.failures.lock().unwrap_or_else(|p| p.into_inner());
    if table.len() >= FAILURE_TABLE_MAX {
        table.retain(|_, f| f.window_start.elapsed() < FAILURE_WINDOW);
        if table.len() >= FAILURE_TABLE_MAX {
            let oldest = table
                .iter()
                .min_by_key(|(_, f)| f.window_start)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                table.remove(&k);
            }
        }
    }
    let f = table.entry(source).or_insert(Failures {
        window_start: Instant::now(),
        count: 0,
    });
    if f.window_start.elapsed() >= FAILURE_WINDOW {
        *f = Failures {
            window_start: Instant::now(),
            count: 0,
        };
    }
    f.count += 1;
}

fn log(shared: &Shared, msg: &str) {
    if shared.config.log {
        eprintln!("rttlab serve: {msg}");
    }
}

/// Reads that share one deadline: before each read the socket's receive timeout is
/// set to what is left, so a peer sending one byte at a time cannot stretch it.
struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self
            .deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::TimedOut, "the handshake took too long")
            })?;
        self.stream.set_read_timeout(Some(left))?;
        (&mut &*self.stream).read(buf)
    }
}

/// Releases a test's slot and its memory when the test ends, however it ends.
struct TestSlot<'a> {
    shared: &'a Shared,
    memory: u64,
}

impl Drop for TestSlot<'_> {
    fn drop(&mut self) {
        self.shared.active.fetch_sub(1, Ordering::SeqCst);
        self.shared
            .memory_in_use
            .fetch_sub(self.memory, Ordering::SeqCst);
    }
}

/// How one connection's conversation ended badly.
enum Failure {
    /// Tell the peer (when the connection still works) and count a protocol error.
    Tell(ControlError),
    /// A refused test: tell the peer and count a rejection.
    Refuse(String),
    /// The connection itself failed (or was dropped from the pool): nothing to tell.
    Gone(ControlError),
}

impl From<ControlError> for Failure {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::Io(_) => Failure::Gone(e),
            other => Failure::Tell(other),
        }
    }
}

/// The writing half of a conversation: plain before authentication, sealed after.
struct Conversation<'a> {
    ctl: &'a TcpStream,
    session: Option<Session>,
}

impl Conversation<'_> {
    fn send(&mut self, msg: &ServerMsg) -> Result<(), ControlError> {
        let mut w = self.ctl;
        match &mut self.session {
            Some(s) => s.write(&mut w, msg),
            None => control::write_msg(&mut w, msg),
        }
    }

    fn recv(&mut self, deadline: Option<Instant>) -> Result<ClientMsg, ControlError> {
        let max = if deadline.is_some() {
            MAX_HANDSHAKE_FRAME
        } else {
            control::MAX_FRAME
        };
        let mut plain = self.ctl;
        match (deadline, &mut self.session) {
            (Some(deadline), Some(s)) => s.read(&mut DeadlineReader {
                stream: self.ctl,
                deadline,
            }),
            (Some(deadline), None) => control::read_msg_limited(
                &mut DeadlineReader {
                    stream: self.ctl,
                    deadline,
                },
                max,
            ),
            (None, Some(s)) => s.read(&mut plain),
            (None, None) => control::read_msg_limited(&mut plain, max),
        }
    }
}

fn handle_control(ctl: TcpStream, peer: SocketAddr, id: u64, shared: &Shared) {
    let _ = ctl.set_nodelay(true);
    let _ = ctl.set_write_timeout(Some(shared.config.handshake_timeout));
    let mut conv = Conversation {
        ctl: &ctl,
        session: None,
    };
    let result = converse(&mut conv, peer, id, shared);
    leave_pool(shared, id);
    let (message, tell) = match result {
        Ok(()) => return,
        Err(Failure::Gone(e)) => (crate::error_chain(&e), false),
        Err(Failure::Tell(e)) => {
            shared
                .counters
                .protocol_errors
                .fetch_add(1, Ordering::Relaxed);
            (
                match e {
                    ControlError::Remote(m) => m,
                    other => other.to_string(),
                },
                true,
            )
        }
        Err(Failure::Refuse(m)) => {
            shared.counters.rejected.fetch_add(1, Ordering::Relaxed);
            (m, true)
        }
    };
    if tell {
        let _ = ctl.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = conv.send(&ServerMsg::Error {
            message: message.clone(),
        });
    }
    log(shared, &format!("{peer}: {message}"));
}

fn converse(
    conv: &mut Conversation<'_>,
    peer: SocketAddr,
    id: u64,
    shared: &Shared,
) -> Result<(), Failure> {
    let deadline = Instant::now() + shared.config.handshake_timeout;
    let client_nonce = match conv.recv(Some(deadline))? {
        ClientMsg::Hello {
            magic,
            version,
            nonce_hex,
        } => {
            if magic != MAGIC {
                return Err(ControlError::NotRttlab.into());
            }
            if version != PROTOCOL_VERSION {
                return Err(ControlError::Version {
                    ours: PROTOCOL_VERSION,
                    theirs: version,
                }
                .into());
            }
            nonce_hex
        }
        other => return Err(ControlError::Unexpected(format!("{other:?} before Hello")).into()),
    };
    said_hello(shared, id);
    if let Some(secret) = &shared.config.secret {
        let client_nonce = control::from_hex(&client_nonce)
            .filter(|n| n.len() == NONCE_LEN)
            .ok_or_else(|| ControlError::Malformed("Hello without a valid nonce".into()))?;
        let server_nonce = control::nonce()?;
        conv.send(&ServerMsg::Challenge {
            nonce_hex: control::to_hex(&server_nonce),
        })?;
        let ok = match conv.recv(Some(deadline))? {
            ClientMsg::Auth { mac_hex } => control::from_hex(&mac_hex).is_some_and(|mac| {
                control::verify_client_proof(secret, &client_nonce, &server_nonce, &mac)
            }),
            _ => false,
        };
        if !ok {
            shared
                .counters
                .auth_failures
                .fetch_add(1, Ordering::Relaxed);
            record_failure(shared, SourceKey::of(peer.ip()));
            return Err(Failure::Tell(ControlError::Remote(
                "authentication failed: the client's secret does not match the server's".into(),
            )));
        }
        conv.session = Some(Session::derive(
            secret,
            &client_nonce,
            &server_nonce,
            Role::Server,
        ));
    }
    conv.send(&ServerMsg::Welcome {
        version: PROTOCOL_VERSION,
        host: shared.host.clone(),
        limits: shared.config.limits.clone(),
    })?;
    let spec = match conv.recv(Some(deadline))? {
        ClientMsg::Start { spec } => spec,
        other => {
            return Err(ControlError::Unexpected(format!("{other:?} instead of Start")).into())
        }
    };
    if !leave_pool(shared, id) {
        return Err(Failure::Gone(ControlError::Io(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "dropped from the handshake pool",
        ))));
    }
    validate(&spec, &shared.config.limits).map_err(Failure::Refuse)?;
    check_host(&spec, &shared.cpus, &shared.config.congestion).map_err(Failure::Refuse)?;
    let _slot = take_slot(&spec, shared).map_err(Failure::Refuse)?;
    let _ = conv.ctl.set_write_timeout(Some(shared.config.idle_timeout));
    shared
        .counters
        .tests_started
        .fetch_add(1, Ordering::Relaxed);
    let local_ip = conv.ctl.local_addr().map_err(ControlError::Io)?.ip();
    let test = DataTest::open(
        &spec,
        local_ip,
        peer.ip(),
        shared.config.idle_timeout,
        shared.config.limits.data_ports,
    )
    .map_err(Failure::Refuse)?;
    conv.send(&ServerMsg::Ready {
        data_port: test.port,
    })?;
    let started = Instant::now();
    let idle = test.idle;
    let running = test.run().map_err(|e| {
        Failure::Tell(ControlError::Remote(format!(
            "data connection: {}",
            crate::error_chain(&e)
        )))
    })?;
    // The test may last its announced length and interval plus a grace; it ends
    // earlier when the client sends nothing for the idle time.
    let limit = Duration::from_millis(spec.max_duration_ms)
        + Duration::from_millis(spec.interval_ms)
        + END_GRACE;
    let waited = wait_for_done(conv, &running, started + limit, idle);
    let mut report = running.finish();
    report.host = Some(shared.host.clone());
    match waited {
        Ok(ClientMsg::Done) => {
            conv.send(&ServerMsg::Result {
                report: Box::new(report.clone()),
            })?;
            shared
                .counters
                .tests_completed
                .fetch_add(1, Ordering::Relaxed);
            log(
                shared,
                &format!(
                    "{peer}: {} {},{} streams {} done: {} transactions in {:.1} s",
                    spec.test.name(),
                    spec.request_size,
                    spec.response_size,
                    spec.streams,
                    report.transactions,
                    started.elapsed().as_secs_f64()
                ),
            );
            Ok(())
        }
        Ok(other) => Err(ControlError::Unexpected(format!("{other:?} instead of Done")).into()),
        Err(Ended::Control(e)) => Err(e.into()),
        Err(Ended::ByServer(m)) => {
            shared
                .counters
                .tests_ended_by_server
                .fetch_add(1, Ordering::Relaxed);
            Err(Failure::Tell(ControlError::Remote(m)))
        }
    }
}

/// Why waiting for a test's Done ended without it.
enum Ended {
    Control(ControlError),
    /// The server ended the test (the message says why).
    ByServer(String),
}

/// Wait for Done while the test runs, ending the test when the client has sent no
/// data for `idle` or `deadline` passes.
fn wait_for_done(
    conv: &mut Conversation<'_>,
    running: &RunningTest,
    deadline: Instant,
    idle: Duration,
) -> Result<ClientMsg, Ended> {
    loop {
        let mut pfd = libc::pollfd {
            fd: conv.ctl.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, WATCH_TICK.as_millis() as i32) };
        if n > 0 {
            // A frame has begun: it must arrive whole within the idle timeout.
            let _ = conv.ctl.set_read_timeout(Some(idle));
            return conv.recv(None).map_err(Ended::Control);
        }
        if Instant::now() >= deadline {
            return Err(Ended::ByServer(
                "the test ran past its announced length and grace: ended by the server".into(),
            ));
        }
        if let Some(quiet) = running.quiet_for().filter(|q| *q >= idle) {
            return Err(Ended::ByServer(format!(
                "no data from the client for {:.1} s (idle timeout {:.1} s): test ended by the server",
                quiet.as_secs_f64(),
                idle.as_secs_f64()
            )));
        }
    }
}

/// Take a test slot and reserve the test's memory, or say which limit refuses it.
fn take_slot<'a>(spec: &TestSpec, shared: &'a Shared) -> Result<TestSlot<'a>, String> {
    let max = shared.config.limits.max_concurrent_tests;
    let active = shared.active.fetch_add(1, Ordering::SeqCst) + 1;
    let memory = test_memory_bytes(spec);
    // Holds the slot (and no memory yet) so that every refusal below gives it back.
    let mut slot = TestSlot { shared, memory: 0 };
    if active > max {
        return Err(format!(
            "server busy: {} tests running, the limit is {max} (--max-tests)",
            active - 1
        ));
    }
    let budget = shared.config.max_memory_bytes;
    let reserved = shared
        .memory_in_use
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
            used.checked_add(memory).filter(|&total| total <= budget)
        });
    match reserved {
        Ok(_) => {
            slot.memory = memory;
            Ok(slot)
        }
        Err(used) => Err(format!(
            "server memory budget: this test needs {} MiB, {} of {} MiB are in use (--max-memory)",
            memory.div_ceil(1 << 20),
            used.div_ceil(1 << 20),
            budget >> 20
        )),
    }
}

/// What a test is estimated to cost the server: per stream, its request and response
/// buffers, its thread's stack and an allowance for its socket's buffers.
pub fn test_memory_bytes(spec: &TestSpec) -> u64 {
    u64::from(spec.streams)
        * (u64::from(spec.request_size) + u64::from(spec.response_size) + STREAM_OVERHEAD_BYTES)
}

/// Check a spec against the limits before anything is opened.
///
/// # Errors
/// A one-line reason naming the value and the limit.
pub fn validate(spec: &TestSpec, limits: &Limits) -> Result<(), String> {
    for (what, v) in [
        ("request size", spec.request_size),
        ("response size", spec.response_size),
    ] {
        if v == 0 || v > limits.max_payload {
            return Err(format!(
                "{what} {v} bytes is outside 1..={} (server limit --max-payload)",
                limits.max_payload
            ));
        }
    }
    if spec.test == TestKind::UdpRr {
        let max_udp = 65_507;
        if spec.request_size > max_udp || spec.response_size > max_udp {
            return Err(format!(
                "UDP_RR sizes must be at most {max_udp} bytes (one datagram)"
            ));
        }
    }
    if spec.streams == 0 || spec.streams > limits.max_streams {
        return Err(format!(
            "{} streams is outside 1..={} (server limit --max-streams)",
            spec.streams, limits.max_streams
        ));
    }
    if spec.max_duration_ms == 0 || spec.max_duration_ms > limits.max_duration_ms {
        return Err(format!(
            "test length {} ms is outside 1..={} ms (server limit --max-duration)",
            spec.max_duration_ms, limits.max_duration_ms
        ));
    }
    if spec.interval_ms > limits.max_interval_ms {
        return Err(format!(
            "interval and timeout {} ms are longer than the server's limit of {} ms",
            spec.interval_ms, limits.max_interval_ms
        ));
    }
    if spec.data_port != 0 && !limits.data_ports.contains(spec.data_port) {
        return Err(format!(
            "data port {} is outside the server's data ports {} (--data-ports)",
            spec.data_port, limits.data_ports
        ));
    }
    if spec.congestion.as_ref().is_some_and(|c| {
        c.is_empty() || c.len() > 15 || !c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    }) {
        return Err("congestion control name must be 1–15 letters, digits or _".into());
    }
    if spec.udp_drop_one_in == Some(0) {
        return Err("udp_drop_one_in must be at least 1".into());
    }
    if spec.anatomy {
        // UDP_RR's streams share one server socket, whose TX stamps are numbered
        // across them.
        if spec.test == TestKind::UdpRr && spec.streams > 1 {
            return Err("the anatomy of UDP_RR is measured with one stream".into());
        }
        if spec.response_size < crate::probe::anatomy::MIN_RESPONSE {
            return Err(format!(
                "the anatomy needs responses of at least {} bytes (they carry the server's stamps)",
                crate::probe::anatomy::MIN_RESPONSE
            ));
        }
    }
    if spec.server_delay_us > crate::probe::control::MAX_SERVER_DELAY_US {
        return Err(format!(
            "server delay {} µs is longer than the {} µs a server waits per request",
            spec.server_delay_us,
            crate::probe::control::MAX_SERVER_DELAY_US
        ));
    }
    Ok(())
}

fn sysctl_words(key: &str) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/sys/{}", key.replace('.', "/")))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Check what depends on this host: the congestion control is one the policy allows
/// and the kernel has registered (so no request can make it load a module), and the
/// CPU is one the server may run on.
fn check_host(spec: &TestSpec, cpus: &[usize], policy: &CongestionPolicy) -> Result<(), String> {
    if let Some(cc) = &spec.congestion {
        let registered = sysctl_words("net.ipv4.tcp_available_congestion_control");
        let allowed = match policy {
            CongestionPolicy::Allowed(extra) => {
                let mut a = sysctl_words("net.ipv4.tcp_allowed_congestion_control");
                a.extend(extra.iter().filter(|e| registered.contains(e)).cloned());
                a
            }
            CongestionPolicy::AnyRegistered => registered.clone(),
        };
        if !allowed.contains(cc) || !registered.contains(cc) {
            return Err(format!(
                "congestion control {cc:?} is not one this server allows ({}: net.ipv4.tcp_allowed_congestion_control and serve --allow-cc, among those the kernel has loaded)",
                allowed.join(" ")
            ));
        }
    }
    if let Some(cpu) = spec.server_cpu {
        if !cpus.contains(&cpu) {
            return Err(format!(
                "server CPU {cpu} is not one the server may run on ({})",
                cpus.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
    }
    Ok(())
}

enum DataSock {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

struct DataTest {
    spec: TestSpec,
    sock: DataSock,
    port: u16,
    peer_ip: IpAddr,
    /// How long the client may send nothing before the test is ended.
    idle: Duration,
    started: Instant,
    /// When the client was last heard from, in ms since `started`.
    last_activity_ms: AtomicU64,
}

/// Counters one data thread returns.
#[derive(Default)]
struct ThreadCounters {
    transactions: u64,
    bytes_in: u64,
    bytes_out: u64,
    connections: u64,
    dropped: u64,
    retrans: u64,
    last_info: Option<crate::kernel::tcp_info::TcpInfo>,
    cpus: CpuTracker,
    /// `--anatomy`: the server's part of the stream's last transaction.
    last_part: Option<crate::probe::anatomy::LastPart>,
}

struct RunningTest {
    test: Arc<DataTest>,
    stop: Arc<AtomicBool>,
    streams: Vec<TcpStream>,
    listener_fd: Option<i32>,
    threads: Vec<JoinHandle<ThreadCounters>>,
    congestion: Option<String>,
    server_cpu: Option<usize>,
    /// The machine's CPU ticks when the test started, and when that was.
    machine_start: Option<(crate::kernel::cpu::MachineTicks, Instant)>,
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canon(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canon(a) == canon(b)
}

/// Bind a data socket on `port`. TCP listeners set `SO_REUSEADDR` only so that a test
/// can reuse a port whose earlier connections are in `TIME_WAIT`: Linux still refuses
/// the bind when another socket listens there (`inet_csk_bind_conflict`), and
/// established connections are matched before listeners, so no traffic is taken from
/// anyone. UDP sockets never set it: two UDP sockets sharing a port would split its
/// datagrams.
///
/// `tos`: the client's traffic class, set on the socket (accepted connections
/// inherit a listener's, `inet_csk_clone_lock`), so responses carry it.
fn bind_data(test: TestKind, addr: SocketAddr, tos: Option<u8>) -> io::Result<DataSock> {
    let class = |s: &Socket| match tos {
        Some(t) => crate::probe::path::set_tos(s, addr.is_ipv6(), t & 0xfc),
        None => Ok(()),
    };
    Ok(match test {
        TestKind::TcpRr | TestKind::TcpCrr => {
            let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
            class(&s)?;
            s.set_reuse_address(true)?;
            s.bind(&addr.into())?;
            s.listen(1024)?;
            DataSock::Tcp(s.into())
        }
        TestKind::UdpRr => {
            let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
            class(&s)?;
            s.bind(&addr.into())?;
            DataSock::Udp(s.into())
        }
    })
}

/// Ports of `range` in the order to try them, starting at a random one so that
/// concurrent tests rarely race for the same port.
fn candidate_ports(range: PortRange) -> impl Iterator<Item = u16> {
    let span = u32::from(range.high - range.low) + 1;
    let start = rand::random::<u32>() % span;
    (0..span.min(256)).map(move |i| (u32::from(range.low) + (start + i) % span) as u16)
}

impl DataTest {
    fn open(
        spec: &TestSpec,
        local_ip: IpAddr,
        peer_ip: IpAddr,
        idle: Duration,
        ports: PortRange,
    ) -> Result<Self, String> {
        let sock = if spec.data_port != 0 {
            bind_data(spec.test, SocketAddr::new(local_ip, spec.data_port), spec.tos).map_err(|e| {
                format!(
                    "cannot open data port {}: {e} (the server's data ports are {ports}; pick a free one or leave -P out)",
                    spec.data_port
                )
            })?
        } else {
            candidate_ports(ports)
                .find_map(|p| bind_data(spec.test, SocketAddr::new(local_ip, p), spec.tos).ok())
                .ok_or_else(|| format!("no free data port in the server's range {ports}"))?
        };
        let port = match &sock {
            DataSock::Tcp(l) => l.local_addr(),
            DataSock::Udp(u) => u.local_addr(),
        }
        .map_err(|e| format!("data socket: {}", crate::error_chain(&e)))?
        .port();
        let idle = idle + Duration::from_millis(spec.interval_ms);
        Ok(Self {
            spec: spec.clone(),
            sock,
            port,
            peer_ip,
            idle,
            started: Instant::now(),
            last_activity_ms: AtomicU64::new(0),
        })
    }

    /// Note that the client was heard from (UDP and TCP_CRR threads; TCP_RR's activity
    /// is read from its sockets' `tcp_info`, to keep the clock off its hot path).
    fn heard(&self) {
        self.last_activity_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn configure(&self, s: &TcpStream) -> io::Result<()> {
        s.set_nodelay(self.spec.nodelay)?;
        if self.spec.thin_linear_timeouts {
            sockopt::set_thin_linear_timeouts(s, true).map_err(|e| e.source)?;
        }
        if let Some(cc) = &self.spec.congestion {
            sockopt::set_congestion(s, cc).map_err(|e| {
                io::Error::new(
                    e.source.kind(),
                    format!("congestion control {cc}: {}", e.source),
                )
            })?;
        }
        Ok(())
    }

    /// Accept the client's streams (TCP_RR) or start the workers (UDP_RR, TCP_CRR).
    fn run(self) -> io::Result<RunningTest> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut streams = Vec::new();
        let mut listener_fd = None;
        let spec = self.spec.clone();
        let this = Arc::new(self);
        match &this.sock {
            DataSock::Tcp(l) if spec.test == TestKind::TcpRr => {
                let deadline = Instant::now() + CONNECT_GRACE;
                while streams.len() < spec.streams as usize {
                    let s = accept_until(l, deadline)?;
                    if !same_ip(s.peer_addr()?.ip(), this.peer_ip) {
                        continue;
                    }
                    this.configure(&s)?;
                    // No receive timeout: a finite one arms a kernel timer on every
                    // blocking recv (~15 % of TCP_RR's rate at one vCPU). `finish`
                    // shuts these sockets down; the control connection's timeout
                    // bounds a client that vanished.
                    streams.push(s.try_clone()?);
                    let (t, st) = (Arc::clone(&this), Arc::clone(&stop));
                    threads.push(
                        std::thread::Builder::new()
                            .name("serve-rr".into())
                            .stack_size(DATA_THREAD_STACK)
                            .spawn(move || t.serve_rr(s, &st))?,
                    );
                }
            }
            DataSock::Tcp(l) => {
                l.set_nonblocking(false)?;
                listener_fd = Some(l.as_raw_fd());
                for _ in 0..spec.streams {
                    let (t, st) = (Arc::clone(&this), Arc::clone(&stop));
                    threads.push(
                        std::thread::Builder::new()
                            .name("serve-crr".into())
                            .stack_size(DATA_THREAD_STACK)
                            .spawn(move || t.serve_crr(&st))?,
                    );
                }
            }
            DataSock::Udp(u) => {
                u.set_read_timeout(Some(POLL_TICK))?;
                for _ in 0..spec.streams {
                    let (t, st) = (Arc::clone(&this), Arc::clone(&stop));
                    threads.push(
                        std::thread::Builder::new()
                            .name("serve-udp".into())
                            .stack_size(DATA_THREAD_STACK)
                            .spawn(move || t.serve_udp(&st))?,
                    );
                }
            }
        }
        let congestion = streams
            .first()
            .and_then(|s| sockopt::congestion(s).ok())
            .or(spec.congestion.clone());
        Ok(RunningTest {
            test: this,
            stop,
            streams,
            listener_fd,
            threads,
            congestion,
            server_cpu: spec.server_cpu,
            machine_start: crate::kernel::cpu::MachineTicks::now()
                .ok()
                .map(|t| (t, Instant::now())),
        })
    }

    fn pin(&self) {
        if let Some(c) = self.spec.server_cpu {
            let _ = cpu::pin_current_thread(c);
        }
    }

    /// `--server-delay`: wait before answering (sleep, then spin the last 200 µs, so
    /// the delay is what was asked, not what the timer slack makes of it).
    fn think(&self, stop: &AtomicBool) {
        if self.spec.server_delay_us > 0 {
            let until = Instant::now() + Duration::from_micros(self.spec.server_delay_us);
            crate::probe::pacing::wait_until(
                crate::probe::pacing::PaceMode::Hybrid {
                    margin: Duration::from_micros(200),
                },
                until,
                || !stop.load(Ordering::Relaxed),
            );
        }
    }

    /// TCP_RR with `--anatomy`: every request read with its RX stamp, every response
    /// carrying the server's part of the transaction before it (`probe::anatomy`).
    fn serve_rr_stamped(&self, s: TcpStream, stop: &AtomicBool) -> ThreadCounters {
        use crate::probe::{anatomy, stamps};
        let mut c = ThreadCounters::default();
        let fd = s.as_raw_fd();
        if stamps::enable(fd, false).is_err() {
            return c;
        }
        let resp_len = u64::from(self.spec.response_size);
        let mut req = vec![0u8; self.spec.request_size as usize];
        let mut resp = vec![0u8; self.spec.response_size as usize];
        let mut book = anatomy::ServerStamps::default();
        book.tlp = anatomy::probes_tail_loss(fd);
        let mut retrans = anatomy::RetransCounters::new(fd, resp_len);
        let mut w = &s;
        while let Some(rx) = read_stamped(fd, &mut req, || !stop.load(Ordering::Relaxed)) {
            let returned = crate::kernel::realtime_ns();
            let cpu = anatomy::current_cpu();
            self.think(stop);
            // The previous response's SND stamps: its last byte's offset from 0.
            let want = (c.transactions * resp_len).wrapping_sub(1) as u32;
            let mut sends = previous_sends(fd, want, rx);
            retrans.note(fd, &mut sends);
            let seq = u32::try_from(c.transactions + 1).unwrap_or(u32::MAX);
            match book.next(seq, rx, returned, cpu, sends, seq) {
                Some(p) => p.write(&mut resp),
                None => {
                    resp[anatomy::TRAILER_AT..anatomy::TRAILER_AT + anatomy::TRAILER_LEN].fill(0)
                }
            }
            if write_full(&mut w, &resp, || !stop.load(Ordering::Relaxed)).is_err() {
                break;
            }
            c.transactions += 1;
            if c.transactions % 64 == 1 {
                c.cpus.sample();
            }
        }
        // The last response's stamps have long come (the client read it before ending).
        let want = (c.transactions * resp_len).wrapping_sub(1) as u32;
        let mut sends = previous_sends(fd, want, None);
        retrans.note(fd, &mut sends);
        let answered = u32::try_from(c.transactions).unwrap_or(u32::MAX);
        c.last_part = book
            .last(sends, answered)
            .zip(s.peer_addr().ok())
            .map(|(p, peer)| anatomy::LastPart::new(peer, &p));
        c
    }

    fn serve_rr(&self, mut s: TcpStream, stop: &AtomicBool) -> ThreadCounters {
        self.pin();
        if self.spec.anatomy {
            let mut c = self.serve_rr_stamped(s, stop);
            c.bytes_in = c.transactions * u64::from(self.spec.request_size);
            c.bytes_out = c.transactions * u64::from(self.spec.response_size);
            return c;
        }
        let mut c = ThreadCounters::default();
        let mut req = vec![0u8; self.spec.request_size as usize];
        let resp = vec![0u8; self.spec.response_size as usize];
        while let Ok(ReadEnd::Full) = read_full(&mut s, &mut req, || !stop.load(Ordering::Relaxed))
        {
            self.think(stop);
            if write_full(&mut s, &resp, || !stop.load(Ordering::Relaxed)).is_err() {
                break;
            }
            c.transactions += 1;
            if c.transactions % 64 == 1 {
                c.cpus.sample();
            }
        }
        c.bytes_in = c.transactions * u64::from(self.spec.request_size);
        c.bytes_out = c.transactions * u64::from(self.spec.response_size);
        c
    }

    fn serve_crr(&self, stop: &AtomicBool) -> ThreadCounters {
        self.pin();
        let mut c = ThreadCounters::default();
        let DataSock::Tcp(l) = &self.sock else {
            return c;
        };
        let mut req = vec![0u8; self.spec.request_size as usize];
        let resp = vec![0u8; self.spec.response_size as usize];
        // --anatomy: the listener's stamping keeps the kernel's receive stamps on
        // between connections (it turns them on lazily, for every socket at once);
        // without it the first responses only would lack their stamps.
        let stamped = self.spec.anatomy;
        if stamped {
            let _ = crate::probe::stamps::hold_rx(l.as_raw_fd());
        }
        let mut tlp = None;
        while !stop.load(Ordering::Relaxed) {
            let Ok((mut s, peer)) = l.accept() else { break };
            if !same_ip(peer.ip(), self.peer_ip) || self.configure(&s).is_err() {
                continue;
            }
            c.connections += 1;
            self.heard();
            let _ = s.set_read_timeout(Some(POLL_TICK));
            let _ = s.set_write_timeout(Some(POLL_TICK));
            if stamped {
                if self.serve_crr_stamped(&s, stop, (&mut req, &resp), &mut tlp) {
                    c.transactions += 1;
                    self.await_close(&mut s, stop, &mut c);
                }
                continue;
            }
            let t0 = Instant::now();
            let keep = || !stop.load(Ordering::Relaxed) && t0.elapsed() < self.idle;
            if !matches!(read_full(&mut s, &mut req, keep), Ok(ReadEnd::Full)) {
                continue;
            }
            if write_full(&mut s, &resp, || !stop.load(Ordering::Relaxed)).is_err() {
                continue;
            }
            c.transactions += 1;
            self.await_close(&mut s, stop, &mut c);
        }
        c.bytes_in = c.transactions * u64::from(self.spec.request_size);
        c.bytes_out = c.transactions * u64::from(self.spec.response_size);
        c
    }

    /// After a TCP_CRR transaction: wait for the client's close, so the client, not the
    /// server, holds TIME_WAIT, and count what the connection retransmitted.
    fn await_close(&self, s: &mut TcpStream, stop: &AtomicBool, c: &mut ThreadCounters) {
        if c.transactions % 64 == 1 {
            c.cpus.sample();
        }
        let t0 = Instant::now();
        let mut one = [0u8; 1];
        let _ = read_full(s, &mut one, || {
            !stop.load(Ordering::Relaxed) && t0.elapsed() < self.idle
        });
        if let Ok(ti) = sockopt::tcp_info(&*s) {
            c.retrans += u64::from(ti.total_retrans);
            c.last_info = Some(ti);
        }
    }

    /// TCP_CRR with `--anatomy`: the request read with its RX stamp, the response, and
    /// after it, once the response is acknowledged (every copy of it sent by then), the
    /// server's part of this one transaction in a message of
    /// [`MIN_RESPONSE`](crate::probe::anatomy::MIN_RESPONSE) bytes (a connection has no
    /// next response to carry it). True when answered.
    fn serve_crr_stamped(
        &self,
        s: &TcpStream,
        stop: &AtomicBool,
        (req, resp): (&mut [u8], &[u8]),
        tlp: &mut Option<bool>,
    ) -> bool {
        use crate::probe::{anatomy, stamps};
        let fd = s.as_raw_fd();
        // Numbers this connection's bytes from 0 (OPT_ID counts from the setsockopt);
        // TX ACK: the response's ACK says no copy of it will follow.
        if stamps::enable(fd, true).is_err() {
            return false;
        }
        // The handshake's retransmissions (a SYN-ACK sent again) are not the response's.
        let mut retrans = anatomy::RetransCounters::new(fd, resp.len() as u64);
        let t0 = Instant::now();
        let keep = || !stop.load(Ordering::Relaxed) && t0.elapsed() < self.idle;
        let Some(rx) = read_stamped(fd, req, keep) else {
            return false;
        };
        let returned = crate::kernel::realtime_ns();
        let cpu = anatomy::current_cpu();
        self.think(stop);
        let mut w = s;
        if write_full(&mut w, resp, || !stop.load(Ordering::Relaxed)).is_err() {
            return false;
        }
        let Some(mut sends) = acked_sends(fd, (resp.len() as u32).wrapping_sub(1), keep) else {
            return false;
        };
        retrans.note(fd, &mut sends);
        let mut book = anatomy::ServerStamps::default();
        // Every connection from the same client negotiates the same: asked once.
        book.tlp = *tlp.get_or_insert_with(|| anatomy::probes_tail_loss(fd));
        book.next(1, rx, returned, cpu, anatomy::Sends::default(), 1);
        let mut part = [0u8; anatomy::MIN_RESPONSE as usize];
        if let Some(p) = book.next(2, None, returned, cpu, sends, 1) {
            p.write(&mut part);
        }
        write_full(&mut w, &part, || !stop.load(Ordering::Relaxed)).is_ok()
    }

    fn serve_udp(&self, stop: &AtomicBool) -> ThreadCounters {
        self.pin();
        let mut c = ThreadCounters::default();
        let DataSock::Udp(u) = &self.sock else {
            return c;
        };
        let mut buf = vec![0u8; self.spec.request_size as usize + 1];
        let mut resp = vec![0u8; self.spec.response_size as usize];
        let echo = (self.spec.request_size.min(self.spec.response_size) as usize).min(8);
        let mut idle_since = Instant::now();
        let mut seen = 0u64;
        let stamped =
            self.spec.anatomy && crate::probe::stamps::enable(u.as_raw_fd(), false).is_ok();
        let mut book = crate::probe::anatomy::ServerStamps::default();
        let mut last_peer = None;
        // SAFETY: sockaddr_storage is plain data.
        let mut from_addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        while !stop.load(Ordering::Relaxed) && idle_since.elapsed() < self.idle {
            let (n, from, rx) = if stamped {
                match recv_from_stamped(u.as_raw_fd(), &mut buf, &mut from_addr) {
                    Ok(x) => x,
                    Err(_) => continue,
                }
            } else {
                match u.recv_from(&mut buf) {
                    Ok((n, from)) => (n, from, None),
                    Err(_) => continue,
                }
            };
            let (returned, cpu) = if stamped {
                (
                    crate::kernel::realtime_ns(),
                    crate::probe::anatomy::current_cpu(),
                )
            } else {
                (0, 0)
            };
            if n != self.spec.request_size as usize || !same_ip(from.ip(), self.peer_ip) {
                continue;
            }
            idle_since = Instant::now();
            self.heard();
            seen += 1;
            if self
                .spec
                .udp_drop_one_in
                .is_some_and(|k| seen % u64::from(k) == 0)
            {
                c.dropped += 1;
                continue;
            }
            // Echo the client's sequence number so late replies are told apart.
            resp[..echo].copy_from_slice(&buf[..echo]);
            self.think(stop);
            if stamped {
                use crate::probe::anatomy;
                // The previous response's SND stamp: datagrams are numbered from 0.
                let want = c.transactions.wrapping_sub(1) as u32;
                let sends = previous_sends(u.as_raw_fd(), want, rx);
                let mut seq = [0u8; 8];
                seq[..echo].copy_from_slice(&buf[..echo]);
                let seq = u64::from_le_bytes(seq) as u32;
                let answered = u32::try_from(c.transactions + 1).unwrap_or(u32::MAX);
                match book.next(seq, rx, returned, cpu, sends, answered) {
                    Some(p) => p.write(&mut resp),
                    None => resp[anatomy::TRAILER_AT..anatomy::TRAILER_AT + anatomy::TRAILER_LEN]
                        .fill(0),
                }
            }
            if u.send_to(&resp, from).is_ok() {
                c.transactions += 1;
                last_peer = Some(from);
                if c.transactions % 64 == 1 {
                    c.cpus.sample();
                }
            }
        }
        if stamped {
            // The last response's SND stamp: datagrams are numbered from 0.
            let want = c.transactions.wrapping_sub(1) as u32;
            let sends = previous_sends(u.as_raw_fd(), want, None);
            let answered = u32::try_from(c.transactions).unwrap_or(u32::MAX);
            c.last_part = book
                .last(sends, answered)
                .zip(last_peer)
                .map(|(p, peer)| crate::probe::anatomy::LastPart::new(peer, &p));
        }
        c.bytes_in = (c.transactions + c.dropped) * u64::from(self.spec.request_size);
        c.bytes_out = c.transactions * u64::from(self.spec.response_size);
        c
    }
}

/// Read a whole request with the RX stamp of its last packet; `None` when the
/// connection closed or `keep` said stop.
fn read_stamped(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    keep: impl Fn() -> bool,
) -> Option<Option<u64>> {
    let mut got = 0;
    let mut rx = None;
    while got < buf.len() {
        match crate::probe::stamps::recv(fd, &mut buf[got..], 0) {
            Ok((0, _)) => return None,
            Ok((n, ts)) => {
                got += n;
                rx = ts.or(rx);
            }
            Err(e) if crate::probe::io::is_timeout(&e) => {
                if !keep() {
                    return None;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(rx)
}

/// The SND stamps of byte `want` of a message just sent, read until its ACK stamp:
/// every copy of it the kernel sent (a retransmission comes before the ACK it earns).
/// `None` when `keep` stops the wait first (the client went quiet or the run ended).
fn acked_sends(
    fd: std::os::fd::RawFd,
    want: u32,
    keep: impl Fn() -> bool,
) -> Option<crate::probe::anatomy::Sends> {
    use crate::probe::{anatomy, stamps};
    let mut sends = anatomy::Sends::default();
    let mut acked = false;
    loop {
        let _ = stamps::drain_tx(fd, |t| {
            if t.id == want {
                match t.kind {
                    stamps::TxKind::Sent => sends.add(t.ns),
                    stamps::TxKind::Acked => acked = true,
                }
            }
            acked
        });
        if acked {
            return Some(sends);
        }
        if !keep() {
            return None;
        }
        // An error-queue entry shows as POLLERR.
        let mut p = libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call's duration.
        unsafe { libc::poll(&mut p, 1, POLL_TICK.as_millis() as libc::c_int) };
    }
}

/// The SND stamps of the previous response (OPT_ID `want`), read once the request
/// after it arrived (RX stamp `rx`): its first, and any retransmission, which comes
/// only from a timer and so only when that request came
/// [`NO_RETRANSMISSION_WITHIN_NS`](crate::probe::anatomy::NO_RETRANSMISSION_WITHIN_NS)
/// or later after the response left.
fn previous_sends(
    fd: std::os::fd::RawFd,
    want: u32,
    rx: Option<u64>,
) -> crate::probe::anatomy::Sends {
    use crate::probe::{anatomy, stamps};
    let mut sends = anatomy::Sends::default();
    let _ = stamps::drain_tx(fd, |t| {
        if t.kind == stamps::TxKind::Sent && t.id == want {
            sends.add(t.ns);
        }
        sends.first.is_some_and(|first| {
            rx.is_some_and(|rx| rx.saturating_sub(first) < anatomy::NO_RETRANSMISSION_WITHIN_NS)
        })
    });
    sends
}

fn recv_from_stamped(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    from: &mut libc::sockaddr_storage,
) -> io::Result<(usize, SocketAddr, Option<u64>)> {
    let (n, rx) = crate::probe::stamps::recv_from(fd, buf, 0, Some(from))?;
    // SAFETY: the kernel wrote a sockaddr of its family into `from`.
    let sa = unsafe {
        socket2::SockAddr::new(
            *from,
            std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        )
    }
    .as_socket()
    .ok_or_else(|| io::Error::other("a datagram without a sender"))?;
    Ok((n, sa, rx))
}

fn accept_until(l: &TcpListener, deadline: Instant) -> io::Result<TcpStream> {
    l.set_nonblocking(true)?;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client did not connect its data streams",
                    ));
                }
                let mut pfd = libc::pollfd {
                    fd: l.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, 50) };
            }
            Err(e) => return Err(e),
        }
    }
}

impl RunningTest {
    /// How long the client has sent nothing: TCP_RR from its sockets' `tcp_info`
    /// (`tcpi_last_data_recv`, the most recently active stream), the others from the
    /// data threads' last note. `None` before anything can be said.
    fn quiet_for(&self) -> Option<Duration> {
        if !self.streams.is_empty() {
            return self
                .streams
                .iter()
                .filter_map(|s| sockopt::tcp_info(s).ok())
                .map(|ti| Duration::from_millis(u64::from(ti.last_data_recv_ms)))
                .min();
        }
        let last = Duration::from_millis(self.test.last_activity_ms.load(Ordering::Relaxed));
        self.test.started.elapsed().checked_sub(last)
    }

    /// Snapshot `tcp_info`, stop every thread and add up the counters.
    fn finish(self) -> ServerReport {
        let machine_end = crate::kernel::cpu::MachineTicks::now().ok();
        let window = self.machine_start.zip(machine_end);
        let mut report = ServerReport {
            congestion: self.congestion,
            machine_ticks: window.map(|((a, _), b)| [a, b]),
            machine_elapsed_ns: window
                .map(|((_, at), _)| u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX)),
            ..ServerReport::default()
        };
        for s in &self.streams {
            if let Ok(ti) = sockopt::tcp_info(s) {
                report.total_retrans += u64::from(ti.total_retrans);
                report.tcp_info.push(ti);
            }
        }
        self.stop.store(true, Ordering::SeqCst);
        for s in &self.streams {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(fd) = self.listener_fd {
            // SAFETY: the listener is owned by the worker threads' Arc and still open; wakes accept().
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
        let mut cpus = CpuTracker::default();
        let mut crr_info = None;
        for t in self.threads {
            if let Ok(c) = t.join() {
                report.transactions += c.transactions;
                report.bytes_received += c.bytes_in;
                report.bytes_sent += c.bytes_out;
                report.connections += c.connections;
                report.dropped_on_purpose += c.dropped;
                report.total_retrans += c.retrans;
                report.last_parts.extend(c.last_part);
                cpus.merge(&c.cpus);
                crr_info = c.last_info.or(crr_info);
            }
        }
        if let Some(ti) = crr_info {
            report.tcp_info.push(ti);
        }
        report.placement = cpus.placement(self.server_cpu);
        report
    }
}
