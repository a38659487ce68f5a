//! Active probes: request/response over TCP and UDP (`rr`), its server, and ICMP echo.

pub mod control;
pub mod io;
pub mod pacing;
pub mod ping;
pub mod rr;
pub mod server;
pub mod udp_timeout;
