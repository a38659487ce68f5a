//! `rttlab explain`: where each transaction of a live, unmodified TCP server spends
//! its time, from its kernel.

use super::progress::on_interrupt;
use super::values;
use anyhow::Context;
use clap::Args;
use rttlab::kernel::explain_bpf::ExplainBpf;
use rttlab::kernel::listeners;
use rttlab::report::service as render;
use rttlab::results::explain::{End, WindowRecord, Writer};
use rttlab::service::{Side, Transaction, Window};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
#[command(after_help = "\
Watches every TCP connection to local ports of this host (the server side:
redis on 6379, nginx on 80, PostgreSQL on 5432), given as ports, or as the
processes or the cgroup (a systemd unit's) whose listening ports they are
(found at the start, as `ss -ltnp` finds them: a port opened later is not
watched; a process that exits is said to, and its ports stay watched), and splits each transaction (what the client sends until the server
answers, then the answer) into the parts its kernel saw, with the kernel's own
clock, no change to the application, no parser:

  arrival  the request's first data segment to its last, at TCP
  wait     its last segment to the application's last read of it (the
           application busy with others, or not running)
  think    that read to the response's first write (the application's work)
  write    the response's first write to its last returning
  network  the last write to the ACK of the response's last byte (the network
           and the client; when it ACKs with its next request, its own pause;
           0 when the ACK came before the write returned, as on loopback)

The response time is arrival + wait + think + write: the first request byte in
to the last response byte handed to TCP.

With --to, the client side: every connection this host opens to those remote
ports (an application's calls to its database or cache), from the client's
kernel:

  write    the request's first write to its last returning, or to its last
           byte out when TCP sent it inside the write
  send     that return to the request's last byte handed to the driver (after
           the queueing layer; 0 when it went inside the write)
  server   the request out to the response's first segment in: the network
           both ways and the server (the connections' minimum RTT says how
           much is the network)
  arrival  the response's first segment in to its last
  wait     its last segment to the application's last read of it

The client's response time is their sum: its first write to its last read
(to the response's last segment when the application wrote again before
reading any of it, as a pipelining client does: then wait is not known).
Both sides at once, on one host, time each transaction at both ends: the
client's server part holds the server's arrival, wait and think.

Every interval prints the transactions, the response time's percentiles, each
part's P50 and P99 and its share of the response around the median and in the
slowest 1 %, then what they say in words (which part the tail is made of,
retransmission stalls, the client's pause in the network part, pipelining), and
what was not timed. The turn of a transaction is the turn of direction of its
data (Jones, A Brief Look at Round Trip Time): HTTP/1.1 keep-alive, redis,
memcached and PostgreSQL's simple queries split as their clients use them.

A transaction is counted at the client's next request or when the connection
ends (a server may write more after all it wrote was ACKed): the last one of an
idle keep-alive connection waits for either. Requests a client pipelines in one
segment, or sends before it reads the answers, are one transaction (the kernel
cannot count requests without a parser); one answered while more of them waited
unread is flagged pipelined on the server. Data a server sends before the client's first
write (a greeting) answers no request and is not timed.

Needs root (CAP_BPF, CAP_PERFMON) and Linux 6.3 or later with BTF: seven of the
kernel's own tracepoints (tcp_probe, sock_recv_length, tcp_sendmsg_locked,
sock_send_length, inet_sock_set_state, tcp_destroy_sock, tcp_retransmit_skb),
and with --to two more (net_dev_start_xmit and sk_data_ready, run for every
packet the host sends and every socket woken to read); no kprobes. Nothing is left behind: the kernel removes the programs
when the command ends, however it ends.

Examples:
  rttlab explain --port 6379                redis, a table a second until Ctrl-C
  rttlab explain --port 80 -l 30 -i 10      nginx for 30 s, a table every 10 s
  rttlab explain --port 5432 --json | jq .  one JSON object per transaction
  rttlab explain --pid $(pidof -s memcached)
  rttlab explain --cgroup system.slice/nginx.service   every port of the unit
  rttlab explain --to 5432                  this host's calls to PostgreSQL
  rttlab explain --port 6379 -l 600 --out redis-run
                                            a results directory, report.html")]
