//! tcpdump's filter language (pcap-filter(7)), compiled by libpcap itself
//! (`pcap_compile`, through the `pcap` crate), so that an expression pasted from a
//! tcpdump command line keeps exactly the packets tcpdump would keep.
//!
//! Where the program runs: live, in the kernel, as the capture socket's classic BPF
//! filter ahead of rttlab's own selection ([`super::filter::and_then`]), so a frame it
//! rejects is never copied; for files, in user space, once per packet, by libpcap's
//! own interpreter (`bpf_filter`) with the packet's length on the wire, as `tcpdump -r`
//! runs it (`greater`, `less` and `len` read that length, not the bytes captured).
//!
//! A program is compiled for one link type, since the offsets of the IP header differ
//! between them: live for the frames the ring hands out (Ethernet from the MAC header
//! on Ethernet and loopback, raw IP elsewhere), for a file for the link type its
//! packets carry (pcap's header, each pcapng interface's).

use crate::kernel::packet::SockFilter;
use crate::wire::LinkType;
use std::ffi::c_uint;

/// Link types rttlab reads, in the order an expression is tried against them when
/// checking it without a capture (Ethernet first: its message is the one reported,
/// as tcpdump's "assuming Ethernet").
const READABLE: [LinkType; 7] = [
    LinkType::Ethernet,
    LinkType::LinuxSll,
    LinkType::LinuxSll2,
    LinkType::Raw,
    LinkType::Null,
    LinkType::Ipv4,
    LinkType::Ipv6,
];

/// Why an expression gives no program.
#[derive(Debug, thiserror::Error)]
pub enum ExpressionError {
    /// libpcap could not compile it (its own message, pcap_geterr's).
    #[error("filter {text:?}: {message}")]
    Invalid {
        /// The expression as given.
        text: String,
        /// libpcap's message.
        message: String,
    },
    /// Its program is longer than the kernel takes for a socket filter.
    #[error("filter {text:?}: {len} instructions with rttlab's own selection, more than the kernel's {max}; simplify the expression")]
    TooLong {
        /// The expression as given.
        text: String,
        /// The length of the program that would be attached.
        len: usize,
        /// BPF_MAXINSNS.
        max: usize,
    },
    /// It reads what the kernel knows of a packet beside its bytes (`inbound`,
    /// `outbound`, `ifindex` on a link without them in its header): a live capture
    /// only, as tcpdump says for a savefile.
    #[error("filter {text:?}: it reads the kernel's packet metadata (inbound, outbound, ifindex), which a capture file of link type {link:?} does not keep")]
    Metadata {
        /// The expression as given.
        text: String,
        /// The file's link type.
        link: LinkType,
    },
}

/// A filter expression in tcpdump's language, known to compile for at least one link
/// type rttlab reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expression {
    text: String,
}

/// An expression compiled for one link type.
pub struct Program {
    bpf: pcap::BpfProgram,
}

impl Expression {
    /// The words of a command line's expression joined by spaces, as tcpdump joins
    /// them (`tcp port 443` and `'tcp port 443'` are the same); `None` when there are
    /// none.
    ///
    /// # Errors
    /// libpcap compiles it for none of the link types rttlab reads: its message for
    /// Ethernet.
    pub fn from_words<S: AsRef<str>>(words: &[S]) -> Result<Option<Self>, ExpressionError> {
        let text = words
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>()
            .join(" ");
        if text.trim().is_empty() {
            return Ok(None);
        }
        Self::new(&text).map(Some)
    }

    /// Check `text` by compiling it for each link type rttlab reads until one
    /// compiles: a syntax error fails every one, while `inbound` compiles only for
    /// the cooked captures and `ether host` not for raw IP, which the capture's own
    /// link type decides later ([`Self::compile`]).
    ///
    /// # Errors
    /// As [`Self::from_words`].
    pub fn new(text: &str) -> Result<Self, ExpressionError> {
        let e = Self { text: text.into() };
        let mut first = None;
        for link in READABLE {
            match e.compile(link) {
                Ok(_) => return Ok(e),
                Err(err) => {
                    first.get_or_insert(err);
                }
            }
        }
        Err(first.expect("READABLE is not empty"))
    }

