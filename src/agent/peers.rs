//! Who the agent probes: targets from the command line, the config file and a
//! Prometheus `file_sd` file (`[{"targets": ["HOST:PORT", …], "labels": {…}}, …]`, as
//! Prometheus's `file_sd_configs` read it), and the subset a partial mesh keeps
//! (Pingmesh, SIGCOMM 2015: a full mesh inside a group such as a rack, plus a few
//! peers outside it).
//!
//! Errors in a file name the file, the line and the key: `serde_json` places every
//! error raised while deserializing, including the ones our own checks raise.

use super::levels;
use super::metrics::OWN_LABELS;
use crate::kernel::fs;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Deserializer};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

/// The peers by address, shared with the threads that name what they measure
/// (`srtt_server`, the passive layers), and how many times it was replaced: a cache of
/// what it said (the ring engine's series) knows by that count when to forget.
#[derive(Debug, Default)]
pub struct PeersByIp {
    map: RwLock<HashMap<IpAddr, Peer>>,
    version: AtomicU64,
}

impl PeersByIp {
    /// The peers now, by address.
    pub fn read(&self) -> RwLockReadGuard<'_, HashMap<IpAddr, Peer>> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Replace them all; the version moves once the new map is in.
    pub fn replace(&self, by_ip: HashMap<IpAddr, Peer>) {
        *self.map.write().unwrap_or_else(PoisonError::into_inner) = by_ip;
        self.version.fetch_add(1, Ordering::Release);
    }

    /// How many times they were replaced.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }
}

/// `peers` by every address their hosts resolve to now, for [`PeersByIp::replace`]. A
/// resolver can take seconds: this runs where a reload is read, never on the loop that
/// must notice a stop. A name that does not resolve names no address (its probes say
/// so when they try it).
pub fn by_address(peers: &[Peer]) -> HashMap<IpAddr, Peer> {
    use std::net::ToSocketAddrs;
    let mut by_ip = HashMap::new();
    for p in peers {
        if let Ok(addrs) = (p.host.as_str(), p.port).to_socket_addrs() {
            for a in addrs {
                by_ip.insert(a.ip(), p.clone());
            }
        }
    }
    by_ip
}

/// The control port of `rttlab serve` and of every agent.
pub const DEFAULT_PORT: u16 = crate::probe::control::DEFAULT_CONTROL_PORT;

/// Bytes of a host name: DNS's limit (RFC 1035, 253 in text form), with room for
/// an IPv6 literal and its zone.
pub const MAX_HOST_BYTES: usize = 253;

/// Bytes of a label's name or value from file_sd. Every series of a peer repeats its
/// labels (some fifty series a peer): an 85 KB label once made an 803 MB exposition,
/// and 16 labels of 256-byte names and values on 1 000 peers a 425 MB one.
/// Prometheus itself has no limit by default; its `label_value_length_limit` is
/// what a scrape config sets, and a rack, zone or team name fits in far less.
pub const MAX_LABEL_BYTES: usize = 128;

/// Labels a file_sd group may give its peers.
pub const MAX_LABELS: usize = 16;

/// Bytes of all of a group's label names and values together: at the default
/// `--max-peers` (5 000), at most some 130 MB of labels in an exposition, beside
/// ~40 MB without any.
pub const MAX_LABELS_BYTES: usize = 512;

