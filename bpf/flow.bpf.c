// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Follow every TCP socket from its first SYN to CLOSE and hand one record per
 * flow, and one per transfer (a run of data one way, see "Transfers" in
 * transfer.h), to user space. Per-socket state lives in SK_STORAGE (freed
 * with the socket, nothing to fill up); the record is read from tcp_sock at
 * CLOSE.
 *
 * Hooks, all tracepoints (no kprobe/fentry needed):
 *   inet_sock_set_state  the state machine: start, handshake, FIN, close
 *   sk_data_ready        time of the latest in-order data arrival (FCT end, rx side),
 *                        receive transfers
 *   tcp_sendmsg_locked   owner of accepted sockets (process context), cwnd samples,
 *                        send transfers
 *   tcp_probe            only on kernels without tcp_sendmsg_locked (before 6.16):
 *                        send transfers from the ACKs; or without sk_data_ready
 *                        (before 6.3): the arrivals, from the segments
 *   tcp_cong_state_set   time in Open/Disorder/CWR/Recovery/Loss, cwnd before reductions
 *   tcp_send_reset, tcp_receive_reset   RST-ended flows
 * and a TCP socket iterator that snapshots the open flows on demand (and
 * hands over the transfers that it finds finished).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "tcpscope/flow_event.h"
#include "flow_state.h"

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define EPIPE 32
#define ECONNRESET 104
#define ETIMEDOUT 110
#define ECONNREFUSED 111
#define NSEC_PER_USEC 1000ULL
#define NSEC_PER_MSEC 1000000ULL
#define NSEC_PER_SEC 1000000000ULL
#define USEC_PER_MSEC 1000U
#define TCPHDR_FIN 0x01 /* a TCP header's flags byte, as include/net/tcp.h */
#define TCPHDR_SYN 0x02
#define TCPHDR_RST 0x04
#define TCPHDR_ACK 0x10

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader before load: wake the reader once this much is queued;
 * smaller batches are picked up by its periodic drain. */
const volatile __u64 wakeup_bytes = 256 * 1024;
/* Set by the loader on kernels without tcp_sendmsg_locked (before 6.16):
 * on_segment takes send transfers from the ACKs. */
const volatile bool sends_from_acks = false;
/* Set by the loader on kernels without sk_data_ready (before 6.3):
 * on_segment takes payload arrivals from the segments. */
const volatile bool arrivals_from_segments = false;

/* Defined by policy.bpf.c, which writes the socket's policy part. */
extern TCPSCOPE_FLOWS_MAP flows SEC(".maps");

/* A restart hands the maps and links to the next daemon (README
 * "Restarts"), which attaches its programs beside these before it detaches
 * them: a tracepoint's link cannot swap its program (a cgroup's can, and
 * does). Only the programs of the active generation run, so that each
 * event is handled once: the new daemon attaches its generation, makes it
 * the active one in one write, then detaches the old. Set by the loader. */
const volatile __u32 generation = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} active_generation SEC(".maps");

static __always_inline bool running(void)
{
	__u32 zero = 0, *active = bpf_map_lookup_elem(&active_generation, &zero);

	return active && *active == generation;
}

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by the loader at open time */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TCPSCOPE_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);

	if (v)
		*v += 1;
}

static __always_inline bool is_tcp(const struct sock *sk)
{
	__u16 family = sk->__sk_common.skc_family;

	return sk->sk_protocol == IPPROTO_TCP && (family == AF_INET || family == AF_INET6);
}

static __always_inline struct flow_state *state_of(const struct sock *sk)
{
	return bpf_sk_storage_get(&flows, (struct sock *)sk, 0, 0);
}

/* Storage that policy.bpf.c created (sockops, setsockopt) has no start:
 * the socket's life is not being followed yet. */
static __always_inline bool tracked(const struct flow_state *st)
{
	return st && st->start_ns;
}

static __always_inline void take_owner(struct flow_state *st)
{
	st->pid = bpf_get_current_pid_tgid() >> 32;
	st->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(st->comm, sizeof(st->comm));
}

static __always_inline void sample_cwnd(struct flow_state *st, __u32 cwnd)
{
	if (cwnd > st->max_cwnd)
		st->max_cwnd = cwnd;
}

/* Sequence-space comparison, as the kernel's after()/before(). */
static __always_inline bool seq_geq(__u32 a, __u32 b)
{
	return (__s32)(a - b) >= 0;
}

/* Once our FIN is queued no more data can follow it, so the first moment
 * snd_una reaches fin_seq is the ACK of the last data byte: delivered_mstamp
 * (tcp_clock_us of the latest delivery) is then its arrival time. */
static __always_inline void check_tx_done(struct flow_state *st, struct tcp_sock *tp)
{
	if ((st->flags & TCPSCOPE_F_TX_DONE) || !(st->flags & TCPSCOPE_F_FIN_SENT))
		return;
	if (seq_geq(tp->snd_una, st->fin_seq)) {
		st->flags |= TCPSCOPE_F_TX_DONE;
		st->tx_end_ns = tp->delivered_mstamp * NSEC_PER_USEC;
	}
}

