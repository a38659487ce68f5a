// SPDX-License-Identifier: GPL-2.0
// rttlab explain's kernel side: every transaction of every TCP connection to a watched
// local port (the server side) or from this host to a watched remote port (the client
// side), timed by the kernel's own clock at the places it passes, with no change to
// the application and no protocol parser. A transaction is what the client sends
// until the server sends (the turn of direction of the data, as Jones's "A Brief Look
// at Round Trip Time" reads a request/response exchange), then what the server sends
// until the client sends again.
//
// Nine BTF tracepoints (tp_btf: no kprobes, and no fentry, which some kernels refuse
// to load), on the paths every segment and every read or write of a socket take:
//   tcp_probe           a segment reaches tcp_rcv_established: a server's request
//                       data, or the ACK of its response's last byte (its ack_seq,
//                       read from the header)
//   sock_recv_length    a read of the socket returned (sock_recvmsg): the
//                       application read data in
//   tcp_sendmsg_locked  a write of the socket began
//   sock_send_length    a write returned (sock_sendmsg)
//   net_dev_start_xmit  a segment is handed to the driver: a client's request out
//   sk_data_ready       a socket has data to read: a client's response in (these
//                       two attached only when a client side is watched: they run
//                       for every packet the host sends, and every socket woken)
//   inet_sock_set_state the connection is closing: an ACK then is read from snd_una
//   tcp_destroy_sock    the socket is gone: its last transaction is sent
//   tcp_retransmit_skb  a segment is sent again: counted by its cause
// A transaction is sent at the turn (the client's next request) or the connection's
// end, never at an ACK alone: a server may write more after all it wrote was ACKed.
// A server's socket is watched from its first segment on the port, a client's from
// its first write to the remote port; its state lives in a hash table keyed by the
// socket, bounded (a socket past it is counted, not timed) and emptied of each socket
// as the kernel destroys it. Reads and writes are looked up there only, so a socket
// of another protocol on the same port number is never one. A finished transaction
// goes to the ring buffer as one record; a full ring counts it lost.
//
// Kernel structures are read with CO-RE: only the fields named below, relocated by
// the loader against the running kernel's BTF.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

struct in6_addr {
	union {
		__u8 u6_addr8[16];
	} in6_u;
} __attribute__((preserve_access_index));

struct sock_common {
	union {
		struct {
			__be32 skc_daddr;
			__be32 skc_rcv_saddr;
		};
	};
	union {
		struct {
			__be16 skc_dport;
			__u16 skc_num;
		};
	};
	unsigned short skc_family;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u8 sk_shutdown;
} __attribute__((preserve_access_index));

// sk_shutdown's bit for a FIN received (include/net/sock.h).
#define RCV_SHUTDOWN 1

struct minmax_sample {
	__u32 t;
	__u32 v;
} __attribute__((preserve_access_index));

struct minmax {
	struct minmax_sample s[3];
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 rcv_nxt;
	__u32 copied_seq;
	__u32 write_seq;
	__u32 snd_una;
	__u32 srtt_us;
	struct minmax rtt_min;
	__u32 total_retrans;
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	__u8 icsk_ca_state:5;
} __attribute__((preserve_access_index));

// icsk_ca_state (include/net/tcp.h, enum tcp_ca_state).
#define TCP_CA_RECOVERY 3
#define TCP_CA_LOSS 4

struct sk_buff {
	unsigned int len;
	unsigned char *data;
	unsigned char *head;
	__u16 transport_header;
	struct sock *sk;
} __attribute__((preserve_access_index));

struct net_device;

struct msghdr;

#define MSG_PEEK 2

// Flags of a transaction record.
#define TXN_PIPELINED 1 // the response began with request bytes still unread
#define TXN_UNACKED 2   // the next request came before the response's last byte was ACKed
#define TXN_ACK_ON_DATA 4 // the ACK of the response rode on the client's next request

// The phases of a connection between turns: a server's socket goes idle → request
// (data in) and its response is the writes that follow; a client's goes idle →
// request (its writes) → response (data in).
#define PHASE_IDLE 0
#define PHASE_REQUEST 1
#define PHASE_RESPONSE 2

