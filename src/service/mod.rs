//! Explaining a live service: each transaction of an unmodified TCP server, or of a
//! client of one on this host, split into the parts its kernel saw ([`transaction`]),
//! folded into what a window of them says ([`window`]). The kernel side is
//! [`crate::kernel::explain_bpf`]; the command is `rttlab explain`.

pub mod transaction;
pub mod window;

pub use transaction::{Causes, Part, Side, Transaction};
pub use window::{PartRow, Summary, Waited, Window};
