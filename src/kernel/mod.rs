//! Interfaces to the running kernel: `tcp_info`, socket options, CPU placement and the
//! host facts every result carries; and the files rttlab reads for others or writes
//! where others may reach (`fs`).

pub mod bpf_sys;
pub mod cpu;
pub mod descriptors;
pub mod explain_bpf;
pub mod fs;
pub mod host;
pub mod hz;
pub mod interface;
pub mod listeners;
pub mod netlink;
pub mod netns;
pub mod netstat;
pub mod packet;
pub mod passive_bpf;
pub mod privilege;
pub mod rlimit;
pub mod route;
pub mod sock_diag;
pub mod sockopt;
pub mod syn_rto;
pub mod sysctl;
pub mod tcp_info;
pub mod tuning;

/// A system call failed.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed")]
pub struct SyscallError {
    /// The call that failed.
    pub call: &'static str,
    /// Its error: the `errno` it set, or what was wrong with its answer.
    #[source]
    pub source: std::io::Error,
}

impl SyscallError {
    /// Wrap the current `errno` for `call`.
    pub fn last(call: &'static str) -> Self {
        Self {
            call,
            source: std::io::Error::last_os_error(),
        }
    }
}

/// CLOCK_REALTIME in nanoseconds: the clock the kernel stamps received packets with
/// (SO_TIMESTAMPNS, packet rings) and packet captures use.
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
