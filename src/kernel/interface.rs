//! Interfaces over rtnetlink, in the caller's network namespace: veth pairs, link state,
//! addresses, static neighbours, and the offloads the lab turns off (legacy ethtool
//! ioctls). Callers that work in another namespace wrap these in [`super::netns::run_in`].

use super::netlink::{push_attr, NetlinkSocket};
use super::SyscallError;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWNEIGH: u16 = 28;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
const IFA_F_NODAD: u32 = 0x02;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const NUD_PERMANENT: u16 = 0x80;

/// Errors changing links.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A system call or netlink request failed.
    #[error("{what}")]
    Failed {
        /// What was being done, e.g. "creating veth a ⇄ b"; the error's message.
        what: String,
        /// The call that failed and its errno.
        #[source]
        source: SyscallError,
    },
    /// No interface of that name in this namespace.
    #[error("no interface {0:?}")]
    NoSuchInterface(String),
}

fn failed(what: impl Into<String>) -> impl FnOnce(SyscallError) -> LinkError {
    let what = what.into();
    move |source| LinkError::Failed { what, source }
}

/// One end of a veth pair: its name, MAC address and, for the peer, the namespace it
/// is created in (an open /run/netns file).
pub struct VethEnd<'a> {
    /// The interface's name (IFLA_IFNAME).
    pub name: &'a str,
    /// The interface's MAC address (IFLA_ADDRESS).
    pub mac: [u8; 6],
    /// The namespace the end is created in (IFLA_NET_NS_FD); None: the caller's.
    pub netns: Option<&'a std::fs::File>,
}

fn ifinfomsg(index: i32, flags: u32, change: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(16);
    b.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
    b.extend_from_slice(&0u16.to_ne_bytes());
    b.extend_from_slice(&index.to_ne_bytes());
    b.extend_from_slice(&flags.to_ne_bytes());
    b.extend_from_slice(&change.to_ne_bytes());
    b
}

fn end_attrs(b: &mut Vec<u8>, end: &VethEnd<'_>, mtu: u32) {
    let mut name = end.name.as_bytes().to_vec();
    name.push(0);
    push_attr(b, IFLA_IFNAME, &name);
    push_attr(b, IFLA_ADDRESS, &end.mac);
    push_attr(b, IFLA_MTU, &mtu.to_ne_bytes());
    if let Some(ns) = end.netns {
        push_attr(b, IFLA_NET_NS_FD, &(ns.as_raw_fd() as u32).to_ne_bytes());
    }
}

fn request(msg_type: u16, body: &[u8], what: &str) -> Result<(), LinkError> {
    let mut s = NetlinkSocket::open(libc::NETLINK_ROUTE).map_err(failed(what))?;
    let flags = (libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16;
    let seq = s.send(msg_type, flags, body).map_err(failed(what))?;
    s.replies(seq, |_, _| {}).map_err(failed(what))
}

/// Create a veth pair `local` ⇄ `peer` with the given MACs and MTU; each end goes to
/// its `netns` (this namespace when `None`).
///
/// # Errors
/// The kernel refused (a name exists, no CAP_NET_ADMIN).
pub fn add_veth(local: &VethEnd<'_>, peer: &VethEnd<'_>, mtu: u32) -> Result<(), LinkError> {
    let mut body = ifinfomsg(0, 0, 0);
    end_attrs(&mut body, local, mtu);
    let mut peer_msg = ifinfomsg(0, 0, 0);
    end_attrs(&mut peer_msg, peer, mtu);
    let mut data = Vec::new();
    push_attr(&mut data, VETH_INFO_PEER, &peer_msg);
    let mut info = Vec::new();
    push_attr(&mut info, IFLA_INFO_KIND, b"veth");
    push_attr(&mut info, IFLA_INFO_DATA, &data);
    push_attr(&mut body, IFLA_LINKINFO, &info);
    request(
        RTM_NEWLINK,
        &body,
        &format!("creating veth {} ⇄ {}", local.name, peer.name),
    )
}

/// Create a bridge `name` (no STP: its ports forward as soon as they are up).
///
/// # Errors
/// The kernel refused (the name exists, no bridge module).
pub fn add_bridge(name: &str, mac: [u8; 6]) -> Result<(), LinkError> {
    let mut body = ifinfomsg(0, 0, 0);
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    push_attr(&mut body, IFLA_IFNAME, &n);
    push_attr(&mut body, IFLA_ADDRESS, &mac);
    let mut info = Vec::new();
    push_attr(&mut info, IFLA_INFO_KIND, b"bridge");
    push_attr(&mut body, IFLA_LINKINFO, &info);
    request(RTM_NEWLINK, &body, &format!("creating bridge {name}"))
}

/// Make interface `name` a port of bridge `master` (`ip link set NAME master MASTER`).
///
/// # Errors
/// Either interface is missing, or the kernel refused.
pub fn set_master(name: &str, master: &str) -> Result<(), LinkError> {
    let (i, m) = (index(name)?, index(master)?);
    let mut body = ifinfomsg(i as i32, 0, 0);
    push_attr(&mut body, IFLA_MASTER, &m.to_ne_bytes());
    let what = format!("adding {name} to bridge {master}");
    let mut s = NetlinkSocket::open(libc::NETLINK_ROUTE).map_err(failed(&what))?;
    let seq = s
        .send(RTM_NEWLINK, libc::NLM_F_ACK as u16, &body)
        .map_err(failed(&what))?;
    s.replies(seq, |_, _| {}).map_err(failed(&what))
}

/// The index of interface `name` in this namespace.
///
/// # Errors
/// No such interface.
pub fn index(name: &str) -> Result<u32, LinkError> {
    let c = std::ffi::CString::new(name).map_err(|_| LinkError::NoSuchInterface(name.into()))?;
    // SAFETY: valid C string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(LinkError::NoSuchInterface(name.into())),
        i => Ok(i),
    }
}

