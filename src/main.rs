//! The `rttlab` binary: parse, run, print the error chain, exit.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `rttlab rr ... | head` closes the pipe: that is not an error.
            if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) {
                return ExitCode::SUCCESS;
            }
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            eprintln!("rttlab: {}", chain.join(": "));
            ExitCode::FAILURE
        }
    }
}