#[command(group(clap::ArgGroup::new("select").args(["port", "pid", "cgroup", "to"]).required(true).multiple(true)))]
pub struct ExplainArgs {
    /// The local port(s) the service listens on (a list: 80,443).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Vec<u16>,
    /// Every TCP port these processes listen on now (a list of PIDs).
    #[arg(long, value_delimiter = ',', value_name = "PID")]
    pub pid: Vec<u32>,
    /// Every TCP port the processes of this cgroup and the cgroups below it listen on
    /// now: its directory, or its path under the cgroup2 mount
    /// (system.slice/nginx.service).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<std::path::PathBuf>,
    /// The client side: every connection from this host to these remote ports (a
    /// list: 6379,5432), from its first write on.
    #[arg(long, value_delimiter = ',', value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub to: Vec<u16>,
    /// Print a table every INTERVAL.
    #[arg(short = 'i', long, default_value = "1", value_parser = values::seconds)]
    pub interval: Duration,
    /// Stop after DURATION (default: until interrupted).
    #[arg(short = 'l', long = "duration", value_name = "DURATION", value_parser = values::seconds)]
    pub length: Option<Duration>,
    /// One JSON object per transaction on stdout (µs), and the summary on stderr.
    #[arg(long)]
    pub json: bool,
    /// The most connections watched at once (a kernel table, 1 to 4194304; past it,
    /// counted).
    #[arg(long, default_value_t = 65_536, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=4_194_304))]
    pub max_connections: u32,
    /// The most JSON lines a second (at least 1); past it, transactions are counted,
    /// not printed.
    #[arg(long, default_value_t = 10_000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub json_rate: u64,
    /// A results directory, made new: run.json, windows.jsonl (every table, the
    /// report's data), transactions.jsonl (the JSON lines, within --json-rate),
    /// end.json, and at the end report.txt, report.html and a chart per port;
    /// `rttlab report DIR` draws it again.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

pub fn run(a: ExplainArgs, stage: &super::Stage) -> anyhow::Result<()> {
    if a.interval < Duration::from_millis(100) {
        anyhow::bail!("--interval must be at least 100ms");
    }
    let (ports, mut whose) = selected(&a)?;
    let remote: BTreeSet<u16> = a.to.iter().copied().collect();
    let remote: Vec<u16> = remote.into_iter().collect();
    if !remote.is_empty() {
        if !whose.is_empty() {
            whose += "; ";
        }
        whose += &format!("clients here of port(s) {}", listed(&remote));
    }
    let mut kernel = ExplainBpf::attach(&ports, &remote, a.max_connections)
        .with_context(|| format!("watching TCP {whose}"))?;
    let mut kept = match &a.out {
        Some(dir) => Some(
            Writer::create(dir, &settings(&a, &ports, &remote, &whose), &host_facts())
                .with_context(|| format!("--out {}", dir.display()))?,
        ),
        None => None,
    };
    let offset = rttlab::kernel::passive_bpf::realtime_minus_monotonic();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    on_interrupt(move || s.store(true, Ordering::SeqCst));
    stage.measuring();
    let until = a
        .length
        .map_or("Ctrl-C to stop".into(), |l| format!("for {:?}", l));
    eprintln!("rttlab explain: watching TCP {whose} ({until})");
    for &port in a.port.iter().filter(|&&p| !listening(p)) {
        eprintln!(
            "rttlab explain: nothing listens on TCP port {port} in this network namespace yet: one started later, or in another namespace (a container), is watched from its first connection (is the port right?)"
        );
    }
    let started = Instant::now();
    let end = a.length.map(|l| started + l);
    // A window for each side of each port, in the order the tables print.
    let fresh = || -> BTreeMap<(Side, u16), Window> {
        let server = ports
            .iter()
            .map(|&p| ((Side::Server, p), Window::new(Side::Server)));
        let client = remote
            .iter()
            .map(|&p| ((Side::Client, p), Window::new(Side::Client)));
        server.chain(client).collect()
    };
    let mut window = fresh();
    let mut run = fresh();
    let mut next = started + a.interval;
    let mut window_start = started;
    let mut printed = Printed::new(a.json_rate, started);
    let mut counted = Untimed::default();
    // The processes given by --pid, until each exits (said once: their ports stay
    // watched).
    let mut alive: BTreeSet<u32> = a.pid.iter().copied().collect();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    loop {
        let now = Instant::now();
        let until = end.map_or(next, |e| e.min(next));
        // A tenth of a second at most, so that Ctrl-C ends the run at once.
        let slice = until
            .saturating_duration_since(now)
            .min(Duration::from_millis(100));
        kernel.wait(slice);
        let mut lines = Vec::new();
        counted.malformed += kernel.drain(|r| {
            let t = Transaction::of(&r);
            let key = (t.side, t.port);
            let new = || Window::new(t.side);
            window.entry(key).or_insert_with(new).add(&t);
            run.entry(key).or_insert_with(new).add(&t);
            if a.json || kept.is_some() {
                lines.push(t);
            }
        });
        for t in lines {
            use std::io::Write as _;
            if printed.may(Instant::now()) {
                let line = render::json_line(&t, offset);
                if a.json {
                    writeln!(stdout, "{line}")?;
                }
                if let Some(k) = &mut kept {
                    if let Err(e) = k.transaction(&line) {
                        kept = given_up(&a, &e);
                    }
                }
            }
        }
        let now = Instant::now();
        let finished = stop.load(Ordering::SeqCst) || end.is_some_and(|e| now >= e);
        if now >= next || finished {
            use std::io::Write as _;
            alive.retain(|&pid| {
                let here = std::path::Path::new(&format!("/proc/{pid}")).exists();
                if !here {
                    eprintln!("rttlab explain: PID {pid} exited: its port(s) stay watched (a process listening there again is timed from its first connection)");
                }
                here
            });
            let seconds = now.duration_since(window_start).as_secs_f64();
            if let Some(k) = &mut kept {
                let start_s = window_start.duration_since(started).as_secs_f64();
                let written = window.iter().try_for_each(|((_, port), w)| {
                    k.window(&WindowRecord {
                        start_s,
                        seconds,
                        port: *port,
                        whole_run: false,
                        summary: w.summary(),
                    })
                });
                if let Err(e) = written {
                    kept = given_up(&a, &e);
                }
            }
            let (total, since) = counted.update(kernel.counts()?, printed.skipped);
            let notes = since.notes(a.max_connections, a.json_rate);
            if a.json {
                for n in &notes {
                    eprintln!("rttlab explain: {n}");
                }
            } else {
                for ((_, port), w) in &window {
                    write!(stdout, "{}", render::table(*port, &w.summary(), seconds))?;
                }
                for n in &notes {
                    writeln!(stdout, "{n}")?;
                }
                writeln!(stdout)?;
            }
            stdout.flush()?;
            counted = total;
            window = fresh();
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
    let seconds = started.elapsed().as_secs_f64();
    let mut all = "Over the whole run:\n".to_string();
    for ((_, port), w) in &run {
        let summary = w.summary();
        all += &render::table(*port, &summary, seconds);
        if let Some(k) = &mut kept {
            let whole = WindowRecord {
                start_s: 0.0,
                seconds,
                port: *port,
                whole_run: true,
                summary,
            };
            if let Err(e) = k.window(&whole) {
                kept = given_up(&a, &e);
            }
        }
    }
    let mut notes = counted.notes(a.max_connections, a.json_rate);
    let skipped = kernel.skipped();
    if skipped > 0 {
        notes.push(format!("not timed: {skipped} kernel event(s) skipped, explain's program already running on that CPU (its moments then come from the next event; bytes are counted by sequence number)"));
    }
    let open = kernel.answered_and_open();
    if open > 0 {
        notes.push(format!("not timed: {open} transaction(s) answered, their connections still open at the end (neither sent again nor closed: an idle keep-alive connection's last)"));
    }
    if let Some(k) = &kept {
        notes.extend(k.notes());
    }
    for n in &notes {
        all += &format!("{n}\n");
    }
    if let Some(k) = kept {
        let written = k.end(&End { seconds, notes }).and_then(|dir| {
            let mut bad = rttlab::results::BadRecords::default();
            rttlab::report::service_dir::write(&dir, &mut bad).map(|_| dir)
        });
        match written {
            Ok(dir) => all += &format!("report: {}\n", dir.join("report.html").display()),
            Err(e) => {
                given_up(&a, &e);
            }
        }
    }
    if a.json {
        eprint!("{all}");
    } else {
        out!("{all}");
    }
    Ok(())
}

/// `--out`'s directory could not be written (the disk full, a file removed): said
/// once, and the run goes on without it; its directory is left as it is, with no
/// report.
fn given_up(a: &ExplainArgs, e: &rttlab::results::ResultsError) -> Option<Writer> {
    let dir = a.out.as_deref().unwrap_or(std::path::Path::new(""));
    eprintln!(
        "rttlab explain: --out {}: {}: nothing more is written there and it gets no report.html; the run's tables are printed all the same",
        dir.display(),
        rttlab::error_chain(e)
    );
    None
}

/// run.json's settings: what was watched and how.
fn settings(a: &ExplainArgs, ports: &[u16], remote: &[u16], whose: &str) -> serde_json::Value {
    serde_json::json!({
        "watched": whose,
        "ports": ports,
        "to": remote,
        "interval_s": a.interval.as_secs_f64(),
        "duration_s": a.length.map(|l| l.as_secs_f64()),
        "max_connections": a.max_connections,
        "json_rate": a.json_rate,
    })
}

fn host_facts() -> serde_json::Value {
    serde_json::json!({ "host": rttlab::kernel::host::HostFacts::collect() })
}

/// The ports to watch, and whose they are in words: the ports given, and every port
/// the processes given (each must exist) or the cgroup's listen on now.
fn selected(a: &ExplainArgs) -> anyhow::Result<(Vec<u16>, String)> {
    let mut ports: BTreeSet<u16> = a.port.iter().copied().collect();
    let mut whose = Vec::new();
    if !a.port.is_empty() {
        whose.push(format!("given: {}", listed(&ports)));
    }
    if !a.pid.is_empty() {
        let pids: BTreeSet<u32> = a.pid.iter().copied().collect();
        if let Some(p) = pids
            .iter()
            .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        {
            anyhow::bail!("--pid: no process {p} (is the PID right?)");
        }
        let pids: Vec<u32> = pids.into_iter().collect();
        let found = listeners::ports_of(&pids).context("--pid")?;
        let of = match pids.as_slice() {
            [one] => format!("PID {one}"),
            many => format!("PIDs {}", listed(many)),
        };
        if found.is_empty() {
            anyhow::bail!("--pid: {of}: no TCP port listened on, nothing of it to watch");
        }
        let these: BTreeSet<u16> = found.keys().copied().collect();
        whose.push(format!("{of}: {}", listed(&these)));
        ports.extend(these);
    }
    if let Some(cg) = &a.cgroup {
        let (dir, pids) = listeners::cgroup_pids(cg).context("--cgroup")?;
        if pids.is_empty() {
            anyhow::bail!("--cgroup: {dir:?} holds no process (is the service running?)");
        }
        let found = listeners::ports_of(&pids).context("--cgroup")?;
        if found.is_empty() {
            anyhow::bail!(
                "--cgroup: the {} process(es) of {dir:?} listen on no TCP port: nothing of it to watch",
                pids.len()
            );
        }
        let holders: BTreeSet<u32> = found.values().flatten().copied().collect();
        let these: BTreeSet<u16> = found.keys().copied().collect();
        whose.push(format!(
            "cgroup {dir:?}, process(es) {}: {}",
            listed(&holders),
            listed(&these)
        ));
        ports.extend(these);
    }
    let whose = if whose.is_empty() {
        String::new()
    } else {
        format!("port(s) {}", whose.join("; "))
    };
    Ok((ports.into_iter().collect(), whose))
}

/// `items` comma-separated, the first 10 and how many more.
fn listed<T: ToString>(items: impl IntoIterator<Item = T>) -> String {
    let all: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    let mut s = all.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
    if all.len() > 10 {
        s += &format!(" and {} more", all.len() - 10);
    }
    s
}

/// Whether anything listens on TCP `port` of this host (sock_diag); when that cannot
/// be asked, as if something did.
fn listening(port: u16) -> bool {
    use rttlab::kernel::sock_diag::{DiagFilter, SockDiag};
    let filter = DiagFilter {
        states: 1 << 10,
        sport: Some(port),
        ..DiagFilter::default()
    };
    let Ok(mut diag) = SockDiag::open(None) else {
        return true;
    };
    let mut any = false;
    diag.dump_tcp(&filter, |_| any = true)
        .map_or(true, |()| any)
}

/// JSON lines printed within `--json-rate` a second, the rest counted.
struct Printed {
    rate: u64,
    second: Instant,
    this_second: u64,
    skipped: u64,
}

impl Printed {
    fn new(rate: u64, now: Instant) -> Self {
        Self {
            rate,
            second: now,
            this_second: 0,
            skipped: 0,
        }
    }

    /// Whether one more line may be printed at `now`; counted when not.
    fn may(&mut self, now: Instant) -> bool {
        if now.duration_since(self.second) >= Duration::from_secs(1) {
            (self.second, self.this_second) = (now, 0);
        }
        if self.this_second < self.rate {
            self.this_second += 1;
            true
        } else {
            self.skipped += 1;
            false
        }
    }
}

/// What was seen and not timed or not printed: the kernel's counts, records too short
/// to read, JSON lines past the rate.
#[derive(Clone, Copy, Debug, Default)]
struct Untimed {
    kernel: rttlab::kernel::explain_bpf::Counts,
    malformed: u64,
    not_printed: u64,
}

impl Untimed {
    /// The totals now (`counts` from the kernel, `not_printed` so far), and what they
    /// add to `self`.
    fn update(
        &self,
        counts: rttlab::kernel::explain_bpf::Counts,
        not_printed: u64,
    ) -> (Self, Self) {
        let total = Self {
            kernel: counts,
            malformed: self.malformed,
            not_printed,
        };
        let k = |f: fn(&rttlab::kernel::explain_bpf::Counts) -> u64| f(&counts) - f(&self.kernel);
        let since = Self {
            kernel: rttlab::kernel::explain_bpf::Counts {
                sent: k(|c| c.sent),
                lost: k(|c| c.lost),
                table_full: k(|c| c.table_full),
                unanswered: k(|c| c.unanswered),
            },
            malformed: self.malformed,
            not_printed: not_printed - self.not_printed,
        };
        (total, since)
    }

    /// One line for each kind of transaction not timed or not printed, each saying
    /// which.
    fn notes(&self, max_connections: u32, json_rate: u64) -> Vec<String> {
        let k = &self.kernel;
        let mut notes = Vec::new();
        if k.lost > 0 {
            notes.push(format!("not timed: {} transaction(s) lost: the kernel's ring buffer was full (the reader fell behind)", k.lost));
        }
        if k.table_full > 0 {
            notes.push(format!(
                "not timed: {} segment(s) or write(s) of connections past --max-connections {max_connections}",
                k.table_full
            ));
        }
        if k.unanswered > 0 {
            notes.push(format!(
                "not timed: {} request(s) whose connection ended before an answer",
                k.unanswered
            ));
        }
        if self.malformed > 0 {
            notes.push(format!(
                "not timed: {} record(s) from the kernel too short to read",
                self.malformed
            ));
        }
        if self.not_printed > 0 {
            notes.push(format!(
                "not written: {} transaction(s) timed and counted, past --json-rate {json_rate} a second (left out of --json's lines and transactions.jsonl)",
                self.not_printed
            ));
        }
        notes
    }
}