static __always_inline void close_ca_interval(struct flow_state *st, __u64 now)
{
	__u8 s = st->ca_state;

	/* Open (0) has no counter: see flow_state.h. The mask repeats the
	 * bound for 6.1's verifier, which loses the checks on `s` across the
	 * zero-extension of `s - 1` and refuses the program (Debian 12's
	 * kernel, booted in tests/real_kernels). */
	_Static_assert(TCPSCOPE_CA_STATES - 1 == 4, "ca_ns's index is masked with 3");
	if (st->ca_since_ns && s >= 1 && s < TCPSCOPE_CA_STATES && now > st->ca_since_ns)
		st->ca_ns[(s - 1) & 3] += now - st->ca_since_ns;
	st->ca_since_ns = now;
}

static __always_inline void set_established(struct flow_state *st, __u64 now)
{
	__u64 us = now > st->start_ns ? (now - st->start_ns) / NSEC_PER_USEC : 0;

	st->established_us = us > 0xffffffffULL ? 0xffffffffU : (__u32)us;
	st->flags |= TCPSCOPE_F_ESTABLISHED;
}

static __always_inline __u64 established_ns_of(const struct flow_state *st)
{
	if (!(st->flags & TCPSCOPE_F_ESTABLISHED))
		return 0;
	return st->start_ns + (__u64)st->established_us * NSEC_PER_USEC;
}

/* Passive opens: the child socket appears when the handshake's last ACK
 * arrives (st->start_ns until ESTABLISHED); the SYN arrived one SYN-ACK
 * round trip earlier. What the kernel knows of that round trip depends on
 * how the handshake went:
 *  - one SYN-ACK, sent for a request the kernel kept: the child's first RTT
 *    sample was just taken from that SYN-ACK's send time (snt_synack, µs),
 *    so SYN received ~= now - srtt;
 *  - a SYN-ACK that timed out and was sent again (total_rto, 6.7): the
 *    child was made total_rto_time ms after the first one (the kernel
 *    clears retrans_stamp, which held it, before ESTABLISHED);
 *  - a SYN cookie (the listener's SYN queue was full, or
 *    tcp_syncookies=2): the kernel kept nothing of the SYN, so its sample,
 *    if any, comes from the cookie's TCP timestamp, whose low 6 bits carry
 *    options instead of time (up to 63 ms long). A SYN-ACK sent again for a
 *    repeated SYN also leaves only the timestamp's sample.
 * A timestamp's sample is whole milliseconds (unless the connection uses
 * µs timestamps), a send-time sample almost never is; with only the former,
 * or none, the start is taken at close as the ACK's arrival less the flow's
 * min_rtt (TCPSCOPE_F_START_FROM_MIN_RTT). A send-time sample that happens
 * to be whole milliseconds (1 in 1,000) takes that path too, which costs
 * only the difference between the handshake's round trip and min_rtt. */
static __always_inline void settle_passive_start(struct flow_state *st, struct tcp_sock *tp,
						 __u64 now)
{
	__u32 srtt_us = tp->srtt_us >> 3;
	__u64 rtt_ns;
	bool usec_ts = false;

	if (bpf_core_field_exists(tp->total_rto_time) && bpf_core_field_exists(tp->total_rto) && tp->total_rto) {
		rtt_ns = (__u64)tp->total_rto_time * NSEC_PER_MSEC;
		if (rtt_ns < st->start_ns)
			st->start_ns -= rtt_ns;
		return;
	}
	if (bpf_core_field_exists(tp->tcp_usec_ts))
		usec_ts = BPF_CORE_READ_BITFIELD(tp, tcp_usec_ts);
	if (!srtt_us || (!usec_ts && srtt_us % USEC_PER_MSEC == 0)) {
		st->flags |= TCPSCOPE_F_START_FROM_MIN_RTT;
		return;
	}
	rtt_ns = (__u64)srtt_us * NSEC_PER_USEC;
	if (rtt_ns < now && now - rtt_ns < st->start_ns)
		st->start_ns = now - rtt_ns;
}

/* The record's start: see settle_passive_start(). */
static __always_inline __u64 start_of(const struct flow_state *st, __u32 min_rtt_us)
{
	__u64 back = (__u64)min_rtt_us * NSEC_PER_USEC;

	if ((st->flags & (TCPSCOPE_F_START_FROM_MIN_RTT | TCPSCOPE_ST_START_SET)) ==
		    TCPSCOPE_F_START_FROM_MIN_RTT &&
	    back < st->start_ns)
		return st->start_ns - back;
	return st->start_ns;
}

static __always_inline __u8 outcome_of(struct flow_state *st, int sk_err)
{
	if (!(st->flags & TCPSCOPE_F_ESTABLISHED)) {
		if (sk_err == ECONNREFUSED || (st->flags & TCPSCOPE_F_RST_RECEIVED))
			return TCPSCOPE_OUTCOME_REFUSED;
		if (sk_err == ETIMEDOUT)
			return TCPSCOPE_OUTCOME_TIMEOUT;
		return TCPSCOPE_OUTCOME_ERROR;
	}
	if (sk_err == ECONNRESET || sk_err == EPIPE ||
	    (st->flags & (TCPSCOPE_F_RST_SENT | TCPSCOPE_F_RST_RECEIVED)))
		return TCPSCOPE_OUTCOME_RESET;
	if (sk_err == ETIMEDOUT)
		return TCPSCOPE_OUTCOME_TIMEOUT;
	if (sk_err)
		return TCPSCOPE_OUTCOME_ERROR;
	return TCPSCOPE_OUTCOME_OK;
}

