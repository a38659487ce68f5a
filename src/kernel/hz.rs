//! The running kernel's CONFIG_HZ, which no interface reports directly (`CLK_TCK` is
//! USER_HZ, always 100). TCP shows it: a new connection's RTO after a µs-scale RTT
//! sample is rto_min rounded up to whole jiffies plus one jiffy (`tcp_set_rto`,
//! `usecs_to_jiffies`; docs/ARCHITECTURE.md rule R1), e.g. 204 ms at HZ=250, 201 ms at 1000.

use super::sockopt;
use super::sysctl::{self, SysctlError};
use std::io;
use std::net::{TcpListener, TcpStream};

/// `TCP_RTO_MIN` (include/net/tcp.h): rto_min on kernels without the sysctl.
pub const TCP_RTO_MIN_US: u64 = 200_000;

const RTO_MIN_SYSCTL: &str = "net.ipv4.tcp_rto_min_us";

/// Why rto_min or HZ could not be found.
#[derive(Debug, thiserror::Error)]
pub enum HzError {
    /// `net.ipv4.tcp_rto_min_us` exists but could not be read.
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
    /// `net.ipv4.tcp_rto_min_us` held this text, which does not parse as a `u64`.
    #[error("{RTO_MIN_SYSCTL} = {0:?} is not a whole number of µs")]
    RtoMin(String),
    /// [`detect`] failed: no loopback connection, or no single HZ fits the RTOs seen.
    #[error("detecting this kernel's HZ from loopback connections (pass --hz)")]
    Detect(#[source] io::Error),
}

/// The rto_min new sockets get in the namespace `netns`, µs
/// (`net.ipv4.tcp_rto_min_us`, Linux ≥ 6.11), and whether the kernel has that sysctl
/// (without it, [`TCP_RTO_MIN_US`] unless a route sets another).
///
/// # Errors
/// The sysctl exists but cannot be read or parsed.
pub fn rto_min_us(netns: Option<&str>) -> Result<(u64, bool), HzError> {
    match sysctl::read(netns, RTO_MIN_SYSCTL) {
        Ok(v) => Ok((v.parse().map_err(|_| HzError::RtoMin(v))?, true)),
        Err(SysctlError::Missing(_)) => Ok((TCP_RTO_MIN_US, false)),
        Err(e) => Err(e.into()),
    }
}

/// This kernel's HZ, detected with the rto_min of the calling thread's namespace.
///
/// # Errors
/// rto_min cannot be read, or [`detect`] fails.
pub fn detect_here() -> Result<u32, HzError> {
    let (rto_min, _) = rto_min_us(None)?;
    detect(rto_min).map_err(HzError::Detect)
}

/// HZ values Linux is built with.
const CANDIDATES: [u32; 4] = [100, 250, 300, 1000];

/// One jiffy in µs (`jiffies_to_usecs(1)`; HZ divides 10⁶ for every HZ Linux offers
/// but 300, where the kernel truncates the same way).
pub fn jiffy_us(hz: u32) -> u64 {
    1_000_000 / u64::from(hz)
}

/// `usecs_to_jiffies` (include/linux/jiffies.h): rounds up. Also `msecs_to_jiffies` of
/// whole milliseconds.
pub fn usecs_to_jiffies(us: u64, hz: u32) -> u64 {
    us.div_ceil(jiffy_us(hz))
}

/// `icsk_rto` in jiffies once RTT samples of `srtt_us` have set rttvar to rto_min:
/// `__tcp_set_rto` = `usecs_to_jiffies(srtt + rttvar)` with `rttvar = max(mdev,
/// tcp_rto_min_us)` (`tcp_rtt_estimator`), and `tcp_rto_min_us` a whole number of
/// jiffies — so any srtt > 0 adds one (docs/ARCHITECTURE.md rule R1).
pub fn rto_jiffies(srtt_us: u64, rto_min_us: u64, hz: u32) -> u64 {
    let t = jiffy_us(hz);
    (usecs_to_jiffies(rto_min_us, hz) * t + srtt_us.max(1)).div_ceil(t)
}

/// The RTO rule R1 predicts for `rto_min_us` at `hz` with an RTT far below a jiffy, in µs.
pub fn predicted_rto_us(rto_min_us: u64, hz: u32) -> u64 {
    rto_jiffies(0, rto_min_us, hz) * jiffy_us(hz)
}

/// Find HZ from loopback connections' RTOs, given the rto_min new sockets get here.
/// Each connection rules out the HZ values its (RTT, RTO) pair contradicts; a few
/// connections leave one.
///
/// # Errors
/// No loopback connection could be made, or no single HZ explains the RTOs seen.
pub fn detect(rto_min_us: u64) -> io::Result<u32> {
    let mut left: Vec<u32> = CANDIDATES.to_vec();
    let mut seen = Vec::new();
    for _ in 0..8 {
        // A fresh loopback address each time: the tcp_metrics cache keeps the RTT of
        // past connections per destination, and `tcp_init_metrics` then sets the RTO
        // from the cached RTT instead (docs/ARCHITECTURE.md §10).
        let mut b = [0u8; 3];
        getrandom::getrandom(&mut b).map_err(|e| io::Error::other(e.to_string()))?;
        let l = TcpListener::bind((std::net::Ipv4Addr::new(127, b[0], b[1], b[2].max(2)), 0))?;
        let c = TcpStream::connect(l.local_addr()?)?;
        let _s = l.accept()?;
        let ti = sockopt::tcp_info(&c).map_err(|e| io::Error::other(crate::error_chain(&e)))?;
        let (rtt, rto) = (u64::from(ti.rtt_us), u64::from(ti.rto_us));
        seen.push((rtt, rto));
        // tcpi_rtt is srtt truncated to µs: allow the one-µs slack either way.
        left.retain(|&hz| {
            (rtt.saturating_sub(1)..=rtt + 1)
                .any(|r| (rto_jiffies(r, rto_min_us, hz) * jiffy_us(hz)).abs_diff(rto) <= 1)
        });
        if left.len() <= 1 {
            break;
        }
    }
    match left[..] {
        [hz] => Ok(hz),
        _ => Err(io::Error::other(format!("cannot tell HZ from (rtt, rto) µs {seen:?} with rto_min {rto_min_us} µs (left: {left:?})"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jiffies_round_up_like_the_kernel() {
        // docs/ARCHITECTURE.md §2: 5 ms → 2 j at HZ=250, 50 ms → 13 j, 200 ms → 50 j.
        assert_eq!(
            [5, 50, 200, 100, 1000].map(|m| usecs_to_jiffies(m * 1000, 250)),
            [2, 13, 50, 25, 250]
        );
        assert_eq!(usecs_to_jiffies(100_000, 1000), 100);
        // §2: any x in (4000(k−1), 4000k] µs → k jiffies.
        assert_eq!(
            [4_000, 4_001, 8_000].map(|u| usecs_to_jiffies(u, 250)),
            [1, 2, 2]
        );
    }

    #[test]
    fn predictions_match_kernel_rto_md() {
        // docs/ARCHITECTURE.md R1: rto_min 5/50/200 ms → RTO 12/56/204 ms at HZ=250; 6/51/201 at 1000.
        assert_eq!(
            [5_000, 50_000, 200_000].map(|m| predicted_rto_us(m, 250)),
            [12_000, 56_000, 204_000]
        );
        assert_eq!(
            [5_000, 50_000, 200_000].map(|m| predicted_rto_us(m, 1000)),
            [6_000, 51_000, 201_000]
        );
    }

    /// The kernel's own build configuration, where it exposes it.
    fn kernel_config() -> Option<String> {
        use std::io::Read;
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
        if let Ok(c) = std::fs::read_to_string(format!("/boot/config-{}", release.trim())) {
            return Some(c);
        }
        let gz = std::fs::File::open("/proc/config.gz").ok()?;
        let mut c = String::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_string(&mut c)
            .ok()?;
        Some(c)
    }

    /// Checked against CONFIG_HZ in the kernel's configuration (/proc/config.gz here).
    #[test]
    fn detects_this_kernels_hz() {
        let rto_min = super::super::sysctl::read(None, "net.ipv4.tcp_rto_min_us")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(200_000);
        let hz = detect(rto_min).unwrap();
        assert!(CANDIDATES.contains(&hz));
        match kernel_config() {
            Some(cfg) => assert!(cfg.contains(&format!("\nCONFIG_HZ={hz}\n")), "detected {hz}, config says {:?}", cfg.lines().find(|l| l.starts_with("CONFIG_HZ="))),
            None => eprintln!("no kernel config to check HZ {hz} against (neither /boot/config-* nor /proc/config.gz)"),
        }
    }
}
