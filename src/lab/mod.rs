//! The lab: hosts A and B in network namespaces joined through a router namespace R in
//! which a built-in link emulator forwards every frame (docs/ARCHITECTURE.md, "The lab"). This
//! machine's kernel has no netem, so the emulator is ours, as mahimahi's is.
//!
//! [`Lab::up`] builds it in-process and returns an RAII handle: dropping it stops the
//! emulator and removes every namespace, link and file. A crashed owner leaves the
//! namespaces behind; [`topology::sweep_stale`] (run by every `up`) and
//! [`topology::remove`] (`lab down`) find and remove them.

pub mod emulator;
pub mod exec;
pub mod impair;
pub mod ring;
pub mod socket;
pub mod topology;

use emulator::{Dir, EventLog, Ports, Shared};
use impair::{Blackout, ImpairmentPatch, Impairments};
use socket::{DirStatus, Reply, Request, Start, Status};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
pub use topology::{HostInfo, LabInfo};

/// A failed step of building the lab, keeping the error as its source.
pub(crate) fn setup<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    step: impl Into<String>,
) -> impl FnOnce(E) -> LabError {
    let step = step.into();
    move |e| LabError::Setup {
        step,
        source: e.into(),
    }
}

/// Errors building, reaching, changing or removing a lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A lab name [`topology::check_name`] refuses; the name as given.
    #[error("lab name {0:?} is not valid: use 1–32 of a-z, 0-9, '-' and '_'")]
    BadName(String),
    /// A lab of that name exists already: its owner still runs, or one of its
    /// namespaces is left.
    #[error(
        "lab {name:?} exists already ({detail}); remove it with `rttlab lab down --name {name}`"
    )]
    Exists {
        /// The lab name asked for.
        name: String,
        /// What was found: "its owner still runs" or "namespace … exists".
        detail: String,
    },
    /// No lab of that name was found; the name as given.
    #[error("no lab named {0:?} (see `rttlab lab list`)")]
    NoSuchLab(String),
    /// `lab up` without root: the effective uid is not 0.
    #[error("building the lab needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): run with sudo")]
    NotRoot,
    /// A step of building the lab failed; what the kernel or the file system said is
    /// its source.
    #[error("building the lab: {step}")]
    Setup {
        /// What was being done, as the message shows it ("creating namespace …").
        step: String,
        /// What the kernel or the file system said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A star of one host, or of more than the lab can address.
    #[error("building the lab failed: a star has 2 to {max} hosts, not {hosts}")]
    StarSize {
        /// Hosts asked for.
        hosts: usize,
        /// [`topology::MAX_HOSTS`].
        max: usize,
    },
    /// A fleet without a host, or of more than the lab can address or hold.
    #[error(
        "building the lab failed: a fleet has 2 to {max} hosts (zones × racks × hosts), not {hosts}, and at most 40 racks and zones together"
    )]
    FleetSize {
        /// Hosts asked for.
        hosts: usize,
        /// [`topology::MAX_FLEET_HOSTS`].
        max: usize,
    },
    /// Every lab index is taken.
    #[error("building the lab failed: {0} labs exist already")]
    TooManyLabs(usize),
    /// The emulator's thread ended before it said whether it started.
    #[error("building the lab failed: the emulator thread died")]
    EmulatorThreadDied,
    /// A step of removing the lab failed: deleting a namespace or its state directory.
    #[error("removing the lab: {step}")]
    Teardown {
        /// What was being removed, as the message shows it ("deleting namespace …").
        step: String,
        /// What the kernel or the file system said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An impairment value out of range (a probability, a zero rate or queue, a delay
    /// over 60 s).
    #[error(transparent)]
    Invalid(#[from] impair::ImpairError),
    /// The lab's control socket cannot be used: it refuses the connection, stays silent
    /// for 5 s, or answers with a reply this rttlab cannot parse; or its owner is gone.
    #[error("the lab's emulator at {path} cannot be reached, so it is not running: remove the lab with `rttlab lab down`")]
    Unreachable {
        /// The lab's control socket (`lab.sock` in its state directory).
        path: String,
        /// The I/O error, or why the reply or the lab could not be used.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The lab's process refused a request; its reason crossed the lab's socket as text.
    #[error("{0}")]
    Refused(String),
    /// A link the lab does not have.
    #[error(
        "lab {lab:?} has no link {host:?} (links are a star's hosts, lab up --hosts N, or a fleet's racks and zones, lab up --fleet)"
    )]
    NoSuchLink {
        /// The lab.
        lab: String,
        /// The link named.
        host: String,
    },
    /// `lab down` of a lab an experiment or a test holds.
    #[error("lab {lab:?} belongs to process {pid} (an experiment or test); stop that process, or use `rttlab lab down --force`")]
    NotADaemon {
        /// The lab.
        lab: String,
        /// The process that holds it.
        pid: i32,
    },
    /// The emulator's thread stopped; its error chain, kept as text because it is
    /// handed from the emulator's thread to every later request.
    #[error("the lab's emulator stopped: {0}; remove the lab with `rttlab lab down`")]
    EmulatorDied(String),
    /// The lab's process answered a request with a reply of another kind.
    #[error("the lab's process gave an unexpected reply")]
    UnexpectedReply,
    /// A lab whose process is gone: its namespaces and files stay until removed.
    #[error("left by a run that has gone: remove with `rttlab lab down --all`")]
    Abandoned,
}

