//! What must not overlap in the one test process. Tests of all modules run side by
//! side on the harness's threads (as many as CPUs, 2 here); a test that needs the
//! machine to itself holds [`machine`] for as long as it runs.

use std::sync::{Mutex, MutexGuard, PoisonError};

static MACHINE: Mutex<()> = Mutex::new(());

/// Held by a test that times a path to within tens of microseconds, or that loads
/// both CPUs with an attack (tens of clients, a replay at full speed): on 2 vCPUs two
/// of them at once starve each other's witness (a curl bounded at 5 s, a median
/// within 50 µs of the emulator's delay; both seen in CI on a slow day, never alone).
/// `compare` and the experiments hold it too: each checks that its run left no lab of
/// its kind behind, which a run beside it would have up.
pub fn machine() -> MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(PoisonError::into_inner)
}
