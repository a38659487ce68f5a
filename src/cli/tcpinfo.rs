//! `rttlab tcpinfo`.

use super::progress::on_interrupt;
use super::values;
use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use rttlab::kernel::sock_diag::{self, DiagFilter, SockDiag, ALL_STATES, CONNECTED};
use rttlab::report::tcpinfo as render;
use std::io::Write;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StateArg {
    /// Every state but LISTEN, TIME-WAIT and closed (what `ss -t` shows).
    Connected,
    Established,
    Listen,
    All,
}

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  rttlab tcpinfo                                   every TCP connection, TCP's view of each
  rttlab tcpinfo --dport 5001 -i 10ms -l 30 --csv   a time series every 10 ms for 30 s
  rttlab tcpinfo --netns rttlab-demo-b --json      inside a network namespace
  rttlab tcpinfo --dst 198.18.0.0/15 --state all")]
pub struct TcpinfoArgs {
    /// Network namespace to look into (a name under /run/netns, or a path).
    #[arg(long)]
    pub netns: Option<String>,
    /// Local port.
    #[arg(long)]
    pub sport: Option<u16>,
    /// Remote port.
    #[arg(long)]
    pub dport: Option<u16>,
    /// Local address or prefix (e.g. 127.0.0.1 or 198.18.0.0/15).
    #[arg(long, value_parser = cidr)]
    pub src: Option<(IpAddr, u8)>,
    /// Remote address or prefix.
    #[arg(long, value_parser = cidr)]
    pub dst: Option<(IpAddr, u8)>,
    /// Which socket states.
    #[arg(long, value_enum, default_value = "connected")]
    pub state: StateArg,
    /// IPv4 sockets only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// IPv6 sockets only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Sample every INTERVAL (down to 10ms) and print a time series.
    #[arg(short = 'i', long, value_parser = values::duration)]
    pub interval: Option<Duration>,
    /// Number of samples of a time series.
    #[arg(short = 'c', long)]
    pub count: Option<u64>,
    /// Length of a time series (without it and -c: until interrupted, like `ss -E`/`watch`).
    #[arg(short = 'l', long = "duration", alias = "length", value_name = "DURATION", value_parser = values::seconds)]
    pub length: Option<Duration>,
    /// JSON (one object per socket and sample, one per line).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// CSV with a header line.
    #[arg(long)]
    pub csv: bool,
}

/// `ADDR` or `ADDR/PREFIX`.
fn cidr(s: &str) -> Result<(IpAddr, u8), String> {
    let (a, p) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
    let ip: IpAddr = a
        .parse()
        .map_err(|_| format!("{s:?} is not an address or prefix (e.g. 198.18.0.0/15)"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = match p {
        None => max,
        Some(p) => p
            .parse::<u8>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("{s:?}: prefix must be 0..={max}"))?,
    };
    Ok((ip, prefix))
}

pub fn run(a: TcpinfoArgs, stage: &super::Stage) -> anyhow::Result<()> {
    let filter = DiagFilter {
        states: match a.state {
            StateArg::Connected => CONNECTED,
            StateArg::Established => 1 << 1,
            StateArg::Listen => 1 << 10,
            StateArg::All => ALL_STATES,
        },
        sport: a.sport,
        dport: a.dport,
        sports: None,
        src: a.src,
        dst: a.dst,
        ipv4: !a.ipv6,
        ipv6: !a.ipv4,
    };
    if a.interval.is_some_and(|i| i < Duration::from_millis(10)) {
        bail!("--interval must be at least 10ms");
    }
    if a.interval.is_none() && (a.count.is_some() || a.length.is_some()) {
        bail!("-c and -l need --interval");
    }
    let mut diag = SockDiag::open(a.netns.as_deref()).context("opening sock_diag")?;
    stage.measuring();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let Some(interval) = a.interval else {
        let mut all = Vec::new();
        diag.dump_tcp(&filter, |e| all.push(e))?;
        let text = if a.json {
            all.iter()
                .map(|e| render::json_line(None, e))
                .collect::<String>()
        } else if a.csv {
            render::CSV_HEADER.to_owned()
                + "\n"
                + &all
                    .iter()
                    .map(|e| render::csv_line(None, e))
                    .collect::<String>()
        } else {
            render::table(&all)
        };
        out.write_all(text.as_bytes())?;
        return Ok(out.flush()?);
    };
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    on_interrupt(move || s2.store(true, Ordering::SeqCst));
    // A time series is a stream: every line leaves as it is made (a pipe to another
    // tool sees each sample at once), and without -l or -c it runs until Ctrl-C.
    let length = a.length;
    let mut out = std::io::LineWriter::new(out.into_inner().map_err(|e| e.into_error())?);
    if !a.json {
        writeln!(out, "{}", render::CSV_HEADER)?;
    }
    let mut werr = None;
    sock_diag::sample_every(
        &mut diag,
        &filter,
        interval,
        a.count,
        length,
        &stop,
        |t, e| {
            let line = if a.json {
                render::json_line(Some(t), &e)
            } else {
                render::csv_line(Some(t), &e)
            };
            if werr.is_none() {
                if let Err(err) = out.write_all(line.as_bytes()) {
                    werr = Some(err);
                    stop.store(true, Ordering::SeqCst);
                }
            }
        },
    )?;
    if let Some(e) = werr {
        return Err(e.into());
    }
    Ok(out.flush()?)
}
