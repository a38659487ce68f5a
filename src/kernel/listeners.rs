//! Which TCP ports processes listen on, found as `ss -ltnp` finds them: the kernel's
//! listening sockets (sock_diag, IPv4 and IPv6) matched by inode against the sockets
//! each process holds (`socket:[N]` in /proc/PID/fd); and which processes a cgroup
//! holds (`cgroup.procs` of it and every cgroup below it).
//!
//! What is found is what listens now: a port a process opens later is not in it.

use super::sock_diag::{DiagError, DiagFilter, SockDiag};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `TCP_LISTEN` in sock_diag's state mask.
const LISTEN: u32 = 1 << 10;

/// The most bytes of one `cgroup.procs` read: a pid a line, 4 194 304 pids at most
/// (`pid_max`'s ceiling), 8 bytes each.
const PROCS_BYTES: u64 = 32 << 20;

/// Why the ports or the processes could not be found.
#[derive(Debug, thiserror::Error)]
pub enum ListenersError {
    /// No such process (or it ended).
    #[error("no process {0} (is the PID right?)")]
    NoProcess(u32),
    /// The process's descriptors cannot be read.
    #[error("cannot read /proc/{pid}/fd ({source}; run as root)")]
    Descriptors {
        /// The process.
        pid: u32,
        /// Why.
        source: std::io::Error,
    },
    /// The path is not a cgroup.
    #[error("{path:?} is not a cgroup (a directory of a cgroup file system: {hint})")]
    NotCgroup {
        /// The path as resolved.
        path: PathBuf,
        /// Where cgroups are, from this host's mounts.
        hint: String,
    },
    /// There is nothing at the path.
    #[error("no cgroup at {path:?} ({hint})")]
    NoCgroup {
        /// The path as resolved.
        path: PathBuf,
        /// Where cgroups are, from this host's mounts.
        hint: String,
    },
    /// A cgroup's processes cannot be read.
    #[error("{0}")]
    Procs(String),
    /// A process's network namespace cannot be entered.
    #[error(
        "the network namespace of process {pid}: {msg} (run as root, in the host's PID namespace)"
    )]
    Namespace {
        /// The process.
        pid: u32,
        /// Why.
        msg: String,
    },
    /// The kernel's sockets cannot be listed.
    #[error("listing the listening sockets: {0}")]
    Diag(#[from] DiagError),
}

/// The TCP ports each of `pids` listens on, by port: the processes holding it. A
/// process in another network namespace (a container) is looked up in its own: the
/// kernel's programs watch a port in every namespace. A pid that ended meanwhile is
/// left out when others remain; alone, it is an error.
///
/// # Errors
/// A pid with no process, descriptors that cannot be read, no sock_diag.
pub fn ports_of(pids: &[u32]) -> Result<BTreeMap<u16, BTreeSet<u32>>, ListenersError> {
    // The processes by network namespace (its inode), each namespace asked once.
    let here = namespace_of("self").ok();
    let mut by_namespace: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for &pid in pids {
        match namespace_of(&pid.to_string()) {
            Ok(ns) => by_namespace.entry(ns).or_default().push(pid),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(ListenersError::Namespace {
                    pid,
                    msg: format!("/proc/{pid}/ns/net: {e}"),
                })
            }
            Err(_) if pids.len() == 1 => return Err(ListenersError::NoProcess(pid)),
            Err(_) => {} // ended meanwhile
        }
    }
    let mut ports: BTreeMap<u16, BTreeSet<u32>> = BTreeMap::new();
    for (ns, members) in by_namespace {
        let entered = (Some(ns) != here).then(|| format!("/proc/{}/ns/net", members[0]));
        let mut diag =
            SockDiag::open(entered.as_deref()).map_err(|e| ListenersError::Namespace {
                pid: members[0],
                msg: crate::error_chain(&e),
            })?;
        let mut by_inode = BTreeMap::new();
        let filter = DiagFilter {
            states: LISTEN,
            ..DiagFilter::default()
        };
        diag.dump_tcp(&filter, |e| {
            if e.inode != 0 {
                by_inode.insert(u64::from(e.inode), e.local.port());
            }
        })?;
        for pid in members {
            let fds = match std::fs::read_dir(format!("/proc/{pid}/fd")) {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(ListenersError::Descriptors { pid, source }),
            };
            for fd in fds.flatten() {
                let Ok(target) = std::fs::read_link(fd.path()) else {
                    continue; // closed meanwhile
                };
                if let Some(port) = socket_inode(&target).and_then(|i| by_inode.get(&i)) {
                    ports.entry(*port).or_default().insert(pid);
                }
            }
        }
    }
    Ok(ports)
}

/// The inode of the network namespace of process `pid` ("self" for this one); not
/// found when there is no such process.
fn namespace_of(pid: &str) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| m.ino())
}

