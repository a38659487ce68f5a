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
    NotFound {
        /// The namespace as named (a name under /run/netns, or a path).
        name: String,
        /// The file that could not be opened ([`path_of`] the name).
        path: String,
    },
    /// setns refused (not root / no CAP_SYS_ADMIN).
    #[error("entering network namespace {name:?} (needs root or CAP_SYS_ADMIN)")]
    Enter {
        /// The namespace as named.
        name: String,
        /// The failed `setns` call and its errno.
        #[source]
        source: SyscallError,
    },
    /// A namespace of that name exists already.
    #[error("network namespace {name:?} exists already")]
    Exists {
        /// The name asked for.
        name: String,
    },
    /// Creating or deleting the namespace failed.
    #[error("network namespace {name:?} (needs root)")]
    Create {
        /// The namespace being created or deleted.
        name: String,
        /// The step that failed (mkdir, mount, unshare, or removing the file) and
        /// its OS error.
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

/// Create the named namespace as `ip netns add` does: a bind mount of a fresh network
/// namespace on /run/netns/NAME, under a shared /run/netns so other mount namespaces
/// (`ip netns exec`, `lab exec`) see it.
///
/// # Errors
/// The name is taken (`Exists`), or a mount or unshare was refused.
pub fn create(name: &str) -> Result<(), NetnsError> {
    let path = path_of(name);
    let fail = |call: &'static str| NetnsError::Create {
        name: name.into(),
        source: SyscallError::last(call),
    };
    std::fs::create_dir_all(NETNS_DIR).map_err(|e| NetnsError::Create {
        name: name.into(),
        source: SyscallError {
            call: "mkdir /run/netns",
            source: e,
        },
    })?;
    share_netns_dir().map_err(|_| fail("mount --make-shared /run/netns"))?;
    let cpath = cstring(&path);
    // SAFETY: open with a valid C path; O_EXCL reports a clash.
    let fd = unsafe {
        libc::open(
            cpath.as_ptr(),
            libc::O_RDONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o444,
        )
    };
    if fd < 0 {
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
            return Err(NetnsError::Exists { name: name.into() });
        }
        return Err(fail("create /run/netns/NAME"));
    }
    // SAFETY: fd was just opened by us.
    unsafe { libc::close(fd) };
    let made = std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare affects only this thread; the bind mount pins the namespace.
            unsafe {
                if libc::unshare(libc::CLONE_NEWNET) != 0 {
                    return Err(fail("unshare(CLONE_NEWNET)"));
                }
                let src = c"/proc/thread-self/ns/net";
                if libc::mount(
                    src.as_ptr(),
                    cpath.as_ptr(),
                    c"none".as_ptr(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(fail("mount --bind netns"));
                }
            }
            Ok(())
        })
        .join()
        .map_err(|_| NetnsError::Thread)?
    });
    if made.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    made
}

/// Make /run/netns a shared mount point (bind it onto itself first if it is not a
/// mount point yet), as iproute2's `netns_add` does.
fn share_netns_dir() -> Result<(), ()> {
    let dir = c"/run/netns";
    // SAFETY: mount(2) with static C strings and no data.
    unsafe {
        let shared = || {
            libc::mount(
                c"".as_ptr(),
                dir.as_ptr(),
                c"none".as_ptr(),
                libc::MS_SHARED | libc::MS_REC,
                std::ptr::null(),
            ) == 0
        };
        if shared() {
            return Ok(());
        }
        if libc::mount(
            dir.as_ptr(),
            dir.as_ptr(),
            c"none".as_ptr(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        ) != 0
        {
            return Err(());
        }
        if shared() {
            Ok(())
        } else {
            Err(())
        }
    }
}

/// Delete the named namespace (`ip netns del`): detach its bind mount and remove the
/// file. The namespace itself ends when its last process and socket are gone, so kill
/// its processes first ([`pids_in`]). A missing namespace is not an error.
///
/// # Errors
/// The file exists but cannot be removed.
pub fn delete(name: &str) -> Result<(), NetnsError> {
    let path = path_of(name);
    let cpath = cstring(&path);
    // SAFETY: umount2 on a valid C path; failure (not mounted) is fine.
    unsafe { libc::umount2(cpath.as_ptr(), libc::MNT_DETACH) };
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(NetnsError::Create {
            name: name.into(),
            source: SyscallError {
                call: "remove /run/netns/NAME",
                source: e,
            },
        }),
    }
}

/// The named namespaces (entries of /run/netns).
pub fn list() -> Vec<String> {
    std::fs::read_dir(NETNS_DIR)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The processes with at least one thread inside namespace `name` (its `(dev, inode)`
/// compared with every task's /proc/PID/task/TID/ns/net), this process excluded.
pub fn pids_in(name: &str) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(ns) = std::fs::metadata(path_of(name)) else {
        return Vec::new();
    };
    let key = (ns.dev(), ns.ino());
    let me = std::process::id() as i32;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        let inside = tasks.flatten().any(|t| {
            std::fs::metadata(t.path().join("ns/net")).is_ok_and(|m| (m.dev(), m.ino()) == key)
        });
        if inside {
            pids.push(pid);
        }
    }
    pids
}

/// The identity of the calling thread's network namespace: the `(dev, inode)` of its
/// nsfs file, what `ip netns identify` compares. None where /proc is not mounted.
pub fn current() -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata("/proc/thread-self/ns/net").ok()?;
    Some((m.dev(), m.ino()))
}

/// Where the namespace `id` ([`current`] as some process saw it) can be entered
/// now: the name of a /run/netns entry bound to it, else /proc/PID/ns/net of a task
/// inside it. None: nothing holds it any more, so it is gone, and every interface,
/// route and sysctl with it.
pub fn locate(id: (u64, u64)) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let is = |p: &std::path::Path| std::fs::metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == id);
    if let Some(name) = list().into_iter().find(|n| is(&path_of(n))) {
        return Some(name);
    }
    let procs = std::fs::read_dir("/proc").ok()?;
    procs
        .flatten()
        .filter(|p| {
            p.file_name()
                .to_str()
                .is_some_and(|s| s.parse::<u32>().is_ok())
        })
        .map(|p| p.path().join("ns/net"))
        .find(|p| is(p))
        .map(|p| p.display().to_string())
}

const NETNS_DIR: &str = "/run/netns";

fn cstring(p: &std::path::Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn missing_namespace_is_named() {
        let e = super::run_in(Some("rttlab-no-such-ns"), || ()).unwrap_err();
        assert!(e.to_string().contains("rttlab-no-such-ns"));
        assert_eq!(super::run_in(None, || 7).unwrap(), 7);
    }

    /// Witness: /proc/self/ns/net, the file the kernel names this namespace by; a
    /// namespace nobody holds has no place to be found.
    #[test]
    fn this_namespace_is_located_and_a_gone_one_is_not() {
        let here = super::current().unwrap();
        let at = super::locate(here).expect("this process holds its namespace");
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(super::path_of(&at)).unwrap();
        assert_eq!((m.dev(), m.ino()), here);
        assert_eq!(super::locate((here.0, u64::MAX)), None);
    }
}
