/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The transfers: when one begins and ends, and its record. The hooks call
 * note_send() and note_segment(), the arrivals note_arrival(), the open-flow
 * snapshot sweep_transfers(), and the close copies the open ones into its
 * record. BPF side only. */
#ifndef TCPSCOPE_BPF_TRANSFER_H
#define TCPSCOPE_BPF_TRANSFER_H

#include "common.h"
#include "record.h"
#include "segment.h"

/* A send transfer with nothing in flight this long is over even if no data
 * arrived: a writer that pauses a second is not writing one object. */
#define TRANSFER_IDLE_NS (1000ULL * NSEC_PER_MSEC)

/* The kernel's tick, for its jiffies-based time counters (tcp_info's
 * busy/rwnd/sndbuf time). The loader resolves it (src/kernel/kernel_tick.h:
 * the kernel's config, else measured); 0 where neither served, and those
 * counters then read 0. */
extern int CONFIG_HZ __kconfig __weak;

/*
 * Transfers: runs of data one way, each handed over as its own record.
 *
 * Send. A send transfer starts when the application hands TCP data while
 * everything it sent before is acknowledged (snd_una == write_seq when
 * tcp_sendmsg_locked begins, before this call's bytes are queued) and the
 * running transfer is over: data arrived since it began (this write can be
 * the reply to a new request), or nothing has been in flight for
 * TRANSFER_IDLE_NS. Data handed over while earlier data is in flight joins
 * the running transfer, so pipelined responses and overlapping HTTP/2
 * streams form one transfer, as the network carried them. So does a
 * response written in pieces that a short path drains between writes (a
 * 50 us veth did for nginx, 2-4 pieces per response): no request came
 * in between. It ends with the ACK of its last byte: the kernel's
 * delivered_mstamp (the latest ACK that delivered data), read once nothing
 * is outstanding: at the next start, at the open-flow sweep, as our FIN is
 * queued (so that the FIN's retransmissions do not count in it), or at
 * close if data was outstanding at the FIN (from tx_end_ns there, as the
 * FIN's own ACK also delivers). If that last
 * segment's ACK was delayed by the receiver, the end includes the delay: it
 * is when this host learnt the data had arrived.
 *
 * Receive. A receiver cannot see the sender's idle point, only its own data:
 * an arrival starts a new receive transfer if this host started a send
 * transfer after the previous arrival and at least min_rtt/2 before this one
 * (so none before the flow's first RTT sample), so that it can be the reply
 * to it; otherwise the arrival joins the running transfer (data that keeps
 * flowing around our window updates or pipelined requests). A transfer ends
 * with its last arrival; it is handed over when the next one starts, when the
 * sweep finds that any later arrival would start a new one, or at close.
 *
 * The first transfer cannot overlap the handshake: sendmsg waits for it,
 * and what arrives with the handshake's last ACK is counted from that
 * arrival. Data sent in a SYN (TCP Fast Open) is not a transfer of its own;
 * it is counted in the flow only.
 *
 * wait_us. Send: from the latest arrival to the start (the request's last
 * byte to the response's first byte handed to TCP: the application's think
 * time, not the network's). Receive: from the start of the send transfer
 * after the previous arrival (the request) to the first arrival.
 */

/*
 * Which flows. Timing every transfer costs about 0.5 µs of kernel time per
 * transfer record, far more than following the flow itself, so the
 * transfers of only some flows are followed: every flow a rule follows
 * (policy.bpf.c sets TCPSCOPE_ST_FOLLOWED with sampling_shift 0 as it
 * assigns an experiment's or a controller's arm), and one flow in
 * 2^transfer_sampling_shift of the rest, chosen once, when the handshake
 * completes (or when a flow opened before we attached is first seen), by
 * sampling_hash() of its two ports. Both ends of a connection on one host
 * agree, and the choices nest: a flow followed at rate 16 is followed at 8.
 * The daemon and ClickHouse compute the same hash from a record's ports
 * (src/record/transfer_sampling.h). A flow not followed keeps only what its
 * flow record needs: no transfer bounds, reads or records.
 */

