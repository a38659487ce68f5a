//! The command line: one file per subcommand. Arguments are validated into the
//! library's settings before anything opens a socket.

pub mod agent;
pub mod compare;
pub mod experiment;
pub mod lab;
pub mod output;
pub mod passive;
pub mod ping;
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
  rttlab compare                             every layer's RTT side by side, in a lab built for the run
  rttlab rr                                  TCP_RR against an in-process server on loopback, 10 s
  rttlab rr -t UDP_RR -r 64,64 -l 5 -o P50_LATENCY,P99_LATENCY,THROUGHPUT
  rttlab serve                               serve tests on port 12866 (IPv4 and IPv6)
  rttlab rr -H server.example -w 10ms --pace hybrid -T 0,0
  rttlab agent --peers-file peers.json       serve, probe every peer, export /metrics for Prometheus
  rttlab ping ::1 -c 100 -i 10ms --histogram
  rttlab tcpinfo --dport 12866 -i 10ms -l 5 --csv   the kernel's RTT of live sockets, every 10 ms
  rttlab passive -r trace.pcap --method both --summary   RTT from packet headers
  rttlab lab up --name demo --delay 50ms --loss 1% --rate 10mbit --queue 100kB
  rttlab lab exec --name demo a -- ping -c 3 b
  rttlab completions bash > /etc/bash_completion.d/rttlab";

/// Round-trip time at every layer: ICMP, request/response, the kernel's TCP estimator.
#[derive(Parser, Debug)]
#[command(name = "rttlab", version, about, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
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
    /// Tune TCP's retransmission behaviour: rto_min, thin linear timeouts; revert.
    Tune(tune::TuneArgs),
    /// A network in namespaces with a built-in link emulator (delay, jitter, loss, rate, queue, blackouts).
    Lab(lab::LabArgs),
    /// The retransmission timeline under a disruption: the seed's theory and the kernel's rules.
    Rto(rto::RtoArgs),
    /// The seeds' experiments, each into a results directory that can be resumed.
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
}

/// An exit status other than 1 for an error (iputils ping's 1 for "no reply", 2 for
/// an error). It prints nothing itself: the rest of the error chain, if any, is the
/// message.
#[derive(Debug)]
pub struct Exit(pub u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }
}

impl std::error::Error for Exit {}

/// Run the parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Compare(a) => compare::run(a),
        Command::Rr(a) => rr::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Agent(a) => agent::run(a),
        Command::Ping(a) => ping::run(a),
        Command::Tcpinfo(a) => tcpinfo::run(a),
        Command::Passive(a) => passive::run(a),
        Command::Tune(a) => tune::run(a),
        Command::Rto(a) => rto::run(a),
        Command::Lab(a) => lab::run(a),
        Command::Experiment(a) => experiment::run(a),
        Command::Report(a) => report::run(a),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "rttlab", &mut std::io::stdout());
            Ok(())
        }
    }
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
