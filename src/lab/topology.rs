//! The lab's network: namespaces A, R and B, veth pairs A⇄R and R⇄B, addresses, static
//! neighbours and the names `a`/`b` — and the registry that finds labs (also those a
//! crashed run left) and removes them.
//!
//! R is a bump in the wire: it has no addresses and forwards frames between its two
//! interfaces through the emulator, so A and B share one subnet and each sees the
//! other one hop away, as seed 002's hosts saw each other across the tc router.
//!
//! A star of N hosts (`lab up --hosts N`) gives every host its own link into R: host
//! X's `eth0` ⇄ R's `to-X`, an emulator between `to-X` and `up-X`, and `up-X` ⇄
//! `br-X`, a port of the bridge `hub`. A frame from X to Y crosses X's link and Y's
//! link, so with one-way delays dₓ and dᵧ each way their RTT is 2·(dₓ + dᵧ), and a
//! blackout of X's link cuts exactly X's pairs.
//!
//! A fleet (`lab up --fleet ZONESxRACKSxHOSTS`) is a tree of racks and zones, as a
//! data centre's, with the emulator on every uplink: each host's `eth0` ⇄ R's
//! `p-HOST`, a port of its rack's bridge `rk-N`; the rack's uplink is an emulator
//! between `ra-N` (peer `rd-N`, a port of `rk-N`) and `rb-N` (peer `rz-N`, a port of
//! its zone's bridge `zn-M`); the zone's uplink an emulator between `za-M` (peer
//! `zd-M` on `zn-M`) and `zb-M` (peer `zh-M` on the core bridge `hub`). Hosts of one
//! rack meet in its bridge and cross no emulator; racks of one zone cross both racks'
//! uplinks, RTT 2·(dᵣ + dᵣ'); zones cross both racks' and both zones' uplinks. Slowing
//! or cutting one rack's uplink touches exactly the pairs with one end in that rack,
//! the fault a mesh by levels is to localise (Guo et al., Pingmesh).

use super::LabError;
use crate::kernel::{interface, netns, sysctl};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

/// Prefix of every namespace a lab creates: `rttlab-lab-NAME-a|r|b`.
pub const NETNS_PREFIX: &str = "rttlab-lab-";
/// The interface of each host towards R.
pub const HOST_IF: &str = "eth0";
/// R's interfaces towards A and towards B.
pub const ROUTER_IF: [&str; 2] = ["to-a", "to-b"];
/// The bridge joining a star's links in R.
pub const HUB: &str = "hub";
/// Most hosts of a star (one letter each, `r` being the router's).
pub const MAX_HOSTS: usize = 16;
/// Most hosts of a fleet: one /24 (198.18.INDEX.1–250), `h001`–`h250`.
pub const MAX_FLEET_HOSTS: usize = 250;
/// Most uplinks (racks and zones) of a fleet: each runs an emulator whose two receive
/// rings take 8 MiB each ([`super::ring`]), 640 MiB at this bound.
pub const MAX_FLEET_LINKS: usize = 40;
/// The link MTU.
pub const MTU: u32 = 1500;

/// A host's IPv6 settings, written before its interface exists, that make it quiet
/// from the moment the link comes up, so nothing the host sends on its own crosses
/// the emulator once a measurement starts:
/// - no router solicitations (there is no router to answer them);
/// - no duplicate-address detection of the link-local address (`addrconf_dad_begin`
///   completes at once when neither `all` nor the device's `accept_dad` asks for it),
///   where it would send a neighbour solicitation up to `rtr_solicit_delay` (1 s) later;
///   the lab's other addresses are added with IFA_F_NODAD;
/// - MLD's unsolicited reports for the solicited-node groups repeated within one jiffy
///   (`unsolicited_report_interval` in net/ipv6/mcast.c reads the device's own value,
///   inherited from `default`, and takes at least one) instead of at a random time up
///   to a second later.
const QUIET_HOST: &[(&str, &str)] = &[
    ("net.ipv6.conf.default.router_solicitations", "0"),
    ("net.ipv6.conf.all.accept_dad", "0"),
    ("net.ipv6.conf.default.accept_dad", "0"),
    (
        "net.ipv6.conf.default.mldv1_unsolicited_report_interval",
        "1",
    ),
    (
        "net.ipv6.conf.default.mldv2_unsolicited_report_interval",
        "1",
    ),
];

