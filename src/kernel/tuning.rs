//! Changes rttlab makes to the kernel, and their undoing.
//!
//! Every change is written to a journal (/run/rttlab/tune.json; tmpfs, so it goes with
//! a reboot exactly as the kernel state does) *before* it is applied, with the value it
//! replaces. `revert` restores recorded values newest first and forgets the entries that
//! were restored; a crash between journal and change leaves an entry whose revert is a
//! no-op. Setting the same knob twice keeps the first, original, previous value.

use super::netns::NetnsError;
use super::route::{self, RouteError};
use super::sysctl::{self, SysctlError};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::PathBuf;

/// One recorded change.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A sysctl and its value before.
    Sysctl {
        netns: Option<String>,
        key: String,
        previous: String,
    },
    /// A route's rto_min (ms) before; `None` if it had none.
    RouteRtoMin {
        netns: Option<String>,
        prefix: String,
        previous_ms: Option<u32>,
    },
    /// The sock_ops program pinned at `pin_dir`, attached to `cgroup`.
    SynRtoAttach { pin_dir: String, cgroup: String },
}

impl Change {
    /// Namespace the change was made in.
    pub fn netns(&self) -> Option<&str> {
        match self {
            Change::Sysctl { netns, .. } | Change::RouteRtoMin { netns, .. } => netns.as_deref(),
            Change::SynRtoAttach { .. } => None,
        }
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
                    ..
                },
                Change::RouteRtoMin {
                    netns: b,
                    prefix: q,
                    ..
                },
            ) => a == b && p == q,
            _ => false,
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
                previous_ms,
            } => {
                let n = netns.as_ref().map_or(String::new(), |n| format!(" -n {n}"));
                match previous_ms {
                    Some(ms) => format!("ip{n} route change {prefix} … rto_min {ms}ms"),
                    None => format!("ip{n} route change {prefix} … (without rto_min)"),
                }
            }
            Change::SynRtoAttach { pin_dir, cgroup } => format!(
                "bpftool cgroup detach {cgroup} sock_ops pinned {pin_dir}/prog && rm -r {pin_dir}"
            ),
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
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error(transparent)]
    SynRto(#[from] super::syn_rto::SynRtoError),
    /// The journal could not be read or written.
    #[error(
        "journal {path}: {msg} (fix or remove it; it records what `rttlab tune revert` restores)"
    )]
    Journal { path: String, msg: String },
}

/// A change `revert` attempted, with its outcome (the error's message if it failed).
pub type Reverted = (Change, Result<(), String>);

/// The journal file.
pub struct Journal {
    path: PathBuf,
}

impl Journal {
    /// /run/rttlab/tune.json, or `$RTTLAB_STATE_DIR/tune.json`.
    pub fn default_location() -> Self {
        Self {
            path: crate::state_dir().join("tune.json"),
        }
    }

    /// A journal at `path`.
    pub fn at(path: PathBuf) -> Self {
        Self { path }
    }

    fn err(&self, msg: impl ToString) -> TuneError {
        TuneError::Journal {
            path: self.path.display().to_string(),
            msg: msg.to_string(),
        }
    }

    /// The changes recorded, oldest first.
    ///
    /// # Errors
    /// Unreadable or corrupt journal.
    pub fn entries(&self) -> Result<Vec<Change>, TuneError> {
        match std::fs::read(&self.path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| self.err(e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(self.err(e)),
        }
    }

    fn save(&self, all: &[Change]) -> Result<(), TuneError> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| self.err(e))?;
        }
        if all.is_empty() {
            return match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(self.err(e)),
                _ => Ok(()),
            };
        }
        let tmp = self.path.with_extension("json.tmp");
        let body = serde_json::to_vec_pretty(all).map_err(|e| self.err(e))?;
        std::fs::write(&tmp, body).map_err(|e| self.err(e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| self.err(e))
    }

    /// Record `c` unless the same knob is already recorded (its first value is the
    /// original). Returns whether it was added.
    ///
    /// # Errors
    /// The journal could not be written.
    pub fn record(&self, c: Change) -> Result<bool, TuneError> {
        let mut all = self.entries()?;
        if all.iter().any(|x| x.same_target(&c)) {
            return Ok(false);
        }
        all.push(c);
        self.save(&all)?;
        Ok(true)
    }

    /// Drop an entry whose change was never made.
    fn forget(&self, c: &Change) -> Result<(), TuneError> {
        let mut all = self.entries()?;
        all.retain(|x| x != c);
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

    /// Revert the recorded changes `which` selects, newest first. Returns each with the
    /// outcome; entries that failed stay in the journal.
    ///
    /// # Errors
    /// The journal could not be read or written.
    pub fn revert(&self, which: impl Fn(&Change) -> bool) -> Result<Vec<Reverted>, TuneError> {
        let all = self.entries()?;
        let mut keep = Vec::new();
        let mut done = Vec::new();
        for c in all.into_iter().rev() {
            if !which(&c) {
                keep.push(c);
                continue;
            }
            let r = undo(&c);
            // A namespace that no longer exists took the change with it.
            if r.as_ref().is_err_and(|e| !namespace_gone(e)) {
                keep.push(c.clone());
            }
            done.push((c, r.map_err(|e| e.to_string())));
        }
        keep.reverse();
        self.save(&keep)?;
        Ok(done)
    }
}

fn namespace_gone(e: &TuneError) -> bool {
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
            previous_ms,
        } => {
            let (ip, len) =
                parse_prefix(prefix).ok_or_else(|| RouteError::NoRoute(prefix.clone()))?;
            let r = route::find(&route::list(netns.as_deref())?, ip, Some(len))?;
            Ok(route::set_rto_min(netns.as_deref(), &r, *previous_ms)?)
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

/// Set (or remove) a route's rto_min, journalled. Returns the previous value.
///
/// # Errors
/// Refused replace, journal failure.
pub fn set_route_rto_min(
    j: &Journal,
    netns: Option<&str>,
    r: &route::Route,
    ms: Option<u32>,
) -> Result<Option<u32>, TuneError> {
    let previous = r.rto_min_locked().then(|| r.rto_min_ms()).flatten();
    let c = Change::RouteRtoMin {
        netns: netns.map(Into::into),
        prefix: r.prefix(),
        previous_ms: previous,
    };
    j.journalled(c, || Ok(route::set_rto_min(netns, r, ms)?))?;
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

    #[test]
    fn a_corrupt_journal_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tune.json");
        std::fs::write(&p, "{nope").unwrap();
        let e = Journal::at(p).entries().unwrap_err().to_string();
        assert!(e.contains("tune.json"), "{e}");
    }
}
