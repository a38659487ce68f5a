//! The SYN initial-RTO override (seed 001's appendix), plus per-destination rto_min and
//! delayed-ACK ceiling: bpf/syn_rto.bpf.c, a sock_ops program with an LPM trie per
//! address family, loaded with aya.
//!
//! The program and its maps are pinned in a directory under /sys/fs/bpf so they outlive
//! the command and later commands can edit the tries. It is attached with
//! BPF_PROG_ATTACH (BPF_F_ALLOW_MULTI), which the cgroup keeps without a pinned link:
//! aya attaches sock_ops with a BPF link and cannot pin that kind of link, and an
//! unpinned link would detach when the command exits. The attachment is journalled
//! ([`super::tuning`]) so `rttlab tune revert --all` detaches it too.
//!
//! # Privileges
//! CAP_BPF and CAP_NET_ADMIN (root), a cgroup v2 hierarchy and a mounted bpffs.
//!
//! # Minimum kernel
//! 4.13 for BPF_SOCK_OPS_TIMEOUT_INIT; 5.10 for TCP_BPF_RTO_MIN / TCP_BPF_DELACK_MAX.

use super::bpf_sys::{bpf, obj_get};
use super::SyscallError;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Map, MapData};
use aya::programs::SockOps;
use aya::Ebpf;
use serde::Serialize;
use std::ffi::CString;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The compiled program, committed beside its source.
static OBJECT: &[u8] = aya::include_bytes_aligned!("../../bpf/syn_rto.bpf.o");
const PROGRAM: &str = "rttlab_sockops";
const MAP_V4: &str = "rttlab_v4";
const MAP_V6: &str = "rttlab_v6";
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_DETACH: libc::c_long = 9;
const BPF_CGROUP_SOCK_OPS: u32 = 3;
const BPF_F_ALLOW_MULTI: u32 = 2;
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Default pin directory.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/rttlab";

/// What the program does for one prefix; zero fields leave the kernel's default.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tuning {
    /// The SYN's initial RTO, jiffies: the program's reply to
    /// BPF_SOCK_OPS_TIMEOUT_INIT (the kernel's default is 1 s).
    pub syn_rto_jiffies: u32,
    /// The connection's rto_min, µs (TCP_BPF_RTO_MIN; `--rto-min`).
    pub rto_min_us: u32,
    /// The connection's delayed-ACK ceiling, µs (TCP_BPF_DELACK_MAX; `--delack-max`).
    pub delack_max_us: u32,
    pad: u32,
}

// SAFETY: repr(C), four u32 fields, no padding, any bit pattern valid.
unsafe impl aya::Pod for Tuning {}

impl Tuning {
    /// A tuning with these values (zero: untouched).
    pub fn new(syn_rto_jiffies: u32, rto_min_us: u32, delack_max_us: u32) -> Self {
        Self {
            syn_rto_jiffies,
            rto_min_us,
            delack_max_us,
            pad: 0,
        }
    }

    /// The tuning of a SYN RTO and, optionally, an rto_min and a delayed-ACK maximum,
    /// in the units the program hands the kernel at `hz`.
    ///
    /// # Errors
    /// A SYN RTO over TCP_RTO_MAX (120 s), or a timeout the kernel would silently
    /// ignore: `bpf_sol_tcp_setsockopt` takes [TCP_TIMEOUT_MIN (2 jiffies), TCP_RTO_MIN
    /// (200 ms)] and keeps the old value otherwise ([`bpf_timeout_ok`]).
    pub fn checked(
        syn_rto: Duration,
        rto_min: Option<Duration>,
        delack_max: Option<Duration>,
        hz: u32,
    ) -> Result<Self, TuningRangeError> {
        if syn_rto > Duration::from_secs(120) {
            return Err(TuningRangeError::SynRto);
        }
        let micros = crate::stats::units::us;
        let us = |flag: &'static str, d: Option<Duration>| match d {
            None => Ok(0),
            Some(d) if !bpf_timeout_ok(micros(d), hz) => Err(TuningRangeError::Timeout {
                flag,
                jiffy_us: super::hz::jiffy_us(hz),
                hz,
            }),
            Some(d) => Ok(u32::try_from(micros(d)).unwrap_or(u32::MAX)),
        };
        Ok(Self::new(
            u32::try_from(super::hz::usecs_to_jiffies(micros(syn_rto), hz)).unwrap_or(u32::MAX),
            us("rto-min", rto_min)?,
            us("delack-max", delack_max)?,
        ))
    }
}

