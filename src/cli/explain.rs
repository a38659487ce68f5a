//! `rttlab explain`: where each transaction of a live, unmodified TCP server spends
//! its time, from its kernel.

use super::progress::on_interrupt;
use super::values;
use anyhow::Context;
use clap::Args;
use rttlab::kernel::explain_bpf::ExplainBpf;
use rttlab::report::service as render;
use rttlab::service::{Transaction, Window};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
#[command(after_help = "\
Watches every TCP connection to a local port of this host (the server side: redis on
6379, nginx on 80, PostgreSQL on 5432) and splits each transaction — what the client
sends until the server answers, then the answer — into the parts its kernel saw, with
the kernel's own clock and no change to the application and no protocol parser:

  arrival   the request's first data segment to its last, at TCP
  wait      its last segment to the application's last read of it (busy, not running)
  think     that read to the response's first write (the application's own work)
  write     the response's first write to its last returning
  network   the last write to the ACK of the response's last byte (network, client)

The response time is arrival + wait + think + write: the first request byte in to the
last response byte handed to TCP. Every interval prints the transactions, the response
time's percentiles, each part's P50 and P99 and its share of the response around the
median and in the slowest 1 %, then what that says in words (which part the tail is
made of, retransmission stalls, pipelining). A transaction's turn is the turn of
direction of its data (Jones, A Brief Look at Round Trip Time): request/response
protocols (HTTP/1.1 keep-alive, redis, memcached, PostgreSQL's simple queries) split
as their clients use them; pipelined requests are counted as such.

Needs root (CAP_BPF, CAP_PERFMON) and a kernel with BTF (Linux 5.11 or later). Nothing
is left behind: the kernel removes the programs when the command ends, however it ends.

Examples:
  rttlab explain --port 6379                  redis, a table every second until Ctrl-C
  rttlab explain --port 80 -l 30 -i 10        nginx for 30 s, a table every 10 s
  rttlab explain --port 5432 --json | jq .    one JSON object per transaction")]
pub struct ExplainArgs {
    /// The local port the service listens on.
    #[arg(long)]
    pub port: u16,
    /// Print a table every INTERVAL.
    #[arg(short = 'i', long, default_value = "1", value_parser = values::seconds)]
    pub interval: Duration,
    /// Stop after DURATION (default: until interrupted).
    #[arg(short = 'l', long = "duration", value_name = "DURATION", value_parser = values::seconds)]
    pub length: Option<Duration>,
    /// One JSON object per transaction on stdout (µs), and the summary on stderr.
    #[arg(long)]
    pub json: bool,
    /// The most connections watched at once (a kernel table; past it, counted).
    #[arg(long, default_value_t = 65_536, value_name = "N")]
    pub max_connections: u32,
    /// The most JSON lines a second; past it, transactions are counted, not printed.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub json_rate: u64,
}

pub fn run(a: ExplainArgs, stage: &super::Stage) -> anyhow::Result<()> {
    if a.interval < Duration::from_millis(100) {
        anyhow::bail!("--interval must be at least 100ms");
    }
    let mut kernel = ExplainBpf::attach(a.port, a.max_connections)
        .with_context(|| format!("watching port {}", a.port))?;
    let offset = rttlab::kernel::passive_bpf::realtime_minus_monotonic();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    on_interrupt(move || s.store(true, Ordering::SeqCst));
    stage.measuring();
    eprintln!(
        "rttlab explain: watching TCP port {} (Ctrl-C to stop)",
        a.port
    );
    let started = Instant::now();
    let end = a.length.map(|l| started + l);
    let mut window = Window::default();
    let mut run = Window::default();
    let mut next = started + a.interval;
    let mut window_start = started;
    let (mut lines_this_second, mut second, mut not_printed) = (0u64, started, 0u64);
    let mut malformed = 0;
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    loop {
        let now = Instant::now();
        let until = end.map_or(next, |e| e.min(next));
        wait_readable(kernel.fd(), until.saturating_duration_since(now));
        let mut lines = Vec::new();
        malformed += kernel.drain(|r| {
            let t = Transaction::of(&r);
            window.add(&t);
            run.add(&t);
            if a.json {
                lines.push(t);
            }
        });
        if a.json {
            use std::io::Write as _;
            for t in lines {
                let now = Instant::now();
                if now.duration_since(second) >= Duration::from_secs(1) {
                    (second, lines_this_second) = (now, 0);
                }
                if lines_this_second < a.json_rate {
                    lines_this_second += 1;
                    writeln!(stdout, "{}", t.json(offset))?;
                } else {
                    not_printed += 1;
                }
            }
        }
        let now = Instant::now();
        let finished = stop.load(Ordering::SeqCst) || end.is_some_and(|e| now >= e);
        if now >= next || finished {
            use std::io::Write as _;
            let seconds = now.duration_since(window_start).as_secs_f64();
            if !a.json {
                writeln!(
                    stdout,
                    "{}",
                    render::table(a.port, &window.summary(), seconds)
                )?;
            }
            stdout.flush()?;
            window = Window::default();
            window_start = now;
            while next <= now {
                next += a.interval;
            }
        }
        if finished {
            break;
        }
    }
    drop(stdout);
    let counts = kernel.counts()?;
    let seconds = started.elapsed().as_secs_f64();
    let summary = run.summary();
    let text = render::table(a.port, &summary, seconds);
    let mut notes = Vec::new();
    if counts.lost > 0 {
        notes.push(format!(
            "{} transaction(s) lost: the ring buffer was full (the reader fell behind)",
            counts.lost
        ));
    }
    if counts.table_full > 0 {
        notes.push(format!(
            "{} segment(s) of connections past --max-connections {}: not timed",
            counts.table_full, a.max_connections
        ));
    }
    if malformed > 0 {
        notes.push(format!(
            "{malformed} record(s) from the kernel too short to read"
        ));
    }
    if not_printed > 0 {
        notes.push(format!(
            "{not_printed} transaction(s) counted but not printed: past --json-rate {} a second",
            a.json_rate
        ));
    }
    let mut all = format!("Over the whole run:\n{text}");
    for n in notes {
        all += &format!("note: {n}\n");
    }
    if a.json {
        eprint!("{all}");
    } else {
        out!("\n{all}");
    }
    Ok(())
}

/// Wait until `fd` is readable or `timeout` passes (a signal ends it early too).
fn wait_readable(fd: std::os::fd::RawFd, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one pollfd we own, for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) };
}
