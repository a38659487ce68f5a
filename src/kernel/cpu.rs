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

/// The whole machine's CPU time from /proc/stat's first line, in USER_HZ ticks: what
/// netperf's `-c`/`-C` measure (its `cpu_util` for Linux reads the same file), so that
/// a run's cost counts everything it made the machine do — softirqs, the other end on
/// loopback, wake-ups — not only its own threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MachineTicks {
    /// user + nice + system + irq + softirq + steal.
    pub busy: u64,
    /// busy + idle + iowait.
    pub total: u64,
    /// CPUs online (the `cpuN` lines).
    pub cpus: u32,
}

impl MachineTicks {
    /// Read /proc/stat now.
    ///
    /// # Errors
    /// /proc/stat is unreadable or not in the kernel's format.
    pub fn now() -> std::io::Result<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat")?).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "/proc/stat: no cpu line")
        })
    }

    /// /proc/stat's text (proc(5): `cpu user nice system idle iowait irq softirq steal
    /// guest guest_nice`; guest time is already inside user).
    pub fn parse(text: &str) -> Option<Self> {
        let first = text.lines().next()?;
        let v: Vec<u64> = first
            .strip_prefix("cpu ")?
            .split_whitespace()
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
        let cpus = text
            .lines()
            .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .count() as u32;
        Some(Self {
            busy,
            total: busy + at(3) + at(4),
            cpus,
        })
    }
}

/// The machine's CPU use between two readings, as netperf reports it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CpuUse {
    /// Busy share of all CPUs, in percent (netperf's LOCAL_CPU_UTIL).
    pub util_percent: f64,
    /// CPUs online at the second reading (the `cpuN` lines of /proc/stat).
    pub cpus: u32,
    /// CPU time the machine spent per transaction, µs (netperf's service demand,
    /// LOCAL_SD): util × CPUs × elapsed / transactions, netperf's
    /// `calc_service_demand_internal`.
    pub service_demand_us: f64,
}

impl CpuUse {
    /// Between `before` and `after`, `elapsed` apart (wall time), for `transactions`.
    ///
    /// The service demand is netperf's, from the utilisation and the wall time, not
    /// busy ticks ÷ transactions: the two agree where the kernel's tick accounting
    /// covers the wall time, but on a VM whose idle vCPUs halt, /proc/stat's ticks fall
    /// short of it under cross-CPU wake-ups (0.84 of the wall time measured for UDP_RR
    /// at -T 0,1 here, bench/RESULTS-rr-cpu.md), and netperf's figure is the one users
    /// compare against.
    pub fn between(
        before: MachineTicks,
        after: MachineTicks,
        elapsed: std::time::Duration,
        transactions: u64,
    ) -> Option<Self> {
        let total = after.total.checked_sub(before.total)?;
        let busy = after.busy.checked_sub(before.busy)?;
        if total == 0 || transactions == 0 || elapsed.is_zero() {
            return None;
        }
        let util = busy as f64 / total as f64;
        Some(Self {
            util_percent: 100.0 * util,
            cpus: after.cpus,
            service_demand_us: util * f64::from(after.cpus) * elapsed.as_secs_f64() * 1e6
                / transactions as f64,
        })
    }
}

#[cfg(test)]
mod machine_tests {
    use super::*;

    /// Witness: arithmetic on a /proc/stat text written by hand (proc(5)'s layout).
    #[test]
    fn busy_and_total_ticks_and_the_service_demand() {
        let a = MachineTicks::parse(
            "cpu  100 0 50 800 10 5 5 0 0 0\ncpu0 50 0 25 400 5 2 3 0 0 0\ncpu1 50 0 25 400 5 3 2 0 0 0\nintr 1\n",
        )
        .unwrap();
        assert_eq!(
            a,
            MachineTicks {
                busy: 160,
                total: 970,
                cpus: 2
            }
        );
        let b = MachineTicks {
            busy: 260,
            total: 1170,
            cpus: 2,
        };
        // 100 busy of 200 ticks: 50 % of 2 CPUs. Over 2 s that is 2 s of CPU (netperf's
        // util × CPUs × elapsed), over 1000 transactions 2000 µs each.
        let two_s = std::time::Duration::from_secs(2);
        let u = CpuUse::between(a, b, two_s, 1000).unwrap();
        assert_eq!(u.util_percent, 50.0);
        assert_eq!(u.service_demand_us, 2000.0);
        assert_eq!(CpuUse::between(b, a, two_s, 1000), None);
        assert_eq!(CpuUse::between(a, b, std::time::Duration::ZERO, 1000), None);
    }
}