    /// The expression as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The program for packets of `link`, optimised as tcpdump's (`pcap_compile` with
    /// optimisation on, netmask unknown).
    ///
    /// # Errors
    /// libpcap refuses the expression for this link type.
    pub fn compile(&self, link: LinkType) -> Result<Program, ExpressionError> {
        let invalid = |e: pcap::Error| ExpressionError::Invalid {
            text: self.text.clone(),
            message: match e {
                pcap::Error::PcapError(m) => m,
                other => other.to_string(),
            },
        };
        let dead = pcap::Capture::dead(pcap::Linktype(dlt(link))).map_err(invalid)?;
        let bpf = dead.compile(&self.text, true).map_err(invalid)?;
        Ok(Program { bpf })
    }

    /// The program for a capture file's packets of `link`: as [`Self::compile`], but
    /// refused where it would read kernel metadata that a file does not keep (libpcap
    /// compiles `inbound` on Ethernet to a Linux ancillary load, which only a socket
    /// filter can answer; tcpdump -r refuses it).
    ///
    /// # Errors
    /// As [`Self::compile`]; [`ExpressionError::Metadata`].
    pub fn compile_for_file(&self, link: LinkType) -> Result<Program, ExpressionError> {
        let p = self.compile(link)?;
        if p.instructions().iter().any(reads_metadata) {
            return Err(ExpressionError::Metadata {
                text: self.text.clone(),
                link,
            });
        }
        Ok(p)
    }
}

/// A load from the kernel's negative offsets (linux/filter.h: SKF_LL_OFF −0x200000 and
/// above, SKF_NET_OFF, SKF_AD_OFF's ancillary data): nothing in a packet's bytes.
fn reads_metadata(i: &SockFilter) -> bool {
    const LD_ABS_MASK: u16 = 0x07 | 0xe0;
    const LD_ABS: u16 = 0x20;
    const SKF_LL_OFF: u32 = 0xffe0_0000;
    i.code & LD_ABS_MASK == LD_ABS && i.k >= SKF_LL_OFF
}

/// The DLT_ number libpcap compiles for (`pcap_open_dead` takes a DLT, not a
/// LINKTYPE: they differ for raw IP, LINKTYPE_RAW 101 being DLT_RAW 12 on Linux).
fn dlt(link: LinkType) -> i32 {
    match link {
        LinkType::Null => 0,
        LinkType::Ethernet => 1,
        LinkType::Raw => 12,
        LinkType::LinuxSll => 113,
        LinkType::Ipv4 => 228,
        LinkType::Ipv6 => 229,
        LinkType::LinuxSll2 => 276,
    }
}

#[link(name = "pcap")]
extern "C" {
    /// libpcap's interpreter (pcap/bpf.h): run the program at `pc` on the `buflen`
    /// bytes at `p` of a packet `wirelen` bytes long on the wire; the bytes to keep,
    /// 0 to drop.
    fn bpf_filter(pc: *const SockFilter, p: *const u8, wirelen: c_uint, buflen: c_uint) -> c_uint;
}

impl Program {
    /// Whether the program keeps `frame` (the bytes captured) of a packet `wire_len`
    /// bytes long on the wire, run by libpcap as `tcpdump -r` runs it.
    #[inline]
    pub fn matches(&self, frame: &[u8], wire_len: u32) -> bool {
        let code = self.bpf.get_instructions();
        let buflen = c_uint::try_from(frame.len()).unwrap_or(c_uint::MAX);
        // SAFETY: `code` is the instruction array libpcap compiled and owns for as
        // long as `self.bpf` lives (`BpfInstruction` is `#[repr(transparent)]` over
        // its `struct bpf_insn`); bpf_filter reads at most `buflen` bytes of `frame`,
        // checking every load against that length, and keeps no pointer.
        unsafe { bpf_filter(code.as_ptr().cast(), frame.as_ptr(), wire_len, buflen) != 0 }
    }

