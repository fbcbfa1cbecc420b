// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Per-socket congestion control, attached to a cgroup v2:
 *   sockops            picks the CC of a new flow from the policy maps:
 *                      active opens before the SYN, passive at establishment
 *   cgroup/setsockopt  sees applications that set TCP_CONGESTION themselves
 *   cgroup/sysctl      watches (or refuses) writes to the host's CC sysctls
 * The rules are compiled by the daemon, down to a mask per remote prefix of
 * the rules that can match there: here are one trie lookup, a visit of the
 * mask's set bits (local ports) and counting; and, only when a rule naming
 * services is left in the mask, a lookup per level of the socket's cgroup.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#include "flow_state.h"

#define AF_INET 2
#define AF_INET6 10
#define SOL_TCP 6
#define TCP_CONGESTION 13
#define E2BIG 7

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tcpscope_policy_state);
} policy_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TCPSCOPE_RULE_SLOTS);
	__type(key, __u32);
	__type(value, struct tcpscope_rule);
} policy_rules SEC(".maps");

/* One trie per generation; sized by the loader at open time. */
struct remote_trie {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 20);
	__type(key, struct tcpscope_remote_key);
	__type(value, struct tcpscope_remote_info);
};
struct remote_trie remote_gen0 SEC(".maps");
struct remote_trie remote_gen1 SEC(".maps");

/* The cgroups of the services rules name (policy.h); sized by the loader at
 * open time. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, TCPSCOPE_SERVICE_CGROUPS);
	__type(key, __u64);
	__type(value, struct tcpscope_service_rules);
} service_cgroups SEC(".maps");

/* A controller rule's weights per cohort, kept by the daemon as it decides:
 * one entry is replaced at a time, so a new socket sees old or new weights. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TCPSCOPE_MAX_COHORT_WEIGHTS);
	__type(key, struct tcpscope_cohort_key);
	__type(value, struct tcpscope_cohort_weights);
} cohort_weights SEC(".maps");

/* The per-socket state of both objects (bpf/flow_state.h): defined here,
 * extern in flow.bpf.c. This program writes only its `policy` part. */
TCPSCOPE_FLOWS_MAP flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TCPSCOPE_ASSIGN_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} cc_assignments SEC(".maps");

/* Assignments an application replaced afterwards (app_override: respect). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TCPSCOPE_ASSIGN_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} cc_revoked SEC(".maps");

/* The CCs the kernel offers (name -> index + 1), kept by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TCPSCOPE_MAX_CC_NAMES);
	__type(key, struct tcpscope_cc_name);
	__type(value, __u32);
} cc_names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TCPSCOPE_APP_CC_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} app_cc_calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TCPSCOPE_SYSCTL_LOST + 1); /* + events the log lost */
	__type(key, __u32);
	__type(value, __u64);
} sysctl_writes SEC(".maps");

/* Who wrote what to a CC sysctl, for the daemon to log (rate-limited). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024);
} sysctl_log SEC(".maps");

static __always_inline struct tcpscope_policy_state *state(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&policy_state, &zero);
}

static __always_inline void bump(void *map, __u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(map, &idx);

	if (v)
		*v += 1;
}

static __always_inline bool lport_matches(const struct tcpscope_rule *r, __u16 lport)
{
	for (int i = 0; i < TCPSCOPE_MAX_LPORTS; i++) {
		if (i >= r->n_lports)
			break;
		if (r->lports[i] == lport)
			return true;
	}
	return false;
}

/* Index of the lowest set bit of a non-zero mask. BPF has no ctz and clang's
 * fallback is a lookup table in .rodata, which this file must not have. */
static __always_inline __u32 lowest_bit(__u64 m)
{
	__u32 n = 0;

	m &= -m;
	if (!(m & 0xffffffffULL)) n += 32, m >>= 32;
	if (!(m & 0xffffULL)) n += 16, m >>= 16;
	if (!(m & 0xffULL)) n += 8, m >>= 8;
	if (!(m & 0xfULL)) n += 4, m >>= 4;
	if (!(m & 0x3ULL)) n += 2, m >>= 2;
	if (!(m & 0x1ULL)) n += 1;
	return n;
}

