//! `rttlab ping`.

use super::output::{self, OutputArgs};
use super::progress::{on_interrupt, ProgressLine};
use super::values;
use anyhow::bail;
use clap::{Args, ValueEnum};
use rttlab::probe::ping::{self, PingControl, PingSettings, SocketKind};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SocketArg {
    Auto,
    Dgram,
    Raw,
}

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  rttlab ping 127.0.0.1                   5 echoes, 1 s apart
  rttlab ping ::1 -c 1000 -i 1ms --histogram
  rttlab ping 127.0.0.1 -i 0 -l 2         next echo as soon as the last reply is in, for 2 s
  rttlab ping 127.0.0.1 -i 100us --spin -c 10000 -o P50_LATENCY,P99_LATENCY")]
pub struct PingArgs {
    /// Host to ping (IPv4 or IPv6).
    pub host: String,
    /// Number of echo requests (default 5 unless -l is given).
    #[arg(short = 'c', long = "count")]
    pub count: Option<u64>,
    /// Run length (a bare number is seconds).
    #[arg(short = 'l', long = "length", value_parser = values::seconds)]
    pub length: Option<Duration>,
    /// Interval between requests; 0 sends the next as soon as the last reply is in.
    #[arg(short = 'i', long = "interval", default_value = "1s", value_parser = values::duration)]
    pub interval: Duration,
    /// Keep one request in flight: send the next once the last is answered and the
    /// interval since it has passed (netperf TCP_RR's -w pacing).
    #[arg(long)]
    pub one_in_flight: bool,
    /// Busy-wait between requests (for sub-millisecond intervals).
    #[arg(long, conflicts_with = "pace")]
    pub spin: bool,
    /// sleep, spin or hybrid (sleep, then spin the last 200 µs).
    #[arg(long, value_enum)]
    pub pace: Option<super::rr::PaceArg>,
    /// ICMP payload bytes.
    #[arg(short = 's', long = "size", default_value_t = 56)]
    pub size: usize,
    /// A request without a reply after this is lost.
    #[arg(short = 'W', long = "timeout", default_value = "2s", value_parser = values::duration)]
    pub timeout: Duration,
    /// Socket type: dgram needs ping_group_range, raw needs CAP_NET_RAW.
    #[arg(long, value_enum, default_value = "auto")]
    pub socket: SocketArg,
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    #[arg(short = '6')]
    pub ipv6: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

pub fn run(a: PingArgs) -> anyhow::Result<()> {
    let format = a.out.format()?;
    if a.count == Some(0) {
        bail!("-c must be at least 1");
    }
    if a.timeout.is_zero() {
        bail!("-W must be more than 0");
    }
    let target = super::rr::resolve(&a.host, 0, a.ipv4, a.ipv6)?.ip();
    let mut s = PingSettings::new(target);
    s.count = match (a.count, a.length) {
        (Some(c), _) => Some(c),
        (None, Some(_)) => None,
        (None, None) => Some(5),
    };
    s.duration = a.length;
    s.interval = a.interval;
    s.one_in_flight = a.one_in_flight;
    s.pace = super::rr::PaceArg::mode(a.spin, a.pace);
    s.size = a.size;
    s.timeout = a.timeout;
    s.socket = match a.socket {
        SocketArg::Auto => SocketKind::Auto,
        SocketArg::Dgram => SocketKind::Dgram,
        SocketArg::Raw => SocketKind::Raw,
    };
    s.percentiles = a.out.percentiles()?;
    s.hdr_log = a.out.hdr_log.clone();
    let ctl = Arc::new(PingControl::default());
    let c = Arc::clone(&ctl);
    on_interrupt(move || c.stop.store(true, Ordering::SeqCst));
    let expected = s.duration.or_else(|| {
        s.count
            .map(|n| s.interval * n.min(u64::from(u32::MAX)) as u32)
    });
    let c = Arc::clone(&ctl);
    let progress = ProgressLine::start(
        move || c.received.load(Ordering::Relaxed),
        "replies",
        expected,
    );
    let result = ping::run(&s, &ctl);
    drop(progress);
    let result = result?;
    output::print(&result, &format)?;
    if let Some(e) = &result.error {
        bail!("{e}");
    }
    Ok(())
}