/// A node of the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// Host `a` (namespace `rttlab-lab-NAME-a`); experiments run their client here.
    A,
    /// The router `r` (namespace `rttlab-lab-NAME-r`), where the link emulator forwards
    /// frames between the hosts.
    R,
    /// Host `b` (namespace `rttlab-lab-NAME-b`); experiments run their server here.
    B,
}

/// How to build a lab.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LabSpec {
    /// The lab's name (`--name`): 1–32 of `a-z 0-9 _ -`; its namespaces and state
    /// directory are named after it.
    pub name: String,
    /// Impairments of a→b and b→a.
    pub impairments: [Impairments; 2],
    /// Busy-poll instead of sleeping between frames.
    pub poll: bool,
    /// Seed of the loss and jitter draws (random when `None`).
    pub seed: Option<u64>,
    /// Where to write the event log (the lab's state directory when `None`).
    pub events: Option<PathBuf>,
    /// Marks a `lab up` daemon, which `lab down` may stop.
    pub daemon: bool,
    /// A star instead of two hosts: each host's link with its impairments (both
    /// ways), `a`'s first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub star: Vec<Impairments>,
    /// A fleet of racks and zones instead of two hosts or a star.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<Fleet>,
}

/// A fleet's shape and its uplinks' impairments (both ways), every rack's alike and
/// every zone's alike until `lab set --link` changes one.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Fleet {
    /// Zones, racks in each, hosts in each rack.
    pub shape: topology::FleetShape,
    /// Each rack's uplink into its zone.
    pub rack: Impairments,
    /// Each zone's uplink into the core.
    pub zone: Impairments,
}

/// Whether a lab whose emulator runs `links` threads busy-polls when the user did not
/// say: while the threads leave one CPU free for the hosts' own work. Polling releases
/// frames within µs of their time; sleeping in ppoll(2) is late by timer slack and, on a
/// VM, by steal (bench/RESULTS-lab.md: 9 µs median / 93 µs P99 polling; 17 µs / 145 µs
/// sleeping at no steal, 26 ms P99 at 22 % steal), but a polling thread owns its CPU
/// while the lab is up.
#[must_use]
pub fn polls_by_default(links: usize) -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    links < cpus
}