static __always_inline __u32 pick_arm(const __u32 *cum_weight, __u32 n_arms)
{
	__u32 roll = bpf_get_prandom_u32() % 100;

	for (int i = 0; i < TCPSCOPE_MAX_ARMS; i++) {
		if (i >= n_arms)
			break;
		if (roll < cum_weight[i])
			return i;
	}
	return 0;
}

/* A controller rule's weights for this peer's cohort: its ASN's when the
 * controller keeps them, else its peer class's; null: the rule's own. */
static __always_inline const __u32 *cohort_cum_weight(const struct tcpscope_rule *r, __u32 slot,
						       const struct tcpscope_remote_info *info)
{
	struct tcpscope_cohort_key key = { .rule_slot = slot };
	struct tcpscope_cohort_weights *w;

	if (!info || r->cohort_mode == TCPSCOPE_COHORT_NONE)
		return 0;
	if (r->cohort_mode == TCPSCOPE_COHORT_ASN && info->asn) {
		key.cohort = info->asn;
		w = bpf_map_lookup_elem(&cohort_weights, &key);
		if (w)
			return w->cum_weight;
	}
	key.cohort = TCPSCOPE_COHORT_CLASS_KEY(info->class_id);
	w = bpf_map_lookup_elem(&cohort_weights, &key);
	return w ? w->cum_weight : 0;
}

/* The rules of generation `gen` naming a service that owns the socket's
 * cgroup or one of its nearest TCPSCOPE_SERVICE_CGROUP_LEVELS - 1 ancestors.
 * Up through each cgroup's css parent, which 6.1 and 6.12 have alike (not
 * kernfs_node's parent, renamed in 6.15), by the verifier's direct loads of
 * kernel memory: a probe read each would cost more than the map lookup. */
static __always_inline __u64 owned_service_rules(struct bpf_sock *sk, __u32 gen)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct cgroup_subsys_state *parent;
	struct tcpscope_service_rules *sr;
	struct cgroup *cg;
	__u64 owned = 0, id;

	if (!tp)
		return 0;
	cg = tp->inet_conn.icsk_inet.sk.sk_cgrp_data.cgroup;
	for (int k = 0; k < TCPSCOPE_SERVICE_CGROUP_LEVELS && cg; k++) {
		id = cg->kn->id;
		sr = bpf_map_lookup_elem(&service_cgroups, &id);
		if (sr)
			owned |= sr->rules[gen];
		parent = cg->self.parent;
		cg = parent ? parent->cgroup : 0;
	}
	return owned;
}

/* Whether the socket's congestion control already is `cc` (the kernel's
 * TCP_CA_NAME_MAX bytes, NUL-padded, as the daemon writes the arms'): then
 * the arm needs no setsockopt. */
static __always_inline bool has_cc(struct bpf_sock *sk, const char cc[TCPSCOPE_CC_NAME_LEN])
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	__u64 now[2], want[2];

	if (!tp)
		return false;
	__builtin_memcpy(now, tp->inet_conn.icsk_ca_ops->name, sizeof(now));
	__builtin_memcpy(want, cc, sizeof(want));
	return now[0] == want[0] && now[1] == want[1];
}

