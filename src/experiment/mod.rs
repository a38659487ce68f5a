//! Scenarios from the seeds: trial runners that compose the lab, the probes and the
//! kernel knobs, and write results directories (docs/ARCHITECTURE.md: run.json, raw data as JSON
//! lines written as each trial finishes, tables and report).

pub mod blackout;
pub mod compare;
pub mod passive_active;
pub mod resreq;
pub mod runner;
pub mod sweep;
pub mod syn_rto;
pub mod testbed;

/// Errors that stop an experiment (a point or trial that fails is recorded with its
/// error instead, and the run goes on).
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The lab could not be built, reached or changed.
    #[error(transparent)]
    Lab(#[from] crate::lab::LabError),
    /// The results directory could not be read or written.
    #[error(transparent)]
    Results(#[from] crate::results::ResultsError),
    /// A passive-vs-active scenario that is none of the three.
    #[error("unknown scenario {0:?}: use delay, loss-N (percent) or queue-NKB")]
    UnknownScenario(String),
    /// A step of setting up where the trials run failed; its error is the source.
    #[error("setting up the experiment: {step}")]
    Setup {
        /// What was being set up.
        step: String,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The rttlab server inside the lab did not start.
    #[error("starting the rttlab server in the lab")]
    Server(#[source] crate::probe::server::ServerError),
    /// Its threads could not be started.
    #[error("starting the rttlab server in the lab")]
    ServerThreads(#[source] std::io::Error),
    /// A lab host's network namespace could not be entered.
    #[error(transparent)]
    Netns(#[from] crate::kernel::netns::NetnsError),
}

/// Why a step of a trial failed. The trial keeps it in its record as its error chain
/// ([`crate::error_chain`]) and the run goes on.
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    /// A step failed; its error is the source.
    #[error("{step}")]
    Step {
        /// What the trial was doing.
        step: String,
        /// Why it failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// `--blackout-by emulator` with a remote server.
    #[error("the emulator's blackout needs the lab; with a remote server use nftables")]
    EmulatorBlackoutNeedsLab,
    /// A thread of the trial panicked.
    #[error("{0} panicked")]
    Panicked(&'static str),
    /// nft refused a script: its own words, from its stderr.
    #[error("nft: {0}")]
    Nft(String),
}

impl TrialError {
    /// For `map_err`: the error of step `step`.
    pub fn step<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
        step: impl Into<String>,
    ) -> impl FnOnce(E) -> Self {
        let step = step.into();
        move |e| Self::Step {
            step,
            source: e.into(),
        }
    }

    /// Its chain, as a trial's record keeps it.
    pub fn chain(&self) -> String {
        crate::error_chain(self)
    }
}
