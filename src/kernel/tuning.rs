//! Changes rttlab makes to the kernel, and their undoing.
//!
//! Every change is written to a journal (/run/rttlab/tune.json; tmpfs, so it goes with
//! a reboot exactly as the kernel state does) *before* it is applied, with the value it
//! replaces. `revert` restores recorded values newest first and forgets the entries that
//! were restored; a crash between journal and change leaves an entry whose revert is a
//! no-op. Setting the same knob twice keeps the first, original, previous value.
//!
//! Each entry has an owner: the user's `rttlab tune` (none), or one run of an
//! experiment. A run that sets a knob the user set earlier records the value it found
//! (the user's) above the user's own entry, and at its end restores just that, leaving
//! the user's entry for `rttlab tune revert`; `revert --all` unwinds every owner's
//! entries newest first, so a crashed run's changes come off before the user's. The
//! journal is read and rewritten under an exclusive `flock` on `tune.json.lock`, so
//! concurrent runs lose no entry.

use super::netns::NetnsError;
use super::route::{self, RouteError, RtoMin};
use super::sysctl::{self, SysctlError};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// One recorded change.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A sysctl and its value before.
    Sysctl {
        /// The network namespace it was set in; None: rttlab's own.
        netns: Option<String>,
        /// The sysctl's dotted name, e.g. `net.ipv4.tcp_rto_min_us`.
        key: String,
        /// Its value before, as read from /proc/sys (trimmed); written back on revert.
        previous: String,
    },
    /// A route's rto_min before (`None` if it had none), exactly as it was: locked or
    /// not. Journals of rttlab 0.1 lack `table` (the main table) and `previous_locked`
    /// (they recorded locked values only).
    RouteRtoMin {
        /// The network namespace of the route; None: rttlab's own.
        netns: Option<String>,
        /// The route's destination, `ADDR/LEN`.
        prefix: String,
        /// The route's table id (254 main, 255 local).
        #[serde(default = "main_table")]
        table: u32,
        /// The route's rto_min before, ms; None: the route had none.
        previous_ms: Option<u32>,
        /// Whether that rto_min was locked (`rto_min lock`); false when there was none.
        #[serde(default = "yes")]
        previous_locked: bool,
    },
    /// The sock_ops program pinned at `pin_dir`, attached to `cgroup`.
    SynRtoAttach {
        /// The bpffs directory holding the program's pins (`--pin-dir`).
        pin_dir: String,
        /// The cgroup v2 directory the program is attached to (`--cgroup`).
        cgroup: String,
    },
    /// The in-kernel passive engine's tc programs on an interface
    /// ([`super::passive_bpf`]); revert detaches them (TCX links go with their
    /// process) and removes a clsact qdisc the run added.
    PassiveTc {
        /// The interface's network namespace; None: rttlab's own.
        netns: Option<String>,
        /// The interface.
        interface: String,
        /// `tcx` or `clsact`.
        mode: String,
        /// Whether the run added the clsact qdisc.
        created_qdisc: bool,
        /// The process that held the programs.
        pid: u32,
    },
    /// An nftables table rttlab created (removed on revert).
    NftTable {
        /// The network namespace the table is in; None: rttlab's own.
        netns: Option<String>,
        /// The table's nftables family, e.g. `inet`.
        family: String,
        /// The table's name within its family, e.g. `rttlab_blackout`.
        name: String,
    },
}

fn main_table() -> u32 {
    route::TABLE_MAIN
}

fn yes() -> bool {
    true
}

/// A change with its owner (`None`: the user's `rttlab tune`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entry {
    /// What was changed and the value it replaced; its keys sit in the entry's own
    /// JSON object.
    #[serde(flatten)]
    pub change: Change,
    /// The run that made it, `WHAT-PID` (see [`Journal::for_run`]); None (no `owner`
    /// key): the user's `rttlab tune`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// For a change made in "rttlab's own" namespace (`netns` None): that namespace's
    /// identity ([`super::netns::current`]), so a revert run from another namespace
    /// (a crashed agent's inside a lab host, reverted from the host) undoes it where
    /// it was made, or knows it went with its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns_id: Option<(u64, u64)>,
}

