//! What must not overlap in the one test process. Tests of all modules run side by
//! side on the harness's threads (`RUST_TEST_THREADS` in .cargo/config.toml: most
//! tests wait on timers, peers and the kernel far more than they compute). A test that
//! keeps a CPU busy holds [`busy`]: at most [`BUSY_AT_ONCE`] of them run at once, as
//! when each module was its own binary run by two threads. A test that judges time to
//! within what a busy CPU would spoil holds [`machine`]: nothing busy runs beside it,
//! only tests that neither load a CPU for long nor judge time.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::{Condvar, Mutex, PoisonError};

/// Tests holding [`busy`] at once: one a CPU.
pub const BUSY_AT_ONCE: usize = 2;

/// Who holds the machine, across threads.
struct Holders {
    busy: usize,
    machine: bool,
    /// Threads waiting for [`machine`]: no new [`busy`] starts while there are any,
    /// so a stream of busy tests cannot keep one that needs the machine waiting.
    machine_waiting: usize,
}

static HOLDERS: Mutex<Holders> = Mutex::new(Holders {
    busy: 0,
    machine: false,
    machine_waiting: 0,
});
static CHANGED: Condvar = Condvar::new();

/// What this thread holds.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Busy,
    Machine,
}

thread_local! {
    /// The kind this thread holds and how many tokens of it it has taken.
    static HELD: Cell<Option<(Kind, usize)>> = const { Cell::new(None) };
}

/// A hold on the machine, kept by this thread until the last token it took goes (not
/// `Send`, as a mutex guard is not: a token dropped on another thread would release
/// another thread's hold).
pub struct Token(PhantomData<std::sync::MutexGuard<'static, ()>>);

/// The whole machine, for a test that times a path or a protocol's timers to within
/// what a CPU busy beside it would spoil: a median within 100 µs of the emulator's
/// delay, a step seen in the same 100 ms bin by every layer, a curl answered within
/// 5 s beside tens of attacking clients (each of these failed in CI beside another
/// busy test, never alone). `compare` and the blackout experiments hold it too: each
/// checks that its run left no lab of its kind behind, which a run beside it would
/// have up.
/// Take it before anything that takes [`busy`] (a [`super::Lab`]); taken again by a
/// thread that holds it, it returns at once.
pub fn machine() -> Token {
    match HELD.get() {
        Some((Kind::Machine, n)) => HELD.set(Some((Kind::Machine, n + 1))),
        Some((Kind::Busy, _)) => {
            panic!("serial::machine() taken while holding busy(): take it first")
        }
        None => {
            let t0 = std::time::Instant::now();
            let mut h = HOLDERS.lock().unwrap_or_else(PoisonError::into_inner);
            h.machine_waiting += 1;
            while h.machine || h.busy > 0 {
                h = CHANGED.wait(h).unwrap_or_else(PoisonError::into_inner);
            }
            h.machine_waiting -= 1;
            h.machine = true;
            HELD.set(Some((Kind::Machine, 1)));
            drop(h);
            record_wait(t0.elapsed());
        }
    }
    Token(PhantomData)
}

/// A share of the machine, for a test that keeps a CPU busy (a lab's emulator
/// busy-polls one; a CPU hog; tens of attacking clients; a replay at full speed).
/// Returns at once on a thread that holds [`machine`] or [`busy`].
pub fn busy() -> Token {
    match HELD.get() {
        Some((kind, n)) => HELD.set(Some((kind, n + 1))),
        None => {
            let t0 = std::time::Instant::now();
            let mut h = HOLDERS.lock().unwrap_or_else(PoisonError::into_inner);
            while h.machine || h.machine_waiting > 0 || h.busy >= BUSY_AT_ONCE {
                h = CHANGED.wait(h).unwrap_or_else(PoisonError::into_inner);
            }
            h.busy += 1;
            HELD.set(Some((Kind::Busy, 1)));
            drop(h);
            record_wait(t0.elapsed());
        }
    }
    Token(PhantomData)
}

impl Drop for Token {
    fn drop(&mut self) {
        let Some((kind, n)) = HELD.get() else {
            return;
        };
        if n > 1 {
            HELD.set(Some((kind, n - 1)));
            return;
        }
        HELD.set(None);
        let mut h = HOLDERS.lock().unwrap_or_else(PoisonError::into_inner);
        match kind {
            Kind::Busy => h.busy -= 1,
            Kind::Machine => h.machine = false,
        }
        CHANGED.notify_all();
    }
}

/// With `RTTLAB_TEST_WAIT_LOG=FILE`, a line `TEST<TAB>SECONDS` for each wait, so that a
/// test's own time can be told from the time it waited for the machine (libtest's
/// `--report-time` counts both; bench/RESULTS-ci.md).
fn record_wait(waited: std::time::Duration) {
    use std::io::Write;
    let Some(path) = std::env::var_os("RTTLAB_TEST_WAIT_LOG") else {
        return;
    };
    let test = std::thread::current().name().unwrap_or("?").to_string();
    // One write a line: appends of a few bytes from several threads do not interleave.
    let line = format!("{test}\t{:.3}\n", waited.as_secs_f64());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}
