//! The agent's metrics endpoint: `/metrics`, `/-/healthy` and `/-/ready` over HTTP/1.1,
//! made for a network where anyone may connect.
//!
//! hyper's HTTP/1 server does the protocol (a maintained parser whose header limit
//! and header-read deadline are settings, and which never buffers a body it is not
//! asked to read); around it, everything a peer could hold is bounded:
//!
//! - **Header bytes**: hyper's read buffer is [`HttpLimits::max_header_bytes`]; a longer
//!   head is answered 431 and the connection closed.
//! - **Bodies**: none is read. A request that announces one (`Content-Length` above
//!   0, or chunked) is answered 413 and the connection closed, so a huge
//!   `Content-Length` costs nothing.
//! - **Time**: the head must arrive within [`HttpLimits::header_timeout`]; a read or a
//!   write that makes no progress for its stall limit ends the connection
//!   ([`deadline::Deadlines`]), so a scraper that never reads its answer, or a
//!   keep-alive connection left open, cannot pin anything. A TLS handshake has the
//!   header deadline too.
//! - **Connections**: at most [`HttpLimits::max_connections`] (and a quarter of that
//!   per source: an IPv4 address, or an IPv6 /64). At the cap a new connection
//!   displaces one of its source's own when the source has its share, else one of
//!   the source holding the most: first the one not answering (a head or a TLS
//!   handshake begun and not finished, a keep-alive between scrapes, or nothing sent
//!   for 250 ms) that has been told nothing yet, else heard from longest ago, then
//!   the one whose client has
//!   left its answer unread for longest (250 ms at least). A connection is
//!   answering from its request to the last byte handed to the kernel, and one
//!   whose client takes it as it comes is not cut for a newcomer of its own source;
//!   nor are the newest few (a source's share) whose request has not been read yet.
//!   A source holding two more than the newcomer's loses even one being answered
//!   (or in its handshake), and so does the oldest connection when every source
//!   holds one and the newcomer's none, so sources scraping at full speed cannot
//!   keep the others out. When none may go, the new one is closed.
//!   A connection's send buffer is fixed at 256 KiB (512 KiB in the kernel), so a
//!   client that never reads holds that much kernel memory, not tcp_wmem's 4 MB.
//!   HTTP/1 answers one request at a time per connection, so pipelining is
//!   bounded by the header buffer.
//! - **Work**: an exposition is one pass over every series (tens of ms for a thousand
//!   peers), so scrapes share it: a request is answered with an exposition begun
//!   after it arrived, or one begun at most 26 times as long as it took to make (and
//!   at most a second) before the request arrived; at most one is computed at a time
//!   per format. So making expositions takes at most a 26th of a core however many
//!   clients scrape (one a second where one takes longer than 38 ms), and a scrape's
//!   values are at most a second older than its request (26 ms for an agent whose
//!   exposition takes a millisecond).
//! - **Memory**: an answer is the shared exposition itself, queued to the socket
//!   without a copy (hyper's vectored-write strategy). Past
//!   [`MAX_EXPOSITIONS_SENDING`] expositions still being sent, a new one displaces
//!   the slow readers of the older ones, oldest first: a client that has read nothing
//!   for a second, or that reads at a pace that would take longer than
//!   [`READ_WITHIN`] (Prometheus's default scrape timeout) for the whole answer. So
//!   slow readers hold a few expositions, not one each, and a client reading at
//!   a scraper's pace is never cut, however many expositions others ask for.
//! - **Authentication** ([`web_config`], [`logins`]): a login that succeeded is
//!   remembered; any other is checked by bcrypt on a thread of its own, one at a
//!   time, at most half a core, from a short queue with one place per source, and a
//!   source whose guess failed waits longer after each failure: guessing slows the
//!   guesser, never an exposition, a health check or a remembered login.
//!
//! Everything runs on one thread of its own (a single-threaded tokio runtime, with
//! a small blocking pool for expositions), and passwords on another: the probe loop
//! never shares a thread with a client of the endpoint.

