/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Congestion-control policy maps shared by bpf/policy.bpf.c and the daemon
 * (src/kernel/policy_maps.cc). The daemon compiles the config's rules, peer
 * classes and ASN prefixes into these; the sockops program only looks up.
 *
 * Reloads are double-buffered: rules and remote tries exist twice
 * (generation 0 and 1); the daemon fills the inactive one, then flips
 * `active_gen`, so a socket never sees half a policy.
 */
#ifndef TCPSCOPE_POLICY_H
#define TCPSCOPE_POLICY_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#include "flow_event.h" /* TCPSCOPE_CC_NAME_LEN, TCPSCOPE_COMM_LEN, TCPSCOPE_ASSERT_SIZE */

#define TCPSCOPE_MAX_RULES 64 /* one bit each in a __u64 rules mask */
#define TCPSCOPE_MAX_ARMS 8
#define TCPSCOPE_MAX_LPORTS 16
#define TCPSCOPE_POLICY_GENERATIONS 2
/* A socket's service is looked up in this many cgroups: its own and the
 * nearest above it (the root among them when it is that near). */
#define TCPSCOPE_SERVICE_CGROUP_LEVELS 16

/* Every byte of these structs is a named field: an implicit hole is a
 * compile error on both sides (see flow_event.h). */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wpadded"

/* Remote addresses, IPv4 as IPv4-mapped IPv6 (::ffff:a.b.c.d/96+len), so one
 * LPM trie serves both families. */
struct tcpscope_remote_key {
	__u32 prefixlen;
	__u8 addr[16];
};
TCPSCOPE_ASSERT_SIZE(tcpscope_remote_key, 20);

/* What the daemon decided for every address under a trie entry. */
struct tcpscope_remote_info {
	/* Bit i: rule i's peer_class, asns and prefixes conditions all hold for
	 * these addresses (a rule without one of them passes it). Only lports
	 * and services are left for the kernel to check, so the sockops
	 * program visits just the set bits, lowest first: first match wins as
	 * in the rule order. */
	__u64 rules;
	/* The cohort keys a controller rule's weights are looked up by
	 * (tcpscope_cohort_key): the ASN when a controller keeps one for it
	 * (else 0: the ASN is pooled into its class), and the peer class. */
	__u32 asn;
	__u32 class_id;
};
TCPSCOPE_ASSERT_SIZE(tcpscope_remote_info, 16);

/* What the sockops program needs of a rule once the trie has settled its
 * other conditions: the local ports, and the arms to pick from. The rest of
 * the rule (which conditions it has, its peer class) stays in the daemon's
 * compiled policy (src/policy/cc_policy.h). */
struct tcpscope_rule {
	__u16 lports[TCPSCOPE_MAX_LPORTS];
	__u32 n_lports;   /* 0: any local port */
	__u32 n_arms;     /* 1 for a plain `cc:` rule */
	__u32 cum_weight[TCPSCOPE_MAX_ARMS]; /* cumulative percent; the last is 100 */
	char cc[TCPSCOPE_MAX_ARMS][TCPSCOPE_CC_NAME_LEN];
	/* TCPSCOPE_COHORT_*: a controller rule's weights are per cohort
	 * (cohort_weights); cum_weight is then the weights of a cohort the
	 * controller has not decided for. */
	__u32 cohort_mode;
	/* 1: the transfers of every flow this rule assigns are followed (an
	 * experiment's or a controller's evidence), not only a sample's. */
	__u32 follow_transfers;
};
TCPSCOPE_ASSERT_SIZE(tcpscope_rule, 208);

#define TCPSCOPE_COHORT_NONE 0
#define TCPSCOPE_COHORT_ASN 1        /* per ASN, pooled into the peer class without weights of its own */
#define TCPSCOPE_COHORT_PEER_CLASS 2
/* cohort_weights: a controller's weights for one rule (slot, as in
 * policy_rules) and cohort: an ASN, or TCPSCOPE_COHORT_CLASS_KEY(class id). */
