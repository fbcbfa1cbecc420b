// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The floor of per-flow tracking as tcpscope is asked to do it (bench/floor.py):
 * each program is the least a tool can run at one step of the design, so the
 * churn rate with it attached bounds from above what any tool with that step
 * can reach on this host. One program is loaded at a time.
 *
 *   floor_dispatch   the state-change tracepoint, empty: the price of being called
 *   floor_storage    + per-socket SK_STORAGE holding the first SYN's time,
 *                    created at the first transition, read at CLOSE
 *   floor_record     + a record of tcpscope's size through a ring buffer at
 *                    CLOSE (reserve, a few tcp_sock reads, submit without wake-up)
 *   floor_hash       floor_record with a preallocated hash keyed by the socket
 *                    instead of SK_STORAGE (what tcplife does; the issue rules
 *                    it out because it can fill up): the storage's own share
 *
 * Bench code, not shipped: it shares no header with the daemon.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define FLOOR_RECORD_BYTES 256 /* sizeof(struct tcpscope_flow_event) */

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct floor_state {
	__u64 start_ns; /* first SYN: the one time every record needs */
};

struct floor_record {
	__u64 start_ns;
	__u64 end_ns;
	__u32 srtt_us;
	__u32 snd_cwnd;
	__u64 bytes_acked;
	__u64 bytes_received;
	__u32 total_retrans;
	__u16 family;
	__u16 pad;
	__u8 rest[FLOOR_RECORD_BYTES - 48];
};
_Static_assert(sizeof(struct floor_record) == FLOOR_RECORD_BYTES, "record size");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct floor_state);
} floor_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__type(key, __u64);
	__type(value, struct floor_state);
} floor_flows_hash SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} floor_ring SEC(".maps");

/* Read by the loader: what the programs saw and what they could not keep. */
__u64 floor_closed = 0;
__u64 floor_lost = 0;
__u64 floor_untracked = 0;

static __always_inline bool is_tcp(const struct sock *sk)
{
	__u16 family = sk->__sk_common.skc_family;

	return sk->sk_protocol == IPPROTO_TCP && (family == AF_INET || family == AF_INET6);
}

static __always_inline bool is_start(int oldstate, int newstate)
{
	/* active: CLOSE -> SYN_SENT; passive: the child socket enters SYN_RECV */
	return newstate == TCP_SYN_SENT || newstate == TCP_SYN_RECV;
}

static __always_inline void emit(const struct sock *sk, __u64 start_ns)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock((void *)sk);
	struct floor_record *r;

	if (!tp)
		return;
	r = bpf_ringbuf_reserve(&floor_ring, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&floor_lost, 1);
		return;
	}
	r->start_ns = start_ns;
	r->end_ns = bpf_ktime_get_ns();
	r->srtt_us = tp->srtt_us >> 3;
	r->snd_cwnd = tp->snd_cwnd;
	r->bytes_acked = tp->bytes_acked;
	r->bytes_received = tp->bytes_received;
	r->total_retrans = tp->total_retrans;
	r->family = sk->__sk_common.skc_family;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(floor_dispatch, const struct sock *sk, int oldstate, int newstate)
{
	return 0;
}

/* The storage step shared by floor_storage and floor_record: creates the
 * socket's storage at its first SYN; at CLOSE returns it if the socket was
 * tracked; NULL at every other transition. */
static __always_inline struct floor_state *storage_step(const struct sock *sk, int oldstate, int newstate)
{
	struct floor_state *st;

	if (!is_tcp(sk))
		return 0;
	if (is_start(oldstate, newstate)) {
		st = bpf_sk_storage_get(&floor_flows, (struct sock *)sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (st)
			st->start_ns = bpf_ktime_get_ns();
		else
			__sync_fetch_and_add(&floor_untracked, 1);
		return 0;
	}
	if (newstate != TCP_CLOSE)
		return 0;
	st = bpf_sk_storage_get(&floor_flows, (struct sock *)sk, 0, 0);
	if (!st || !st->start_ns)
		return 0;
	__sync_fetch_and_add(&floor_closed, 1);
	return st;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(floor_storage, const struct sock *sk, int oldstate, int newstate)
{
	storage_step(sk, oldstate, newstate);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(floor_record, const struct sock *sk, int oldstate, int newstate)
{
	struct floor_state *st = storage_step(sk, oldstate, newstate);

	if (!st)
		return 0;
	emit(sk, st->start_ns);
	st->start_ns = 0; /* a socket that closes twice (a failed connect) sends once */
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(floor_hash, const struct sock *sk, int oldstate, int newstate)
{
	__u64 key = (__u64)sk;
	struct floor_state *st, init = {};

	if (!is_tcp(sk))
		return 0;
	if (is_start(oldstate, newstate)) {
		init.start_ns = bpf_ktime_get_ns();
		if (bpf_map_update_elem(&floor_flows_hash, &key, &init, BPF_ANY))
			__sync_fetch_and_add(&floor_untracked, 1);
		return 0;
	}
	if (newstate != TCP_CLOSE)
		return 0;
	st = bpf_map_lookup_elem(&floor_flows_hash, &key);
	if (!st)
		return 0;
	__sync_fetch_and_add(&floor_closed, 1);
	emit(sk, st->start_ns);
	bpf_map_delete_elem(&floor_flows_hash, &key);
	return 0;
}
