//! `rttlab compare`.

use super::values;
use anyhow::Context;
use clap::Args;
use rttlab::experiment::compare;
use rttlab::experiment::runner;
use rttlab::results::compare::CompareSettings;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

#[derive(Args, Debug)]
#[command(after_help = "\
Rows: icmp (ping), tcp_rr, udp_rr (request/response from user space), tcp_info client
and server (the kernel's srtt, sampled every 10 ms), passive ts and seq (the TCP_RR
connection's packets captured on the client), sampled metric (a 1-in-N cloud flow
metric, Jones, A Brief Look at Round Trip Time). Under the table, the gaps the data supports.

Examples:
  rttlab compare                         in a lab built for the run (10 ms RTT), removed after
  rttlab compare --lab-rtt 1ms --interval 1ms --duration 5s
  rttlab compare -H server.example       against `rttlab serve` (capture needs root)
  rttlab compare --out results/cmp --json
The results directory holds every layer's samples (<layer>.hist.csv: HDR buckets and
exact moments) and report.html (the table, the explanations, a CDF chart, settings
and host facts); `rttlab report DIR` renders it again from those files.")]
pub struct CompareArgs {
    /// `rttlab serve` on this host (default port 12866); without it, a lab.
    #[arg(short = 'H', long)]
    pub host: Option<String>,
    #[command(flatten)]
    pub lab: super::experiment::LabArgs<super::experiment::Rtt10ms>,
    /// Wait between a response and the next request (and between pings).
    #[arg(short = 'w', long, default_value = "10ms", value_parser = values::duration)]
    pub interval: Duration,
    /// How long every layer runs.
    #[arg(short = 'l', long, default_value = "10s", value_parser = values::seconds)]
    pub duration: Duration,
    /// TCP_RR's data port (UDP_RR uses the next one).
    #[arg(short = 'P', long, default_value_t = 12867)]
    pub data_port: u16,
    /// The sampled metric keeps one packet in N.
    #[arg(long, default_value = "1/1", value_name = "1/N", value_parser = values::one_in)]
    pub sampler: u32,
    /// Capture interface on the client (default: the route's; the lab's eth0).
    #[arg(short = 'i', long)]
    pub interface: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// No progress line (on a terminal it shows the set-up, a countdown while
    /// measuring, and the report being written).
    #[arg(short = 'q', long)]
    pub quiet: bool,
    #[command(flatten)]
    pub trials: super::experiment::TrialArgs,
    #[command(flatten)]
    pub secret: super::secret::SecretArgs,
    /// Results directory (run.json, compare.json, compare.txt, <layer>.hist.csv, cdf.svg,
    /// report.html); default results/compare-<unix time>.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

fn server_addr(h: &str) -> anyhow::Result<SocketAddr> {
    let with_port = if h.parse::<std::net::IpAddr>().is_ok() || !h.contains(':') {
        if h.contains(':') {
            format!("[{h}]:12866")
        } else {
            format!("{h}:12866")
        }
    } else {
        h.to_string()
    };
    with_port
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {h:?}"))?
        .next()
        .with_context(|| format!("{h:?} has no address"))
}

pub fn run(a: CompareArgs, stage: &super::Stage) -> anyhow::Result<()> {
    // Checked before a lab is built: the server's own limit (--max-duration's ceiling).
    anyhow::ensure!(
        !a.duration.is_zero() && a.duration <= Duration::from_secs(3600),
        "-l: every layer's run length must be more than 0 and at most 3600 s"
    );
    let s = CompareSettings {
        server: a.host.as_deref().map(server_addr).transpose()?,
        lab_rtt: a.lab.lab_rtt,
        interval: a.interval,
        duration: a.duration,
        data_port: a.data_port,
        sampler_one_in: a.sampler,
        interface: a.interface,
        lab_poll: a.lab.emulator.polls(1),
        repeats: a.trials.repeats(1),
        secret: a.secret.load()?,
    };
    let out = super::experiment::out_dir(a.out, rttlab::results::names::COMPARE);
    let interrupt = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let i2 = interrupt.clone();
    super::progress::on_interrupt(move || i2.store(true, std::sync::atomic::Ordering::Release));
    let facts = serde_json::json!({ "host": rttlab::kernel::host::HostFacts::collect() });
    let trials = s.repeats.trials;
    let e = compare::Compare {
        settings: s,
        lab_name: format!("cmp{}", std::process::id() % 100_000),
    };
    let mut line = super::progress::TrialLine::new(a.quiet);
    // The first trial's progress ends the set-up (the lab built, the server reached).
    let o = runner::run(&e, &out, &facts, &interrupt, &mut |p| {
        stage.measuring();
        line.show(p)
    })?;
    line.clear();
    if a.json {
        // An interrupted run before its first trial has nothing to print (the error says so).
        if let Some(first) = o.records.iter().min_by_key(|r| r.trial) {
            outln!(
                "{}",
                rttlab::results::schema::pretty(rttlab::results::schema::COMPARE, first)?
            );
        }
    } else if o.records.is_empty() {
        out!("{}", o.text);
    } else {
        // compare.txt is wrapped to 80 columns; the terminal may have fewer or more.
        let text = rttlab::report::compare::human(&out, &o.records, super::term_width())?;
        out!("{text}");
        outln!("Report: {}", out.join("report.html").display());
    }
    if (o.records.len() as u32) < trials {
        anyhow::bail!(
            "interrupted after {} of {trials} trials; rerun with --out {} to finish",
            o.records.len(),
            out.display()
        );
    }
    match o.records.iter().find(|r| !r.errors.is_empty()) {
        None => Ok(()),
        Some(r) => {
            let empty: Vec<&str> = r
                .layers
                .iter()
                .filter(|l| l.why_empty.is_some())
                .map(|l| l.name.as_str())
                .collect();
            anyhow::bail!(
                "{} of {} layers measured nothing ({}); why is under \"Why they differ\"",
                empty.len(),
                r.layers.len(),
                empty.join(", ")
            )
        }
    }
}
