/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The record layouts shared by the BPF programs (bpf/flow.bpf.c) and the
 * daemon (src/record/flow_decoder.cc, src/record/transfer_decoder.cc). Only
 * fixed-width __u8..__u64 types, explicit padding, and a size assertion on
 * both sides: if either half changes a layout without the other, the build
 * fails instead of the data going wrong.
 *
 * Times are CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns / tcp_clock_ns);
 * the daemon converts them to CLOCK_REALTIME.
 */
#ifndef TCPSCOPE_FLOW_EVENT_H
#define TCPSCOPE_FLOW_EVENT_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* The size of a struct both sides use, asserted where each compiles it. */
#ifdef __cplusplus
#define TCPSCOPE_ASSERT_SIZE(type, size) static_assert(sizeof(struct type) == (size), #type " layout")
#else
#define TCPSCOPE_ASSERT_SIZE(type, size) _Static_assert(sizeof(struct type) == (size), #type " layout")
#endif

/* The layout of what a restart hands over (src/kernel/handover.h): the ring
 * records, the per-socket state (bpf/flow_state.h) and what every map
 * holds. Raise it with any change to them: a daemon takes over only maps
 * of its own layout version, and otherwise starts afresh. A test build may
 * set another (tests/package: an upgrade to a layout that differs). */
#ifndef TCPSCOPE_LAYOUT_VERSION
#define TCPSCOPE_LAYOUT_VERSION 6
#endif

#define TCPSCOPE_CC_NAME_LEN 16
#define TCPSCOPE_COMM_LEN 16
#define TCPSCOPE_CA_STATES 5

enum tcpscope_dir {
	TCPSCOPE_DIR_ACTIVE = 1,  /* we called connect() */
	TCPSCOPE_DIR_PASSIVE = 2, /* we accepted */
};

enum tcpscope_outcome {
	TCPSCOPE_OUTCOME_OK = 0,
	TCPSCOPE_OUTCOME_RESET = 1,
	TCPSCOPE_OUTCOME_REFUSED = 2,
	TCPSCOPE_OUTCOME_TIMEOUT = 3,
	TCPSCOPE_OUTCOME_ERROR = 4,
};

/* What a ring record is, named by the kind byte of the header it starts
 * with; the reader dispatches on it. */
enum tcpscope_record_kind {
	TCPSCOPE_RECORD_FLOW = 1,     /* struct tcpscope_flow_event */
	TCPSCOPE_RECORD_TRANSFER = 2, /* struct tcpscope_transfer_event */
	TCPSCOPE_RECORD_CLOSE = 3,    /* struct tcpscope_close_event */
};

/* The first bytes of every ring record (and of the records a close record
 * embeds). Eight bytes, so the fields after it keep their alignment. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wpadded"
struct tcpscope_record_header {
	__u8 kind; /* enum tcpscope_record_kind */
	__u8 pad[7];
};

TCPSCOPE_ASSERT_SIZE(tcpscope_record_header, 8);
#pragma GCC diagnostic pop

/* flags */
#define TCPSCOPE_F_ESTABLISHED   (1u << 0) /* the handshake completed */
#define TCPSCOPE_F_PARTIAL       (1u << 1) /* first seen mid-flow (opened before we attached) */
#define TCPSCOPE_F_RST_SENT      (1u << 2)
#define TCPSCOPE_F_RST_RECEIVED  (1u << 3)
#define TCPSCOPE_F_FIN_SENT      (1u << 4)
#define TCPSCOPE_F_TX_DONE       (1u << 5) /* every data byte we sent is acknowledged */
#define TCPSCOPE_F_APP_SET_CC    (1u << 6) /* the application set TCP_CONGESTION itself */
#define TCPSCOPE_F_START_FROM_MIN_RTT (1u << 7) /* passive: the handshake left no SYN-ACK
                                                   round trip (SYN cookie); start_ns is the
                                                   last ACK's arrival less min_rtt */

/* Every byte is a named field: an implicit hole (or tail padding) is a
 * compile error, with gcc and clang alike. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wpadded"
/* Which flow a record is of: the same in a flow's record and in its
 * transfers' records (bpf/record.h fills it in one place, fill_identity()). */
struct tcpscope_flow_identity {
	__u64 start_ns;       /* first SYN sent (active) / first SYN received (passive) */
	__u8 saddr[16];       /* network order; IPv4 in the first 4 bytes */
	__u8 daddr[16];
	__u32 netns;
	__u16 sport;          /* host order */
	__u16 dport;
	__u8 family;          /* 4 or 6 */
	__u8 dir;             /* enum tcpscope_dir */
	/* The socket's namespace's net.ipv4.ip_unprivileged_port_start (each
	 * namespace has its own), as the record was made; at most 65535. */
	__u16 unprivileged_port_start;
	/* The socket's owner (sk_uid, the initial user namespace's uid): who
	 * created it, or who accepted it (the accepting process's fsuid);
	 * before accept, its listener's owner. */
	__u32 uid;
	/* The socket's cgroup v2 (its id, kernfs's): the cgroup of the task
	 * that made it, and for an accepted socket its listener's, which the
	 * kernel copies at the accept. The daemon names the service from it. */
	__u64 sock_cgroup_id;
	/* The owning task's cgroup v2, taken with its pid (flow_state.h); 0
	 * until a task of the socket's is seen. */
	__u64 task_cgroup_id;
};

