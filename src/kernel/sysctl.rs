//! sysctls through /proc/sys, in any network namespace: /proc/sys/net resolves to the
//! namespace of the task that opens it, so namespaced reads and writes run on a thread
//! that entered the namespace ([`super::netns::run_in`]).

use super::netns::{self, NetnsError};
use std::path::PathBuf;

/// Errors reading or writing a sysctl.
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    /// This kernel does not have the sysctl.
    #[error("this kernel has no {0}")]
    Missing(String),
    /// Reading or writing failed.
    #[error("{key}{hint}", hint = if source.kind() == std::io::ErrorKind::PermissionDenied { " (run as root or grant CAP_NET_ADMIN)" } else { "" })]
    Io {
        /// The sysctl, dotted (e.g. `net.ipv4.tcp_rto_min_us`).
        key: String,
        /// The I/O error; permission denied adds a root/CAP_NET_ADMIN hint to the message.
        #[source]
        source: std::io::Error,
    },
    /// The network namespace could not be found or entered.
    #[error(transparent)]
    Netns(#[from] NetnsError),
}

fn path(key: &str) -> PathBuf {
    PathBuf::from("/proc/sys").join(key.replace('.', "/"))
}

/// Read `key` (e.g. `net.ipv4.tcp_rto_min_us`), trimmed.
///
/// # Errors
/// Missing sysctl, unreadable, or no such namespace.
pub fn read(netns: Option<&str>, key: &str) -> Result<String, SysctlError> {
    netns::run_in(netns, || match std::fs::read_to_string(path(key)) {
        Ok(v) => Ok(v.trim().to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SysctlError::Missing(key.into())),
        Err(source) => Err(SysctlError::Io {
            key: key.into(),
            source,
        }),
    })?
}

/// Write `value` to `key`.
///
/// # Errors
/// Missing sysctl, value refused by the kernel, no privilege, or no such namespace.
pub fn write(netns: Option<&str>, key: &str, value: &str) -> Result<(), SysctlError> {
    netns::run_in(netns, || match std::fs::write(path(key), value) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SysctlError::Missing(key.into())),
        Err(source) => Err(SysctlError::Io {
            key: key.into(),
            source,
        }),
    })?
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_a_known_sysctl_and_names_a_missing_one() {
        let v = super::read(None, "net.ipv4.tcp_syn_retries").unwrap();
        assert!(v.parse::<u32>().is_ok());
        assert!(matches!(
            super::read(None, "net.ipv4.no_such_knob"),
            Err(super::SysctlError::Missing(_))
        ));
    }
}