impl LabSpec {
    /// A lab named `name` with the same impairments both ways.
    pub fn new(name: &str, both: Impairments) -> Self {
        Self {
            name: name.into(),
            impairments: [both, both],
            poll: false,
            seed: None,
            events: None,
            daemon: false,
            star: Vec::new(),
            fleet: None,
        }
    }
}

struct Inner {
    info: LabInfo,
    /// One emulator per link: the two-host lab's one, or a star's per host.
    links: Vec<Arc<Shared>>,
    shutdown: AtomicBool,
}

impl Inner {
    fn status(&self) -> Status {
        let dirs = |shared: &Shared| {
            let s = shared.settings();
            let dir = |d: Dir| DirStatus {
                impairments: s.impairments[d.index()],
                blackouts: s.blackouts[d.index()].clone(),
                counters: shared.counters[d.index()].snapshot(),
            };
            (dir(Dir::A2b), dir(Dir::B2a))
        };
        let emulator = match self.failure() {
            None => "running".to_string(),
            Some(why) => why,
        };
        let (a2b, b2a) = dirs(&self.links[0]);
        let links = if self.info.hosts.is_empty() {
            Vec::new()
        } else {
            self.info
                .links()
                .into_iter()
                .zip(&self.links)
                .map(|(link, l)| {
                    let (up, down) = dirs(l);
                    socket::LinkStatus {
                        host: link.name,
                        up,
                        down,
                    }
                })
                .collect()
        };
        Status {
            info: self.info.clone(),
            emulator,
            a2b,
            b2a,
            links,
        }
    }

    /// Why an emulator stopped, if one has.
    fn failure(&self) -> Option<String> {
        self.links
            .iter()
            .find(|l| !l.running.load(Ordering::Acquire))
            .map(|l| {
                l.failure
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone()
                    .unwrap_or_else(|| "stopped".into())
            })
    }

    fn alive(&self) -> Result<(), LabError> {
        match self.failure() {
            None => Ok(()),
            Some(why) => Err(LabError::EmulatorDied(why)),
        }
    }

    /// The links a request names: host `link`'s, or every link when `None` (a
    /// fleet's every rack uplink, as `lab up` impairs them; its zones by name only).
    fn select(&self, link: Option<&str>) -> Result<Vec<&Arc<Shared>>, LabError> {
        match link {
            None => {
                let racks = self
                    .info
                    .fleet
                    .map_or(self.links.len(), |f| f.total_racks());
                Ok(self.links.iter().take(racks).collect())
            }
            Some(name) => {
                let i = self
                    .info
                    .links()
                    .iter()
                    .position(|l| l.name == name && !l.name.is_empty())
                    .ok_or_else(|| LabError::NoSuchLink {
                        lab: self.info.name.clone(),
                        host: name.into(),
                    })?;
                Ok(vec![&self.links[i]])
            }
        }
    }

    fn set(
        &self,
        link: Option<&str>,
        dirs: &[Dir],
        patch: &ImpairmentPatch,
    ) -> Result<(), LabError> {
        self.alive()?;
        let links = self.select(link)?;
        let mut changes = Vec::new();
        for shared in &links {
            let mut next = shared.settings().impairments;
            for d in dirs {
                patch.apply(&mut next[d.index()]);
                next[d.index()].validate()?;
            }
            changes.push(next);
        }
        for (shared, next) in links.into_iter().zip(changes) {
            let event = format!(
                "\"event\":\"set\",\"link\":{},\"dirs\":{},\"patch\":{},\"a2b\":{},\"b2a\":{}",
                serde_json::json!(link),
                serde_json::json!(dirs),
                serde_json::json!(patch),
                serde_json::json!(next[0]),
                serde_json::json!(next[1])
            );
            shared.update(event, |s| s.impairments = next);
        }
        Ok(())
    }