TCPSCOPE_ASSERT_SIZE(tcpscope_flow_identity, 72);

/* What a record reports as the kernel had it, each field under its output
 * name: the daemon copies the part whole and computes nothing from it.
 * Such a field is named in at most four hand-written files: here, the BPF
 * code that fills it (bpf/record.h; bpf/transfer.h for a transfer's), the
 * per-socket state if the kernel must track it over the flow's life
 * (bpf/flow_state.h), and src/record/record_fields.h, the output table.
 * Whatever the value needs (a maximum, a unit, a clamp) the BPF code does
 * as it fills the record. tests/unit/record/kernel_part_test.cc counts. A
 * value the daemon computes with (aggregates, compares, controls) is a
 * field of the event itself instead, decoded in src/record. */
struct tcpscope_flow_kernel {
	__u64 bytes_retrans;     /* tcp_info's tcpi_bytes_retrans */
	__u64 delivery_rate_bps; /* as tcp_info's tcpi_delivery_rate, in bits/s */
	__u64 pacing_rate_bps;   /* sk_pacing_rate in bits/s; 0 when unlimited */
	__u32 rttvar_us;
	__u32 cwnd;              /* snd_cwnd at the record */
	__u32 max_cwnd;          /* the largest snd_cwnd seen over the flow's life */
	__u32 ssthresh;
	__u32 mss;               /* mss_cache */
	__u32 segs_in;
	__u32 lost_segs;         /* the cumulative tp->lost (tcp_info's tcpi_lost is the lost now) */
	__u32 delivered_ce;      /* segments delivered whose ACK echoed a CE mark (ECE):
	                            tcp_info's tcpi_delivered_ce */
	__u8 ecn;                /* 1: ECN negotiated on the handshake */
	__u8 pad[7];
};

TCPSCOPE_ASSERT_SIZE(tcpscope_flow_kernel, 64);

struct tcpscope_flow_event {
	struct tcpscope_record_header common; /* TCPSCOPE_RECORD_FLOW */
	struct tcpscope_flow_identity id;
	__u64 established_ns; /* handshake completed; 0 if it never did */
	__u64 data_end_ns;    /* last data byte acknowledged, either direction; 0 if no data */
	__u64 end_ns;         /* the socket reaching CLOSE */
	__u64 bytes_acked;    /* payload bytes we sent that the peer acknowledged */
	__u64 bytes_received; /* payload bytes received in order */
	__u64 ca_state_ns[TCPSCOPE_CA_STATES]; /* time in Open, Disorder, CWR, Recovery, Loss */
	__u32 pid;
	__u32 srtt_us;
	__u32 min_rtt_us;
	__u32 segs_out;
	__u32 total_retrans;
	__u32 flags;            /* TCPSCOPE_F_* */
	__s32 sk_err;           /* positive errno the socket ended with, 0 if none */
	__u32 cc_rule;          /* (policy install id << 16) | (rule index + 1); 0: no rule chose */
	__u8 outcome;           /* enum tcpscope_outcome */
	__u8 arm;               /* experiment arm: TCPSCOPE_ARM_TAG(index), 0 when none */
	__u8 pad[6];
	char cc[TCPSCOPE_CC_NAME_LEN];
	char comm[TCPSCOPE_COMM_LEN];
	struct tcpscope_flow_kernel kernel;
};

TCPSCOPE_ASSERT_SIZE(tcpscope_flow_event, 296);
#pragma GCC diagnostic pop

enum tcpscope_transfer_direction {
	TCPSCOPE_XFER_SEND = 1, /* data this host sent */
	TCPSCOPE_XFER_RECV = 2, /* data this host received */
};

/* wait_us when no data went the other way before the transfer. */
#define TCPSCOPE_NO_WAIT 0xffffffffU