static __always_inline void apply_policy(struct bpf_sock_ops *skops)
{
	struct tcpscope_policy_state *ps = state();
	struct tcpscope_remote_key key;
	struct tcpscope_remote_info *info;
	const __u32 *cum_weight;
	struct tcpscope_sock_policy *sp;
	struct flow_state *st;
	struct bpf_sock *sk = skops->sk;
	__u32 gen, i, arm, install;
	__u16 lport;
	__u64 mask;
	char cc[TCPSCOPE_CC_NAME_LEN];
	void *trie;

	if (!ps || !sk)
		return;
	gen = ps->active_gen & 1;
	if (!ps->n_rules[gen])
		return;
	__builtin_memset(&key, 0, sizeof(key));
	key.prefixlen = 128;
	if (skops->family == AF_INET) {
		key.addr[10] = 0xff;
		key.addr[11] = 0xff;
		__builtin_memcpy(&key.addr[12], &skops->remote_ip4, 4);
	} else if (skops->family == AF_INET6) {
		__u32 ip6[4] = { skops->remote_ip6[0], skops->remote_ip6[1], skops->remote_ip6[2],
				 skops->remote_ip6[3] };

		__builtin_memcpy(key.addr, ip6, 16);
	} else {
		return;
	}
	trie = gen ? (void *)&remote_gen1 : (void *)&remote_gen0;
	info = bpf_map_lookup_elem(trie, &key);
	/* The rules whose class, ASN and prefix conditions hold for this peer,
	 * decided by the daemon: only their services and local ports are left
	 * to check. A rule naming services holds only for their sockets. */
	mask = info ? info->rules : ps->default_rules[gen];
	if (mask & ps->service_rules[gen])
		mask &= ~ps->service_rules[gen] | owned_service_rules(sk, gen);
	install = ps->install_id[gen] & TCPSCOPE_INSTALL_MASK;
	lport = (__u16)skops->local_port;

	for (int k = 0; k < TCPSCOPE_MAX_RULES; k++) {
		struct tcpscope_rule *r;
		__u32 slot;

		if (!mask)
			return;
		i = lowest_bit(mask);
		mask &= mask - 1;
		slot = TCPSCOPE_RULE_SLOT(gen, i);
		r = bpf_map_lookup_elem(&policy_rules, &slot);
		if (!r)
			continue;
		if (r->n_lports && !lport_matches(r, lport))
			continue;

		/* The flow's storage exists already (SYN_SENT, or the accepted
		 * child's creation) unless allocating it failed there. */
		st = bpf_sk_storage_get(&flows, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!st)
			return;
		sp = &st->policy;
		if (sp->app_set_cc && ps->app_override == TCPSCOPE_APP_RESPECT)
			return; /* the application's choice stands */
		cum_weight = cohort_cum_weight(r, slot, info);
		arm = pick_arm(cum_weight ? cum_weight : r->cum_weight, r->n_arms);
		if (arm >= TCPSCOPE_MAX_ARMS)
			return;
		__builtin_memcpy(cc, r->cc[arm], sizeof(cc));
		cc[sizeof(cc) - 1] = 0;
		if (!has_cc(sk, cc) && bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cc, sizeof(cc)))
			return; /* e.g. not in tcp_allowed_congestion_control: system default stays */
		sp->rule = TCPSCOPE_RULE_TAG(install, i);
		sp->arm = r->n_arms > 1 ? TCPSCOPE_ARM_TAG(arm) : 0;
		/* Its transfers are the rule's evidence: all of them (flow.bpf.c
		 * samples the other flows as the handshake completes, after this). */
		if (r->follow_transfers) {
			st->flags |= TCPSCOPE_ST_FOLLOWED;
			st->sampling_shift = 0;
		}
		if (sp->app_set_cc) {
			/* enforce: counted under the name the application asked for */
			sp->overridden = 1;
			bump(&app_cc_calls, TCPSCOPE_APP_CC_SLOT(sp->app_cc, TCPSCOPE_APP_CC_OVERRIDDEN));
		}
		bump(&cc_assignments, TCPSCOPE_ASSIGN_SLOT(gen, i, arm));
		return;
	}
}

SEC("sockops")
int cc_policy(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:          /* before the SYN */
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:  /* the accepted child */
		apply_policy(skops);
		break;
	}
	return 1;
}

/* kernel_cap_t before 6.3: two 32-bit words, CAP_NET_ADMIN in the first. */
struct kernel_cap_struct___u32 {
	__u32 cap[2];
} __attribute__((preserve_access_index));
struct cred___u32 {
	struct kernel_cap_struct___u32 cap_effective;
} __attribute__((preserve_access_index));

/* CAP_NET_ADMIN in the caller's effective set. The kernel asks it of the
 * socket's network namespace's user namespace; the effective set is the
 * caller's own namespace's, which is that one but for a socket in a
 * namespace the caller's user namespace does not own. */