/* log2 of transfer_sampling_rate, or TCPSCOPE_SAMPLING_OFF for rate 0:
 * set by the loader, and by a reload (the daemon writes it in place); read
 * once per flow. */
__u32 transfer_sampling_shift = 4;

/* ClickHouse's intHash64 (MurmurHash3's 64-bit finaliser with a fixed key)
 * of the two ports, smaller first. */
static __always_inline __u64 sampling_hash(__u16 a, __u16 b)
{
	__u64 x = a < b ? ((__u64)a << 16 | b) : ((__u64)b << 16 | a);

	x ^= 0x4CF2D2BAAE6DA887ULL;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static __always_inline bool followed(const struct flow_state *st)
{
	return st->flags & TCPSCOPE_ST_FOLLOWED;
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tcpscope_followed_since);
} followed_since SEC(".maps");

/* Whether the flow of `sk` cannot be one whose transfers are followed,
 * told from its ports alone, before its state is looked up: no rule has
 * followed a flow's transfers, and the hash did not choose it at the
 * smallest rate in force (followed_since: choose_followed() chose at a rate
 * at least that small, and the choices nest). Its local port as skc_num
 * (host order), as inet_sport is, once the socket is connected. */
static __always_inline bool surely_not_followed(const struct sock *sk)
{
	__u32 zero = 0;
	struct tcpscope_followed_since *since = bpf_map_lookup_elem(&followed_since, &zero);
	__u32 shift;

	if (!since || since->rule_followed || !since->floor_shift)
		return false;
	shift = since->floor_shift;
	if (shift > TCPSCOPE_MAX_SAMPLING_SHIFT)
		return true; /* the sampling follows none */
	return sampling_hash(sk->__sk_common.skc_num, bpf_ntohs(sk->__sk_common.skc_dport)) & ((1ULL << shift) - 1);
}

/* Once per flow, with its ports known: unless a rule follows it already. */
static __always_inline void choose_followed(const struct sock *sk, struct tcp_sock *tp, struct flow_state *st)
{
	__u32 shift = transfer_sampling_shift;
	__u16 sport = bpf_ntohs(tp->inet_conn.icsk_inet.inet_sport);
	__u16 dport = bpf_ntohs(sk->__sk_common.skc_dport);

	if (followed(st) || shift > TCPSCOPE_MAX_SAMPLING_SHIFT)
		return;
	if (shift && (sampling_hash(sport, dport) & ((1ULL << shift) - 1)))
		return;
	st->flags |= TCPSCOPE_ST_FOLLOWED;
	st->sampling_shift = shift;
}

static __always_inline void read_chrono(struct tcp_sock *tp, __u32 out[3])
{
	__u32 type = BPF_CORE_READ_BITFIELD(tp, chrono_type);
	__u32 running = (__u32)bpf_jiffies64() - tp->chrono_start;

	out[0] = tp->chrono_stat[0] + (type == 1 ? running : 0);
	out[1] = tp->chrono_stat[1] + (type == 2 ? running : 0);
	out[2] = tp->chrono_stat[2] + (type == 3 ? running : 0);
}

static __always_inline __u32 jiffies_to_us(__u32 jiffies)
{
	__u64 us;

	if (CONFIG_HZ <= 0)
		return 0;
	us = (__u64)jiffies * (USEC_PER_SEC / CONFIG_HZ);
	return us > 0xffffffffULL ? 0xffffffffU : (__u32)us;
}

/* A transfer's share of a time counter: the counters tick in jiffies (4 ms
 * at HZ=250) and the share is the difference of two readings, so a transfer
 * shorter than a tick can be charged a whole one; it is cut to the
 * transfer's own duration (`whole_us`, the record's xfer_us), so that no
 * part exceeds its whole. */
static __always_inline __u32 chrono_share_us(__u32 jiffies, __u64 whole_us)
{
	__u32 us = jiffies_to_us(jiffies);

	return us > whole_us ? (__u32)whole_us : us;
}

