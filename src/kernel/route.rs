//! Routes and their rto_min metric, over rtnetlink (what `ip route replace … rto_min
//! 5ms` does). The kernel honours a route's rto_min only when the metric is locked
//! (`tcp_rto_min` in include/net/tcp.h checks `dst_metric_locked(dst, RTAX_RTO_MIN)`),
//! so setting writes RTAX_RTO_MIN and its bit in RTAX_LOCK together.
//!
//! The route to change is the one the kernel would use: [`lookup`] asks the FIB as
//! `ip route get fibmatch ADDR` does (`RTM_F_FIB_MATCH`), so the local table, policy
//! routing and other tables are honoured. A replace sends the route back with every
//! attribute and flag it had; a route carrying one rttlab cannot send back is refused
//! rather than changed into another route.

use super::netlink::{ip_from, push_attr, Attrs, NetlinkSocket};
use super::netns::{self, NetnsError};
use super::SyscallError;
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const NETLINK_ROUTE: libc::c_int = 0;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_PREFSRC: u16 = 7;
const RTA_METRICS: u16 = 8;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
const RTA_VIA: u16 = 18;
const RTA_PREF: u16 = 20;
const RTA_SRC: u16 = 2;
const RTA_FLOW: u16 = 11;
const RTA_CACHEINFO: u16 = 12;
const RTA_ENCAP_TYPE: u16 = 21;
const RTA_ENCAP: u16 = 22;
const RTA_EXPIRES: u16 = 23;
const RTA_PAD: u16 = 24;
const RTA_TTL_PROPAGATE: u16 = 26;
const RTA_NH_ID: u16 = 30;
/// `rtm_flags` asking for the FIB entry that matches rather than the resolved result.
const RTM_F_FIB_MATCH: u32 = 0x2000;
/// `rtm_flags` a route may carry that the kernel takes back on a replace.
const RTM_FLAGS_KEPT: u32 = 0x4 /* RTNH_F_ONLINK */ | 0x2 /* RTNH_F_PERVASIVE */;
/// `rtm_flags` the kernel reports about a route's state and sets itself: dead, link
/// down, unresolved, offload/trap (nexthop and route), FIB-match, cloned.
const RTM_FLAGS_STATE: u32 =
    0x1 | 0x8 | 0x10 | 0x20 | 0x40 | 0x200 | 0x4000 | 0x8000 | 0x2000_0000 | RTM_F_FIB_MATCH;
/// Attributes a dump reports that are not part of the route (statistics, padding).
const REPORTED_ONLY: [u16; 2] = [RTA_CACHEINFO, RTA_PAD];
const RTAX_LOCK: u16 = 1;
/// `RTAX_RTO_MIN` (include/uapi/linux/rtnetlink.h), in milliseconds.
pub const RTAX_RTO_MIN: u16 = 13;
/// Attributes a replace carries over to leave the route otherwise as it was.
const KEPT: [u16; 16] = [
    RTA_DST,
    RTA_SRC,
    RTA_OIF,
    RTA_GATEWAY,
    RTA_PRIORITY,
    RTA_PREFSRC,
    RTA_MULTIPATH,
    RTA_FLOW,
    RTA_TABLE,
    RTA_VIA,
    RTA_PREF,
    RTA_ENCAP_TYPE,
    RTA_ENCAP,
    RTA_EXPIRES,
    RTA_TTL_PROPAGATE,
    RTA_NH_ID,
];
/// `RT_TABLE_MAIN`, `RT_TABLE_LOCAL`.
pub const TABLE_MAIN: u32 = 254;
/// `RT_TABLE_LOCAL`: the table of local and broadcast addresses (`ip route show table local`).
pub const TABLE_LOCAL: u32 = 255;