    fn blackout(
        &self,
        link: Option<&str>,
        dirs: &[Dir],
        duration_ns: u64,
        port: Option<u16>,
        start: Start,
    ) -> Result<Blackout, LabError> {
        self.alive()?;
        let links = self.select(link)?;
        let now = crate::kernel::realtime_ns();
        let start_ns = match start {
            Start::Now => now,
            Start::After { ns } => now + ns,
            Start::At { realtime_ns } => realtime_ns,
        };
        let w = Blackout {
            start_ns,
            end_ns: start_ns + duration_ns,
            port,
        };
        let event = format!(
            "\"event\":\"blackout\",\"dirs\":{},\"start_ns\":{},\"end_ns\":{},\"port\":{}",
            serde_json::json!(dirs),
            w.start_ns,
            w.end_ns,
            serde_json::json!(port)
        );
        for shared in links {
            shared.update(event.clone(), |s| {
                for d in dirs {
                    s.blackouts[d.index()].push(w);
                }
            });
        }
        Ok(w)
    }

    fn handle(&self, req: Request) -> Reply {
        let r = match req {
            Request::Status => return Reply::Status(Box::new(self.status())),
            Request::Set { link, dirs, patch } => {
                self.set(link.as_deref(), &dirs, &patch).map(|()| Reply::Ok)
            }
            Request::Blackout {
                link,
                dirs,
                duration_ns,
                port,
                start,
            } => self
                .blackout(link.as_deref(), &dirs, duration_ns, port, start)
                .map(|window| Reply::Blackout { window }),
            Request::Shutdown if self.info.daemon => {
                self.shutdown.store(true, Ordering::Release);
                Ok(Reply::Ok)
            }
            Request::Shutdown => Err(LabError::NotADaemon {
                lab: self.info.name.clone(),
                pid: self.info.owner_pid,
            }),
        };
        r.unwrap_or_else(|e| Reply::Error {
            message: crate::error_chain(&e),
        })
    }
}

