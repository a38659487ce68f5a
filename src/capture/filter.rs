//! The kernel-side selection of a live capture: a classic BPF program (the language
//! of SO_ATTACH_FILTER and of tcpdump's compiled filters) that keeps TCP over IPv4 or
//! IPv6 to or from the chosen hosts and ports, and at most a snap length of each frame.
//! The kernel runs it before copying a frame into the ring, so traffic the analysis
//! would drop anyway costs no copy, and a full-size frame costs only its headers.
//!
//! It keeps a superset of what `passive`'s own filter accepts: frames the program
//! cannot judge at fixed offsets (an 802.1Q tag left in the frame, IPv6 extension
//! headers, a non-first IPv4 fragment) are kept and left to the analysis.

use crate::kernel::packet::SockFilter;
use crate::wire::LinkType;
use std::net::IpAddr;

/// What a live capture keeps (empty lists: any host, any port).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// Addresses a frame's source or destination must be one of (an IPv4-mapped IPv6
    /// address matches as IPv4).
    pub hosts: Vec<IpAddr>,
    /// TCP ports a frame's source or destination port must be one of; with hosts as
    /// well, a frame must match both.
    pub ports: Vec<u16>,
}

impl Selection {
    /// Nothing selected: every TCP frame.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.ports.is_empty()
    }
}

// Classic BPF opcodes (linux/bpf_common.h).
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const ALU: u16 = 0x04;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MSH: u16 = 0xa0;
const JA: u16 = 0x00;
const JEQ: u16 = 0x10;
const JSET: u16 = 0x40;
const AND: u16 = 0x50;
const K: u16 = 0x00;
/// `ret a`: return the accumulator (BPF_RVAL's A).
const A_SRC: u16 = 0x10;

/// A frame's whole length, as a snap length (the kernel keeps min(frame, this)).
const WHOLE: u32 = 0x0004_0000;
const TCP: u32 = 6;
/// IPv6 next headers the analysis walks past to find TCP (hop-by-hop, routing,
/// fragment, authentication, destination options).
const IPV6_EXTENSIONS: [u32; 5] = [0, 43, 44, 51, 60];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    Keep,
    Drop,
    V4,
    V6,
    V4Host,
    V4Ports,
    V6Tcp,
    V6Host,
}

/// A program with symbolic jump targets, resolved by [`Asm::finish`]. Every
/// conditional jump is `jxx k, 0, 1` followed by an unconditional `ja` to its target
/// (a 32-bit offset), so no program is limited by the 8-bit conditional offsets.
#[derive(Default)]
struct Asm {
    code: Vec<SockFilter>,
    /// (index of a `ja`, its target).
    jumps: Vec<(usize, Label)>,
    labels: Vec<(Label, usize)>,
}

impl Asm {
    fn op(&mut self, code: u16, k: u32) {
        self.code.push(SockFilter {
            code,
            jt: 0,
            jf: 0,
            k,
        });
    }

    fn label(&mut self, l: Label) {
        self.labels.push((l, self.code.len()));
    }

    fn goto(&mut self, target: Label) {
        self.jumps.push((self.code.len(), target));
        self.op(JMP | JA, 0);
    }

    /// If `A <cond> k`, go to `target`.
    fn jump_if(&mut self, cond: u16, k: u32, target: Label) {
        self.code.push(SockFilter {
            code: JMP | cond | K,
            jt: 0,
            jf: 1,
            k,
        });
        self.goto(target);
    }

    fn finish(mut self) -> Vec<SockFilter> {
        for (at, target) in std::mem::take(&mut self.jumps) {
            let to = self
                .labels
                .iter()
                .find(|(l, _)| *l == target)
                .map(|&(_, i)| i)
                .expect("every jump target is placed");
            self.code[at].k = u32::try_from(to - at - 1).expect("forward jumps only");
        }
        self.code
    }
}

/// Compare the 16-byte address at `off` with each IPv6 host, going to `found` on a
/// match.
fn v6_addresses(a: &mut Asm, off: u32, hosts: &[[u8; 16]], found: Label) {
    for h in hosts {
        let word =
            |i: usize| u32::from_be_bytes([h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]]);
        // Four words must all match: a mismatch skips the rest of this host.
        let mut skips = Vec::new();
        for i in 0..4 {
            a.op(LD | W | ABS, off + 4 * i as u32);
            skips.push(a.code.len());
            a.code.push(SockFilter {
                code: JMP | JEQ | K,
                jt: 0,
                jf: 0,
                k: word(i),
            });
        }
        a.goto(found);
        let end = a.code.len();
        for s in skips {
            a.code[s].jf = u8::try_from(end - s - 1).expect("within one host's block");
        }
    }
}

