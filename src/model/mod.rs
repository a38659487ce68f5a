//! Models: what the kernel should do, to set next to what it did.

pub mod rto;