/// What is wrong with a target, a label, a mesh, a file_sd file or the config file.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// `[` without its `]`.
    #[error("target {0:?}: unclosed '['")]
    UnclosedBracket(String),
    /// Something other than `:PORT` after `[V6]`.
    #[error("target {0:?}: expected :PORT after ']'")]
    AfterBracket(String),
    /// An empty host, or one with white space.
    #[error("target {0:?}: no host")]
    NoHost(String),
    /// A host longer than DNS allows ([`MAX_HOST_BYTES`]).
    #[error("target's host of {0} bytes: a host name has at most {MAX_HOST_BYTES}")]
    HostTooLong(usize),
    /// A port that is not a number in 1–65535.
    #[error("target {target:?}: port {port:?} is not in 1-65535")]
    BadPort {
        /// The target as given.
        target: String,
        /// Its port part.
        port: String,
    },
    /// Not `[a-zA-Z_][a-zA-Z0-9_]*`.
    #[error("label {0:?} is not a Prometheus label name")]
    NotALabelName(String),
    /// `__…`.
    #[error("label {0:?}: names starting with __ are Prometheus's own")]
    ReservedLabel(String),
    /// One of the labels the agent sets itself.
    #[error("label {0:?} is set by the agent itself")]
    OwnLabel(String),
    /// `random:K` with K not a number.
    #[error("random:{0}: not a number of peers")]
    RandomCount(String),
    /// `levels:…` with a `--self` target the peers list does not hold.
    #[error("--mesh levels: this host ({0}) is not in the peers list, so it has no labels to place it by (is --self the target as the list writes it, with its port?)")]
    SelfNotListed(String),
    /// `per-group:K` with K not a number of at least 1.
    #[error("per-group:{0}: not a number of peers of at least 1")]
    PerGroupCount(String),
    /// A `--mesh` that is none of the forms.
    #[error("{0:?}: give full, group:LABEL, random:K, group:LABEL,random:K or levels:LABEL/LABEL/…[,per-group:K (default 1)][,rotate:DURATION of 1m or more]")]
    MeshSyntax(String),
    /// `random:0` alone.
    #[error("{0:?} selects no peer")]
    EmptyMesh(String),
    /// `group:LABEL` or `levels:…` without knowing which target is this host.
    #[error("--mesh by label {0}: this host is not among the targets (give --self TARGET)")]
    SelfUnknown(String),
    /// `group:LABEL` or `levels:…` for a host without that label.
    #[error("--mesh by label {label}: this host ({target}) has no label {label:?}")]
    SelfUnlabelled {
        /// The group's label.
        label: String,
        /// This host's target.
        target: String,
    },
    /// The file could not be read (see [`fs::read_text`]).
    #[error(transparent)]
    Read(#[from] fs::FileError),
    /// A file_sd file that is not what Prometheus reads, with the line and key.
    #[error(transparent)]
    FileSd(#[from] serde_json::Error),
    /// The config file is not TOML or has an unknown key.
    #[error("{}", match line { Some(l) => format!("line {l}: {msg}"), None => msg.clone() })]
    Config {
        /// Where, when the parser knows.
        line: Option<usize>,
        /// The parser's message.
        msg: String,
    },
    /// One of the above in file `path`.
    #[error("{}", path.display())]
    InFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong in it.
        #[source]
        source: Box<PeerError>,
    },
}

/// A peer: where it is, the name its series carry, and its own labels.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Peer {
    /// `HOST:PORT` as given (the port added when missing): where its probe server is.
    pub target: String,
    /// The `peer` label: the `instance` Prometheus gives the peer's own agent
    /// (`HOST:9812`, see [`Peer::named_as_instance`]), so that its series join the
    /// peer's by value; the target until named so.
    pub name: String,
    /// The host as given (a name or an address, without brackets); resolved when
    /// probed.
    pub host: String,
    /// The probe server's port; [`DEFAULT_PORT`] when the target names none.
    pub port: u16,
    /// Extra labels from file_sd, sorted by name.
    pub labels: Vec<(String, String)>,
}

impl levels::Placed for Peer {
    fn target(&self) -> &str {
        &self.target
    }
    fn label(&self, name: &str) -> Option<&str> {
        Peer::label(self, name)
    }
}

