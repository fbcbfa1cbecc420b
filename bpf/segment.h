/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A received segment as the tcp_probe tracepoint shows it, and whether TCP
 * will take it: what the transfers and the arrivals read on kernels without
 * tcp_sendmsg_locked or sk_data_ready. BPF side only. */
#ifndef TCPSCOPE_BPF_SEGMENT_H
#define TCPSCOPE_BPF_SEGMENT_H

#include "common.h"

#define TCPHDR_FIN 0x01 /* a TCP header's flags byte, as include/net/tcp.h */
#define TCPHDR_SYN 0x02
#define TCPHDR_RST 0x04
#define TCPHDR_ACK 0x10

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

#endif /* TCPSCOPE_BPF_SEGMENT_H */