pub mod deadline;
pub mod logins;
mod slots;
pub mod web_config;

use super::metrics::{Format, Metrics};
use crate::kernel::fs::{stamp, FileStamp};
use bytes::{Buf, Bytes};
use deadline::{Deadlines, Progress};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use slots::{Activity, Slot, Slots};
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use web_config::{Auth, WebConfig};

/// What one client may hold of the endpoint.
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// Bytes of a request's line and headers (hyper's minimum, 8 KiB, by default).
    pub max_header_bytes: usize,
    /// Time from the connection's first byte to a request's complete head.
    pub header_timeout: Duration,
    /// Time a write may wait for the client to read.
    pub write_timeout: Duration,
    /// Time a connection may stay open with nothing to read (keep-alive included).
    pub idle_timeout: Duration,
    /// Connections open at once, from all sources.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_header_bytes: 8 * 1024,
            header_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_connections: 64,
        }
    }
}

/// Errors starting the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The address cannot be bound.
    #[error("cannot serve metrics on {addr} (--metrics-listen{why})", why = if crate::kernel::privilege::is_refusal(source) { format!(": {}", crate::kernel::privilege::low_port_fix(addr.port())) } else { String::new() })]
    Bind {
        /// The address asked for (`--metrics-listen`).
        addr: SocketAddr,
        /// The error from binding it, or from reading back the bound address.
        #[source]
        source: io::Error,
    },
    /// The web config file cannot be used.
    #[error(transparent)]
    WebConfig(#[from] web_config::WebConfigError),
}

/// The metrics endpoint, bound and not yet serving.
pub struct MetricsServer {
    listener: std::net::TcpListener,
    /// The address bound (port 0 resolved).
    pub addr: SocketAddr,
    web: Web,
    limits: HttpLimits,
}

/// The web config in force, and the file it came from, read again when it or a
/// certificate, key or CA file it names changes (the exporter-toolkit reads them all
/// per handshake), so a renewed certificate needs no restart. The files are read and
/// parsed on the blocking pool: however a file is made, new connections are served
/// with the config in force meanwhile.
struct Web {
    now: Arc<WebConfig>,
    file: Option<(PathBuf, Vec<Option<FileStamp>>)>,
    checked: Instant,
    reading: Option<tokio::task::JoinHandle<Result<WebConfig, web_config::WebConfigError>>>,
}

/// The stamps of the web config file and of the files `config` read.
fn stamps(path: &Path, config: &WebConfig) -> Vec<Option<FileStamp>> {
    std::iter::once(path)
        .chain(config.files.iter().map(PathBuf::as_path))
        .map(stamp)
        .collect()
}

impl Web {
    /// Take a finished read of the files, and start one when they changed (looked at
    /// once a second at most). Files that no longer read keep the last good config.
    async fn refresh(&mut self, refused: &Counter) {
        let Some((path, seen)) = &mut self.file else {
            return;
        };
        if let Some(reading) = self.reading.take_if(|r| r.is_finished()) {
            match reading.await {
                // As the exporter-toolkit, TLS and authentication are what the agent
                // started with: a file emptied or cut while being saved must not turn
                // either off.
                Ok(Ok(c))
                    if c.tls.is_some() != self.now.tls.is_some()
                        || c.needs_auth() != self.now.needs_auth() =>
                {
                    refused.inc();
                    eprintln!(
                        "rttlab agent: keeping the previous web config: {} would turn TLS or basic auth {} (restart the agent to change that)",
                        path.display(),
                        if c.tls.is_some() || c.needs_auth() { "on" } else { "off" }
                    );
                }
                Ok(Ok(c)) => {
                    // The files the new config read (a new cert_file, say).
                    *seen = stamps(path, &c);
                    self.now = Arc::new(c);
                }
                Ok(Err(e)) => {
                    refused.inc();
                    eprintln!(
                        "rttlab agent: keeping the previous web config: {}",
                        crate::error_chain(&e)
                    );
                }
                Err(_) => {
                    refused.inc();
                }
            }
        }
        if self.reading.is_none() && self.checked.elapsed() >= Duration::from_secs(1) {
            self.checked = Instant::now();
            let now = stamps(path, &self.now);
            if now != *seen {
                *seen = now;
                let path = path.clone();
                self.reading = Some(tokio::task::spawn_blocking(move || WebConfig::read(&path)));
            }
        }
    }
}

