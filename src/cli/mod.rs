//! The command line: one file per subcommand. Arguments are validated into the
//! library's settings before anything opens a socket.

/// `println!` that returns the write's error instead of panicking: `rttlab … | head`
/// closes the pipe, and main treats a broken pipe as the end of the output (exit 0).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

/// `print!` that returns the write's error (see `outln!`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)?
    }};
}

pub mod agent;
pub mod compare;
pub mod experiment;
pub mod explain;
pub mod lab;
pub mod netperf;
pub mod output;
pub mod passive;
pub mod ping;
pub mod ping_tcp;
pub mod progress;
pub mod report;
pub mod rr;
pub mod rto;
pub mod secret;
pub mod serve;
pub mod tcpinfo;
pub mod tune;
pub mod values;

use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  rttlab compare
      every layer's RTT side by side, in a lab built for the run
  rttlab rr
      TCP_RR against an in-process server on loopback, 10 s
  rttlab rr -t UDP_RR -r 64,64 -l 5 -o P50_LATENCY,P99_LATENCY,THROUGHPUT
  rttlab serve
      serve tests on port 12866 (IPv4 and IPv6)
  rttlab rr -H server.example -w 10ms --pace hybrid -T 0,0
  rttlab agent --peers-file peers.json
      serve, probe every peer, export /metrics for Prometheus
  rttlab ping ::1 -c 100 -i 10ms --histogram
  rttlab tcpinfo --dport 12866 -i 10ms -l 5 --csv
      the kernel's RTT of live sockets, every 10 ms
  rttlab passive -r trace.pcap --method both --summary
      RTT from packet headers
  rttlab lab up --name demo --delay 50ms --loss 1% --rate 10mbit --queue 100kB
  rttlab lab exec --name demo a -- ping -c 3 b
  rttlab completions bash > /etc/bash_completion.d/rttlab

Exit status, every subcommand:
  0  it measured (or did what it was asked)
  1  it measured, but the target did not answer or the check failed (as ping;
     compare: a layer that measured nothing, its reason in the output)
  2  a usage or set-up error, nothing measured: a bad flag or value, a missing
     privilege, a host that does not resolve or a server that does not answer,
     a file that cannot be read or written";

/// The exit-status contract as `rttlab --help` closes with it: every man page's EXIT
/// STATUS section.
fn exit_status() -> &'static str {
    EXAMPLES
        .split_once("Exit status, every subcommand:\n")
        .map_or("", |(_, contract)| contract)
}

/// The pages a command's page points to: the tools whose habits it takes, and its own
/// neighbours (`rttlab-rr` for `serve`); every page but the first also points to
/// rttlab(1) and to its parent's page.
fn see_also(name: &str) -> &'static [&'static str] {
    match name {
        "rttlab" => &[
            "rttlab-compare(1)",
            "rttlab-rr(1)",
            "rttlab-ping(1)",
            "rttlab-passive(1)",
            "rttlab-agent(1)",
            "ping(8)",
            "netperf(1)",
            "tcpdump(8)",
            "ss(8)",
        ],
        "rttlab-compare" => &[
            "rttlab-rr(1)",
            "rttlab-ping(1)",
            "rttlab-passive(1)",
            "rttlab-tcpinfo(1)",
            "rttlab-report(1)",
        ],
        "rttlab-rr" => &["rttlab-serve(1)", "netperf(1)", "sockperf(1)", "irtt(1)"],
        "rttlab-serve" => &["rttlab-rr(1)", "netserver(1)"],
        "rttlab-ping" => &["ping(8)", "fping(8)"],
        "rttlab-passive" => &["tcpdump(8)", "tshark(1)", "tcptrace(1)", "pcap-filter(7)"],
        "rttlab-tcpinfo" => &["ss(8)", "tcp(7)"],
        "rttlab-agent" => &["rttlab-serve(1)", "prometheus(1)"],
        "rttlab-lab" => &["ip-netns(8)", "tc-netem(8)"],
        "rttlab-report" | "rttlab-experiment" => &["rttlab-compare(1)", "rttlab-report(1)"],
        n if n.starts_with("rttlab-tune") || n.starts_with("rttlab-rto") => {
            &["tcp(7)", "ip-route(8)", "rttlab-rto-model(1)"]
        }
        _ => &[],
    }
}