static __always_inline __u32 us_between(__u64 from_ns, __u64 to_ns)
{
	__u64 us;

	if (!from_ns || to_ns < from_ns)
		return TCPSCOPE_NO_WAIT;
	us = (to_ns - from_ns) / NSEC_PER_USEC;
	return us >= TCPSCOPE_NO_WAIT ? TCPSCOPE_NO_WAIT - 1 : (__u32)us;
}

static __always_inline __u32 next_transfer_seq(struct flow_state *st)
{
	__u32 last = st->tx_seq > st->rx_seq ? st->tx_seq : st->rx_seq;

	if (!(st->flags & TCPSCOPE_ST_XFER_SEEN)) {
		st->flags |= TCPSCOPE_ST_XFER_SEEN;
		return 0;
	}
	return last + 1;
}

/* A transfer record's flow identity and the socket's state at its end. */
static __always_inline void fill_transfer_common(struct tcpscope_transfer_event *e, const struct sock *sk,
						 struct tcp_sock *tp, struct flow_state *st)
{
	__u32 min_rtt = min_rtt_of(tp);

	/* The flow record must show the same start: fix the estimate now. */
	st->start_ns = start_of(st, min_rtt);
	st->flags |= TCPSCOPE_ST_START_SET;
	set_kind(&e->common, TCPSCOPE_RECORD_TRANSFER);
	fill_identity(&e->id, sk, tp, st, min_rtt);
	e->pad = 0;
	e->srtt_us = tp->srtt_us >> 3;
	e->min_rtt_us = min_rtt;
	e->cc_rule = st->policy.rule;
	e->arm = st->policy.arm;
	e->sampling_shift = st->sampling_shift;
	copy_cc_name(e->cc, tp);
}

/* The same, at close, from the flow's record just filled: nothing is read
 * from the socket twice. */
static __always_inline void copy_transfer_common(struct tcpscope_transfer_event *e,
						 const struct tcpscope_flow_event *f, const struct flow_state *st)
{
	set_kind(&e->common, TCPSCOPE_RECORD_TRANSFER);
	__builtin_memcpy(&e->id, &f->id, sizeof(e->id));
	e->pad = 0;
	e->srtt_us = f->srtt_us;
	e->min_rtt_us = f->min_rtt_us;
	e->cc_rule = f->cc_rule;
	e->arm = f->arm;
	e->sampling_shift = st->sampling_shift;
	__builtin_memcpy(e->cc, f->cc, sizeof(e->cc));
}

/* What a send transfer ending at end_ns adds to its common part in `e`. */
static __always_inline void fill_send_transfer(struct tcpscope_transfer_event *e, struct tcp_sock *tp,
					       const struct flow_state *st, __u64 end_ns)
{
	__u64 acked = payload_acked(tp, st);
	__u32 chrono[3];
	__u64 xfer_us;

	read_chrono(tp, chrono);
	e->direction = TCPSCOPE_XFER_SEND;
	e->seq = st->tx_seq;
	e->start_ns = st->tx_start_ns;
	e->end_ns = end_ns > st->tx_start_ns ? end_ns : st->tx_start_ns;
	/* Signed: an end at an ACK lowers the base below 0 for the bytes that
	 * ACK brings (note_segment()). */
	e->bytes = (__s64)(acked - st->tx_acked_base) > 0 ? acked - st->tx_acked_base : 0;
	e->wait_us = st->tx_wait_us;
	e->retrans_segs = tp->total_retrans - st->tx_retrans_base;
	xfer_us = (e->end_ns - e->start_ns) / NSEC_PER_USEC;
	e->kernel.busy_us = chrono_share_us(chrono[0] - st->tx_chrono_base[0], xfer_us);
	e->rwnd_limited_us = chrono_share_us(chrono[1] - st->tx_chrono_base[1], xfer_us);
	e->kernel.sndbuf_limited_us = chrono_share_us(chrono[2] - st->tx_chrono_base[2], xfer_us);
}

/* What a receive transfer adds to its common part in `e`; `received` is the
 * payload received before the arrival that ends it. */
