//! What can keep the in-kernel engine from running, or end it.

use crate::kernel::netns::NetnsError;
use crate::kernel::SyscallError;

/// Why the in-kernel engine cannot run here, or failed.
#[derive(Debug, thiserror::Error)]
pub enum PassiveBpfError {
    /// The kernel refused to load or attach for lack of privilege.
    #[error("the in-kernel engine needs CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN (run as root)")]
    NotPermitted,
    /// This kernel lacks something the programs need.
    #[error(
        "kernel {release} cannot run the in-kernel engine ({what}; it needs Linux 5.13 or later)"
    )]
    Unsupported {
        /// `uname -r`.
        release: String,
        /// What failed: the verifier's last line, or the missing feature.
        what: String,
    },
    /// A step of loading failed otherwise.
    #[error("loading the in-kernel engine: {step}")]
    Load {
        /// What was being done.
        step: &'static str,
        /// aya's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Attaching to the interface failed.
    #[error("attaching the in-kernel engine to {interface}: {msg}")]
    Attach {
        /// The interface.
        interface: String,
        /// aya's error chain.
        msg: String,
    },
    /// The interface does not exist.
    #[error("no interface named {name:?}{place}; list them with `ip link`")]
    NoInterface {
        /// As given.
        name: String,
        /// Empty, or " in network namespace NAME".
        place: String,
    },
    /// A map could not be read or written.
    #[error("the in-kernel engine's map {map}: {msg}")]
    Map {
        /// The map's name.
        map: &'static str,
        /// aya's error chain.
        msg: String,
    },
    /// A bpf(2) call failed.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
    /// The interface's namespace could not be entered.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// The journal could not record the attachment.
    #[error("recording the attachment: {0}")]
    Journal(String),
}

impl PassiveBpfError {
    /// Whether the engine cannot run here at all (privilege, kernel), rather than
    /// having failed: the cases where the ring engine is the fallback.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::NotPermitted | Self::Unsupported { .. })
    }
}