impl MetricsServer {
    /// Listen on `addr`, serving with the TLS and basic auth of `web_config` (an
    /// exporter-toolkit web config file), or plain HTTP without one.
    ///
    /// # Errors
    /// The address cannot be bound; the web config cannot be used.
    pub fn bind(
        addr: SocketAddr,
        web_config: Option<&Path>,
        limits: HttpLimits,
    ) -> Result<Self, HttpError> {
        let now = match web_config {
            Some(p) => WebConfig::read(p)?,
            None => WebConfig::none(),
        };
        let web = Web {
            file: web_config.map(|p| (p.to_owned(), stamps(p, &now))),
            now: Arc::new(now),
            checked: Instant::now(),
            reading: None,
        };
        let listener = Self::listen(addr).map_err(|source| HttpError::Bind { addr, source })?;
        Ok(Self {
            addr: listener
                .local_addr()
                .map_err(|source| HttpError::Bind { addr, source })?,
            listener,
            web,
            limits,
        })
    }

    /// Whether the endpoint serves TLS.
    pub fn tls(&self) -> bool {
        self.web.now.tls.is_some()
    }

    fn listen(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        s.set_reuse_address(true)?;
        if addr.is_ipv6() {
            s.set_only_v6(false)?;
        }
        s.bind(&addr.into())?;
        s.listen(1024)?;
        s.set_nonblocking(true)?;
        Ok(s.into())
    }

    /// Serve until `stop` is set (checked every 100 ms).
    ///
    /// # Errors
    /// The runtime cannot start.
    pub fn serve(self, metrics: &Arc<Metrics>, stop: &Arc<AtomicBool>) -> io::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(4)
            .thread_name("metrics-work")
            .build()?;
        let listener = {
            let _enter = rt.enter();
            tokio::net::TcpListener::from_std(self.listener)?
        };
        let shared = Shared::new(metrics, self.limits)?;
        let mut web = self.web;
        let stop = Arc::clone(stop);
        // SIGINT and SIGTERM end the wait at once; the tick is for a stop set
        // otherwise and for the web config's changes.
        let wake = super::wake::SignalWake::new(&[
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
        ])?;
        let signalled = {
            let _enter = rt.enter();
            tokio::net::UnixStream::from_std(wake.stream()?)?
        };
        rt.block_on(async move {
            // Twice a second: a stop is seen within a second, as promised, and a changed
            // web config within half of one; more often only costs an idle agent CPU.
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            let mut ticks = 0u32;
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((tcp, peer)) => {
                            if let Some(slot) = Slots::admit(&shared, peer.ip()) {
                                let config = Arc::clone(&web.now);
                                tokio::spawn(connection(tcp, slot, config, Arc::clone(&shared)));
                            } else {
                                shared.refused.busy.inc();
                            }
                        }
                        // Out of descriptors and the like: back off, never exit.
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    },
                    _ = signalled.readable() => {
                        // Read through tokio's own handle, which clears its readiness.
                        let mut buf = [0u8; 64];
                        while matches!(signalled.try_read(&mut buf), Ok(n) if n > 0) {}
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    _ = tick.tick() => {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        web.refresh(&shared.refused.web_config).await;
                        ticks = ticks.wrapping_add(1);
                        if ticks % 4 == 0 {
                            tokio::task::spawn_blocking(trim);
                        }
                    }
                }
            }
        });
        // Connections still open end with the runtime.
        rt.shutdown_timeout(Duration::from_millis(100));
        Ok(())
    }
}