#define TCPSCOPE_COHORT_CLASS_FLAG 0x80000000u
#define TCPSCOPE_COHORT_CLASS_KEY(class_id) (TCPSCOPE_COHORT_CLASS_FLAG | (class_id))
#define TCPSCOPE_MAX_COHORT_WEIGHTS 8192
struct tcpscope_cohort_key {
	__u32 rule_slot;
	__u32 cohort;
};
TCPSCOPE_ASSERT_SIZE(tcpscope_cohort_key, 8);
struct tcpscope_cohort_weights {
	__u32 cum_weight[TCPSCOPE_MAX_ARMS]; /* as tcpscope_rule's */
};
TCPSCOPE_ASSERT_SIZE(tcpscope_cohort_weights, 32);
/* policy_rules: one per generation and rule. */
#define TCPSCOPE_RULE_SLOT(gen, rule) ((gen) * TCPSCOPE_MAX_RULES + (rule))
#define TCPSCOPE_RULE_SLOTS (TCPSCOPE_POLICY_GENERATIONS * TCPSCOPE_MAX_RULES)

#define TCPSCOPE_APP_RESPECT 0
#define TCPSCOPE_APP_ENFORCE 1
#define TCPSCOPE_SYSCTL_OBSERVE 0
#define TCPSCOPE_SYSCTL_DENY 1

struct tcpscope_policy_state {
	__u32 active_gen;
	__u32 n_rules[TCPSCOPE_POLICY_GENERATIONS];
	__u32 app_override; /* TCPSCOPE_APP_* */
	__u32 sysctl_guard; /* TCPSCOPE_SYSCTL_* */
	__u32 loaded;       /* set while the daemon runs */
	/* Which install of the daemon's (a counter, 1, 2, ... wrapping in 16
	 * bits) each generation holds: sockets are tagged with it, so a record
	 * names the rule that chose its CC even after several reloads. */
	__u32 install_id[TCPSCOPE_POLICY_GENERATIONS];
	/* Inode of the initial network namespace. sysctl_guard: deny refuses
	 * only writes there: another namespace's CC sysctls are its own. */
	__u32 host_netns;
	__u32 pad;          /* zero; default_rules is 8-byte aligned */
	/* The rules mask of an address no trie entry covers (the daemon also
	 * loads ::/0 into the trie, so this is a fallback). */
	__u64 default_rules[TCPSCOPE_POLICY_GENERATIONS];
	/* The rules with a `services` condition: they match only a socket
	 * whose cgroup, or an ancestor of it, has their bit in
	 * service_cgroups. 0: no cgroup is looked up. */
	__u64 service_rules[TCPSCOPE_POLICY_GENERATIONS];
};
TCPSCOPE_ASSERT_SIZE(tcpscope_policy_state, 72);

/* service_cgroups: cgroup id (its kernfs id, the inode of its directory in
 * the cgroup2 mount) -> bit i of rules[gen]: rule i of that generation
 * names a service that owns the cgroup. A socket's cgroup is the one it
 * was created in (an accepted socket's, its listener's). */
#define TCPSCOPE_SERVICE_CGROUPS 65536 /* the map's size unless the loader sets one */
struct tcpscope_service_rules {
	__u64 rules[TCPSCOPE_POLICY_GENERATIONS];
};
TCPSCOPE_ASSERT_SIZE(tcpscope_service_rules, 16);

/* Per socket: what the policy and the application did to its CC. Cloned to
 * accepted children, so an application's choice on a listener carries over. */
struct tcpscope_sock_policy {
	/* (install id << 16) | (rule index + 1); 0 = no rule chose. Copied
	 * verbatim into the flow record's cc_rule; the daemon decodes it. */
	__u32 rule;
	__u8 arm;     /* TCPSCOPE_ARM_TAG(arm index) for experiments, else 0 */
	__u8 app_set_cc;
	__u8 overridden; /* enforce: the policy replaced the application's choice */
	__u8 app_cc;  /* the application's CC: index into cc_names + 1, 0 = other */
};
TCPSCOPE_ASSERT_SIZE(tcpscope_sock_policy, 8);

#define TCPSCOPE_INSTALL_MASK 0xffffu /* install ids wrap in 16 bits, never 0 */
#define TCPSCOPE_RULE_TAG(install_id, idx) (((__u32)(install_id) << 16) | ((idx) + 1))
#define TCPSCOPE_RULE_TAG_INSTALL(tag) ((tag) >> 16)
#define TCPSCOPE_RULE_TAG_INDEX(tag) (((tag) & TCPSCOPE_INSTALL_MASK) - 1)
#define TCPSCOPE_ARM_TAG(idx) ((idx) + 1)
#define TCPSCOPE_ARM_TAG_INDEX(tag) ((tag) - 1)

