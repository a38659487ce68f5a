//! The open-file limit (`RLIMIT_NOFILE`) a long-running server budgets its descriptors
//! against. A shell usually starts processes with a soft limit of 1 024 and a hard
//! limit far above it; only the soft limit is enforced (`alloc_fd` refuses past
//! `rlimit(RLIMIT_NOFILE)` with `EMFILE`), and an unprivileged process may raise its
//! soft limit up to the hard one (`do_prlimit`), so a server does that first.

use super::SyscallError;

/// A process's open-file limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileLimit {
    /// What `open`, `socket` and `accept` are refused beyond (`ulimit -n`).
    pub soft: u64,
    /// What the soft limit may be raised to without privilege (`ulimit -Hn`).
    pub hard: u64,
}

/// The calling process's open-file limits.
///
/// # Errors
/// `getrlimit` failed.
pub fn open_files() -> Result<FileLimit, SyscallError> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit out-pointer for the call's duration.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(SyscallError::last("getrlimit(RLIMIT_NOFILE)"));
    }
    Ok(FileLimit {
        soft: r.rlim_cur,
        hard: r.rlim_max,
    })
}

/// Raise the soft open-file limit to the hard one; the limits in force after.
///
/// # Errors
/// `getrlimit` or `setrlimit` failed (the limits are then unchanged).
pub fn raise_open_files() -> Result<FileLimit, SyscallError> {
    let now = open_files()?;
    if now.soft >= now.hard {
        return Ok(now);
    }
    let r = libc::rlimit {
        rlim_cur: now.hard,
        rlim_max: now.hard,
    };
    // SAFETY: a valid rlimit for the call's duration.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(SyscallError::last("setrlimit(RLIMIT_NOFILE)"));
    }
    open_files()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_reaches_the_hard_limit_and_never_lowers_it() {
        let before = open_files().unwrap();
        let after = raise_open_files().unwrap();
        assert_eq!(after.hard, before.hard);
        assert_eq!(after.soft, before.hard);
        assert!(after.soft >= before.soft);
    }
}