impl Change {
    /// Namespace the change was made in.
    pub fn netns(&self) -> Option<&str> {
        match self {
            Change::Sysctl { netns, .. }
            | Change::RouteRtoMin { netns, .. }
            | Change::NftTable { netns, .. }
            | Change::PassiveTc { netns, .. } => netns.as_deref(),
            Change::SynRtoAttach { .. } => None,
        }
    }

    /// Whether the change lives in a network namespace (all but the cgroup's program).
    fn in_a_netns(&self) -> bool {
        !matches!(self, Change::SynRtoAttach { .. })
    }

    /// The same change, placed in namespace `place` (a name or an nsfs path).
    fn placed_in(mut self, place: String) -> Change {
        match &mut self {
            Change::Sysctl { netns, .. }
            | Change::RouteRtoMin { netns, .. }
            | Change::NftTable { netns, .. }
            | Change::PassiveTc { netns, .. } => *netns = Some(place),
            Change::SynRtoAttach { .. } => {}
        }
        self
    }

    fn same_target(&self, other: &Change) -> bool {
        match (self, other) {
            (
                Change::Sysctl {
                    netns: a, key: k, ..
                },
                Change::Sysctl {
                    netns: b, key: l, ..
                },
            ) => a == b && k == l,
            (
                Change::RouteRtoMin {
                    netns: a,
                    prefix: p,
                    table: t,
                    ..
                },
                Change::RouteRtoMin {
                    netns: b,
                    prefix: q,
                    table: u,
                    ..
                },
            ) => a == b && p == q && t == u,
            (x, y) => x == y,
        }
    }

    /// What undoing it amounts to, as a shell command (for --dry-run and messages).
    pub fn revert_command(&self) -> String {
        match self {
            Change::Sysctl {
                netns,
                key,
                previous,
            } => sysctl_command(netns.as_deref(), key, previous),
            Change::RouteRtoMin {
                netns,
                prefix,
                table,
                previous_ms,
                previous_locked,
            } => {
                let n = netns.as_ref().map_or(String::new(), |n| format!(" -n {n}"));
                let t = match *table {
                    route::TABLE_MAIN => String::new(),
                    route::TABLE_LOCAL => " table local".into(),
                    t => format!(" table {t}"),
                };
                let lock = if *previous_locked { "lock " } else { "" };
                match previous_ms {
                    Some(ms) => format!("ip{n} route change {prefix}{t} … rto_min {lock}{ms}ms"),
                    None => format!("ip{n} route change {prefix}{t} … (without rto_min)"),
                }
            }
            Change::NftTable {
                netns,
                family,
                name,
            } => match netns {
                Some(n) => format!("ip netns exec {n} nft delete table {family} {name}"),
                None => format!("nft delete table {family} {name}"),
            },
            Change::SynRtoAttach { pin_dir, cgroup } => format!(
                "bpftool cgroup detach {cgroup} sock_ops pinned {pin_dir}/prog && rm -r {pin_dir}"
            ),
            Change::PassiveTc {
                netns,
                interface,
                mode,
                created_qdisc,
                ..
            } => {
                let n = netns.as_ref().map_or(String::new(), |n| format!(" -n {n}"));
                if mode == "tcx" {
                    format!("(TCX links on {interface} go with the process that holds them)")
                } else if *created_qdisc {
                    format!("tc{n} qdisc del dev {interface} clsact")
                } else {
                    format!("tc{n} filter del dev {interface} ingress; tc{n} filter del dev {interface} egress (rttlab_ingress, rttlab_egress)")
                }
            }
        }
    }
}

/// `sysctl -w` as a user would type it.
pub fn sysctl_command(netns: Option<&str>, key: &str, value: &str) -> String {
    match netns {
        Some(n) => format!("ip netns exec {n} sysctl -w {key}={value}"),
        None => format!("sysctl -w {key}={value}"),
    }
}