/// A tuning the kernel would refuse or silently ignore.
#[derive(Debug, thiserror::Error)]
pub enum TuningRangeError {
    /// Over TCP_RTO_MAX.
    #[error("the SYN RTO must be at most 120 s (TCP_RTO_MAX)")]
    SynRto,
    /// Outside what `bpf_sol_tcp_setsockopt` takes.
    #[error("--{flag} must be more than {jiffy_us} µs (one jiffy at HZ {hz}; the kernel takes 2 jiffies or more) and at most 200 ms")]
    Timeout {
        /// The command-line flag that set it.
        flag: &'static str,
        /// One jiffy.
        jiffy_us: u64,
        /// The kernel's HZ.
        hz: u32,
    },
}

/// The `bpftool map update` that sets `t` for `ip/prefix` in the maps pinned at
/// `pin_dir`, for hosts without rttlab: the LPM trie key is `struct bpf_lpm_trie_key`
/// (a host-order u32 prefix length, then the address in network order) and the value
/// this [`Tuning`]'s four host-order u32 words, as the program reads them.
pub fn bpftool_update(pin_dir: &Path, ip: IpAddr, prefix: u8, t: Tuning) -> String {
    let hex = |b: &[u8]| -> String {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut key = u32::from(prefix).to_ne_bytes().to_vec();
    key.extend_from_slice(&match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    });
    let value: Vec<u8> = [t.syn_rto_jiffies, t.rto_min_us, t.delack_max_us, t.pad]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    format!(
        "bpftool map update pinned {}/rttlab_{} key hex {} value hex {}",
        pin_dir.display(),
        if ip.is_ipv4() { "v4" } else { "v6" },
        hex(&key),
        hex(&value)
    )
}

/// A step of loading the program that failed, keeping the error as its source.
fn load<E: std::error::Error + Send + Sync + 'static>(
    step: &str,
) -> impl FnOnce(E) -> SynRtoError + '_ {
    move |e| SynRtoError::Load {
        step: step.into(),
        source: Box::new(e),
    }
}