/// One route of the FIB.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Route {
    /// Destination address (`RTA_DST`); the unspecified address for a default route.
    pub dst: IpAddr,
    /// Destination prefix length in bits (`rtm_dst_len`).
    pub dst_len: u8,
    /// Table id: `RTA_TABLE`, else `rtm_table` (254 main, 255 local).
    pub table: u32,
    /// Output interface name (`RTA_OIF` looked up by index); `None` without one.
    pub dev: Option<String>,
    /// Next-hop gateway (`RTA_GATEWAY`); `None` for a directly connected route.
    pub gateway: Option<IpAddr>,
    /// Route priority (`RTA_PRIORITY`, `ip route`'s `metric`); `None` when not set.
    pub priority: Option<u32>,
    /// Preferred source address (`RTA_PREFSRC`, `ip route`'s `src`).
    pub prefsrc: Option<IpAddr>,
    /// (RTAX_*, value) pairs.
    pub metrics: Vec<(u16, u32)>,
    /// `rtm_type`: 1 unicast, 2 local, 3 broadcast, … (`ip route`'s first word).
    pub route_type: u8,
    #[serde(skip)]
    header: [u8; 12],
    #[serde(skip)]
    kept: Vec<(u16, Vec<u8>)>,
    /// Attributes found that a replace could not send back (their types).
    #[serde(skip)]
    unknown: Vec<u16>,
}

/// Errors about routes.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The named network namespace does not exist or could not be entered.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// A netlink socket call failed, or the kernel answered a request with an error.
    #[error("rtnetlink")]
    Syscall(#[from] SyscallError),
    /// No route covers the destination.
    #[error("no route to {0} in the main table: give a prefix that has a route (see `ip route`)")]
    NoRoute(String),
    /// The FIB has no route for the address.
    #[error("the kernel has no route to {0} (`ip route get fibmatch {0}` finds none)")]
    Unroutable(IpAddr),
    /// The route has something a replace would lose.
    #[error("route {prefix} (table {table}) carries {what} that rttlab cannot send back unchanged; set its rto_min with `ip route change {prefix} … rto_min N` instead")]
    CannotKeep {
        /// The route's destination, `ADDR/LEN`.
        prefix: String,
        /// The route's table id (254 main, 255 local).
        table: u32,
        /// What would be lost: unknown `rtm_flags` bits or attribute types.
        what: String,
    },
}

fn u32_of(b: &[u8]) -> Option<u32> {
    b.get(..4)
        .map(|x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]))
}