/// The EXIT STATUS and SEE ALSO sections of page `name` (its parent `parent`).
fn closing_sections(name: &str, parent: Option<&str>) -> String {
    let mut s = String::from(".SH \"EXIT STATUS\"\n.nf\n");
    for line in exit_status().lines() {
        s.push_str(&line.replace('-', "\\-"));
        s.push('\n');
    }
    s.push_str(".fi\n.SH \"SEE ALSO\"\n");
    let mut pages: Vec<String> = Vec::new();
    if name != "rttlab" {
        pages.push("rttlab(1)".into());
    }
    if let Some(p) = parent.filter(|p| *p != "rttlab") {
        pages.push(format!("{p}(1)"));
    }
    for p in see_also(name) {
        if !pages.iter().any(|x| x == p) && *p != format!("{name}(1)") {
            pages.push((*p).into());
        }
    }
    let n = pages.len();
    for (i, p) in pages.iter().enumerate() {
        let (page, section) = p.split_once('(').unwrap_or((p, "1)"));
        let comma = if i + 1 < n { "," } else { "" };
        s.push_str(&format!(
            ".BR {} ({}{comma}\n",
            page.replace('-', "\\-"),
            section
        ));
    }
    s
}

/// The width text for people is wrapped to: `COLUMNS` when set, else the terminal's
/// when stdout is one, else 80 (a pipe, a file: clap would take 100); at most 100,
/// which long lines read badly beyond.
pub fn term_width() -> usize {
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0);
    let tty = || {
        let mut ws = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes a winsize into the one we own; fd 1 may be anything
        // (the call fails on a pipe or file, and we fall back).
        let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) } == 0;
        (ok && ws.ws_col > 0).then_some(usize::from(ws.ws_col))
    };
    columns
        .or_else(tty)
        .unwrap_or(rttlab::report::table::TEXT_WIDTH)
        .clamp(20, 100)
}

/// Round-trip time at every layer: ICMP, request/response, the kernel's TCP estimator.
#[derive(Parser, Debug)]
#[command(
    name = "rttlab",
    version = rttlab::build::LONG_VERSION,
    about,
    after_help = EXAMPLES,
    term_width = term_width()
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once per process; boxing rr's arguments would buy nothing"
)]
pub enum Command {
    /// Every layer's RTT side by side in one run (the lab unless -H), with the gaps explained.
    Compare(compare::CompareArgs),
    /// Request/response round trips (netperf TCP_RR, UDP_RR, TCP_CRR).
    Rr(rr::RrArgs),
    /// Serve request/response tests to `rttlab rr` clients.
    Serve(serve::ServeArgs),
    /// Serve and probe peers at every layer continuously, exported for Prometheus.
    Agent(agent::AgentArgs),
    /// ICMP echo round trips, timed by the kernel's receive timestamps.
    Ping(ping::PingArgs),
    /// TCP's own view of live sockets (tcp_info via sock_diag), once or as a time series.
    Tcpinfo(tcpinfo::TcpinfoArgs),
    /// RTT from packet headers (TCP timestamps, seq/ACK), from a capture file or live.
    Passive(passive::PassiveArgs),
    /// Where each transaction of a live TCP service spends its time, from its kernel.
    Explain(explain::ExplainArgs),
    /// Tune TCP's retransmission behaviour: rto_min, thin linear timeouts; revert.
    Tune(tune::TuneArgs),
    /// A network in namespaces with a built-in link emulator (delay, jitter, loss, rate, queue, blackouts).
    Lab(lab::LabArgs),
    /// The retransmission timeline under a disruption: Hogan and Jones's theory and the kernel's rules.
    Rto(rto::RtoArgs),
    /// The published studies' experiments, each into a results directory that can be resumed.
    Experiment(experiment::ExperimentArgs),
    /// Render a results directory's report.html again from its raw data.
    Report(report::ReportArgs),
    /// Print a shell completion script.
    #[command(after_help = "\
Examples:
  rttlab completions bash > /etc/bash_completion.d/rttlab
  rttlab completions zsh > ~/.zfunc/_rttlab")]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write a man page for rttlab and each of its subcommands, from the same
    /// definitions as `--help`.
    #[command(after_help = "\
Examples:
  rttlab man /usr/local/share/man/man1     # then: man rttlab-rr
  rttlab man . && man -l rttlab-passive.1")]
    Man {
        /// Directory to write rttlab.1, rttlab-rr.1, rttlab-tune-syn-rto.1, … into.
        dir: std::path::PathBuf,
    },
}

