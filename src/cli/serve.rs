//! `rttlab serve`.

use super::values;
use anyhow::Context;
use clap::Args;
use rttlab::probe::control::{Limits, DEFAULT_CONTROL_PORT};
use rttlab::probe::server::{Server, ServerConfig};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Args, Debug)]
#[command(after_help = "\
The control port is 12866 (netperf's netserver uses 12865). Data ports are chosen per
test, or fixed by the client's -P.

Examples:
  rttlab serve                                  all addresses, IPv4 and IPv6, port 12866
  rttlab serve --listen 127.0.0.1:12866 --listen [::1]:12866
  RTTLAB_SECRET=s3cret rttlab serve             only clients with the same secret")]
pub struct ServeArgs {
    /// Address to listen on (repeatable). Default [::]:12866, which also accepts IPv4.
    #[arg(long = "listen", value_name = "ADDR")]
    pub listen: Vec<SocketAddr>,
    /// Require clients to prove they know this secret (HMAC challenge–response).
    #[arg(long, env = "RTTLAB_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// Most tests served at once.
    #[arg(long, default_value_t = 64)]
    pub max_tests: u32,
    /// Longest test a client may ask for.
    #[arg(long, default_value = "1h", value_parser = values::seconds)]
    pub max_duration: Duration,
    /// Largest request or response in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_payload: u32,
    /// Most parallel streams per test.
    #[arg(long, default_value_t = 256)]
    pub max_streams: u32,
    /// Drop a connection silent for this long.
    #[arg(long, default_value = "30s", value_parser = values::seconds)]
    pub idle_timeout: Duration,
    /// Do not log one line per test on stderr.
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let listen = if a.listen.is_empty() {
        vec![SocketAddr::from(([0u16; 8], DEFAULT_CONTROL_PORT))]
    } else {
        a.listen
    };
    anyhow::ensure!(
        a.max_tests >= 1 && a.max_streams >= 1 && a.max_payload >= 1,
        "limits must be at least 1"
    );
    anyhow::ensure!(
        !a.idle_timeout.is_zero(),
        "--idle-timeout must be more than 0"
    );
    let config = ServerConfig {
        listen,
        secret: a.secret.map(String::into_bytes),
        limits: Limits {
            max_payload: a.max_payload,
            max_streams: a.max_streams,
            max_duration_ms: a.max_duration.as_millis() as u64,
            max_concurrent_tests: a.max_tests,
        },
        idle_timeout: a.idle_timeout,
        log: !a.quiet,
    };
    let secured = config.secret.is_some();
    let server = Server::bind(config)?;
    let addrs: Vec<String> = server
        .local_addrs()
        .iter()
        .map(ToString::to_string)
        .collect();
    eprintln!(
        "rttlab serve: listening on {}{}",
        addrs.join(", "),
        if secured { " (secret required)" } else { "" }
    );
    server.run().context("serving")
}