/// Expositions kept for clients still reading them. Four covers a scrape of each
/// format in flight while the next pair is made.
pub const MAX_EXPOSITIONS_SENDING: usize = 4;

/// The send buffer of a metrics connection, bytes (see [`connection`]).
const SEND_BUFFER: usize = 256 << 10;

/// A client whose answer has waited this long for it to read is a slow reader, and
/// one that has read this long is judged by its pace ([`READ_WITHIN`]): past
/// [`MAX_EXPOSITIONS_SENDING`], slow readers lose their exposition.
const SLOW_READER: Duration = Duration::from_secs(1);

/// The time a client may take to read a whole exposition, judged by its pace once it
/// has read for `SLOW_READER`: Prometheus's default `scrape_timeout`, after which a
/// scraper gives up on the answer anyway.
pub const READ_WITHIN: Duration = Duration::from_secs(10);

struct Shared {
    metrics: Arc<Metrics>,
    limits: HttpLimits,
    refused: Refused,
    slots: Mutex<Slots>,
    /// One per format, indexed by `Format as usize`: protobuf, OpenMetrics, text.
    exposition: [Cache; 3],
    /// Expositions being sent, oldest first (a dead entry was sent in full).
    sending: Mutex<Vec<Weak<Sent>>>,
    logins: logins::Logins,
}

/// Handles on `rttlab_agent_http_refused_total`, one per reason.
struct Refused {
    displaced: Counter,
    slow_reader: Counter,
    busy: Counter,
    body: Counter,
    method: Counter,
    unauthorized: Counter,
    login_throttled: Counter,
    rate_limit: Counter,
    web_config: Counter,
}

impl Shared {
    fn new(metrics: &Arc<Metrics>, limits: HttpLimits) -> io::Result<Arc<Self>> {
        let logins = logins::Logins::start()?;
        let c = |reason: &str| {
            metrics
                .http_refused
                .get_or_create(&vec![("reason".into(), reason.into())])
                .clone()
        };
        Ok(Arc::new(Self {
            metrics: Arc::clone(metrics),
            limits,
            refused: Refused {
                displaced: c("displaced"),
                slow_reader: c("slow_reader"),
                busy: c("busy"),
                body: c("body"),
                method: c("method"),
                unauthorized: c("unauthorized"),
                login_throttled: c("login_throttled"),
                rate_limit: c("rate_limit"),
                web_config: c("web_config"),
            },
            slots: Mutex::new(Slots::default()),
            exposition: [Cache::default(), Cache::default(), Cache::default()],
            sending: Mutex::new(Vec::new()),
            logins,
        }))
    }

    /// Keep `sent` among the expositions being sent; past the cap, the slow readers
    /// of the older ones are displaced, oldest first, until the cap is met by the
    /// expositions someone still reads (or no reader is slow).
    fn track(&self, sent: &Arc<Sent>) {
        let mut sending = lock(&self.sending);
        sending.retain(|s| s.strong_count() > 0);
        sending.push(Arc::downgrade(sent));
        let now = Instant::now();
        let mut kept = sending.len();
        for older in sending[..sending.len() - 1]
            .iter()
            .filter_map(Weak::upgrade)
        {
            if kept <= MAX_EXPOSITIONS_SENDING {
                break;
            }
            let mut readers = lock(&older.readers);
            readers.retain(|_, r| {
                let slow = r.slow(now);
                if slow {
                    r.displace.notify_one();
                    self.refused.slow_reader.inc();
                }
                !slow
            });
            if readers.is_empty() {
                kept -= 1;
            }
        }
    }
}

/// One exposition while it is being sent, and the connections sending it (by slot).
#[derive(Default)]
struct Sent {
    readers: Mutex<BTreeMap<u64, Reader>>,
}

/// A connection sending an exposition, and how far it has got.
struct Reader {
    displace: Arc<Notify>,
    stall: Arc<Progress>,
    began: Instant,
    len: usize,
    /// Bytes hyper has not yet handed to the kernel.
    left: Arc<std::sync::atomic::AtomicUsize>,
}

