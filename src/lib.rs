//! rttlab: round-trip time at every layer, side by side.
//!
//! See DESIGN.md for the module map. Data flows one way: sources ([`probe`],
//! [`kernel`]) → samples → [`stats`] → [`report`].

pub mod kernel;
pub mod model;
pub mod probe;
pub mod report;
pub mod stats;
