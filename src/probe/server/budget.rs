//! What the server may spend on tests, and what one test costs: a slot among
//! `--max-tests` (and among its source's `--max-tests-per-source`, so that one
//! address cannot hold them all), memory, file descriptors and threads, each reserved before anything
//! is opened for the test and given back when it ends, however it ends. A test that
//! does not fit is refused with the limit it would break named, so the process never
//! runs out: without a descriptor budget, tests inside every other limit took a
//! server under `ulimit -n 1024` to 1 021 descriptors, and the next client's data
//! connection was refused by the kernel (`EMFILE` at accept) with no word why.
//!
//! It also checks what a test asks for against the limits and this host.

use super::data::DATA_THREAD_STACK;
use super::refusal::Refusal;
use super::{CongestionPolicy, ServerConfig};
use crate::probe::control::{Limits, TestKind, TestSpec};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What one stream is assumed to cost besides its payload buffers: its thread's stack
/// and an allowance for its socket's kernel buffers.
const STREAM_OVERHEAD_BYTES: u64 = DATA_THREAD_STACK as u64 + 256 * 1024;
/// Descriptors the process keeps for itself besides the server: stdio, files it reads
/// (/proc, /sys), the listeners' clones and those of connections on their way out.
const OWN_DESCRIPTORS: u64 = 64;

/// What a test takes while it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Estimated memory: per stream, its request and response buffers, its thread's
    /// stack and an allowance for its socket's buffers.
    pub memory_bytes: u64,
    /// File descriptors: the control connection, the data listener or UDP socket, and
    /// per TCP_RR stream its accepted socket and the handle the test keeps on it (to
    /// read `tcp_info` and shut it down), per TCP_CRR stream the one connection it has
    /// in flight.
    pub descriptors: u64,
    /// Data threads: one per stream.
    pub threads: u64,
}

impl Cost {
    /// What `spec` will take.
    pub fn of(spec: &TestSpec) -> Self {
        let streams = u64::from(spec.streams);
        let per_stream_fds = match spec.test {
            TestKind::TcpRr => 2,
            TestKind::TcpCrr => 1,
            TestKind::UdpRr => 0,
        };
        Self {
            memory_bytes: streams
                * (u64::from(spec.request_size)
                    + u64::from(spec.response_size)
                    + STREAM_OVERHEAD_BYTES),
            descriptors: 2 + streams * per_stream_fds,
            threads: streams,
        }
    }
}

/// What a test is estimated to cost the server in memory: per stream, its request and
/// response buffers, its thread's stack and an allowance for its socket's buffers.
pub fn test_memory_bytes(spec: &TestSpec) -> u64 {
    Cost::of(spec).memory_bytes
}

/// The server's budgets and what running tests hold of them.
pub(super) struct Budgets {
    max_tests: u64,
    max_tests_per_source: u64,
    max_memory_bytes: u64,
    max_descriptors: u64,
    max_threads: u64,
    /// The open-file limit the descriptor budget was derived from (`ulimit -n`).
    open_files: u64,
    tests: AtomicU64,
    memory_bytes: AtomicU64,
    descriptors: AtomicU64,
    threads: AtomicU64,
    /// Tests running per source (an IPv4 address or IPv6 /64); only sources with one.
    per_source: Mutex<HashMap<IpAddr, u64>>,
}