/// The inode of a descriptor's link `socket:[N]`.
fn socket_inode(link: &Path) -> Option<u64> {
    link.to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The cgroup at `path` (resolved: a relative path, or an absolute one as
/// /proc/PID/cgroup and systemctl print it, is taken under the cgroup2 mount), and the
/// processes of it and of every cgroup below it. A cgroup below that goes away while
/// it is read is left out; in a threaded subtree the threads are read (their
/// descriptors are their process's).
///
/// # Errors
/// Not a cgroup, or its processes cannot be read.
pub fn cgroup_pids(path: &Path) -> Result<(PathBuf, Vec<u32>), ListenersError> {
    let mount = cgroup2_mount();
    let under = |p: &Path| {
        mount
            .as_ref()
            .map(|m| m.join(p.strip_prefix("/").unwrap_or(p)))
    };
    let hint = match &mount {
        Some(m) => format!(
            "cgroup2 is mounted at {m:?}: a unit's is {:?}",
            m.join("system.slice/nginx.service")
        ),
        None => "no cgroup2 file system is mounted: give a cgroup directory's whole path".into(),
    };
    let candidates: Vec<PathBuf> = if path.is_absolute() {
        [Some(path.to_path_buf()), under(path)]
            .into_iter()
            .flatten()
            .collect()
    } else {
        under(path).into_iter().collect()
    };
    let Some(found) = candidates.iter().find(|p| p.exists()) else {
        let path = candidates
            .into_iter()
            .next()
            .unwrap_or_else(|| path.to_path_buf());
        return Err(ListenersError::NoCgroup { path, hint });
    };
    let root = std::fs::canonicalize(found).unwrap_or_else(|_| found.clone());
    if !is_cgroup(&root) {
        return Err(ListenersError::NotCgroup { path: root, hint });
    }
    let mut pids = BTreeSet::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        let text = match members(&dir) {
            Ok(t) => t,
            // A cgroup below, removed meanwhile (a short-lived scope).
            Err(e) if dir != root && gone(&e) => continue,
            Err(e) => return Err(ListenersError::Procs(crate::error_chain(&e))),
        };
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        // Sub-cgroups are directories; a symlink is not followed (cgroupfs has none).
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            }
        }
    }
    Ok((root, pids.into_iter().collect()))
}

/// The processes of cgroup `dir` (`cgroup.procs`), or its threads where the kernel
/// refuses that (a threaded cgroup: EOPNOTSUPP).
fn members(dir: &Path) -> Result<String, super::fs::FileError> {
    let read = |f: &str| super::fs::read_text(&dir.join(f), "a cgroup's processes", PROCS_BYTES);
    read("cgroup.procs").or_else(|e| {
        if errno(&e) == Some(libc::EOPNOTSUPP) {
            read("cgroup.threads")
        } else {
            Err(e)
        }
    })
}

/// Whether a read failed because its cgroup went away.
fn gone(e: &super::fs::FileError) -> bool {
    matches!(errno(e), Some(libc::ENOENT | libc::ENODEV))
}

/// The OS error of a failed read, if it was one.
fn errno(e: &super::fs::FileError) -> Option<i32> {
    match e {
        super::fs::FileError::Io { source, .. } => source.raw_os_error(),
        _ => None,
    }
}

/// Whether `dir` is a directory of a cgroup file system (v1 or v2).
fn is_cgroup(dir: &Path) -> bool {
    use super::fs::{magic, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};
    matches!(magic(dir), Some(CGROUP_SUPER_MAGIC | CGROUP2_SUPER_MAGIC))
        && dir.join("cgroup.procs").exists()
}

/// Where the cgroup2 file system is mounted (/proc/self/mountinfo's fifth field of
/// its first `cgroup2` line).
fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (before, after) = l.split_once(" - ")?;
        let mount = before.split_whitespace().nth(4)?;
        (after.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(mount))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_link_gives_its_inode_and_nothing_else_does() {
        assert_eq!(socket_inode(Path::new("socket:[12345]")), Some(12345));
        assert_eq!(socket_inode(Path::new("pipe:[12345]")), None);
        assert_eq!(socket_inode(Path::new("/dev/null")), None);
        assert_eq!(socket_inode(Path::new("socket:[]")), None);
    }

    /// Witness: the kernel's own listening socket, found by its port.
    #[test]
    fn this_process_is_found_listening_on_its_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let ports = ports_of(&[std::process::id()]).unwrap();
        assert_eq!(
            ports
                .get(&port)
                .map(|p| p.iter().copied().collect::<Vec<_>>()),
            Some(vec![std::process::id()])
        );
    }

    #[test]
    fn a_process_that_does_not_exist_is_named() {
        // pid_max's ceiling is 4 194 304: no process has a larger pid.
        let e = ports_of(&[4_194_305]).unwrap_err();
        assert_eq!(e.to_string(), "no process 4194305 (is the PID right?)");
    }

    #[test]
    fn a_directory_that_is_no_cgroup_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.procs"), "1\n").unwrap();
        assert!(matches!(
            cgroup_pids(d.path()),
            Err(ListenersError::NotCgroup { .. })
        ));
    }
}