/// A running lab; dropping it removes it.
pub struct Lab {
    inner: Arc<Inner>,
    emulators: Vec<std::thread::JoinHandle<()>>,
    socket_thread: Option<std::thread::JoinHandle<()>>,
    socket_stop: Arc<AtomicBool>,
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl Lab {
    /// Build the lab of `spec` and start its emulator. Labs left by dead owners are
    /// removed first.
    ///
    /// # Errors
    /// Bad name or impairments, not root, a live lab of that name, or a step the
    /// kernel refused (everything made so far is removed again).
    pub fn up(spec: &LabSpec) -> Result<Lab, LabError> {
        topology::check_name(&spec.name)?;
        for imp in spec.impairments.iter().chain(&spec.star) {
            imp.validate()?;
        }
        if spec.star.len() == 1 || spec.star.len() > topology::MAX_HOSTS {
            return Err(LabError::StarSize {
                hosts: spec.star.len(),
                max: topology::MAX_HOSTS,
            });
        }
        if let Some(f) = &spec.fleet {
            f.rack.validate()?;
            f.zone.validate()?;
            let hosts = f.shape.total_hosts();
            let links = f.shape.total_racks().saturating_add(f.shape.zones);
            if !(2..=topology::MAX_FLEET_HOSTS).contains(&hosts)
                || links > topology::MAX_FLEET_LINKS
                || !spec.star.is_empty()
            {
                return Err(LabError::FleetSize {
                    hosts,
                    max: topology::MAX_FLEET_HOSTS,
                });
            }
        }
        if !is_root() {
            return Err(LabError::NotRoot);
        }
        let registry = topology::lock_registry()?;
        topology::sweep_stale()?;
        let dir = topology::state_dir(&spec.name);
        if dir.exists() || !topology::namespaces_of(&spec.name).is_empty() {
            return Err(LabError::Exists {
                name: spec.name.clone(),
                detail: "its owner still runs".into(),
            });
        }
        std::fs::create_dir_all(&dir).map_err(setup(format!("creating {}", dir.display())))?;
        let index = topology::free_index()?;
        let (a, b, hosts) = if let Some(f) = &spec.fleet {
            let h = topology::fleet_hosts(&spec.name, index, f.shape);
            (h[0].clone(), h[1].clone(), h)
        } else if spec.star.is_empty() {
            let (a, b) = topology::hosts(&spec.name, index);
            (a, b, Vec::new())
        } else {
            let h = topology::star_hosts(&spec.name, index, spec.star.len());
            (h[0].clone(), h[1].clone(), h)
        };
        let pid = std::process::id() as i32;
        let seed = spec.seed.unwrap_or_else(|| {
            let mut b = [0u8; 8];
            let _ = getrandom::getrandom(&mut b);
            u64::from_ne_bytes(b)
        });
        let info = LabInfo {
            name: spec.name.clone(),
            index,
            owner_pid: pid,
            owner_start: topology::start_time(pid).unwrap_or(0),
            daemon: spec.daemon,
            created_unix_ns: crate::kernel::realtime_ns(),
            engine: "builtin".into(),
            poll: spec.poll,
            seed,
            a,
            b,
            hosts,
            fleet: spec.fleet.map(|f| f.shape),
            router_netns: topology::netns_name(&spec.name, 'r'),
            socket: dir.join("lab.sock"),
            events: Some(
                spec.events
                    .clone()
                    .unwrap_or_else(|| dir.join("events.jsonl")),
            ),
        };
        let write_info = || {
            serde_json::to_vec_pretty(&info)
                .map_err(setup("encoding lab.json"))
                .and_then(|j| {
                    // Written whole then renamed, so a reader never sees half of it.
                    crate::kernel::fs::write_replace(&dir.join("lab.json"), &j)
                        .map_err(setup("writing lab.json"))
                })
        };
        let written = write_info();
        drop(registry);
        let started = written.and_then(|()| {
            topology::build(&info)?;
            let links = if let Some(f) = &spec.fleet {
                let racks = std::iter::repeat_n([f.rack, f.rack], f.shape.total_racks());
                racks
                    .chain(std::iter::repeat_n([f.zone, f.zone], f.shape.zones))
                    .collect()
            } else if spec.star.is_empty() {
                vec![spec.impairments]
            } else {
                spec.star.iter().map(|&i| [i, i]).collect()
            };
            Self::start(info.clone(), &links)
        });
        match started {
            Ok(lab) => Ok(lab),
            Err(e) => {
                let _ = topology::remove(&spec.name);
                Err(e)
            }
        }
    }

    fn start(info: LabInfo, links: &[[Impairments; 2]]) -> Result<Lab, LabError> {
        let mut shared = Vec::new();
        let mut emulators = Vec::new();
        // The two-host lab's one emulator joins to-a and to-b; a star's joins each
        // host's to-X with its up-X into the hub; a fleet's each uplink's two ends.
        for (impairments, link) in links.iter().zip(info.links()) {
            let sh =
                Arc::new(Shared::new(*impairments).map_err(setup("the emulator's impairments"))?);
            let (near, far) = (link.near, link.far);
            let named = !link.name.is_empty();
            let events = info.events.as_ref().map(|p| {
                if named {
                    events_of_link(p, &link.name)
                } else {
                    p.clone()
                }
            });
            // The two-host lab keeps the seed as given (runs recorded with a seed
            // stay reproducible); each link of a star or a fleet draws from its own.
            let seed = if named {
                info.seed ^ fnv(near.as_bytes())
            } else {
                info.seed
            };
            emulators.push(spawn_emulator(
                &info,
                Arc::clone(&sh),
                (&near, &far),
                seed,
                events,
            )?);
            shared.push(sh);
        }
        let inner = Arc::new(Inner {
            info,
            links: shared,
            shutdown: AtomicBool::new(false),
        });
        let _ = std::fs::remove_file(&inner.info.socket);
        let listener = std::os::unix::net::UnixListener::bind(&inner.info.socket)
            .map_err(setup("binding the lab's socket"))?;
        let socket_stop = Arc::new(AtomicBool::new(false));
        let (i2, stop2) = (inner.clone(), socket_stop.clone());
        let socket_thread = std::thread::Builder::new()
            .name("lab-socket".into())
            .spawn(move || socket::serve(listener, &stop2, |r| i2.handle(r)))
            .map_err(setup("starting the socket thread"))?;
        Ok(Lab {
            inner,
            emulators,
            socket_thread: Some(socket_thread),
            socket_stop,
        })
    }

    /// Names, namespaces, addresses.
    pub fn info(&self) -> &LabInfo {
        &self.inner.info
    }

    /// The namespace of `node`.
    pub fn netns(&self, node: Node) -> &str {
        match node {
            Node::A => &self.inner.info.a.netns,
            Node::R => &self.inner.info.router_netns,
            Node::B => &self.inner.info.b.netns,
        }
    }

    /// Impairments, blackouts and counters now.
    pub fn status(&self) -> Status {
        self.inner.status()
    }

    /// Change impairments of `dirs`; queued frames keep their release times.
    ///
    /// # Errors
    /// Impossible values, or the emulator has stopped.
    pub fn set(&self, dirs: &[Dir], patch: &ImpairmentPatch) -> Result<(), LabError> {
        self.inner.set(None, dirs, patch)
    }

    /// Change impairments of `dirs` of one link: a star's host's, a fleet's `rackN` or
    /// `zoneN` (as [`Lab::set`]).
    ///
    /// # Errors
    /// No such link, impossible values, or the emulator has stopped.
    pub fn set_link(
        &self,
        link: &str,
        dirs: &[Dir],
        patch: &ImpairmentPatch,
    ) -> Result<(), LabError> {
        self.inner.set(Some(link), dirs, patch)
    }

    /// A blackout of star host `host`'s link (as [`Lab::blackout`]).
    ///
    /// # Errors
    /// No such host in a star, or the emulator has stopped.
    pub fn blackout_link(
        &self,
        host: &str,
        dirs: &[Dir],
        duration: std::time::Duration,
        start: Start,
    ) -> Result<Blackout, LabError> {
        self.inner.blackout(
            Some(host),
            dirs,
            crate::stats::units::ns(duration),
            None,
            start,
        )
    }

    /// The namespace of host `name` (a star's too).
    pub fn host_netns(&self, name: &str) -> Option<&str> {
        self.inner.info.host(name).map(|h| h.netns.as_str())
    }

    /// Drop every frame of `dirs` (of `port` only, if given) arriving at the router
    /// during `duration` from `start`.
    ///
    /// # Errors
    /// The emulator has stopped.
    pub fn blackout(
        &self,
        dirs: &[Dir],
        duration: std::time::Duration,
        port: Option<u16>,
        start: Start,
    ) -> Result<Blackout, LabError> {
        self.inner
            .blackout(None, dirs, crate::stats::units::ns(duration), port, start)
    }

    /// Wait until no frame has crossed the link for `quiet` (at most `max`): a fresh
    /// lab's hosts send IPv6 duplicate-address probes and MLD reports for about two
    /// seconds after their addresses come up, which would otherwise be counted with
    /// the traffic an experiment measures.
    pub fn wait_quiet(&self, quiet: std::time::Duration, max: std::time::Duration) {
        let t0 = std::time::Instant::now();
        let frames = || {
            self.inner
                .links
                .iter()
                .flat_map(|l| &l.counters)
                .map(|c| c.snapshot().rx_frames)
                .sum::<u64>()
        };
        let mut last = frames();
        let mut since = std::time::Instant::now();
        while t0.elapsed() < max && since.elapsed() < quiet {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let now = frames();
            if now != last {
                last = now;
                since = std::time::Instant::now();
            }
        }
    }

    /// Whether a `Shutdown` request arrived (daemons).
    pub fn shutdown_requested(&self) -> bool {
        self.inner.shutdown.load(Ordering::Acquire)
    }

    /// A command that runs in `node`'s namespace, with the lab's names in /etc/hosts.
    pub fn command(&self, node: Node, program: &str) -> std::process::Command {
        exec::command(self.netns(node), program)
    }

    /// Stop the emulator and remove the lab now (as dropping it does), reporting errors.
    ///
    /// # Errors
    /// Something could not be removed.
    pub fn down(mut self) -> Result<(), LabError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), LabError> {
        for l in &self.inner.links {
            l.stop();
        }
        for h in self.emulators.drain(..) {
            let _ = h.join();
        }
        if let Some(h) = self.socket_thread.take() {
            self.socket_stop.store(true, Ordering::Release);
            let _ = std::os::unix::net::UnixStream::connect(&self.inner.info.socket);
            let _ = h.join();
        }
        topology::remove(&self.inner.info.name)
    }
}