/// Bring interface `name` up.
///
/// # Errors
/// No such interface, or the kernel refused.
pub fn set_up(name: &str) -> Result<(), LinkError> {
    let i = index(name)?;
    let up = libc::IFF_UP as u32;
    let body = ifinfomsg(i as i32, up, up);
    let mut s = NetlinkSocket::open(libc::NETLINK_ROUTE).map_err(failed("link up"))?;
    let seq = s
        .send(RTM_NEWLINK, libc::NLM_F_ACK as u16, &body)
        .map_err(failed(format!("bringing {name} up")))?;
    s.replies(seq, |_, _| {})
        .map_err(failed(format!("bringing {name} up")))
}

/// Add `addr/prefix` to interface `name`, without duplicate address detection (so an
/// IPv6 address is usable at once).
///
/// # Errors
/// No such interface, or the kernel refused.
pub fn add_address(name: &str, addr: IpAddr, prefix: u8) -> Result<(), LinkError> {
    let i = index(name)?;
    let (family, bytes) = family_bytes(addr);
    let mut body = vec![family, prefix, 0, 0];
    body.extend_from_slice(&i.to_ne_bytes());
    push_attr(&mut body, IFA_LOCAL, &bytes);
    push_attr(&mut body, IFA_ADDRESS, &bytes);
    push_attr(&mut body, IFA_FLAGS, &IFA_F_NODAD.to_ne_bytes());
    request(
        RTM_NEWADDR,
        &body,
        &format!("adding {addr}/{prefix} to {name}"),
    )
}

/// A permanent neighbour entry: `addr` is at `mac` on interface `name`, so no ARP or
/// neighbour discovery crosses the link (an emulated blackout must not also break
/// address resolution, which would add its own timers to what is measured).
///
/// # Errors
/// No such interface, or the kernel refused.
pub fn add_neighbour(name: &str, addr: IpAddr, mac: [u8; 6]) -> Result<(), LinkError> {
    let i = index(name)?;
    let (family, bytes) = family_bytes(addr);
    let mut body = vec![family, 0, 0, 0];
    body.extend_from_slice(&(i as i32).to_ne_bytes());
    body.extend_from_slice(&NUD_PERMANENT.to_ne_bytes());
    body.extend_from_slice(&[0, 0]);
    push_attr(&mut body, NDA_DST, &bytes);
    push_attr(&mut body, NDA_LLADDR, &mac);
    request(
        RTM_NEWNEIGH,
        &body,
        &format!("adding neighbour {addr} on {name}"),
    )
}

fn family_bytes(addr: IpAddr) -> (u8, Vec<u8>) {
    match addr {
        IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
    }
}

/// Legacy ethtool commands (linux/ethtool.h), still served by every kernel through the
/// features framework.
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_SSG: u32 = 0x19;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_SGRO: u32 = 0x2c;