    /// The program's instructions, for a socket filter.
    pub fn instructions(&self) -> Vec<SockFilter> {
        let code = self.bpf.get_instructions();
        // SAFETY: `BpfInstruction` is `#[repr(transparent)]` over libpcap's
        // `struct bpf_insn` { u16 code; u8 jt; u8 jf; u32 k }, which is the kernel's
        // `struct sock_filter` and `SockFilter`'s `#[repr(C)]` layout; the slice is
        // borrowed from `self.bpf` and copied out before it is dropped.
        unsafe { std::slice::from_raw_parts(code.as_ptr().cast::<SockFilter>(), code.len()) }
            .to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame of TCP over IPv4 from port `sport` to `dport`, 60 bytes.
    fn tcp4(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&[0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0]);
        f.extend_from_slice(&[127, 0, 0, 1, 127, 0, 0, 2]);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&[5 << 4, flags, 0xff, 0xff, 0, 0, 0, 0]);
        f.resize(60, 0);
        f
    }

    /// Witness: the frames' own bytes; libpcap compiles and runs each program.
    #[test]
    fn libpcap_keeps_what_the_expression_says() {
        let e = Expression::new("tcp port 443 and tcp[tcpflags] & tcp-syn != 0").unwrap();
        let p = e.compile(LinkType::Ethernet).unwrap();
        assert!(p.matches(&tcp4(443, 50000, 0x02), 60));
        assert!(!p.matches(&tcp4(443, 50000, 0x10), 60), "no SYN");
        assert!(!p.matches(&tcp4(80, 50000, 0x02), 60), "other port");
        // The length on the wire, not the bytes captured, as tcpdump -r.
        let long = Expression::new("greater 1000").unwrap();
        let p = long.compile(LinkType::Ethernet).unwrap();
        assert!(p.matches(&tcp4(1, 2, 0)[..54], 1500));
        assert!(!p.matches(&tcp4(1, 2, 0), 60));
        // Raw IP: the same packet without its Ethernet header.
        let p = e.compile(LinkType::Raw).unwrap();
        assert!(p.matches(&tcp4(443, 50000, 0x02)[14..], 46));
        assert!(
            !p.matches(&tcp4(443, 50000, 0x02), 60),
            "an Ethernet frame is not IP"
        );
    }

    /// libpcap's interpreter on a whole classic program: the bytes it keeps.
    fn run(prog: &[SockFilter], frame: &[u8]) -> u32 {
        let len = frame.len() as c_uint;
        // SAFETY: a valid program of plain loads, jumps and returns (no ancillary
        // data), every load checked by bpf_filter against `len`.
        unsafe { bpf_filter(prog.as_ptr(), frame.as_ptr(), len, len) }
    }

    /// Witness: libpcap's own interpreter running the joined program.
    #[test]
    fn an_expression_then_the_selection_keeps_what_both_keep_cut_as_the_selection_says() {
        use crate::capture::filter::{and_then, program, Selection};
        let syn = Expression::new("tcp[tcpflags] & tcp-syn != 0")
            .unwrap()
            .compile(LinkType::Ethernet)
            .unwrap()
            .instructions();
        let port = Selection {
            hosts: Vec::new(),
            ports: vec![443],
        };
        let p = and_then(&syn, &program(LinkType::Ethernet, &port, 96));
        assert_eq!(run(&p, &tcp4(443, 50000, 0x02)), 96);
        assert_eq!(
            run(&p, &tcp4(443, 50000, 0x10)),
            0,
            "the expression drops it"
        );
        assert_eq!(run(&p, &tcp4(80, 50000, 0x02)), 0, "the selection drops it");
        // `ret a` (libpcap emits none, the kernel takes it): kept when A is not 0.
        let insn = |code, k| SockFilter {
            code,
            jt: 0,
            jf: 0,
            k,
        };
        let (ld_len, ld_imm, ret_a, ret_k) = (0x80, 0x00, 0x16, 0x06);
        let then = [insn(ret_k, 7)];
        assert_eq!(
            run(
                &and_then(&[insn(ld_len, 0), insn(ret_a, 0)], &then),
                &[1; 20]
            ),
            7
        );
        assert_eq!(
            run(
                &and_then(&[insn(ld_imm, 0), insn(ret_a, 0)], &then),
                &[1; 20]
            ),
            0
        );
    }

    #[test]
    fn libpcap_messages_name_the_problem_on_one_line() {
        let err = Expression::new("tcp prot 80").unwrap_err().to_string();
        assert!(err.starts_with("filter \"tcp prot 80\": "), "{err}");
        assert!(err.contains("syntax error"), "{err}");
        assert!(!err.contains('\n'), "{err}");
        // A cooked capture keeps the direction in its header; on Ethernet it is the
        // kernel's metadata: a socket filter can read it, a file does not keep it.
        let inbound = Expression::new("inbound").unwrap();
        assert!(inbound.compile_for_file(LinkType::LinuxSll).is_ok());
        assert!(inbound.compile(LinkType::Ethernet).is_ok());
        let err = inbound
            .compile_for_file(LinkType::Ethernet)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("metadata"), "{err}");
        // Valid for no link type rttlab reads.
        let err = Expression::new("wlan addr1 1:2:3:4:5:6")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("filter \"wlan addr1"), "{err}");
        assert_eq!(Expression::from_words::<&str>(&[]).unwrap(), None);
        assert_eq!(
            Expression::from_words(&["tcp", "port", "443"]).unwrap(),
            Some(Expression::new("tcp port 443").unwrap())
        );
    }
}
