//! Ctrl-C and the progress line.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Route Ctrl-C to `stop`: the run ends and prints what it measured. A second Ctrl-C
/// exits at once.
pub fn on_interrupt(stop: impl Fn() + Send + 'static) {
    let seen = AtomicBool::new(false);
    let _ = ctrlc::set_handler(move || {
        if seen.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
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
/// terminal and there is more than one trial; [`TrialLine::clear`] removes it.
pub struct TrialLine {
    shown: bool,
}

impl TrialLine {
    pub fn new() -> Self {
        Self { shown: false }
    }

    pub fn show(&mut self, p: &rttlab::experiment::runner::Progress) {
        if p.total > 1 && std::io::stderr().is_terminal() {
            self.shown = true;
            eprint!(
                "\r\x1b[K{}/{} trials, {:.0} s left; last: {}",
                p.done,
                p.total,
                p.eta.as_secs_f64(),
                p.last
            );
        }
    }

    pub fn clear(&self) {
        if self.shown {
            eprint!("\r\x1b[K");
        }
    }
}