static __always_inline void fill_recv_transfer(struct tcpscope_transfer_event *e,
					       const struct flow_state *st, __u64 received)
{
	e->direction = TCPSCOPE_XFER_RECV;
	e->seq = st->rx_seq;
	e->start_ns = st->rx_start_ns;
	e->end_ns = st->last_rx_ns > st->rx_start_ns ? st->last_rx_ns : st->rx_start_ns;
	e->bytes = received > st->rx_received_base ? received - st->rx_received_base : 0;
	e->wait_us = st->rx_wait_us;
	e->retrans_segs = 0; /* the sender's retransmissions are not counted here */
	e->rwnd_limited_us = 0;
	e->kernel = (struct tcpscope_transfer_kernel){};
}

/* A transfer that ends while the flow goes on gets a record of its own. `at`:
 * a send transfer's end, or the payload received before the arrival that
 * ends a receive transfer. */
static __always_inline void end_transfer(const struct sock *sk, struct tcp_sock *tp, struct flow_state *st,
					 __u8 direction, __u64 at)
{
	struct tcpscope_transfer_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	st->flags &= direction == TCPSCOPE_XFER_SEND ? ~TCPSCOPE_ST_TX_OPEN : ~TCPSCOPE_ST_RX_OPEN;
	if (!e) {
		count(TCPSCOPE_CNT_TRANSFERS_LOST);
		return;
	}
	fill_transfer_common(e, sk, tp, st);
	if (direction == TCPSCOPE_XFER_SEND)
		fill_send_transfer(e, tp, st, at);
	else
		fill_recv_transfer(e, st, at);
	submit(e, sizeof(*e));
}

/* Everything sent is acknowledged and the running send transfer (if any)
 * cannot be extended by a write at `now`: see "Transfers". */
static __always_inline bool send_transfer_over(struct tcp_sock *tp, const struct flow_state *st, __u64 now)
{
	__u64 idle_since = last_delivery_ns(tp);

	if (tp->snd_una != tp->write_seq)
		return false;
	if (!(st->flags & TCPSCOPE_ST_TX_OPEN))
		return true;
	return st->last_rx_ns > st->tx_start_ns || now >= idle_since + TRANSFER_IDLE_NS;
}

/* A send transfer starting at start_ns, everything sent before it being
 * acknowledged: from tcp_sendmsg_locked or, before 6.16, from the ACKs. */
static __always_inline void begin_send_transfer(struct tcp_sock *tp, struct flow_state *st, __u64 start_ns)
{
	st->tx_seq = next_transfer_seq(st);
	st->tx_start_ns = start_ns;
	st->tx_acked_base = payload_acked(tp, st);
	st->tx_wait_us = us_between(st->last_rx_ns, start_ns);
	st->tx_retrans_base = tp->total_retrans;
	read_chrono(tp, st->tx_chrono_base);
	st->flags |= TCPSCOPE_ST_TX_OPEN;
}

/* tcp_sendmsg_locked, before this call's data is queued. */
static __always_inline void note_send(const struct sock *sk, struct tcp_sock *tp, struct flow_state *st)
{
	__u64 now;

	if (!(st->flags & TCPSCOPE_F_ESTABLISHED))
		return; /* a Fast Open SYN's data: the flow's only */
	now = bpf_ktime_get_ns();
	if (!send_transfer_over(tp, st, now))
		return; /* joins the running transfer */
	if (st->flags & TCPSCOPE_ST_TX_OPEN)
		end_transfer(sk, tp, st, TCPSCOPE_XFER_SEND, last_delivery_ns(tp));
	begin_send_transfer(tp, st, now);
}