impl Reader {
    /// Whether it reads too slowly to keep its exposition in memory: nothing taken for
    /// [`SLOW_READER`], or, after that long, a pace that needs more than
    /// [`READ_WITHIN`] for the whole (sent / elapsed < len / READ_WITHIN).
    fn slow(&self, now: Instant) -> bool {
        let stalled = self
            .stall
            .since()
            .is_some_and(|t| now.saturating_duration_since(t) >= SLOW_READER);
        let elapsed = now.saturating_duration_since(self.began);
        let sent = self.len - self.left.load(Ordering::Relaxed).min(self.len);
        stalled
            || (elapsed >= SLOW_READER
                && (sent as f64) * READ_WITHIN.as_secs_f64()
                    < (self.len as f64) * elapsed.as_secs_f64())
    }
}

/// An answer's bytes (an exposition shares them with every connection it answers).
/// hyper queues this to the socket and drops it when its last byte is written: until
/// then its connection is answering, and a reader of an exposition.
struct Lease {
    bytes: Bytes,
    answering: Arc<Activity>,
    sent: Option<(Arc<Sent>, u64)>,
    /// What is left of `bytes`, shown to [`Reader::slow`].
    left: Arc<std::sync::atomic::AtomicUsize>,
}

impl Buf for Lease {
    fn remaining(&self) -> usize {
        self.bytes.remaining()
    }

    fn chunk(&self) -> &[u8] {
        self.bytes.chunk()
    }

    fn advance(&mut self, n: usize) {
        self.bytes.advance(n);
        self.left.store(self.bytes.len(), Ordering::Relaxed);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.answering.answering.store(false, Ordering::Relaxed);
        if let Some((sent, slot)) = &self.sent {
            lock(&sent.readers).remove(slot);
        }
    }
}

/// A response's body before it becomes a [`Lease`]: bytes, and the exposition they
/// are part of.
struct Answer {
    bytes: Bytes,
    sent: Option<Arc<Sent>>,
}

impl From<&'static str> for Answer {
    fn from(s: &'static str) -> Self {
        Self {
            bytes: Bytes::from_static(s.as_bytes()),
            sent: None,
        }
    }
}

/// An exposition answers the requests that arrive until this many times as long as
/// it took to make has passed since it was begun, up to [`MAX_REUSE`]: so the agent
/// spends at most a 26th of a core making expositions (or makes one a
/// second, where one takes longer than 38 ms), however many clients scrape
/// and however often (once, twelve back-to-back scrapers kept the exposition threads
/// at 0.85 of a core, each exposition made anew; twelve scraping once a second each,
/// spread over it, still shared one), while an agent whose exposition takes a
/// millisecond answers with values at most 26 ms older than the request.
const REUSE_FACTOR: u32 = 26;

/// The oldest values a scrape is answered with (from the exposition's beginning to
/// the request's arrival): far below any
/// scrape interval (Prometheus's default is a minute, its sample configuration's
/// 15 s), so a scrape misses at most the last second's probes, which the next one
/// counts.
const MAX_REUSE: Duration = Duration::from_secs(1);

/// The newest exposition of one format, and the lock that makes one at a time. It
/// is kept for its reuse window (see [`REUSE_FACTOR`]), no longer: an exposition is
/// megabytes.
#[derive(Default)]
struct Cache {
    newest: Mutex<Option<Made>>,
    making: tokio::sync::Mutex<()>,
}

/// An exposition, when it was begun and until when it answers new requests.
struct Made {
    begun: Instant,
    reuse_until: Instant,
    body: Bytes,
    sent: Arc<Sent>,
}

