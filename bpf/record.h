/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A flow's record, filled from its socket and its state: at close, and for
 * the open-flow snapshot; its identity and start are also every transfer
 * record's. BPF side only. */
#ifndef TCPSCOPE_BPF_RECORD_H
#define TCPSCOPE_BPF_RECORD_H

#include "common.h"

/* tp->ecn_flags: ECN was negotiated (include/net/tcp.h). */
#define TCP_ECN_OK 1

#define EPIPE 32
#define ECONNRESET 104
#define ETIMEDOUT 110
#define ECONNREFUSED 111

/* Once our FIN is queued no more data can follow it, so the first moment
 * snd_una reaches fin_seq is the ACK of the last data byte: delivered_mstamp
 * (tcp_clock_us of the latest delivery) is then its arrival time. */
static __always_inline void check_tx_done(struct flow_state *st, struct tcp_sock *tp)
{
	if ((st->flags & TCPSCOPE_F_TX_DONE) || !(st->flags & TCPSCOPE_F_FIN_SENT))
		return;
	if (seq_geq(tp->snd_una, st->fin_seq)) {
		st->flags |= TCPSCOPE_F_TX_DONE;
		st->tx_end_ns = last_delivery_ns(tp);
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

static __always_inline __u64 established_ns_of(const struct flow_state *st)
{
	if (!(st->flags & TCPSCOPE_F_ESTABLISHED))
		return 0;
	return st->start_ns + (__u64)st->established_us * NSEC_PER_USEC;
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

/* The name of the socket's congestion control, whole (the kernel's
 * TCP_CA_NAME_MAX bytes, NUL-padded), by direct loads rather than a string
 * helper's call. */
static __always_inline void copy_cc_name(char cc[TCPSCOPE_CC_NAME_LEN], struct tcp_sock *tp)
{
	_Static_assert(sizeof(tp->inet_conn.icsk_ca_ops->name) == TCPSCOPE_CC_NAME_LEN, "the kernel's CC name size");
	__builtin_memcpy(cc, tp->inet_conn.icsk_ca_ops->name, TCPSCOPE_CC_NAME_LEN);
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
	id->unprivileged_port_start = sk->__sk_common.skc_net.net->ipv4.sysctl_ip_prot_sock;
	id->uid = sk->sk_uid.val;
	/* Direct loads, as the lines above: three probe reads per record cost more. */
	id->sock_cgroup_id = sk->sk_cgrp_data.cgroup->kn->id;
	id->task_cgroup_id = st->cgroup_id;
}

/* The flow's largest cwnd so far (tcpscope_flow_kernel's max_cwnd), for
 * the moments the cwnd may be at a peak it is about to leave. */
static __always_inline void sample_cwnd(struct flow_state *st, __u32 cwnd)
{
	if (cwnd > st->max_cwnd)
		st->max_cwnd = cwnd;
}

/* The values a flow's record reports as the kernel has them
 * (tcpscope_flow_kernel), in the record's units. */
static __always_inline void fill_kernel_part(struct tcpscope_flow_kernel *k, const struct sock *sk,
					     struct tcp_sock *tp, const struct flow_state *st)
{
	__u64 pacing = sk->sk_pacing_rate;
	__u32 interval = tp->rate_interval_us;

	k->bytes_retrans = tp->bytes_retrans;
	/* As tcp_info's tcpi_delivery_rate: the last sample's delivered
	 * segments x mss over its interval. */
	k->delivery_rate_bps = interval ? (__u64)tp->rate_delivered * tp->mss_cache * 8 * USEC_PER_SEC / interval : 0;
	k->pacing_rate_bps = pacing == ~0UL ? 0 : pacing * 8;
	k->rttvar_us = tp->mdev_us >> 2;
	k->cwnd = tp->snd_cwnd;
	k->max_cwnd = st->max_cwnd > tp->snd_cwnd ? st->max_cwnd : tp->snd_cwnd;
	k->ssthresh = tp->snd_ssthresh;
	k->mss = tp->mss_cache;
	k->segs_in = tp->segs_in;
	k->lost_segs = tp->lost;
	k->delivered_ce = tp->delivered_ce;
	k->ecn = tp->ecn_flags & TCP_ECN_OK;
	__builtin_memset(k->pad, 0, sizeof(k->pad));
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
								  : last_delivery_ns(tp);
	if (received && st->last_rx_ns > e->data_end_ns)
		e->data_end_ns = st->last_rx_ns;

	e->bytes_acked = acked;
	e->bytes_received = received;
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
	e->segs_out = tp->segs_out;
	e->total_retrans = tp->total_retrans;
	e->flags = st->flags & ~TCPSCOPE_ST_MASK;
	e->sk_err = sk_err;
	e->cc_rule = st->policy.rule;
	e->arm = st->policy.arm;
	if (st->policy.app_set_cc)
		e->flags |= TCPSCOPE_F_APP_SET_CC;
	e->outcome = outcome_of(st, sk_err);
	__builtin_memset(e->pad, 0, sizeof(e->pad));
	copy_cc_name(e->cc, tp);
	fill_kernel_part(&e->kernel, sk, tp, st);
}

#endif /* TCPSCOPE_BPF_RECORD_H */