/// Errors of the override.
#[derive(Debug, thiserror::Error)]
pub enum SynRtoError {
    /// A precondition failed (no cgroup v2 or bpffs, already attached, nothing
    /// pinned); the message says which and what to do.
    #[error("{0}")]
    Setup(String),
    /// Opening the object, the kernel's verifier, or pinning the program or a map failed.
    #[error("loading the eBPF program: {step} (needs root: CAP_BPF and CAP_NET_ADMIN)")]
    Load {
        /// The step that failed, e.g. "pinning a map" or "the kernel's verifier".
        step: String,
        /// aya's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file or directory of the program (its cgroup, its pins) could not be used.
    #[error("{}", .path.display())]
    Path {
        /// The cgroup directory, the pin directory or a pinned file.
        path: PathBuf,
        /// The OS error opening, creating or removing it.
        #[source]
        source: std::io::Error,
    },
    /// The compiled object lacks a map or program this rttlab expects.
    #[error("the eBPF object has no {0}: rebuild it with bpf/build.sh")]
    Object(String),
    /// A pinned trie could not be opened or edited (often: not attached yet).
    #[error("{path}: {msg}")]
    Map {
        /// The trie's pin, `PIN_DIR/v4` or `PIN_DIR/v6`.
        path: String,
        /// aya's error chain, with a hint when the pin could not be opened.
        msg: String,
    },
    /// A bpf(2) call failed: BPF_OBJ_GET of the pinned program, or BPF_PROG_ATTACH.
    #[error(transparent)]
    Syscall(#[from] SyscallError),
    /// The kernel refused to detach the program: it stays attached, so its pins stay
    /// (without them nothing could detach it later).
    #[error("the kernel refused to detach the program from {cgroup}; it is still attached, and its pins at {pin_dir} are kept so that `rttlab tune syn-rto detach --cgroup CGROUP` can retry (with the cgroup it is attached to)")]
    DetachRefused {
        /// The cgroup detached from, as given.
        cgroup: String,
        /// Where the program and its maps stay pinned.
        pin_dir: String,
        /// The failed BPF_PROG_DETACH and its errno.
        #[source]
        source: SyscallError,
    },
}

/// Make `dir` a bpf filesystem if it is not one, as bpftool does before pinning
/// (`mount_bpffs_for_pin`): only over an empty directory (as /sys/fs/bpf is before
/// systemd or anyone mounts it), never over files it would hide. The mount stays, as
/// bpftool's does: the pins in it must outlive this process.
///
/// # Errors
/// `dir` is missing, not empty, or the mount was refused.
pub fn ensure_bpffs(dir: &Path) -> Result<(), SynRtoError> {
    if super::fs::magic(dir) == Some(BPF_FS_MAGIC) {
        return Ok(());
    }
    let empty = std::fs::read_dir(dir)
        .map(|mut d| d.next().is_none())
        .unwrap_or(false);
    if !empty {
        return Err(SynRtoError::Setup(format!(
            "{} is not a bpf filesystem, and not an empty directory to mount one on \
             (mount -t bpf bpf DIR, or pass --pin-dir under a bpf filesystem)",
            dir.display()
        )));
    }
    mount_bpffs(dir).map_err(|e| {
        SynRtoError::Setup(format!(
            "{} is not a bpf filesystem and mounting one there failed: {e}",
            dir.display()
        ))
    })?;
    eprintln!(
        "rttlab: mounted a bpf filesystem at {} for the pins (it stays, as bpftool's does)",
        dir.display()
    );
    Ok(())
}

/// `mount -t bpf bpf DIR`.
///
/// # Errors
/// The kernel's refusal (no privilege, no bpffs in this kernel).
pub fn mount_bpffs(dir: &Path) -> std::io::Result<()> {
    let target = CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let bpf = c"bpf";
    // SAFETY: NUL-terminated strings that outlive the call; no data argument.
    let r = unsafe {
        libc::mount(
            bpf.as_ptr(),
            target.as_ptr(),
            bpf.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn prog_attach(cmd: libc::c_long, cgroup: &Path, prog: &impl AsRawFd) -> Result<(), SynRtoError> {
    let cg = std::fs::File::open(cgroup).map_err(|source| SynRtoError::Path {
        path: cgroup.to_owned(),
        source,
    })?;
    let mut attr = [0u64; 16];
    // union bpf_attr { struct { u32 target_fd, attach_bpf_fd, attach_type, attach_flags; } }
    attr[0] = u64::from(cg.as_raw_fd() as u32) | (u64::from(prog.as_raw_fd() as u32) << 32);
    attr[1] = u64::from(BPF_CGROUP_SOCK_OPS)
        | (u64::from(if cmd == BPF_PROG_ATTACH {
            BPF_F_ALLOW_MULTI
        } else {
            0
        }) << 32);
    let call = if cmd == BPF_PROG_ATTACH {
        "BPF_PROG_ATTACH"
    } else {
        "BPF_PROG_DETACH"
    };
    bpf(cmd, &mut attr).map_err(|source| SyscallError { call, source })?;
    Ok(())
}

/// A pinned instance of the program.
pub struct SynRto {
    /// The directory (on a bpffs) of the pins `prog`, `v4` and `v6`
    /// (`--pin-dir`, default [`DEFAULT_PIN_DIR`]).
    pub pin_dir: PathBuf,
}

impl SynRto {
    /// The instance pinned at `pin_dir`.
    pub fn at(pin_dir: impl Into<PathBuf>) -> Self {
        Self {
            pin_dir: pin_dir.into(),
        }
    }

    fn prog_pin(&self) -> PathBuf {
        self.pin_dir.join("prog")
    }

    /// Whether the program is pinned (and so attached) here.
    pub fn is_attached(&self) -> bool {
        self.prog_pin().exists()
    }

    /// Load, pin and attach to `cgroup`. On failure nothing stays pinned or attached.
    ///
    /// # Errors
    /// No cgroup v2 or bpffs, no privilege, or already attached here.
    pub fn attach(&self, cgroup: &Path) -> Result<(), SynRtoError> {
        if super::fs::magic(cgroup) != Some(super::fs::CGROUP2_SUPER_MAGIC) {
            return Err(SynRtoError::Setup(format!(
                "{} is not a cgroup v2 directory (mount cgroup2 or pass --cgroup)",
                cgroup.display()
            )));
        }
        let bpffs = self.pin_dir.parent().unwrap_or(Path::new("/sys/fs/bpf"));
        ensure_bpffs(bpffs)?;
        if self.is_attached() {
            return Err(SynRtoError::Setup(format!(
                "already attached ({} exists): use add/del, or detach first",
                self.prog_pin().display()
            )));
        }
        std::fs::create_dir_all(&self.pin_dir).map_err(|source| SynRtoError::Path {
            path: self.pin_dir.clone(),
            source,
        })?;
        let r = self.load_pin_attach(cgroup);
        if r.is_err() {
            let _ = self.unpin();
        }
        r
    }

    fn load_pin_attach(&self, cgroup: &Path) -> Result<(), SynRtoError> {
        let mut ebpf = Ebpf::load(OBJECT).map_err(load("opening the object"))?;
        for (name, file) in [(MAP_V4, "v4"), (MAP_V6, "v6")] {
            let map = ebpf
                .map(name)
                .ok_or_else(|| SynRtoError::Object(format!("map {name}")))?;
            map.pin(self.pin_dir.join(file))
                .map_err(load("pinning a map"))?;
        }
        let prog: &mut SockOps = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| SynRtoError::Object(format!("program {PROGRAM}")))?
            .try_into()
            .map_err(load("finding the sock_ops program"))?;
        prog.load().map_err(load("the kernel's verifier"))?;
        prog.pin(self.prog_pin())
            .map_err(load("pinning the program"))?;
        let fd = prog.fd().map_err(load("the program's descriptor"))?;
        prog_attach(BPF_PROG_ATTACH, cgroup, &fd.as_fd())
    }

    /// Detach from `cgroup` and remove the pins.
    ///
    /// # Errors
    /// Not attached there, or no privilege.
    pub fn detach(&self, cgroup: &Path) -> Result<(), SynRtoError> {
        if !self.is_attached() {
            return Err(SynRtoError::Setup(format!(
                "nothing pinned at {}: not attached",
                self.pin_dir.display()
            )));
        }
        let prog = obj_get(&self.prog_pin())?;
        match prog_attach(BPF_PROG_DETACH, cgroup, &prog) {
            Ok(()) => self.unpin(),
            Err(SynRtoError::Syscall(source)) => Err(SynRtoError::DetachRefused {
                cgroup: cgroup.display().to_string(),
                pin_dir: self.pin_dir.display().to_string(),
                source,
            }),
            Err(other) => Err(other),
        }
    }

    fn unpin(&self) -> Result<(), SynRtoError> {
        for f in ["prog", "v4", "v6"] {
            let p = self.pin_dir.join(f);
            if p.exists() {
                std::fs::remove_file(&p).map_err(|source| SynRtoError::Path {
                    path: p.clone(),
                    source,
                })?;
            }
        }
        let _ = std::fs::remove_dir(&self.pin_dir);
        Ok(())
    }

    fn with_trie<R>(
        &self,
        v6: bool,
        f: impl FnOnce(&mut dyn TrieOps) -> Result<R, aya::maps::MapError>,
    ) -> Result<R, SynRtoError> {
        let path = self.pin_dir.join(if v6 { "v6" } else { "v4" });
        let err = |msg: String| SynRtoError::Map {
            path: path.display().to_string(),
            msg,
        };
        let data = MapData::from_pin(&path).map_err(|e| {
            err(format!(
                "{} (attach first: rttlab tune syn-rto add …)",
                crate::error_chain(&e)
            ))
        })?;
        let map = Map::LpmTrie(data);
        if v6 {
            let mut t: LpmTrie<MapData, [u8; 16], Tuning> =
                LpmTrie::try_from(map).map_err(|e| err(crate::error_chain(&e)))?;
            f(&mut t).map_err(|e| err(crate::error_chain(&e)))
        } else {
            let mut t: LpmTrie<MapData, [u8; 4], Tuning> =
                LpmTrie::try_from(map).map_err(|e| err(crate::error_chain(&e)))?;
            f(&mut t).map_err(|e| err(crate::error_chain(&e)))
        }
    }

    /// Set the tuning for `prefix`.
    ///
    /// # Errors
    /// Not attached, or the map refused the entry (full).
    pub fn add(&self, ip: IpAddr, prefix: u8, t: Tuning) -> Result<(), SynRtoError> {
        self.with_trie(ip.is_ipv6(), |m| m.put(ip, prefix, t))
    }

    /// Remove the entry for `prefix`.
    ///
    /// # Errors
    /// Not attached, or no such entry.
    pub fn del(&self, ip: IpAddr, prefix: u8) -> Result<(), SynRtoError> {
        self.with_trie(ip.is_ipv6(), |m| m.drop_key(ip, prefix))
    }

    /// Every entry, IPv4 then IPv6.
    ///
    /// # Errors
    /// Not attached.
    pub fn list(&self) -> Result<Vec<(IpAddr, u8, Tuning)>, SynRtoError> {
        let mut v = self.with_trie(false, |m| m.all())?;
        v.extend(self.with_trie(true, |m| m.all())?);
        Ok(v)
    }
}

/// The operations used on either trie, so one code path serves both key sizes.
trait TrieOps {
    fn put(&mut self, ip: IpAddr, prefix: u8, t: Tuning) -> Result<(), aya::maps::MapError>;
    fn drop_key(&mut self, ip: IpAddr, prefix: u8) -> Result<(), aya::maps::MapError>;
    fn all(&mut self) -> Result<Vec<(IpAddr, u8, Tuning)>, aya::maps::MapError>;
}

macro_rules! trie_ops {
    ($n:literal, $to:expr, $from:expr) => {
        impl TrieOps for LpmTrie<MapData, [u8; $n], Tuning> {
            fn put(
                &mut self,
                ip: IpAddr,
                prefix: u8,
                t: Tuning,
            ) -> Result<(), aya::maps::MapError> {
                self.insert(&Key::new(u32::from(prefix), $to(ip)), t, 0)
            }
            fn drop_key(&mut self, ip: IpAddr, prefix: u8) -> Result<(), aya::maps::MapError> {
                self.remove(&Key::new(u32::from(prefix), $to(ip)))
            }
            fn all(&mut self) -> Result<Vec<(IpAddr, u8, Tuning)>, aya::maps::MapError> {
                self.iter()
                    .map(|r| r.map(|(k, v)| ($from(k.data()), k.prefix_len() as u8, v)))
                    .collect()
            }
        }
    };
}

fn v4_bytes(ip: IpAddr) -> [u8; 4] {
    match ip {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(_) => [0; 4],
    }
}
fn v6_bytes(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V6(a) => a.octets(),
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
    }
}
trie_ops!(4, v4_bytes, |b: [u8; 4]| IpAddr::from(b));
trie_ops!(16, v6_bytes, |b: [u8; 16]| IpAddr::from(b));

/// The cgroup v2 hierarchy's root: /sys/fs/cgroup on unified systems, /sys/fs/cgroup/unified
/// on hybrid ones — the first cgroup2 mount in /proc/self/mountinfo.
///
/// # Errors
/// No cgroup2 file system is mounted.
pub fn cgroup2_root() -> Result<PathBuf, SynRtoError> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            if post.split_whitespace().next()? != "cgroup2" {
                return None;
            }
            pre.split_whitespace().nth(4).map(PathBuf::from)
        })
        .ok_or_else(|| SynRtoError::Setup("no cgroup v2 hierarchy is mounted (mount -t cgroup2 none /sys/fs/cgroup/unified, or pass --cgroup)".into()))
}

