//! rttlab's integration tests, one module a subject, built as one test binary: 32
//! binaries each linked the library and its dependencies again, which cost minutes of
//! every CI run on a 2-core machine (bench/RESULTS-ci.md). Tests of different modules
//! now run side by side in one process; what must not overlap takes a lock of
//! [`common::serial`], which says why each one exists.

mod common;

mod agent;
mod agent_hostile;
mod anatomy;
mod anatomy_late;
mod anatomy_tail;
mod architecture;
mod capture;
mod compare;
mod dashboard;
mod exit_codes;
mod experiment;
mod experiments;
mod explain;
mod explain_apps;
mod fleet;
mod human_tables;
mod irtt;
mod json_schema;
mod lab;
mod netns;
mod netperf_habits;
mod passive;
mod passive_bpf;
mod passive_filter;
mod ping_habits;
mod privilege;
mod report;
mod results_compat;
mod rr_loopback;
mod rto_model;
mod serve_hostile;
mod structure;
mod syn_rto;
mod tcpinfo;
mod tune;