/// A host of the lab.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HostInfo {
    /// `a` or `b`: also the name that resolves inside the lab.
    pub name: String,
    /// Its namespace: `rttlab-lab-NAME-X`, X being the host's name.
    pub netns: String,
    /// Its interface towards R: always `eth0` ([`HOST_IF`]).
    pub ifname: String,
    /// The interface's MAC address, `02:72:74:INDEX:N:00` in lower-case hex (locally
    /// administered; N is 1 for `a`, 2 for `b`, …).
    pub mac: String,
    /// Its IPv4 address, 198.18.INDEX.N (N is 1 for `a`, 2 for `b`, …).
    pub ipv4: Ipv4Addr,
    /// Its IPv6 address, 2001:2:0:INDEX::N.
    pub ipv6: Ipv6Addr,
    /// A fleet host's rack (`rack1`, …; numbered across zones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// A fleet host's zone (`zone1`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// The shape of a fleet: `zones` zones of `racks` racks of `hosts` hosts each.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct FleetShape {
    /// Zones, joined by the core bridge.
    pub zones: usize,
    /// Racks in each zone.
    pub racks: usize,
    /// Hosts in each rack.
    pub hosts: usize,
}

impl FleetShape {
    /// Every host of the fleet.
    pub fn total_hosts(&self) -> usize {
        self.zones
            .saturating_mul(self.racks)
            .saturating_mul(self.hosts)
    }

    /// Every rack of the fleet.
    pub fn total_racks(&self) -> usize {
        self.zones.saturating_mul(self.racks)
    }
}

/// One emulated link of a lab: its name (`lab set --link`), and the two interfaces
/// of R the emulator forwards between, `near` (the hosts' side: frames from it go
/// a2b) and `far`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkPorts {
    /// A star's host, a fleet's `rackN` or `zoneN`; empty for the two-host lab.
    pub name: String,
    /// The hosts' side.
    pub near: String,
    /// The core's side.
    pub far: String,
}

/// Everything that identifies a lab, written to its state directory as lab.json.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LabInfo {
    /// The lab's name (`--name`).
    pub name: String,
    /// Selects the addresses: 198.18.INDEX.0/24 and 2001:2:0:INDEX::/64.
    pub index: u8,
    /// The process running the emulator, and its start time (to tell pid reuse).
    pub owner_pid: i32,
    /// The owner's start time: clock ticks since boot, /proc/PID/stat field 22 (0 when
    /// it could not be read).
    pub owner_start: u64,
    /// Whether the owner is a `lab up` daemon (`lab down` may stop it).
    pub daemon: bool,
    /// When the lab was built: CLOCK_REALTIME, ns since the Unix epoch.
    pub created_unix_ns: u64,
    /// `builtin` (this emulator).
    pub engine: String,
    /// Whether the emulator busy-polls instead of sleeping between frames (`--emulator`).
    pub poll: bool,
    /// Seed of the loss and jitter draws: `--seed`, or drawn at random when not given.
    pub seed: u64,
    /// Host `a` (a star's first host).
    pub a: HostInfo,
    /// Host `b` (a star's second host).
    pub b: HostInfo,
    /// A star's or a fleet's hosts, `a` and `b` (`h001`, `h002`) first; empty for the
    /// two-host lab.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostInfo>,
    /// A fleet's shape (`lab up --fleet`); its hosts are in `hosts`, rack by rack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetShape>,
    /// The router R's namespace, `rttlab-lab-NAME-r`.
    pub router_netns: String,
    /// The Unix socket of the process that runs the emulator ([`super::socket`]). Its
    /// JSON key stays "control", as the schema rttlab.lab/1 publishes it.
    #[serde(rename = "control")]
    pub socket: PathBuf,
    /// The event log (JSON lines): `--events`, or `events.jsonl` in the state directory.
    /// Always set when the lab is built.
    pub events: Option<PathBuf>,
}

