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
 *   tcp_destroy_sock     the close of a socket whose CLOSE the kernel skipped
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
#include "common.h"
#include "record.h"
#include "transfer.h"
#include "arrival.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader on kernels without tcp_sendmsg_locked (before 6.16):
 * on_segment takes send transfers from the ACKs. */
const volatile bool sends_from_acks = false;
/* Set by the loader on kernels without sk_data_ready (before 6.3):
 * on_segment takes payload arrivals from the segments. */
const volatile bool arrivals_from_segments = false;
/* 0 while the per-call hooks (sk_data_ready, tcp_sendmsg_locked, tcp_probe)
 * are detached: no transfer is followed (transfer_sampling_rate 0 and no
 * rule that follows them), and arrivals are seen only at close. Set by the
 * daemon. */
__u32 per_call_hooks_attached = 1;

static __always_inline void set_established(struct flow_state *st, __u64 now)
{
	__u64 us = now > st->start_ns ? (now - st->start_ns) / NSEC_PER_USEC : 0;

	st->established_us = us > 0xffffffffULL ? 0xffffffffU : (__u32)us;
	st->flags |= TCPSCOPE_F_ESTABLISHED;
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

/* At CLOSE: the flow's record, with the transfers still open in the same
 * reservation. A send transfer whose data was not all acknowledged ends at
 * the latest delivery: its bytes say how far it got. */
static __always_inline void emit(const struct sock *sk, struct tcp_sock *tp,
				 struct flow_state *st, __u64 now)
{
	struct tcpscope_close_event *c;
	struct tcpscope_flow_event *e;
	bool tx = st->flags & TCPSCOPE_ST_TX_OPEN, rx = st->flags & TCPSCOPE_ST_RX_OPEN;
	__u64 tx_end = (st->flags & TCPSCOPE_F_TX_DONE) ? st->tx_end_ns : last_delivery_ns(tp);

	st->flags &= ~(TCPSCOPE_ST_TX_OPEN | TCPSCOPE_ST_RX_OPEN);
	if (!tx && !rx) {
		e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
		if (!e) {
			count(TCPSCOPE_CNT_RECORDS_LOST);
			return;
		}
		fill_event(e, sk, tp, st, now, true);
		submit(e, sizeof(*e));
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
		copy_transfer_common(&c->transfers[0], &c->flow, st);
		fill_send_transfer(&c->transfers[0], tp, st, tx_end);
	}
	if (rx) {
		struct tcpscope_transfer_event *t = tx ? &c->transfers[1] : &c->transfers[0];

		copy_transfer_common(t, &c->flow, st);
		fill_recv_transfer(t, st, payload_received(sk, tp));
	}
	c->n_transfers = tx && rx ? 2 : 1;
	c->reserved = 0;
	submit(c, sizeof(*c));
}

/* Network namespaces whose sockets are left alone (config ignore_netns:
 * a load generator's, a test's): no storage, so no hook does more than
 * look for it. Set by the daemon; ignored_netns_count keeps the lookup off
 * every other host. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TCPSCOPE_MAX_IGNORED_NETNS);
	__type(key, __u32);
	__type(value, __u8);
} ignored_netns SEC(".maps");

__u32 ignored_netns_count = 0;

static __always_inline bool ignored(const struct sock *sk)
{
	__u32 inum;

	if (!ignored_netns_count)
		return false;
	inum = sk->__sk_common.skc_net.net->ns.inum;
	return bpf_map_lookup_elem(&ignored_netns, &inum);
}

/* `rule_chosen`: sockops has already chosen this connection's CC, and
 * whether a rule follows its transfers (an accepted socket's handshake
 * completing, seen late: start_late()). */
static __always_inline struct flow_state *start_tracking(const struct sock *sk, __u8 dir, bool rule_chosen)
{
	struct tcpscope_sock_policy policy;
	struct flow_state *st;
	__u16 followed;
	__u8 shift;

	if (ignored(sk))
		return 0;
	st = bpf_sk_storage_get(&flows, (struct sock *)sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		count(TCPSCOPE_CNT_STORAGE_FAILED);
		return 0;
	}
	/* A socket can connect() again after failing: start from scratch. What
	 * the application chose for its CC stays (on an accepted socket: what it
	 * chose for the listener, cloned); a rule is chosen again for the new
	 * connection (sockops runs after this), unless it was already. */
	policy = st->policy;
	followed = st->flags & TCPSCOPE_ST_FOLLOWED;
	shift = st->sampling_shift;
	__builtin_memset(st, 0, sizeof(*st));
	st->policy.app_set_cc = policy.app_set_cc;
	st->policy.app_cc = policy.app_cc;
	if (rule_chosen) {
		st->policy = policy;
		st->flags = followed;
		st->sampling_shift = shift;
	}
	st->dir = dir;
	return st;
}

/* A socket with no state yet at a state change other than its start. Its
 * handshake completing: its start was not seen (the kernel skipped it, see
 * on_state_change, or it began before we attached); an accepted socket's
 * start is then settled from the handshake's round trip as any accepted
 * socket's is (settle_passive_start()), a connecting socket is partial. A
 * flow in any later state opened before we attached: partial, its
 * direction a guess (an ephemeral local port means we connected). */
static __always_inline struct flow_state *start_late(const struct sock *sk, struct tcp_sock *tp, int oldstate,
						     int newstate)
{
	bool handshake = newstate == TCP_ESTABLISHED && (oldstate == TCP_SYN_SENT || oldstate == TCP_SYN_RECV);
	struct flow_state *st;
	__u64 now;

	if (handshake) {
		st = start_tracking(sk, oldstate == TCP_SYN_RECV ? TCPSCOPE_DIR_PASSIVE : TCPSCOPE_DIR_ACTIVE,
				    oldstate == TCP_SYN_RECV);
		if (st) {
			st->start_ns = bpf_ktime_get_ns();
			if (oldstate == TCP_SYN_SENT)
				st->flags |= TCPSCOPE_F_PARTIAL;
		}
		return st;
	}
	if (oldstate == TCP_CLOSE || oldstate == TCP_SYN_SENT || oldstate == TCP_SYN_RECV)
		return 0;
	st = start_tracking(sk, sk->__sk_common.skc_num >= 32768 ? TCPSCOPE_DIR_ACTIVE : TCPSCOPE_DIR_PASSIVE, false);
	if (!st)
		return 0;
	now = bpf_ktime_get_ns();
	st->flags = TCPSCOPE_F_PARTIAL | TCPSCOPE_F_ESTABLISHED;
	st->start_ns = now;
	set_established(st, now);
	choose_followed(sk, tp, st);
	return st;
}

/* A tracked socket past its handshake whose ESTABLISHED was not seen (the
 * kernel skipped it): established at this, its next state change; an
 * accepted socket's start then comes from min_rtt at close. */
static __always_inline void establish_late(const struct sock *sk, struct tcp_sock *tp, struct flow_state *st)
{
	__u64 now = bpf_ktime_get_ns();

	st->ca_since_ns = now;
	if (st->dir == TCPSCOPE_DIR_PASSIVE)
		st->flags |= TCPSCOPE_F_START_FROM_MIN_RTT;
	set_established(st, now);
	choose_followed(sk, tp, st);
}

/* The flow ends: the payload it received last, its send side's end, and
 * its record. */
static __always_inline void close_flow(const struct sock *sk, struct tcp_sock *tp, struct flow_state *st, __u64 now)
{
	if (!arrivals_from_segments || !per_call_hooks_attached)
		note_rx_at_close(sk, tp, st);
	check_tx_done(st, tp);
	emit(sk, tp, st, now);
	/* No bpf_sk_storage_delete(): the kernel frees the storage with the
	 * socket anyway, and deleting it here as well cost a second unlink and
	 * RCU free per flow (measured: bench/README.md). */
	st->emitted = 1;
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
	/* Our FIN acknowledged, or the peer's received: nothing to keep that
	 * the close does not read as well (once our FIN is acknowledged no
	 * delivery moves delivered_mstamp, and before it is sent there is no
	 * send side's end to check). A flow first seen here (opened before we
	 * attached) is taken up at its next state change. */
	if (newstate == TCP_FIN_WAIT2 || newstate == TCP_CLOSE_WAIT)
		return;
	tp = bpf_skc_to_tcp_sock((void *)sk);
	if (!tp)
		return;

	/* The clock is read only where the time is kept: half the transitions
	 * (FIN_WAIT1/2, CLOSE_WAIT, LAST_ACK) do not need it. */
	if (newstate == TCP_SYN_SENT) {
		/* connect(): process context, before the SYN leaves. */
		st = start_tracking(sk, TCPSCOPE_DIR_ACTIVE, false);
		if (!st)
			return;
		st->start_ns = bpf_ktime_get_ns();
		take_owner(st);
		return;
	}
	if (newstate == TCP_SYN_RECV && oldstate == TCP_LISTEN) {
		/* The accepted child is cloned from the listener in softirq:
		 * the current task is not its owner, which is taken later. */
		st = start_tracking(sk, TCPSCOPE_DIR_PASSIVE, false);
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
		st = start_late(sk, tp, oldstate, newstate);
		if (!st)
			return;
	} else if (!(st->flags & TCPSCOPE_F_ESTABLISHED) && newstate != TCP_ESTABLISHED &&
		   oldstate != TCP_SYN_SENT && oldstate != TCP_SYN_RECV && oldstate != TCP_CLOSE) {
		establish_late(sk, tp, st);
	}
	sample_cwnd(st, tp->snd_cwnd);

	switch (newstate) {
	case TCP_ESTABLISHED:
		now = bpf_ktime_get_ns();
		st->ca_since_ns = now;
		if (st->dir == TCPSCOPE_DIR_PASSIVE)
			settle_passive_start(st, tp, now);
		set_established(st, now);
		choose_followed(sk, tp, st);
		break;
	case TCP_FIN_WAIT1:
	case TCP_LAST_ACK:
		/* close() or shutdown(): process context, the owner's own call.
		 * An accepted socket that never wrote gets its owner here, once,
		 * instead of from a hook on every read. */
		if (!st->pid)
			take_owner(st);
		if (sends_from_acks && followed(st) && !(st->flags & TCPSCOPE_F_FIN_SENT))
			note_flight(sk, tp, st);
		/* Every byte written acknowledged, and no write can follow: the
		 * send transfer ended at that delivery, as the sweep would end
		 * it. Handed over now, so that the FIN's retransmissions do not
		 * count in it. */
		if ((st->flags & TCPSCOPE_ST_TX_OPEN) && !(st->flags & TCPSCOPE_F_FIN_SENT) &&
		    tp->snd_una == tp->write_seq)
			end_transfer(sk, tp, st, TCPSCOPE_XFER_SEND, last_delivery_ns(tp));
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
		close_flow(sk, tp, st, bpf_ktime_get_ns());
		break;
	default:
		check_tx_done(st, tp);
		break;
	}
}

/*
 * The kernel never runs a tracing program on a CPU where that same program
 * is already running (since 6.2; it counts a recursion miss instead).
 * connect() and close() run on_state_change in process context, so a
 * softirq that changes another socket's state on that CPU meanwhile is not
 * seen there. What each such transition would have done is made up by the
 * socket's next event: a handshake by its next state change
 * (establish_late(), or start_late() for a socket with no state yet), a
 * close by the socket's destruction (on_destroy), the intermediate states
 * by the close. A second copy of this program on the same tracepoint would
 * see those transitions as they happen, at the price of a second run of
 * every state change of every socket (bench/README.md, "A new
 * connection").
 */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_state_change, const struct sock *sk, int oldstate, int newstate)
{
	if (running())
		handle_state_change(sk, oldstate, newstate);
	return 0;
}