impl Made {
    /// Whether it may answer a request that arrived at `arrived`: begun after it, or
    /// within its reuse window.
    fn answers(&self, arrived: Instant) -> bool {
        self.begun >= arrived || arrived < self.reuse_until
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One connection: TLS when configured, then HTTP/1.1 until it closes, stalls, runs
/// past a deadline or is displaced.
async fn connection(
    tcp: tokio::net::TcpStream,
    slot: Slot,
    web: Arc<WebConfig>,
    shared: Arc<Shared>,
) {
    let _ = tcp.set_nodelay(true);
    // A fixed send buffer (the kernel doubles it) instead of autotuning up to
    // tcp_wmem's 4 MB: a client that never reads holds at most this much kernel
    // memory, and a stall means the client stopped (a write waits for a third of
    // the buffer to drain, 170 KB here: 120 ms at 1.4 MB/s, where 4 MB took 1 s). It
    // still carries 5 MB/s over a 100 ms round trip.
    let _ = socket2::SockRef::from(&tcp).set_send_buffer_size(SEND_BUFFER);
    let limits = &shared.limits;
    let io = Deadlines::new(
        tcp,
        limits.idle_timeout,
        limits.write_timeout,
        Arc::clone(&slot.activity.stall),
    );
    let displace = Arc::clone(&slot.displace);
    let work = async {
        match web.tls.clone() {
            Some(tls) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(tls);
                let Ok(Ok(io)) =
                    tokio::time::timeout(limits.header_timeout, acceptor.accept(io)).await
                else {
                    return;
                };
                http(io, &slot, &web, &shared).await;
            }
            None => http(io, &slot, &web, &shared).await,
        }
    };
    tokio::select! {
        () = work => {}
        () = displace.notified() => {}
    }
}

async fn http<T>(io: T, slot: &Slot, web: &Arc<WebConfig>, shared: &Arc<Shared>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (id, displace) = (slot.id, Arc::clone(&slot.displace));
    let service = hyper::service::service_fn(|req: Request<Incoming>| {
        let shared = Arc::clone(shared);
        let web = Arc::clone(web);
        let activity = Arc::clone(&slot.activity);
        let displace = Arc::clone(&displace);
        let source = slot.source;
        async move {
            let response = answer(&req, &web, &shared, &activity, source).await;
            Ok::<_, std::convert::Infallible>(response.map(|a| {
                let left = Arc::new(std::sync::atomic::AtomicUsize::new(a.bytes.len()));
                let sent = a.sent.map(|sent| {
                    let reader = Reader {
                        displace,
                        stall: Arc::clone(&activity.stall),
                        began: Instant::now(),
                        len: a.bytes.len(),
                        left: Arc::clone(&left),
                    };
                    lock(&sent.readers).insert(id, reader);
                    (sent, id)
                });
                Full::new(Lease {
                    bytes: a.bytes,
                    answering: activity,
                    sent,
                    left,
                })
            }))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Some(shared.limits.header_timeout))
        .max_buf_size(shared.limits.max_header_bytes.max(8192))
        // Queue answers as they are (an exposition is shared), never copy them.
        .writev(true)
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service)
        .await;
}

fn text(status: StatusCode, body: &'static str) -> Response<Answer> {
    let mut r = Response::new(Answer::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn answer(
    req: &Request<Incoming>,
    web: &Arc<WebConfig>,
    shared: &Arc<Shared>,
    activity: &Activity,
    source: IpAddr,
) -> Response<Answer> {
    let arrived = Instant::now();
    let mut response = route(req, web, shared, arrived, source, activity).await;
    for (name, value) in &web.headers {
        if let (Ok(n), Ok(v)) = (
            header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().insert(n, v);
        }
    }
    response
}

async fn route(
    req: &Request<Incoming>,
    web: &Arc<WebConfig>,
    shared: &Arc<Shared>,
    arrived: Instant,
    source: IpAddr,
    activity: &Activity,
) -> Response<Answer> {
    // The toolkit's rate_limit, as the toolkit applies it: one bucket for every
    // client, taken before authentication (it spares the agent's work, not a
    // scraper's share: anonymous requests spend it too).
    if !web.within_rate() {
        shared.refused.rate_limit.inc();
        return text(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n");
    }
    let announces_body = req.headers().contains_key(header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if announces_body {
        shared.refused.body.inc();
        let mut r = text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the agent reads no request body\n",
        );
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        shared.refused.method.inc();
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    // Only a request that may be answered makes its connection busy (not displaced for
    // a newcomer): one waiting its turn for bcrypt is a guess until it is checked.
    if let Some(refusal) = refuse_login(req, web, shared, source).await {
        return refusal;
    }
    activity.answering.store(true, Ordering::Relaxed);
    match req.uri().path() {
        "/metrics" => {
            let accept = req
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok());
            let format = Format::negotiate(accept);
            // A HEAD is answered with the headers alone: it costs no exposition.
            let mut r = if req.method() == Method::HEAD {
                Response::new(Answer::from(""))
            } else {
                let (bytes, sent) = exposition(shared, format, arrived).await;
                Response::new(Answer {
                    bytes,
                    sent: Some(sent),
                })
            };
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            );
            r
        }
        "/-/healthy" => text(StatusCode::OK, "Healthy\n"),
        "/-/ready" => text(StatusCode::OK, "Ready\n"),
        "/" => {
            let mut r = text(
                StatusCode::OK,
                "<html><body><a href=\"/metrics\">rttlab agent metrics</a></body></html>\n",
            );
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            r
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: the agent serves /metrics, /-/healthy and /-/ready\n",
        ),
    }
}

/// The answer to a request whose credentials do not pass ([`authorize`]): 429 with
/// Retry-After when its source must wait or the checks' queue is full, 401 when they
/// are wrong; `None` when it may be answered.
async fn refuse_login(
    req: &Request<Incoming>,
    web: &Arc<WebConfig>,
    shared: &Arc<Shared>,
    source: IpAddr,
) -> Option<Response<Answer>> {
    if !web.needs_auth() {
        return None;
    }
    match authorize(req, web, shared, source).await {
        Ok(Auth::Allowed) => None,
        Err(throttled) => {
            shared.refused.login_throttled.inc();
            let mut r = text(
                StatusCode::TOO_MANY_REQUESTS,
                "too many password checks from your address or in all: try again later\n",
            );
            let secs = throttled.retry_after.as_secs() + 1;
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            // Requests pipelined behind it would be refused too: the connection ends.
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            Some(r)
        }
        Ok(Auth::Denied) => {
            shared.refused.unauthorized.inc();
            let mut r = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"rttlab agent\""),
            );
            Some(r)
        }
    }
}

/// Check the request's credentials: at once for a login seen before or a header
/// that is no login, else by the logins thread ([`logins`]), or not at all when
/// `source` must wait.
async fn authorize(
    req: &Request<Incoming>,
    web: &Arc<WebConfig>,
    shared: &Arc<Shared>,
    source: IpAddr,
) -> Result<Auth, logins::Throttled> {
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    if let Some(verdict) = web.quick(authorization.as_deref()) {
        return Ok(verdict);
    }
    let verdict = shared
        .logins
        .submit(source, Arc::clone(web), authorization)?;
    verdict.await.unwrap_or(Ok(Auth::Denied))
}

/// An exposition that answers a request that arrived at `arrived` ([`Made::answers`]):
/// the newest one if it does, else a new one (made by this request, or by the one
/// ahead of it in the queue).
async fn exposition(shared: &Arc<Shared>, format: Format, arrived: Instant) -> (Bytes, Arc<Sent>) {
    let cache = &shared.exposition[format as usize];
    let fresh = || {
        lock(&cache.newest)
            .as_ref()
            .filter(|m| m.answers(arrived))
            .map(|m| (m.body.clone(), Arc::clone(&m.sent)))
    };
    let _making = cache.making.lock().await;
    if let Some(answer) = fresh() {
        return answer;
    }
    let begun = Instant::now();
    let metrics = Arc::clone(&shared.metrics);
    let body = tokio::task::spawn_blocking(move || Bytes::from(metrics.expose(format)))
        .await
        .unwrap_or_default();
    let reuse = begun.elapsed().saturating_mul(REUSE_FACTOR).min(MAX_REUSE);
    let sent = Arc::<Sent>::default();
    shared.track(&sent);
    *lock(&cache.newest) = Some(Made {
        begun,
        reuse_until: begun + reuse,
        body: body.clone(),
        sent: Arc::clone(&sent),
    });
    forget_after_reuse(shared, format, begun, begun + reuse);
    (body, sent)
}

/// Drop the exposition of `format` begun at `begun` at `until`, the end of its reuse
/// window, unless a newer one has taken its place: one timer per exposition made.
fn forget_after_reuse(shared: &Arc<Shared>, format: Format, begun: Instant, until: Instant) {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        tokio::time::sleep_until(until.into()).await;
        let mut newest = lock(&shared.exposition[format as usize].newest);
        if newest.as_ref().is_some_and(|m| m.begun == begun) {
            newest.take();
        }
    });
}

