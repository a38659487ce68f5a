//! What a refusal for privilege should say: the capability the kernel checked and
//! the one-line fix (a file capability on this binary, or the sysctl that opens the
//! feature to every user), so that no command answers "Operation not permitted"
//! alone.

use std::path::PathBuf;

/// The capabilities rttlab's commands may need (capabilities(7) numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// Binding ports below `net.ipv4.ip_unprivileged_port_start`.
    NetBindService = 10,
    /// SO_MARK, routes, congestion controls outside the allowed list, qdiscs.
    NetAdmin = 12,
    /// Raw and packet sockets.
    NetRaw = 13,
    /// Namespaces and mounts.
    SysAdmin = 21,
    /// Loading eBPF programs whose pointer arithmetic the verifier checks for
    /// Spectre v1 unless this is held (`bpf_bypass_spec_v1`, perfmon_capable).
    Perfmon = 38,
    /// Loading eBPF programs.
    Bpf = 39,
}

impl Capability {
    /// `CAP_NET_RAW` and so on, as capabilities(7) and `setcap` name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::NetBindService => "CAP_NET_BIND_SERVICE",
            Self::NetAdmin => "CAP_NET_ADMIN",
            Self::NetRaw => "CAP_NET_RAW",
            Self::SysAdmin => "CAP_SYS_ADMIN",
            Self::Perfmon => "CAP_PERFMON",
            Self::Bpf => "CAP_BPF",
        }
    }

    /// Whether this process has it in its effective set (`CapEff` of
    /// /proc/self/status, as `capsh --print` reads it).
    pub fn held(self) -> bool {
        effective().is_some_and(|bits| bits & (1 << self as u32) != 0)
    }

    /// `sudo setcap cap_net_raw+ep /usr/bin/rttlab`: the file capability that lets
    /// any user run this binary with it.
    pub fn setcap(self) -> String {
        format!(
            "sudo setcap {}+ep {}",
            self.name().to_ascii_lowercase(),
            this_binary().display()
        )
    }
}

/// The effective capability set, from /proc/self/status.
fn effective() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// This executable's path, for the `setcap` line.
fn this_binary() -> PathBuf {
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("rttlab"))
}

/// Whether `e` is the kernel refusing for lack of privilege.
pub fn is_refusal(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
}

/// Why no ICMP socket opened, and both ways to one: a datagram socket when
/// `net.ipv4.ping_group_range` (which governs ICMPv6 too) holds one of the user's
/// groups, as iputils ping uses, or a raw socket with CAP_NET_RAW.
pub fn icmp_socket_fix() -> String {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ping_group_range")
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unreadable".into());
    // SAFETY: getgid cannot fail.
    let gid = unsafe { libc::getgid() };
    format!(
        "an unprivileged ICMP socket needs your group ({gid}) in net.ipv4.ping_group_range (now \"{range}\": `sudo sysctl -w net.ipv4.ping_group_range=\"0 2147483647\"`), a raw one {} (`{}`)",
        Capability::NetRaw.name(),
        Capability::NetRaw.setcap()
    )
}

/// The fix for a port below `net.ipv4.ip_unprivileged_port_start`.
pub fn low_port_fix(port: u16) -> String {
    let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "1024".into());
    format!(
        "port {port} is below net.ipv4.ip_unprivileged_port_start ({start}): it needs {} (`{}`), or pick a port from {start} up",
        Capability::NetBindService.name(),
        Capability::NetBindService.setcap()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: the kernel's header (include/uapi/linux/capability.h numbers
    /// CAP_NET_RAW 13 and CAP_BPF 39) and root's capabilities: a root test process
    /// (CI runs as root with every capability, as the namespace tests need) holds
    /// each one, read from its /proc/self/status.
    #[test]
    fn capability_bits_are_the_kernels() {
        assert_eq!(Capability::NetRaw as u32, 13);
        assert_eq!(Capability::Bpf as u32, 39);
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            for c in [
                Capability::NetBindService,
                Capability::NetAdmin,
                Capability::NetRaw,
                Capability::SysAdmin,
                Capability::Bpf,
            ] {
                assert!(c.held(), "{c:?}");
            }
        }
        assert!(Capability::NetRaw
            .setcap()
            .starts_with("sudo setcap cap_net_raw+ep /"));
    }
}
