// SPDX-License-Identifier: GPL-2.0
// rttlab's in-kernel passive RTT engine: tc programs on an interface's ingress and
// egress that time TCP exactly as the user-space engines do (src/passive/ts.rs,
// src/passive/seq.rs, src/passive/mod.rs: Analyzer::packet), so the two agree sample
// for sample on the same packets. ePPing (xdp-project/bpf-examples, pping/) showed the
// shape: per-flow state in a hash map, one hash entry per packet identifier waiting
// for its echo, samples to user space through a ring buffer, histograms per prefix
// aggregated in the kernel. rttlab adds the seq/ACK rule (Karn, SACK) and the
// user-space engine's exact TS rule.
//
// The user-space engines keep a queue per direction; here every TSval or segment
// waiting for its answer is an entry of `rttlab_pending` keyed by the flow's random id,
// the direction and the value the answer carries (the TSval, or the segment's end),
// so an answer is one lookup and nothing per flow is bounded by a queue. What the
// queues' order decided is kept as a few numbers per direction:
// - TS: an echo y removes every pending TSval at or below min(y, the last recorded),
//   so a TSval is pending iff it is above the "watermark" of those minimums
//   (TsHalf::echo pops the front while it is before the echo).
// - seq/ACK: a retransmission marks the outstanding segments it overlaps (Karn); the
//   marks are kept as ranges with the segment counter at which they were made, and a
//   segment is "retransmitted" if a later mark overlaps it (SeqHalf::mark_overlap).
//   SACK blocks are kept the same way: a segment wholly inside a block received after
//   it was seen is "SACKed" (the queue marks every segment a block covers). Whether a
//   segment overlaps outstanding data (a retransmission) or fills a gap the capture
//   point never saw (out of order) is decided by the gaps ("holes") in the sequence
//   space seen so far.
// Past NMARKS live marks (NSACKS blocks) they merge into one range that disqualifies
// everything it covers, and past NHOLES gaps a new one is not kept. Either makes the
// direction "inexact": its disqualifications are then a superset of the queue's and
// its entries a subset, so a cumulative ACK's sample is still one the user-space
// engine gives; but that engine takes a SACK sample only when the ACK gave no other,
// which the kernel can no longer know, so an inexact direction takes none.
//
// Time is CLOCK_MONOTONIC (bpf_ktime_get_ns). On ingress a packet that already
// carries the kernel's receive stamp (skb->tstamp, CLOCK_REALTIME, set when any socket
// asked for receive stamps) is timed by that stamp, converted with the offset user
// space keeps in `rttlab_clock`: a capture (AF_PACKET, tpacket_rcv) reads the same
// stamp, so both engines time such a frame identically.
//
// Minimum kernel: 5.13 (bpf_for_each_map_elem for the sweep; BPF ring buffer 5.8;
// atomic compare-and-exchange 5.12). Attached with TCX on 6.6+, else a clsact qdisc.
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct bpf_map;

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define ETH_P_QINQ1 0x9100
#define IPPROTO_TCP 6

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

// The largest window TCP allows (RFC 7323 §2.3); passive::seq::MAX_WINDOW.
#define MAX_WINDOW (1u << 30)
#define NMARKS 4
#define NSACKS 4
#define NHOLES 4
#define CHAIN 8
#define VLAN_TAGS 4
#define IPV6_EXT 8
#define MAX_BOUNDS 640
#define SACK_BLOCKS 4

// What the program does (cfg_flags).
#define F_TS (1 << 0)		// the TS rule
#define F_SEQ (1 << 1)		// the seq/ACK rule
#define F_TS_ANY (1 << 2)	// --ts-rule pping (ts::Record::Any)
#define F_KARN (1 << 3)		// seq::Rules::karn
#define F_SACK (1 << 4)		// seq::Rules::sack
#define F_L3 (1 << 5)		// frames start at the IP header (no link header)
#define F_HOSTS (1 << 6)	// --host given
#define F_PORTS (1 << 7)	// --port given
#define F_FLOWS (1 << 8)	// --flow given
#define F_EVENTS (1 << 9)	// samples to the ring buffer
#define F_FLOW_EVENTS (1 << 10) // finished flows to the ring buffer
#define F_AGGREGATE (1 << 11)	// histograms per prefix
#define F_WATCHED (1 << 12)	// aggregate only hosts in rttlab_watched

const volatile __u32 cfg_flags = F_TS | F_SEQ | F_KARN | F_SACK | F_EVENTS;
const volatile __u64 cfg_rate_limit_ns = 0;
const volatile __u64 cfg_idle_ns = 10000000000ULL;
const volatile __u64 cfg_max_age_ns = 10000000000ULL;
// Bytes waiting in the ring buffer past which a record wakes the reader (an eighth
// of the ring, set at load).
const volatile __u64 cfg_wake_bytes = 1 << 19;
const volatile __u32 cfg_prefix_v4 = 24;
const volatile __u32 cfg_prefix_v6 = 48;
// Upper bounds (ns, ascending) of the aggregated histograms' buckets; bucket k holds
// (bounds[k-1], bounds[k]], bucket cfg_n_bounds what is above them all.
const volatile __u32 cfg_n_bounds = 0;
const volatile __u64 cfg_bounds[MAX_BOUNDS] = {};

// An address as two big-endian halves read as numbers, so that (hi, lo) compares as
// the 128-bit address does (passive::flow::Endpoint: IPv4 kept IPv4-mapped).
struct addr {
	__u64 hi;
	__u64 lo;
};

// A connection: its lower endpoint (address, then port) first, as FlowKey::of.
struct flow_key {
	struct addr a;
	struct addr b;
	__u16 a_port;
	__u16 b_port;
	__u32 pad;
};

struct range {
	__u32 lo;
	__u32 hi;
	__u32 idx;
	__u32 used; // bit 0: in use; bit 1: `at` holds the cumulative ACK of its time
	__u32 at;
	__u32 at_idx; // the counter when `at` last advanced
};

struct hole {
	__u32 lo;
	__u32 hi;
	__u32 used;
	__u32 pad;
};

// Per-half flags.
#define H_TS_SEEN (1 << 0)
#define H_TS_L (1 << 1)		// ts_l holds the last TSval recorded
#define H_TS_W (1 << 2)		// ts_w holds the watermark
#define H_TS_E (1 << 3)		// ts_e holds the last TSval echoed
#define H_TS_HEAD (1 << 4)	// ts_head holds the last TSval given an entry
#define H_NXT (1 << 5)
#define H_ACKED (1 << 6)
#define H_FIN (1 << 7)
#define H_SYN (1 << 8)
#define H_MIN_TS (1 << 9)
#define H_MIN_SEQ (1 << 10)
#define H_INEXACT (1 << 11)	// the bounded state approximated the queue (see above)
#define H_SEQ_MAX (1 << 12)	// seq_max holds the largest end given an entry
// Summaries of the half's cold end, so that the common packet reads none of it:
#define H_HOLES (1 << 13)	// a hole may be in use (clear: none is)
#define H_LATE (1 << 14)	// `late` is in use

// The counts a finished flow reports per direction (passive::FlowEnd).
struct half_counts {
	__u64 packets;
	__u64 bytes;
	__u32 retransmissions;
	__u32 spurious;
	__u32 out_of_order;
	__u32 karn_skipped;
	__u32 sacked_skipped;
	__u32 sack_timed;
	__u32 untracked;
	__u32 rate_limited;
};

// One direction of a flow: packets sent by one endpoint (passive::flow::Half), the
// part every packet reads. The halves of a flow lie side by side after its times,
// so that a packet reads four cache lines of its flow, not seven.
struct half {
	__u64 packets;
	__u64 bytes;
	__u64 last_ts_entry_ns;
	__u64 last_seq_entry_ns;
	__u32 ts_l;
	__u32 ts_w;
	__u32 ts_e;
	__u32 ts_head;
	__u32 nxt;
	__u32 acked;
	__u32 fin_end;
	__u32 syn_seq;
	__u32 idx;
	__u32 ack_idx; // idx when `acked` last advanced
	__u32 flags;
	__u32 seq_max;
	__u32 rate_limited;
	__u32 pad;
};