fn ifname(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf has IF_NAMESIZE bytes as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: if_indextoname wrote a NUL-terminated name into buf.
    Some(
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

fn parse(p: &[u8]) -> Option<Route> {
    let header: [u8; 12] = p.get(..12)?.try_into().ok()?;
    let family = header[0];
    let mut r = Route {
        dst: if i32::from(family) == libc::AF_INET {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        },
        dst_len: header[1],
        table: u32::from(header[4]),
        dev: None,
        gateway: None,
        priority: None,
        prefsrc: None,
        metrics: Vec::new(),
        route_type: header[7],
        header,
        kept: Vec::new(),
        unknown: Vec::new(),
    };
    for (ty, data) in Attrs(&p[12..]) {
        match ty {
            RTA_DST => r.dst = ip_from(family, data)?,
            RTA_OIF => r.dev = u32_of(data).and_then(ifname),
            RTA_GATEWAY => r.gateway = ip_from(family, data),
            RTA_PRIORITY => r.priority = u32_of(data),
            RTA_PREFSRC => r.prefsrc = ip_from(family, data),
            RTA_TABLE => r.table = u32_of(data).unwrap_or(r.table),
            RTA_METRICS => {
                r.metrics = Attrs(data)
                    .filter_map(|(t, v)| u32_of(v).map(|v| (t, v)))
                    .collect()
            }
            _ => {}
        }
        if KEPT.contains(&ty) {
            r.kept.push((ty, data.to_vec()));
        } else if ty != RTA_METRICS && !REPORTED_ONLY.contains(&ty) {
            r.unknown.push(ty);
        }
    }
    Some(r)
}

impl Route {
    /// The rto_min metric in ms, if set.
    pub fn rto_min_ms(&self) -> Option<u32> {
        self.metrics
            .iter()
            .find(|(t, _)| *t == RTAX_RTO_MIN)
            .map(|&(_, v)| v)
    }

    /// Whether the rto_min metric is locked (only then does TCP use it).
    pub fn rto_min_locked(&self) -> bool {
        self.metrics
            .iter()
            .any(|&(t, v)| t == RTAX_LOCK && v & (1 << RTAX_RTO_MIN) != 0)
    }

    /// `ADDR/LEN`.
    pub fn prefix(&self) -> String {
        format!("{}/{}", self.dst, self.dst_len)
    }

    /// Does this route cover `ip`?
    pub fn covers(&self, ip: IpAddr) -> bool {
        match (self.dst, ip) {
            (IpAddr::V4(d), IpAddr::V4(a)) => {
                let mask = if self.dst_len == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(self.dst_len.min(32)))
                };
                u32::from(d) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(d), IpAddr::V6(a)) => {
                let mask = if self.dst_len == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(self.dst_len.min(128)))
                };
                u128::from(d) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }

    /// The `ip route replace` command that sets this route's rto_min (for --dry-run).
    pub fn ip_command(&self, netns: Option<&str>, rto_min_ms: Option<u32>) -> String {
        let mut c = String::from("ip");
        if let Some(n) = netns {
            c += &format!(" -n {n}");
        }
        if self.dst.is_ipv6() {
            c += " -6";
        }
        c += " route replace ";
        c += match self.route_type {
            2 => "local ",
            3 => "broadcast ",
            4 => "anycast ",
            5 => "multicast ",
            6 => "blackhole ",
            7 => "unreachable ",
            8 => "prohibit ",
            9 => "throw ",
            _ => "",
        };
        c += &self.prefix();
        if let Some(g) = self.gateway {
            c += &format!(" via {g}");
        }
        if let Some(d) = &self.dev {
            c += &format!(" dev {d}");
        }
        match self.table {
            TABLE_MAIN => {}
            TABLE_LOCAL => c += " table local",
            t => c += &format!(" table {t}"),
        }
        if let Some(p) = self.priority {
            c += &format!(" metric {p}");
        }
        if let Some(s) = self.prefsrc {
            c += &format!(" src {s}");
        }
        if let Some(ms) = rto_min_ms {
            c += &format!(" rto_min {ms}ms");
        }
        c
    }
}

/// Every unicast route of the main table, IPv4 and IPv6, in namespace `netns`.
///
/// # Errors
/// The namespace or the dump failed.
pub fn list(netns: Option<&str>) -> Result<Vec<Route>, RouteError> {
    netns::run_in(netns, || -> Result<Vec<Route>, RouteError> {
        let mut s = NetlinkSocket::open(NETLINK_ROUTE)?;
        let mut out = Vec::new();
        for family in [libc::AF_INET, libc::AF_INET6] {
            let mut req = [0u8; 12];
            req[0] = family as u8;
            let seq = s.send(RTM_GETROUTE, libc::NLM_F_DUMP as u16, &req)?;
            s.replies(seq, |ty, p| {
                if ty == RTM_NEWROUTE {
                    if let Some(r) = parse(p) {
                        // Main table, unicast (RTN_UNICAST = 1).
                        if r.table == 254 && r.header[7] == 1 {
                            out.push(r);
                        }
                    }
                }
            })?;
        }
        Ok(out)
    })?
}