/* A transfer's values the daemon only reports: as tcpscope_flow_kernel,
 * filled by bpf/transfer.h. The time counters are tcp_info's chrono
 * counters accrued during a send transfer (0 for a receive), converted from
 * jiffies and cut to the transfer's duration by the BPF code. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wpadded"
struct tcpscope_transfer_kernel {
	__u32 busy_us;
	__u32 sndbuf_limited_us;
};

TCPSCOPE_ASSERT_SIZE(tcpscope_transfer_kernel, 8);
#pragma GCC diagnostic pop

/* One transfer: a run of data in one direction of a flow (bpf/transfer.h,
 * "Transfers", has the rule). It shares the ring with the flow records. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wpadded"
struct tcpscope_transfer_event {
	struct tcpscope_record_header common; /* TCPSCOPE_RECORD_TRANSFER */
	struct tcpscope_flow_identity id;     /* its flow's, as in that flow's record */
	__u64 start_ns;       /* send: first byte handed to TCP; recv: first byte arrived */
	__u64 end_ns;         /* send: last byte acknowledged; recv: last byte arrived */
	__u64 bytes;          /* payload bytes */
	__u32 seq;            /* 0, 1, 2, ... in the order the flow's transfers started */
	__u32 wait_us;        /* from the other direction's last data to the start; TCPSCOPE_NO_WAIT */
	__u32 retrans_segs;   /* segments this host retransmitted during it */
	__u32 srtt_us;        /* at its end */
	__u32 min_rtt_us;
	__u32 rwnd_limited_us; /* as tcpscope_transfer_kernel's time counters */
	__u32 cc_rule;        /* as in tcpscope_flow_event */
	__u8 direction;       /* enum tcpscope_transfer_direction */
	__u8 arm;
	__u8 sampling_shift;  /* its flow was followed as one in 2^sampling_shift (transfer.h,
	                         "Which flows"): 0 for a flow a rule follows */
	__u8 pad;
	char cc[TCPSCOPE_CC_NAME_LEN];
	struct tcpscope_transfer_kernel kernel;
};

TCPSCOPE_ASSERT_SIZE(tcpscope_transfer_event, 160);
#pragma GCC diagnostic pop

/* A flow's record at close with the transfers still open then (a
 * request/response connection's last two): one ring reservation instead of
 * up to three. User space handles them in order: transfers, then the flow. */
#define TCPSCOPE_CLOSE_TRANSFERS 2

#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wpadded"
struct tcpscope_close_event {
	struct tcpscope_record_header common; /* TCPSCOPE_RECORD_CLOSE */
	struct tcpscope_transfer_event transfers[TCPSCOPE_CLOSE_TRANSFERS];
	struct tcpscope_flow_event flow;
	__u32 n_transfers; /* how many of `transfers` are filled, from the first */
	__u32 reserved;
};

TCPSCOPE_ASSERT_SIZE(tcpscope_close_event, 632);
#pragma GCC diagnostic pop

/* The cgroups_made map (bpf/cgroup.bpf.c): each cgroup v2 made while the
 * programs run, by its id (kernfs's), with its parent's id and its own
 * name, as the kernel's cgroup_mkdir tracepoint has them. A socket's cgroup
 * may be made and removed before the daemon reads its directory; from this
 * the daemon names it by its parent's path. An LRU map: the oldest go. */
#define TCPSCOPE_CGROUPS_MADE 8192
#define TCPSCOPE_CGROUP_NAME_LEN 248

#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wpadded"
struct tcpscope_cgroup_made {
	__u64 parent_id;
	char name[TCPSCOPE_CGROUP_NAME_LEN]; /* NUL-terminated */
};

TCPSCOPE_ASSERT_SIZE(tcpscope_cgroup_made, 256);
#pragma GCC diagnostic pop

/* transfer_sampling_shift (bpf/transfer.h) beyond this: no flow's transfers
 * are followed but those a rule follows (transfer_sampling_rate 0). */
#define TCPSCOPE_MAX_SAMPLING_SHIFT 16
#define TCPSCOPE_SAMPLING_OFF 32

/* The one entry of the followed_since map: what flows may have their
 * transfers followed, since the maps were made (a restart that takes them
 * over keeps it). Both fields move one way only: the loader and reloads
 * lower floor_shift to each sampling shift they set, and set
 * rule_followed once a rule that follows its flows' transfers is
 * installed. bpf/transfer.h, surely_not_followed(), reads it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wpadded"
struct tcpscope_followed_since {
	__u32 floor_shift;    /* the smallest transfer_sampling_shift in force */
	__u32 rule_followed;  /* 1: a rule has followed a flow's transfers */
};
TCPSCOPE_ASSERT_SIZE(tcpscope_followed_since, 8);
#pragma GCC diagnostic pop

/* Entries of the ignored_netns map: network namespaces (by inode) whose
 * sockets the flow programs leave alone (config ignore_netns). */
#define TCPSCOPE_MAX_IGNORED_NETNS 64

/* Indexes into the per-CPU `counters` array map: what user space reports.
 * Records handed over are counted by the reader, not here: a count per
 * record would cost a map update on every flow. */
enum tcpscope_counter {
	TCPSCOPE_CNT_RECORDS_LOST = 0, /* ring buffer full: a finished flow was not handed over */
	TCPSCOPE_CNT_STORAGE_FAILED,   /* sk_storage could not be created (memory) */
	TCPSCOPE_CNT_CLOSED_AT_DESTROY, /* records made as the socket was destroyed: the kernel skipped
	                                   its CLOSE in on_state_change (it was running on that CPU) */
	TCPSCOPE_CNT_TRANSFERS_LOST,   /* ring buffer full: a transfer record was not handed over */
	TCPSCOPE_CNT_MAX,
};

#endif /* TCPSCOPE_FLOW_EVENT_H */