impl LabInfo {
    /// Every host: a star's, or `a` and `b`.
    pub fn all_hosts(&self) -> Vec<&HostInfo> {
        if self.hosts.is_empty() {
            vec![&self.a, &self.b]
        } else {
            self.hosts.iter().collect()
        }
    }

    /// The host named `name`.
    pub fn host(&self, name: &str) -> Option<&HostInfo> {
        self.all_hosts().into_iter().find(|h| h.name == name)
    }

    /// Whether this is a star (`lab up --hosts N`).
    pub fn is_star(&self) -> bool {
        !self.hosts.is_empty() && self.fleet.is_none()
    }

    /// The links the emulator runs, in order: the two-host lab's one; a star's, host
    /// by host; a fleet's racks, then its zones.
    pub fn links(&self) -> Vec<LinkPorts> {
        let link = |name: String, near: String, far: String| LinkPorts { name, near, far };
        if let Some(shape) = self.fleet {
            (1..=shape.total_racks())
                .map(|r| link(format!("rack{r}"), format!("ra-{r}"), format!("rb-{r}")))
                .chain(
                    (1..=shape.zones)
                        .map(|z| link(format!("zone{z}"), format!("za-{z}"), format!("zb-{z}"))),
                )
                .collect()
        } else if self.is_star() {
            self.hosts
                .iter()
                .map(|h| {
                    let (up, _) = hub_ifs(&h.name);
                    link(h.name.clone(), format!("to-{}", h.name), up)
                })
                .collect()
        } else {
            vec![link(
                String::new(),
                ROUTER_IF[0].into(),
                ROUTER_IF[1].into(),
            )]
        }
    }
}

/// The name of a star's host `i`: a, b, c, … skipping r (the router's).
pub fn host_name(i: usize) -> char {
    let c = (b'a' + i as u8) as char;
    if c >= 'r' {
        (c as u8 + 1) as char
    } else {
        c
    }
}

/// The namespace of node `n` (`a`, `r`, `b`) of lab `name`.
pub fn netns_name(name: &str, n: char) -> String {
    format!("{NETNS_PREFIX}{name}-{n}")
}

/// The state directory of lab `name`.
pub fn state_dir(name: &str) -> PathBuf {
    crate::state_dir().join("lab").join(name)
}

/// A lab name: 1–32 of `a-z 0-9 _ -`, starting with a letter or digit.
///
/// # Errors
/// Anything else (it becomes part of file and namespace names).
pub fn check_name(name: &str) -> Result<(), LabError> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_');
    if ok {
        Ok(())
    } else {
        Err(LabError::BadName(name.into()))
    }
}

