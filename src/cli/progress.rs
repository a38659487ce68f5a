//! Ctrl-C and the progress line.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Route Ctrl-C to `stop`: the run ends and prints what it measured. A second Ctrl-C
/// ends the process at once, by SIGINT's own default action (the shell sees it killed
/// by the signal: status 130), so that nothing below `main` exits the process.
pub fn on_interrupt(stop: impl Fn() + Send + 'static) {
    let seen = AtomicBool::new(false);
    let _ = ctrlc::set_handler(move || {
        if seen.swap(true, Ordering::SeqCst) {
            let _ = signal_hook::low_level::emulate_default_handler(signal_hook::consts::SIGINT);
        }
        stop();
    });
}

/// A progress line on stderr while the run lasts, only when stderr is a terminal and the
/// run is expected to last more than ~2 s.
pub struct ProgressLine {
    done: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl ProgressLine {
    /// Start showing `count()` ("transactions", "replies") against `expected` length.
    pub fn start(
        count: impl Fn() -> u64 + Send + 'static,
        what: &'static str,
        expected: Option<Duration>,
    ) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let show =
            std::io::stderr().is_terminal() && expected.is_none_or(|d| d > Duration::from_secs(2));
        let handle = show.then(|| {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let t0 = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(250));
                    let n = count();
                    let el = t0.elapsed().as_secs_f64();
                    let eta = expected.map_or(String::new(), |d| {
                        format!(", {:.0} s left", (d.as_secs_f64() - el).max(0.0))
                    });
                    eprint!(
                        "\r{n} {what}, {:.0}/s, {el:.0} s{eta}   ",
                        n as f64 / el.max(1e-9)
                    );
                }
                eprint!("\r\x1b[K");
            })
        });
        Self { done, handle }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The trial runner's progress on stderr, one line rewritten in place, when stderr is a
/// terminal: the set-up, each trial with a countdown when its length is known, the
/// report; between trials of a longer run, what the last one found.
/// [`TrialLine::clear`] removes it.
pub struct TrialLine {
    shown: bool,
    quiet: bool,
    ticker: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl TrialLine {
    /// `quiet`: show nothing.
    pub fn new(quiet: bool) -> Self {
        Self {
            shown: false,
            quiet,
            ticker: None,
        }
    }

    fn stop_ticker(&mut self) {
        if let Some((stop, h)) = self.ticker.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = h.join();
        }
    }

    pub fn show(&mut self, p: &rttlab::experiment::runner::Progress) {
        use rttlab::experiment::runner::Phase;
        self.stop_ticker();
        if self.quiet || !std::io::stderr().is_terminal() {
            return;
        }
        self.shown = true;
        let of = if p.total > 1 {
            format!("trial {}/{}", p.done + 1, p.total)
        } else {
            "measuring".to_string()
        };
        match p.phase {
            Phase::Setup => eprint!("\r\x1b[Ksetting up (lab, servers, captures)…"),
            Phase::Trial => {
                let Some(len) = p.trial_length else {
                    eprint!("\r\x1b[K{of}…");
                    return;
                };
                let stop = Arc::new(AtomicBool::new(false));
                let s2 = Arc::clone(&stop);
                let total_left = p.eta;
                let h = std::thread::spawn(move || {
                    let t0 = Instant::now();
                    while !s2.load(Ordering::Relaxed) {
                        let left = len.saturating_sub(t0.elapsed());
                        let all = if total_left > len {
                            format!(
                                " ({:.0} s in all)",
                                total_left.saturating_sub(t0.elapsed()).as_secs_f64()
                            )
                        } else {
                            String::new()
                        };
                        if left.is_zero() {
                            eprint!("\r\x1b[K{of}: collecting the captures and the servers' reports{all}");
                        } else {
                            eprint!("\r\x1b[K{of}: {:.0} s left{all}", left.as_secs_f64().ceil());
                        }
                        std::thread::sleep(Duration::from_millis(250));
                    }
                });
                self.ticker = Some((stop, h));
            }
            Phase::Done if p.total > 1 => eprint!(
                "\r\x1b[K{}/{} trials, {:.0} s left; last: {}",
                p.done,
                p.total,
                p.eta.as_secs_f64(),
                p.last
            ),
            Phase::Done => {}
            Phase::Report => eprint!("\r\x1b[Kwriting the report…"),
        }
    }

    pub fn clear(&mut self) {
        self.stop_ticker();
        if self.shown {
            eprint!("\r\x1b[K");
        }
    }
}

impl Drop for TrialLine {
    fn drop(&mut self) {
        self.stop_ticker();
    }
}
