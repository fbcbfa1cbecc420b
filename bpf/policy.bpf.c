// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Per-socket congestion control, attached to a cgroup v2:
 *   sockops            picks the CC of a new flow from the policy maps:
 *                      active opens before the SYN, passive at establishment
 *   cgroup/setsockopt  sees applications that set TCP_CONGESTION themselves
 *   cgroup/sysctl      watches (or refuses) writes to the host's CC sysctls
 * The rules are compiled by the daemon; here is only lookup and counting.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "sock_policy_map.h"

#define AF_INET 2
#define AF_INET6 10
#define SOL_TCP 6
#define TCP_CONGESTION 13

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tcpscope_policy_state);
} policy_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TCPSCOPE_POLICY_GENERATIONS * TCPSCOPE_MAX_RULES);
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

TCPSCOPE_SOCK_POLICY_MAP sock_policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TCPSCOPE_ASSIGN_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} cc_assignments SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct tcpscope_app_cc_key);
	__type(value, __u64);
} app_cc_calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TCPSCOPE_SYSCTL_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} sysctl_writes SEC(".maps");

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

static __always_inline void count_app_cc(const char *cc, __u32 action)
{
	struct tcpscope_app_cc_key key = {};
	__u64 one = 1, *v;

	__builtin_memcpy(key.cc, cc, sizeof(key.cc));
	key.action = action;
	v = bpf_map_lookup_elem(&app_cc_calls, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
	else
		bpf_map_update_elem(&app_cc_calls, &key, &one, BPF_NOEXIST);
}

static __always_inline bool rule_matches(const struct tcpscope_rule *r, __u32 idx,
					 const struct tcpscope_remote_info *info, __u16 lport)
{
	if ((r->match & TCPSCOPE_MATCH_CLASS) && r->class_id != info->class_id)
		return false;
	if ((r->match & TCPSCOPE_MATCH_ASN) && !(info->asn_rules & (1ULL << idx)))
		return false;
	if ((r->match & TCPSCOPE_MATCH_PREFIX) && !(info->prefix_rules & (1ULL << idx)))
		return false;
	if (r->match & TCPSCOPE_MATCH_LPORT) {
		bool hit = false;

		for (int i = 0; i < TCPSCOPE_MAX_LPORTS; i++) {
			if (i >= r->n_lports)
				break;
			if (r->lports[i] == lport) {
				hit = true;
				break;
			}
		}
		if (!hit)
			return false;
	}
	return true;
}

static __always_inline __u32 pick_arm(const struct tcpscope_rule *r)
{
	__u32 roll = bpf_get_prandom_u32() % 100;

	for (int i = 0; i < TCPSCOPE_MAX_ARMS; i++) {
		if (i >= r->n_arms)
			break;
		if (roll < r->cum_weight[i])
			return i;
	}
	return 0;
}

static __always_inline void apply_policy(struct bpf_sock_ops *skops)
{
	struct tcpscope_policy_state *ps = state();
	struct tcpscope_remote_key key;
	struct tcpscope_remote_info *info, none = {};
	struct tcpscope_sock_policy *sp;
	struct bpf_sock *sk = skops->sk;
	__u32 gen, n, i, arm;
	char cc[16];
	void *trie;

	if (!ps || !sk)
		return;
	__builtin_memset(&key, 0, sizeof(key));
	key.prefixlen = 128;
	gen = ps->active_gen & 1;
	n = ps->n_rules[gen];
	if (!n)
		return;

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
	if (!info)
		info = &none;

	for (i = 0; i < TCPSCOPE_MAX_RULES; i++) {
		struct tcpscope_rule *r;
		__u32 slot = gen * TCPSCOPE_MAX_RULES + i;

		if (i >= n)
			return;
		r = bpf_map_lookup_elem(&policy_rules, &slot);
		if (!r || !rule_matches(r, i, info, (__u16)skops->local_port))
			continue;

		sp = bpf_sk_storage_get(&sock_policy, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!sp)
			return;
		if (sp->app_set_cc && ps->app_override == TCPSCOPE_APP_RESPECT)
			return; /* the application's choice stands */
		arm = pick_arm(r);
		if (arm >= TCPSCOPE_MAX_ARMS)
			return;
		__builtin_memcpy(cc, r->cc[arm], sizeof(cc));
		cc[15] = 0;
		if (bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cc, sizeof(cc)))
			return; /* e.g. not in tcp_allowed_congestion_control: system default stays */
		sp->rule = (gen << 16) | (i + 1);
		sp->arm = r->n_arms > 1 ? arm + 1 : 0;
		if (sp->app_set_cc) {
			sp->overridden = 1;
			count_app_cc(cc, TCPSCOPE_APP_CC_OVERRIDDEN);
		}
		bump(&cc_assignments, (gen * TCPSCOPE_MAX_RULES + i) * TCPSCOPE_MAX_ARMS + arm);
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

SEC("cgroup/setsockopt")
int watch_setsockopt(struct bpf_sockopt *ctx)
{
	struct tcpscope_policy_state *ps;
	struct tcpscope_sock_policy *sp;
	char name[16] = {};
	__u8 *p = ctx->optval;

	if (ctx->level != SOL_TCP || ctx->optname != TCP_CONGESTION) {
		/* Not ours: beyond a page the kernel must use the user's buffer. */
		if (ctx->optlen > 4096)
			ctx->optlen = 0;
		return 1;
	}
	for (int i = 0; i < 15; i++) {
		if (p + i + 1 > (__u8 *)ctx->optval_end || i >= ctx->optlen)
			break;
		name[i] = p[i];
	}
	if (!ctx->sk)
		return 1;
	sp = bpf_sk_storage_get(&sock_policy, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!sp)
		return 1;
	sp->app_set_cc = 1;
	count_app_cc(name, TCPSCOPE_APP_CC_OBSERVED);

	ps = state();
	if (ps && ps->app_override == TCPSCOPE_APP_ENFORCE && sp->rule) {
		/* The policy already chose for this (established) socket: the call
		 * succeeds for the application but the kernel does not apply it. */
		sp->overridden = 1;
		count_app_cc(name, TCPSCOPE_APP_CC_OVERRIDDEN);
		ctx->optlen = -1;
	} else {
		/* The application's choice replaces whatever a rule set. */
		sp->rule = 0;
		sp->arm = 0;
	}
	return 1;
}

/* Eight characters of a string literal as one little-endian word. The
 * optimizer folds it to an immediate: this file keeps no .rodata, which the
 * object linker would have to merge with flow.bpf.c's. */
#define WORD8(s) ((__u64)(s)[0] | (__u64)(s)[1] << 8 | (__u64)(s)[2] << 16 | (__u64)(s)[3] << 24 | \
		  (__u64)(s)[4] << 32 | (__u64)(s)[5] << 40 | (__u64)(s)[6] << 48 | (__u64)(s)[7] << 56)

SEC("cgroup/sysctl")
int guard_sysctl(struct bpf_sysctl *ctx)
{
	struct tcpscope_policy_state *ps;
	__u64 w[4] = {};
	__u32 idx;
	bool deny;
	int len;

	if (!ctx->write)
		return 1;
	/* Base names are unique to net/ipv4: tcp_congestion_control (22
	 * characters) and tcp_allowed_congestion_control (30). */
	len = bpf_sysctl_get_name(ctx, (char *)w, sizeof(w), BPF_F_SYSCTL_BASE_NAME);
	if (len == 22 && w[0] == WORD8("tcp_cong") && w[1] == WORD8("estion_c") &&
	    w[2] == WORD8("ontrol\0\0"))
		idx = 0;
	else if (len == 30 && w[0] == WORD8("tcp_allo") && w[1] == WORD8("wed_cong") &&
		 w[2] == WORD8("estion_c") && w[3] == WORD8("ontrol\0\0"))
		idx = 1;
	else
		return 1;
	ps = state();
	deny = ps && ps->loaded && ps->sysctl_guard == TCPSCOPE_SYSCTL_DENY;
	bump(&sysctl_writes, idx * 2 + (deny ? 1 : 0));
	return deny ? 0 : 1;
}