impl Peer {
    /// `HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6 address.
    ///
    /// # Errors
    /// Empty host, or a port that is not a number in 1–65535.
    pub fn parse(s: &str, labels: Vec<(String, String)>) -> Result<Self, PeerError> {
        let s = s.trim();
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, after) = rest
                .split_once(']')
                .ok_or_else(|| PeerError::UnclosedBracket(s.into()))?;
            match after.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None if after.is_empty() => (h, None),
                None => return Err(PeerError::AfterBracket(s.into())),
            }
        } else if s.parse::<std::net::Ipv6Addr>().is_ok() {
            (s, None)
        } else {
            match s.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (s, None),
            }
        };
        if host.is_empty() || host.contains(char::is_whitespace) {
            return Err(PeerError::NoHost(s.into()));
        }
        if host.len() > MAX_HOST_BYTES {
            return Err(PeerError::HostTooLong(host.len()));
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => {
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| PeerError::BadPort {
                        target: s.into(),
                        port: p.into(),
                    })?
            }
        };
        let target = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Self {
            name: target.clone(),
            target,
            host: host.to_string(),
            port,
            labels,
        })
    }

    /// Name the peer as Prometheus names its agent's metrics endpoint when it runs
    /// as this agent does: a peer on this agent's own probe port (`probe_port`: a
    /// fleet on one configuration) is `HOST:metrics_port`, `HOST:9812` by default,
    /// the peer's `instance`. A peer on another port keeps its target as its name,
    /// which is then never ambiguous.
    #[must_use]
    pub fn named_as_instance(mut self, probe_port: u16, metrics_port: u16) -> Self {
        if self.port == probe_port {
            self.name = if self.host.contains(':') {
                format!("[{}]:{metrics_port}", self.host)
            } else {
                format!("{}:{metrics_port}", self.host)
            };
        }
        self
    }

    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A Prometheus label name that the agent does not set itself.
///
/// # Errors
/// Not `[a-zA-Z_][a-zA-Z0-9_]*`, reserved (`__…`), or one of the agent's own.
pub fn check_label_name(k: &str) -> Result<(), PeerError> {
    let ok = k
        .bytes()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && k.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    if !ok {
        return Err(PeerError::NotALabelName(k.into()));
    }
    if k.starts_with("__") {
        return Err(PeerError::ReservedLabel(k.into()));
    }
    if OWN_LABELS.contains(&k) {
        return Err(PeerError::OwnLabel(k.into()));
    }
    Ok(())
}

/// One group of a file_sd file.
struct Group(Vec<Peer>);

impl<'de> Deserialize<'de> for Group {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(deserialize_with = "labels")]
            #[serde(default)]
            labels: Vec<(String, String)>,
            targets: Vec<Target>,
        }
        let raw = Raw::deserialize(d)?;
        Ok(Group(
            raw.targets
                .into_iter()
                .map(|t| Peer {
                    labels: raw.labels.clone(),
                    ..t.0
                })
                .collect(),
        ))
    }
}

/// One target, checked where it stands (so an error points at its line).
struct Target(Peer);

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Peer::parse(&s, Vec::new())
            .map(Target)
            .map_err(|e| serde::de::Error::custom(format!("targets: {e}")))
    }
}

fn labels<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    let m = BTreeMap::<String, String>::deserialize(d)?;
    if m.len() > MAX_LABELS {
        return Err(serde::de::Error::custom(format!(
            "labels: {} labels, at most {MAX_LABELS}",
            m.len()
        )));
    }
    let total: usize = m.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_LABELS_BYTES {
        return Err(serde::de::Error::custom(format!(
            "labels: {total} bytes of names and values, at most {MAX_LABELS_BYTES} (every series repeats them)"
        )));
    }
    for (k, v) in &m {
        if k.len() > MAX_LABEL_BYTES || v.len() > MAX_LABEL_BYTES {
            return Err(serde::de::Error::custom(format!(
                "labels: label {:?}: {} bytes, at most {MAX_LABEL_BYTES} for a name or a value",
                k.chars().take(32).collect::<String>(),
                k.len().max(v.len())
            )));
        }
        check_label_name(k).map_err(|e| serde::de::Error::custom(format!("labels: {e}")))?;
    }
    Ok(m.into_iter().collect())
}

/// Read a file_sd JSON file: every target of every group, with its group's labels.
/// Only a regular file of at most [`fs::CONFIG_MAX_BYTES`] is read (a symlink is
/// followed to one): a FIFO or /dev/zero would stall or grow the agent.
///
/// # Errors
/// Unreadable, not a regular file, too large or malformed: the message names the
/// file, and the line and key.
pub fn read_file_sd(path: &Path) -> Result<Vec<Peer>, PeerError> {
    let text = fs::read_text(path, "peers file", fs::CONFIG_MAX_BYTES)?;
    parse_file_sd(&text).map_err(|e| PeerError::InFile {
        path: path.to_owned(),
        source: Box::new(e),
    })
}