// Which end of its connection a watched socket is.
#define SIDE_NONE 0
#define SIDE_SERVER 1
#define SIDE_CLIENT 2

// One transaction as one end's kernel saw it (CLOCK_MONOTONIC ns; 0: not seen), by
// the direction of its data: in (a server's request, a client's response) and out
// (a server's response, a client's request).
struct txn {
	__u64 cookie;        // the socket's cookie: one connection
	__u64 in_first_ns;   // the first data segment in reached TCP
	__u64 in_last_ns;    // the last one
	__u64 read_first_ns; // the application's first read of it returned
	__u64 read_last_ns;  // its last read returned
	__u64 write_first_ns; // the first write out began
	__u64 write_last_ns; // the last write returned
	__u64 acked_ns;      // the ACK of a server's last byte out reached TCP
	__u64 sent_ns;       // a client's last byte out went to the driver
	__u32 in_bytes;
	__u32 out_bytes;
	__u32 in_segments;
	__u32 out_start_seq; // write_seq when the first write began
	__u32 out_end_seq;   // write_seq when the last write returned (0: none yet)
	__u32 srtt_us;       // the connection's smoothed RTT when it ended (µs)
	__u32 min_rtt_us;    // its minimum RTT (tcp_sock.rtt_min, the windowed minimum
	                     // tcp_update_rtt_min keeps), µs
	__u32 retrans;       // segments retransmitted while it ran
	__u32 retrans_base;  // total_retrans when it began
	__u32 flags;
	__u32 raddr;         // the other end's IPv4 address (0 for IPv6)
	__u16 rport;         // the other end's port
	__u8 phase;
	__u8 side;           // SIDE_SERVER or SIDE_CLIENT
	__u16 lport;         // this end's port
	__u8 raddr6[16];     // the other end's IPv6 address (an AF_INET6 socket's; an
	                     // IPv4 peer of a dual-stack socket is ::ffff:a.b.c.d)
	__u16 rto;           // segments retransmitted while it ran, by cause
	__u16 tlp;           //   (rttlab_retransmit): after an RTO expiry, tail-loss
	__u16 fast;          //   probes, fast retransmissions
	__u16 retrans_seen;  // total_retrans (wrapping) at the socket's last
	                     // tcp_retransmit_skb event, kept across its transactions
	__u32 in_seq;        // rcv_nxt where the data in began: a server's request, or
	                     // a client's response counted so far (rttlab_readable)
	__u32 in_end_seq;    // a server's rcv_nxt at its response's first write
};

// Counters: records sent, records the ring had no room for, segments in (a server's)
// and writes (a client's) of sockets the full table had no room for, requests the
// connection ended before any answer.
#define C_SENT 0
#define C_LOST 1
#define C_FULL 2
#define C_UNANSWERED 3
#define C_N 4

// The watched local ports (the server side) and remote ports (the client side), one
// bit each (port P: bit P % 8 of byte P / 8): a load and a test per segment, whatever
// the number of ports.
const volatile __u8 cfg_ports[8192] = {};
const volatile __u8 cfg_remote_ports[8192] = {};
// Whether any remote port is watched: without one, the verifier drops the client's
// test (a constant of frozen read-only data), and a socket of neither side costs no
// more than before the client side existed.
const volatile __u8 cfg_clients = 0;

// Sized by the loader (--max-connections).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct txn);
} rttlab_txn SEC(".maps");

#define RING_BYTES (1 << 22)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RING_BYTES);
} rttlab_txns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_N);
	__type(key, __u32);
	__type(value, __u64);
} rttlab_txn_counters SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&rttlab_txn_counters, &which);
	if (c)
		*c += 1;
}

// Which end of a watched connection `sk` is: the server on a watched local port, the
// client of a watched remote port.
static __always_inline int side_of(struct sock *sk)
{
	__u16 port = BPF_CORE_READ(sk, __sk_common.skc_num);
	if (cfg_ports[port >> 3] & (1 << (port & 7)))
		return SIDE_SERVER;
	if (!cfg_clients)
		return SIDE_NONE;
	port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (cfg_remote_ports[port >> 3] & (1 << (port & 7)))
		return SIDE_CLIENT;
	return SIDE_NONE;
}