/// Give freed memory back to the system: an exposition is megabytes freed at once,
/// and glibc keeps freed memory in the thread's arena unless asked.
fn trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What a client that sends `input` and then closes its side is answered, byte for
/// byte, by one connection of the endpoint with `web`'s rules: the whole HTTP path
/// (hyper's parser, the limits, authentication, routing) without a socket, for the
/// fuzz target and tests. A connection that would wait for more than `input`
/// gives up when it reads the end of it.
///
/// # Panics
/// The runtime cannot start.
pub fn replay(input: &[u8], metrics: &Arc<Metrics>, web: WebConfig) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let shared = Shared::new(metrics, HttpLimits::default()).expect("the logins thread");
    let web = Arc::new(web);
    let input = input.to_vec();
    rt.block_on(async move {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let slot = Slots::admit(&shared, IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("a slot");
        let serving = tokio::spawn(async move { http(server, &slot, &web, &shared).await });
        let (mut rd, mut wr) = tokio::io::split(&mut client);
        let write = async {
            let _ = wr.write_all(&input).await;
            let _ = wr.shutdown().await;
        };
        let mut out = Vec::new();
        let read = rd.read_to_end(&mut out);
        let _ = tokio::join!(write, read);
        let _ = serving.await;
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::metrics::Buckets;

    fn metrics() -> Arc<Metrics> {
        Arc::new(Metrics::new(&"10us:10s:3".parse::<Buckets>().unwrap()))
    }

    fn statuses(out: &[u8]) -> Vec<u16> {
        String::from_utf8_lossy(out)
            .match_indices("HTTP/1.1 ")
            .filter_map(|(i, _)| String::from_utf8_lossy(&out[i + 9..i + 12]).parse().ok())
            .collect()
    }

    /// Witness: the status lines hyper wrote, in order, for pipelined requests.
    #[test]
    fn pipelined_requests_are_answered_in_order_and_a_body_ends_the_connection() {
        let m = metrics();
        let out = replay(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n\
              POST /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n\
              GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
              GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
            &m,
            WebConfig::none(),
        );
        assert_eq!(statuses(&out), [200, 404, 405, 200, 413]);
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("rttlab_agent_peers 0"), "{text}");
        // The counters saw the refusals.
        let exposition = m.text();
        for (reason, n) in [("body", 1), ("method", 1), ("busy", 0)] {
            let line = format!("rttlab_agent_http_refused_total{{reason=\"{reason}\"}} {n}");
            assert!(exposition.contains(&line), "{line} in {exposition}");
        }
    }

    /// Witness: hyper's 431 for a head longer than the 8 KiB limit.
    #[test]
    fn a_head_over_the_limit_is_431() {
        let mut req = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
        req.extend(std::iter::repeat_n(b'a', 20_000));
        req.extend(b"\r\n\r\n");
        assert_eq!(
            statuses(&replay(&req, &metrics(), WebConfig::none())),
            [431]
        );
    }
}