// The rest of a half: what samples, retransmissions, reordering and loss touch.
struct half_cold {
	__u32 retransmissions;
	__u32 spurious;
	__u32 out_of_order;
	__u32 karn_skipped;
	__u32 sacked_skipped;
	__u32 sack_timed;
	__u32 untracked;
	__u32 pad;
	__u64 min_ns[2];
	struct range marks[NMARKS];
	struct range hull;
	struct range sacks[NSACKS];
	struct range sack_hull;
	struct hole holes[NHOLES];
	// Data seen below the cumulative ACK since it last advanced (reordered behind
	// its own ACK): still in the user-space queue, until the next advance pops it.
	struct hole late;
};

// Each packet reads the flow's first 208 bytes (its times and both halves' hot parts,
// four cache lines); the cold parts only samples and the seq rule's slow paths touch.
struct flow {
	__u64 first_ns;
	__u64 last_ns;
	__u64 id;
	__u32 reset;
	__u32 pad;
	struct half h[2];
	struct half_cold x[2];
};

#define KIND_TS 0
#define KIND_SEQ 1

struct pending_key {
	__u64 id;
	__u32 value;
	__u8 half;
	__u8 kind;
	__u16 pad;
};

#define P_RTX 1
#define P_SACKED 2

struct pending {
	__u64 ns;
	__u32 seq;  // seq: the segment's first byte; TS: the TSval given an entry before
	__u32 idx;  // seq: the half's segment counter when it was seen
	__u32 flags;
	__u32 pad;
};

// Events to user space (passive::in_kernel decodes them).
#define EV_SAMPLE 1
#define EV_FLOW 2

struct ev_sample {
	__u8 kind;
	__u8 method; // 0 ts, 1 seq
	__u8 here;   // the half whose sender closed the loop
	__u8 pad[5];
	__u64 ts_ns;
	__u64 rtt_ns;
	__u64 min_ns;
	struct flow_key key;
};

#define END_CLOSED 1
#define END_EXPIRED 2
#define END_REUSED 3
#define END_DRAINED 4

struct ev_flow {
	__u8 kind;
	__u8 reason;
	__u8 pad[6];
	__u64 first_ns;
	__u64 last_ns;
	struct flow_key key;
	struct half_counts c[2];
};

// Counters, one slot per CPU, summed by user space (passive::Counters and the
// kernel engine's own).
struct counters {
	__u64 packets;
	__u64 tcp;
	__u64 not_tcp;
	__u64 filtered;
	__u64 truncated;
	__u64 not_ip;
	__u64 bad_ip_header;
	__u64 fragment;
	__u64 bad_tcp_header;
	__u64 no_timestamps;
	__u64 unusable_timestamps;
	__u64 one_way;
	__u64 samples_ts;
	__u64 samples_seq;
	__u64 flows_created;
	__u64 flows_expired;
	__u64 flows_closed;
	__u64 flows_reused;
	__u64 flows_full;
	__u64 pending_full;
	__u64 aggregates_full;
	__u64 events_lost;
	__u64 rate_limited;
	__u64 unwatched;
	__u64 approximated;
};

struct agg_key {
	struct addr prefix;
	__u8 prefix_len;
	__u8 method;
	__u8 place;	 // 0 network, 1 the capture host itself
	__u8 generation; // rttlab_generation when the sample came (see there)
	__u8 pad[4];
};

struct agg {
	__u64 count;
	__u64 sum_ns;
	__u64 min_inv; // ~ the smallest sample
	__u64 max_ns;
	__u64 buckets[MAX_BOUNDS + 1];
};

// The layouts user space decodes (src/passive/in_kernel/record.rs,
// src/kernel/passive_bpf.rs check these numbers).
_Static_assert(sizeof(struct flow_key) == 40, "flow_key");
_Static_assert(sizeof(struct ev_sample) == 72, "ev_sample");
_Static_assert(sizeof(struct ev_flow) == 160, "ev_flow");
_Static_assert(sizeof(struct counters) == 200, "counters");
_Static_assert(sizeof(struct agg_key) == 24, "agg_key");
_Static_assert(sizeof(struct agg) == 5160, "agg");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct flow_key);
	__type(value, struct flow);
	__uint(max_entries, 100000);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} rttlab_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct pending_key);
	__type(value, struct pending);
	__uint(max_entries, 131072);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} rttlab_pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} rttlab_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct counters);
	__uint(max_entries, 1);
} rttlab_counters SEC(".maps");

// Zeroed values to insert from (a flow and an aggregate exceed the 512-byte stack).
struct zeroes {
	struct flow flow;
	struct agg agg;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct zeroes);
	__uint(max_entries, 1);
} rttlab_zeroes SEC(".maps");

// CLOCK_REALTIME minus CLOCK_MONOTONIC, ns, kept by user space.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} rttlab_clock SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct addr);
	__type(value, __u8);
	__uint(max_entries, 256);
} rttlab_hosts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u16);
	__type(value, __u8);
	__uint(max_entries, 256);
} rttlab_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct flow_key);
	__type(value, __u8);
	__uint(max_entries, 256);
} rttlab_flow_filter SEC(".maps");

// The capture host's addresses: samples they answer are its own time to answer.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct addr);
	__type(value, __u8);
	__uint(max_entries, 256);
} rttlab_local SEC(".maps");

// With F_WATCHED, the hosts whose answers are aggregated (the agent's peers).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct addr);
	__type(value, __u8);
	__uint(max_entries, 65536);
} rttlab_watched SEC(".maps");

// Which generation samples aggregate into: user space that reports per interval flips
// it and then reads and deletes the previous one, as ePPing alternates two maps;
// user space that reports totals (the agent) leaves it at 0.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} rttlab_generation SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct agg_key);
	__type(value, struct agg);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} rttlab_aggregates SEC(".maps");

// Serial-number arithmetic (RFC 1982), as passive::ts::before.
static __always_inline int before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

static __always_inline int after(__u32 a, __u32 b)
{
	return before(b, a);
}

// passive::ts::MAX_TS_STEP: how far a TSval or echo may lie from the last recorded.
#define MAX_TS_STEP (1u << 30)

static __always_inline int within(__u32 a, __u32 b, __u32 d)
{
	__u32 x = a - b, y = b - a;
	return (x < y ? x : y) <= d;
}

static __always_inline struct counters *counters(void)
{
	__u32 k = 0;
	return bpf_map_lookup_elem(&rttlab_counters, &k);
}

#define COUNT(c, field)                                                                    \
	do {                                                                               \
		if (c)                                                                     \
			(c)->field++;                                                      \
	} while (0)

static __always_inline int addr_lt(const struct addr *x, const struct addr *y)
{
	return x->hi < y->hi || (x->hi == y->hi && x->lo < y->lo);
}

static __always_inline int addr_eq(const struct addr *x, const struct addr *y)
{
	return x->hi == y->hi && x->lo == y->lo;
}

// What a TCP packet carries that the rules read.
struct segment {
	struct addr src;
	struct addr dst;
	__u16 sport;
	__u16 dport;
	__u32 seq;
	__u32 ack;
	__u32 ip_len;
	__u32 seglen; // payload, plus one each for SYN and FIN
	__u32 tsval;
	__u32 tsecr;
	__u8 flags;
	__u8 has_ts;
	__u8 nsacks;
	__u8 pad;
	__u32 sack[SACK_BLOCKS * 2];
};

#define SKIP_TRUNCATED 1
#define SKIP_NOT_IP 2
#define SKIP_BAD_IP 3
#define SKIP_FRAGMENT 4
#define SKIP_BAD_TCP 5
#define NOT_TCP 6

