//! The exit-code contract, as iputils ping keeps it: 2 for a usage or set-up error (a
//! bad flag or value, a host name that does not resolve), whichever subcommand. Witness:
//! iputils ping's own status for the same mistakes, and the status of each command as
//! the shell sees it.

mod common;

use common::bin;
use std::process::Command;

fn status(args: &[&str]) -> Option<i32> {
    Command::new(bin())
        .args(args)
        .output()
        .unwrap()
        .status
        .code()
}

#[test]
fn usage_and_setup_errors_exit_2_in_every_command() {
    // iputils: an unknown host and a bad value are 2 (skipped where ping is missing).
    if let Ok(o) = Command::new("ping")
        .args(["-c", "1", "no.such.host.invalid"])
        .output()
    {
        assert_eq!(o.status.code(), Some(2), "iputils ping on an unknown host");
    }
    for args in [
        vec!["ping", "no.such.host.invalid", "-c", "1"],
        vec!["ping", "127.0.0.1", "-c", "0"],
        vec!["ping", "127.0.0.1", "-o", "FOO"],
        vec!["rr", "-o", "FOO"],
        vec!["rr", "-l", "0"],
        vec!["rr", "-n", "0"],
        vec!["rr", "-T", "99,0"],
        vec!["rr", "-H", "no.such.host.invalid", "-l", "1"],
        vec!["rr", "--no-such-flag"],
        vec!["completions", "tcsh"],
        vec!["passive", "-r", "x.pcap", "tcp", "prot", "80"],
    ] {
        assert_eq!(status(&args), Some(2), "{args:?}");
    }
}