/// The route the kernel would use for `ip` (`ip route get fibmatch`): the FIB entry
/// that matches, from whichever table policy routing picks.
///
/// # Errors
/// The namespace or the request failed, or no route matches.
pub fn lookup(netns: Option<&str>, ip: IpAddr) -> Result<Route, RouteError> {
    netns::run_in(netns, || -> Result<Route, RouteError> {
        let mut s = NetlinkSocket::open(NETLINK_ROUTE)?;
        let mut req = [0u8; 12];
        let (family, bytes, len) = match ip {
            IpAddr::V4(a) => (libc::AF_INET, a.octets().to_vec(), 32),
            IpAddr::V6(a) => (libc::AF_INET6, a.octets().to_vec(), 128),
        };
        req[0] = family as u8;
        req[1] = len;
        req[8..12].copy_from_slice(&RTM_F_FIB_MATCH.to_ne_bytes());
        let mut body = req.to_vec();
        push_attr(&mut body, RTA_DST, &bytes);
        let seq = s.send(RTM_GETROUTE, libc::NLM_F_ACK as u16, &body)?;
        let mut found = None;
        let asked = s.replies(seq, |ty, p| {
            if ty == RTM_NEWROUTE && found.is_none() {
                found = parse(p);
            }
        });
        let matched = match asked {
            Err(SyscallError { source, .. })
                if matches!(
                    source.raw_os_error(),
                    Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::ESRCH)
                ) =>
            {
                return Err(RouteError::Unroutable(ip))
            }
            Err(e) => return Err(e.into()),
            Ok(()) => found.ok_or(RouteError::Unroutable(ip))?,
        };
        // The match names its table as the trie it was found in: IPv4's local and main
        // tables share one until policy rules exist, so a local route comes back as
        // "table main". The route itself, with its own table, is the one of the full
        // dump with the same destination, type and device.
        let same: Vec<Route> = dump(&mut s, req[0])?
            .into_iter()
            .filter(|r| {
                r.dst == matched.dst
                    && r.dst_len == matched.dst_len
                    && r.route_type == matched.route_type
                    && r.dev == matched.dev
            })
            .collect();
        Ok(match same.len() {
            1 => same.into_iter().next().unwrap_or(matched),
            _ => same
                .into_iter()
                .find(|r| r.table == matched.table && r.priority == matched.priority)
                .unwrap_or(matched),
        })
    })?
}

/// Every route of every table of one address family.
fn dump(s: &mut NetlinkSocket, family: u8) -> Result<Vec<Route>, RouteError> {
    let mut req = [0u8; 12];
    req[0] = family;
    let seq = s.send(RTM_GETROUTE, libc::NLM_F_DUMP as u16, &req)?;
    let mut out = Vec::new();
    s.replies(seq, |ty, p| {
        if ty == RTM_NEWROUTE {
            out.extend(parse(p));
        }
    })?;
    Ok(out)
}

/// The route of table `table` whose destination is exactly `ip/len`, as it is now.
///
/// # Errors
/// The namespace or the dump failed, or there is no such route.
pub fn get_exact(
    netns: Option<&str>,
    ip: IpAddr,
    len: u8,
    table: u32,
) -> Result<Route, RouteError> {
    netns::run_in(netns, || -> Result<Option<Route>, RouteError> {
        let mut s = NetlinkSocket::open(NETLINK_ROUTE)?;
        let family = if ip.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        } as u8;
        Ok(dump(&mut s, family)?
            .into_iter()
            .find(|r| r.dst == ip && r.dst_len == len && r.table == table))
    })??
    .ok_or_else(|| RouteError::NoRoute(format!("{ip}/{len} (table {table})")))
}

/// The most specific route covering `ip`, or the route exactly equal to `ip/len`.
///
/// # Errors
/// No route covers it.
pub fn find(routes: &[Route], ip: IpAddr, len: Option<u8>) -> Result<Route, RouteError> {
    routes
        .iter()
        .filter(|r| match len {
            Some(l) => r.dst_len == l && r.covers(ip),
            None => r.covers(ip),
        })
        .max_by_key(|r| (r.dst_len, std::cmp::Reverse(r.priority.unwrap_or(0))))
        .cloned()
        .ok_or_else(|| RouteError::NoRoute(len.map_or(ip.to_string(), |l| format!("{ip}/{l}"))))
}

/// An rto_min metric: its value and whether it is locked (TCP uses it only then).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RtoMin {
    /// The metric's value, ms (`ip route`'s `rto_min Nms`).
    pub ms: u32,
    /// Whether its bit is set in RTAX_LOCK (`ip route … rto_min lock N`).
    pub locked: bool,
}

impl Route {
    /// The rto_min metric as it is, locked or not.
    pub fn rto_min(&self) -> Option<RtoMin> {
        self.rto_min_ms().map(|ms| RtoMin {
            ms,
            locked: self.rto_min_locked(),
        })
    }