impl Budgets {
    /// The budgets of a server with `config`, `listeners` listening sockets, in a
    /// process allowed `open_files` descriptors: tests get what is left after the
    /// listeners (and the clones the accept threads hold), the handshake pool (each
    /// waiting connection and the handle the pool keeps to drop it), control threads on
    /// their way out, and the process's own needs.
    pub(super) fn new(config: &ServerConfig, listeners: usize, open_files: u64) -> Self {
        let reserved = 2 * listeners as u64
            + 2 * (config.max_handshakes as u64 + super::CONTROL_THREAD_SLACK as u64)
            + OWN_DESCRIPTORS
            + config.reserved_descriptors;
        let max_tests = u64::from(config.limits.max_concurrent_tests);
        Self {
            max_tests,
            max_tests_per_source: config
                .max_tests_per_source
                .map_or((max_tests / 2).max(1), u64::from),
            max_memory_bytes: config.max_memory_bytes,
            max_descriptors: open_files.saturating_sub(reserved),
            max_threads: config.max_threads,
            open_files,
            tests: AtomicU64::new(0),
            memory_bytes: AtomicU64::new(0),
            descriptors: AtomicU64::new(0),
            threads: AtomicU64::new(0),
            per_source: Mutex::new(HashMap::new()),
        }
    }

    /// Descriptors tests may hold together.
    pub(super) fn max_descriptors(&self) -> u64 {
        self.max_descriptors
    }

    /// Take a test slot for a client from `source` (its [`SourceKey`]) and reserve
    /// what the test costs, or say which limit refuses it (nothing stays reserved
    /// then).
    ///
    /// # Errors
    /// A one-line reason naming the limit, what the test needs and what is in use.
    ///
    /// [`SourceKey`]: super::admission::SourceKey
    pub(super) fn take(&self, cost: Cost, source: IpAddr) -> Result<TestSlot<'_>, Refusal> {
        let mut slot = TestSlot {
            budgets: self,
            source: None,
            tests: 0,
            cost: Cost::default(),
        };
        {
            let mut per_source = self.per_source.lock().unwrap_or_else(|p| p.into_inner());
            let held = per_source.entry(source).or_insert(0);
            if *held >= self.max_tests_per_source {
                return Err(Refusal::PerSource {
                    held: *held,
                    from: source,
                    limit: self.max_tests_per_source,
                });
            }
            *held += 1;
            slot.source = Some(source);
        }
        reserve(&self.tests, 1, self.max_tests).map_err(|used| Refusal::Busy {
            used,
            limit: self.max_tests,
        })?;
        slot.tests = 1;
        reserve(&self.memory_bytes, cost.memory_bytes, self.max_memory_bytes).map_err(|used| {
            Refusal::Memory {
                need_mib: cost.memory_bytes.div_ceil(1 << 20),
                used_mib: used.div_ceil(1 << 20),
                limit_mib: self.max_memory_bytes >> 20,
            }
        })?;
        slot.cost.memory_bytes = cost.memory_bytes;
        reserve(&self.descriptors, cost.descriptors, self.max_descriptors).map_err(|used| {
            Refusal::Descriptors {
                need: cost.descriptors,
                used,
                limit: self.max_descriptors,
                open_files: self.open_files,
            }
        })?;
        slot.cost.descriptors = cost.descriptors;
        reserve(&self.threads, cost.threads, self.max_threads).map_err(|used| {
            Refusal::Threads {
                need: cost.threads,
                used,
                limit: self.max_threads,
            }
        })?;
        slot.cost.threads = cost.threads;
        Ok(slot)
    }
}

/// Add `amount` to `used` if the total stays within `max`; else what is in use.
fn reserve(used: &AtomicU64, amount: u64, max: u64) -> Result<(), u64> {
    used.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
        u.checked_add(amount).filter(|&total| total <= max)
    })
    .map(|_| ())
}

/// A running test's share of the budgets, given back when it is dropped.
pub(super) struct TestSlot<'a> {
    budgets: &'a Budgets,
    /// The source whose count this slot holds one of.
    source: Option<IpAddr>,
    tests: u64,
    cost: Cost,
}