/// Errors of tuning.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// A sysctl could not be read or written.
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
    /// A route could not be found, read or changed.
    #[error(transparent)]
    Route(#[from] RouteError),
    /// A change's network namespace does not exist or could not be entered.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// The sock_ops program could not be attached or detached.
    #[error(transparent)]
    SynRto(#[from] super::syn_rto::SynRtoError),
    /// The journal could not be read or written.
    #[error(
        "journal {path}: {msg} (fix or remove it; it records what `rttlab tune revert` restores)"
    )]
    Journal {
        /// The journal file.
        path: String,
        /// What failed: the I/O, lock or JSON error.
        msg: String,
    },
    /// `--route` named neither an address nor a prefix.
    #[error("--route {0:?} is not an address or prefix")]
    NotAnAddress(String),
    /// The in-kernel passive engine's programs could not be removed.
    #[error("{msg}")]
    PassiveTc {
        /// What failed, naming the interface.
        msg: String,
    },
    /// `nft` could not remove a table.
    #[error("nft delete table {table}: {msg}")]
    Nft {
        /// The table, `FAMILY NAME`.
        table: String,
        /// `nft`'s error output, or why `nft` could not be run.
        msg: String,
    },
}

/// A change `revert` attempted, with its outcome.
pub type Reverted = (Change, Result<(), TuneError>);

/// The journal file, as one owner sees it.
#[derive(Clone, Debug)]
pub struct Journal {
    path: PathBuf,
    /// Whose entries this handle records and reverts (`None`: the user's).
    owner: Option<String>,
}

/// Holds the journal's lock until dropped.
struct Locked(std::fs::File);

