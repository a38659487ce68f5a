//! Host facts recorded with every result: a latency without its kernel and machine is
//! not comparable with another.

use serde::{Deserialize, Serialize};

/// What a result says about the machine it ran on.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostFacts {
    /// The host's name (`uname -n`, the network namespace's UTS name).
    pub hostname: String,
    /// The kernel release (`uname -r`, e.g. `6.8.0-45-generic`).
    pub kernel_release: String,
    /// The hardware architecture (`uname -m`, e.g. `x86_64`).
    pub machine: String,
    /// CPUs this process may run on (`available_parallelism`: affinity and cgroup
    /// quota count), 1 when unknown.
    pub cpus: usize,
    /// The kernel's boot id (/proc/sys/kernel/random/boot_id): two ends with the same
    /// one read the same CLOCK_REALTIME (one kernel, e.g. the lab's namespaces), so a
    /// one-way delay between them is exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

fn field(raw: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl HostFacts {
    /// Read them from `uname(2)` and the scheduler.
    pub fn collect() -> Self {
        // SAFETY: utsname is plain data filled by the kernel.
        let uts = unsafe {
            let mut u: libc::utsname = std::mem::zeroed();
            libc::uname(&mut u);
            u
        };
        Self {
            hostname: field(&uts.nodename),
            kernel_release: field(&uts.release),
            machine: field(&uts.machine),
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernel_release_matches_proc() {
        let facts = super::HostFacts::collect();
        let proc = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        assert_eq!(facts.kernel_release, proc.trim());
        assert!(facts.cpus >= 1);
    }
}
