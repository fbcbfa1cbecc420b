// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The cgroups made while the daemon runs, kept by id for its service names
 * (src/enrich/service_names.h): the daemon learns a cgroup from its
 * directory, which a short-lived one removes before it is read; its
 * sockets' records still carry its id.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "tcpscope/flow_event.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, TCPSCOPE_CGROUPS_MADE);
	__type(key, __u64);
	__type(value, struct tcpscope_cgroup_made);
} cgroups_made SEC(".maps");

SEC("tp_btf/cgroup_mkdir")
int BPF_PROG(on_cgroup_mkdir, struct cgroup *cgrp, const char *path)
{
	struct tcpscope_cgroup_made made = {};
	struct cgroup *parent;
	__u64 id;
	int level;

	/* cgroup v2 only: the default hierarchy is the first (id 0); a hybrid
	 * host makes each unit's cgroup in the v1 name=systemd one too. */
	if (BPF_CORE_READ(cgrp, root, hierarchy_id) != 0)
		return 0;
	level = BPF_CORE_READ(cgrp, level);
	if (level < 1)
		return 0;
	bpf_core_read(&parent, sizeof(parent), &cgrp->ancestors[level - 1]);
	made.parent_id = BPF_CORE_READ(parent, kn, id);
	/* A name that does not fit is left out rather than cut. */
	if (bpf_probe_read_kernel_str(made.name, sizeof(made.name), BPF_CORE_READ(cgrp, kn, name)) >=
	    (long)sizeof(made.name))
		return 0;
	id = BPF_CORE_READ(cgrp, kn, id);
	bpf_map_update_elem(&cgroups_made, &id, &made, BPF_ANY);
	return 0;
}