impl Drop for TestSlot<'_> {
    fn drop(&mut self) {
        let b = self.budgets;
        if let Some(source) = self.source {
            let mut per_source = b.per_source.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(held) = per_source.get_mut(&source) {
                *held -= 1;
                if *held == 0 {
                    per_source.remove(&source);
                }
            }
        }
        b.tests.fetch_sub(self.tests, Ordering::SeqCst);
        b.memory_bytes
            .fetch_sub(self.cost.memory_bytes, Ordering::SeqCst);
        b.descriptors
            .fetch_sub(self.cost.descriptors, Ordering::SeqCst);
        b.threads.fetch_sub(self.cost.threads, Ordering::SeqCst);
    }
}

/// Check a spec against the limits before anything is opened.
///
/// # Errors
/// A one-line reason naming the value and the limit.
pub fn validate(spec: &TestSpec, limits: &Limits) -> Result<(), Refusal> {
    for (what, v) in [
        ("request size", spec.request_size),
        ("response size", spec.response_size),
    ] {
        if v == 0 || v > limits.max_payload {
            return Err(Refusal::Payload {
                what,
                bytes: v,
                limit: limits.max_payload,
            });
        }
    }
    if spec.test == TestKind::UdpRr {
        let max_udp = 65_507;
        if spec.request_size > max_udp || spec.response_size > max_udp {
            return Err(Refusal::Datagram(max_udp));
        }
    }
    if spec.streams == 0 || spec.streams > limits.max_streams {
        return Err(Refusal::Streams {
            streams: spec.streams,
            limit: limits.max_streams,
        });
    }
    if spec.max_duration_ms == 0 || spec.max_duration_ms > limits.max_duration_ms {
        return Err(Refusal::Duration {
            ms: spec.max_duration_ms,
            limit_ms: limits.max_duration_ms,
        });
    }
    if spec.interval_ms > limits.max_interval_ms {
        return Err(Refusal::Interval {
            ms: spec.interval_ms,
            limit_ms: limits.max_interval_ms,
        });
    }
    if spec.data_port != 0 && !limits.data_ports.contains(spec.data_port) {
        return Err(Refusal::DataPortRange {
            port: spec.data_port,
            range: limits.data_ports,
        });
    }
    if spec.congestion.as_ref().is_some_and(|c| {
        c.is_empty() || c.len() > 15 || !c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    }) {
        return Err(Refusal::CongestionName);
    }
    if spec.udp_drop_one_in == Some(0) {
        return Err(Refusal::DropOneIn);
    }
    if spec.anatomy {
        // UDP_RR's streams share one server socket, whose TX stamps are numbered
        // across them.
        if spec.test == TestKind::UdpRr && spec.streams > 1 {
            return Err(Refusal::UdpAnatomyStreams);
        }
        if spec.response_size < crate::probe::anatomy::MIN_RESPONSE {
            return Err(Refusal::AnatomyResponse(
                crate::probe::anatomy::MIN_RESPONSE,
            ));
        }
    }
    if spec.server_delay_us > crate::probe::control::MAX_SERVER_DELAY_US {
        return Err(Refusal::ServerDelay {
            us: spec.server_delay_us,
            limit_us: crate::probe::control::MAX_SERVER_DELAY_US,
        });
    }
    Ok(())
}