    /// Why a replace could not send this route back unchanged, if it could not.
    fn cannot_keep(&self) -> Option<String> {
        let flags = u32::from_ne_bytes([
            self.header[8],
            self.header[9],
            self.header[10],
            self.header[11],
        ]);
        let other = flags & !(RTM_FLAGS_KEPT | RTM_FLAGS_STATE);
        if other != 0 {
            return Some(format!("route flags {other:#x}"));
        }
        if !self.unknown.is_empty() {
            return Some(format!("attribute types {:?}", self.unknown));
        }
        None
    }
}

/// Replace `route` with the same route whose rto_min is `rto_min` (`None`: no rto_min
/// at all); every other metric, attribute and flag is kept.
///
/// # Errors
/// The route has an attribute or flag a replace would lose ([`RouteError::CannotKeep`]),
/// or the kernel refused the replace (no CAP_NET_ADMIN, route gone).
pub fn set_rto_min(
    netns: Option<&str>,
    route: &Route,
    rto_min: Option<RtoMin>,
) -> Result<(), RouteError> {
    if let Some(what) = route.cannot_keep() {
        return Err(RouteError::CannotKeep {
            prefix: route.prefix(),
            table: route.table,
            what,
        });
    }
    let mut metrics: Vec<(u16, u32)> = route
        .metrics
        .iter()
        .copied()
        .filter(|(t, _)| *t != RTAX_RTO_MIN && *t != RTAX_LOCK)
        .collect();
    let mut lock = route
        .metrics
        .iter()
        .find(|(t, _)| *t == RTAX_LOCK)
        .map_or(0, |&(_, v)| v)
        & !(1 << RTAX_RTO_MIN);
    if let Some(m) = rto_min {
        metrics.push((RTAX_RTO_MIN, m.ms));
        if m.locked {
            lock |= 1 << RTAX_RTO_MIN;
        }
    }
    if lock != 0 {
        metrics.push((RTAX_LOCK, lock));
    }
    let mut body = route.header.to_vec();
    let flags = u32::from_ne_bytes([body[8], body[9], body[10], body[11]]) & RTM_FLAGS_KEPT;
    body[8..12].copy_from_slice(&flags.to_ne_bytes());
    for (ty, data) in &route.kept {
        push_attr(&mut body, *ty, data);
    }
    let mut nested = Vec::new();
    for (t, v) in metrics {
        push_attr(&mut nested, t, &v.to_ne_bytes());
    }
    push_attr(&mut body, RTA_METRICS, &nested);
    netns::run_in(netns, || -> Result<(), RouteError> {
        let mut s = NetlinkSocket::open(NETLINK_ROUTE)?;
        let flags = (libc::NLM_F_ACK | libc::NLM_F_REPLACE | libc::NLM_F_CREATE) as u16;
        let seq = s.send(RTM_NEWROUTE, flags, &body)?;
        s.replies(seq, |_, _| {})?;
        Ok(())
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_this_hosts_routes_and_finds_coverage() {
        let routes = list(None).unwrap();
        for r in &routes {
            assert!(r.dst_len <= 128);
        }
        let r = Route {
            dst: "198.18.0.0".parse().unwrap(),
            dst_len: 15,
            table: 254,
            dev: Some("eth0".into()),
            gateway: None,
            priority: Some(100),
            prefsrc: None,
            metrics: vec![(RTAX_RTO_MIN, 5), (RTAX_LOCK, 1 << RTAX_RTO_MIN)],
            route_type: 1,
            header: [0; 12],
            kept: vec![],
            unknown: vec![],
        };
        assert!(
            r.covers("198.19.255.1".parse().unwrap()) && !r.covers("198.20.0.1".parse().unwrap())
        );
        assert_eq!((r.rto_min_ms(), r.rto_min_locked()), (Some(5), true));
        assert_eq!(
            r.ip_command(Some("ns"), Some(5)),
            "ip -n ns route replace 198.18.0.0/15 dev eth0 metric 100 rto_min 5ms"
        );
        assert!(find(
            std::slice::from_ref(&r),
            "198.18.3.4".parse().unwrap(),
            None
        )
        .is_ok());
        assert!(find(std::slice::from_ref(&r), "10.0.0.1".parse().unwrap(), None).is_err());
    }
}