/* A tracked socket is destroyed once it is CLOSE and nothing holds it: its
 * record went out at the CLOSE transition, unless the kernel skipped that
 * one (above). Then it goes out now: the same instant for a socket its
 * application had closed, its application's close() for one it still held
 * (a reset, a timeout). A socket that closed that way without reset or
 * error after shutting its send side down had sent its FIN, the last
 * sequence number it wrote, even where that transition was not seen
 * either. */
SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(on_destroy, struct sock *sk)
{
	if (!running())
		return 0;
	struct flow_state *st = state_of(sk);
	struct tcp_sock *tp;

	if (!tracked(st) || st->emitted)
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	count(TCPSCOPE_CNT_CLOSED_AT_DESTROY);
	if (!(st->flags & (TCPSCOPE_F_FIN_SENT | TCPSCOPE_F_RST_SENT | TCPSCOPE_F_RST_RECEIVED)) && !sk->sk_err &&
	    (BPF_CORE_READ_BITFIELD(sk, sk_shutdown) & SEND_SHUTDOWN)) {
		st->flags |= TCPSCOPE_F_FIN_SENT;
		st->fin_seq = tp->write_seq - 1;
	}
	close_flow(sk, tp, st, bpf_ktime_get_ns());
	return 0;
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
 * backlog in process context: the same nesting as state changes. An arrival
 * skipped here is found by the socket's next one, its next write or its
 * close (arrival.h, receive_payload()). */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(on_data_ready, const struct sock *sk)
{
	if (running())
		handle_data_ready(sk);
	return 0;
}

/* A send call. A flow whose transfers are not followed needs only its
 * first (its owner, if accepted: the writing task; its cwnd is sampled at
 * its arrivals, an arrival no program saw placed at its close), so most
 * calls end before the socket's state is looked up (surely_not_followed();
 * nothing sent yet: bytes_sent, which counts what left, is 0 until the
 * first call's data does). */
SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(on_sendmsg, const struct sock *sk)
{
	if (!running())
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock((void *)sk);
	struct flow_state *st;

	if (!tp || (tp->bytes_sent && surely_not_followed(sk)))
		return 0;
	st = state_of(sk);
	if (!st)
		return 0;
	if (!st->pid)
		take_owner(st);
	sample_cwnd(st, tp->snd_cwnd);
	if (followed(st) && tracked(st) && !st->emitted) {
		if (!arrivals_from_segments)
			note_rx_before_write(sk, tp, st);
		note_send(sk, tp, st);
	}
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
		if (followed(st))
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
		if (ignored((struct sock *)tp))
			return 0;
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
