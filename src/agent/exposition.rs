//! Where the metrics go: `GET /metrics` over HTTP, and a file for node_exporter's
//! textfile collector, replaced atomically (written beside it, then renamed) so the
//! collector never reads half of one.

use super::metrics::{Format, Metrics};
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The metrics endpoint.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    pub addr: SocketAddr,
}

/// Requests served at once; a scraper that stalls holds one, the others go on.
const WORKERS: usize = 2;

impl MetricsServer {
    /// Listen on `addr`.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let server = tiny_http::Server::http(addr).map_err(|e| io::Error::other(e.to_string()))?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| io::Error::other("not an IP listener"))?;
        Ok(Self {
            server: Arc::new(server),
            addr,
        })
    }

    /// Serve until `stop` is set.
    pub fn serve(&self, metrics: &Arc<Metrics>, stop: &Arc<AtomicBool>) {
        std::thread::scope(|s| {
            for _ in 0..WORKERS {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(Some(req)) = self.server.recv_timeout(Duration::from_millis(200))
                        {
                            answer(req, metrics);
                        }
                    }
                });
            }
        });
    }
}

fn answer(req: tiny_http::Request, metrics: &Metrics) {
    let accept = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("Accept"))
        .map(|h| h.value.as_str().to_string());
    let path = req.url().split('?').next().unwrap_or("");
    let response = match (req.method(), path) {
        (tiny_http::Method::Get | tiny_http::Method::Head, "/metrics") => {
            let format = Format::negotiate(accept.as_deref());
            let body = metrics.expose(format);
            tiny_http::Response::from_string(body).with_header(content_type(format.content_type()))
        }
        (tiny_http::Method::Get, "/") => tiny_http::Response::from_string(
            "<html><body><a href=\"/metrics\">rttlab agent metrics</a></body></html>\n",
        )
        .with_header(content_type("text/html; charset=utf-8")),
        (tiny_http::Method::Get | tiny_http::Method::Head, _) => {
            tiny_http::Response::from_string("not found: the agent serves /metrics\n")
                .with_status_code(404)
        }
        _ => tiny_http::Response::from_string("only GET\n").with_status_code(405),
    };
    let _ = req.respond(response);
    // An exposition is megabytes freed at once; glibc keeps freed memory in the
    // thread's arena unless asked to give it back.
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn content_type(v: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(&b"Content-Type"[..], v.as_bytes())
        .unwrap_or_else(|()| unreachable!("a valid header"))
}

/// Write the text-format exposition to `path` atomically: a fresh temporary with an
/// unpredictable name (`.NAME.<random>.tmp`: node_exporter reads only `*.prom`)
/// renamed over it, so a symlink at `path` is refused, never written through.
///
/// # Errors
/// The directory is not writable, or `path` is a symlink.
pub fn write_textfile(path: &Path, metrics: &Metrics) -> Result<(), crate::kernel::fs::FileError> {
    crate::kernel::fs::write_replace(path, metrics.expose(Format::Text).as_bytes())
}