/// Load the TCP ports at `A`'s source (`sport_at`) and destination and go to Keep if
/// either is selected, else Drop; with no ports, Keep.
fn ports(
    a: &mut Asm,
    select: &Selection,
    load_sport: impl Fn(&mut Asm),
    load_dport: impl Fn(&mut Asm),
) {
    if select.ports.is_empty() {
        a.goto(Label::Keep);
        return;
    }
    for load in [&load_sport as &dyn Fn(&mut Asm), &load_dport] {
        load(a);
        for &p in &select.ports {
            a.jump_if(JEQ, u32::from(p), Label::Keep);
        }
    }
    a.goto(Label::Drop);
}

/// The kernel's longest classic BPF program (BPF_MAXINSNS).
pub const MAX_INSNS: usize = 4096;

/// The program for frames of `link` (Ethernet: from the MAC header; Raw: from the IP
/// header), keeping `snaplen` bytes (0: whole frames) of TCP frames `select` may match.
/// A selection too long for one program (hundreds of hosts and ports) keeps every TCP
/// frame and leaves the choice to the analysis.
pub fn program(link: LinkType, select: &Selection, snaplen: u32) -> Vec<SockFilter> {
    let p = build(link, select, snaplen);
    if p.len() <= MAX_INSNS {
        p
    } else {
        build(link, &Selection::default(), snaplen)
    }
}

fn build(link: LinkType, select: &Selection, snaplen: u32) -> Vec<SockFilter> {
    let l3: u32 = if link == LinkType::Raw { 0 } else { 14 };
    let v4_hosts: Vec<u32> = select
        .hosts
        .iter()
        .filter_map(|h| match h {
            IpAddr::V4(a) => Some(u32::from(*a)),
            IpAddr::V6(a) => a.to_ipv4_mapped().map(u32::from),
        })
        .collect();
    let v6_hosts: Vec<[u8; 16]> = select
        .hosts
        .iter()
        .filter_map(|h| match h {
            IpAddr::V6(a) if a.to_ipv4_mapped().is_none() => Some(a.octets()),
            _ => None,
        })
        .collect();
    let mut a = Asm::default();
    if link == LinkType::Raw {
        a.op(LD | B | ABS, 0);
        a.op(ALU | AND | K, 0xf0);
        a.jump_if(JEQ, 0x40, Label::V4);
        a.jump_if(JEQ, 0x60, Label::V6);
    } else {
        a.op(LD | H | ABS, 12);
        a.jump_if(JEQ, 0x0800, Label::V4);
        a.jump_if(JEQ, 0x86dd, Label::V6);
        // A VLAN tag left in the frame: the analysis reads past it.
        a.jump_if(JEQ, 0x8100, Label::Keep);
        a.jump_if(JEQ, 0x88a8, Label::Keep);
    }
    a.goto(Label::Drop);

    a.label(Label::V4);
    a.op(LD | B | ABS, l3 + 9);
    a.jump_if(JEQ, TCP, Label::V4Host);
    a.goto(Label::Drop);
    a.label(Label::V4Host);
    // A non-first fragment has no TCP header: the analysis counts it.
    a.op(LD | H | ABS, l3 + 6);
    a.jump_if(JSET, 0x1fff, Label::Keep);
    if !select.hosts.is_empty() {
        for off in [l3 + 12, l3 + 16] {
            a.op(LD | W | ABS, off);
            for &h in &v4_hosts {
                a.jump_if(JEQ, h, Label::V4Ports);
            }
        }
        a.goto(Label::Drop);
    }
    a.label(Label::V4Ports);
    // X = the IPv4 header's length; the ports follow it.
    a.op(LDX | B | MSH, l3);
    ports(
        &mut a,
        select,
        |a| a.op(LD | H | IND, l3),
        |a| a.op(LD | H | IND, l3 + 2),
    );

    a.label(Label::V6);
    a.op(LD | B | ABS, l3 + 6);
    a.jump_if(JEQ, TCP, Label::V6Tcp);
    for nh in IPV6_EXTENSIONS {
        a.jump_if(JEQ, nh, Label::Keep);
    }
    a.goto(Label::Drop);
    a.label(Label::V6Tcp);
    if !select.hosts.is_empty() {
        v6_addresses(&mut a, l3 + 8, &v6_hosts, Label::V6Host);
        v6_addresses(&mut a, l3 + 24, &v6_hosts, Label::V6Host);
        a.goto(Label::Drop);
    }
    a.label(Label::V6Host);
    ports(
        &mut a,
        select,
        |a| a.op(LD | H | ABS, l3 + 40),
        |a| a.op(LD | H | ABS, l3 + 42),
    );

    a.label(Label::Keep);
    a.op(RET | K, if snaplen == 0 { WHOLE } else { snaplen });
    a.label(Label::Drop);
    a.op(RET | K, 0);
    a.finish()
}

