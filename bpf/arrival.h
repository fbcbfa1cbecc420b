/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Payload arrivals: when data reached this side, from sk_data_ready or, on
 * kernels without it, from the segments tcp_probe shows. Each arrival moves
 * the receive side's end and goes to the transfers. BPF side only. */
#ifndef TCPSCOPE_BPF_ARRIVAL_H
#define TCPSCOPE_BPF_ARRIVAL_H

#include "common.h"
#include "segment.h"
#include "transfer.h"

/* When payload this program did not see as it came arrived, by the
 * kernel's own time of the latest data segment (icsk_ack.lrcvtime, in
 * jiffies): `now` if that is this tick or the last, else that many ticks
 * before now. A bare FIN does not move lrcvtime. Not before `seen`, the
 * last arrival recorded (a tick's rounding). */
static __always_inline __u64 latest_segment_arrival(struct tcp_sock *tp, __u64 now, __u64 seen)
{
	__u32 ticks = (__u32)bpf_jiffies64() - tp->inet_conn.icsk_ack.lrcvtime;
	__u64 back, at;

	if (ticks <= 1)
		return now;
	back = (__u64)jiffies_to_us(ticks) * NSEC_PER_USEC;
	at = back < now ? now - back : now;
	return at > seen ? at : seen;
}

/* Where receive_payload() is called from, which says when the payload it
 * finds arrived. */
enum rx_seen {
	RX_SEEN_ARRIVING,     /* sk_data_ready: now */
	RX_SEEN_BEFORE_WRITE, /* this side writes: just before now */
	RX_SEEN_AT_CLOSE,     /* the socket closes: with the latest data segment */
};

/* The receive side's FCT ends at the last payload byte's arrival. The kernel
 * also signals data-ready for a bare FIN (which counts one in
 * bytes_received and sets SOCK_DONE first), and for wake-ups that bring
 * nothing new: neither may move the end, or a peer that idles before
 * closing would stretch the flow by its idle time.
 *
 * Payload found later than sk_data_ready, before a write or at close, came
 * with a wake-up this program did not see: the kernel skips a tracing
 * program on a CPU where it is already running, so an arrival in softirq
 * that interrupts its run for another socket in process context is not
 * seen there. Before a write it is recorded as arriving just before the
 * write, the latest it can have (the transfer it belongs to ends there, and
 * the reply to this write starts a receive transfer of its own); at close,
 * with the kernel's own time of the latest data segment
 * (latest_segment_arrival()). */
static __always_inline void receive_payload(const struct sock *sk, struct tcp_sock *tp, struct flow_state *st,
					    enum rx_seen seen)
{
	__u32 rcvd, grew;
	__u64 now, at;
	bool fin;

	rcvd = (__u32)tp->bytes_received;
	grew = rcvd - st->rx_mark;
	if (!grew)
		return;
	st->rx_mark = rcvd;
	/* With SOCK_DONE the FIN is in `grew` (no data can follow it), and
	 * payload_received() leaves it out: so must the arrival. Payload in
	 * `grew` with it came in the FIN's segment, or earlier with a wake-up
	 * this program missed: latest_segment_arrival() tells which. */
	fin = sk->__sk_common.skc_flags & (1UL << SOCK_DONE);
	if (fin) {
		if (grew == 1)
			return;
		grew -= 1;
	}
	now = bpf_ktime_get_ns() - (seen == RX_SEEN_BEFORE_WRITE);
	at = fin || seen == RX_SEEN_AT_CLOSE ? latest_segment_arrival(tp, now, st->last_rx_ns) : now;
	if (followed(st))
		note_arrival(sk, tp, st, at, grew);
	st->last_rx_ns = at;
}

/* sk_data_ready. Each arrival also samples the cwnd (max_cwnd): a server's
 * next response, after an idle that restarts its cwnd, follows a request's
 * arrival, and most flows' send calls are not looked at (on_sendmsg). */
static __always_inline void note_rx_payload(const struct sock *sk, struct flow_state *st)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock((void *)sk);

	if (!tp)
		return;
	sample_cwnd(st, tp->snd_cwnd);
	receive_payload(sk, tp, st, RX_SEEN_ARRIVING);
}

static __always_inline void note_rx_before_write(const struct sock *sk, struct tcp_sock *tp, struct flow_state *st)
{
	receive_payload(sk, tp, st, RX_SEEN_BEFORE_WRITE);
}

static __always_inline void note_rx_at_close(const struct sock *sk, struct tcp_sock *tp, struct flow_state *st)
{
	receive_payload(sk, tp, st, RX_SEEN_AT_CLOSE);
}

/* A payload arrival seen by tcp_probe, on kernels without sk_data_ready:
 * tcp_probe runs as an ESTABLISHED socket receives a segment, before TCP
 * queues it, so this is the arrival sk_data_ready would report a few
 * hundred instructions later. A segment delivers payload when it starts at
 * or before rcv_nxt and ends after it (an out-of-order one delivers nothing
 * until the segment filling the hole before it arrives: that one is the
 * arrival), and TCP takes it. rx_mark gets what bytes_received will be
 * with this segment in, so the twin program finds the arrival already
 * recorded. Segments TCP processes outside tcp_rcv_established are not
 * seen: those that complete the handshake (the client's first data, where
 * the handshake's last ACK was lost or a TCP_DEFER_ACCEPT listener dropped
 * it) and those after this side sent its FIN (FIN_WAIT). What the first
 * delivered is in bytes_received at the flow's first arrival recorded, and
 * goes with it, as receive_payload() counts it. Later, bytes_received runs
 * past rx_mark when a segment that fills a hole releases the out-of-order
 * queue behind it: those bytes belong to the running transfer, and a
 * transfer that a later arrival starts begins after them. */
static __always_inline void note_rx_segment(const struct sock *sk, struct tcp_sock *tp,
					    struct flow_state *st, struct sk_buff *skb)
{
	__u32 rcv_nxt = tp->rcv_nxt, grew, mark, unseen;
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
	unseen = st->last_rx_ns ? 0 : (__u32)tp->bytes_received - st->rx_mark;
	st->rx_mark = mark;
	now = bpf_ktime_get_ns();
	if (followed(st))
		note_arrival(sk, tp, st, now, unseen);
	st->last_rx_ns = now;
}

#endif /* TCPSCOPE_BPF_ARRIVAL_H */