/* tcp_info counts the active side's SYN and each side's FIN in
 * bytes_acked/bytes_received; records carry payload only. */
static __always_inline __u64 payload_acked(struct tcp_sock *tp, const struct flow_state *st)
{
	__u64 acked = tp->bytes_acked;

	if (st->dir == TCPSCOPE_DIR_ACTIVE && acked)
		acked -= 1;
	if ((st->flags & TCPSCOPE_F_FIN_SENT) && acked && seq_geq(tp->snd_una, st->fin_seq + 1))
		acked -= 1;
	return acked;
}

static __always_inline __u64 payload_received(const struct sock *sk, struct tcp_sock *tp)
{
	__u64 received = tp->bytes_received;

	if (received && (sk->__sk_common.skc_flags & (1UL << SOCK_DONE)))
		received -= 1;
	return received;
}

static __always_inline __u32 min_rtt_of(struct tcp_sock *tp)
{
	__u32 min_rtt = tp->rtt_min.s[0].v;

	return min_rtt == ~0U ? 0 : min_rtt;
}

/* The header every ring record starts with: what kind of record it is. */
static __always_inline void set_kind(struct tcpscope_record_header *h, __u8 kind)
{
	*h = (struct tcpscope_record_header){ .kind = kind };
}

/* The addresses of a flow's identity; returns the family, 4 or 6. */
static __always_inline __u8 copy_addresses(const struct sock *sk, __u8 saddr[16], __u8 daddr[16])
{
	if (sk->__sk_common.skc_family != AF_INET6) {
		__builtin_memset(saddr, 0, 16);
		__builtin_memset(daddr, 0, 16);
		__builtin_memcpy(saddr, &sk->__sk_common.skc_rcv_saddr, 4);
		__builtin_memcpy(daddr, &sk->__sk_common.skc_daddr, 4);
		return 4;
	}
	/* Sized reads: through a pointer parameter BPF_CORE_READ_INTO would
	 * copy sizeof(*saddr), one byte. */
	bpf_core_read(saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
	bpf_core_read(daddr, 16, &sk->__sk_common.skc_v6_daddr.in6_u.u6_addr8);
	return 6;
}

/* Which flow a record is of, the same in its flow's record and its
 * transfers': the start is the one the flow record shows (start_of()). */
static __always_inline void fill_identity(struct tcpscope_flow_identity *id, const struct sock *sk,
					  struct tcp_sock *tp, const struct flow_state *st, __u32 min_rtt)
{
	id->start_ns = start_of(st, min_rtt);
	id->family = copy_addresses(sk, id->saddr, id->daddr);
	/* skc_num is already zeroed at close (the port was released just
	 * before the state store); inet_sport survives. */
	id->sport = bpf_ntohs(tp->inet_conn.icsk_inet.inet_sport);
	id->dport = bpf_ntohs(sk->__sk_common.skc_dport);
	id->netns = sk->__sk_common.skc_net.net->ns.inum;
	id->dir = st->dir;
	__builtin_memset(id->pad, 0, sizeof(id->pad));
}

/* Fills a record from the socket as it is now. `final` is the close: the
 * per-state time is settled in `st`; a snapshot leaves `st` untouched. */
static __always_inline void fill_event(struct tcpscope_flow_event *e, const struct sock *sk,
				       struct tcp_sock *tp, struct flow_state *st, __u64 now, bool final)
{
	__u64 acked, received, since;
	int sk_err = sk->sk_err;
	__u32 min_rtt;
	__u8 cs;

	acked = payload_acked(tp, st);
	received = payload_received(sk, tp);
	min_rtt = min_rtt_of(tp);
	set_kind(&e->common, TCPSCOPE_RECORD_FLOW);
	fill_identity(&e->id, sk, tp, st, min_rtt);
	e->established_ns = established_ns_of(st);
	e->end_ns = now;
	e->data_end_ns = 0;
	if (acked)
		e->data_end_ns = (st->flags & TCPSCOPE_F_TX_DONE) ? st->tx_end_ns
								  : tp->delivered_mstamp * NSEC_PER_USEC;
	if (received && st->last_rx_ns > e->data_end_ns)
		e->data_end_ns = st->last_rx_ns;

	e->bytes_acked = acked;
	e->bytes_received = received;
	e->bytes_retrans = tp->bytes_retrans;
	e->pacing_rate = sk->sk_pacing_rate;
	e->cgroup_id = st->cgroup_id;
	if (final)
		close_ca_interval(st, now);
	e->ca_state_ns[0] = 0;
	__builtin_memcpy(&e->ca_state_ns[1], st->ca_ns, sizeof(st->ca_ns));
	cs = st->ca_state;
	since = st->ca_since_ns;
	if (!final && since && since < now && cs >= 1 && cs < TCPSCOPE_CA_STATES)
		e->ca_state_ns[cs] += now - since;
	/* Open: what the other states leave of the time since the handshake
	 * (ca_since_ns starts there; established_ns is that instant cut to the
	 * µs, so the sum of the five is end_ns - established_ns exactly). */
	if (since && e->established_ns && now > e->established_ns) {
		__u64 rest = now - e->established_ns;
		__u64 other = e->ca_state_ns[1] + e->ca_state_ns[2] + e->ca_state_ns[3] +
			      e->ca_state_ns[4];

		e->ca_state_ns[0] = rest > other ? rest - other : 0;
	}

	e->pid = st->pid;
	__builtin_memcpy(e->comm, st->comm, sizeof(e->comm));

	e->srtt_us = tp->srtt_us >> 3;
	e->min_rtt_us = min_rtt;
	e->rttvar_us = tp->mdev_us >> 2;
	e->snd_cwnd = tp->snd_cwnd;
	e->max_cwnd = st->max_cwnd > tp->snd_cwnd ? st->max_cwnd : tp->snd_cwnd;
	e->snd_ssthresh = tp->snd_ssthresh;
	e->mss = tp->mss_cache;
	e->segs_out = tp->segs_out;
	e->segs_in = tp->segs_in;
	e->total_retrans = tp->total_retrans;
	e->lost = tp->lost;
	e->rate_delivered = tp->rate_delivered;
	e->rate_interval_us = tp->rate_interval_us;
	e->flags = st->flags & ~TCPSCOPE_ST_MASK;
	e->sk_err = sk_err;
	e->cc_rule = st->policy.rule;
	e->arm = st->policy.arm;
	if (st->policy.app_set_cc)
		e->flags |= TCPSCOPE_F_APP_SET_CC;
	e->outcome = outcome_of(st, sk_err);
	__builtin_memset(e->pad, 0, sizeof(e->pad));
	bpf_probe_read_kernel_str(e->cc, sizeof(e->cc), tp->inet_conn.icsk_ca_ops->name);
}

/* Batch wake-ups: the reader drains on its own timer, so only a filling ring
 * needs to interrupt it. */
static __always_inline void submit(void *record)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);

	bpf_ringbuf_submit(record, avail >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

/* A segment as tcp_probe shows it, before TCP has checked it. */
struct segment {
	__u32 seq;
	__u32 end_seq; /* as the kernel's tcp_skb_cb: the payload, SYN and FIN count */
	__u32 ack;
	__u32 len;     /* payload bytes */
	__u32 tsval;   /* with has_ts */
	__u8 flags;
	bool has_ts;
};

/* NOP, NOP, timestamp (kind 8, length 10): the first option word of RFC
 * 7323's suggested layout, which Linux and the other common stacks send. */
#define TCP_OPTS_NOP_NOP_TS 0x0101080aU

/* The segment's TCP header, in one read: tcp_rcv_established(), where
 * tcp_probe runs, has skb->data at it. A timestamp option elsewhere than
 * first is not looked for (the kernel's fast path does not either). */
static __always_inline bool read_segment(struct sk_buff *skb, struct segment *s)
{
	struct {
		__be32 ports, seq, ack;
		__u8 doff, flags;
		__be16 window, check, urg;
		__be32 opts[3];
	} h;
	__u32 hlen;

	if (bpf_probe_read_kernel(&h, sizeof(h), skb->data))
		return false;
	hlen = (h.doff >> 4) * 4;
	s->seq = bpf_ntohl(h.seq);
	s->ack = bpf_ntohl(h.ack);
	s->flags = h.flags;
	s->len = skb->len - hlen;
	s->end_seq = s->seq + s->len + !!(h.flags & TCPHDR_SYN) + !!(h.flags & TCPHDR_FIN);
	s->has_ts = hlen >= sizeof(h) && h.opts[0] == bpf_htonl(TCP_OPTS_NOP_NOP_TS);
	s->tsval = bpf_ntohl(h.opts[1]);
	return true;
}

/* tcp_receive_window(): what is left of the window we advertised. */
static __always_inline __u32 receive_window(struct tcp_sock *tp)
{
	__s32 left = tp->rcv_wup + tp->rcv_wnd - tp->rcv_nxt;

	return left > 0 ? left : 0;
}

#define TCP_PAWS_WINDOW 1
/* INT_MAX / USEC_PER_SEC, since TCP's µs timestamps; 6.1 trusts ts_recent
 * for 24 days, so there an old TSval after more idle than this is taken
 * for accepted, as before this check. */
#define TCP_PAWS_WRAP_S 2147

/* RFC 7323's PAWS, as tcp_paws_check(): a TSval older than the last one
 * taken (ts_recent, 0 on a connection without timestamps) by more than a
 * tick, while that one is recent enough to trust. Its exception for a pure
 * duplicate ACK is left out: such an ACK acknowledges nothing new and
 * carries no payload. */
static __always_inline bool paws_rejects(struct tcp_sock *tp, __u32 tsval)
{
	__u32 ts_recent = tp->rx_opt.ts_recent, now_s;

	if (!ts_recent || (__s32)(ts_recent - tsval) <= TCP_PAWS_WINDOW)
		return false;
	now_s = bpf_ktime_get_ns() / NSEC_PER_SEC;
	return (__s32)(now_s - ((__u32)tp->rx_opt.ts_recent_stamp + TCP_PAWS_WRAP_S)) < 0;
}

/* Whether TCP will take the segment's ACK and payload: tcp_probe runs
 * before tcp_validate_incoming(), which drops a segment without ACK or
 * with SYN or RST, one that fails PAWS, and one outside the receive window
 * (as 6.1 and 6.12 check it: its end before the last window update, or its
 * start beyond the window). The ACK itself is not checked: the only one
 * that ends a send transfer acknowledges everything sent, which TCP takes,
 * and TCP's fast path queues in-order payload before it looks at the ACK. */
static __always_inline bool segment_accepted(struct tcp_sock *tp, const struct segment *s)
{
	if ((s->flags & (TCPHDR_ACK | TCPHDR_SYN | TCPHDR_RST)) != TCPHDR_ACK)
		return false;
	if (s->has_ts && paws_rejects(tp, s->tsval))
		return false;
	return seq_geq(s->end_seq, tp->rcv_wup) && seq_geq(tp->rcv_nxt + receive_window(tp), s->seq);
}

#include "transfer.h"

/* At CLOSE: the flow's record, with the transfers still open in the same
 * reservation. A send transfer whose data was not all acknowledged ends at
 * the latest delivery: its bytes say how far it got. */
static __always_inline void emit(const struct sock *sk, struct tcp_sock *tp,
				 struct flow_state *st, __u64 now)
{
	struct tcpscope_close_event *c;
	struct tcpscope_flow_event *e;
	bool tx = st->flags & TCPSCOPE_ST_TX_OPEN, rx = st->flags & TCPSCOPE_ST_RX_OPEN;
	__u64 tx_end = (st->flags & TCPSCOPE_F_TX_DONE) ? st->tx_end_ns : tp->delivered_mstamp * NSEC_PER_USEC;

	st->flags &= ~(TCPSCOPE_ST_TX_OPEN | TCPSCOPE_ST_RX_OPEN);
	if (!tx && !rx) {
		e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
		if (!e) {
			count(TCPSCOPE_CNT_RECORDS_LOST);
			return;
		}
		fill_event(e, sk, tp, st, now, true);
		submit(e);
		return;
	}
	c = bpf_ringbuf_reserve(&events, sizeof(*c), 0);
	if (!c) {
		count(TCPSCOPE_CNT_RECORDS_LOST);
		count(TCPSCOPE_CNT_TRANSFERS_LOST);
		if (tx && rx)
			count(TCPSCOPE_CNT_TRANSFERS_LOST);
		return;
	}
	/* The flow first: its transfers share its identity and start. Constant
	 * offsets only: the verifier checks each against the record. */
	set_kind(&c->common, TCPSCOPE_RECORD_CLOSE);
	fill_event(&c->flow, sk, tp, st, now, true);
	if (tx) {
		copy_transfer_common(&c->transfers[0], &c->flow);
		fill_send_transfer(&c->transfers[0], tp, st, tx_end);
	}
	if (rx) {
		struct tcpscope_transfer_event *t = tx ? &c->transfers[1] : &c->transfers[0];

		copy_transfer_common(t, &c->flow);
		fill_recv_transfer(t, st, payload_received(sk, tp));
	}
	c->n_transfers = tx && rx ? 2 : 1;
	c->reserved = 0;
	submit(c);
}

static __always_inline struct flow_state *start_tracking(const struct sock *sk, __u8 dir)
{
	struct flow_state *st;
	__u8 app_set_cc, app_cc;

	st = bpf_sk_storage_get(&flows, (struct sock *)sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		count(TCPSCOPE_CNT_STORAGE_FAILED);
		return 0;
	}
	/* A socket can connect() again after failing: start from scratch. What
	 * the application chose for its CC stays (on an accepted socket: what it
	 * chose for the listener, cloned); a rule is chosen again for the new
	 * connection (sockops runs after this). */
	app_set_cc = st->policy.app_set_cc;
	app_cc = st->policy.app_cc;
	__builtin_memset(st, 0, sizeof(*st));
	st->policy.app_set_cc = app_set_cc;
	st->policy.app_cc = app_cc;
	st->dir = dir;
	return st;
}

static __always_inline void handle_state_change(const struct sock *sk, int oldstate, int newstate)
{
	struct flow_state *st;
	struct tcp_sock *tp;
	__u64 now;

	if (!is_tcp(sk))
		return;
	if (newstate == TCP_LISTEN || (oldstate == TCP_LISTEN && newstate == TCP_CLOSE))
		return;
	tp = bpf_skc_to_tcp_sock((void *)sk);
	if (!tp)
		return;

	/* The clock is read only where the time is kept: half the transitions
	 * (FIN_WAIT1/2, CLOSE_WAIT, LAST_ACK) do not need it. */
	if (newstate == TCP_SYN_SENT) {
		/* connect(): process context, before the SYN leaves. */
		st = start_tracking(sk, TCPSCOPE_DIR_ACTIVE);
		if (!st)
			return;
		st->start_ns = bpf_ktime_get_ns();
		take_owner(st);
		return;
	}
	if (newstate == TCP_SYN_RECV && oldstate == TCP_LISTEN) {
		/* The accepted child is cloned from the listener in softirq:
		 * the current task is not its owner, which is taken later. */
		st = start_tracking(sk, TCPSCOPE_DIR_PASSIVE);
		if (st)
			st->start_ns = bpf_ktime_get_ns();
		return;
	}

	st = state_of(sk);
	if (st && st->emitted)
		return; /* closed and reported; only a new connect() starts over */
	/* No storage, or only the policy's (a socket connected before we
	 * attached, on which sockops or setsockopt ran since). */
	if (!tracked(st)) {
		if (oldstate == TCP_CLOSE || oldstate == TCP_SYN_SENT || oldstate == TCP_SYN_RECV)
			return;
		/* Opened before we attached: report it, flagged partial. Its
		 * direction is a guess: an ephemeral local port means we connected. */
		st = start_tracking(sk, sk->__sk_common.skc_num >= 32768 ? TCPSCOPE_DIR_ACTIVE
									  : TCPSCOPE_DIR_PASSIVE);
		if (!st)
			return;
		now = bpf_ktime_get_ns();
		st->flags = TCPSCOPE_F_PARTIAL | TCPSCOPE_F_ESTABLISHED;
		st->start_ns = now;
		set_established(st, now);
	}
	sample_cwnd(st, tp->snd_cwnd);

	switch (newstate) {
	case TCP_ESTABLISHED:
		now = bpf_ktime_get_ns();
		st->ca_since_ns = now;
		if (st->dir == TCPSCOPE_DIR_PASSIVE)
			settle_passive_start(st, tp, now);
		set_established(st, now);
		break;
	case TCP_FIN_WAIT1:
	case TCP_LAST_ACK:
		/* close() or shutdown(): process context, the owner's own call.
		 * An accepted socket that never wrote gets its owner here, once,
		 * instead of from a hook on every read. */
		if (!st->pid)
			take_owner(st);
		if (sends_from_acks && !(st->flags & TCPSCOPE_F_FIN_SENT))
			note_flight(sk, tp, st);
		/* The FIN is queued right after this transition. */
		if (!(st->flags & TCPSCOPE_F_FIN_SENT)) {
			st->flags |= TCPSCOPE_F_FIN_SENT;
			st->fin_seq = tp->write_seq;
		}
		check_tx_done(st, tp);
		break;
	case TCP_CLOSE:
		/* Straight from ESTABLISHED or CLOSE_WAIT with no error is an
		 * abort (SO_LINGER 0, unread data at close, tcp_disconnect): the
		 * kernel sends its RST only after this transition. */
		if ((oldstate == TCP_ESTABLISHED || oldstate == TCP_CLOSE_WAIT) && !sk->sk_err) {
			st->flags |= TCPSCOPE_F_RST_SENT;
			if (!st->pid)
				take_owner(st); /* the aborting close(): process context */
		}
		check_tx_done(st, tp);
		emit(sk, tp, st, bpf_ktime_get_ns());
		/* No bpf_sk_storage_delete(): the kernel frees the storage with
		 * the socket anyway, and deleting it here as well cost a second
		 * unlink and RCU free per flow (measured: bench/README.md). */
		st->emitted = 1;
		break;
	default:
		check_tx_done(st, tp);
		break;
	}
}

/*
 * The kernel never runs a tracing program on a CPU where that same program is
 * already running: it only bumps the program's recursion_misses. connect()
 * and close() run on_state_change in process context, so a softirq that
 * changes another socket's state on that CPU meanwhile (a SYN arriving, a
 * FIN acknowledged) would lose that transition, and with it possibly a
 * record. A second copy on the same tracepoint covers those: the first marks
 * its CPU busy while it runs; the second returns at once unless the mark is
 * set, i.e. unless the kernel has just skipped the first for this event.
 * Tracepoint programs run with preemption disabled, so the per-CPU mark
 * belongs to one invocation. The second copy is skipped only while it runs
 * its check for an event the first has handled, which costs nothing; what
 * it cannot catch is a skip in the kernel's bookkeeping just before the mark
 * is set or after it is cleared (the daemon counts those from the two
 * copies' misses and TCPSCOPE_CNT_NESTED_TRANSITIONS).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} state_change_busy SEC(".maps");

static __always_inline __u32 *state_change_busy_mark(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&state_change_busy, &zero);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_state_change, const struct sock *sk, int oldstate, int newstate)
{
	if (!running())
		return 0;
	__u32 *busy = state_change_busy_mark();

	if (busy)
		*busy = 1;
	handle_state_change(sk, oldstate, newstate);
	if (busy)
		*busy = 0;
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_state_change_nested, const struct sock *sk, int oldstate, int newstate)
{
	if (!running())
		return 0;
	__u32 *busy = state_change_busy_mark();

	if (!busy || !*busy)
		return 0;
	count(TCPSCOPE_CNT_NESTED_TRANSITIONS);
	handle_state_change(sk, oldstate, newstate);
	return 0;
}

/* When payload this program first sees with the FIN arrived: with the FIN
 * (in the same tick of the kernel's own time of the latest data segment,
 * icsk_ack.lrcvtime, in jiffies), or that many ticks before it, if the
 * wake-up it came with was missed. A bare FIN does not move lrcvtime. Not
 * before `seen`, the last arrival recorded (a tick's rounding). */
static __always_inline __u64 payload_arrival_before_fin(struct tcp_sock *tp, __u64 now, __u64 seen)
{
	__u32 ticks = (__u32)bpf_jiffies64() - tp->inet_conn.icsk_ack.lrcvtime;
	__u64 back, at;

	if (ticks <= 1)
		return now;
	back = (__u64)jiffies_to_us(ticks) * NSEC_PER_USEC;
	at = back < now ? now - back : now;
	return at > seen ? at : seen;
}

/* The receive side's FCT ends at the last payload byte's arrival. The kernel
 * also signals data-ready for a bare FIN (which counts one in
 * bytes_received and sets SOCK_DONE first), and for wake-ups that bring
 * nothing new: neither may move the end, or a peer that idles before
 * closing would stretch the flow by its idle time. */
static __always_inline void note_rx_payload(const struct sock *sk, struct flow_state *st)
{
	struct tcp_sock *tp;
	__u32 rcvd, grew;
	__u64 now, at;
	bool fin;

	tp = bpf_skc_to_tcp_sock((void *)sk);
	if (!tp)
		return;
	rcvd = (__u32)tp->bytes_received;
	grew = rcvd - st->rx_mark;
	if (!grew)
		return;
	st->rx_mark = rcvd;
	/* With SOCK_DONE the FIN is in `grew` (no data can follow it), and
	 * payload_received() leaves it out: so must the arrival. Payload in
	 * `grew` with it came in the FIN's segment, or earlier with a wake-up
	 * both programs missed: payload_arrival_before_fin() tells which. */
	fin = sk->__sk_common.skc_flags & (1UL << SOCK_DONE);
	if (fin) {
		if (grew == 1)
			return;
		grew -= 1;
	}
	now = bpf_ktime_get_ns();
	at = fin ? payload_arrival_before_fin(tp, now, st->last_rx_ns) : now;
	note_arrival(sk, tp, st, at, grew);
	st->last_rx_ns = at;
}

/* A payload arrival seen by tcp_probe, on kernels without sk_data_ready:
 * tcp_probe runs as an ESTABLISHED socket receives a segment, before TCP
 * queues it, so this is the arrival sk_data_ready would report a few
 * hundred instructions later. A segment delivers payload when it starts at
 * or before rcv_nxt and ends after it (an out-of-order one delivers nothing
 * until the segment filling the hole before it arrives: that one is the
 * arrival), and TCP takes it. rx_mark gets what bytes_received will be
 * with this segment in, so the twin program finds the arrival already
 * recorded. Data that arrives after this side sent its FIN (FIN_WAIT) is
 * processed outside tcp_rcv_established and is not seen. */
static __always_inline void note_rx_segment(const struct sock *sk, struct tcp_sock *tp,
					    struct flow_state *st, struct sk_buff *skb)
{
	__u32 rcv_nxt = tp->rcv_nxt, grew, mark;
	struct segment seg;
	__u64 now;

	if (!read_segment(skb, &seg))
		return;
	if (seq_geq(rcv_nxt, seg.end_seq) || !seq_geq(rcv_nxt, seg.seq))
		return; /* nothing new, or out of order */
	grew = seg.end_seq - rcv_nxt;
	if (grew == 1 && (seg.flags & TCPHDR_FIN))
		return; /* a bare FIN */
	/* Not one TCP drops, nor payload at a closed window, which
	 * tcp_data_queue() drops (TCPZeroWindowDrop): it comes again later. */
	if (!segment_accepted(tp, &seg) || !receive_window(tp))
		return;
	mark = (__u32)tp->bytes_received + grew;
	if (mark == st->rx_mark)
		return;
	st->rx_mark = mark;
	now = bpf_ktime_get_ns();
	note_arrival(sk, tp, st, now, 0);
	st->last_rx_ns = now;
}

static __always_inline void handle_data_ready(const struct sock *sk)
{
	struct flow_state *st;

	if (!is_tcp(sk))
		return;
	st = state_of(sk);
	if (tracked(st))
		note_rx_payload(sk, st);
}

/* Data arrives in softirq and, for a socket its owner held locked, from its
 * backlog in process context: the same nesting as state changes, and a
 * skipped run would end the receive side's FCT one arrival early. Measured
 * beside a bulk transfer: 1,252 skips in 25 s of churn, of which a busy mark
 * as for state changes caught only 376 (the kernel's window around a run is
 * wider than the few instructions a short program can mark). So both copies
 * always run: the second finds the arrival already recorded (bytes_received
 * has not grown since) and stops, and an event that interrupts one copy on
 * its CPU is taken by the other. */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(on_data_ready, const struct sock *sk)
{
	if (!running())
		return 0;
	handle_data_ready(sk);
	return 0;
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(on_data_ready_twin, const struct sock *sk)
{
	if (!running())
		return 0;
	handle_data_ready(sk);
	return 0;
}

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(on_sendmsg, const struct sock *sk)
{
	if (!running())
		return 0;
	struct flow_state *st = state_of(sk);
	struct tcp_sock *tp;

	if (!st)
		return 0;
	if (!st->pid)
		take_owner(st);
	tp = bpf_skc_to_tcp_sock((void *)sk);
	if (!tp)
		return 0;
	sample_cwnd(st, tp->snd_cwnd);
	if (tracked(st) && !st->emitted)
		note_send(sk, tp, st);
	return 0;
}

/* Loaded only on kernels without tcp_sendmsg_locked or sk_data_ready: send
 * transfers from the ACKs (note_segment()), payload arrivals from the
 * segments (note_rx_segment()). Two copies, as for sk_data_ready: segments
 * arrive in softirq and from a socket's backlog in process context, and a
 * skipped run could merge two transfers. The second finds the segment's work
 * done: its flight begun, its transfer ended, its arrival marked. */
static __always_inline void handle_segment(const struct sock *sk, struct sk_buff *skb)
{
	struct flow_state *st = state_of(sk);
	struct tcp_sock *tp;

	if (!tracked(st) || st->emitted)
		return;
	tp = bpf_skc_to_tcp_sock((void *)sk);
	if (!tp)
		return;
	if (sends_from_acks) {
		sample_cwnd(st, tp->snd_cwnd); /* in tcp_sendmsg_locked's stead */
		note_segment(sk, tp, st, skb);
	}
	if (arrivals_from_segments)
		note_rx_segment(sk, tp, st, skb);
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(on_segment, const struct sock *sk, struct sk_buff *skb)
{
	if (!running())
		return 0;
	handle_segment(sk, skb);
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(on_segment_twin, const struct sock *sk, struct sk_buff *skb)
{
	if (!running())
		return 0;
	handle_segment(sk, skb);
	return 0;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(on_cong_state, struct sock *sk, const __u8 ca_state)
{
	if (!running())
		return 0;
	struct flow_state *st = state_of(sk);
	struct tcp_sock *tp;

	if (!st)
		return 0;
	if (st->ca_since_ns)
		close_ca_interval(st, bpf_ktime_get_ns());
	st->ca_state = ca_state;
	tp = bpf_skc_to_tcp_sock(sk);
	if (tp) {
		/* Entering CWR/Recovery/Loss saves the cwnd it is about to cut. */
		sample_cwnd(st, tp->snd_cwnd);
		sample_cwnd(st, tp->prior_cwnd);
	}
	return 0;
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(on_send_reset, const struct sock *sk)
{
	if (!running())
		return 0;
	struct flow_state *st;

	if (!sk)
		return 0;
	st = state_of(sk);
	if (st)
		st->flags |= TCPSCOPE_F_RST_SENT;
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(on_receive_reset, struct sock *sk)
{
	if (!running())
		return 0;
	struct flow_state *st = state_of(sk);

	if (st)
		st->flags |= TCPSCOPE_F_RST_RECEIVED;
	return 0;
}

/* Snapshot of open flows for the active-flow gauges and `tcpscope flows`:
 * one record per established TCP socket of the reader's network namespace,
 * in the same layout as the close records. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tcpscope_flow_event);
} snapshot_scratch SEC(".maps");

SEC("iter/tcp")
int snapshot_open_flows(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcpscope_flow_event *e;
	struct flow_state *st, copy = {};
	struct tcp_sock *tp;
	__u32 zero = 0;
	__u8 state;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0; /* request and time-wait minisockets */
	state = tp->inet_conn.icsk_inet.sk.__sk_common.skc_state;
	if (state == TCP_LISTEN || state == TCP_CLOSE)
		return 0;
	e = bpf_map_lookup_elem(&snapshot_scratch, &zero);
	if (!e)
		return 0;
	st = bpf_sk_storage_get(&flows, (struct sock *)tp, 0, 0);
	if (tracked(st)) {
		sweep_transfers((struct sock *)tp, tp, st, bpf_ktime_get_ns());
		__builtin_memcpy(&copy, st, sizeof(copy));
	} else {
		/* Opened before we attached: no start, flagged partial. */
		if (st)
			copy.policy = st->policy;
		copy.flags = TCPSCOPE_F_PARTIAL | TCPSCOPE_F_ESTABLISHED;
		copy.dir = tp->inet_conn.icsk_inet.sk.__sk_common.skc_num >= 32768 ? TCPSCOPE_DIR_ACTIVE
										    : TCPSCOPE_DIR_PASSIVE;
	}
	fill_event(e, (struct sock *)tp, tp, &copy, bpf_ktime_get_ns(), false);
	bpf_seq_write(ctx->meta->seq, e, sizeof(*e));
	return 0;
}