/// One program of two: the frames `first` keeps and then `then` keeps, cut as `then`
/// says (a tcpdump expression compiled by libpcap first, rttlab's selection and snap
/// length after it). Every `ret` of `first` that keeps (`ret #k` with k > 0) becomes a
/// jump to the start of `then`, and `ret a` a test of A on the way there; `ret #0`
/// stays. `first`'s jumps keep their targets (each replaced instruction is one
/// instruction), and classic BPF jumps only forward, so none lands inside `then`.
/// `then` starts with A, X and the scratch memory as `first` left them, which a
/// libpcap or [`program`] program never reads before writing.
pub fn and_then(first: &[SockFilter], then: &[SockFilter]) -> Vec<SockFilter> {
    let ret_a = first.iter().filter(|i| i.code == RET | A_SRC).count();
    // After `first`: for `ret a`, `jeq #0` to a `ret #0`, else on into `then`.
    let tail = if ret_a > 0 { 2 } else { 0 };
    let start = first.len() + tail;
    let mut out = Vec::with_capacity(start + then.len());
    for (at, i) in first.iter().enumerate() {
        let to = |target: usize| u32::try_from(target - at - 1).expect("a forward jump");
        out.push(match (i.code, i.k) {
            (c, k) if c == RET | K && k != 0 => SockFilter {
                code: JMP | JA,
                jt: 0,
                jf: 0,
                k: to(start),
            },
            (c, _) if c == RET | A_SRC => SockFilter {
                code: JMP | JA,
                jt: 0,
                jf: 0,
                k: to(first.len()),
            },
            _ => *i,
        });
    }
    if tail > 0 {
        out.push(SockFilter {
            code: JMP | JEQ | K,
            jt: 0,
            jf: 1,
            k: 0,
        });
        out.push(SockFilter {
            code: RET | K,
            jt: 0,
            jf: 0,
            k: 0,
        });
    }
    out.extend_from_slice(then);
    out
}