/// An exit status chosen by the command itself (iputils ping's 1 for "no reply"),
/// whatever its [`Stage`]. It prints nothing itself: the rest of the error chain, if
/// any, is the message.
#[derive(Debug)]
pub struct Exit(pub u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }
}

impl std::error::Error for Exit {}

/// How far a run got: whether its set-up is done. rttlab's exit-code contract, for every
/// subcommand (README "Exit status"): 0 it measured (or did what it was asked); 1 it
/// measured but the target did not answer or the check failed (iputils ping's 1); 2 a
/// usage or set-up error: a bad flag or value, a missing privilege, a host that does
/// not resolve or a server that cannot be reached, a file that cannot be read or
/// written — nothing was measured. A command is handed its run's stage and says when
/// it begins to measure (or to serve); past that, an error means the run measured and
/// failed. Shared with the threads and callbacks that see that moment first.
#[derive(Debug, Default)]
pub struct Stage {
    measuring: std::sync::atomic::AtomicBool,
}

impl Stage {
    /// The command's set-up is done: from here on an error exits 1, not 2.
    pub fn measuring(&self) {
        self.measuring
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn has_measured(&self) -> bool {
        self.measuring.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// How a run ended, which its exit status says.
#[derive(Debug)]
pub enum Ended {
    /// It measured, or did what it was asked; a closed stdout (`rttlab rr … | head`)
    /// ends a run so too: 0.
    Done,
    /// It measured, but the run failed: 1.
    MeasuredButFailed(anyhow::Error),
    /// A usage or set-up error, nothing measured: 2.
    SetUpFailed(anyhow::Error),
    /// A status the command chose ([`Exit`]), with the rest of its error to say.
    Chosen(u8, anyhow::Error),
}

impl Ended {
    /// How the error `e` ends a run that got to `stage`.
    fn of(e: anyhow::Error, stage: &Stage) -> Self {
        if e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        }) {
            return Self::Done;
        }
        // As a context, an Exit is found by anyhow's own downcast only.
        let chosen = e
            .downcast_ref::<Exit>()
            .or_else(|| e.chain().find_map(|c| c.downcast_ref::<Exit>()))
            .map(|x| x.0);
        match chosen {
            Some(status) => Self::Chosen(status, e),
            None if stage.has_measured() => Self::MeasuredButFailed(e),
            None => Self::SetUpFailed(e),
        }
    }

    /// The exit status.
    pub fn status(&self) -> u8 {
        match self {
            Self::Done => 0,
            Self::MeasuredButFailed(_) => 1,
            Self::SetUpFailed(_) => 2,
            Self::Chosen(status, _) => *status,
        }
    }

    /// What to say on stderr: the error's chain on one line, if it has anything to say.
    pub fn message(&self) -> Option<String> {
        let e = match self {
            Self::Done => return None,
            Self::MeasuredButFailed(e) | Self::SetUpFailed(e) | Self::Chosen(_, e) => e,
        };
        let chain: Vec<String> = e
            .chain()
            .map(ToString::to_string)
            .filter(|s| !s.is_empty())
            .collect();
        (!chain.is_empty()).then(|| chain.join(": "))
    }
}

/// Run the parsed command.
pub fn run(cli: Cli) -> Ended {
    let stage = Stage::default();
    let result = match cli.command {
        Command::Compare(a) => compare::run(a, &stage),
        Command::Rr(a) => rr::run(a, &stage),
        Command::Serve(a) => serve::run(a, &stage),
        Command::Agent(a) => agent::run(a, &stage),
        Command::Ping(a) => ping::run(a, &stage),
        Command::Tcpinfo(a) => tcpinfo::run(a, &stage),
        Command::Passive(a) => passive::run(a, &stage),
        Command::Explain(a) => explain::run(a, &stage),
        Command::Tune(a) => tune::run(a),
        Command::Rto(a) => rto::run(a),
        Command::Lab(a) => lab::run(a),
        Command::Experiment(a) => experiment::run(a, &stage),
        Command::Report(a) => report::run(a),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "rttlab", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { dir } => man(&dir),
    };
    match result {
        Ok(()) => Ended::Done,
        Err(e) => Ended::of(e, &stage),
    }
}

/// One page per command, named as git names its own (`rttlab-tune-syn-rto.1`), each
/// with the command's examples as its EXAMPLES section.
fn man(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    use clap::CommandFactory;
    fn write(
        cmd: clap::Command,
        name: &str,
        parent: Option<&str>,
        dir: &std::path::Path,
    ) -> anyhow::Result<usize> {
        let mut n = 0;
        // Not the internal ones (`lab daemon`), as `--help` does not list them.
        for sub in cmd
            .get_subcommands()
            .filter(|s| s.get_name() != "help" && !s.is_hide_set())
        {
            n += write(
                sub.clone(),
                &format!("{name}-{}", sub.get_name()),
                Some(name),
                dir,
            )?;
        }
        // No "help" subcommand in the page: it has no page of its own.
        let cmd = cmd
            .name(name.to_string())
            .bin_name(name.replace('-', " "))
            .disable_help_subcommand(true);
        let examples = cmd.get_after_help().map(ToString::to_string);
        let has_subcommands = cmd.get_subcommands().any(|s| !s.is_hide_set());
        let path = dir.join(format!("{name}.1"));
        let man = clap_mangen::Man::new(cmd);
        let mut out = Vec::new();
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        man.render_options_section(&mut out)?;
        if has_subcommands {
            man.render_subcommands_section(&mut out)?;
        }
        if let Some(text) = examples {
            // The contract has a section of its own on every page.
            let text = text
                .split("Exit status, every subcommand:")
                .next()
                .unwrap_or_default();
            out.extend_from_slice(examples_section(text).as_bytes());
        }
        out.extend_from_slice(closing_sections(name, parent).as_bytes());
        rttlab::kernel::fs::write_replace(&path, &out)?;
        Ok(n + 1)
    }
    // Only the directory itself, as mkdir does: a missing parent is more often a typo
    // than a wish, and a command that fails creates nothing.
    if !dir.is_dir() {
        std::fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let n = write(Cli::command(), "rttlab", None, dir)?;
    eprintln!("rttlab man: {n} pages in {}", dir.display());
    Ok(())
}

/// `--help`'s closing text as man page sections: what comes before "Examples:" as
/// NOTES (filled as prose), the examples as EXAMPLES with their lines kept as they
/// are (no filling: the comments line up); escaped for roff.
fn examples_section(after_help: &str) -> String {
    let (notes, examples) = match after_help.split_once("Examples:") {
        Some((n, e)) => (n.trim(), e),
        None => ("", after_help),
    };
    let escape = |line: &str| {
        let line = line.replace('\\', "\\e").replace('-', "\\-");
        // A line starting with . or ' would be a request.
        if line.starts_with(['.', '\'']) {
            format!("\\&{line}\n")
        } else {
            format!("{line}\n")
        }
    };
    let mut s = String::new();
    if !notes.is_empty() {
        s.push_str(".SH NOTES\n");
        for line in notes.lines() {
            s.push_str(&if line.trim().is_empty() {
                ".PP\n".to_string()
            } else {
                escape(line)
            });
        }
    }
    s.push_str(".SH EXAMPLES\n.nf\n");
    for line in examples.lines().skip_while(|l| l.trim().is_empty()) {
        s.push_str(&escape(line));
    }
    s.push_str(".fi\n");
    s
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every visible flag says what it does, and every subcommand shows examples.
    #[test]
    fn every_subcommand_has_examples_and_every_flag_a_description() {
        fn walk(cmd: &clap::Command, path: &str, problems: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if a.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    problems.push(format!("{path}: --{id} has no description"));
                }
            }
            let examples = cmd
                .get_after_help()
                .or(cmd.get_after_long_help())
                .is_some_and(|h| h.to_string().contains("Examples:"));
            if !examples {
                problems.push(format!("{path}: no Examples: section"));
            }
            for s in cmd.get_subcommands() {
                if s.is_hide_set() || s.get_name() == "help" {
                    continue;
                }
                walk(s, &format!("{path} {}", s.get_name()), problems);
            }
        }
        let mut problems = Vec::new();
        walk(&Cli::command(), "rttlab", &mut problems);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}

#[cfg(test)]
mod vocabulary_tests {
    use super::{passive, Cli, Command};
    use clap::Parser;