// The TCP options as passive::wire::tcp::TcpOptions reads them: EOL ends them, NOP
// is one byte, any other option needs a length of 2 or more that fits; the first
// timestamps option (kind 8, length 10) and the first SACK option (kind 5, a
// multiple of 8 bytes of blocks) count. `base` is where the options start in the
// packet, `len` their length (the data offset less 20). Linux's own layout (NOP NOP
// timestamps, first) never gets here: `decode` reads it directly.
//
// The walk keeps its cursor in a per-CPU map value (`struct walk`), not in registers:
// the verifier treats what it loads from a map as unknown, so every path through
// one iteration reaches the next in the same state and 40 iterations verify in a
// few thousand steps. Kept in registers, the cursor's range differs on every path
// (one NOP, one option of 2..40 bytes, ...) and the walk exceeds the verifier's
// budget. Kind and length are read with bpf_skb_load_bytes at that cursor.
struct walk {
	__u32 at;
	__u32 len;
	__u32 ts_at;
	__u32 sack_at;
	__u32 sack_len;
	__u32 done;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct walk);
	__uint(max_entries, 1);
} rttlab_walk SEC(".maps");

static __always_inline void options(struct __sk_buff *skb, struct segment *s, __u32 base,
				    __u32 len)
{
	__u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&rttlab_walk, &zero);
	__u8 kl[2];

	if (!w)
		return;
	w->at = 0;
	w->len = len;
	w->ts_at = 0;
	w->sack_at = 0;
	w->sack_len = 0;
	w->done = 0;
	for (int i = 0; i < 40; i++) {
		__u32 at = w->at;
		if (w->done || at >= w->len)
			break;
		if (bpf_skb_load_bytes(skb, base + at, kl, 1) < 0 || kl[0] == 0) {
			w->done = 1;
			continue;
		}
		if (kl[0] == 1) {
			w->at = at + 1;
			continue;
		}
		if (at + 1 >= w->len || bpf_skb_load_bytes(skb, base + at + 1, kl + 1, 1) < 0) {
			w->done = 1;
			continue;
		}
		__u32 olen = kl[1];
		if (olen < 2 || at + olen > w->len) {
			w->done = 1;
			continue;
		}
		if (kl[0] == 8 && olen == 10 && !w->ts_at)
			w->ts_at = base + at + 2;
		else if (kl[0] == 5 && ((olen - 2) & 7) == 0 && !w->sack_at) {
			w->sack_at = base + at + 2;
			w->sack_len = olen - 2;
		}
		w->at = at + olen;
	}
	if (w->ts_at && !s->has_ts) {
		__u32 v[2];
		if (bpf_skb_load_bytes(skb, w->ts_at, v, 8) == 0) {
			s->tsval = bpf_ntohl(v[0]);
			s->tsecr = bpf_ntohl(v[1]);
			s->has_ts = 1;
		}
	}
	if (w->sack_at) {
		__u32 n = w->sack_len / 8;
		__u32 v[SACK_BLOCKS * 2];
		if (n > SACK_BLOCKS)
			n = SACK_BLOCKS;
		if (n == 0) {
			s->nsacks = 0;
			return;
		}
		if (bpf_skb_load_bytes(skb, w->sack_at, v, n * 8) < 0)
			return;
		s->nsacks = n;
	#pragma clang loop unroll(disable)
	for (int b = 0; b < SACK_BLOCKS; b++) {
			if (b >= n)
				break;
			s->sack[(b * 2) & 7] = bpf_ntohl(v[(b * 2) & 7]);
			s->sack[(b * 2 + 1) & 7] = bpf_ntohl(v[(b * 2 + 1) & 7]);
		}
	}
}

static __always_inline __u32 be32(const __u8 *p)
{
	return ((__u32)p[0] << 24) | ((__u32)p[1] << 16) | ((__u32)p[2] << 8) | p[3];
}

// Decode a frame down to TCP, as passive::wire::net::decode_tcp: 0 for a TCP segment,
// else NOT_TCP or the reason it is skipped. A global function, so the verifier checks
// it once on its own rather than once for every path that follows it.
__noinline int decode(struct __sk_buff *skb, struct segment *s)
{
	if (!s)
		return SKIP_TRUNCATED;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	__u32 off = 0;
	__u16 proto;

	// Headers of a non-linear packet may lie beyond the linear part.
	if (data + 200 > end && skb->len > (__u32)(end - data)) {
		bpf_skb_pull_data(skb, skb->len < 200 ? skb->len : 200);
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}

	if (cfg_flags & F_L3) {
		__u8 *v = data;
		if ((void *)(v + 1) > end)
			return SKIP_TRUNCATED;
		proto = (*v >> 4) == 6 ? ETH_P_IPV6 : (*v >> 4) == 4 ? ETH_P_IP : 0;
		if (!proto)
			return SKIP_NOT_IP;
	} else {
		off = 12;
		__u16 *t = data + off;
		if ((void *)(t + 1) > end)
			return SKIP_TRUNCATED;
		proto = bpf_ntohs(*t);
		for (int i = 0; i < VLAN_TAGS; i++) {
			if (proto != ETH_P_8021Q && proto != ETH_P_8021AD && proto != ETH_P_QINQ1)
				break;
			off += 4;
			t = data + off;
			if ((void *)(t + 1) > end)
				return SKIP_TRUNCATED;
			proto = bpf_ntohs(*t);
		}
		off += 2;
		if (proto != ETH_P_IP && proto != ETH_P_IPV6)
			return SKIP_NOT_IP;
	}
	off &= 0xff;

	__u32 caplen = skb->len > off ? skb->len - off : 0; // bytes from the IP header on
	__u32 tcp_off, pay_end, transport_len;
	__u8 next;

	if (proto == ETH_P_IP) {
		__u8 *ip = data + off;
		if ((void *)(ip + 1) > end)
			return SKIP_TRUNCATED;
		__u32 ihl = (ip[0] & 0x0f) * 4;
		if ((ip[0] >> 4) != 4 || ihl < 20)
			return SKIP_BAD_IP;
		if ((void *)(ip + 20) > end || ihl > caplen)
			return SKIP_TRUNCATED;
		__u32 total = ((__u32)ip[2] << 8) | ip[3];
		__u32 frag = ((__u32)ip[6] << 8) | ip[7];
		if (frag & 0x3fff)
			return SKIP_FRAGMENT;
		s->src.hi = 0;
		s->src.lo = 0xffff00000000ULL | be32(ip + 12);
		s->dst.hi = 0;
		s->dst.lo = 0xffff00000000ULL | be32(ip + 16);
		s->ip_len = total;
		transport_len = total > ihl ? total - ihl : 0;
		next = ip[9];
		tcp_off = off + ihl;
		// The payload ends where the header says, or where the packet ends.
		__u32 e = total < ihl ? ihl : total;
		pay_end = off + (e < caplen ? e : caplen);
	} else {
		__u8 *ip = data + off;
		if ((void *)(ip + 40) > end)
			return SKIP_TRUNCATED;
		if ((ip[0] >> 4) != 6)
			return SKIP_BAD_IP;
		__u32 plen = ((__u32)ip[4] << 8) | ip[5];
		__u64 *a = (__u64 *)(ip + 8);
		s->src.hi = bpf_be64_to_cpu(a[0]);
		s->src.lo = bpf_be64_to_cpu(a[1]);
		s->dst.hi = bpf_be64_to_cpu(a[2]);
		s->dst.lo = bpf_be64_to_cpu(a[3]);
		s->ip_len = 40 + plen;
		__u32 e = 40 + plen < caplen ? 40 + plen : caplen;
		pay_end = off + e;
		next = ip[6];
		__u32 at = off + 40;
		for (int i = 0; i < IPV6_EXT; i++) {
			if (next != 0 && next != 43 && next != 60 && next != 44 && next != 51)
				break;
			at &= 0x3ff;
			__u8 *x = data + at;
			if ((void *)(x + 8) > end)
				return SKIP_TRUNCATED;
			if (at + (next == 44 ? 4 : 2) > pay_end)
				return SKIP_TRUNCATED;
			__u32 len;
			if (next == 44) {
				__u32 fo = ((__u32)x[2] << 8) | x[3];
				if (fo & 0xfff9)
					return SKIP_FRAGMENT;
				len = 8;
			} else if (next == 51) {
				len = ((__u32)x[1] + 2) * 4;
			} else {
				len = ((__u32)x[1] + 1) * 8;
			}
			next = x[0];
			if (at + len > pay_end)
				return SKIP_TRUNCATED;
			at += len;
		}
		__u32 ext = at - off - 40;
		transport_len = plen > ext ? plen - ext : 0;
		tcp_off = at;
	}
	if (next != IPPROTO_TCP)
		return NOT_TCP;

	__u8 h[64];
	if (tcp_off + 13 > pay_end)
		return SKIP_TRUNCATED;
	tcp_off &= 0x3ff;
	if (tcp_off + 20 > pay_end) {
		// Too short for a header: as Tcp::new, the data offset decides between an
		// impossible header and a cut one.
		__u8 b;
		if (bpf_skb_load_bytes(skb, tcp_off + 12, &b, 1) < 0)
			return SKIP_TRUNCATED;
		return (b >> 4) * 4 < 20 ? SKIP_BAD_TCP : SKIP_TRUNCATED;
	}
	// The header and Linux's 12 bytes of options, read in place where the linear
	// part holds them (nearly always, after the pull above): a helper call per read
	// costs more than the rest of the decoding.
	__u8 *t = data + tcp_off;
	int direct = (void *)(t + 32) <= end;
	if (direct)
		__builtin_memcpy(h, t, 32);
	else if (bpf_skb_load_bytes(skb, tcp_off, h, 20) < 0)
		return SKIP_TRUNCATED;
	__u32 doff = (h[12] >> 4) * 4;
	if (doff < 20)
		return SKIP_BAD_TCP;
	if (tcp_off + doff > pay_end)
		return SKIP_TRUNCATED;
	s->sport = ((__u16)h[0] << 8) | h[1];
	s->dport = ((__u16)h[2] << 8) | h[3];
	s->seq = be32(h + 4);
	s->ack = be32(h + 8);
	s->flags = h[13];
	__u32 payload = transport_len > doff ? transport_len - doff : 0;
	s->seglen = payload + !!(s->flags & TCP_SYN) + !!(s->flags & TCP_FIN);
	__u32 olen = doff - 20;
	// Linux and most stacks put the timestamps first after two NOPs: read them
	// directly, and walk the options only for the rest (SACK) or another layout.
	if (olen >= 12) {
		if (!direct && bpf_skb_load_bytes(skb, tcp_off + 20, h + 20, 12) < 0)
			return SKIP_TRUNCATED;
		if (h[20] == 1 && h[21] == 1 && h[22] == 8 && h[23] == 10) {
			s->tsval = be32(h + 24);
			s->tsecr = be32(h + 28);
			s->has_ts = 1;
			if (olen > 12 && (cfg_flags & F_SEQ) && (cfg_flags & F_SACK))
				options(skb, s, tcp_off + 20, olen);
			return 0;
		}
	}
	if (olen > 0)
		options(skb, s, tcp_off + 20, olen);
	return 0;
}

