//! Running code inside a named network namespace (`ip netns add NAME` makes
//! /run/netns/NAME). `setns` changes only the calling thread, so the work runs on a
//! dedicated thread; sockets it opens stay in that namespace after the thread ends.

use super::SyscallError;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Errors entering a namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// No such namespace.
    #[error("network namespace {name:?} not found ({path}): create it with `ip netns add` or check the name")]
    NotFound { name: String, path: String },
    /// setns refused (not root / no CAP_SYS_ADMIN).
    #[error("entering network namespace {name:?}: {source} (needs root or CAP_SYS_ADMIN)")]
    Enter {
        name: String,
        #[source]
        source: SyscallError,
    },
    /// The worker thread could not be started or panicked.
    #[error("namespace worker thread failed")]
    Thread,
}

/// Where namespace `name` is: a path as given, else /run/netns/NAME.
pub fn path_of(name: &str) -> PathBuf {
    if name.starts_with('/') {
        PathBuf::from(name)
    } else {
        PathBuf::from("/run/netns").join(name)
    }
}

/// Run `f` on a thread inside namespace `name` (`None`: here, on this thread).
///
/// # Errors
/// The namespace does not exist or cannot be entered.
pub fn run_in<T: Send>(name: Option<&str>, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
    let Some(name) = name else { return Ok(f()) };
    let path = path_of(name);
    let file = std::fs::File::open(&path).map_err(|_| NetnsError::NotFound {
        name: name.into(),
        path: path.display().to_string(),
    })?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns on an open namespace file; affects only this thread.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(NetnsError::Enter {
                    name: name.into(),
                    source: SyscallError::last("setns"),
                });
            }
            Ok(f())
        })
        .join()
        .map_err(|_| NetnsError::Thread)?
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn missing_namespace_is_named() {
        let e = super::run_in(Some("rttlab-no-such-ns"), || ()).unwrap_err();
        assert!(e.to_string().contains("rttlab-no-such-ns"));
        assert_eq!(super::run_in(None, || 7).unwrap(), 7);
    }
}