/// Whether the kernel takes `us` for TCP_BPF_RTO_MIN / TCP_BPF_DELACK_MAX:
/// `bpf_sol_tcp_setsockopt` converts with `usecs_to_jiffies` and accepts
/// [TCP_TIMEOUT_MIN (2 jiffies), TCP_RTO_MIN (200 ms)].
pub fn bpf_timeout_ok(us: u64, hz: u32) -> bool {
    super::hz::usecs_to_jiffies(us, hz) >= 2 && us <= 200_000
}

#[cfg(test)]
mod tests {
    use super::{Tuning, TuningRangeError};
    use std::time::Duration;

    /// Witness: arithmetic at HZ 250 (4 ms jiffies, `usecs_to_jiffies` rounds up) and
    /// the kernel's bounds, TCP_TIMEOUT_MIN (2 jiffies), TCP_RTO_MIN (200 ms) and
    /// TCP_RTO_MAX (120 s).
    #[test]
    fn tunings_are_in_the_kernels_units_and_bounds() {
        let ms = Duration::from_millis;
        let t = Tuning::checked(ms(50), Some(ms(8)), None, 250).unwrap();
        assert_eq!(
            (t.syn_rto_jiffies, t.rto_min_us, t.delack_max_us),
            (13, 8_000, 0)
        );
        assert!(matches!(
            Tuning::checked(Duration::from_secs(121), None, None, 250),
            Err(TuningRangeError::SynRto)
        ));
        // One jiffy is below TCP_TIMEOUT_MIN; 201 ms above TCP_RTO_MIN.
        for bad in [ms(4), ms(201)] {
            let e = Tuning::checked(ms(50), None, Some(bad), 250).unwrap_err();
            assert_eq!(
                e.to_string(),
                "--delack-max must be more than 4000 µs (one jiffy at HZ 250; the kernel takes 2 jiffies or more) and at most 200 ms"
            );
        }
        assert_eq!(
            Tuning::checked(ms(50), Some(ms(5)), None, 250)
                .unwrap()
                .rto_min_us,
            5_000
        );
    }