    /// One long name per setting in every subcommand, and the old spellings still
    /// accepted (scripts keep working). Witness: clap's own parse of each line.
    #[test]
    fn one_long_name_per_setting_old_spellings_still_parse() {
        let ok = [
            "rttlab rr --duration 5 --interval 1ms --count 10",
            "rttlab rr --length 5 --wait 1ms",
            "rttlab ping ::1 --duration 5 --interval 0.2 --count 3 --interface lo",
            "rttlab ping ::1 --length 5",
            "rttlab tcpinfo --duration 5 --interval 10ms --count 3",
            "rttlab tcpinfo --length 5",
            "rttlab passive --interface lo --duration 5 --count 3",
            "rttlab passive -i lo --seconds 5",
            "rttlab passive -i lo -s 0 -nn --duration 5 tcp port 443",
            "rttlab compare --duration 5 --interval 1ms --interface eth0 --sampler 1/10",
            "rttlab compare --sampler 10",
            "rttlab experiment resreq-interval --interval 0,1ms --duration 1s --sampler 1/10",
            "rttlab experiment resreq-interval --wait 0,1ms",
            "rttlab serve -p 12866",
            "rttlab lab up --emulator poll",
            "rttlab compare --emulator sleep",
            "rttlab experiment blackout --emulator auto",
            "rttlab experiment interval-sweep --emulator sleep",
            "rttlab experiment syn-rto --emulator poll",
        ];
        for line in ok {
            if let Err(e) = Cli::try_parse_from(line.split(' ')) {
                panic!("{line}: {e}");
            }
        }
    }