/// [`read_file_sd`] on text.
///
/// # Errors
/// Malformed, with the line and key.
pub fn parse_file_sd(text: &str) -> Result<Vec<Peer>, PeerError> {
    let groups: Vec<Group> = serde_json::from_str(text)?;
    Ok(groups.into_iter().flat_map(|g| g.0).collect())
}

/// Which peers a host probes.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Mesh {
    /// Only peers whose label has this host's value (a full mesh inside the group);
    /// `None`: every peer.
    pub group: Option<String>,
    /// Plus this many peers outside the group, chosen at random (deterministically
    /// for a host and a peer list).
    pub random: usize,
    /// `levels:A/B/C`: a hierarchy of labels, innermost first (see
    /// [`super::levels`]); empty: none.
    pub levels: Vec<String>,
    /// `per-group:K`: with levels, the peers probed in each sibling group.
    pub per_group: usize,
    /// `rotate:DURATION`: with levels, how long an epoch lasts (the choice moves on
    /// at each); `None`: never (epoch 0).
    pub rotate: Option<std::time::Duration>,
}

impl std::str::FromStr for Mesh {
    type Err = PeerError;
    /// `full`, `group:LABEL`, `random:K`, `group:LABEL,random:K`, or
    /// `levels:A/B/…[,per-group:K][,rotate:DURATION]`.
    fn from_str(s: &str) -> Result<Self, PeerError> {
        let mut m = Self {
            per_group: 1,
            ..Self::default()
        };
        if s == "full" {
            return Ok(Self::default());
        }
        let mut per_group = false;
        for part in s.split(',') {
            match part.split_once(':') {
                Some(("group", l)) => {
                    check_label_name(l)?;
                    m.group = Some(l.to_string());
                }
                Some(("random", k)) => {
                    m.random = k.parse().map_err(|_| PeerError::RandomCount(k.into()))?;
                }
                Some(("levels", ls)) => {
                    for l in ls.split('/') {
                        check_label_name(l)?;
                        if m.levels.iter().any(|x| x == l) {
                            return Err(PeerError::MeshSyntax(s.into()));
                        }
                        m.levels.push(l.to_string());
                    }
                }
                Some(("per-group", k)) => {
                    m.per_group = k
                        .parse()
                        .ok()
                        .filter(|&k| k > 0)
                        .ok_or_else(|| PeerError::PerGroupCount(k.into()))?;
                    per_group = true;
                }
                Some(("rotate", d)) => {
                    // Each epoch re-plans through a reload (the peers file read
                    // again): a minute at least.
                    let d = humantime::parse_duration(d)
                        .ok()
                        .filter(|d| d.as_secs() >= 60)
                        .ok_or_else(|| PeerError::MeshSyntax(s.into()))?;
                    m.rotate = Some(d);
                }
                _ => return Err(PeerError::MeshSyntax(s.into())),
            }
        }
        let levelled = !m.levels.is_empty();
        if levelled && (m.group.is_some() || m.random > 0)
            || !levelled && (per_group || m.rotate.is_some())
        {
            return Err(PeerError::MeshSyntax(s.into()));
        }
        if !levelled && m.group.is_none() && m.random == 0 {
            return Err(PeerError::EmptyMesh(s.into()));
        }
        Ok(m)
    }
}

impl Mesh {
    /// The epoch at `unix_s` seconds since the epoch: 0 unless it rotates.
    pub fn epoch(&self, unix_s: u64) -> u64 {
        self.rotate.map_or(0, |r| unix_s / r.as_secs().max(1))
    }