// The transaction state of a watched socket; made on its first sight when it is the
// side `create` names (a server's at its first segment in, a client's at its first
// write), else only looked up.
static __always_inline struct txn *state(struct sock *sk, int create)
{
	int side = side_of(sk);
	if (side == SIDE_NONE)
		return 0;
	__u64 key = (__u64)sk;
	struct txn *t = bpf_map_lookup_elem(&rttlab_txn, &key);
	if (t || side != create)
		return t;
	// The ports now: the record may be sent after the socket let them go.
	struct txn zero = {
		.lport = BPF_CORE_READ(sk, __sk_common.skc_num),
		.rport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport)),
		.side = side,
		// A server's first data in begins here (tcp_probe runs before TCP takes
		// the segment).
		.in_seq = BPF_CORE_READ((struct tcp_sock *)sk, rcv_nxt),
		// Retransmissions before the socket was watched are no transaction's.
		.retrans_seen = BPF_CORE_READ((struct tcp_sock *)sk, total_retrans),
	};
	if (bpf_map_update_elem(&rttlab_txn, &key, &zero, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&rttlab_txn, &key)) {
		count(C_FULL);
		return 0;
	}
	return bpf_map_lookup_elem(&rttlab_txn, &key);
}

// A transaction begins: its retransmissions, in all and by cause, count from here
// (what came since the socket was watched or the last one finished is no one's).
static __always_inline void count_from_here(struct txn *t, struct tcp_sock *tp)
{
	t->retrans_base = BPF_CORE_READ(tp, total_retrans);
	t->rto = 0;
	t->tlp = 0;
	t->fast = 0;
}

// Send the transaction in `t` (if one began and was answered) and clear it for the
// next.
static __always_inline void finish(struct sock *sk, struct txn *t)
{
	// The request: data in on a server, a write on a client.
	int asked = t->side == SIDE_SERVER ? t->in_first_ns != 0 : t->write_first_ns != 0;
	if (asked && !(t->in_first_ns && t->write_first_ns))
		count(C_UNANSWERED);
	if (t->in_first_ns && t->write_first_ns) {
		struct tcp_sock *tp = (struct tcp_sock *)sk;
		// A server's request: every byte TCP took before the response began, by
		// sequence number, so that a segment whose tcp_probe the kernel skipped (a
		// program already running on that CPU: its recursion_misses) still counts.
		if (t->side == SIDE_SERVER)
			t->in_bytes = t->in_end_seq - t->in_seq;
		// Every byte written since the response began, to its last write's return
		// (a FIN sent since counts in write_seq too); to now when no write has
		// returned yet (see rttlab_rx).
		__u32 end = t->out_end_seq ? t->out_end_seq : BPF_CORE_READ(tp, write_seq);
		t->out_bytes = end - t->out_start_seq;
		t->srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;
		t->min_rtt_us = BPF_CORE_READ(tp, rtt_min.s[0].v);
		t->retrans = BPF_CORE_READ(tp, total_retrans) - t->retrans_base;
		if (!t->cookie)
			t->cookie = bpf_get_socket_cookie(sk);
		__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
		if (family == 2)
			t->raddr = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		else if (family == 10)
			BPF_CORE_READ_INTO(&t->raddr6, sk, __sk_common.skc_v6_daddr);
		// Waking the reader for every record cost more than everything else
		// together (µs each, on the service's own path: bench/RESULTS-explain.md);
		// it is woken once an eighth of the ring waits, and polls every 0.1 s.
		__u64 wake = bpf_ringbuf_query(&rttlab_txns, BPF_RB_AVAIL_DATA) >= RING_BYTES / 8
				     ? BPF_RB_FORCE_WAKEUP
				     : BPF_RB_NO_WAKEUP;
		if (bpf_ringbuf_output(&rttlab_txns, t, sizeof(*t), wake))
			count(C_LOST);
		else
			count(C_SENT);
	}
	__u64 cookie = t->cookie;
	__u16 lport = t->lport, rport = t->rport;
	__u8 side = t->side;
	// The next request's data begins where this one's ended.
	__u32 next_in = t->in_end_seq ? t->in_end_seq : t->in_seq;
	__u16 retrans_seen = t->retrans_seen;
	__builtin_memset(t, 0, sizeof(*t));
	t->cookie = cookie;
	t->lport = lport;
	t->rport = rport;
	t->side = side;
	t->in_seq = next_in;
	t->retrans_seen = retrans_seen;
}