impl Drop for Locked {
    fn drop(&mut self) {
        // SAFETY: a valid fd; unlocking cannot fail in a way that matters (closing
        // the file releases the lock anyway).
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl Journal {
    /// /run/rttlab/tune.json, or `$RTTLAB_STATE_DIR/tune.json`, for the user's changes.
    pub fn default_location() -> Self {
        Self::at(crate::state_dir().join("tune.json"))
    }

    /// The default journal for the changes of one run of `what` (this process).
    pub fn for_run(what: &str) -> Self {
        Self {
            owner: Some(format!("{what}-{}", std::process::id())),
            ..Self::default_location()
        }
    }

    /// A journal at `path`, for the user's changes.
    pub fn at(path: PathBuf) -> Self {
        Self { path, owner: None }
    }

    fn err(&self, msg: impl ToString) -> TuneError {
        TuneError::Journal {
            path: self.path.display().to_string(),
            msg: msg.to_string(),
        }
    }

    /// Take the journal's lock (`flock` on its `.lock` file, created if missing).
    fn lock(&self) -> Result<Locked, TuneError> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| self.err(e))?;
        }
        // Not through a symlink: the journal lives in a directory root writes to.
        let f = super::fs::open_append(&self.path.with_extension("json.lock"))
            .map_err(|e| self.err(crate::error_chain(&e)))?;
        loop {
            // SAFETY: a valid fd.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Locked(f));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(self.err(format!("flock: {}", crate::error_chain(&e))));
            }
        }
    }

    /// Every owner's entries, oldest first.
    ///
    /// # Errors
    /// Unreadable or corrupt journal.
    pub fn all_entries(&self) -> Result<Vec<Entry>, TuneError> {
        match super::fs::read(&self.path, "tuning journal", super::fs::CONFIG_MAX_BYTES) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| self.err(e)),
            Err(e) if e.is_not_found() => Ok(Vec::new()),
            Err(e) => Err(self.err(crate::error_chain(&e))),
        }
    }

    /// The changes this handle's owner recorded, oldest first.
    ///
    /// # Errors
    /// Unreadable or corrupt journal.
    pub fn entries(&self) -> Result<Vec<Change>, TuneError> {
        Ok(self
            .all_entries()?
            .into_iter()
            .filter(|e| e.owner == self.owner)
            .map(|e| e.change)
            .collect())
    }

    fn save(&self, all: &[Entry]) -> Result<(), TuneError> {
        if all.is_empty() {
            return match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(self.err(e)),
                _ => Ok(()),
            };
        }
        let body = serde_json::to_vec_pretty(all).map_err(|e| self.err(e))?;
        super::fs::write_replace(&self.path, &body).map_err(|e| self.err(crate::error_chain(&e)))
    }

    /// Record `c` for this owner unless the same knob is already recorded by it (its
    /// first value is the original). Returns whether it was added.
    ///
    /// # Errors
    /// The journal could not be written.
    pub fn record(&self, c: Change) -> Result<bool, TuneError> {
        let _lock = self.lock()?;
        let mut all = self.all_entries()?;
        let netns_id = if c.netns().is_none() && c.in_a_netns() {
            super::netns::current()
        } else {
            None
        };
        if all
            .iter()
            .any(|x| x.owner == self.owner && x.netns_id == netns_id && x.change.same_target(&c))
        {
            return Ok(false);
        }
        all.push(Entry {
            change: c,
            owner: self.owner.clone(),
            netns_id,
        });
        self.save(&all)?;
        Ok(true)
    }

    /// Drop an entry whose change was never made.
    fn forget(&self, c: &Change) -> Result<(), TuneError> {
        let _lock = self.lock()?;
        let mut all = self.all_entries()?;
        all.retain(|x| !(x.owner == self.owner && x.change == *c));
        self.save(&all)
    }

    /// Record `c`, run `apply`, and forget `c` again if `apply` failed and `c` was new.
    fn journalled<T>(
        &self,
        c: Change,
        apply: impl FnOnce() -> Result<T, TuneError>,
    ) -> Result<T, TuneError> {
        let added = self.record(c.clone())?;
        let r = apply();
        if r.is_err() && added {
            self.forget(&c)?;
        }
        r
    }

    /// Revert this owner's recorded changes that `which` selects, newest first.
    /// Returns each with the outcome; entries that failed stay in the journal.
    ///
    /// # Errors
    /// The journal could not be read or written.
    pub fn revert(&self, which: impl Fn(&Change) -> bool) -> Result<Vec<Reverted>, TuneError> {
        self.revert_entries(|e| e.owner == self.owner && which(&e.change))
    }

    /// Revert every owner's changes (a user's and any run's a crash left), newest
    /// first.
    ///
    /// # Errors
    /// The journal could not be read or written.
    pub fn revert_all(&self) -> Result<Vec<Reverted>, TuneError> {
        self.revert_entries(|_| true)
    }

    fn revert_entries(&self, which: impl Fn(&Entry) -> bool) -> Result<Vec<Reverted>, TuneError> {
        let _lock = self.lock()?;
        let all = self.all_entries()?;
        let mut keep = Vec::new();
        let mut done = Vec::new();
        for e in all.into_iter().rev() {
            if !which(&e) {
                keep.push(e);
                continue;
            }
            let (change, r) = match e.netns_id {
                Some(id) if super::netns::current() != Some(id) => match super::netns::locate(id) {
                    Some(place) => {
                        let c = e.change.clone().placed_in(place);
                        let r = undo(&c);
                        (c, r)
                    }
                    None => {
                        let gone = NetnsError::NotFound {
                            name: format!("(unnamed, inode {})", id.1),
                            path: "no /run/netns entry or process holds it".into(),
                        };
                        (e.change.clone(), Err(gone.into()))
                    }
                },
                _ => (e.change.clone(), undo(&e.change)),
            };
            // A namespace that no longer exists took the change with it.
            if r.as_ref().is_err_and(|x| !namespace_gone(x)) {
                keep.push(e);
            }
            done.push((change, r));
        }
        keep.reverse();
        self.save(&keep)?;
        Ok(done)
    }
}

/// Whether a change could not be undone because its namespace is gone (and took the
/// change with it).
pub fn namespace_gone(e: &TuneError) -> bool {
    matches!(
        e,
        TuneError::Netns(NetnsError::NotFound { .. })
            | TuneError::Sysctl(SysctlError::Netns(NetnsError::NotFound { .. }))
            | TuneError::Route(RouteError::Netns(NetnsError::NotFound { .. }))
    )
}