static __always_inline int matches_filter(struct segment *s, struct flow_key *k)
{
	__u32 f = cfg_flags;
	if (f & F_HOSTS) {
		if (!bpf_map_lookup_elem(&rttlab_hosts, &s->src) &&
		    !bpf_map_lookup_elem(&rttlab_hosts, &s->dst))
			return 0;
	}
	if (f & F_PORTS) {
		if (!bpf_map_lookup_elem(&rttlab_ports, &s->sport) &&
		    !bpf_map_lookup_elem(&rttlab_ports, &s->dport))
			return 0;
	}
	if (f & F_FLOWS) {
		if (!bpf_map_lookup_elem(&rttlab_flow_filter, k))
			return 0;
	}
	return 1;
}

static __always_inline __u64 packet_time(struct __sk_buff *skb, int ingress)
{
	if (ingress) {
		__u64 t = skb->tstamp;
		if (t) {
			__u32 k = 0;
			__u64 *off = bpf_map_lookup_elem(&rttlab_clock, &k);
			if (off && *off && t > *off)
				return t - *off;
		}
	}
	return bpf_ktime_get_ns();
}

static __always_inline void copy_counts(struct half_counts *d, const struct half *h,
				       const struct half_cold *x)
{
	d->packets = h->packets;
	d->bytes = h->bytes;
	d->retransmissions = x->retransmissions;
	d->spurious = x->spurious;
	d->out_of_order = x->out_of_order;
	d->karn_skipped = x->karn_skipped;
	d->sacked_skipped = x->sacked_skipped;
	d->sack_timed = x->sack_timed;
	d->untracked = x->untracked;
	d->rate_limited = h->rate_limited;
}

// How a record is committed: a wakeup is an interrupt on this CPU and a context
// switch on the reader's, per record when the reader keeps up. The reader polls
// every 100 ms anyway, so only a ring filling up wakes it early.
static __always_inline __u64 wake_flag(void)
{
	return bpf_ringbuf_query(&rttlab_events, BPF_RB_AVAIL_DATA) >= cfg_wake_bytes ?
		       BPF_RB_FORCE_WAKEUP :
		       BPF_RB_NO_WAKEUP;
}

// A flow leaves the table: its counts go to user space.
static __always_inline void retire(struct flow_key *k, struct flow *f, __u8 reason)
{
	if (!(cfg_flags & F_FLOW_EVENTS))
		return;
	struct ev_flow *e = bpf_ringbuf_reserve(&rttlab_events, sizeof(*e), 0);
	if (!e) {
		struct counters *c = counters();
		COUNT(c, events_lost);
		return;
	}
	e->kind = EV_FLOW;
	e->reason = reason;
	__builtin_memset(e->pad, 0, sizeof(e->pad));
	e->first_ns = f->first_ns;
	e->last_ns = f->last_ns;
	__builtin_memcpy(&e->key, k, sizeof(*k));
	copy_counts(&e->c[0], &f->h[0], &f->x[0]);
	copy_counts(&e->c[1], &f->h[1], &f->x[1]);
	bpf_ringbuf_submit(e, wake_flag());
}

static __always_inline struct flow *new_flow(struct flow_key *k, __u64 now, struct counters *c)
{
	__u32 zero = 0;
	struct zeroes *z = bpf_map_lookup_elem(&rttlab_zeroes, &zero);
	if (!z)
		return 0;
	if (bpf_map_update_elem(&rttlab_flows, k, &z->flow, BPF_ANY) < 0) {
		COUNT(c, flows_full);
		return 0;
	}
	struct flow *f = bpf_map_lookup_elem(&rttlab_flows, k);
	if (!f)
		return 0;
	f->first_ns = now;
	f->last_ns = now;
	f->id = ((__u64)bpf_get_prandom_u32() << 32) | bpf_get_prandom_u32();
	COUNT(c, flows_created);
	return f;
}

