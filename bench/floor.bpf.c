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
 *   floor_transfers  the transfer floor: floor_record's storage and close
 *   + floor_sendmsg  record, and the two per-call hooks a transfer's bounds
 *   + floor_data_ready  need (tcp_sendmsg_locked, sk_data_ready) doing only
 *                    that: a send transfer starts at a write with nothing
 *                    outstanding after data came in, a receive transfer at
 *                    an arrival after a send started; each ended transfer is
 *                    a 128-byte record (tcpscope's size), those still open at
 *                    close ride in a 512-byte close record (as tcpscope's do)
 *
 * Bench code, not shipped: it shares no header with the daemon.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define FLOOR_RECORD_BYTES 256 /* about a flow record (tcpscope_flow_event: 296 bytes) */
#define FLOOR_TRANSFER_BYTES 128 /* sizeof(struct tcpscope_transfer_event) */

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct floor_state {
	__u64 start_ns; /* first SYN: the one time every record needs */
};

/* floor_transfers' own storage (the other variants keep their 8 bytes): the
 * two running transfers' bounds. */
struct floor_xfer_state {
	struct floor_state flow;
	__u64 last_rx_ns;
	__u64 tx_start_ns;
	__u64 rx_start_ns;
	__u32 rx_mark; /* bytes_received at the last arrival */
	__u8 tx_open;
	__u8 rx_open;
	__u8 pad[2];
};

/* A record the size of tcpscope's (`bytes`) of which the floor fills only
 * `fields`: the rest is reserved and submitted unwritten, so the ring moves as
 * many bytes as tcpscope's does. */
#define FLOOR_SIZED(name, bytes, fields)                               \
	struct name {                                                  \
		union {                                                \
			struct fields;                                 \
			__u8 tcpscope_size[bytes];                     \
		};                                                     \
	};                                                             \
	_Static_assert(sizeof(struct name) == (bytes), #name " size")

FLOOR_SIZED(floor_transfer, FLOOR_TRANSFER_BYTES, {
	__u64 start_ns;
	__u64 end_ns;
	__u64 bytes_mark;
	__u8 direction;
});

FLOOR_SIZED(floor_record, FLOOR_RECORD_BYTES, {
	__u64 start_ns;
	__u64 end_ns;
	__u32 srtt_us;
	__u32 snd_cwnd;
	__u64 bytes_acked;
	__u64 bytes_received;
	__u32 total_retrans;
	__u16 family;
});

struct floor_close {
	struct floor_record flow;
	struct floor_transfer transfers[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct floor_state);
} floor_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct floor_xfer_state);
} floor_xfer_flows SEC(".maps");

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

static __always_inline void fill_record(struct floor_record *r, const struct sock *sk, struct tcp_sock *tp,
					__u64 start_ns)
{
	r->start_ns = start_ns;
	r->end_ns = bpf_ktime_get_ns();
	r->srtt_us = tp->srtt_us >> 3;
	r->snd_cwnd = tp->snd_cwnd;
	r->bytes_acked = tp->bytes_acked;
	r->bytes_received = tp->bytes_received;
	r->total_retrans = tp->total_retrans;
	r->family = sk->__sk_common.skc_family;
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
	fill_record(r, sk, tp, start_ns);
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(floor_dispatch, const struct sock *sk, int oldstate, int newstate)
{
	return 0;
}

/* The storage step shared by floor_storage, floor_record and
 * floor_transfers (each with its own map): creates the socket's storage at
 * its first SYN; at CLOSE returns it if the socket was tracked; NULL at every
 * other transition. */
static __always_inline struct floor_state *storage_step(void *map, const struct sock *sk, int oldstate, int newstate)
{
	struct floor_state *st;

	if (!is_tcp(sk))
		return 0;
	if (is_start(oldstate, newstate)) {
		st = bpf_sk_storage_get(map, (struct sock *)sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (st)
			st->start_ns = bpf_ktime_get_ns();
		else
			__sync_fetch_and_add(&floor_untracked, 1);
		return 0;
	}
	if (newstate != TCP_CLOSE)
		return 0;
	st = bpf_sk_storage_get(map, (struct sock *)sk, 0, 0);
	if (!st || !st->start_ns)
		return 0;
	__sync_fetch_and_add(&floor_closed, 1);
	return st;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(floor_storage, const struct sock *sk, int oldstate, int newstate)
{
	storage_step(&floor_flows, sk, oldstate, newstate);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(floor_record, const struct sock *sk, int oldstate, int newstate)
{
	struct floor_state *st = storage_step(&floor_flows, sk, oldstate, newstate);

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

/* The transfer floor (see the top). */
static __always_inline void fill_transfer(struct floor_transfer *t, __u8 direction, __u64 start_ns, __u64 end_ns,
					  __u64 bytes_mark)
{
	t->start_ns = start_ns;
	t->end_ns = end_ns;
	t->bytes_mark = bytes_mark;
	t->direction = direction;
}

static __always_inline void emit_transfer(__u8 direction, __u64 start_ns, __u64 end_ns, __u64 bytes_mark)
{
	struct floor_transfer *t = bpf_ringbuf_reserve(&floor_ring, sizeof(*t), 0);

	if (!t) {
		__sync_fetch_and_add(&floor_lost, 1);
		return;
	}
	fill_transfer(t, direction, start_ns, end_ns, bytes_mark);
	bpf_ringbuf_submit(t, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(floor_transfers, const struct sock *sk, int oldstate, int newstate)
{
	struct floor_xfer_state *st = (void *)storage_step(&floor_xfer_flows, sk, oldstate, newstate);
	struct tcp_sock *tp;
	struct floor_close *c;

	if (!st)
		return 0;
	if (!st->tx_open && !st->rx_open) {
		emit(sk, st->flow.start_ns);
		st->flow.start_ns = 0;
		return 0;
	}
	tp = bpf_skc_to_tcp_sock((void *)sk);
	if (!tp)
		return 0;
	c = bpf_ringbuf_reserve(&floor_ring, sizeof(*c), 0);
	if (!c) {
		__sync_fetch_and_add(&floor_lost, 1);
		return 0;
	}
	fill_record(&c->flow, sk, tp, st->flow.start_ns);
	fill_transfer(&c->transfers[0], 0, st->tx_start_ns, c->flow.end_ns, tp->bytes_acked);
	fill_transfer(&c->transfers[1], 1, st->rx_start_ns, st->last_rx_ns, tp->bytes_received);
	bpf_ringbuf_submit(c, BPF_RB_NO_WAKEUP);
	st->flow.start_ns = 0;
	st->tx_open = st->rx_open = 0;
	return 0;
}

/* The transfer floor's state of a tracked socket, and its tcp_sock. */
static __always_inline struct floor_xfer_state *xfer_state_of(const struct sock *sk, struct tcp_sock **tp)
{
	struct floor_xfer_state *st = bpf_sk_storage_get(&floor_xfer_flows, (struct sock *)sk, 0, 0);

	if (!st || !st->flow.start_ns)
		return 0;
	*tp = bpf_skc_to_tcp_sock((void *)sk);
	return *tp ? st : 0;
}

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(floor_sendmsg, const struct sock *sk)
{
	struct tcp_sock *tp;
	struct floor_xfer_state *st = xfer_state_of(sk, &tp);
	__u64 now;

	if (!st || tp->snd_una != tp->write_seq)
		return 0; /* untracked, or data outstanding: joins the running transfer */
	if (st->tx_open && st->last_rx_ns <= st->tx_start_ns)
		return 0; /* no data came in since it began */
	now = bpf_ktime_get_ns();
	if (st->tx_open)
		emit_transfer(0, st->tx_start_ns, tp->delivered_mstamp * 1000, tp->bytes_acked);
	st->tx_start_ns = now;
	st->tx_open = 1;
	return 0;
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(floor_data_ready, const struct sock *sk)
{
	struct tcp_sock *tp;
	struct floor_xfer_state *st = xfer_state_of(sk, &tp);
	__u32 rcvd;
	__u64 now;

	if (!st)
		return 0;
	rcvd = (__u32)tp->bytes_received;
	if (rcvd == st->rx_mark)
		return 0; /* nothing new */
	st->rx_mark = rcvd;
	now = bpf_ktime_get_ns();
	if (st->rx_open && st->tx_start_ns <= st->last_rx_ns) {
		st->last_rx_ns = now; /* joins the running transfer */
		return 0;
	}
	if (st->rx_open)
		emit_transfer(1, st->rx_start_ns, st->last_rx_ns, tp->bytes_received);
	st->rx_start_ns = now;
	st->rx_open = 1;
	st->last_rx_ns = now;
	return 0;
}
