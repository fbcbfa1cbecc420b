/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What every part of flow.bpf.c uses: the maps (the ring, the counters, the
 * per-socket state, the running generation), the loader's settings they
 * need, and the small helpers over them. BPF side only. */
#ifndef TCPSCOPE_BPF_COMMON_H
#define TCPSCOPE_BPF_COMMON_H

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
#define SEND_SHUTDOWN 2 /* sk_shutdown, include/net/sock.h */
#define NSEC_PER_USEC 1000ULL
#define USEC_PER_SEC 1000000U
#define NSEC_PER_MSEC 1000000ULL
#define NSEC_PER_SEC 1000000000ULL
#define USEC_PER_MSEC 1000U

/* The latest ACK that delivered data, on bpf_ktime_get_ns()'s clock: the
 * kernel's delivered_mstamp (µs of the same monotonic clock). */
static __always_inline __u64 last_delivery_ns(const struct tcp_sock *tp)
{
	return tp->delivered_mstamp * NSEC_PER_USEC;
}

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

/* Set by the loader before load: each CPU wakes the reader once it has
 * submitted this much since it last did (the ring's wake-up size over the
 * CPUs); smaller batches are picked up by the reader's periodic drain. */
const volatile __u64 wakeup_bytes_per_cpu = 256 * 1024;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} unwoken_bytes SEC(".maps");

/* Batch wake-ups: the reader drains on its own timer, so only a filling ring
 * needs to interrupt it. Counted per CPU rather than asked of the ring
 * (bpf_ringbuf_query()): the ring's consumer position is written by the
 * reader on another CPU, and reading it missed the cache on every record
 * (bench/README.md, "A new connection: where its
 * cost goes, and what was cut"). */
static __always_inline void submit(void *record, __u32 size)
{
	__u32 zero = 0;
	__u64 *unwoken = bpf_map_lookup_elem(&unwoken_bytes, &zero);
	__u64 flags = BPF_RB_NO_WAKEUP;

	if (unwoken) {
		*unwoken += size;
		if (*unwoken >= wakeup_bytes_per_cpu) {
			*unwoken = 0;
			flags = BPF_RB_FORCE_WAKEUP;
		}
	}
	bpf_ringbuf_submit(record, flags);
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

/* Sequence-space comparison, as the kernel's after()/before(). */
static __always_inline bool seq_geq(__u32 a, __u32 b)
{
	return (__s32)(a - b) >= 0;
}

/* The header every ring record starts with: what kind of record it is. */
static __always_inline void set_kind(struct tcpscope_record_header *h, __u8 kind)
{
	*h = (struct tcpscope_record_header){ .kind = kind };
}

#endif /* TCPSCOPE_BPF_COMMON_H */
