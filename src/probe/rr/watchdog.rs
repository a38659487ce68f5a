//! The main thread while the streams run: it samples the data sockets' `tcp_info`
//! and ends blocked streams when the run must end.

use super::result::TcpInfoSample;
use super::settings::{RrSettings, RunControl, MAX_TCPINFO_SAMPLES, WATCH_TICK};
use crate::kernel::sockopt;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The main thread while the streams run: samples the client's data sockets every
/// `--tcpinfo-interval`, and when the user stops the run or the hard deadline passes,
/// shuts the blocking sockets down so the streams' `recv` returns.
pub(super) fn watch<T>(
    s: &RrSettings,
    socks: &[TcpStream],
    ctl: &RunControl,
    cutoff: &AtomicBool,
    hard_deadline: Instant,
    handles: &[std::thread::ScopedJoinHandle<'_, T>],
) -> Vec<TcpInfoSample> {
    let mut series = Vec::new();
    let t0 = Instant::now();
    let mut next_sample = t0;
    while !handles.iter().all(|h| h.is_finished()) {
        let now = Instant::now();
        if !cutoff.load(Ordering::Relaxed)
            && (ctl.stop.load(Ordering::Relaxed) || now >= hard_deadline)
        {
            cutoff.store(true, Ordering::SeqCst);
            for sock in socks {
                let _ = sock.shutdown(std::net::Shutdown::Both);
            }
        }
        let mut wake = now + WATCH_TICK;
        if let Some(every) = s.tcpinfo_interval {
            if now >= next_sample {
                for (stream, sock) in socks.iter().enumerate() {
                    if series.len() >= MAX_TCPINFO_SAMPLES {
                        break;
                    }
                    if let Ok(info) = sockopt::tcp_info(sock) {
                        series.push(TcpInfoSample {
                            t_ms: t0.elapsed().as_secs_f64() * 1e3,
                            stream,
                            info,
                        });
                    }
                }
                next_sample = (next_sample + every).max(now);
            }
            wake = wake.min(next_sample);
        }
        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
    }
    series
}