fn mac(index: u8, node: u8, side: u8) -> [u8; 6] {
    // Locally administered (0x02), "rt", lab index, node, side.
    [0x02, 0x72, 0x74, index, node, side]
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The hosts of lab `name` at `index`.
pub fn hosts(name: &str, index: u8) -> (HostInfo, HostInfo) {
    (host(name, index, 'a', 1), host(name, index, 'b', 2))
}

/// The hosts of a fleet, rack by rack: `h001`, `h002`, … with their rack and zone.
pub fn fleet_hosts(name: &str, index: u8, shape: FleetShape) -> Vec<HostInfo> {
    (0..shape.total_hosts())
        .map(|i| {
            let rack = i / shape.hosts;
            let mut h = host_named(name, index, &format!("h{:03}", i + 1), i as u8 + 1);
            h.rack = Some(format!("rack{}", rack + 1));
            h.zone = Some(format!("zone{}", rack / shape.racks + 1));
            h
        })
        .collect()
}

/// Whether `x` names a node in a namespace `rttlab-lab-NAME-X`: one lowercase letter
/// (a, r, b, a star's c, d, …) or a fleet's host, `h` and three digits.
fn is_node_name(x: &str) -> bool {
    (x.len() == 1 && x.bytes().all(|c| c.is_ascii_lowercase()))
        || (x.len() == 4 && x.starts_with('h') && x[1..].bytes().all(|c| c.is_ascii_digit()))
}

/// The `n` hosts of a star.
pub fn star_hosts(name: &str, index: u8, n: usize) -> Vec<HostInfo> {
    (0..n)
        .map(|i| host(name, index, host_name(i), i as u8 + 1))
        .collect()
}

fn host(name: &str, index: u8, n: char, last: u8) -> HostInfo {
    host_named(name, index, &n.to_string(), last)
}

fn host_named(name: &str, index: u8, n: &str, last: u8) -> HostInfo {
    HostInfo {
        name: n.to_string(),
        netns: format!("{NETNS_PREFIX}{name}-{n}"),
        ifname: HOST_IF.into(),
        mac: mac_text(mac(index, last, 0)),
        ipv4: Ipv4Addr::new(198, 18, index, last),
        ipv6: Ipv6Addr::new(0x2001, 2, 0, u16::from(index), 0, 0, 0, u16::from(last)),
        rack: None,
        zone: None,
    }
}

fn parse_mac(s: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (d, p) in m.iter_mut().zip(s.split(':')) {
        *d = u8::from_str_radix(p, 16).unwrap_or(0);
    }
    m
}

/// R's interface towards host `i` of `info`.
pub fn router_if(info: &LabInfo, i: usize) -> String {
    if info.is_star() {
        format!("to-{}", info.all_hosts()[i].name)
    } else {
        ROUTER_IF[i].to_string()
    }
}

/// R's interface on the hub side of a star's link to host `name` (the emulator's
/// second port), and its peer, the bridge port.
pub fn hub_ifs(name: &str) -> (String, String) {
    (format!("up-{name}"), format!("br-{name}"))
}

/// Create the namespaces, links, addresses and names of `info`. On error the caller
/// removes what was made ([`remove`]).
///
/// # Errors
/// Any step the kernel refuses.
pub fn build(info: &LabInfo) -> Result<(), LabError> {
    let hosts = info.all_hosts();
    let mut nss: Vec<&str> = hosts.iter().map(|h| h.netns.as_str()).collect();
    nss.insert(1, &info.router_netns);
    for ns in nss {
        netns::create(ns).map_err(|e| match e {
            netns::NetnsError::Exists { .. } => LabError::Exists {
                name: info.name.clone(),
                detail: format!("namespace {ns} exists"),
            },
            e => super::setup(format!("creating namespace {ns}"))(e),
        })?;
    }
    // The router has no addresses: no IPv6 link-locals, no router solicitations, no
    // replies of its own on the wire. The hosts send no solicitations either.
    for k in [
        "net.ipv6.conf.all.disable_ipv6",
        "net.ipv6.conf.default.disable_ipv6",
    ] {
        sysctl::write(Some(&info.router_netns), k, "1").map_err(super::setup(k))?;
    }
    for h in &hosts {
        for (k, v) in QUIET_HOST {
            sysctl::write(Some(&h.netns), k, v).map_err(super::setup(*k))?;
        }
    }
    let files = hosts
        .iter()
        .map(|h| {
            std::fs::File::open(netns::path_of(&h.netns))
                .map_err(super::setup(format!("opening namespace {}", h.netns)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    netns::run_in(Some(&info.router_netns), || -> Result<(), LabError> {
        if let Some(shape) = info.fleet {
            wire_fleet(info, shape, &files)?;
            return interface::set_up("lo").map_err(super::setup("lo up"));
        }
        if info.is_star() {
            interface::add_bridge(HUB, mac(info.index, 0x20, 0)).map_err(super::setup("bridge"))?;
            interface::disable_offloads(HUB).map_err(super::setup("offloads"))?;
            interface::set_up(HUB).map_err(super::setup("link up"))?;
        }
        for (i, (host, file)) in hosts.iter().zip(&files).enumerate() {
            let to = router_if(info, i);
            host_port(&to, mac(info.index, 0x10 + i as u8, 1), host, file)?;
            interface::set_up(&to).map_err(super::setup("link up"))?;
            if info.is_star() {
                let (up, br) = hub_ifs(&host.name);
                interface::add_veth(
                    &interface::VethEnd {
                        name: &up,
                        mac: mac(info.index, 0x30 + i as u8, 1),
                        netns: None,
                    },
                    &interface::VethEnd {
                        name: &br,
                        mac: mac(info.index, 0x30 + i as u8, 2),
                        netns: None,
                    },
                    MTU,
                )
                .map_err(super::setup("veth"))?;
                for n in [&up, &br] {
                    interface::disable_offloads(n).map_err(super::setup("offloads"))?;
                }
                interface::set_master(&br, HUB).map_err(super::setup("bridge port"))?;
                for n in [&up, &br] {
                    interface::set_up(n).map_err(super::setup("link up"))?;
                }
            }
        }
        interface::set_up("lo").map_err(super::setup("lo up"))
    })
    .map_err(super::setup("router namespace"))??;
    for me in &hosts {
        netns::run_in(Some(&me.netns), || -> Result<(), LabError> {
            interface::set_up("lo").map_err(super::setup("lo up"))?;
            interface::disable_offloads(&me.ifname).map_err(super::setup("offloads"))?;
            interface::add_address(&me.ifname, IpAddr::V4(me.ipv4), 24)
                .map_err(super::setup("address"))?;
            interface::add_address(&me.ifname, IpAddr::V6(me.ipv6), 64)
                .map_err(super::setup("address"))?;
            interface::set_up(&me.ifname).map_err(super::setup("link up"))?;
            for peer in hosts.iter().filter(|p| p.name != me.name) {
                let m = parse_mac(&peer.mac);
                interface::add_neighbour(&me.ifname, IpAddr::V4(peer.ipv4), m)
                    .map_err(super::setup("neighbour"))?;
                interface::add_neighbour(&me.ifname, IpAddr::V6(peer.ipv6), m)
                    .map_err(super::setup("neighbour"))?;
            }
            Ok(())
        })
        .map_err(super::setup("host namespace"))??;
        write_hosts_file(info, &me.netns);
    }
    Ok(())
}

/// A veth pair inside R, both ends without offloads (each side's MAC given).
fn router_veth(a: (&str, [u8; 6]), b: (&str, [u8; 6])) -> Result<(), LabError> {
    interface::add_veth(
        &interface::VethEnd {
            name: a.0,
            mac: a.1,
            netns: None,
        },
        &interface::VethEnd {
            name: b.0,
            mac: b.1,
            netns: None,
        },
        MTU,
    )
    .map_err(super::setup("veth"))?;
    for n in [a.0, b.0] {
        interface::disable_offloads(n).map_err(super::setup("offloads"))?;
    }
    Ok(())
}

/// A bridge of R, up.
fn router_bridge(name: &str, mac: [u8; 6]) -> Result<(), LabError> {
    interface::add_bridge(name, mac).map_err(super::setup("bridge"))?;
    interface::disable_offloads(name).map_err(super::setup("offloads"))?;
    interface::set_up(name).map_err(super::setup("link up"))
}

/// Enslave `port` to `bridge` and bring it up.
fn bridge_port(port: &str, bridge: &str) -> Result<(), LabError> {
    interface::set_master(port, bridge).map_err(super::setup("bridge port"))?;
    interface::set_up(port).map_err(super::setup("link up"))
}

/// The veth from R's port `name` (address `mac`) to `host`'s interface in its
/// namespace (`file`), offloads off on R's side so the emulator sees real segments.
fn host_port(
    name: &str,
    mac: [u8; 6],
    host: &HostInfo,
    file: &std::fs::File,
) -> Result<(), LabError> {
    interface::add_veth(
        &interface::VethEnd {
            name,
            mac,
            netns: None,
        },
        &interface::VethEnd {
            name: &host.ifname,
            mac: parse_mac(&host.mac),
            netns: Some(file),
        },
        MTU,
    )
    .map_err(super::setup("veth"))?;
    interface::disable_offloads(name).map_err(super::setup("offloads"))
}

/// Group `n`'s bridge `{names[0]}-n` and its uplink to `parent`: two veth pairs through
/// the emulator (`{names[1]}-n` ↔ `{names[2]}-n` on the group's bridge, `{names[3]}-n` ↔
/// `{names[4]}-n` on the parent's), MAC kinds `kind` (the bridge) to `kind + 4`.
fn uplink(ix: u8, names: [&str; 5], n: usize, kind: u8, parent: &str) -> Result<(), LabError> {
    let [bridge, a, d, b, p] = names.map(|x| format!("{x}-{n}"));
    let m = n as u8;
    router_bridge(&bridge, mac(ix, m, kind))?;
    router_veth((&a, mac(ix, m, kind + 1)), (&d, mac(ix, m, kind + 2)))?;
    router_veth((&b, mac(ix, m, kind + 3)), (&p, mac(ix, m, kind + 4)))?;
    bridge_port(&d, &bridge)?;
    bridge_port(&p, parent)?;
    for i in [&a, &b] {
        interface::set_up(i).map_err(super::setup("link up"))?;
    }
    Ok(())
}

/// A fleet's tree inside R (see the module's doc): the core bridge, each zone's
/// bridge and uplink, each rack's bridge and uplink, each host's port. MACs are
/// `02:72:74:INDEX:N:KIND`, N the host, rack or zone number, KIND distinct from the
/// hosts' own 0, so no port's address shadows a host's in a bridge's table.
fn wire_fleet(info: &LabInfo, shape: FleetShape, files: &[std::fs::File]) -> Result<(), LabError> {
    let ix = info.index;
    router_bridge(HUB, mac(ix, 0, 9))?;
    for z in 1..=shape.zones {
        uplink(ix, ["zn", "za", "zd", "zb", "zh"], z, 10, HUB)?;
    }
    for r in 1..=shape.total_racks() {
        let zone = format!("zn-{}", (r - 1) / shape.racks + 1);
        uplink(ix, ["rk", "ra", "rd", "rb", "rz"], r, 2, &zone)?;
    }
    for (i, (host, file)) in info.hosts.iter().zip(files).enumerate() {
        let port = format!("p-{}", host.name);
        host_port(&port, mac(ix, i as u8 + 1, 1), host, file)?;
        bridge_port(&port, &format!("rk-{}", i / shape.hosts + 1))?;
    }
    Ok(())
}

/// /etc/netns/NS/hosts, which `lab exec` (like `ip netns exec`) binds over /etc/hosts
/// so the hosts' names resolve inside the lab. Best effort: a read-only /etc only
/// loses the names.
fn write_hosts_file(info: &LabInfo, ns: &str) {
    let dir = PathBuf::from("/etc/netns").join(ns);
    let mut text = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost\n");
    for h in info.all_hosts() {
        text.push_str(&format!("{}\t{}\n", h.ipv4, h.name));
    }
    for h in info.all_hosts() {
        text.push_str(&format!("{}\t{}\n", h.ipv6, h.name));
    }
    let _ = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join("hosts"), text));
}

/// The namespaces of lab `name` that exist: `rttlab-lab-NAME-X`, X a node's name.
pub fn namespaces_of(name: &str) -> Vec<String> {
    let prefix = format!("{NETNS_PREFIX}{name}-");
    netns::list()
        .into_iter()
        .filter(|ns| ns.strip_prefix(&prefix).is_some_and(is_node_name))
        .collect()
}

/// Remove everything of lab `name`: processes inside its namespaces (this one
/// excepted), the namespaces, the hosts files, the state directory. Idempotent; works
/// without the lab's state (after a crash).
///
/// # Errors
/// A namespace or directory that exists cannot be removed.
pub fn remove(name: &str) -> Result<(), LabError> {
    let nss = namespaces_of(name);
    let mut pids: Vec<i32> = nss.iter().flat_map(|ns| netns::pids_in(ns)).collect();
    pids.sort_unstable();
    pids.dedup();
    for &p in &pids {
        // SAFETY: kill(2) on a pid found inside the lab.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while pids.iter().any(|&p| alive(p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for ns in &nss {
        netns::delete(ns).map_err(|e| LabError::Teardown {
            step: format!("deleting namespace {ns}"),
            source: e.into(),
        })?;
        let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(ns));
    }
    // /etc/netns itself only if nothing else uses it.
    let _ = std::fs::remove_dir("/etc/netns");
    match std::fs::remove_dir_all(state_dir(name)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LabError::Teardown {
            step: format!("removing {}", state_dir(name).display()),
            source: e.into(),
        }),
    }
}

/// Whether process `pid` exists (a zombie counts as gone).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

/// A process's start time (clock ticks since boot, /proc/PID/stat field 22).
pub fn start_time(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// A lab found on this machine.
#[derive(Debug, Clone)]
pub struct Found {
    /// The lab's name: of its state directory, or taken from a namespace
    /// `rttlab-lab-NAME-X` left behind.
    pub name: String,
    /// Its lab.json, when readable.
    pub info: Option<LabInfo>,
    /// The owner still runs (same pid and start time).
    pub live: bool,
}

/// Every lab: those with a state directory and those with only namespaces left.
pub fn find_all() -> Vec<Found> {
    let mut names: Vec<String> = std::fs::read_dir(crate::state_dir().join("lab"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    for ns in netns::list() {
        if let Some(rest) = ns.strip_prefix(NETNS_PREFIX) {
            // NAME-X, X a node's name (names may contain '-' themselves).
            if let Some((n, x)) = rest.rsplit_once('-') {
                if is_node_name(x) {
                    names.push(n.to_string());
                }
            }
        }
    }
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let info: Option<LabInfo> = std::fs::read(state_dir(&name).join("lab.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let live = info.as_ref().is_some_and(|i| {
                alive(i.owner_pid) && start_time(i.owner_pid) == Some(i.owner_start)
            });
            Found { name, info, live }
        })
        .collect()
}

/// An exclusive lock on the lab registry, held from sweeping stale labs until
/// a new lab's `lab.json` is written.
///
/// A lab whose state directory exists but whose `lab.json` is not yet written
/// looks dead to [`find_all`]; without this lock a second process starting a
/// lab at the same moment swept the first one's directory away (and could
/// pick the same address index).
pub struct RegistryLock {
    _file: std::fs::File,
}

/// Take the [`RegistryLock`], waiting for another process that holds it.
///
/// # Errors
/// The state directory or its lock file cannot be created or locked.
pub fn lock_registry() -> Result<RegistryLock, LabError> {
    let root = crate::state_dir();
    std::fs::create_dir_all(&root).map_err(super::setup(format!("creating {}", root.display())))?;
    let path = root.join("lab.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(super::setup(format!("opening {}", path.display())))?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on a file this function opened; released when it closes.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(super::setup(format!("locking {}", path.display()))(
            std::io::Error::last_os_error(),
        ));
    }
    Ok(RegistryLock { _file: f })
}

