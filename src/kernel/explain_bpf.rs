//! `rttlab explain`'s kernel side: bpf/explain.bpf.c, BTF tracepoints (tp_btf) on the
//! paths every TCP segment and every read and write of a socket take (`tcp_probe`,
//! `sock_recv_length`, `tcp_sendmsg_locked`, `sock_send_length`,
//! `inet_sock_set_state`, `tcp_destroy_sock`), a retransmission
//! (`tcp_retransmit_skb`) and, when a client side is watched, a segment handed to the
//! driver (`net_dev_start_xmit`) and a socket with data to read (`sk_data_ready`),
//! loaded with aya and read through a ring buffer of finished transactions. What a
//! record means is `service`'s business; this module moves bytes. Tracepoints, not
//! fentry: some kernels (this project's CI among them) refuse to load fentry programs
//! at all, and these tracepoints sit where the functions' entries and exits would.
//!
//! Nothing is pinned and nothing outside the process is changed: the attachments are
//! BPF links the kernel removes when their last descriptor closes, so a killed run
//! leaves nothing behind. The table of watched sockets is bounded (`max_connections`)
//! and each socket leaves it when the kernel destroys it.
//!
//! # Privileges
//! CAP_BPF and CAP_PERFMON (root has them): tracing programs read kernel memory.
//!
//! # Minimum kernel
//! 6.3 (the `sock_send_length`, `sock_recv_length` and `sk_data_ready` tracepoints;
//! `tcp_sendmsg_locked` is 6.1), with BTF (`/sys/kernel/btf/vmlinux`, CONFIG_DEBUG_INFO_BTF) for tp_btf and
//! CO-RE.

use aya::maps::{HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::BtfTracePoint;
use aya::{Btf, Ebpf, EbpfLoader};
use std::os::fd::{AsRawFd, RawFd};

/// The compiled programs, committed beside their source.
static OBJECT: &[u8] = aya::include_bytes_aligned!("../../bpf/explain.bpf.o");

/// (program, tracepoint) in the order they are attached: the socket's end first, so
/// no entry outlives its socket. [`CLIENT_PROGRAMS`] after them when a client side is
/// watched.
const PROGRAMS: [(&str, &str); 7] = [
    ("rttlab_gone", "tcp_destroy_sock"),
    ("rttlab_state", "inet_sock_set_state"),
    ("rttlab_rx", "tcp_probe"),
    ("rttlab_read", "sock_recv_length"),
    ("rttlab_write", "tcp_sendmsg_locked"),
    ("rttlab_written", "sock_send_length"),
    ("rttlab_retransmit", "tcp_retransmit_skb"),
];

/// A client's request out to the driver and its response in: they run for every
/// packet the host sends and every socket woken to read, so they are attached only
/// when a client side is watched.
const CLIENT_PROGRAMS: [(&str, &str); 2] = [
    ("rttlab_xmit", "net_dev_start_xmit"),
    ("rttlab_readable", "sk_data_ready"),
];

/// Why explain's programs cannot run here, or failed.
#[derive(Debug, thiserror::Error)]
pub enum ExplainBpfError {
    /// No privilege to load tracing programs.
    #[error("explain needs CAP_BPF and CAP_PERFMON (run as root)")]
    NotPermitted,
    /// This kernel lacks what the programs need.
    #[error("kernel {release} cannot run explain ({what}; it needs Linux 6.3 or later with BTF, /sys/kernel/btf/vmlinux)")]
    Unsupported {
        /// `uname -r`.
        release: String,
        /// What failed: the missing feature, or the verifier's last line.
        what: String,
    },
    /// A map could not be read.
    #[error("explain's map {map}: {msg}")]
    Map {
        /// The map's name.
        map: &'static str,
        /// aya's error chain.
        msg: String,
    },
}

/// The raw record of one transaction, as `struct txn` in bpf/explain.bpf.c lays it
/// out (CLOCK_MONOTONIC ns; 0 where the kernel did not see that moment), by the
/// direction of its data at the end that saw it: in (a server's request, a client's
/// response) and out (a server's response, a client's request).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawTxn {
    /// The socket's cookie: one connection.
    pub cookie: u64,
    /// The first data segment in reached TCP.
    pub in_first_ns: u64,
    /// The last one.
    pub in_last_ns: u64,
    /// The application's first read of the data in returned.
    pub read_first_ns: u64,
    /// Its last read returned.
    pub read_last_ns: u64,
    /// The first write out began.
    pub write_first_ns: u64,
    /// The last write returned.
    pub write_last_ns: u64,
    /// A server's last byte out was ACKed (its ACK reached TCP).
    pub acked_ns: u64,
    /// A client's last byte out went to the driver.
    pub sent_ns: u64,
    /// Bytes in.
    pub in_bytes: u32,
    /// Bytes written out.
    pub out_bytes: u32,
    /// Data segments in.
    pub in_segments: u32,
    /// The connection's smoothed RTT when the transaction ended, µs.
    pub srtt_us: u32,
    /// Its minimum RTT then, µs.
    pub min_rtt_us: u32,
    /// Segments this end retransmitted while it ran.
    pub retrans: u32,
    /// `TXN_*` flags.
    pub flags: u32,
    /// The other end's IPv4 address, network order (zero for an IPv6 socket).
    pub remote_v4: [u8; 4],
    /// The other end's port.
    pub remote_port: u16,
    /// Which end saw it ([`SIDE_SERVER`] or [`SIDE_CLIENT`]).
    pub side: u8,
    /// This end's port.
    pub local_port: u16,
    /// The other end's IPv6 address, network order (zero for an IPv4 socket; an IPv4
    /// peer of a dual-stack socket is `::ffff:a.b.c.d`).
    pub remote_v6: [u8; 16],
    /// Retransmissions after an RTO expiry.
    pub rto: u16,
    /// Tail-loss probes.
    pub tlp: u16,
    /// Fast retransmissions.
    pub fast: u16,
}

