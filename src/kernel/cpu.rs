//! CPU placement. On a small VM where an idle vCPU halts, a round trip between two
//! vCPUs costs ~85 µs and on one vCPU ~5 µs (docs/ARCHITECTURE.md), so where each end ran is a
//! setting of every result, like the interval.

use super::SyscallError;
use serde::Serialize;

/// Pin the calling thread to one CPU (`sched_setaffinity`).
///
/// # Errors
/// The CPU does not exist or is not allowed to this process.
pub fn pin_current_thread(cpu: usize) -> Result<(), SyscallError> {
    // SAFETY: cpu_set_t is plain data; CPU_SET only writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(SyscallError {
                call: "sched_setaffinity",
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(SyscallError::last("sched_setaffinity"));
        }
    }
    Ok(())
}

/// The CPUs the calling thread may run on.
pub fn current_affinity() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data filled by the kernel.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// The CPU the calling thread runs on now (vDSO `getcpu`, a few ns).
#[inline]
pub fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments; returns -1 on failure.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// Which CPUs a thread was seen on during a run, from samples the caller takes (the
/// probes take one every 64 transactions, so a brief visit elsewhere can be missed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTracker {
    seen: u128,
    last: Option<usize>,
    migrations: u64,
}

impl CpuTracker {
    /// Note the CPU the thread is on now.
    #[inline]
    pub fn sample(&mut self) {
        if let Some(c) = current_cpu() {
            if c < 128 {
                self.seen |= 1 << c;
            }
            if self.last.is_some_and(|l| l != c) {
                self.migrations += 1;
            }
            self.last = Some(c);
        }
    }

    /// Fold another thread's observations into this one.
    pub fn merge(&mut self, other: &CpuTracker) {
        self.seen |= other.seen;
        self.migrations += other.migrations;
        self.last = self.last.or(other.last);
    }

    /// What was seen, for a result.
    pub fn placement(&self, pinned: Option<usize>) -> Placement {
        Placement {
            pinned_cpu: pinned,
            allowed_cpus: current_affinity(),
            ran_on_cpus: (0..128).filter(|c| self.seen & (1u128 << c) != 0).collect(),
            migrations: self.migrations,
        }
    }
}

/// Where one end of a test ran.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Placement {
    /// CPU the end was pinned to (`-T`), if any.
    pub pinned_cpu: Option<usize>,
    /// The affinity mask the process had.
    pub allowed_cpus: Vec<usize>,
    /// CPUs the measuring threads were seen on.
    pub ran_on_cpus: Vec<usize>,
    /// Times a measuring thread was seen on a different CPU than at its previous sample
    /// (a lower bound: samples are taken every 64 transactions).
    pub migrations: u64,
}

impl Placement {
    /// Unpinned and seen on more than one CPU: results depend on where the scheduler put it.
    pub fn moved(&self) -> bool {
        self.pinned_cpu.is_none() && self.ran_on_cpus.len() > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_is_observed() {
        std::thread::spawn(|| {
            pin_current_thread(0).unwrap();
            assert_eq!(current_affinity(), vec![0]);
            let mut t = CpuTracker::default();
            for _ in 0..100 {
                t.sample();
            }
            let p = t.placement(Some(0));
            assert_eq!(p.ran_on_cpus, vec![0]);
            assert_eq!(p.migrations, 0);
            assert!(!p.moved());
        })
        .join()
        .unwrap();
        assert!(pin_current_thread(100_000).is_err());
    }
}
