//! Interfaces to the running kernel: `tcp_info`, socket options, CPU placement and the
//! host facts every result carries.

pub mod cpu;
pub mod host;
pub mod hz;
pub mod link;
pub mod netlink;
pub mod netns;
pub mod netstat;
pub mod route;
pub mod sock_diag;
pub mod sockopt;
pub mod syn_rto;
pub mod sysctl;
pub mod tcp_info;
pub mod tuning;

/// A system call failed.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed: {source}")]
pub struct SyscallError {
    /// The call that failed.
    pub call: &'static str,
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