/// A server's socket: on a watched local port.
pub const SIDE_SERVER: u8 = 1;
/// A client's socket: to a watched remote port.
pub const SIDE_CLIENT: u8 = 2;

/// The response began with request bytes still unread: pipelined requests.
pub const TXN_PIPELINED: u32 = 1;
/// The next request came before the response's last byte was ACKed.
pub const TXN_UNACKED: u32 = 2;
/// The ACK of the response rode on the client's next request.
pub const TXN_ACK_ON_DATA: u32 = 4;

/// `sizeof(struct txn)`.
pub const RAW_TXN_BYTES: usize = 160;

impl RawTxn {
    /// The record in `b`, or `None` when it is not one (a short record).
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() < RAW_TXN_BYTES {
            return None;
        }
        let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u16_at = |o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
        Some(Self {
            cookie: u64_at(0),
            in_first_ns: u64_at(8),
            in_last_ns: u64_at(16),
            read_first_ns: u64_at(24),
            read_last_ns: u64_at(32),
            write_first_ns: u64_at(40),
            write_last_ns: u64_at(48),
            acked_ns: u64_at(56),
            sent_ns: u64_at(64),
            in_bytes: u32_at(72),
            out_bytes: u32_at(76),
            in_segments: u32_at(80),
            // 84, 88: out_start_seq and out_end_seq, the program's own.
            srtt_us: u32_at(92),
            min_rtt_us: u32_at(96),
            retrans: u32_at(100),
            // 104: retrans_base, the program's own.
            flags: u32_at(108),
            remote_v4: b[112..116].try_into().expect("4 bytes"),
            remote_port: u16_at(116),
            // 118: phase, the program's own.
            side: b[119],
            local_port: u16_at(120),
            remote_v6: b[122..138].try_into().expect("16 bytes"),
            rto: u16_at(138),
            tlp: u16_at(140),
            fast: u16_at(142),
            // 144: retrans_seen; 148, 152: in_seq and in_end_seq, the program's own.
        })
    }
}

/// The kernel's counts: records sent, records the ring had no room for, segments of
/// sockets the full table had no room for, requests never answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Records sent to the ring.
    pub sent: u64,
    /// Transactions lost: the ring was full.
    pub lost: u64,
    /// Segments in (a server's) and writes (a client's) of sockets the full table had
    /// no room for: not timed.
    pub table_full: u64,
    /// Requests whose connection ended before any answer.
    pub unanswered: u64,
}

