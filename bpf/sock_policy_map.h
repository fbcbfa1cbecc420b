/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The per-socket policy record: defined by policy.bpf.c, read by flow.bpf.c
 * (as an extern, resolved when `bpftool gen object` links the two). */
#ifndef TCPSCOPE_SOCK_POLICY_MAP_H
#define TCPSCOPE_SOCK_POLICY_MAP_H

#include "tcpscope/policy.h"

#define TCPSCOPE_SOCK_POLICY_MAP                                   \
	struct {                                                   \
		__uint(type, BPF_MAP_TYPE_SK_STORAGE);             \
		__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE); \
		__type(key, int);                                  \
		__type(value, struct tcpscope_sock_policy);        \
	}

#endif