    /// `passive` takes a tcpdump command line as pasted: `-s` is the snap length (0:
    /// whole frames), `-n`/`-nn` are accepted, and the trailing words are one filter
    /// expression, joined as tcpdump joins them, wherever the options stand (GNU
    /// getopt's order, which tcpdump uses). Witness: tcpdump(1)'s synopsis, and clap's
    /// parse of each line.
    #[test]
    fn passive_takes_a_tcpdump_command_line() {
        let parse = |line: &str| -> passive::PassiveArgs {
            let words = shell_words(line);
            match Cli::try_parse_from(words)
                .unwrap_or_else(|e| panic!("{line}: {e}"))
                .command
            {
                Command::Passive(a) => a,
                _ => unreachable!(),
            }
        };
        let a = parse("rttlab passive -i lo -s 0 -nn tcp port 443");
        assert_eq!((a.snaplen, a.numeric, a.seconds), (0, 2, None));
        assert_eq!(a.expression.join(" "), "tcp port 443");
        let a = parse("rttlab passive -ni lo 'tcp port 443' -c 5");
        assert_eq!((a.snaplen, a.numeric, a.count), (256, 1, Some(5)));
        assert_eq!(a.expression, ["tcp port 443"]);
        let a =
            parse("rttlab passive -r f.pcap --duration 3 'tcp[tcpflags] & tcp-syn != 0' or ip6");
        assert_eq!(a.seconds, Some(std::time::Duration::from_secs(3)));
        assert_eq!(
            a.expression.join(" "),
            "tcp[tcpflags] & tcp-syn != 0 or ip6"
        );
        assert!(parse("rttlab passive -r f.pcap").expression.is_empty());
    }

