//! The `rttlab` binary: parse, run, print the error chain, exit.

mod cli;

use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `rttlab rr … -- …`: a netperf command line, read by netperf's rules.
    let argv = match cli::netperf::argv(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rttlab: {e}");
            return ExitCode::from(2);
        }
    };
    let args = match cli::Cli::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => e.exit(),
        // `rttlab` or `rttlab tune` alone: the help itself, as git does, on stderr.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprint!("{}", e.render());
            return ExitCode::from(2);
        }
        Err(e) => {
            let netperf = (e.kind() == clap::error::ErrorKind::UnknownArgument)
                .then(|| netperf_meaning(&e))
                .flatten();
            match netperf {
                Some(m) => eprintln!("rttlab: {m}"),
                None => eprintln!("rttlab: {} (see --help)", one_line(&e.render().to_string())),
            }
            return ExitCode::from(2);
        }
    };
    let ended = cli::run(args);
    if let Some(message) = ended.message() {
        eprintln!("rttlab: {message}");
    }
    ExitCode::from(ended.status())
}

/// For `rr`, an unknown short option that netperf has: what netperf means by it (a
/// netperf line pasted without its `--`).
fn netperf_meaning(e: &clap::Error) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some("rr") {
        return None;
    }
    let clap::error::ContextValue::String(arg) = e.get(clap::error::ContextKind::InvalidArg)?
    else {
        return None;
    };
    let at = args.iter().position(|a| a == arg)?;
    cli::netperf::unknown_option(arg, args.get(at + 1).map(String::as_str))
}

/// clap's message on one line, as every other rttlab error, with its detail kept: the
/// missing argument's name, the possible values, the tip. The usage and the "for more
/// information" lines go; `(see --help)` says the same.
fn one_line(text: &str) -> String {
    let mut kept = Vec::new();
    let mut in_usage = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("Usage:") {
            in_usage = true;
        } else if line.is_empty() {
            in_usage = false;
        } else if !in_usage && !line.starts_with("For more information") {
            kept.push(line.trim_start_matches("error: "));
        }
    }
    kept.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: clap's own rendering of each error, reduced to one line that keeps
    /// what names the problem.
    #[test]
    fn argument_errors_keep_their_detail_on_one_line() {
        let err = |args: &[&str]| {
            let e = cli::Cli::try_parse_from(args).unwrap_err();
            one_line(&e.render().to_string())
        };
        let missing = err(&["rttlab", "ping"]);
        assert!(missing.contains("<HOST>"), "{missing}");
        let shells = err(&["rttlab", "completions", "tcsh"]);
        assert!(
            shells.contains("bash") && shells.contains("zsh"),
            "{shells}"
        );
        let unknown = err(&["rttlab", "rr", "--no-such-flag"]);
        assert!(unknown.contains("--no-such-flag"), "{unknown}");
        for line in [missing, shells, unknown] {
            assert!(!line.contains('\n') && !line.contains("Usage:"), "{line}");
        }
    }
}