    /// The peers `me` probes out of `all` (which may include `me`) at `epoch`: with
    /// levels, by [`super::levels::choose`]; with no group every other peer, else
    /// the other members of `me`'s group; then `random` of the rest, drawn with a
    /// seed made from `me`'s target so that every reload of the same list keeps the
    /// same peers. Sorted and without duplicates.
    ///
    /// # Errors
    /// A group or levels are asked for but `me` is unknown or lacks a label.
    pub fn select(
        &self,
        all: &[Peer],
        me: Option<&Peer>,
        epoch: u64,
    ) -> Result<Vec<Peer>, PeerError> {
        let mut others: Vec<Peer> = all
            .iter()
            .filter(|p| me.is_none_or(|m| p.target != m.target))
            .cloned()
            .collect();
        others.sort();
        others.dedup_by(|a, b| a.target == b.target);
        if !self.levels.is_empty() {
            let first = self.levels[0].clone();
            let me = me.ok_or(PeerError::SelfUnknown(first))?;
            // Its labels are the list's: a --self the list lacks has none.
            if !all.iter().any(|p| p.target == me.target) {
                return Err(PeerError::SelfNotListed(me.target.clone()));
            }
            let chosen = levels::choose(&self.levels, self.per_group, epoch, &others, me).map_err(
                |levels::Unlabelled(label)| PeerError::SelfUnlabelled {
                    label,
                    target: me.target.clone(),
                },
            )?;
            return Ok(chosen.into_iter().cloned().collect());
        }
        let (mut chosen, rest): (Vec<Peer>, Vec<Peer>) = match &self.group {
            None if self.random == 0 => return Ok(others),
            None => (Vec::new(), others),
            Some(label) => {
                let me = me.ok_or_else(|| PeerError::SelfUnknown(label.clone()))?;
                let mine = me.label(label).ok_or_else(|| PeerError::SelfUnlabelled {
                    label: label.clone(),
                    target: me.target.clone(),
                })?;
                others
                    .into_iter()
                    .partition(|p| p.label(label) == Some(mine))
            }
        };
        let seed = me.map_or(0, |m| fnv(m.target.as_bytes()));
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut rest = rest;
        rest.shuffle(&mut rng);
        chosen.extend(rest.into_iter().take(self.random));
        chosen.sort();
        Ok(chosen)
    }
}

/// FNV-1a: a stable hash (std's is seeded per process).
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The agent's config file (TOML); every key is optional and a flag given on the
/// command line wins.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `peers`: targets, `HOST[:PORT]` each; probed together with the `--peer` ones
    /// (added to them, not replaced by them).
    pub peers: Option<Vec<String>>,
    /// `peers_file`: a Prometheus file_sd JSON file of peers, as `--peers-file`.
    pub peers_file: Option<std::path::PathBuf>,
    /// `probes`: probe names, as `--probes` (`icmp`, `tcp_rr`, `udp_rr`, `tcp_crr`).
    pub probes: Option<Vec<String>>,
    /// `interval`: a duration such as `"1s"`, as `--interval`; parsed by the CLI.
    pub interval: Option<String>,
    /// `timeout`: a duration such as `"10s"`, as `--timeout`; parsed by the CLI.
    pub timeout: Option<String>,
    /// `mesh`: which peers to probe, as `--mesh` (`full`, `group:LABEL`, `random:K`).
    pub mesh: Option<String>,
    /// `buckets`: histogram buckets `MIN:MAX:PER_DECADE`, as `--buckets`.
    pub buckets: Option<String>,
    /// `self`: this host's target in the peers list, as `--self`.
    #[serde(rename = "self")]
    pub self_target: Option<String>,
}

/// Read the config file (a regular file of at most [`fs::CONFIG_MAX_BYTES`]).
///
/// # Errors
/// Unreadable, not a regular file, too large, not TOML, or an unknown key: the message
/// names the file, and the line and key.
pub fn read_config(path: &Path) -> Result<ConfigFile, PeerError> {
    let text = fs::read_text(path, "config file", fs::CONFIG_MAX_BYTES)?;
    parse_config(&text).map_err(|e| PeerError::InFile {
        path: path.to_owned(),
        source: Box::new(e),
    })
}

