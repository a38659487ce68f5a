//! The `rttlab` binary: parse, run, print the error chain, exit.

mod cli;

use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = match cli::Cli::try_parse() {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // One line naming the problem, as every other rttlab error.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!(
                "rttlab: {} (see --help)",
                first.trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
    };
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `rttlab rr ... | head` closes the pipe: that is not an error.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            // As a context, an Exit is found by anyhow's own downcast only.
            let code = e
                .downcast_ref::<cli::Exit>()
                .or_else(|| e.chain().find_map(|c| c.downcast_ref::<cli::Exit>()))
                .map_or(1, |x| x.0);
            let chain: Vec<String> = e
                .chain()
                .map(ToString::to_string)
                .filter(|s| !s.is_empty())
                .collect();
            if !chain.is_empty() {
                eprintln!("rttlab: {}", chain.join(": "));
            }
            ExitCode::from(code)
        }
    }
}
