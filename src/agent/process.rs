//! The `process_*` metrics every Prometheus exporter has (client_golang's process
//! collector names and meanings), read from `/proc/self` at each scrape: restart,
//! CPU, memory and descriptor alerts written for other exporters work on the agent
//! unchanged.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// What `/proc/self/stat` says of this process (proc(5)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessStat {
    /// User and system CPU time, in clock ticks (fields 14 and 15).
    pub cpu_ticks: u64,
    /// Threads (field 20).
    pub threads: u64,
    /// Start time after boot, in clock ticks (field 22).
    pub start_ticks: u64,
    /// Virtual memory size, in bytes (field 23).
    pub vsize: u64,
    /// Resident set size, in pages (field 24).
    pub rss_pages: u64,
}

impl ProcessStat {
    /// Parse a `/proc/PID/stat` line. The command name (field 2) is in parentheses
    /// and may itself hold spaces and parentheses: the fields are counted from the
    /// last `)`.
    pub fn parse(line: &str) -> Option<Self> {
        let rest = &line[line.rfind(')')? + 1..];
        // Field 3 (state) is the first after the name.
        let f: Vec<&str> = rest.split_ascii_whitespace().collect();
        let at = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
        Some(Self {
            cpu_ticks: at(14)? + at(15)?,
            threads: at(20)?,
            start_ticks: at(22)?,
            vsize: at(23)?,
            rss_pages: at(24)?,
        })
    }
}

/// The collector: registered once, it reads `/proc/self` when scraped.
#[derive(Debug)]
pub struct ProcessCollector {
    /// `sysconf(_SC_CLK_TCK)`.
    ticks_per_second: f64,
    /// `sysconf(_SC_PAGESIZE)`.
    page_size: u64,
    /// The boot time, seconds since the epoch (`/proc/stat`'s `btime`).
    boot_time: Option<u64>,
}

impl Default for ProcessCollector {
    fn default() -> Self {
        // SAFETY: sysconf reads a constant of the running system.
        let (tck, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let boot_time = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse().ok())
        });
        Self {
            ticks_per_second: if tck > 0 { tck as f64 } else { 100.0 },
            page_size: u64::try_from(page).unwrap_or(4096),
            boot_time,
        }
    }
}

/// Descriptors open in this process: the entries of `/proc/self/fd`, less the one
/// the listing itself holds.
fn open_fds() -> Option<u64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(n.saturating_sub(1))
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        fn gauge(
            e: &mut DescriptorEncoder,
            name: &str,
            help: &str,
            v: f64,
        ) -> Result<(), std::fmt::Error> {
            let g = ConstGauge::new(v);
            g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
        }
        let e = &mut encoder;
        if let Some(stat) = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| ProcessStat::parse(&s))
        {
            let cpu = ConstCounter::new(stat.cpu_ticks as f64 / self.ticks_per_second);
            cpu.encode(e.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                cpu.metric_type(),
            )?)?;
            gauge(
                e,
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                (stat.rss_pages * self.page_size) as f64,
            )?;
            gauge(
                e,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                stat.vsize as f64,
            )?;
            gauge(
                e,
                "process_threads",
                "Threads of the process",
                stat.threads as f64,
            )?;
            if let Some(boot) = self.boot_time {
                gauge(
                    e,
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds",
                    boot as f64 + stat.start_ticks as f64 / self.ticks_per_second,
                )?;
            }
        }
        if let Some(n) = open_fds() {
            gauge(
                e,
                "process_open_fds",
                "Number of open file descriptors",
                n as f64,
            )?;
        }
        if let Ok(l) = crate::kernel::rlimit::open_files() {
            gauge(
                e,
                "process_max_fds",
                "Maximum number of open file descriptors",
                l.soft as f64,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: proc(5)'s field numbering, on a line whose command name holds a space
    /// and a parenthesis (the reason fields are counted from the last `)`).
    #[test]
    fn stat_fields_are_counted_after_the_name() {
        let line = "4242 (rtt lab) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    7 5 0 0 20 0 9 0 1234 56789 321 18446744073709551615";
        let s = ProcessStat::parse(line).unwrap();
        assert_eq!(
            s,
            ProcessStat {
                cpu_ticks: 12,
                threads: 9,
                start_ticks: 1234,
                vsize: 56789,
                rss_pages: 321,
            }
        );
        assert_eq!(ProcessStat::parse("1 (x) S 1 2"), None);
    }

    /// Witness: the kernel's own view of this test process, its thread count from
    /// `/proc/self/status` (another file, another format). The descriptor count is
    /// checked against `/proc/PID/fd` of a running agent in `tests/agent.rs`.
    #[test]
    fn this_process_reads_as_the_kernel_reports_it() {
        let stat =
            ProcessStat::parse(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let threads: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Test threads come and go; the two reads are a moment apart.
        assert!(stat.threads.abs_diff(threads) <= 4, "{stat:?} vs {threads}");
        assert!(stat.rss_pages > 0 && stat.vsize > stat.rss_pages);
    }
}