/// A star's or a fleet's event log per link: `events.jsonl` → `events-c.jsonl`,
/// `events-rack3.jsonl`.
fn events_of_link(p: &std::path::Path, host: &str) -> PathBuf {
    let stem = p.file_stem().map_or_else(
        || "events".to_string(),
        |s| s.to_string_lossy().into_owned(),
    );
    let ext = p
        .extension()
        .map_or(String::new(), |e| format!(".{}", e.to_string_lossy()));
    p.with_file_name(format!("{stem}-{host}{ext}"))
}

/// Start an emulator in the router's namespace forwarding between `near` (rx[0],
/// tx[1]) and `far` (rx[1], tx[0]).
fn spawn_emulator(
    info: &LabInfo,
    shared: Arc<Shared>,
    (near, far): (&str, &str),
    seed: u64,
    events: Option<PathBuf>,
) -> Result<std::thread::JoinHandle<()>, LabError> {
    let log = EventLog::open(events.as_deref()).map_err(setup("opening the event log"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let router = crate::kernel::netns::path_of(&info.router_netns);
    let ns =
        std::fs::File::open(&router).map_err(setup(format!("opening {}", router.display())))?;
    let sh = Arc::clone(&shared);
    let poll = info.poll;
    let (near, far) = (near.to_string(), far.to_string());
    let emulator = std::thread::Builder::new()
        .name("lab-emulator".into())
        .spawn(move || {
            use std::os::fd::AsRawFd;
            // SAFETY: setns on an open namespace file; affects only this thread.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                let e = std::io::Error::last_os_error();
                let _ = tx.send(Err(setup("entering the router namespace")(e)));
                return;
            }
            let open = || -> Result<Ports, LabError> {
                let ix = |n: &str| {
                    crate::kernel::interface::index(n)
                        .map_err(setup(format!("the index of interface {n}")))
                };
                let (ia, ib) = (ix(&near)?, ix(&far)?);
                let e = |x: crate::kernel::SyscallError| {
                    setup("opening the emulator's packet rings")(x)
                };
                Ok(Ports {
                    rx: [
                        ring::RxRing::open(ia).map_err(e)?,
                        ring::RxRing::open(ib).map_err(e)?,
                    ],
                    tx: [
                        ring::TxSocket::open(ib).map_err(e)?,
                        ring::TxSocket::open(ia).map_err(e)?,
                    ],
                })
            };
            match open() {
                Ok(mut ports) => {
                    let _ = tx.send(Ok(()));
                    emulator::run(&sh, &mut ports, log, poll, seed);
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        })
        .map_err(setup("starting the emulator's thread"))?;
    match rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(LabError::EmulatorThreadDied),
    }
    while !shared.running.load(Ordering::Acquire) && !emulator.is_finished() {
        std::thread::yield_now();
    }
    Ok(emulator)
}

/// FNV-1a, so that each link of a star draws its own loss and jitter from the seed.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.emulators.is_empty() || self.socket_thread.is_some() {
            let _ = self.teardown();
        }
    }
}
