/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Per-socket state, shared by the two BPF objects: flow.bpf.c follows the
 * socket's life in it, policy.bpf.c records its congestion-control choice in
 * it. policy.bpf.c defines the map; common.h declares it extern for
 * flow.bpf.c, and `bpftool gen object` resolves the two into one. BPF side
 * only. */
#ifndef TCPSCOPE_FLOW_STATE_H
#define TCPSCOPE_FLOW_STATE_H

#include "vmlinux.h"

#include "tcpscope/flow_event.h"
#include "tcpscope/policy.h"

/* 184 bytes. The kernel allocates a socket's element as the 72-byte head
 * of bpf_local_storage_elem plus this value: 256 bytes, the kmalloc-256 size
 * class. The transfer fields took it there from 120 bytes (kmalloc-192): 64
 * bytes more per socket, cheaper than a second storage per socket, which
 * costs an allocation, an RCU free and a lookup per hook (bench/README.md,
 * "Memory"). At 185 bytes it would be kmalloc-512, so a field added here
 * must come out of another, or the static assert below be moved knowingly. */
struct flow_state {
	__u64 start_ns;
	__u64 last_rx_ns;    /* latest in-order data arrival */
	__u64 tx_end_ns;     /* every byte we sent was acknowledged at this time (before our
			      * FIN only kept by the ACK path, note_segment()) */
	__u64 ca_since_ns;   /* the current congestion state began; 0 until established */
	/* Time in Disorder, CWR, Recovery and Loss. Time in Open is the rest of
	 * the time since the handshake: every interval from then on is closed
	 * into exactly one state, so it needs no counter of its own. */
	__u64 ca_ns[TCPSCOPE_CA_STATES - 1];
	__u64 cgroup_id;
	/* Handshake completion, µs after start_ns (a handshake cannot outlast
	 * 71 minutes: SYN retries give up long before). Valid with
	 * TCPSCOPE_F_ESTABLISHED. */
	__u32 established_us;
	__u32 pid;
	__u32 max_cwnd;
	__u32 fin_seq;       /* write_seq when our FIN was queued: one past the last data byte */
	__u32 rx_mark;       /* low 32 bits of bytes_received at the last arrival recorded */
	__u16 flags;         /* TCPSCOPE_F_*, copied into the record */
	__u8 dir : 2;
	__u8 sampling_shift : 5; /* with TCPSCOPE_ST_FOLLOWED: followed as one flow in 2^this */
	__u8 : 1;
	__u8 ca_state : 7;
	__u8 emitted : 1;    /* the close record went out; the storage stays until the socket is freed */
	char comm[TCPSCOPE_COMM_LEN];
	/* Written by policy.bpf.c (sockops, setsockopt): which rule and arm
	 * chose this socket's CC, and what the application asked for. It lives
	 * here rather than in a storage of its own so that a socket costs one
	 * storage allocation, not two (bench/README.md). */
	struct tcpscope_sock_policy policy;
	/* The latest transfer each way (transfer.h, "Transfers"); open while
	 * TCPSCOPE_ST_TX_OPEN / TCPSCOPE_ST_RX_OPEN is set. */
	__u64 tx_start_ns;
	__u64 tx_acked_base;    /* payload acknowledged before it began */
	__u64 rx_start_ns;      /* its first arrival */
	__u64 rx_received_base; /* payload received before it */
	__u32 tx_seq;
	__u32 rx_seq;
	__u32 tx_wait_us;       /* TCPSCOPE_NO_WAIT when nothing had arrived */
	__u32 rx_wait_us;
	__u32 tx_retrans_base;
	__u32 tx_chrono_base[3]; /* tcp_info's busy, rwnd- and sndbuf-limited time, in jiffies */
};
_Static_assert(sizeof(struct flow_state) <= 184, "flow_state must fit the kmalloc-256 class (see above)");

/* Bits of flow_state.flags that describe the state, not the flow: the record
 * leaves them out. */
#define TCPSCOPE_ST_FOLLOWED  (1u << 11) /* its transfers are followed (transfer.h, "Which flows") */
#define TCPSCOPE_ST_START_SET (1u << 12) /* start_ns is final: a transfer record carried it */
#define TCPSCOPE_ST_TX_OPEN   (1u << 13) /* a send transfer is running */
#define TCPSCOPE_ST_RX_OPEN   (1u << 14) /* a receive transfer is running */
#define TCPSCOPE_ST_XFER_SEEN (1u << 15) /* a transfer has started: the next seq follows tx_seq/rx_seq */
#define TCPSCOPE_ST_MASK \
	(TCPSCOPE_ST_FOLLOWED | TCPSCOPE_ST_START_SET | TCPSCOPE_ST_TX_OPEN | TCPSCOPE_ST_RX_OPEN | TCPSCOPE_ST_XFER_SEEN)

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