fn undo(c: &Change) -> Result<(), TuneError> {
    match c {
        Change::Sysctl {
            netns,
            key,
            previous,
        } => Ok(sysctl::write(netns.as_deref(), key, previous)?),
        Change::RouteRtoMin {
            netns,
            prefix,
            table,
            previous_ms,
            previous_locked,
        } => {
            let (ip, len) =
                parse_prefix(prefix).ok_or_else(|| RouteError::NoRoute(prefix.clone()))?;
            let r = route::get_exact(netns.as_deref(), ip, len, *table)?;
            let previous = previous_ms.map(|ms| RtoMin {
                ms,
                locked: *previous_locked,
            });
            Ok(route::set_rto_min(netns.as_deref(), &r, previous)?)
        }
        Change::NftTable {
            netns,
            family,
            name,
        } => delete_nft_table(netns.as_deref(), family, name),
        Change::PassiveTc { .. } => {
            let a = passive_record(c).expect("a PassiveTc change");
            super::passive_bpf::revert(&a).map_err(|msg| TuneError::PassiveTc { msg })
        }
        Change::SynRtoAttach { pin_dir, cgroup } => {
            let s = super::syn_rto::SynRto::at(pin_dir);
            if !s.is_attached() {
                return Ok(());
            }
            Ok(s.detach(std::path::Path::new(cgroup))?)
        }
    }
}

fn passive_change(a: &super::passive_bpf::AttachRecord) -> Change {
    Change::PassiveTc {
        netns: a.netns.clone(),
        interface: a.interface.clone(),
        mode: a.mode.name().into(),
        created_qdisc: a.created_qdisc,
        pid: a.pid,
    }
}

fn passive_record(c: &Change) -> Option<super::passive_bpf::AttachRecord> {
    use super::passive_bpf::{AttachMode, AttachRecord};
    match c {
        Change::PassiveTc {
            netns,
            interface,
            mode,
            created_qdisc,
            pid,
        } => Some(AttachRecord {
            netns: netns.clone(),
            interface: interface.clone(),
            mode: if mode == "tcx" {
                AttachMode::Tcx
            } else {
                AttachMode::Clsact
            },
            created_qdisc: *created_qdisc,
            pid: *pid,
        }),
        _ => None,
    }
}

/// The in-kernel passive engine records its attachments here, under this journal's
/// owner, before it makes them.
impl super::passive_bpf::AttachJournal for Journal {
    fn record(&self, a: &super::passive_bpf::AttachRecord) -> Result<(), String> {
        Journal::record(self, passive_change(a))
            .map(drop)
            .map_err(|e| crate::error_chain(&e))
    }

    fn forget(&self, a: &super::passive_bpf::AttachRecord) {
        if let Err(e) = Journal::forget(self, &passive_change(a)) {
            eprintln!("rttlab: {}", crate::error_chain(&e));
        }
    }

    fn qdisc_added_by_another_run(&self, a: &super::passive_bpf::AttachRecord) -> bool {
        let here = if a.netns.is_none() {
            super::netns::current()
        } else {
            None
        };
        self.all_entries().is_ok_and(|all| {
            all.iter().any(|e| {
                e.netns_id == here
                    && matches!(&e.change, Change::PassiveTc {
                        netns, interface, mode, created_qdisc: true, pid
                    } if *netns == a.netns && *interface == a.interface
                        && mode == "clsact" && *pid != a.pid)
            })
        })
    }
}

/// Remove an nftables table with `nft`; one that is already gone is fine.
fn delete_nft_table(netns: Option<&str>, family: &str, name: &str) -> Result<(), TuneError> {
    let table = format!("{family} {name}");
    let out = super::netns::run_in(netns, || {
        std::process::Command::new("nft")
            .args(["delete", "table", family, name])
            .output()
    })?
    .map_err(|e| TuneError::Nft {
        table: table.clone(),
        msg: format!("{} (is nftables installed?)", crate::error_chain(&e)),
    })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || stderr.contains("No such file or directory") {
        Ok(())
    } else {
        Err(TuneError::Nft {
            table,
            msg: stderr.trim().to_owned(),
        })
    }
}

/// Record an nftables table about to be created, so that a crash leaves it to
/// `rttlab tune revert --all`.
///
/// # Errors
/// The journal could not be written.
pub fn record_nft_table(
    j: &Journal,
    netns: Option<&str>,
    family: &str,
    name: &str,
) -> Result<(), TuneError> {
    j.record(Change::NftTable {
        netns: netns.map(Into::into),
        family: family.into(),
        name: name.into(),
    })
    .map(drop)
}