/*
 * Send transfers from the ACKs, on kernels without tcp_sendmsg_locked (before
 * 6.16): tcp_probe runs for every segment an established socket receives,
 * before the segment's ACK is processed, and the kernel's delivery-rate
 * bookkeeping says when a flight began from nothing in flight: sending with
 * no packet out sets first_tx_mstamp and delivered_mstamp both to that
 * segment's departure (tcp_rate_skb_sent), and they stay equal until its
 * first delivery. Data handed over while everything is acknowledged leaves
 * as such a flight, so "the application wrote with nothing outstanding" is
 * "a flight from idle", and the rule of "Transfers" applies to it at the
 * first segment received after it left, with the flight's departure as the
 * start (the write's time on the 6.16 path: the same but for the time from
 * the write to the first segment's departure).
 *
 * delivered_mstamp, the 6.16 path's end, is gone by then (that flight's
 * send overwrote it), so the end is taken when it happens: the segment
 * whose ACK covers everything written is the last byte's ACK, and the
 * transfer is over there if data came in since it began (this segment's
 * or an earlier one's). Without such data it ends only when a flight from
 * idle leaves TRANSFER_IDLE_NS after that ACK, whose time tx_end_ns keeps
 * (it is free until our FIN: check_tx_done() owns it from then on).
 *
 * tcp_probe shows a segment before TCP checks it: one TCP drops (a SYN or
 * RST, an old TCP timestamp, outside the receive window:
 * segment_accepted()) ends nothing, as its ACK is not taken.
 *
 * A flight still undelivered when we close leaves ESTABLISHED, where
 * tcp_probe runs, before its first ACK: the state change looks for it.
 */
static __always_inline void note_flight(const struct sock *sk, struct tcp_sock *tp, struct flow_state *st)
{
	__u64 flight_ns = tp->first_tx_mstamp * NSEC_PER_USEC;

	if (tp->snd_una == tp->snd_nxt || tp->first_tx_mstamp != tp->delivered_mstamp ||
	    flight_ns <= st->tx_start_ns)
		return; /* no flight from idle, or one already seen */
	/* A flight that left before the last transfer ended is that
	 * transfer's: the first program ended it at this very segment, whose
	 * ACK is not processed yet when the second program looks again. (A
	 * new flight from idle leaves after the ACK that ended the transfer,
	 * or within the µs its departure stamp is rounded to.) */
	if (!(st->flags & TCPSCOPE_ST_TX_OPEN) && flight_ns + NSEC_PER_USEC <= st->tx_end_ns)
		return;
	if (st->flags & TCPSCOPE_ST_TX_OPEN) {
		/* Not all it was handed acknowledged since it began: this flight
		 * is data that waited in the queue (a stretched ACK emptied the
		 * network first), written while earlier data was outstanding. */
		if (st->tx_end_ns <= st->tx_start_ns)
			return;
		if (st->last_rx_ns <= st->tx_start_ns && flight_ns < st->tx_end_ns + TRANSFER_IDLE_NS) {
			/* Joins the running transfer, which cannot end before
			 * this flight left: should the ACK of its last byte go
			 * unseen, the end is its departure, not the ACK of the
			 * flight before it. */
			if (flight_ns > st->tx_end_ns)
				st->tx_end_ns = flight_ns;
			return;
		}
		end_transfer(sk, tp, st, TCPSCOPE_XFER_SEND, st->tx_end_ns);
	}
	begin_send_transfer(tp, st, flight_ns);
}

static __always_inline void note_segment(const struct sock *sk, struct tcp_sock *tp, struct flow_state *st,
					 struct sk_buff *skb)
{
	__u32 una = tp->snd_una;
	struct segment seg;
	bool acks_all = false;