    /// `line` split as a shell would, for single quotes only.
    fn shell_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        for (i, part) in line.split('\'').enumerate() {
            if i % 2 == 1 {
                words.push(part.to_string());
            } else {
                words.extend(part.split_whitespace().map(String::from));
            }
        }
        words
    }

    /// The lab emulator's mode is one flag with one default wherever a lab is built,
    /// and the three spellings it replaced are gone. Witness: clap's command tree.
    #[test]
    fn the_emulator_flag_is_one_spelling_with_one_default() {
        fn walk(c: &clap::Command, path: &str, found: &mut Vec<(String, Vec<String>)>) {
            for a in c.get_arguments() {
                let long = a.get_long().unwrap_or_default();
                assert!(
                    !["lab-sleep", "lab-poll", "poll"].contains(&long),
                    "{path} still has --{long}"
                );
                if long == "emulator" {
                    let d = a.get_default_values().iter();
                    found.push((path.into(), d.map(|v| v.to_string_lossy().into()).collect()));
                }
            }
            for s in c.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()), found);
            }
        }
        let mut found = Vec::new();
        walk(
            &<Cli as clap::CommandFactory>::command(),
            "rttlab",
            &mut found,
        );
        let names: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
        for want in [
            "rttlab compare",
            "rttlab lab up",
            "rttlab experiment blackout",
            "rttlab experiment interval-sweep",
            "rttlab experiment resreq-interval",
            "rttlab experiment syn-rto",
        ] {
            assert!(names.contains(&want), "{want} has no --emulator: {names:?}");
        }
        for (path, default) in &found {
            assert_eq!(default, &["auto"], "{path}");
        }
    }
}

#[cfg(test)]
mod man_tests {
    use super::Cli;
    use clap::CommandFactory;

    /// A page for every command in the tree, each naming every long flag of its
    /// command and showing its examples; witness: groff, which must read every page
    /// without a warning (`-ww`, through preconv for the UTF-8 in the help).
    #[test]
    fn man_pages_cover_every_command_and_groff_reads_them_cleanly() {
        fn expect(cmd: &clap::Command, name: &str, out: &mut Vec<(String, Vec<String>)>) {
            for sub in cmd
                .get_subcommands()
                .filter(|s| s.get_name() != "help" && !s.is_hide_set())
            {
                expect(sub, &format!("{name}-{}", sub.get_name()), out);
            }
            let longs = cmd
                .get_arguments()
                .filter(|a| !a.is_hide_set())
                .filter_map(|a| a.get_long().map(|l| format!("--{l}").replace('-', "\\-")))
                .collect();
            out.push((name.to_string(), longs));
        }
        let mut want = Vec::new();
        expect(&Cli::command(), "rttlab", &mut want);
        let dir = tempfile::tempdir().unwrap();
        super::man(dir.path()).unwrap();
        let pages = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(pages, want.len());
        for (name, longs) in &want {
            let path = dir.path().join(format!("{name}.1"));
            let page = std::fs::read_to_string(&path).unwrap();
            for l in longs {
                assert!(page.contains(l.as_str()), "{name}.1 lacks {l}");
            }
            assert!(page.contains(".SH EXAMPLES"), "{name}.1 has no examples");
            // The contract, on every page; the pages of rttlab's own it points to exist.
            assert!(
                page.contains(".SH \"EXIT STATUS\"") && page.contains("usage or set\\-up error"),
                "{name}.1 has no exit status"
            );
            let see_also = page
                .split(".SH \"SEE ALSO\"")
                .nth(1)
                .unwrap_or_else(|| panic!("{name}.1 has no SEE ALSO"));
            for line in see_also.lines().filter(|l| l.starts_with(".BR rttlab")) {
                let page = line[4..].split(' ').next().unwrap().replace("\\-", "-");
                assert!(
                    want.iter().any(|(n, _)| *n == page),
                    "{name}.1 points to {page}(1), which is not generated"
                );
            }
            let o = std::process::Command::new("groff")
                .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
                .arg(&path)
                .output()
                .expect("groff (apt-get install groff-base)");
            assert!(
                o.status.success() && o.stderr.is_empty(),
                "{name}.1: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}
