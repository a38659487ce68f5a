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
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// What the endpoint has refused, for the agent's own metrics and for tests.
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Connections closed to make room for a newer one.
    pub displaced: AtomicU64,
    /// Connections refused because every slot was answering a request.
    pub refused: AtomicU64,
    /// Requests refused for a body, a method or credentials.
    pub rejected: AtomicU64,
}

/// The metrics endpoint, bound and not yet serving.
pub struct MetricsServer {
    listener: std::net::TcpListener,
    /// The address bound (port 0 resolved).
    pub addr: SocketAddr,
    web: Arc<WebConfig>,
    limits: HttpLimits,
    counters: Arc<HttpCounters>,
}

impl MetricsServer {
    /// Listen on `addr`, serving with `web` (TLS and basic auth, or neither).
    ///
    /// # Errors
    /// The address cannot be bound.
    pub fn bind(addr: SocketAddr, web: WebConfig, limits: HttpLimits) -> io::Result<Self> {
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
        let listener: std::net::TcpListener = s.into();
        let addr = listener.local_addr()?;
        Ok(Self {
            listener,
            addr,
            web: Arc::new(web),
            limits,
            counters: Arc::new(HttpCounters::default()),
        })
    }

    /// The endpoint's refusal counters.
    pub fn counters(&self) -> Arc<HttpCounters> {
        Arc::clone(&self.counters)
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
        let shared = Arc::new(Shared {
            metrics: Arc::clone(metrics),
            web: self.web,
            limits: self.limits,
            counters: self.counters,
            slots: Mutex::new(Slots::default()),
            exposition: [Cache::default(), Cache::default()],
            bcrypt: Semaphore::new(1),
        });
        let stop = Arc::clone(stop);
        rt.block_on(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let mut ticks = 0u32;
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((tcp, peer)) => {
                            if let Some(slot) = Slots::admit(&shared, peer.ip()) {
                                tokio::spawn(connection(tcp, slot, Arc::clone(&shared)));
                            } else {
                                shared.counters.refused.fetch_add(1, Ordering::Relaxed);
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
    web: Arc<WebConfig>,
    limits: HttpLimits,
    counters: Arc<HttpCounters>,
    slots: Mutex<Slots>,
    /// One per format: OpenMetrics, text.
    exposition: [Cache; 2],
    bcrypt: Semaphore,
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
                    shared.counters.displaced.fetch_add(1, Ordering::Relaxed);
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
async fn connection(tcp: tokio::net::TcpStream, slot: Slot, shared: Arc<Shared>) {
    let _ = tcp.set_nodelay(true);
    let limits = &shared.limits;
    let io = Deadlines::new(tcp, limits.idle_timeout, limits.write_timeout);
    let displace = Arc::clone(&slot.displace);
    let work = async {
        match shared.web.tls.clone() {
            Some(tls) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(tls);
                let Ok(Ok(io)) =
                    tokio::time::timeout(limits.header_timeout, acceptor.accept(io)).await
                else {
                    return;
                };
                http(io, &slot, &shared).await;
            }
            None => http(io, &slot, &shared).await,
        }
    };
    tokio::select! {
        () = work => {}
        () = displace.notified() => {}
    }
}

async fn http<T>(io: T, slot: &Slot, shared: &Arc<Shared>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(|req: Request<Incoming>| {
        let shared = Arc::clone(shared);
        let busy = Arc::clone(&slot.busy);
        async move {
            busy.store(true, Ordering::Relaxed);
            let response = answer(&req, &shared).await;
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

async fn answer(req: &Request<Incoming>, shared: &Arc<Shared>) -> Response<Full<Bytes>> {
    let arrived = Instant::now();
    let mut response = route(req, shared, arrived).await;
    for (name, value) in &shared.web.headers {
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
    shared: &Arc<Shared>,
    arrived: Instant,
) -> Response<Full<Bytes>> {
    let announces_body = req.headers().contains_key(header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if announces_body {
        shared.counters.rejected.fetch_add(1, Ordering::Relaxed);
        let mut r = text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the agent reads no request body\n",
        );
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        shared.counters.rejected.fetch_add(1, Ordering::Relaxed);
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if shared.web.needs_auth() && authorize(req, shared).await == Auth::Denied {
        shared.counters.rejected.fetch_add(1, Ordering::Relaxed);
        let mut r = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"rttlab agent\""),
        );
        return r;
    }
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
async fn authorize(req: &Request<Incoming>, shared: &Arc<Shared>) -> Auth {
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    if shared.web.known_login(authorization.as_deref()) {
        return Auth::Allowed;
    }
    let Ok(_permit) = shared.bcrypt.acquire().await else {
        return Auth::Denied;
    };
    let web = Arc::clone(&shared.web);
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