/// Remove every lab whose owner is gone (a crashed or killed run). Call with
/// the [`RegistryLock`] held.
///
/// # Errors
/// As [`remove`].
pub fn sweep_stale() -> Result<Vec<String>, LabError> {
    let mut removed = Vec::new();
    for f in find_all() {
        if !f.live {
            remove(&f.name)?;
            removed.push(f.name);
        }
    }
    Ok(removed)
}

/// The lowest address index no live lab uses.
pub fn free_index() -> Result<u8, LabError> {
    let used: Vec<u8> = find_all()
        .iter()
        .filter_map(|f| f.info.as_ref().map(|i| i.index))
        .collect();
    (0..=255u8)
        .find(|i| !used.contains(i))
        .ok_or(LabError::TooManyLabs(256))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses() {
        assert!(check_name("demo-1").is_ok());
        for bad in ["", "-x", "Demo", "a/b", "a b", &"x".repeat(33)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        let (a, b) = hosts("demo", 7);
        assert_eq!(
            (a.ipv4.to_string(), b.ipv4.to_string()),
            ("198.18.7.1".into(), "198.18.7.2".into())
        );
        assert_eq!(b.ipv6.to_string(), "2001:2:0:7::2");
        assert_eq!(a.netns, "rttlab-lab-demo-a");
        assert_eq!(parse_mac(&a.mac), mac(7, 1, 0));
        assert!(
            alive(std::process::id() as i32) && start_time(std::process::id() as i32).is_some()
        );
    }
}
