//! The exit-code contract, one for every subcommand (README "Exit status", `rttlab
//! --help`): 0 it measured, 1 it measured but the target did not answer or the check
//! failed, 2 a usage or set-up error with nothing measured. Witnesses: iputils ping's
//! and fping's own status for the same cases, and the status of each command as the
//! shell sees it.

use crate::common;

use crate::common::{bin, NetnsPair, ServeChild};
use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(bin()).args(args).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Every subcommand's usage and set-up errors: 2, one line on stderr, whatever the
/// command.
#[test]
fn usage_and_setup_errors_exit_2_in_every_command() {
    // iputils: an unknown host and a bad value are 2 (skipped where ping is missing).
    if let Ok(o) = Command::new("ping")
        .args(["-c", "1", "no.such.host.invalid"])
        .output()
    {
        assert_eq!(o.status.code(), Some(2), "iputils ping on an unknown host");
    }
    let dir = tempfile::tempdir().unwrap();
    let a_dir = dir.path().to_str().unwrap();
    let free = common::free_port().to_string();
    for args in [
        vec!["--no-such-flag"],
        vec!["ping", "no.such.host.invalid", "-c", "1"],
        vec!["ping", "127.0.0.1", "-c", "0"],
        vec!["ping", "127.0.0.1", "-o", "FOO"],
        vec!["ping", "127.0.0.1", "-i", "-1"],
        vec!["ping", "127.0.0.1", "-b"],
        vec!["ping", "127.0.0.1", "::1", "--json"],
        vec!["rr", "-o", "FOO"],
        vec!["rr", "-l", "0"],
        vec!["rr", "-n", "0"],
        vec!["rr", "-T", "99,0"],
        vec!["rr", "-H", "no.such.host.invalid", "-l", "1"],
        vec!["rr", "-H", "127.0.0.1", "-p", &free, "-l", "1"],
        vec!["rr", "--hdr-log", a_dir, "-l", "1"],
        vec!["rr", "--secret-file", a_dir, "-l", "1"],
        vec!["rr", "--no-such-flag"],
        vec!["compare", "-l", "0"],
        vec!["serve", "--listen", "256.1.1.1"],
        vec!["agent", "--peers-file", "/nonexistent/peers.json"],
        vec!["tcpinfo", "--netns", "rttlab-no-such-ns"],
        vec!["passive", "-r", "/nonexistent/x.pcap"],
        vec!["passive", "-r", "x.pcap", "tcp", "prot", "80"],
        vec!["tune", "thin", "set", "maybe"],
        vec!["rto", "model", "--no-such-flag"],
        vec!["lab", "down", "--name", "rttlab-no-such-lab"],
        vec!["experiment", "blackout", "--no-such-flag"],
        vec!["report", "/nonexistent/run"],
        vec!["man", "/nonexistent/x"],
        vec!["completions", "tcsh"],
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.starts_with("rttlab: "), "{args:?}: {err}");
    }
}

/// What succeeds exits 0, in every command that can run without a network.
#[test]
fn what_succeeds_exits_0() {
    let corpus = common::corpus("rr-v4-gw.pcap.gz");
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["--version"],
        vec!["rr", "-l", "1", "-o", "P50_LATENCY"],
        vec!["tcpinfo"],
        vec!["passive", "-r", corpus.to_str().unwrap(), "-q"],
        vec!["rto", "model", "--disruption", "50ms"],
        vec!["lab", "list"],
        vec!["completions", "bash"],
        vec!["man", dir.path().to_str().unwrap()],
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
    }
}

/// Measured, then failed: a server that goes away after the test began (rr), a host
/// that never answers (ping, as iputils; several targets, as fping).
#[test]
fn a_run_that_measured_and_failed_exits_1() {
    // TCP_RR and UDP_RR at full speed on loopback: a CPU kept busy.
    let _busy = common::serial::busy();
    let srv = ServeChild::start(&[]);
    let mut rr = srv.spawn_rr(&["-l", "5", "-o", "P50_LATENCY"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    drop(srv);
    let code = rr.wait().unwrap().code();
    assert_eq!(code, Some(1), "rr whose server went away mid-run");
    // A server that answers nothing (its every UDP_RR request dropped on purpose).
    let (code, err) = run(&["rr", "-t", "UDP_RR", "-l", "1", "--udp-drop", "1/1"]);
    assert_eq!(code, Some(1), "UDP_RR with every request dropped: {err}");

    if !common::privileged("a_run_that_measured_and_failed_exits_1") {
        return;
    }
    let n = NetnsPair::new();
    let silent = "198.18.200.77";
    let ping = |prog: &str, args: &[&str]| {
        let bin = bin();
        let mut argv = vec![prog];
        if prog == "rttlab" {
            argv = vec![bin.to_str().unwrap(), "ping"];
        }
        argv.extend(args);
        NetnsPair::exec(&n.a, &argv).output().unwrap().status.code()
    };
    for (prog, args) in [
        ("ping", &["-c", "1", "-W", "0.3", silent][..]),
        ("rttlab", &["-c", "1", "-W", "0.3", silent]),
        ("fping", &["-t", "300", "-r", "0", n.b4, silent]),
        ("rttlab", &["-W", "0.3", n.b4, silent]),
        ("ping", &["-c", "2", "-w", "1", silent]),
        ("rttlab", &["-c", "2", "-w", "1", silent]),
    ] {
        assert_eq!(ping(prog, args), Some(1), "{prog} {args:?}");
    }
    assert_eq!(ping("rttlab", &["-c", "1", n.b4]), Some(0));
}

/// The messages themselves, for the mistakes users made (issue 31): each names the
/// flag or file at fault and what to do, on one line. Witness: the snapshot, read and
/// kept by hand; a changed message shows in review.
#[test]
fn error_messages_name_their_cause() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let mut text = String::new();
    for args in [
        vec![],
        vec!["ping"],
        vec!["ping", "127.0.0.1", "-i", "-1"],
        vec!["ping", "127.0.0.1", "-b"],
        vec!["ping", "127.0.0.1", "-T", "tsprespec"],
        vec!["completions", "tcsh"],
        vec!["rr", "--hdr-log", d, "-l", "1"],
        vec!["rr", "--hdr-log", "/nonexistent/x.hlog", "-l", "1"],
        vec!["rr", "--secret-file", d, "-l", "1"],
        vec!["rr", "-l", "0"],
        vec!["compare", "-l", "0"],
        vec!["man", "/nonexistent/x"],
        vec!["passive", "-r", "x.pcap", "tcp", "prot", "80"],
        vec!["tcpinfo", "--netns", "rttlab-no-such-ns"],
        vec!["lab", "down", "--name", "rttlab-no-such-lab"],
    ] {
        let (code, err) = run(&args);
        // The first line only for `rttlab` alone: its help, not an error.
        let err = if args.is_empty() {
            err.lines().next().unwrap_or("").to_string()
        } else {
            err.trim_end().to_string()
        };
        text.push_str(&format!(
            "$ rttlab {}\n[{}] {}\n",
            args.join(" ").replace(d, "DIR"),
            code.unwrap_or(-1),
            err.replace(d, "DIR")
        ));
    }
    insta::assert_snapshot!(text);
}