fn sysctl_words(key: &str) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/sys/{}", key.replace('.', "/")))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Check what depends on this host: the congestion control is one the policy allows
/// and the kernel has registered (so no request can make it load a module), and the
/// CPU is one the server may run on.
pub(super) fn check_host(
    spec: &TestSpec,
    cpus: &[usize],
    policy: &CongestionPolicy,
) -> Result<(), Refusal> {
    if let Some(cc) = &spec.congestion {
        let registered = sysctl_words("net.ipv4.tcp_available_congestion_control");
        let allowed = match policy {
            CongestionPolicy::Allowed(extra) => {
                let mut a = sysctl_words("net.ipv4.tcp_allowed_congestion_control");
                a.extend(extra.iter().filter(|e| registered.contains(e)).cloned());
                a
            }
            CongestionPolicy::AnyRegistered => registered.clone(),
        };
        if !allowed.contains(cc) || !registered.contains(cc) {
            return Err(Refusal::Congestion {
                name: cc.clone(),
                allowed: allowed.join(" "),
            });
        }
    }
    if let Some(cpu) = spec.server_cpu {
        if !cpus.contains(&cpu) {
            return Err(Refusal::ServerCpu {
                cpu,
                cpus: cpus
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOME: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn budgets(open_files: u64) -> Budgets {
        let config = ServerConfig {
            max_handshakes: 4,
            max_threads: 100,
            ..ServerConfig::default()
        };
        Budgets::new(&config, 1, open_files)
    }

    #[test]
    fn a_test_costs_its_streams_descriptors_and_threads() {
        let mut spec = TestSpec::basic(TestKind::TcpRr, 1, 1, 1000);
        spec.streams = 32;
        assert_eq!(Cost::of(&spec).descriptors, 66);
        assert_eq!(Cost::of(&spec).threads, 32);
        spec.test = TestKind::TcpCrr;
        assert_eq!(Cost::of(&spec).descriptors, 34);
        spec.test = TestKind::UdpRr;
        assert_eq!(Cost::of(&spec).descriptors, 2);
    }

    #[test]
    fn the_descriptor_budget_refuses_by_name_and_is_given_back() {
        let b = budgets(1024);
        // 1024 − 2 (listener) − 2·(4 + 8) (pool, slack) − 64 (own).
        assert_eq!(b.max_descriptors(), 934);
        let mut spec = TestSpec::basic(TestKind::TcpRr, 1, 1, 1000);
        spec.streams = 32;
        let cost = Cost {
            threads: 1,
            ..Cost::of(&spec)
        };
        let held: Vec<_> = (0..14).map(|_| b.take(cost, HOME).unwrap()).collect();
        let e = b.take(cost, HOME).err().unwrap();
        assert_eq!(
            e.to_string(),
            "server descriptor budget: this test needs 66 descriptors, 924 of 934 are in use (ulimit -n 1024)"
        );
        // The refusal kept nothing: the slot and the memory it took are back.
        assert_eq!(b.tests.load(Ordering::SeqCst), 14);
        drop(held);
        assert_eq!(b.descriptors.load(Ordering::SeqCst), 0);
        assert_eq!(b.memory_bytes.load(Ordering::SeqCst), 0);
        assert!(b.take(cost, HOME).is_ok());
    }

    /// Witness: the counts, by arithmetic. Half of `--max-tests` (32) by default: one
    /// source's 17th test is refused by name while another source still gets one, and
    /// a slot given back is that source's again.
    #[test]
    fn one_source_holds_at_most_its_share_of_the_tests() {
        let b = budgets(1 << 20);
        let other = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
        let mut held: Vec<_> = (0..16)
            .map(|_| b.take(Cost::default(), HOME).unwrap())
            .collect();
        assert_eq!(
            b.take(Cost::default(), HOME).err().unwrap().to_string(),
            "server busy: 16 tests running from 127.0.0.1, the limit per source is 16 (--max-tests-per-source)"
        );
        assert_eq!(
            b.tests.load(Ordering::SeqCst),
            16,
            "the refusal kept no slot"
        );
        let _theirs = b.take(Cost::default(), other).unwrap();
        held.pop();
        assert!(b.take(Cost::default(), HOME).is_ok());
        drop(held);
        assert_eq!(
            b.per_source.lock().unwrap().len(),
            1,
            "only sources with a test"
        );
    }

    #[test]
    fn threads_are_budgeted_too() {
        let b = budgets(1 << 20);
        let cost = Cost {
            threads: 60,
            ..Cost::default()
        };
        let _one = b.take(cost, HOME).unwrap();
        assert_eq!(
            b.take(cost, HOME).err().unwrap().to_string(),
            "server thread budget: this test needs 60 threads, 60 of 100 are in use (--max-threads)"
        );
        assert_eq!(b.tests.load(Ordering::SeqCst), 1);
    }
}
