// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A program every verifier refuses, but only after walking some thousand
 * instructions: its log runs to tens of kilobytes and ends with the reason.
 * tests/kernel/load_log_test.cc loads it to check that a refusal's log is
 * kept whole. Not part of tcpscope. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("socket")
int refused_after_a_long_walk(struct __sk_buff *skb)
{
	volatile __u64 acc = skb->len;

#pragma clang loop unroll(full)
	for (int i = 0; i < 300; i++)
		acc = acc * 31 + i;
	/* A load through a number, not a pointer: refused. */
	return *(volatile int *)(unsigned long)acc;
}
