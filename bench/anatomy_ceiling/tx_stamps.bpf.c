// SPDX-License-Identifier: GPL-2.0
// Benchmark only (bench/anatomy_ceiling.py), never loaded by rttlab: what the TX stamps
// `rr --anatomy` takes (each message's SND and, for TCP, its ACK) would cost if they came
// from the kernel's BPF timestamping callbacks (Linux 6.15+; sock_ops
// BPF_SOCK_OPS_TSTAMP_*_CB, include/uapi/linux/bpf.h) instead of SO_TIMESTAMPING's error
// queue: no socket buffer per stamp and no system call to fetch it. Each stamp is
// written where user space could read it without a system call (an mmap-able array),
// so the cost measured is the kernel's alone.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define SOL_SOCKET 1
#define LOOPBACK 0x0100007f // 127.0.0.1 as the context holds it (network order)

struct stamp {
	__u64 cookie;
	__u64 ns;
	__u32 tskey;
	__u32 op;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct stamp);
} stamps SEC(".maps");

// How many stamps were taken: the benchmark's witness that each transaction had its four
// (the request's SND and ACK at the client, the response's at the server).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} taken SEC(".maps");

extern int bpf_sock_ops_enable_tx_tstamp(struct bpf_sock_ops_kern *skops, __u64 flags) __ksym;
extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

SEC("sockops")
int tx_stamps(struct bpf_sock_ops *skops)
{
	int op = skops->op;

	if (op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB || op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB) {
		int on = SK_BPF_CB_TX_TIMESTAMPING;

		if (skops->remote_ip4 == LOOPBACK)
			bpf_setsockopt(skops, SOL_SOCKET, SK_BPF_CB_FLAGS, &on, sizeof(on));
		return 1;
	}
	if (op == BPF_SOCK_OPS_TSTAMP_SENDMSG_CB) {
		bpf_sock_ops_enable_tx_tstamp(bpf_cast_to_kern_ctx(skops), 0);
		return 1;
	}
	// SCHED (entering the qdisc) comes with the others and is not wanted.
	if (op != BPF_SOCK_OPS_TSTAMP_SND_SW_CB && op != BPF_SOCK_OPS_TSTAMP_ACK_CB)
		return 1;
	struct bpf_sock_ops_kern *k = bpf_cast_to_kern_ctx(skops);
	struct sk_buff *skb = k->skb;
	struct skb_shared_info *sh =
		bpf_rdonly_cast(skb->head + skb->end, bpf_core_type_id_kernel(struct skb_shared_info));
	__u32 tskey = sh->tskey;
	__u64 cookie = bpf_get_socket_cookie(skops);
	__u32 slot = (tskey ^ (__u32)cookie ^ (op << 11)) & 4095;
	__u32 zero = 0;
	struct stamp *s = bpf_map_lookup_elem(&stamps, &slot);
	__u64 *count = bpf_map_lookup_elem(&taken, &zero);

	if (!s || !count)
		return 1;
	__sync_fetch_and_add(count, 1);
	s->ns = bpf_ktime_get_ns();
	s->cookie = cookie;
	s->tskey = tskey;
	s->op = op;
	return 1;
}

char _license[] SEC("license") = "GPL";