/* Indexes of cc_assignments (and cc_revoked): one per generation, rule, arm. */
#define TCPSCOPE_ASSIGN_SLOT(gen, rule, arm) \
	(((gen) * TCPSCOPE_MAX_RULES + (rule)) * TCPSCOPE_MAX_ARMS + (arm))
#define TCPSCOPE_ASSIGN_SLOTS (TCPSCOPE_POLICY_GENERATIONS * TCPSCOPE_MAX_RULES * TCPSCOPE_MAX_ARMS)

/* Assignments an application's own TCP_CONGESTION replaced afterwards
 * (app_override: respect): same layout as cc_assignments. */

/* Congestion controls an application may name, as the kernel offers them
 * (the daemon keeps cc_names in step with tcp_available_congestion_control):
 * name -> index + 1, with TCPSCOPE_CC_ALLOWED set when it is also in
 * tcp_allowed_congestion_control (any caller may choose it; the others need
 * CAP_NET_ADMIN). Any other name (a typo, a module never loaded: the call
 * fails) is counted as "other", so the label values stay bounded. */
#define TCPSCOPE_MAX_CC_NAMES 31
#define TCPSCOPE_CC_ALLOWED 0x80000000u
#define TCPSCOPE_CC_INDEX_MASK 0xffffu
struct tcpscope_cc_name {
	char name[TCPSCOPE_CC_NAME_LEN];
};
TCPSCOPE_ASSERT_SIZE(tcpscope_cc_name, TCPSCOPE_CC_NAME_LEN);

#define TCPSCOPE_APP_CC_OBSERVED 0   /* the kernel takes it */
#define TCPSCOPE_APP_CC_OVERRIDDEN 1 /* taken by the call, not applied (app_override: enforce) */
#define TCPSCOPE_APP_CC_REFUSED 2    /* the kernel refuses it: restricted, caller without CAP_NET_ADMIN */
#define TCPSCOPE_APP_CC_ACTIONS 3
/* app_cc_calls' slot of (cc index + 1, 0 = other) and TCPSCOPE_APP_CC_*. */
#define TCPSCOPE_APP_CC_SLOT(cc, action) ((cc) * TCPSCOPE_APP_CC_ACTIONS + (action))
#define TCPSCOPE_APP_CC_SLOTS ((TCPSCOPE_MAX_CC_NAMES + 1) * TCPSCOPE_APP_CC_ACTIONS)

/* One write to a CC sysctl, for the daemon's log (ring buffer sysctl_log). */
struct tcpscope_sysctl_event {
	__u32 pid;      /* thread group id of the writer */
	__u32 name_idx; /* 0 tcp_congestion_control, 1 tcp_allowed_congestion_control */
	__u32 denied;
	__u32 truncated; /* the value was longer than `value` */
	__u32 netns;     /* inode of the writer's network namespace */
	__u32 other_netns; /* 1 unless that is the initial one */
	char comm[TCPSCOPE_COMM_LEN];
	char value[64];
};
TCPSCOPE_ASSERT_SIZE(tcpscope_sysctl_event, 104);

#pragma GCC diagnostic pop

/* sysctl_writes: ((name index (0 tcp_congestion_control, 1
 * tcp_allowed_congestion_control) * 2 + (1 if not the initial network
 * namespace)) * 2 + (1 if denied), and one more slot after those for the
 * writes the log (ring buffer sysctl_log) lost. */
/* The sysctls' base names, index 0 and 1 (under net.ipv4). */
#define TCPSCOPE_SYSCTL_CC "tcp_congestion_control"
#define TCPSCOPE_SYSCTL_ALLOWED_CC "tcp_allowed_congestion_control"
#define TCPSCOPE_SYSCTL_NAMES 2
#define TCPSCOPE_SYSCTL_SLOT(name_idx, other_netns, denied) (((name_idx) * 2 + (other_netns)) * 2 + (denied))
#define TCPSCOPE_SYSCTL_LOST TCPSCOPE_SYSCTL_SLOT(TCPSCOPE_SYSCTL_NAMES, 0, 0) /* the slot after them */

#endif /* TCPSCOPE_POLICY_H */