	if (st->flags & TCPSCOPE_F_FIN_SENT)
		return; /* no data can follow: close and check_tx_done() end it */
	note_flight(sk, tp, st);
	/* The segment is read only when it can end something: not while data
	 * waits unsent (a bulk sender's ACKs), nor, with nothing outstanding,
	 * outside a transfer (a bulk receiver's data). */
	if (tp->snd_nxt != tp->write_seq || (una == tp->snd_nxt && !(st->flags & TCPSCOPE_ST_TX_OPEN)))
		return;
	if (!read_segment(skb, &seg))
		return;
	if (una != tp->snd_nxt) {
		/* Only the ACK of the last byte sent can end it: a peer that
		 * sends while it receives (HTTP/2's WINDOW_UPDATEs) acknowledges
		 * part of the data in segments that carry payload. */
		if (seg.ack != tp->snd_nxt)
			return; /* data still outstanding */
		acks_all = true;
	}
	/* Nor can a segment TCP is about to drop: its ACK is not taken, and
	 * its payload does not arrive. */
	if (!segment_accepted(tp, &seg))
		return;
	if (acks_all)
		st->tx_end_ns = bpf_ktime_get_ns();
	if (!(st->flags & TCPSCOPE_ST_TX_OPEN))
		return;
	/* Unless data came in since it began, this segment must bring payload
	 * beyond what we had (a bare FIN's sequence number is not). */
	if (st->last_rx_ns <= st->tx_start_ns && !(seg.len && !seq_geq(tp->rcv_nxt, seg.end_seq)))
		return;
	/* bytes_acked does not have this ACK's bytes yet: the base, not read
	 * again before the next start, makes up for them (below 0 if nothing
	 * was acknowledged before: fill_send_transfer() subtracts signed). */
	if (acks_all)
		st->tx_acked_base -= seg.ack - una;
	else if (st->tx_end_ns <= st->tx_start_ns)
		/* Everything was acknowledged by an ACK this program did not
		 * see (a run the kernel skipped: a miss). No flight left since,
		 * so the kernel's time of the last delivery is that ACK's. */
		st->tx_end_ns = last_delivery_ns(tp);
	end_transfer(sk, tp, st, TCPSCOPE_XFER_SEND, st->tx_end_ns);
}

/* A send transfer after the latest arrival, min_rtt/2 or longer before `at`:
 * an arrival at `at` may be its reply. Not before the flow's first RTT
 * sample: without one nothing can be judged a reply, and a receive transfer
 * handed over then would fix the flow's start before min_rtt can settle it
 * (a SYN cookie without timestamps leaves the child no sample until its
 * first data is acknowledged). */
static __always_inline bool reply_possible(struct tcp_sock *tp, const struct flow_state *st, __u64 at)
{
	__u32 min_rtt = min_rtt_of(tp);

	return min_rtt && st->tx_start_ns > st->last_rx_ns &&
	       at >= st->tx_start_ns + (__u64)min_rtt * NSEC_PER_USEC / 2;
}

/* A payload arrival at `now`, `grew` bytes, before last_rx_ns moves to it. */
static __always_inline void note_arrival(const struct sock *sk, struct tcp_sock *tp,
					 struct flow_state *st, __u64 now, __u32 grew)
{
	__u64 before;

	/* Most arrivals join the running transfer: they need nothing more. */
	if ((st->flags & TCPSCOPE_ST_RX_OPEN) && !reply_possible(tp, st, now))
		return;
	before = payload_received(sk, tp) - grew;
	if (st->flags & TCPSCOPE_ST_RX_OPEN)
		end_transfer(sk, tp, st, TCPSCOPE_XFER_RECV, before);
	st->rx_seq = next_transfer_seq(st);
	st->rx_start_ns = now;
	st->rx_received_base = before;
	st->rx_wait_us = st->tx_start_ns > st->last_rx_ns ? us_between(st->tx_start_ns, now)
							  : TCPSCOPE_NO_WAIT;
	st->flags |= TCPSCOPE_ST_RX_OPEN;
}

/* The open-flow sweep (the socket iterator, under the socket's lock): hands
 * over the transfers that no later event can extend. */
static __always_inline void sweep_transfers(const struct sock *sk, struct tcp_sock *tp,
					    struct flow_state *st, __u64 now)
{
	if ((st->flags & TCPSCOPE_ST_TX_OPEN) && !(st->flags & TCPSCOPE_F_FIN_SENT) &&
	    send_transfer_over(tp, st, now))
		end_transfer(sk, tp, st, TCPSCOPE_XFER_SEND, last_delivery_ns(tp));
	if ((st->flags & TCPSCOPE_ST_RX_OPEN) && reply_possible(tp, st, now))
		end_transfer(sk, tp, st, TCPSCOPE_XFER_RECV, payload_received(sk, tp));
}

#endif /* TCPSCOPE_BPF_TRANSFER_H */