/// The programs, loaded and attached; detached when dropped.
pub struct ExplainBpf {
    // Holds the programs and their links.
    _ebpf: Ebpf,
    txns: RingBuf<MapData>,
    counters: PerCpuArray<MapData, u64>,
    /// The watched sockets' state, read at the end for what is still open.
    table: HashMap<MapData, u64, RawState>,
}

/// A socket's state in the table: `struct txn`'s bytes, as [`RawTxn::parse`] reads
/// them.
#[derive(Clone, Copy)]
#[repr(C)]
struct RawState([u8; RAW_TXN_BYTES]);

// SAFETY: a plain array of bytes, any bit pattern valid, no padding.
unsafe impl aya::Pod for RawState {}

/// `cfg_ports`: bit P % 8 of byte P / 8 set for each port P.
fn port_bits(ports: &[u16]) -> [u8; 8192] {
    let mut bits = [0; 8192];
    for &p in ports {
        bits[usize::from(p >> 3)] |= 1 << (p & 7);
    }
    bits
}

fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

fn unsupported(what: impl Into<String>) -> ExplainBpfError {
    ExplainBpfError::Unsupported {
        release: release(),
        what: what.into(),
    }
}

/// The last line of an error chain (the verifier's verdict ends its log).
fn last_line(e: &dyn std::error::Error) -> String {
    let chain = crate::error_chain(e);
    let line = chain.lines().rev().find(|l| !l.trim().is_empty());
    crate::excerpt(line.unwrap_or(&chain), 300)
}

