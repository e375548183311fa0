// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0
//
// tickwire's XDP program: redirects the UDP flows tickwire has opened on
// this interface to their AF_XDP sockets and passes every other packet to
// the kernel (ARP, ICMP, TCP, other UDP ports: coexistence).
//
// One program per interface is shared by every tickwire process on it:
//   tw_flows  (destination IPv4 address, UDP port) -> (queue, owner pid)
//   tw_xsks   queue -> AF_XDP socket (entries go when the socket closes)
//   tw_stats  per-CPU counters, indices below
//   tw_kernel flow packets passed to the kernel (mapped by each process)
//
// A flow's packets are redirected only on the queue its socket is bound to
// (AF_XDP cannot take them from another queue); on any other queue, or
// while no socket is in tw_xsks, they go to the kernel, where the owner's
// companion UDP socket on the same port receives them (counted).
//
// Built with clang -target bpf by crates/xdp/build.rs; no libbpf headers
// needed: the few helper declarations are below.

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)51;

struct tw_flow_key {
	__u32 addr; /* network order */
	__u16 port; /* network order */
	__u16 pad;
};

struct tw_flow {
	__u32 queue;
	__u32 pid;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct tw_flow_key);
	__type(value, struct tw_flow);
} tw_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} tw_xsks SEC(".maps");

enum {
	STAT_REDIRECTED = 0,   /* a flow's packet sent to its socket */
	STAT_PASSED = 1,       /* not a tickwire flow: the kernel's */
	STAT_OTHER_QUEUE = 2,  /* a flow's packet on another queue: to the kernel */
	STAT_COUNT = 4,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} tw_stats SEC(".maps");

/*
 * One counter, mapped into every tickwire process on the interface
 * (BPF_F_MMAPABLE): packets of tickwire flows passed to the kernel. A
 * process polls its kernel socket when it moves, not with a system call on
 * every turn of its loop.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} tw_kernel SEC(".maps");

static __attribute__((always_inline)) void count(__u32 what)
{
	__u64 *n = bpf_map_lookup_elem(&tw_stats, &what);
	if (n)
		*n += 1;
}

SEC("xdp")
int tickwire_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *udp;
	struct tw_flow_key key;
	struct tw_flow *flow;

	if ((void *)(eth + 1) > end || eth->h_proto != __builtin_bswap16(ETH_P_IP))
		goto pass;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		goto pass;
	/* Fragments (MF set or an offset) are reassembled by the kernel. */
	if (ip->frag_off & __builtin_bswap16(0x3fff))
		goto pass;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		goto pass;
	key.addr = ip->daddr;
	key.port = udp->dest;
	key.pad = 0;
	flow = bpf_map_lookup_elem(&tw_flows, &key);
	if (!flow)
		goto pass;
	if (flow->queue != ctx->rx_queue_index) {
		__u32 zero = 0;
		__u64 *k = bpf_map_lookup_elem(&tw_kernel, &zero);

		if (k)
			__sync_fetch_and_add(k, 1);
		count(STAT_OTHER_QUEUE);
		return XDP_PASS;
	}
	count(STAT_REDIRECTED);
	/* No socket on this queue (yet, or any more): the kernel's. */
	return bpf_redirect_map(&tw_xsks, ctx->rx_queue_index, XDP_PASS);
pass:
	count(STAT_PASSED);
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
