//! Active probes: request/response over TCP and UDP (`rr`), its server, and ICMP echo
//! (`ping`, and `echo` for many targets at once).

pub mod anatomy;
pub mod control;
pub mod echo;
pub mod fping;
pub mod io;
pub mod pacing;
pub mod path;
pub mod ping;
pub mod rr;
pub mod server;
pub mod stamps;
pub mod tcping;
pub mod udp_timeout;