/// Attach the sock_ops program, journalled.
///
/// # Errors
/// As [`super::syn_rto::SynRto::attach`], or the journal failed.
pub fn attach_syn_rto(
    j: &Journal,
    s: &super::syn_rto::SynRto,
    cgroup: &std::path::Path,
) -> Result<(), TuneError> {
    let c = Change::SynRtoAttach {
        pin_dir: s.pin_dir.display().to_string(),
        cgroup: cgroup.display().to_string(),
    };
    j.journalled(c, || Ok(s.attach(cgroup)?))
}

/// Detach the sock_ops program and forget its journal entry.
///
/// # Errors
/// As [`super::syn_rto::SynRto::detach`].
pub fn detach_syn_rto(
    j: &Journal,
    s: &super::syn_rto::SynRto,
    cgroup: &std::path::Path,
) -> Result<(), TuneError> {
    let pin = s.pin_dir.display().to_string();
    j.revert(|c| matches!(c, Change::SynRtoAttach { pin_dir, .. } if *pin_dir == pin))?;
    if s.is_attached() {
        s.detach(cgroup)?;
    }
    Ok(())
}

/// `ADDR/LEN` → parts.
pub fn parse_prefix(s: &str) -> Option<(IpAddr, u8)> {
    let (a, l) = s.split_once('/')?;
    Some((a.parse().ok()?, l.parse().ok()?))
}

/// The most rto_min can be: `TCP_RTO_MAX` (include/net/tcp.h), 120 s.
pub const RTO_MIN_MAX: std::time::Duration = std::time::Duration::from_secs(120);

/// An rto_min the kernel would not take as asked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RtoMinError {
    /// Zero, or more than [`RTO_MIN_MAX`].
    #[error("rto_min must be more than 0 and at most 120 s")]
    OutOfRange,
    /// A route's `RTAX_RTO_MIN` is in whole milliseconds.
    #[error("a route's rto_min is whole milliseconds; {0:?} is not")]
    NotWholeMs(std::time::Duration),
    /// More milliseconds than the attribute holds.
    #[error("rto_min {0:?} is too large for a route")]
    TooLarge(std::time::Duration),
}

/// `value` as an rto_min: more than 0 and at most [`RTO_MIN_MAX`].
///
/// # Errors
/// [`RtoMinError::OutOfRange`].
pub fn check_rto_min(value: std::time::Duration) -> Result<(), RtoMinError> {
    if value.is_zero() || value > RTO_MIN_MAX {
        return Err(RtoMinError::OutOfRange);
    }
    Ok(())
}

/// `value` as a route's rto_min, ms (`RTAX_RTO_MIN`, whole milliseconds).
///
/// # Errors
/// Out of range, not whole milliseconds, or too large.
pub fn route_rto_min_ms(value: std::time::Duration) -> Result<u32, RtoMinError> {
    check_rto_min(value)?;
    if value.subsec_nanos() % 1_000_000 != 0 {
        return Err(RtoMinError::NotWholeMs(value));
    }
    u32::try_from(value.as_millis()).map_err(|_| RtoMinError::TooLarge(value))
}

/// The route `--route DEST` names: for an address, the route the kernel would use for
/// it (`ip route get fibmatch`: the local table and policy routing included); for a
/// prefix, that route of the main table.
///
/// # Errors
/// `dest` is neither, or no route matches.
pub fn route_for(netns: Option<&str>, dest: &str) -> Result<route::Route, TuneError> {
    Ok(match parse_prefix(dest) {
        Some((ip, len)) => route::find(&route::list(netns)?, ip, Some(len))?,
        None => route::lookup(
            netns,
            dest.parse()
                .map_err(|_| TuneError::NotAnAddress(dest.to_string()))?,
        )?,
    })
}

/// Set a sysctl, journalled. Returns the previous value.
///
/// # Errors
/// Missing sysctl, refused value, journal failure.
pub fn set_sysctl(
    j: &Journal,
    netns: Option<&str>,
    key: &str,
    value: &str,
) -> Result<String, TuneError> {
    let previous = sysctl::read(netns, key)?;
    let c = Change::Sysctl {
        netns: netns.map(Into::into),
        key: key.into(),
        previous: previous.clone(),
    };
    j.journalled(c, || Ok(sysctl::write(netns, key, value)?))?;
    Ok(previous)
}

