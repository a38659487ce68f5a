// SPDX-License-Identifier: GPL-2.0
// rttlab's sock_ops program: per destination prefix (an LPM trie each for IPv4 and
// IPv6), answer BPF_SOCK_OPS_TIMEOUT_INIT with the SYN's initial RTO in jiffies
// (tcp_timeout_init() in include/net/tcp.h uses a positive reply instead of
// TCP_TIMEOUT_INIT, 1 s), and set the connection's rto_min and delayed-ACK ceiling
// (TCP_BPF_RTO_MIN, TCP_BPF_DELACK_MAX: bpf_sol_tcp_setsockopt in net/core/filter.c;
// µs, accepted in [2 jiffies, 200 ms]). They are set in TCP_CONNECT_CB, before an
// active open's SYN leaves, so the handshake's RTT sample already computes the RTO
// with the new floor (tcp_set_rto); passive opens get them when established, and
// their RTO follows from the next samples on. Seed 001's appendix did the SYN RTO for
// IPv4 only, with bpftool.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define SOL_TCP 6

struct key4 {
	__u32 prefixlen;
	__u8 addr[4];
};

struct key6 {
	__u32 prefixlen;
	__u8 addr[16];
};

// Zero means "leave the kernel's default".
struct tuning {
	__u32 syn_rto_jiffies;
	__u32 rto_min_us;
	__u32 delack_max_us;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct key4);
	__type(value, struct tuning);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} rttlab_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct key6);
	__type(value, struct tuning);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} rttlab_v6 SEC(".maps");

static __always_inline struct tuning *lookup(struct bpf_sock_ops *skops)
{
	if (skops->family == 2 /* AF_INET */) {
		struct key4 k = { .prefixlen = 32 };
		__u32 a = skops->remote_ip4;
		__builtin_memcpy(k.addr, &a, 4);
		return bpf_map_lookup_elem(&rttlab_v4, &k);
	}
	if (skops->family == 10 /* AF_INET6 */) {
		struct key6 k = { .prefixlen = 128 };
		__u32 a[4];
		a[0] = skops->remote_ip6[0];
		a[1] = skops->remote_ip6[1];
		a[2] = skops->remote_ip6[2];
		a[3] = skops->remote_ip6[3];
		__builtin_memcpy(k.addr, a, 16);
		return bpf_map_lookup_elem(&rttlab_v6, &k);
	}
	return 0;
}

SEC("sockops")
int rttlab_sockops(struct bpf_sock_ops *skops)
{
	struct tuning *t = lookup(skops);
	int v;

	if (!t)
		return 1;
	switch (skops->op) {
	case BPF_SOCK_OPS_TIMEOUT_INIT:
		if (t->syn_rto_jiffies)
			skops->reply = t->syn_rto_jiffies;
		break;
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		if (t->rto_min_us) {
			v = t->rto_min_us;
			bpf_setsockopt(skops, SOL_TCP, TCP_BPF_RTO_MIN, &v, sizeof(v));
		}
		if (t->delack_max_us) {
			v = t->delack_max_us;
			bpf_setsockopt(skops, SOL_TCP, TCP_BPF_DELACK_MAX, &v, sizeof(v));
		}
		break;
	}
	return 1;
}

char _license[] SEC("license") = "GPL";