static __always_inline __u32 bucket_of(__u64 v)
{
	__u32 lo = 0, hi = cfg_n_bounds;
	if (hi > MAX_BOUNDS)
		hi = MAX_BOUNDS;
	// The first bound at or above v.
	for (int i = 0; i < 11; i++) {
		if (lo >= hi)
			break;
		__u32 mid = (lo + hi) / 2;
		if (mid >= MAX_BOUNDS)
			break;
		if (v <= cfg_bounds[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

static __always_inline void mask(struct addr *a, __u32 bits)
{
	if (bits >= 128)
		return;
	if (bits >= 64) {
		a->lo &= bits == 64 ? 0 : ~0ULL << (128 - bits);
	} else {
		a->lo = 0;
		a->hi &= bits == 0 ? 0 : ~0ULL << (64 - bits);
	}
}

static __always_inline void aggregate(const struct addr *host, __u8 method, __u64 rtt,
				      struct counters *c)
{
	struct agg_key k = {};
	__u32 zero = 0;
	int v4 = host->hi == 0 && (host->lo >> 32) == 0xffff;

	if ((cfg_flags & F_WATCHED) && !bpf_map_lookup_elem(&rttlab_watched, host)) {
		COUNT(c, unwatched);
		return;
	}
	k.prefix = *host;
	k.prefix_len = v4 ? cfg_prefix_v4 : cfg_prefix_v6;
	mask(&k.prefix, v4 ? 96 + cfg_prefix_v4 : cfg_prefix_v6);
	k.method = method;
	k.place = bpf_map_lookup_elem(&rttlab_local, host) ? 1 : 0;
	__u32 *g = bpf_map_lookup_elem(&rttlab_generation, &zero);
	k.generation = g ? *g : 0;
	struct agg *a = bpf_map_lookup_elem(&rttlab_aggregates, &k);
	if (!a) {
		struct zeroes *z = bpf_map_lookup_elem(&rttlab_zeroes, &zero);
		if (!z)
			return;
		if (bpf_map_update_elem(&rttlab_aggregates, &k, &z->agg, BPF_NOEXIST) < 0 &&
		    !bpf_map_lookup_elem(&rttlab_aggregates, &k)) {
			COUNT(c, aggregates_full);
			return;
		}
		a = bpf_map_lookup_elem(&rttlab_aggregates, &k);
		if (!a)
			return;
	}
	__u32 b = bucket_of(rtt);
	if (b > MAX_BOUNDS)
		b = MAX_BOUNDS;
	__sync_fetch_and_add(&a->buckets[b], 1);
	__sync_fetch_and_add(&a->sum_ns, rtt);
	// The minimum is kept inverted (~min), so that a zeroed value starts both at
	// their identity and both are raised by compare-and-exchange.
	for (int i = 0; i < 4; i++) {
		__u64 m = a->min_inv;
		if (m >= ~rtt)
			break;
		if (__sync_val_compare_and_swap(&a->min_inv, m, ~rtt) == m)
			break;
	}
	for (int i = 0; i < 4; i++) {
		__u64 m = a->max_ns;
		if (m >= rtt)
			break;
		if (__sync_val_compare_and_swap(&a->max_ns, m, rtt) == m)
			break;
	}
	__sync_fetch_and_add(&a->count, 1);
}

// One sample: the half `here`'s sender closed a loop after `rtt` ns.
static __always_inline void emit(struct flow_key *k, struct flow *f, int here, __u8 method,
				 __u64 rtt, __u64 now, const struct addr *host, struct counters *c)
{
	struct half *h = &f->h[here & 1];
	__u32 have = method ? H_MIN_SEQ : H_MIN_TS;
	__u64 *m = &f->x[here & 1].min_ns[method & 1];
	if (!(h->flags & have) || rtt < *m) {
		*m = rtt;
		h->flags |= have;
	}
	if (method)
		COUNT(c, samples_seq);
	else
		COUNT(c, samples_ts);
	if (cfg_flags & F_EVENTS) {
		struct ev_sample *e = bpf_ringbuf_reserve(&rttlab_events, sizeof(*e), 0);
		if (e) {
			e->kind = EV_SAMPLE;
			e->method = method;
			e->here = here;
			__builtin_memset(e->pad, 0, sizeof(e->pad));
			e->ts_ns = now;
			e->rtt_ns = rtt;
			e->min_ns = *m;
			__builtin_memcpy(&e->key, k, sizeof(*k));
			bpf_ringbuf_submit(e, wake_flag());
		} else {
			COUNT(c, events_lost);
		}
	}
	if (cfg_flags & F_AGGREGATE)
		aggregate(host, method, rtt, c);
}

// ---- The TS rule (passive::ts::TsHalf) ----

// An echo `y` from the other end of the TSvals half `t` sent.
static __always_inline void ts_echo(struct flow_key *k, struct flow *f, int here, __u32 y,
				    __u64 now, const struct addr *host, struct counters *c)
{
	int there = !here;
	struct half *t = &f->h[there];
	__u32 w_old = t->ts_w;
	int have_w = t->flags & H_TS_W;

	// Farther than any clock moves in a flow's life: damaged or forged (TsHalf::echo).
	if ((t->flags & H_TS_L) && !within(t->ts_l, y, MAX_TS_STEP))
		return;

	// Entries go to ever newer TSvals (ts_record), so none is newer than the last
	// (ts_head): an echo past it finds nothing, and is not looked for. With sampling
	// on, that is nearly every packet.
	if ((!have_w || after(y, w_old)) && (t->flags & H_TS_HEAD) && !after(y, t->ts_head)) {
		struct pending_key pk = { .id = f->id, .value = y, .half = there, .kind = KIND_TS };
		struct pending *p = bpf_map_lookup_elem(&rttlab_pending, &pk);
		if (p) {
			__u64 ns = p->ns;
			__u32 prev = p->seq;
			int has_prev = p->flags & 1;
			if (bpf_map_delete_elem(&rttlab_pending, &pk) == 0) {
				t->ts_e = y;
				t->flags |= H_TS_E;
				__u64 rtt = now > ns ? now - ns : 0;
				if (rtt <= cfg_max_age_ns)
					emit(k, f, here, 0, rtt, now, host, c);
				// Every TSval given an entry before y is now dead.
				for (int i = 0; i < CHAIN; i++) {
					if (!has_prev || (have_w && !after(prev, w_old)))
						break;
					pk.value = prev;
					p = bpf_map_lookup_elem(&rttlab_pending, &pk);
					if (!p)
						break;
					__u32 next = p->seq;
					has_prev = p->flags & 1;
					bpf_map_delete_elem(&rttlab_pending, &pk);
					prev = next;
				}
			}
		}
	}
	if (t->flags & H_TS_L) {
		__u32 m = before(y, t->ts_l) ? y : t->ts_l;
		if (!have_w || after(m, w_old)) {
			t->ts_w = m;
			t->flags |= H_TS_W;
		}
	}
}

static __always_inline void ts_record(struct flow *f, int here, __u32 v, __u64 now,
				      struct counters *c)
{
	struct half *h = &f->h[here & 1];
	if ((h->flags & H_TS_L) && !after(v, h->ts_l))
		return;
	if ((h->flags & H_TS_E) && !after(v, h->ts_e))
		return;
	if ((h->flags & H_TS_L) && !within(h->ts_l, v, MAX_TS_STEP)) {
		f->x[here & 1].untracked++;
		return;
	}
	h->ts_l = v;
	h->flags |= H_TS_L;
	if (cfg_rate_limit_ns && (h->flags & H_TS_HEAD) &&
	    (now > h->last_ts_entry_ns ? now - h->last_ts_entry_ns : 0) < cfg_rate_limit_ns) {
		COUNT(c, rate_limited);
		h->rate_limited++;
		return;
	}
	struct pending_key pk = { .id = f->id, .value = v, .half = here, .kind = KIND_TS };
	struct pending p = { .ns = now, .seq = h->ts_head, .flags = (h->flags & H_TS_HEAD) ? 1 : 0 };
	if (bpf_map_update_elem(&rttlab_pending, &pk, &p, BPF_ANY) < 0) {
		COUNT(c, pending_full);
		return;
	}
	h->ts_head = v;
	h->flags |= H_TS_HEAD;
	h->last_ts_entry_ns = now;
}

// ---- The seq/ACK rule (passive::seq::SeqHalf) ----

// Whether segment [seq, end), seen at counter idx, was overlapped by a retransmission
// seen later.
static __always_inline int retransmitted(struct half_cold *x, __u32 seq, __u32 end, __u32 idx)
{
#pragma clang loop unroll(disable)
	for (int i = 0; i < NMARKS; i++) {
		struct range *m = &x->marks[i];
		if ((m->used & 1) && after(m->idx, idx) && before(m->lo, end) && before(seq, m->hi))
			return 1;
	}
	struct range *m = &x->hull;
	return (m->used & 1) && after(m->idx, idx) && before(m->lo, end) && before(seq, m->hi);
}

// Keep range [lo, hi) made at counter idx in `r` (NMARKS slots). A range it contains
// says nothing it does not (it covers the same segments, and every one seen before
// the old range was seen before the new), so it takes that range's slot. With no
// slot free the range merges into `u`, which then covers more than the queue marked:
// counted as an approximation.
static __always_inline int add_range(struct range *r, struct range *u, __u32 lo, __u32 hi,
				     __u32 idx, __u32 flags, __u32 at, __u32 at_idx)
{
	int slot = -1;
#pragma clang loop unroll(disable)
	for (int i = 0; i < NMARKS; i++) {
		struct range *m = &r[i];
		if ((m->used & 1) && !before(m->lo, lo) && !before(hi, m->hi)) {
			if (slot < 0)
				slot = i;
			else
				m->used = 0;
		}
	}
	if (slot < 0) {
#pragma clang loop unroll(disable)
		for (int i = 0; i < NMARKS; i++) {
			if (!(r[i].used & 1)) {
				slot = i;
				break;
			}
		}
	}
	if (slot >= 0 && slot < NMARKS) {
		struct range *m = &r[slot];
		m->lo = lo;
		m->hi = hi;
		m->idx = idx;
		m->used = 1 | flags;
		m->at = at;
		m->at_idx = at_idx;
		return 0;
	}
	struct counters *c = counters();
	COUNT(c, approximated);
	// A range that also covers segments straddling its ACK merges as covering
	// everything below it.
	if (flags)
		lo -= 1u << 30;
	if (!(u->used & 1)) {
		u->lo = lo;
		u->hi = hi;
		u->idx = idx;
		u->used = 1;
		return 1;
	}
	if (before(lo, u->lo))
		u->lo = lo;
	if (after(hi, u->hi))
		u->hi = hi;
	if (after(idx, u->idx))
		u->idx = idx;
	return 1;
}

static __always_inline void add_mark(struct half *h, struct half_cold *x, __u32 lo, __u32 hi,
				     __u32 idx)
{
	if (add_range(x->marks, &x->hull, lo, hi, idx, 0, 0, 0))
		h->flags |= H_INEXACT;
}

// A segment's first byte as the user-space queue had it when the cumulative ACK was
// `ack`, last advanced at counter `ack_idx`: the ACK, if the segment (seen at counter
// `idx`) was there when the ACK advanced into it (SeqHalf::ack trims the front).
static __always_inline __u32 trimmed(__u32 seq, __u32 end, __u32 idx, int have_ack, __u32 ack,
				     __u32 ack_idx)
{
	return have_ack && !after(idx, ack_idx) && before(seq, ack) && before(ack, end) ? ack : seq;
}

// Whether segment [seq, end), seen at counter idx, lies wholly inside a SACK block
// received after it was seen (its first byte as the queue had it then).
static __always_inline int in_sack(struct range *m, __u32 seq, __u32 end, __u32 idx)
{
	if (!(m->used & 1) || !after(m->idx, idx) || before(m->hi, end))
		return 0;
	return !before(trimmed(seq, end, idx, m->used & 2, m->at, m->at_idx), m->lo);
}

static __always_inline int sacked(struct half_cold *x, __u32 seq, __u32 end, __u32 idx)
{
#pragma clang loop unroll(disable)
	for (int i = 0; i < NSACKS; i++)
		if (in_sack(&x->sacks[i], seq, end, idx))
			return 1;
	return in_sack(&x->sack_hull, seq, end, idx);
}

static __always_inline void add_hole(struct half *h, struct half_cold *x, __u32 lo, __u32 hi)
{
#pragma clang loop unroll(disable)
	for (int i = 0; i < NHOLES; i++) {
		struct hole *g = &x->holes[i];
		if (!g->used) {
			g->lo = lo;
			g->hi = hi;
			g->used = 1;
			h->flags |= H_HOLES;
			return;
		}
	}
	// Segments later seen in this gap are taken for retransmissions.
	x->untracked++;
	struct counters *c = counters();
	COUNT(c, approximated);
}

// Data [lo, hi) has been seen: it is no longer a gap.
static __always_inline void cover(struct half *h, struct half_cold *x, __u32 lo, __u32 hi)
{
	__u32 split_lo = 0, split_hi = 0;
	int split = 0;
	if (!(h->flags & H_HOLES))
		return;
#pragma clang loop unroll(disable)
	for (int i = 0; i < NHOLES; i++) {
		struct hole *g = &x->holes[i];
		if (!g->used || !before(lo, g->hi) || !before(g->lo, hi))
			continue;
		int keep_below = before(g->lo, lo);
		int keep_above = before(hi, g->hi);
		if (keep_below && keep_above) {
			split_lo = hi;
			split_hi = g->hi;
			split = 1;
			g->hi = lo;
		} else if (keep_below) {
			g->hi = lo;
		} else if (keep_above) {
			g->lo = hi;
		} else {
			g->used = 0;
		}
	}
	if (split)
		add_hole(h, x, split_lo, split_hi);
}

// Whether [lo, hi) (ending above the cumulative ACK) overlaps no data seen and
// still outstanding: below the ACK only what was seen since its last advance, above
// it everything seen except the gaps.
static __always_inline int in_hole(struct half *h, struct half_cold *x, __u32 lo, __u32 hi)
{
	if ((h->flags & H_ACKED) && before(lo, h->acked)) {
		struct hole *l = &x->late;
		if ((h->flags & H_LATE) && l->used && before(l->lo, h->acked) && before(lo, l->hi))
			return 0;
		lo = h->acked;
	}
	if (!(h->flags & H_HOLES))
		return 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < NHOLES; i++) {
		struct hole *g = &x->holes[i];
		if (g->used && !before(lo, g->lo) && !before(g->hi, hi))
			return 1;
	}
	return 0;
}

// Data [lo, hi) is seen: the part below the cumulative ACK stays outstanding until
// the ACK next advances.
static __always_inline void seen_late(struct half *h, struct half_cold *x, __u32 lo, __u32 hi)
{
	if (!(h->flags & H_ACKED) || !before(lo, h->acked))
		return;
	if (before(h->acked, hi))
		hi = h->acked;
	struct hole *l = &x->late;
	if (!(h->flags & H_LATE) || !l->used) {
		l->lo = lo;
		l->hi = hi;
		l->used = 1;
		h->flags |= H_LATE;
		return;
	}
	if (before(hi, l->lo) || before(l->hi, lo)) {
		// Apart from what was already late: one range now covers the gap too.
		struct counters *c = counters();
		COUNT(c, approximated);
		h->flags |= H_INEXACT;
	}
	if (before(lo, l->lo))
		l->lo = lo;
	if (after(hi, l->hi))
		l->hi = hi;
}

static __always_inline void seq_entry(struct flow *f, int here, __u32 seq, __u32 end,
				      __u32 idx, __u32 flags, __u64 now, struct counters *c)
{
	struct half *h = &f->h[here & 1];
	if (cfg_rate_limit_ns && h->last_seq_entry_ns &&
	    (now > h->last_seq_entry_ns ? now - h->last_seq_entry_ns : 0) < cfg_rate_limit_ns) {
		COUNT(c, rate_limited);
		h->rate_limited++;
		return;
	}
	struct pending_key pk = { .id = f->id, .value = end, .half = here, .kind = KIND_SEQ };
	struct pending p = { .ns = now, .seq = seq, .idx = idx, .flags = flags };
	if (bpf_map_update_elem(&rttlab_pending, &pk, &p, BPF_ANY) < 0) {
		COUNT(c, pending_full);
		return;
	}
	h->last_seq_entry_ns = now ? now : 1;
	if (!(h->flags & H_SEQ_MAX) || after(end, h->seq_max)) {
		h->seq_max = end;
		h->flags |= H_SEQ_MAX;
	}
}

// A segment [seq, seq + len) sent by half `here` (SeqHalf::segment).
static __always_inline void seq_segment(struct flow *f, int here, __u32 seq, __u32 len,
					__u64 now, struct counters *c)
{
	struct half *h = &f->h[here & 1];
	struct half_cold *x = &f->x[here & 1];
	__u32 end = seq + len;
	__u32 idx = ++h->idx;

	if (!(h->flags & H_NXT)) {
		// Data below the first segment seen was never seen: a gap as far down as the
		// largest window reaches (farther is out of the window).
		add_hole(h, x, seq - MAX_WINDOW, seq);
		seen_late(h, x, seq, end);
		seq_entry(f, here, seq, end, idx, 0, now, c);
		h->nxt = end;
		h->flags |= H_NXT;
		return;
	}
	if (before(h->nxt, end) && !before(seq, h->nxt) && seq - h->nxt > MAX_WINDOW) {
		// Farther ahead than any window (SeqHalf's Kind::OutOfWindow).
		x->untracked++;
		return;
	}
	if (before(h->nxt, end)) {
		if (before(seq, h->nxt)) {
			// New data with old data in front: a repacketised retransmission.
			x->retransmissions++;
			add_mark(h, x, seq, h->nxt, idx);
			cover(h, x, seq, end);
			seen_late(h, x, seq, end);
			seq_entry(f, here, seq, end, idx, P_RTX, now, c);
		} else {
			if (after(seq, h->nxt))
				add_hole(h, x, h->nxt, seq);
			seen_late(h, x, seq, end);
			seq_entry(f, here, seq, end, idx, 0, now, c);
		}
		h->nxt = end;
		return;
	}
	if ((h->flags & H_ACKED) && !before(h->acked, end)) {
		x->retransmissions++;
		x->spurious++;
		return;
	}
	if (h->nxt - seq > MAX_WINDOW) {
		// Farther behind than any window.
		x->untracked++;
		return;
	}
	if (!in_hole(h, x, seq, end)) {
		x->retransmissions++;
		add_mark(h, x, seq, end, idx);
		return;
	}
	x->out_of_order++;
	cover(h, x, seq, end);
	seen_late(h, x, seq, end);
	seq_entry(f, here, seq, end, idx, 0, now, c);
}

// An ACK (and its SACK blocks) from half `here` for the data half `there` sent
// (SeqHalf::ack).
static __always_inline void seq_ack(struct flow_key *k, struct flow *f, int here,
				    struct segment *s, __u64 now, struct counters *c)
{
	int there = !here;
	struct half *t = &f->h[there];
	struct half_cold *tx = &f->x[there];
	__u32 a = s->ack;
	int sampled = 0;

	if (!(t->flags & H_ACKED) || before(t->acked, a)) {
		__u32 old = t->acked;
		int had = t->flags & H_ACKED;
		t->acked = a;
		t->ack_idx = t->idx;
		t->flags |= H_ACKED;
		if (t->flags & H_LATE) {
			tx->late.used = 0;
			t->flags &= ~H_LATE;
		}
		struct pending_key pk = { .id = f->id, .value = a, .half = there, .kind = KIND_SEQ };
		// No entry ends past the largest end given one (seq_max): an ACK past it is
		// not looked for (with sampling on, nearly every ACK).
		struct pending *p = (t->flags & H_SEQ_MAX) && !after(a, t->seq_max) ?
					    bpf_map_lookup_elem(&rttlab_pending, &pk) :
					    0;
		if (p) {
			struct pending e = *p;
			if (bpf_map_delete_elem(&rttlab_pending, &pk) == 0) {
				if ((e.flags & P_SACKED) || sacked(tx, e.seq, a, e.idx)) {
					tx->sacked_skipped++;
				} else if ((cfg_flags & F_KARN) &&
					   ((e.flags & P_RTX) || retransmitted(tx, e.seq, a, e.idx))) {
					tx->karn_skipped++;
				} else {
					__u64 rtt = now > e.ns ? now - e.ns : 0;
					if (rtt <= cfg_max_age_ns)
						emit(k, f, here, 1, rtt, now, &s->src, c);
					sampled = 1;
				}
				// Segments that ended below are all acknowledged: their entries
				// are dead.
				__u32 prev = e.seq;
				for (int i = 0; i < CHAIN; i++) {
					if (had && !after(prev, old))
						break;
					pk.value = prev;
					p = bpf_map_lookup_elem(&rttlab_pending, &pk);
					if (!p)
						break;
					__u32 next = p->seq;
					bpf_map_delete_elem(&rttlab_pending, &pk);
					prev = next;
				}
			}
			// The ACK ended at a segment's end, so no unmarked segment straddles
			// it: marks wholly below it can mark nothing still outstanding.
#pragma clang loop unroll(disable)
			for (int i = 0; i < NMARKS; i++)
				if (tx->marks[i].used && !before(a, tx->marks[i].hi))
					tx->marks[i].used = 0;
			if (tx->hull.used && !before(a, tx->hull.hi))
				tx->hull.used = 0;
#pragma clang loop unroll(disable)
			for (int i = 0; i < NSACKS; i++)
				if (tx->sacks[i].used && !before(a, tx->sacks[i].hi))
					tx->sacks[i].used = 0;
			if (tx->sack_hull.used && !before(a, tx->sack_hull.hi))
				tx->sack_hull.used = 0;
		}
		if (t->flags & H_HOLES) {
			int left = 0;
#pragma clang loop unroll(disable)
			for (int i = 0; i < NHOLES; i++) {
				if (tx->holes[i].used && !before(a, tx->holes[i].hi))
					tx->holes[i].used = 0;
				left |= tx->holes[i].used;
			}
			if (!left)
				t->flags &= ~H_HOLES;
		}
	}
	if (!(cfg_flags & F_SACK))
		return;
#pragma clang loop unroll(disable)
	for (int b = 0; b < SACK_BLOCKS; b++) {
		if (b >= s->nsacks)
			break;
		__u32 l = s->sack[(b * 2) & 7], r = s->sack[(b * 2 + 1) & 7];
		// D-SACKs and blocks that acknowledge nothing outstanding.
		if (!before(a, r) || !before(l, r))
			continue;
		struct pending_key pk = { .id = f->id, .value = r, .half = there, .kind = KIND_SEQ };
		struct pending *p = bpf_map_lookup_elem(&rttlab_pending, &pk);
		// An entry the last advance of the cumulative ACK covered, and that was seen
		// before it, was popped from the user-space queue (whatever is left of it
		// in the map); one seen after it (reordered before the capture point) was
		// not.
		if (p && (t->flags & H_ACKED) && !after(p->idx, t->ack_idx) && !before(t->acked, r))
			p = 0;
		if (p && !before(trimmed(p->seq, r, p->idx, t->flags & H_ACKED, t->acked, t->ack_idx), l) &&
		    !sacked(tx, p->seq, r, p->idx)) {
			__u32 was = __sync_fetch_and_or(&p->flags, P_SACKED);
			if (!(was & P_SACKED) && !sampled && !(was & P_RTX) &&
			    !(t->flags & H_INEXACT) && !retransmitted(tx, p->seq, r, p->idx)) {
				__u64 rtt = now > p->ns ? now - p->ns : 0;
				sampled = 1;
				tx->sack_timed++;
				if (rtt <= cfg_max_age_ns)
					emit(k, f, here, 1, rtt, now, &s->src, c);
			}
		}
		// Every segment seen so far that the block covers is SACKed.
		if (add_range(tx->sacks, &tx->sack_hull, l, r, t->idx + 1, (t->flags & H_ACKED) ? 2 : 0,
			      t->acked, t->ack_idx))
			t->flags |= H_INEXACT;
	}
}

// Both FINs sent and each acknowledged, or reset (Flow::finished).
static __always_inline int finished(struct flow *f)
{
	if (f->reset)
		return 1;
	for (int d = 0; d < 2; d++) {
		struct half *h = &f->h[d];
		if (!(h->flags & H_FIN) || !(h->flags & H_ACKED) || before(h->acked, h->fin_end))
			return 0;
	}
	return 1;
}

// The TS rule for one packet of half `here` (Analyzer::packet's TS part). A global
// function: its own stack frame, verified once.
__noinline int ts_rule(struct flow_key *k, struct flow *f, int here, struct segment *s, __u64 now)
{
	struct counters *c = counters();
	if (!k || !f || !s)
		return 0;
	here &= 1;
	struct half *h = &f->h[here];
	if (!s->has_ts) {
		COUNT(c, no_timestamps);
	} else if (s->tsval == 0 || (s->tsecr == 0 && s->flags != TCP_SYN)) {
		// pping's test: TSval 0 is "no timestamp", and only a SYN may carry TSecr 0
		// (RFC 7323 §3.2).
		COUNT(c, unusable_timestamps);
	} else {
		h->flags |= H_TS_SEEN;
		if ((cfg_flags & F_TS_ANY) && !(f->h[!here].flags & H_TS_SEEN)) {
			COUNT(c, one_way);
		} else {
			ts_echo(k, f, here, s->tsecr, now, &s->src, c);
			if ((cfg_flags & F_TS_ANY) || s->seglen > 0)
				ts_record(f, here, s->tsval, now, c);
		}
	}
	return 0;
}

// The seq/ACK rule for one packet of half `here`. A global function, as ts_rule.
__noinline int seq_rule(struct flow_key *k, struct flow *f, int here, struct segment *s, __u64 now)
{
	struct counters *c = counters();
	if (!k || !f || !s)
		return 0;
	here &= 1;
	if (s->flags & TCP_ACK)
		seq_ack(k, f, here, s, now, c);
	if (s->seglen > 0)
		seq_segment(f, here, s->seq, s->seglen, now, c);
	return 0;
}

// Everything after decoding: the flow table and both rules, for one TCP segment
// seen at `now`. A global function: verified once, whatever path decoding took.
__noinline int process(struct segment *sp, __u64 now)
{
	struct counters *c = counters();
	struct segment *s = sp;
	if (!s)
		return 0;

	struct flow_key k = {};
	int here;
	if (addr_lt(&s->src, &s->dst) || (addr_eq(&s->src, &s->dst) && s->sport <= s->dport)) {
		k.a = s->src;
		k.b = s->dst;
		k.a_port = s->sport;
		k.b_port = s->dport;
		here = 0;
	} else {
		k.a = s->dst;
		k.b = s->src;
		k.a_port = s->dport;
		k.b_port = s->sport;
		here = 1;
	}
	if ((cfg_flags & (F_HOSTS | F_PORTS | F_FLOWS)) && !matches_filter(s, &k)) {
		COUNT(c, filtered);
		return 0;
	}
	COUNT(c, tcp);

	struct flow *f = bpf_map_lookup_elem(&rttlab_flows, &k);
	if (f && now > f->last_ns && now - f->last_ns > cfg_idle_ns) {
		// Idle past the timeout: the connection is forgotten, as the user-space
		// table's sweep forgets it.
		retire(&k, f, END_EXPIRED);
		COUNT(c, flows_expired);
		bpf_map_delete_elem(&rttlab_flows, &k);
		f = 0;
	}
	if (!f) {
		f = new_flow(&k, now, c);
		if (!f)
			return 0;
	}
	if (now > f->last_ns)
		f->last_ns = now;

	int there = !here;
	struct half *h = &f->h[here];
	if ((s->flags & (TCP_SYN | TCP_ACK)) == TCP_SYN) {
		int restart = (h->flags & H_SYN) ? h->syn_seq != s->seq : h->packets > 0;
		if (restart) {
			// A new connection on the same addresses and ports.
			retire(&k, f, END_REUSED);
			COUNT(c, flows_reused);
			bpf_map_delete_elem(&rttlab_flows, &k);
			f = new_flow(&k, now, c);
			if (!f)
				return 0;
			h = &f->h[here];
		}
		h->syn_seq = s->seq;
		h->flags |= H_SYN;
	}
	h->packets++;
	h->bytes += s->ip_len;

	if (cfg_flags & F_TS)
		ts_rule(&k, f, here, s, now);
	if (cfg_flags & F_SEQ) {
		seq_rule(&k, f, here, s, now);
	} else if (s->flags & TCP_ACK) {
		// The flow's end is judged by acknowledged FINs even with seq off.
		struct half *t = &f->h[there];
		if (!(t->flags & H_ACKED) || before(t->acked, s->ack)) {
			t->acked = s->ack;
			t->flags |= H_ACKED;
		}
	}
	if (s->flags & TCP_FIN) {
		h->fin_end = s->seq + s->seglen;
		h->flags |= H_FIN;
	}
	if (s->flags & TCP_RST)
		f->reset = 1;
	if (finished(f)) {
		retire(&k, f, END_CLOSED);
		COUNT(c, flows_closed);
		bpf_map_delete_elem(&rttlab_flows, &k);
	}
	return 0;
}


// The packet being decoded, per CPU rather than on the stack: the programs' call
// chain (handle, process, seq_rule) has 512 bytes of stack in all. A program runs to
// its end on its CPU (softirq or BH disabled), so no other run shares it meanwhile.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct segment);
	__uint(max_entries, 1);
} rttlab_segment SEC(".maps");

static __always_inline int handle(struct __sk_buff *skb, int ingress)
{
	struct counters *c = counters();
	__u32 zero = 0;
	struct segment *s = bpf_map_lookup_elem(&rttlab_segment, &zero);
	if (!s)
		return TC_ACT_OK;
	__builtin_memset(s, 0, sizeof(*s));
	__u64 now = packet_time(skb, ingress);

	COUNT(c, packets);
	int r = decode(skb, s);
	if (r) {
		if (!c)
			return TC_ACT_OK;
		switch (r) {
		case SKIP_TRUNCATED:
			c->truncated++;
			break;
		case SKIP_NOT_IP:
			c->not_ip++;
			break;
		case SKIP_BAD_IP:
			c->bad_ip_header++;
			break;
		case SKIP_FRAGMENT:
			c->fragment++;
			break;
		case SKIP_BAD_TCP:
			c->bad_tcp_header++;
			break;
		default:
			c->not_tcp++;
		}
		return TC_ACT_OK;
	}

	process(s, now);
	return TC_ACT_OK;
}

SEC("classifier")
int rttlab_ingress(struct __sk_buff *skb)
{
	handle(skb, 1);
	return TC_ACT_UNSPEC;
}

SEC("classifier")
int rttlab_egress(struct __sk_buff *skb)
{
	handle(skb, 0);
	return TC_ACT_UNSPEC;
}

// ---- The sweep: run by user space through BPF_PROG_TEST_RUN, one map at a time ----

struct sweep {
	__u64 now;
	__u32 drain;
};

// The sweep's modes (the byte after the Ethernet header of its test packet): flows
// and pending entries apart, so that each run holds the CPU half as long.
#define SWEEP_FLOWS 0
#define SWEEP_DRAIN 1
#define SWEEP_PENDING 2

static long sweep_flow(struct bpf_map *map, struct flow_key *k, struct flow *f, struct sweep *s)
{
	if (!s->drain && !(s->now > f->last_ns && s->now - f->last_ns > cfg_idle_ns))
		return 0;
	if (bpf_map_delete_elem(map, k) == 0) {
		struct counters *c = counters();
		retire(k, f, s->drain ? END_DRAINED : END_EXPIRED);
		if (!s->drain)
			COUNT(c, flows_expired);
	}
	return 0;
}

static long sweep_pending(struct bpf_map *map, struct pending_key *k, struct pending *p,
			  struct sweep *s)
{
	// Past the maximum age an entry can give no sample.
	if (s->drain || (s->now > p->ns && s->now - p->ns > cfg_max_age_ns))
		bpf_map_delete_elem(map, k);
	return 0;
}

SEC("classifier")
int rttlab_sweep(struct __sk_buff *skb)
{
	struct sweep s = { .now = bpf_ktime_get_ns() };
	__u8 mode = 0;
	bpf_skb_load_bytes(skb, 14, &mode, 1);
	s.drain = mode == SWEEP_DRAIN;
	if (mode != SWEEP_PENDING)
		bpf_for_each_map_elem(&rttlab_flows, sweep_flow, &s, 0);
	if (mode != SWEEP_FLOWS)
		bpf_for_each_map_elem(&rttlab_pending, sweep_pending, &s, 0);
	return TC_ACT_UNSPEC;
}

char _license[] SEC("license") = "GPL";