/// [`read_config`] on text.
///
/// # Errors
/// As [`read_config`].
pub fn parse_config(text: &str) -> Result<ConfigFile, PeerError> {
    toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| {
            text.as_bytes()[..s.start.min(text.len())]
                .iter()
                .filter(|&&c| c == b'\n')
                .count()
                + 1
        });
        PeerError::Config {
            line,
            msg: e.message().trim().to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_take_the_default_port_and_bracket_v6() {
        let p = Peer::parse("db1", vec![]).unwrap();
        assert_eq!((p.target.as_str(), p.port), ("db1:12866", 12866));
        assert_eq!(
            Peer::parse("10.0.0.1:9000", vec![]).unwrap().target,
            "10.0.0.1:9000"
        );
        assert_eq!(
            Peer::parse("[fd00::1]:9", vec![]).unwrap().target,
            "[fd00::1]:9"
        );
        assert_eq!(
            Peer::parse("fd00::1", vec![]).unwrap().target,
            "[fd00::1]:12866"
        );
        for bad in ["", ":80", "h:0", "h:x", "[::1", "[::1]x"] {
            assert!(Peer::parse(bad, vec![]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_peer_on_the_fleets_port_is_named_as_its_instance() {
        // Witness: Prometheus's own naming of a scrape target, `instance` = the
        // target's HOST:PORT as written (brackets kept for IPv6).
        let named = |t: &str| {
            Peer::parse(t, vec![])
                .unwrap()
                .named_as_instance(12866, 9812)
                .name
        };
        assert_eq!(named("db1"), "db1:9812");
        assert_eq!(named("[fd00::1]:12866"), "[fd00::1]:9812");
        assert_eq!(named("db1:13000"), "db1:13000");
    }

    /// Witness: Prometheus's file_sd format (documentation example shape).
    /// Witness: the error, placed by serde_json at the group's line. A label value
    /// of 129 bytes, 17 labels, or 612 bytes of labels in all, is refused; 128 bytes
    /// are taken.
    #[test]
    fn labels_are_bounded_in_size_and_number() {
        let group =
            |labels: &str| format!("[\n{{\"targets\": [\"a\"], \"labels\": {{{labels}}}}}\n]");
        let at = |n: usize| format!("\"rack\": \"{}\"", "r".repeat(n));
        assert_eq!(
            parse_file_sd(&group(&at(128))).unwrap()[0].labels[0]
                .1
                .len(),
            128
        );
        let e = parse_file_sd(&group(&at(129))).unwrap_err().to_string();
        assert!(
            e.contains("129 bytes, at most 128") && e.contains("line 2"),
            "{e}"
        );
        let wide: Vec<String> = (0..6)
            .map(|i| format!("\"l{i}\": \"{}\"", "v".repeat(100)))
            .collect();
        let e = parse_file_sd(&group(&wide.join(",")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("612 bytes of names and values, at most 512"),
            "{e}"
        );
        let many: Vec<String> = (0..17).map(|i| format!("\"l{i}\": \"v\"")).collect();
        let e = parse_file_sd(&group(&many.join(",")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("17 labels, at most 16"), "{e}");
        let e = Peer::parse(&format!("{}:1", "h".repeat(254)), Vec::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("host of 254 bytes: a host name has at most 253"),
            "{e}"
        );
    }

    #[test]
    fn file_sd_groups_carry_their_labels() {
        let text = r#"[
  {"targets": ["a:12866", "b"], "labels": {"zone": "z1", "rack": "r1"}},
  {"targets": ["c:1"]}
]"#;
        let p = parse_file_sd(text).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[1].target, "b:12866");
        assert_eq!(p[1].label("rack"), Some("r1"));
        assert_eq!(p[0].labels[0].0, "rack", "sorted by name");
        assert!(p[2].labels.is_empty());
    }

    #[test]
    fn bad_file_sd_names_line_and_key() {
        let cases = [
            ("[\n {\"targets\": [\"a:99999\"]}\n]", "line 2", "targets"),
            (
                "[\n {\"targets\": [\"a\"],\n  \"labels\": {\"peer\": \"x\"}}\n]",
                "line 3",
                "peer",
            ),
            (
                "[\n {\"targets\": [\"a\"],\n  \"labels\": {\"1x\": \"x\"}}\n]",
                "line 3",
                "1x",
            ),
            ("[\n {\"target\": [\"a\"]}\n]", "line 2", "target"),
            ("[\n {\"targets\": [\"a\"]\n", "line 3", ""),
        ];
        for (text, line, key) in cases {
            let e = parse_file_sd(text).unwrap_err().to_string();
            assert!(e.contains(line) && e.contains(key), "{text:?}: {e}");
        }
    }

    #[test]
    fn config_errors_name_line_and_key() {
        let ok =
            parse_config("peers = [\"a\", \"b:1\"]\ninterval = \"2s\"\nself = \"a\"\n").unwrap();
        assert_eq!(ok.peers.unwrap().len(), 2);
        assert_eq!(ok.self_target.as_deref(), Some("a"));
        let e = parse_config("interval = \"1s\"\n\nintervall = \"2s\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("intervall"), "{e}");
        let e = parse_config("peers = \"a\"\n").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }

    fn fleet(n: usize) -> Vec<Peer> {
        (0..n)
            .map(|i| {
                Peer::parse(
                    &format!("h{i:03}:1"),
                    vec![("rack".into(), format!("r{}", i % 10))],
                )
                .unwrap()
            })
            .collect()
    }

    /// Witness: arithmetic — 100 hosts in 10 racks of 10: 9 rack mates + 5 others.
    #[test]
    fn a_group_mesh_is_full_inside_the_group_plus_k_outside() {
        let all = fleet(100);
        let me = &all[7];
        let m: Mesh = "group:rack,random:5".parse().unwrap();
        let sel = m.select(&all, Some(me), 0).unwrap();
        assert_eq!(sel.len(), 14);
        let mates: Vec<_> = sel
            .iter()
            .filter(|p| p.label("rack") == Some("r7"))
            .collect();
        assert_eq!(mates.len(), 9);
        assert!(sel.iter().all(|p| p.target != me.target));
        // Deterministic for the host, whatever order the list comes in.
        let mut shuffled = all.clone();
        shuffled.reverse();
        assert_eq!(m.select(&shuffled, Some(me), 0).unwrap(), sel);
        // Another host draws other outsiders.
        let other = m.select(&all, Some(&all[17]), 0).unwrap();
        assert_ne!(
            other
                .iter()
                .filter(|p| p.label("rack") != Some("r7"))
                .collect::<Vec<_>>(),
            sel.iter()
                .filter(|p| p.label("rack") != Some("r7"))
                .collect::<Vec<_>>()
        );
        assert_eq!(Mesh::default().select(&all, Some(me), 0).unwrap().len(), 99);
        assert!(m.select(&all, None, 0).is_err());
        assert!("random:0".parse::<Mesh>().is_err());
    }

    /// The levelled forms, and those that mix levels with group or random, repeat a
    /// label or give an empty count or epoch, refused by name; this host without a
    /// label of the levels is told which. Witness: the forms' own arithmetic (epochs of
    /// an hour).
    #[test]
    fn levelled_meshes_parse_and_mixed_forms_are_refused() {
        for bad in [
            "levels:rack,group:zone",
            "levels:rack,random:2",
            "per-group:2",
            "rotate:1h",
            "levels:rack/rack",
            "levels:rack,per-group:0",
            "levels:rack,rotate:0s",
            "levels:rack,rotate:59s",
            "levels:",
        ] {
            assert!(bad.parse::<Mesh>().is_err(), "{bad}");
        }
        let m: Mesh = "levels:rack/zone,per-group:3,rotate:1h".parse().unwrap();
        assert_eq!((m.levels.len(), m.per_group), (2, 3));
        assert_eq!((m.epoch(7_199), m.epoch(7_200)), (1, 2));
        let all = fleet(10);
        let e = m.select(&all, Some(&all[0]), 0).unwrap_err().to_string();
        assert!(e.contains("has no label \"zone\""), "{e}");
        assert!(m.select(&all, None, 0).is_err());
    }
}