/// Turn off segmentation and receive offloads (TSO, GSO, GRO, scatter-gather) and
/// transmit checksum offload on `name`, so every frame on the link is a complete
/// packet of at most one MTU with a valid checksum — what a real wire carries and what
/// a forwarder that reads frames with AF_PACKET can pass on unchanged.
///
/// # Errors
/// The ioctl failed for a reason other than "not supported".
pub fn disable_offloads(name: &str) -> Result<(), LinkError> {
    // SAFETY: a plain datagram socket used only for ioctls.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(LinkError::Failed {
            what: "socket for ethtool".into(),
            source: SyscallError::last("socket"),
        });
    }
    // SAFETY: fd is ours.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    for cmd in [
        ETHTOOL_STSO,
        ETHTOOL_SGSO,
        ETHTOOL_SGRO,
        ETHTOOL_SSG,
        ETHTOOL_STXCSUM,
    ] {
        #[repr(C)]
        struct EthtoolValue {
            cmd: u32,
            data: u32,
        }
        let mut v = EthtoolValue { cmd, data: 0 };
        // SAFETY: ifreq is plain data; the name fits (checked) and ifr_data points at v
        // for the duration of the ioctl.
        let rc = unsafe {
            let mut ifr: libc::ifreq = std::mem::zeroed();
            if name.len() >= ifr.ifr_name.len() {
                return Err(LinkError::NoSuchInterface(name.into()));
            }
            for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
                *d = s as libc::c_char;
            }
            ifr.ifr_ifru.ifru_data = (&mut v as *mut EthtoolValue).cast();
            libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr)
        };
        if rc != 0 {
            let e = SyscallError::last("ioctl(SIOCETHTOOL)");
            if e.source.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(LinkError::Failed {
                    what: format!("turning offloads off on {name}"),
                    source: e,
                });
            }
        }
    }
    Ok(())
}

const RTM_DELQDISC: u16 = 37;
const RTM_GETTFILTER: u16 = 46;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_BPF_NAME: u16 = 7;
/// `TC_H_CLSACT` (= `TC_H_INGRESS`): the clsact qdisc's parent.
const TC_H_CLSACT: u32 = 0xffff_fff1;
/// `TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)` and `…TC_H_MIN_EGRESS)`: where
/// clsact's ingress and egress filters hang.
const CLSACT_INGRESS: u32 = 0xffff_fff2;
const CLSACT_EGRESS: u32 = 0xffff_fff3;

/// `struct tcmsg`: family, padding, ifindex, handle, parent, info.
fn tcmsg(index: i32, handle: u32, parent: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(20);
    b.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    b.extend_from_slice(&index.to_ne_bytes());
    b.extend_from_slice(&handle.to_ne_bytes());
    b.extend_from_slice(&parent.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b
}

/// The filters on interface `name`'s clsact qdisc, ingress or egress: each one's
/// kind (`bpf`, `u32`, …) and, for a BPF filter, its program's name as the filter
/// records it (what `tc filter show` prints after `bpf`).
///
/// # Errors
/// No such interface, or the dump failed. No clsact qdisc is no filters.
pub fn clsact_filters(name: &str, ingress: bool) -> Result<Vec<(String, String)>, LinkError> {
    let i = index(name)?;
    let what = format!("listing tc filters of {name}");
    let parent = if ingress {
        CLSACT_INGRESS
    } else {
        CLSACT_EGRESS
    };
    let body = tcmsg(i as i32, 0, parent);
    let mut s = NetlinkSocket::open(libc::NETLINK_ROUTE).map_err(failed(&what))?;
    let seq = s
        .send(RTM_GETTFILTER, libc::NLM_F_DUMP as u16, &body)
        .map_err(failed(&what))?;
    let mut out = Vec::new();
    let r = s.replies(seq, |_, payload| {
        let mut kind = String::new();
        let mut prog = String::new();
        for (ty, data) in super::netlink::Attrs(payload.get(20..).unwrap_or(&[])) {
            let text = |d: &[u8]| {
                String::from_utf8_lossy(d.split(|&b| b == 0).next().unwrap_or(&[])).into_owned()
            };
            match ty {
                TCA_KIND => kind = text(data),
                TCA_OPTIONS => {
                    for (t, d) in super::netlink::Attrs(data) {
                        if t == TCA_BPF_NAME {
                            prog = text(d);
                        }
                    }
                }
                _ => {}
            }
        }
        // The dump lists a filter's chain and priority once without options; only
        // entries with a kind are filters.
        if !kind.is_empty() {
            out.push((kind, prog));
        }
    });
    match r {
        Ok(()) => Ok(out),
        // No clsact qdisc: nothing hangs there.
        Err(e) if matches!(e.source.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) => {
            Ok(Vec::new())
        }
        Err(e) => Err(LinkError::Failed { what, source: e }),
    }
}

/// Remove interface `name`'s clsact qdisc (and every filter on it).
///
/// # Errors
/// No such interface or qdisc, or the kernel refused.
pub fn delete_clsact(name: &str) -> Result<(), LinkError> {
    let i = index(name)?;
    let what = format!("removing the clsact qdisc of {name}");
    let mut body = tcmsg(i as i32, 0xffff_0000, TC_H_CLSACT);
    push_attr(&mut body, TCA_KIND, b"clsact\0");
    let mut s = NetlinkSocket::open(libc::NETLINK_ROUTE).map_err(failed(&what))?;
    let seq = s
        .send(RTM_DELQDISC, libc::NLM_F_ACK as u16, &body)
        .map_err(failed(&what))?;
    s.replies(seq, |_, _| {}).map_err(failed(&what))
}