static __always_inline bool may_net_admin(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	const struct cred *cred = BPF_CORE_READ(task, cred);

	if (bpf_core_field_exists(cred->cap_effective.val))
		return BPF_CORE_READ(cred, cap_effective.val) & (1ULL << 12 /* CAP_NET_ADMIN */);
	if (bpf_core_field_exists(((struct cred___u32 *)cred)->cap_effective.cap[0]))
		return BPF_CORE_READ((struct cred___u32 *)cred, cap_effective.cap[0]) & (1U << 12);
	return false;  /* neither layout: every kernel since the floor (5.11) has one */
}

SEC("cgroup/setsockopt")
int watch_setsockopt(struct bpf_sockopt *ctx)
{
	struct tcpscope_policy_state *ps;
	struct tcpscope_sock_policy *sp;
	struct flow_state *st;
	struct tcpscope_cc_name name = {};
	__u8 *p = ctx->optval;
	__u32 *known, app_cc;

	/* Not ours: the option goes on as the chain of programs left it. A
	 * length left as it came costs the kernel a copy of the option per call
	 * (bench/README.md, "A new connection: where its cost goes, and what
	 * was cut"); optlen 0 would spare it but
	 * also undo what a program before this one (one of a child cgroup's)
	 * wrote into the buffer or decided (-1), so only beyond a page, where
	 * the kernel must use the caller's buffer anyway, is it set. */
	if (ctx->level != SOL_TCP || ctx->optname != TCP_CONGESTION) {
		if (ctx->optlen > 4096)
			ctx->optlen = 0;
		return 1;
	}
	/* As the kernel reads it: up to 15 characters, up to the first NUL. */
	for (int i = 0; i < TCPSCOPE_CC_NAME_LEN - 1; i++) {
		if (p + i + 1 > (__u8 *)ctx->optval_end || i >= ctx->optlen || !p[i])
			break;
		name.name[i] = p[i];
	}
	known = bpf_map_lookup_elem(&cc_names, &name);
	app_cc = known ? *known & TCPSCOPE_CC_INDEX_MASK : 0;
	if (app_cc > TCPSCOPE_MAX_CC_NAMES)
		app_cc = 0;
	/* This hook runs before the kernel's checks: a restricted algorithm
	 * (not in tcp_allowed_congestion_control) named by a caller without
	 * CAP_NET_ADMIN fails with EPERM and changes nothing. */
	if (app_cc && !(*known & TCPSCOPE_CC_ALLOWED) && !may_net_admin()) {
		bump(&app_cc_calls, TCPSCOPE_APP_CC_SLOT(app_cc, TCPSCOPE_APP_CC_REFUSED));
		return 1;
	}
	bump(&app_cc_calls, TCPSCOPE_APP_CC_SLOT(app_cc, TCPSCOPE_APP_CC_OBSERVED));
	/* A name the kernel does not offer: the call fails (ENOENT), nothing
	 * changes for the socket. */
	if (!app_cc || !ctx->sk)
		return 1;
	/* Before connect() this creates the socket's storage; the flow's
	 * tracking keeps this part when it starts. */
	st = bpf_sk_storage_get(&flows, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return 1;
	sp = &st->policy;
	sp->app_set_cc = 1;
	sp->app_cc = app_cc;

	ps = state();
	if (ps && ps->app_override == TCPSCOPE_APP_ENFORCE && sp->rule) {
		/* The policy already chose for this (established) socket: the call
		 * succeeds for the application but the kernel does not apply it. */
		sp->overridden = 1;
		bump(&app_cc_calls, TCPSCOPE_APP_CC_SLOT(app_cc, TCPSCOPE_APP_CC_OVERRIDDEN));
		ctx->optlen = -1;
		return 1;
	}
	/* The application's choice replaces whatever a rule set: that rule's
	 * assignment is taken back, if its generation is still installed. */
	if (sp->rule && ps) {
		__u32 install = TCPSCOPE_RULE_TAG_INSTALL(sp->rule);
		__u32 idx = TCPSCOPE_RULE_TAG_INDEX(sp->rule);
		__u32 arm = sp->arm ? TCPSCOPE_ARM_TAG_INDEX(sp->arm) : 0;

		for (__u32 g = 0; g < TCPSCOPE_POLICY_GENERATIONS; g++) {
			if ((ps->install_id[g] & TCPSCOPE_INSTALL_MASK) == install && idx < ps->n_rules[g] &&
			    idx < TCPSCOPE_MAX_RULES && arm < TCPSCOPE_MAX_ARMS) {
				bump(&cc_revoked, TCPSCOPE_ASSIGN_SLOT(g, idx, arm));
				break;
			}
		}
	}
	sp->rule = 0;
	sp->arm = 0;
	return 1;
}

/* Characters o..o+7 of a string literal as one little-endian word. The
 * optimizer folds it to an immediate: this file keeps no .rodata, which the
 * object linker would have to merge with flow.bpf.c's. */
#define CC_WORDS TCPSCOPE_SYSCTL_CC "\0"
#define ALLOWED_WORDS TCPSCOPE_SYSCTL_ALLOWED_CC "\0"
#define WORD8(s, o) ((__u64)(s)[(o)] | (__u64)(s)[(o) + 1] << 8 | (__u64)(s)[(o) + 2] << 16 | \
		     (__u64)(s)[(o) + 3] << 24 | (__u64)(s)[(o) + 4] << 32 | (__u64)(s)[(o) + 5] << 40 | \
		     (__u64)(s)[(o) + 6] << 48 | (__u64)(s)[(o) + 7] << 56)

