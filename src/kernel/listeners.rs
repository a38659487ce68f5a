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
    #[error("{0} is not a cgroup (a directory of cgroupfs with a cgroup.procs, such as /sys/fs/cgroup/system.slice/nginx.service)")]
    NotCgroup(PathBuf),
    /// A cgroup's processes cannot be read.
    #[error("cannot read {path}: {msg}")]
    Procs {
        /// Its `cgroup.procs`.
        path: PathBuf,
        /// Why.
        msg: String,
    },
    /// No cgroup2 mount to resolve a relative path against.
    #[error("no cgroup2 file system is mounted to find {0} in (give the cgroup's whole path)")]
    NoCgroup2(PathBuf),
    /// The kernel's sockets cannot be listed.
    #[error("listing the listening sockets: {0}")]
    Diag(#[from] DiagError),
}

/// The TCP ports each of `pids` listens on, by port: the processes holding it. A pid
/// that ended meanwhile is left out when others remain; alone, it is an error.
///
/// # Errors
/// A pid with no process, descriptors that cannot be read, no sock_diag.
pub fn ports_of(pids: &[u32]) -> Result<BTreeMap<u16, BTreeSet<u32>>, ListenersError> {
    let mut by_inode = BTreeMap::new();
    let mut diag = SockDiag::open(None)?;
    let filter = DiagFilter {
        states: LISTEN,
        ..DiagFilter::default()
    };
    diag.dump_tcp(&filter, |e| {
        if e.inode != 0 {
            by_inode.insert(u64::from(e.inode), e.local.port());
        }
    })?;
    let mut ports: BTreeMap<u16, BTreeSet<u32>> = BTreeMap::new();
    for &pid in pids {
        let fds = match std::fs::read_dir(format!("/proc/{pid}/fd")) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if pids.len() == 1 {
                    return Err(ListenersError::NoProcess(pid));
                }
                continue;
            }
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
    Ok(ports)
}

/// The inode of a descriptor's link `socket:[N]`.
fn socket_inode(link: &Path) -> Option<u64> {
    link.to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The processes of the cgroup at `path` and of every cgroup below it. A relative
/// path is taken under the cgroup2 mount (`system.slice/nginx.service`).
///
/// # Errors
/// Not a cgroup, or its processes cannot be read.
pub fn cgroup_pids(path: &Path) -> Result<Vec<u32>, ListenersError> {
    let root = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cgroup2_mount()
            .ok_or_else(|| ListenersError::NoCgroup2(path.to_path_buf()))?
            .join(path)
    };
    if !is_cgroup(&root) {
        return Err(ListenersError::NotCgroup(root));
    }
    let mut pids = BTreeSet::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        let procs = dir.join("cgroup.procs");
        let text =
            super::fs::read_text(&procs, "a cgroup's processes", PROCS_BYTES).map_err(|e| {
                ListenersError::Procs {
                    path: procs.clone(),
                    msg: crate::error_chain(&e),
                }
            })?;
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        // Sub-cgroups are directories; a symlink is not followed (cgroupfs has none).
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            }
        }
    }
    Ok(pids.into_iter().collect())
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
            Err(ListenersError::NotCgroup(_))
        ));
    }
}