/// Set (or remove) a route's rto_min (locked), journalled. Returns the previous
/// value, locked or not.
///
/// # Errors
/// Refused replace, a route a replace would change otherwise, journal failure.
pub fn set_route_rto_min(
    j: &Journal,
    netns: Option<&str>,
    r: &route::Route,
    ms: Option<u32>,
) -> Result<Option<RtoMin>, TuneError> {
    let previous = r.rto_min();
    let c = Change::RouteRtoMin {
        netns: netns.map(Into::into),
        prefix: r.prefix(),
        table: r.table,
        previous_ms: previous.map(|p| p.ms),
        previous_locked: previous.is_some_and(|p| p.locked),
    };
    let new = ms.map(|ms| RtoMin { ms, locked: true });
    j.journalled(c, || Ok(route::set_rto_min(netns, r, new)?))?;
    Ok(previous)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_keeps_the_original_value_and_forgets_what_was_reverted() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::at(dir.path().join("tune.json"));
        let a = Change::Sysctl {
            netns: Some("rttlab-gone".into()),
            key: "net.ipv4.tcp_rto_min_us".into(),
            previous: "200000".into(),
        };
        let again = Change::Sysctl {
            netns: Some("rttlab-gone".into()),
            key: "net.ipv4.tcp_rto_min_us".into(),
            previous: "5000".into(),
        };
        j.record(a.clone()).unwrap();
        j.record(again).unwrap();
        assert_eq!(j.entries().unwrap(), vec![a.clone()]);
        // Its namespace is gone: the revert has nothing left to do, and the entry goes.
        let out = j.revert(|_| true).unwrap();
        assert_eq!(out.len(), 1);
        assert!(j.entries().unwrap().is_empty());
        assert!(!dir.path().join("tune.json").exists());
        assert_eq!(
            a.revert_command(),
            "ip netns exec rttlab-gone sysctl -w net.ipv4.tcp_rto_min_us=200000"
        );
    }

    /// Witness: /proc/thread-self/ns/net, the kernel's name for this namespace. A
    /// change recorded here carries its namespace's identity; one whose namespace no
    /// process or name holds any more went with it: reported so, and forgotten.
    #[test]
    fn a_change_knows_its_unnamed_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::at(dir.path().join("tune.json"));
        let c = Change::NftTable {
            netns: None,
            family: "inet".into(),
            name: "rttlab_test".into(),
        };
        j.record(c.clone()).unwrap();
        let mut all = j.all_entries().unwrap();
        let here = super::super::netns::current().unwrap();
        assert_eq!(all[0].netns_id, Some(here));
        all[0].netns_id = Some((here.0, u64::MAX));
        j.save(&all).unwrap();
        let out = j.revert_all().unwrap();
        assert_eq!(out.len(), 1);
        assert!(
            namespace_gone(out[0].1.as_ref().unwrap_err()),
            "{:?}",
            out[0].1
        );
        assert!(j.all_entries().unwrap().is_empty());
    }

    #[test]
    fn a_corrupt_journal_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tune.json");
        std::fs::write(&p, "{nope").unwrap();
        let e = Journal::at(p).entries().unwrap_err().to_string();
        assert!(e.contains("tune.json"), "{e}");
    }

    /// Witness: the kernel's bounds, arithmetic: rto_min is in (0, TCP_RTO_MAX = 120 s];
    /// a route's is whole milliseconds.
    #[test]
    fn rto_min_is_checked_against_the_kernels_bounds() {
        use std::time::Duration;
        assert_eq!(check_rto_min(Duration::ZERO), Err(RtoMinError::OutOfRange));
        assert_eq!(
            check_rto_min(Duration::from_millis(120_001)),
            Err(RtoMinError::OutOfRange)
        );
        assert_eq!(check_rto_min(Duration::from_secs(120)), Ok(()));
        assert_eq!(check_rto_min(Duration::from_micros(5_500)), Ok(()));
        assert_eq!(
            route_rto_min_ms(Duration::from_micros(5_500)),
            Err(RtoMinError::NotWholeMs(Duration::from_micros(5_500)))
        );
        assert_eq!(route_rto_min_ms(Duration::from_millis(5)), Ok(5));
        assert_eq!(route_rto_min_ms(Duration::from_secs(120)), Ok(120_000));
    }
}