SEC("cgroup/sysctl")
int guard_sysctl(struct bpf_sysctl *ctx)
{
	struct tcpscope_policy_state *ps;
	struct tcpscope_sysctl_event *ev;
	struct task_struct *task;
	__u64 w[4] = {};
	__u32 idx, netns;
	bool deny, other;
	int len;

	if (!ctx->write)
		return 1;
	/* Base names are unique to net/ipv4 (policy.h names them). Each name
	 * with two NULs after it fills whole words: 22 characters in 3, 30 in 4. */
	len = bpf_sysctl_get_name(ctx, (char *)w, sizeof(w), BPF_F_SYSCTL_BASE_NAME);
	if (len == sizeof(TCPSCOPE_SYSCTL_CC) - 1 && w[0] == WORD8(CC_WORDS, 0) && w[1] == WORD8(CC_WORDS, 8) &&
	    w[2] == WORD8(CC_WORDS, 16))
		idx = 0;
	else if (len == sizeof(TCPSCOPE_SYSCTL_ALLOWED_CC) - 1 && w[0] == WORD8(ALLOWED_WORDS, 0) &&
		 w[1] == WORD8(ALLOWED_WORDS, 8) && w[2] == WORD8(ALLOWED_WORDS, 16) &&
		 w[3] == WORD8(ALLOWED_WORDS, 24))
		idx = 1;
	else
		return 1;
	/* The namespace whose sysctl this is: the writer's (the kernel looks
	 * the table up in the opener's, and the two are the same but for a
	 * descriptor passed between namespaces). */
	task = (struct task_struct *)bpf_get_current_task();
	netns = BPF_CORE_READ(task, nsproxy, net_ns, ns.inum);
	ps = state();
	other = !ps || netns != ps->host_netns;
	deny = ps && ps->loaded && ps->sysctl_guard == TCPSCOPE_SYSCTL_DENY && !other;
	bump(&sysctl_writes, TCPSCOPE_SYSCTL_SLOT(idx, other, deny));

	ev = bpf_ringbuf_reserve(&sysctl_log, sizeof(*ev), 0);
	if (ev) {
		ev->pid = bpf_get_current_pid_tgid() >> 32;
		ev->name_idx = idx;
		ev->denied = deny;
		ev->netns = netns;
		ev->other_netns = other;
		bpf_get_current_comm(ev->comm, sizeof(ev->comm));
		len = bpf_sysctl_get_new_value(ctx, ev->value, sizeof(ev->value));
		ev->truncated = len == -E2BIG;
		if (len < 0 && len != -E2BIG)
			ev->value[0] = 0;
		bpf_ringbuf_submit(ev, 0);
	} else {
		bump(&sysctl_writes, TCPSCOPE_SYSCTL_LOST); /* the log lost it */
	}
	return deny ? 0 : 1;
}
