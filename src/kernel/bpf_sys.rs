//! The few bpf(2) commands aya does not offer: BPF_OBJ_GET of a pin and
//! BPF_PROG_TEST_RUN (running a loaded program on a packet built in memory).

use super::SyscallError;
use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const BPF_OBJ_GET: libc::c_long = 7;
const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// bpf(2) with a zero-padded attribute buffer of 16 words (`union bpf_attr` is
/// shorter; the kernel checks that the words it does not know are zero).
///
/// # Errors
/// The kernel's errno.
pub fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> Result<i64, std::io::Error> {
    // SAFETY: bpf(2) with a zero-padded attribute buffer of its stated size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r)
}

/// BPF_OBJ_GET: a descriptor of the object pinned at `path`.
///
/// # Errors
/// Nothing pinned there, or no privilege.
pub fn obj_get(path: &Path) -> Result<OwnedFd, SyscallError> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|e| SyscallError {
        call: "BPF_OBJ_GET",
        source: std::io::Error::other(e),
    })?;
    let mut attr = [0u64; 16];
    attr[0] = c.as_ptr() as u64;
    let fd = bpf(BPF_OBJ_GET, &mut attr).map_err(|source| SyscallError {
        call: "BPF_OBJ_GET",
        source,
    })?;
    // SAFETY: the kernel returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `struct __sk_buff`'s size and the offset of its `tstamp` (include/uapi/linux/bpf.h,
/// unchanged since 5.16 added `tstamp_type` and `hwtstamp`).
const SK_BUFF_SIZE: usize = 192;
const SK_BUFF_TSTAMP: usize = 152;

/// BPF_PROG_TEST_RUN of a tc program on `frame` (an Ethernet frame of 14 bytes or
/// more), whose `skb->tstamp` reads `tstamp_ns`. Returns the program's return value.
///
/// The kernel builds a real sk_buff from the bytes (bpf_prog_test_run_skb), so the
/// program runs exactly as on a packet, maps and ring buffer included.
///
/// # Errors
/// The kernel refused the run (no privilege, a frame shorter than an Ethernet header).
pub fn test_run_tc(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    tstamp_ns: u64,
) -> Result<u32, SyscallError> {
    let mut ctx = [0u8; SK_BUFF_SIZE];
    ctx[SK_BUFF_TSTAMP..SK_BUFF_TSTAMP + 8].copy_from_slice(&tstamp_ns.to_ne_bytes());
    let mut attr = [0u64; 16];
    // struct { u32 prog_fd, retval, data_size_in, data_size_out; u64 data_in,
    // data_out; u32 repeat, duration, ctx_size_in, ctx_size_out; u64 ctx_in, ctx_out;
    // u32 flags, cpu; ... } test;
    attr[0] = u64::from(prog.as_raw_fd() as u32);
    attr[1] = frame.len() as u64;
    attr[2] = frame.as_ptr() as u64;
    attr[5] = SK_BUFF_SIZE as u64;
    attr[6] = ctx.as_ptr() as u64;
    bpf(BPF_PROG_TEST_RUN, &mut attr).map_err(|source| SyscallError {
        call: "BPF_PROG_TEST_RUN",
        source,
    })?;
    Ok((attr[0] >> 32) as u32)
}