impl ExplainBpf {
    /// Load the programs for connections to the local `ports` (this host their
    /// server) and from this host to the `remote_ports` (their client), at most
    /// `max_connections` watched at once, and attach them.
    ///
    /// # Errors
    /// No privilege, no BTF, or a kernel that refuses the programs.
    pub fn attach(
        ports: &[u16],
        remote_ports: &[u16],
        max_connections: u32,
    ) -> Result<Self, ExplainBpfError> {
        use super::privilege::Capability;
        let privileged =
            (Capability::Bpf.held() && Capability::Perfmon.held()) || Capability::SysAdmin.held();
        if !privileged {
            return Err(ExplainBpfError::NotPermitted);
        }
        let btf = Btf::from_sys_fs().map_err(|e| unsupported(format!("no kernel BTF: {e}")))?;
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .set_global("cfg_ports", &port_bits(ports), true)
            .set_global("cfg_remote_ports", &port_bits(remote_ports), true)
            .set_global("cfg_clients", &u8::from(!remote_ports.is_empty()), true)
            .set_max_entries("rttlab_txn", max_connections.max(1))
            .load(OBJECT)
            .map_err(|e| unsupported(last_line(&e)))?;
        let client = if remote_ports.is_empty() {
            &[][..]
        } else {
            &CLIENT_PROGRAMS[..]
        };
        for &(name, tracepoint) in PROGRAMS.iter().chain(client) {
            let prog: &mut BtfTracePoint = ebpf
                .program_mut(name)
                .ok_or_else(|| unsupported(format!("{name} is not in the object")))?
                .try_into()
                .map_err(|e| unsupported(last_line(&e)))?;
            prog.load(tracepoint, &btf)
                .and_then(|()| prog.attach().map(drop))
                .map_err(|e| unsupported(format!("tracepoint {tracepoint}: {}", last_line(&e))))?;
        }
        let map = |ebpf: &mut Ebpf, name: &'static str| {
            ebpf.take_map(name).ok_or(ExplainBpfError::Map {
                map: name,
                msg: "not in the object (rebuild it with bpf/build.sh)".into(),
            })
        };
        let txns = RingBuf::try_from(map(&mut ebpf, "rttlab_txns")?).map_err(|e| {
            ExplainBpfError::Map {
                map: "rttlab_txns",
                msg: crate::error_chain(&e),
            }
        })?;
        let counters =
            PerCpuArray::try_from(map(&mut ebpf, "rttlab_txn_counters")?).map_err(|e| {
                ExplainBpfError::Map {
                    map: "rttlab_txn_counters",
                    msg: crate::error_chain(&e),
                }
            })?;
        let table =
            HashMap::try_from(map(&mut ebpf, "rttlab_txn")?).map_err(|e| ExplainBpfError::Map {
                map: "rttlab_txn",
                msg: crate::error_chain(&e),
            })?;
        Ok(Self {
            _ebpf: ebpf,
            txns,
            counters,
            table,
        })
    }

    /// The ring's descriptor, readable when records wait.
    fn fd(&self) -> RawFd {
        self.txns.as_raw_fd()
    }

    /// Wait until a transaction is ready or `timeout` passes (a signal ends it early
    /// too).
    pub fn wait(&self, timeout: std::time::Duration) {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one pollfd we own, for the duration of the call.
        unsafe { libc::poll(&mut p, 1, ms) };
    }

    /// Every record waiting, each given to `f`; returns how many were not records.
    pub fn drain(&mut self, mut f: impl FnMut(RawTxn)) -> u64 {
        let mut malformed = 0;
        while let Some(item) = self.txns.next() {
            match RawTxn::parse(&item) {
                Some(t) => f(t),
                None => malformed += 1,
            }
        }
        malformed
    }

    /// Transactions answered and not yet sent: their connections have neither sent
    /// again nor closed (an idle keep-alive connection's last one), counted now.
    pub fn answered_and_open(&self) -> u64 {
        self.table
            .iter()
            .filter_map(Result::ok)
            .filter_map(|(_, v)| RawTxn::parse(&v.0))
            .filter(|t| t.in_first_ns != 0 && t.write_first_ns != 0)
            .count() as u64
    }

    /// Events the kernel skipped because the same program was already running on
    /// that CPU (a softirq over a process's call: each program's `recursion_misses`,
    /// /proc/self/fdinfo), summed over the programs.
    pub fn skipped(&self) -> u64 {
        use std::os::fd::AsFd;
        self._ebpf
            .programs()
            .filter_map(|(_, p)| p.fd().ok())
            .filter_map(|fd| {
                let raw = fd.as_fd().as_raw_fd();
                std::fs::read_to_string(format!("/proc/self/fdinfo/{raw}")).ok()
            })
            .filter_map(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("recursion_misses:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .sum()
    }

    /// The kernel's counts so far, summed over the CPUs.
    ///
    /// # Errors
    /// The counters could not be read.
    pub fn counts(&self) -> Result<Counts, ExplainBpfError> {
        let at = |i: u32| -> Result<u64, ExplainBpfError> {
            let v = self.counters.get(&i, 0).map_err(|e| ExplainBpfError::Map {
                map: "rttlab_txn_counters",
                msg: crate::error_chain(&e),
            })?;
            Ok(v.iter().sum())
        };
        Ok(Counts {
            sent: at(0)?,
            lost: at(1)?,
            table_full: at(2)?,
            unanswered: at(3)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Witness: the layout of `struct txn` in bpf/explain.bpf.c, field by field.
    #[test]
    fn a_record_reads_back_field_by_field() {
        let mut b = vec![0u8; RAW_TXN_BYTES];
        for (i, v) in (1..=9u64).enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&(v * 1000).to_ne_bytes());
        }
        for (i, v) in (1..=10u32).enumerate() {
            b[72 + i * 4..76 + i * 4].copy_from_slice(&(v * 10).to_ne_bytes());
        }
        b[112..116].copy_from_slice(&[10, 0, 0, 2]);
        b[116..118].copy_from_slice(&5555u16.to_ne_bytes());
        b[119] = SIDE_CLIENT;
        b[120..122].copy_from_slice(&6379u16.to_ne_bytes());
        b[142..144].copy_from_slice(&3u16.to_ne_bytes());
        let t = RawTxn::parse(&b).unwrap();
        assert_eq!((t.cookie, t.acked_ns, t.sent_ns), (1000, 8000, 9000));
        assert_eq!((t.in_bytes, t.out_bytes, t.in_segments), (10, 20, 30));
        assert_eq!(
            (t.srtt_us, t.min_rtt_us, t.retrans, t.flags),
            (60, 70, 80, 100)
        );
        assert_eq!((t.remote_v4, t.remote_port), ([10, 0, 0, 2], 5555));
        assert_eq!((t.side, t.local_port, t.fast), (SIDE_CLIENT, 6379, 3));
        assert_eq!(RawTxn::parse(&b[..RAW_TXN_BYTES - 1]), None);
    }
}
