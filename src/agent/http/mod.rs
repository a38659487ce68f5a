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
//!   per source address); at the cap a new connection displaces the oldest one that
//!   is not answering a request (its source's own oldest first), and when every one
//!   is answering, the new one is closed. HTTP/1 answers one request at a time per
//!   connection, so pipelining is bounded by the header buffer.
//! - **Work**: an exposition is one pass over every series (tens of ms for a thousand
//!   peers), so concurrent scrapes share it: a request is answered with an exposition
//!   begun after it arrived, and at most one is computed at a time per format. Any
//!   number of clients asking at once costs two expositions, not one each.
//! - **Authentication** ([`web_config`]): bcrypt runs on the blocking pool, one at a
//!   time, and a login that succeeded is remembered, so a guessing client delays
//!   only other guesses.
//!
//! Everything runs on one thread of its own (a single-threaded tokio runtime, with
//! a small blocking pool for expositions and bcrypt): the probe loop never shares a
//! thread with a client of the endpoint.

pub mod deadline;
pub mod web_config;

use super::metrics::{Format, Metrics};
use bytes::Bytes;
use deadline::Deadlines;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore};
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
    #[error("cannot serve metrics on {addr} (--metrics-listen)")]
    Bind {
        addr: SocketAddr,
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

/// The web config in force, and the file it came from, read again when it changes
/// (as the exporter-toolkit does, so a renewed certificate needs no restart).
struct Web {
    now: Arc<WebConfig>,
    file: Option<(PathBuf, Option<FileStamp>)>,
    checked: Instant,
}

type FileStamp = (std::time::SystemTime, u64, u64);

fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

impl Web {
    /// The config for a new connection: the file read again when it changed (looked
    /// at once a second at most); a file that no longer reads keeps the last good one.
    fn current(&mut self, refused: &Counter) -> Arc<WebConfig> {
        if let Some((path, seen)) = &mut self.file {
            if self.checked.elapsed() >= Duration::from_secs(1) {
                self.checked = Instant::now();
                let now = stamp(path);
                if now != *seen {
                    *seen = now;
                    match WebConfig::read(path) {
                        // As the exporter-toolkit, TLS and authentication are what
                        // the agent started with: a file emptied or cut while being
                        // saved must not turn either off.
                        Ok(c)
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
                        Ok(c) => self.now = Arc::new(c),
                        Err(e) => {
                            refused.inc();
                            eprintln!(
                                "rttlab agent: keeping the previous web config: {}",
                                crate::error_chain(&e)
                            );
                        }
                    }
                }
            }
        }
        Arc::clone(&self.now)
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
        let web = Web {
            now: Arc::new(match web_config {
                Some(p) => WebConfig::read(p)?,
                None => WebConfig::none(),
            }),
            file: web_config.map(|p| (p.to_owned(), stamp(p))),
            checked: Instant::now(),
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
        let shared = Shared::new(metrics, self.limits);
        let mut web = self.web;
        let stop = Arc::clone(stop);
        rt.block_on(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let mut ticks = 0u32;
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((tcp, peer)) => {
                            if let Some(slot) = Slots::admit(&shared, peer.ip()) {
                                let config = web.current(&shared.refused.web_config);
                                tokio::spawn(connection(tcp, slot, config, Arc::clone(&shared)));
                            } else {
                                shared.refused.busy.inc();
                            }
                        }
                        // Out of descriptors and the like: back off, never exit.
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    },
                    _ = tick.tick() => {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        ticks = ticks.wrapping_add(1);
                        if ticks % 20 == 0 {
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

struct Shared {
    metrics: Arc<Metrics>,
    limits: HttpLimits,
    refused: Refused,
    slots: Mutex<Slots>,
    /// One per format: OpenMetrics, text.
    exposition: [Cache; 2],
    bcrypt: Semaphore,
}

/// Handles on `rttlab_agent_http_refused_total`, one per reason.
struct Refused {
    displaced: Counter,
    busy: Counter,
    body: Counter,
    method: Counter,
    unauthorized: Counter,
    web_config: Counter,
}

impl Shared {
    fn new(metrics: &Arc<Metrics>, limits: HttpLimits) -> Arc<Self> {
        let c = |reason: &str| {
            metrics
                .http_refused
                .get_or_create(&vec![("reason".into(), reason.into())])
                .clone()
        };
        Arc::new(Self {
            metrics: Arc::clone(metrics),
            limits,
            refused: Refused {
                displaced: c("displaced"),
                busy: c("busy"),
                body: c("body"),
                method: c("method"),
                unauthorized: c("unauthorized"),
                web_config: c("web_config"),
            },
            slots: Mutex::new(Slots::default()),
            exposition: [Cache::default(), Cache::default()],
            bcrypt: Semaphore::new(1),
        })
    }
}

/// The newest exposition of one format, and the lock that makes one at a time. It
/// is kept only while requests wait for it: an exposition is megabytes.
#[derive(Default)]
struct Cache {
    newest: Mutex<Option<(Instant, Bytes)>>,
    making: tokio::sync::Mutex<()>,
    waiting: std::sync::atomic::AtomicUsize,
}

/// Open connections, oldest first (ids grow with time).
#[derive(Default)]
struct Slots {
    open: BTreeMap<u64, SlotState>,
    next_id: u64,
}

struct SlotState {
    source: IpAddr,
    /// Answering a request now: not displaced for a newcomer.
    busy: Arc<AtomicBool>,
    /// Told to close.
    displace: Arc<Notify>,
}

/// A connection's place among the open ones; gives it back when dropped.
struct Slot {
    id: u64,
    busy: Arc<AtomicBool>,
    displace: Arc<Notify>,
    shared: Arc<Shared>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.shared.slots).open.remove(&self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Slots {
    /// A place for a connection from `source`, displacing the oldest idle one (from
    /// the same source when it has its share) at a cap; `None` when all are busy.
    fn admit(shared: &Arc<Shared>, source: IpAddr) -> Option<Slot> {
        let max = shared.limits.max_connections.max(1);
        let per_source = (max / 4).max(1);
        let mut slots = lock(&shared.slots);
        let from_source = slots.open.values().filter(|s| s.source == source).count();
        let victim = if from_source >= per_source {
            Some(slots.oldest_idle(|s| s.source == source))
        } else if slots.open.len() >= max {
            Some(slots.oldest_idle(|_| true))
        } else {
            None
        };
        match victim {
            Some(Some(id)) => {
                if let Some(s) = slots.open.remove(&id) {
                    s.displace.notify_one();
                    shared.refused.displaced.inc();
                }
            }
            Some(None) => return None,
            None => {}
        }
        slots.next_id += 1;
        let id = slots.next_id;
        let busy = Arc::new(AtomicBool::new(false));
        let displace = Arc::new(Notify::new());
        slots.open.insert(
            id,
            SlotState {
                source,
                busy: Arc::clone(&busy),
                displace: Arc::clone(&displace),
            },
        );
        Some(Slot {
            id,
            busy,
            displace,
            shared: Arc::clone(shared),
        })
    }

    fn oldest_idle(&self, matching: impl Fn(&SlotState) -> bool) -> Option<u64> {
        self.open
            .iter()
            .find(|(_, s)| matching(s) && !s.busy.load(Ordering::Relaxed))
            .map(|(&id, _)| id)
    }
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
    let limits = &shared.limits;
    let io = Deadlines::new(tcp, limits.idle_timeout, limits.write_timeout);
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
    let service = hyper::service::service_fn(|req: Request<Incoming>| {
        let shared = Arc::clone(shared);
        let web = Arc::clone(web);
        let busy = Arc::clone(&slot.busy);
        async move {
            let response = answer(&req, &web, &shared, &busy).await;
            busy.store(false, Ordering::Relaxed);
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Some(shared.limits.header_timeout))
        .max_buf_size(shared.limits.max_header_bytes.max(8192))
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service)
        .await;
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
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
    busy: &AtomicBool,
) -> Response<Full<Bytes>> {
    let arrived = Instant::now();
    let mut response = route(req, web, shared, arrived, busy).await;
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
    busy: &AtomicBool,
) -> Response<Full<Bytes>> {
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
    if web.needs_auth() && authorize(req, web, shared).await == Auth::Denied {
        shared.refused.unauthorized.inc();
        let mut r = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"rttlab agent\""),
        );
        return r;
    }
    busy.store(true, Ordering::Relaxed);
    match req.uri().path() {
        "/metrics" => {
            let accept = req
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok());
            let format = Format::negotiate(accept);
            let body = exposition(shared, format, arrived).await;
            let mut r = Response::new(Full::new(body));
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

/// Check the request's credentials: at once for a login seen before, else with
/// bcrypt on the blocking pool, one at a time.
async fn authorize(req: &Request<Incoming>, web: &Arc<WebConfig>, shared: &Arc<Shared>) -> Auth {
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    if web.known_login(authorization.as_deref()) {
        return Auth::Allowed;
    }
    let Ok(_permit) = shared.bcrypt.acquire().await else {
        return Auth::Denied;
    };
    let web = Arc::clone(web);
    tokio::task::spawn_blocking(move || web.check(authorization.as_deref()))
        .await
        .unwrap_or(Auth::Denied)
}

/// An exposition begun at or after `arrived`: the newest one if it is, else a new
/// one (made by this request, or by the one ahead of it in the queue).
async fn exposition(shared: &Arc<Shared>, format: Format, arrived: Instant) -> Bytes {
    let cache = &shared.exposition[usize::from(format == Format::Text)];
    let fresh = || {
        lock(&cache.newest)
            .as_ref()
            .filter(|(begun, _)| *begun >= arrived)
            .map(|(_, body)| body.clone())
    };
    cache.waiting.fetch_add(1, Ordering::SeqCst);
    let body = {
        let _making = cache.making.lock().await;
        match fresh() {
            Some(body) => body,
            None => {
                let begun = Instant::now();
                let metrics = Arc::clone(&shared.metrics);
                let body = tokio::task::spawn_blocking(move || Bytes::from(metrics.expose(format)))
                    .await
                    .unwrap_or_default();
                *lock(&cache.newest) = Some((begun, body.clone()));
                body
            }
        }
    };
    if cache.waiting.fetch_sub(1, Ordering::SeqCst) == 1 {
        lock(&cache.newest).take();
    }
    body
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
    let shared = Shared::new(metrics, HttpLimits::default());
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
        let exposition = m.expose(Format::Text);
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