// Whether `ack` (host order) ACKs every byte the response has written, the first
// time it does.
static __always_inline int ack_covers_writes(struct sock *sk, struct txn *t, __u32 ack)
{
	__u32 written = BPF_CORE_READ((struct tcp_sock *)sk, write_seq);
	return t->write_first_ns && !t->acked_ns && (__s32)(ack - written) >= 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(rttlab_rx, struct sock *sk, struct sk_buff *skb)
{
	struct txn *t = state(sk, SIDE_SERVER);
	// A client's data in is rttlab_readable's: this sees only an established
	// connection's segments, and a client may have shut its writing half.
	if (!t || t->side == SIDE_CLIENT)
		return 0;
	unsigned char *data = BPF_CORE_READ(skb, data);
	unsigned int len = BPF_CORE_READ(skb, len);
	__u8 doff = 0;
	__be32 seq = 0, ack_seq = 0;
	// skb->data is at the TCP header here (tcp_v4_rcv and tcp_v6_rcv pulled the
	// IP header): seq at byte 4, ack_seq at 8, the data offset's high nibble at 12.
	if (bpf_probe_read_kernel(&doff, 1, data + 12) ||
	    bpf_probe_read_kernel(&seq, 4, data + 4) ||
	    bpf_probe_read_kernel(&ack_seq, 4, data + 8))
		return 0;
	unsigned int hlen = (doff >> 4) * 4;
	unsigned int payload = len > hlen ? len - hlen : 0;
	// Data TCP already has (the client sent it again: its ACK was lost) is no new
	// request: without this, a lost response would start a transaction twice.
	__u32 rcv_nxt = BPF_CORE_READ((struct tcp_sock *)sk, rcv_nxt);
	if (payload && (__s32)(bpf_ntohl(seq) + payload - rcv_nxt) <= 0)
		payload = 0;
	__u64 now = bpf_ktime_get_ns();
	// The turn is the server's first write, not its return: this runs under the
	// socket's lock, as the write does (tcp_sendmsg_locked), but a write's return
	// (sock_send_length) comes after the lock is let go, by which time the client
	// may have read the response and sent its next request (seen here first).
	// The ACK first: a request segment carries the ACK of the response before it.
	// The response is ACKed when every byte written so far is; it ends only at the
	// next request or the connection's end, since the server may write more (a large
	// response drains the send buffer between its writes, and each time all of it
	// is ACKed).
	if (ack_covers_writes(sk, t, bpf_ntohl(ack_seq))) {
		t->acked_ns = now;
		if (payload)
			t->flags |= TXN_ACK_ON_DATA;
	}
	if (!payload)
		return 0;
	if (t->write_first_ns) {
		if (!t->acked_ns)
			t->flags |= TXN_UNACKED;
		finish(sk, t);
	}
	if (t->phase != PHASE_REQUEST) {
		t->phase = PHASE_REQUEST;
		t->in_first_ns = now;
		count_from_here(t, (struct tcp_sock *)sk);
	}
	t->in_last_ns = now;
	t->in_segments += 1;
	return 0;
}

// A retransmission of what this end sends (a server's response, a client's
// request), by the state the sender is in when
// tcp_retransmit_skb sends it: Loss after an RTO expiry (tcp_retransmit_timer enters
// it first), Recovery for a fast retransmission (RACK or three duplicate ACKs),
// otherwise a tail-loss probe (tcp_send_loss_probe sends it in Open or Disorder).
// Counted in segments, by how far the socket's total_retrans moved since the last
// event: since Linux 6.17 the tracepoint fires for every attempt, those that sent
// nothing too (the original still in the host's queue, -EBUSY; no memory), which
// move nothing, and one retransmission of several segments moves it by as many
// (__tcp_retransmit_skb). Counted whatever phase the transaction is in: its causes
// then run from count_from_here to finish, the interval its `retrans` does, from
// the same counter, and add up to it.
SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(rttlab_retransmit, struct sock *sk, struct sk_buff *skb)
{
	struct txn *t = state(sk, SIDE_NONE);
	if (!t)
		return 0;
	__u16 total = BPF_CORE_READ((struct tcp_sock *)sk, total_retrans);
	__u16 segs = total - t->retrans_seen;
	t->retrans_seen = total;
	if (!segs)
		return 0;
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	__u8 ca_state = BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ca_state);
	if (ca_state == TCP_CA_LOSS)
		t->rto += segs;
	else if (ca_state == TCP_CA_RECOVERY)
		t->fast += segs;
	else
		t->tlp += segs;
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(rttlab_read, struct sock *sk, int ret, int flags)
{
	if (ret <= 0 || (flags & MSG_PEEK))
		return 0;
	struct txn *t = state(sk, SIDE_NONE);
	if (!t)
		return 0;
	// Reads of the data in: a server's of the request before its response began, a
	// client's of the response.
	if (t->side == SIDE_SERVER ? t->phase != PHASE_REQUEST || t->write_first_ns
				   : t->phase != PHASE_RESPONSE)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (!t->read_first_ns)
		t->read_first_ns = now;
	t->read_last_ns = now;
	return 0;
}

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(rttlab_write, struct sock *sk, struct msghdr *msg, struct sk_buff *skb,
	     int size_goal)
{
	struct txn *t = state(sk, SIDE_CLIENT);
	if (!t)
		return 0;
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	if (t->side == SIDE_CLIENT) {
		// A write after the response began is the next request: the turn.
		if (t->phase == PHASE_RESPONSE)
			finish(sk, t);
		if (t->phase == PHASE_IDLE) {
			t->phase = PHASE_REQUEST;
			t->write_first_ns = bpf_ktime_get_ns();
			t->out_start_seq = BPF_CORE_READ(tp, write_seq);
			count_from_here(t, tp);
			// Data in before this (a server that speaks first) answers no request.
			t->in_seq = BPF_CORE_READ(tp, rcv_nxt);
		} else {
			// More of the request: what went out before is not all of it.
			t->sent_ns = 0;
		}
		return 0;
	}
	if (t->phase != PHASE_REQUEST)
		return 0;
	if (t->write_first_ns) {
		// More of the response: an ACK of what came before did not end it.
		t->acked_ns = 0;
		t->flags &= ~TXN_ACK_ON_DATA;
		return 0;
	}
	t->write_first_ns = bpf_ktime_get_ns();
	t->out_start_seq = BPF_CORE_READ(tp, write_seq);
	__u32 rcv_nxt = BPF_CORE_READ(tp, rcv_nxt);
	if (rcv_nxt != BPF_CORE_READ(tp, copied_seq))
		t->flags |= TXN_PIPELINED;
	// Less the FIN's one sequence number once the client's FIN is in.
	t->in_end_seq = rcv_nxt - (BPF_CORE_READ_BITFIELD_PROBED(sk, sk_shutdown) & RCV_SHUTDOWN);
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(rttlab_written, struct sock *sk, int ret, int flags)
{
	if (ret <= 0)
		return 0;
	struct txn *t = state(sk, SIDE_NONE);
	if (!t || !t->write_first_ns)
		return 0;
	t->write_last_ns = bpf_ktime_get_ns();
	t->out_end_seq = BPF_CORE_READ((struct tcp_sock *)sk, write_seq);
	return 0;
}

// A socket has data to read (sock_def_readable, from tcp_data_ready as each in-order
// segment is queued, in any state: also after the client shut its writing half,
// when tcp_probe no longer sees the connection's segments): a client's response,
// counted by how far rcv_nxt moved since, less the FIN's one sequence number once
// the server's FIN is in (RCV_SHUTDOWN). Runs for every socket of the host that
// wakes a reader, UDP's too: a socket not in the table costs a lookup.
SEC("tp_btf/sk_data_ready")
int BPF_PROG(rttlab_readable, struct sock *sk)
{
	__u64 key = (__u64)sk;
	struct txn *t = bpf_map_lookup_elem(&rttlab_txn, &key);
	if (!t || t->side != SIDE_CLIENT || t->phase == PHASE_IDLE)
		return 0;
	__u32 rcv_nxt = BPF_CORE_READ((struct tcp_sock *)sk, rcv_nxt);
	if (BPF_CORE_READ_BITFIELD_PROBED(sk, sk_shutdown) & RCV_SHUTDOWN)
		rcv_nxt -= 1;
	__u32 more = rcv_nxt - t->in_seq;
	if ((__s32)more <= 0)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (t->phase == PHASE_REQUEST) {
		t->phase = PHASE_RESPONSE;
		t->in_first_ns = now;
	}
	t->in_last_ns = now;
	t->in_bytes += more;
	t->in_segments += 1;
	t->in_seq = rcv_nxt;
	return 0;
}

// A segment handed to the driver (dev_hard_start_xmit, after the queueing layer):
// when it carries a client's data up to all the request written so far, the request
// is out. Any packet the host sends passes here: a socket not in the table costs a
// lookup.
SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(rttlab_xmit, struct sk_buff *skb, struct net_device *dev)
{
	struct sock *sk = BPF_CORE_READ(skb, sk);
	if (!sk)
		return 0;
	__u64 key = (__u64)sk;
	struct txn *t = bpf_map_lookup_elem(&rttlab_txn, &key);
	if (!t || t->side != SIDE_CLIENT || !t->write_first_ns)
		return 0;
	unsigned char *head = BPF_CORE_READ(skb, head);
	unsigned char *data = BPF_CORE_READ(skb, data);
	unsigned char *th = head + BPF_CORE_READ(skb, transport_header);
	__u8 doff = 0;
	__be32 seq = 0;
	if (bpf_probe_read_kernel(&doff, 1, th + 12) || bpf_probe_read_kernel(&seq, 4, th + 4))
		return 0;
	// skb->len counts from skb->data (the link-layer header here), a TSO segment's
	// whole payload included.
	long hlen = (th - data) + (doff >> 4) * 4;
	long payload = (long)BPF_CORE_READ(skb, len) - hlen;
	if (payload <= 0)
		return 0;
	__u32 end = bpf_ntohl(seq) + (__u32)payload;
	if ((__s32)(end - BPF_CORE_READ((struct tcp_sock *)sk, write_seq)) >= 0)
		t->sent_ns = bpf_ktime_get_ns();
	return 0;
}

// The connection changes state (it is closing): an ACK in a state other than
// established is not seen by tcp_probe (tcp_rcv_state_process takes it), so the
// response's ACK is read from snd_una here.
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(rttlab_state, struct sock *sk, int oldstate, int newstate)
{
	__u64 key = (__u64)sk;
	struct txn *t = bpf_map_lookup_elem(&rttlab_txn, &key);
	if (t && t->side == SIDE_SERVER &&
	    ack_covers_writes(sk, t, BPF_CORE_READ((struct tcp_sock *)sk, snd_una)))
		t->acked_ns = bpf_ktime_get_ns();
	return 0;
}

// The socket is gone: its last transaction is sent, and its entry goes. By key
// alone: by now the socket may have let its port go (inet_num is 0 once unhashed),
// and a new socket at the same address must start afresh.
SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(rttlab_gone, struct sock *sk)
{
	__u64 key = (__u64)sk;
	struct txn *t = bpf_map_lookup_elem(&rttlab_txn, &key);
	if (!t)
		return 0;
	if (t->side == SIDE_SERVER && t->write_first_ns) {
		if (ack_covers_writes(sk, t, BPF_CORE_READ((struct tcp_sock *)sk, snd_una)))
			t->acked_ns = bpf_ktime_get_ns();
		if (!t->acked_ns)
			t->flags |= TXN_UNACKED;
	}
	finish(sk, t);
	bpf_map_delete_elem(&rttlab_txn, &key);
	return 0;
}