/// Run a classic BPF program on `frame` as the kernel would (the subset
/// [`program`] emits): the number of bytes it keeps, 0 to drop. For tests and for
/// checking a program against a capture file.
pub fn run(prog: &[SockFilter], frame: &[u8]) -> u32 {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let load = |off: usize, n: usize| -> Option<u32> {
        let b = frame.get(off..off + n)?;
        Some(b.iter().fold(0u32, |v, &x| (v << 8) | u32::from(x)))
    };
    while let Some(i) = prog.get(pc) {
        pc += 1;
        let k = i.k as usize;
        let size = match i.code & 0x18 {
            W => 4,
            H => 2,
            _ => 1,
        };
        match i.code & 0x07 {
            LD => {
                let off = if i.code & 0xe0 == IND {
                    x as usize + k
                } else {
                    k
                };
                match load(off, size) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            LDX => match frame.get(k) {
                Some(&b) => x = u32::from(b & 0x0f) * 4,
                None => return 0,
            },
            ALU if i.code & 0xf0 == AND => a &= i.k,
            JMP => {
                let taken = match i.code & 0xf0 {
                    JA => {
                        pc += k;
                        continue;
                    }
                    JEQ => a == i.k,
                    JSET => a & i.k != 0,
                    _ => return 0,
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            RET => return i.k,
            _ => return 0,
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame of TCP over IPv4 or IPv6 between the given addresses and ports.
    fn frame(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, proto: u8) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[12] = 5 << 4;
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                f.extend_from_slice(&[0x08, 0x00]);
                // A 24-byte header (one option word) so the port offset follows IHL.
                let mut ip = vec![0x46, 0, 0, 44, 0, 0, 0x40, 0, 64, proto, 0, 0];
                ip.extend_from_slice(&s.octets());
                ip.extend_from_slice(&d.octets());
                ip.extend_from_slice(&[1, 1, 1, 0]);
                f.extend_from_slice(&ip);
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                f.extend_from_slice(&[0x86, 0xdd]);
                f.extend_from_slice(&[0x60, 0, 0, 0, 0, 20, proto, 64]);
                f.extend_from_slice(&s.octets());
                f.extend_from_slice(&d.octets());
            }
            _ => unreachable!(),
        }
        f.extend_from_slice(&tcp);
        f
    }

    /// Witness: the frames' own bytes, built field by field above; each case says
    /// which selection must keep or drop it.
    #[test]
    fn keeps_exactly_the_selected_tcp_frames() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let (h4, o4, h6, o6) = (ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::1"), ip("fd00::2"));
        let sel = Selection {
            hosts: vec![h4, h6],
            ports: vec![443, 12867],
        };
        let p = program(LinkType::Ethernet, &sel, 128);
        let keep = |f: &[u8]| run(&p, f);
        assert_eq!(keep(&frame(h4, o4, 443, 50000, 6)), 128);
        assert_eq!(keep(&frame(o4, h4, 50000, 12867, 6)), 128);
        assert_eq!(keep(&frame(o4, o4, 443, 50000, 6)), 0, "other hosts");
        assert_eq!(keep(&frame(h4, o4, 80, 50000, 6)), 0, "other ports");
        assert_eq!(keep(&frame(h4, o4, 443, 50000, 17)), 0, "UDP");
        assert_eq!(keep(&frame(h6, o6, 50000, 443, 6)), 128);
        assert_eq!(keep(&frame(o6, h6, 12867, 1, 6)), 128);
        assert_eq!(keep(&frame(o6, o6, 443, 1, 6)), 0, "other IPv6 hosts");
        assert_eq!(keep(&frame(h6, o6, 1, 2, 6)), 0, "other IPv6 ports");
        // A hop-by-hop header: left to the analysis.
        assert_eq!(keep(&frame(o6, o6, 1, 2, 0)), 128);
        // A non-first fragment: left to the analysis.
        let mut frag = frame(o4, o4, 1, 2, 6);
        frag[20] = 0x00;
        frag[21] = 0x10;
        assert_eq!(keep(&frag), 128);
        // ARP: dropped.
        let mut arp = frame(h4, o4, 443, 1, 6);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(keep(&arp), 0);
        // Nothing selected, no snap length: every TCP frame, whole.
        let all = program(LinkType::Ethernet, &Selection::default(), 0);
        assert_eq!(run(&all, &frame(o4, o4, 1, 2, 6)), WHOLE);
        assert_eq!(run(&all, &frame(o4, o4, 1, 2, 17)), 0);
        // Raw IP (a tun device): the same frames without the Ethernet header.
        let raw = program(LinkType::Raw, &sel, 0);
        assert_eq!(run(&raw, &frame(h4, o4, 443, 50000, 6)[14..]), WHOLE);
        assert_eq!(run(&raw, &frame(h6, o6, 443, 1, 6)[14..]), WHOLE);
        assert_eq!(run(&raw, &frame(h4, o4, 80, 50000, 6)[14..]), 0);
    }

    #[test]
    fn long_selections_jump_within_range_or_fall_back_to_all_tcp() {
        let sel = Selection {
            hosts: (0..200u32)
                .map(|i| IpAddr::from((0x0a00_0000 + i).to_be_bytes()))
                .chain((0..50u16).map(|i| IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, i])))
                .collect(),
            ports: (1000..1300).collect(),
        };
        let p = program(LinkType::Ethernet, &sel, 0);
        assert!(p.len() <= MAX_INSNS, "{}", p.len());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            run(&p, &frame(ip("10.0.0.199"), ip("192.0.2.1"), 9, 1299, 6)),
            WHOLE
        );
        // Too long for one program: every TCP frame is kept, the analysis chooses.
        assert_eq!(
            run(&p, &frame(ip("192.0.2.2"), ip("192.0.2.1"), 9, 9, 6)),
            WHOLE
        );
        assert_eq!(
            run(&p, &frame(ip("192.0.2.2"), ip("192.0.2.1"), 9, 9, 17)),
            0
        );
        // A long selection that fits is used as it is.
        let fits = Selection {
            hosts: sel.hosts[..100].to_vec(),
            ports: sel.ports[..100].to_vec(),
        };
        let p = program(LinkType::Ethernet, &fits, 0);
        assert!(p.len() > 500 && p.len() <= MAX_INSNS, "{}", p.len());
        assert_eq!(
            run(&p, &frame(ip("10.0.0.99"), ip("192.0.2.1"), 9, 1099, 6)),
            WHOLE
        );
        assert_eq!(
            run(&p, &frame(ip("192.0.2.2"), ip("192.0.2.1"), 9, 1099, 6)),
            0
        );
    }
}
