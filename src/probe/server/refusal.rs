//! Why the server refuses a test ([`Refusal`]): what the admission, the budgets and
//! the data socket's opening say, each naming its value and limit.

use std::net::IpAddr;

impl Refusal {
    /// Whether it refuses for want of room another source holds (a test slot, memory,
    /// descriptors, threads): the refusals a running test can give way for.
    pub(super) fn wants_room(&self) -> bool {
        matches!(
            self,
            Self::Busy { .. }
                | Self::Memory { .. }
                | Self::Descriptors { .. }
                | Self::Threads { .. }
        )
    }
}

/// Why the server refuses a test: its text is the `Error` message the client prints, so
/// each names the value, the limit and the setting that sets it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A connection still in its handshake, dropped for a newer one from its source.
    #[error("server busy: dropped from the handshake pool, {waiting} connections from {from} waiting (--max-handshakes-per-source {limit}); try again")]
    HandshakesPerSource {
        /// Connections from the source in the pool.
        waiting: usize,
        /// The source (an address, or its /64).
        from: IpAddr,
        /// `--max-handshakes-per-source`.
        limit: usize,
    },
    /// A connection still in its handshake, dropped for a newer one.
    #[error("server busy: dropped from the handshake pool, {waiting} connections waiting (--max-handshakes {limit}); try again")]
    Handshakes {
        /// Connections in the pool.
        waiting: usize,
        /// `--max-handshakes`.
        limit: usize,
    },
    /// Tests from one source at `--max-tests-per-source`.
    #[error("server busy: {held} tests running from {from}, the limit per source is {limit} (--max-tests-per-source)")]
    PerSource {
        /// Tests the source runs.
        held: u64,
        /// The source (an address, or its /64).
        from: IpAddr,
        /// `--max-tests-per-source`.
        limit: u64,
    },
    /// A running test ended for a newcomer from another source ([`super::shares`]).
    #[error("ended to make room for another source's test: this server shares its test budgets among sources, and {from} ran {held} tests; try again later")]
    GaveWay {
        /// The test's source (an address, or its /64).
        from: IpAddr,
        /// Tests it ran, this one included.
        held: u64,
    },
    /// Tests at `--max-tests`.
    #[error("server busy: {used} tests running, the limit is {limit} (--max-tests)")]
    Busy {
        /// Tests running.
        used: u64,
        /// `--max-tests`.
        limit: u64,
    },
    /// Memory at `--max-memory`.
    #[error("server memory budget: this test needs {need_mib} MiB, {used_mib} of {limit_mib} MiB are in use (--max-memory)")]
    Memory {
        /// What the test would hold.
        need_mib: u64,
        /// Held by the tests running.
        used_mib: u64,
        /// `--max-memory`.
        limit_mib: u64,
    },
    /// Descriptors at the server's share of its `ulimit -n`.
    #[error("server descriptor budget: this test needs {need} descriptors, {used} of {limit} are in use (ulimit -n {open_files})")]
    Descriptors {
        /// What the test would open.
        need: u64,
        /// Open for the tests running.
        used: u64,
        /// The share for tests.
        limit: u64,
        /// The process's limit.
        open_files: u64,
    },
    /// Threads at `--max-threads`.
    #[error("server thread budget: this test needs {need} threads, {used} of {limit} are in use (--max-threads)")]
    Threads {
        /// What the test would start.
        need: u64,
        /// Running for other tests.
        used: u64,
        /// `--max-threads`.
        limit: u64,
    },
    /// A request or response size outside `--max-payload`.
    #[error("{what} {bytes} bytes is outside 1..={limit} (server limit --max-payload)")]
    Payload {
        /// "request size" or "response size".
        what: &'static str,
        /// The size asked for.
        bytes: u32,
        /// `--max-payload`.
        limit: u32,
    },
    /// A UDP_RR size larger than a datagram.
    #[error("UDP_RR sizes must be at most {0} bytes (one datagram)")]
    Datagram(u32),
    /// Streams outside `--max-streams`.
    #[error("{streams} streams is outside 1..={limit} (server limit --max-streams)")]
    Streams {
        /// Streams asked for.
        streams: u32,
        /// `--max-streams`.
        limit: u32,
    },
    /// A test longer than `--max-duration`.
    #[error("test length {ms} ms is outside 1..={limit_ms} ms (server limit --max-duration)")]
    Duration {
        /// The length asked for.
        ms: u64,
        /// `--max-duration`.
        limit_ms: u64,
    },
    /// An interval longer than the server waits.
    #[error("interval and timeout {ms} ms are longer than the server's limit of {limit_ms} ms")]
    Interval {
        /// The interval asked for.
        ms: u64,
        /// The server's limit.
        limit_ms: u64,
    },
    /// A fixed data port outside `--data-ports`.
    #[error("data port {port} is outside the server's data ports {range} (--data-ports)")]
    DataPortRange {
        /// The port asked for.
        port: u16,
        /// `--data-ports`.
        range: crate::probe::control::PortRange,
    },
    /// A congestion control name that cannot be one.
    #[error("congestion control name must be 1–15 letters, digits or _")]
    CongestionName,
    /// `udp_drop_one_in` of 0.
    #[error("udp_drop_one_in must be at least 1")]
    DropOneIn,
    /// UDP_RR's anatomy with more than one stream.
    #[error("the anatomy of UDP_RR is measured with one stream")]
    UdpAnatomyStreams,
    /// Responses too short to carry the server's stamps.
    #[error("the anatomy needs responses of at least {0} bytes (they carry the server's stamps)")]
    AnatomyResponse(u32),
    /// A server delay longer than the server waits per request.
    #[error("server delay {us} µs is longer than the {limit_us} µs a server waits per request")]
    ServerDelay {
        /// The delay asked for.
        us: u64,
        /// The server's limit.
        limit_us: u64,
    },
    /// A congestion control the policy or the kernel does not allow.
    #[error("congestion control {name:?} is not one this server allows ({allowed}: net.ipv4.tcp_allowed_congestion_control and serve --allow-cc, among those the kernel has loaded)")]
    Congestion {
        /// The name asked for.
        name: String,
        /// The names allowed, space-separated.
        allowed: String,
    },
    /// A server CPU outside its affinity.
    #[error("server CPU {cpu} is not one the server may run on ({cpus})")]
    ServerCpu {
        /// The CPU asked for.
        cpu: usize,
        /// Those it may run on, comma-separated.
        cpus: String,
    },
    /// A fixed data port that cannot be bound.
    #[error("cannot open data port {port}: {why} (the server's data ports are {range}; pick a free one or leave -P out)")]
    DataPort {
        /// The port asked for.
        port: u16,
        /// The bind's error, in the message (the client sees only text).
        why: String,
        /// `--data-ports`.
        range: crate::probe::control::PortRange,
    },
    /// The data socket's own address could not be read.
    #[error("data socket: {0}")]
    DataSocket(String),
    /// Every port of `--data-ports` is taken.
    #[error("no free data port in the server's range {0}")]
    NoDataPort(crate::probe::control::PortRange),
}