    /// Witness: `struct bpf_lpm_trie_key` and the program's value struct, written out
    /// by hand: prefix length 8 as a little-endian u32, 10.0.0.0 in network order; 5
    /// jiffies and 8 ms as little-endian u32s.
    #[test]
    #[cfg(target_endian = "little")]
    fn the_bpftool_command_encodes_key_and_value_as_the_program_reads_them() {
        let c = bpftool_update(
            Path::new("/sys/fs/bpf/rttlab"),
            "10.0.0.0".parse().unwrap(),
            8,
            Tuning::new(5, 0, 8000),
        );
        assert_eq!(
            c,
            "bpftool map update pinned /sys/fs/bpf/rttlab/rttlab_v4 key hex 08 00 00 00 0a 00 00 00 value hex 05 00 00 00 00 00 00 00 40 1f 00 00 00 00 00 00"
        );
        let v6 = bpftool_update(
            Path::new("/p"),
            "2001:2::".parse().unwrap(),
            48,
            Tuning::default(),
        );
        assert!(
            v6.starts_with(
                "bpftool map update pinned /p/rttlab_v6 key hex 30 00 00 00 20 01 00 02 00 00"
            ),
            "{v6}"
        );
    }

    use super::*;

    #[test]
    fn values_are_the_kernels_shapes_and_ranges() {
        assert_eq!(std::mem::size_of::<Tuning>(), 16);
        // docs/ARCHITECTURE.md §3: 1000 µs → EINVAL, 5000 µs → 2 jiffies (accepted), 300000 → EINVAL.
        assert!(!bpf_timeout_ok(1_000, 250) && !bpf_timeout_ok(4_000, 250));
        assert!(
            bpf_timeout_ok(5_000, 250)
                && bpf_timeout_ok(200_000, 250)
                && !bpf_timeout_ok(300_000, 250)
        );
        assert!(cgroup2_root().is_ok_and(|p| p.is_dir()));
    }

    #[test]
    fn the_committed_object_has_the_program_and_maps() {
        // Parsing needs no privilege; loading does.
        let o = aya_obj::Object::parse(OBJECT).unwrap();
        assert!(o.programs.contains_key(PROGRAM));
        assert!(o.maps.contains_key(MAP_V4) && o.maps.contains_key(MAP_V6));
    }
}
