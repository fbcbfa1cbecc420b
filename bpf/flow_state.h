/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Per-socket state, shared by the two BPF objects: flow.bpf.c follows the
 * socket's life in it, policy.bpf.c records its congestion-control choice in
 * it. policy.bpf.c defines the map; flow.bpf.c declares it extern, and
 * `bpftool gen object` resolves the two into one. BPF side only. */
#ifndef TCPSCOPE_FLOW_STATE_H
#define TCPSCOPE_FLOW_STATE_H

#include "tcpscope/flow_event.h"
#include "tcpscope/policy.h"

struct flow_state {
	__u64 start_ns;
	__u64 established_ns;
	__u64 clone_ns;      /* passive: the child socket was created */
	__u64 last_rx_ns;    /* latest in-order data arrival */
	__u64 tx_end_ns;     /* every byte we sent was acknowledged at this time */
	__u64 ca_since_ns;
	__u64 ca_ns[TCPSCOPE_CA_STATES];
	__u64 cgroup_id;
	__u32 pid;
	__u32 max_cwnd;
	__u32 fin_seq;       /* write_seq when our FIN was queued: one past the last data byte */
	__u32 flags;
	__u32 rx_mark;       /* low 32 bits of bytes_received at the last arrival recorded */
	__u8 dir;
	__u8 ca_state;
	__u8 emitted;        /* the close record went out; the storage stays until the socket is freed */
	__u8 pad;
	char comm[TCPSCOPE_COMM_LEN];
	/* Written by policy.bpf.c (sockops, setsockopt): which rule and arm
	 * chose this socket's CC, and what the application asked for. It lives
	 * here rather than in a storage of its own so that a socket costs one
	 * storage allocation, not two (bench/README.md). */
	struct tcpscope_sock_policy policy;
};

/* BPF_F_CLONE: an accepted socket inherits the listener's storage (what the
 * application set on the listener); flow.bpf.c resets the rest when the
 * child's tracking starts. */
#define TCPSCOPE_FLOWS_MAP                                          \
	struct {                                                    \
		__uint(type, BPF_MAP_TYPE_SK_STORAGE);              \
		__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE); \
		__type(key, int);                                   \
		__type(value, struct flow_state);                   \
	}

#endif
