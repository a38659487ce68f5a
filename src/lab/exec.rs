//! Running a program inside a lab namespace as `ip netns exec` does: enter the network
//! namespace, take a private mount namespace, bind /etc/netns/NS/hosts over /etc/hosts
//! (so `a` and `b` resolve) and remount /sys (so /sys/class/net shows the namespace's
//! interfaces).

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;

/// A command for `program` that starts inside namespace `netns`.
pub fn command(netns: &str, program: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    let ns = std::fs::File::open(crate::kernel::netns::path_of(netns));
    let hosts = CString::new(format!("/etc/netns/{netns}/hosts")).unwrap_or_default();
    // SAFETY: the closure runs between fork and exec and calls only system calls (no
    // allocation: every string was made above).
    unsafe {
        cmd.pre_exec(move || {
            let ns = ns
                .as_ref()
                .map_err(|e| std::io::Error::new(e.kind(), crate::error_chain(&e)))?;
            enter(ns.as_raw_fd(), &hosts)
        });
    }
    cmd
}

/// The steps after fork: setns, unshare the mount namespace, bind the hosts file,
/// remount /sys.
fn enter(ns_fd: i32, hosts: &CString) -> std::io::Result<()> {
    let check = |rc: i32| {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: system calls on valid fds and C strings.
    unsafe {
        check(libc::setns(ns_fd, libc::CLONE_NEWNET))?;
        check(libc::unshare(libc::CLONE_NEWNS))?;
        check(libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_SLAVE | libc::MS_REC,
            std::ptr::null(),
        ))?;
        if libc::access(hosts.as_ptr(), libc::R_OK) == 0 {
            check(libc::mount(
                hosts.as_ptr(),
                c"/etc/hosts".as_ptr(),
                c"none".as_ptr(),
                libc::MS_BIND,
                std::ptr::null(),
            ))?;
        }
        if libc::umount2(c"/sys".as_ptr(), libc::MNT_DETACH) == 0 {
            let _ = libc::mount(
                c"sysfs".as_ptr(),
                c"/sys".as_ptr(),
                c"sysfs".as_ptr(),
                0,
                std::ptr::null(),
            );
        }
    }
    Ok(())
}
