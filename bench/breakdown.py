#!/usr/bin/env python3
"""Where a new connection's cost goes: the whole machine's CPU, profiled
with and without an observer, compared by part.

The load is bench/edge.py's `close` workload (nginx serving 2 kB to wrk over
short connections, both ends on this host). Runs alternate: baseline, each
variant, baseline, ... for --rounds rounds; each is `perf record -a -g -e
cpu-clock` over one wrk run. Every sample of every CPU is attributed to one
part by its call chain, first match wins:

  observer process    the daemon's (or the floor loader's) own threads, user
                      and kernel, by what they were doing (--daemon-detail)
  BPF program         a frame of a BPF program: its name, and inside it the
                      helper it was in (storage lookup or creation, ring
                      buffer, clock, ...)
  tracepoint dispatch the kernel's code that calls the tracing programs
                      (__traceiter_*, __bpf_trace_*, bpf_trace_run*)
  cgroup-BPF dispatch __cgroup_bpf_run_filter_* (setsockopt, sysctl, sock_ops)
  storage free        the socket storage freed as the kernel destroys a socket
  RCU and slab frees  kfree_rcu's batches and slab frees after a grace period
  memcg charging      charging and uncharging kernel memory to memory cgroups
  ring wake-ups       irq_work and wake-ups of the ring's reader
  wrk, nginx, softirq, other, idle
                      what the load itself did (its own code, TCP, the veth),
                      and idle time

Each part is reported in µs of CPU per connection (samples / rate / wrk's
connections), the baseline's beside each variant's, and the difference: what
the variant added to each part. The machine's CPU is all accounted (idle is
a part), so the differences add up to the variant's whole cost per
connection, and the rate ratio measured in the same runs is compared with
the one the profile implies (baseline CPU per connection over the
variant's). What perf's own sampling costs applies to every run alike.

  bench/breakdown.py [--variants floor-flows,tcpscope] [--rounds 3] [--seconds 8]
                     [--connections 64] [--workers 1] [--out FILE]

Needs root and perf (Debian: linux-perf). Prints a table, writes JSON
(bench/results/breakdown.json by default).
"""
import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as B  # noqa: E402
import edge as E  # noqa: E402

SAMPLE_HZ = 1999

# Parts found anywhere in the chain (leaf first), checked in this order.
CHAIN_PARTS = (
    ("storage free", ("bpf_sk_storage_free", "bpf_local_storage_destroy")),
    ("tracepoint dispatch", ("bpf_trace_run", "__bpf_trace_", "__traceiter_")),
    ("cgroup-BPF dispatch", ("__cgroup_bpf_run_filter_",)),
    ("RCU and slab frees", ("kfree_rcu_work", "kfree_rcu_monitor", "rcu_do_batch", "kvfree_rcu")),
    ("ring wake-ups", ("bpf_ringbuf_notify", "irq_work_run", "irq_work_single")),
    ("memcg charging", ("__memcg_slab_", "obj_cgroup_charge", "obj_cgroup_uncharge", "memcg_account_kmem",
                        "refill_obj_stock", "drain_obj_stock", "mod_objcg_state")),
)
# Inside a BPF program: the first of these frames between the leaf and it.
HELPERS = (("storage create", ("bpf_local_storage_update", "bpf_selem_alloc", "bpf_local_storage_alloc",
                               "bpf_map_kzalloc")),
           ("storage lookup", ("bpf_sk_storage_get", "bpf_local_storage_lookup")),
           ("ring buffer", ("bpf_ringbuf",)),
           ("clock", ("bpf_ktime", "ktime_get")),
           ("setsockopt", ("bpf_sock_ops_setsockopt", "_bpf_setsockopt", "tcp_set_congestion")),
           ("map lookup", ("lookup_elem", "trie_lookup")),
           ("task info", ("bpf_get_current",)),
           ("probe read", ("bpf_probe_read", "copy_from_kernel_nofault")))


def program_of(frame):
    """bpf_prog_<tag>_<name> -> name; None for any other frame."""
    m = re.match(r"bpf_prog_[0-9a-f]{16}_(\S+)", frame)
    return m.group(1) if m else None


def load_part(comm, frames):
    if comm == "swapper" or any(f.startswith(("do_idle", "cpuidle_")) for f in frames[:6]):
        return "idle"
    softirq = any(f.startswith(("__do_softirq", "handle_softirqs", "net_rx_action")) for f in frames)
    if comm.startswith("wrk"):
        return "wrk: softirq" if softirq else "wrk"
    if comm.startswith("nginx"):
        return "nginx: softirq" if softirq else "nginx"
    if comm.startswith("ksoftirqd"):
        return "ksoftirqd"
    if comm.startswith("kworker"):
        return "kworker"
    return "other"


# The daemon's samples by the stage their innermost frame is in (a release
# build keeps no frame pointers, so the leaf is what every sample has), first
# match wins; kernel frames of its own system calls by what they serve.
DAEMON_STAGES = (
    ("open-flow snapshots", ("bpf_iter", "established_get_first", "listening_get_first", "bpf_seq", "snapshot",
                             "FlowSnapshot", "setns", "OpenFlow")),
    ("ring: read and decode", ("RingReader", "ring_buffer__", "ringbuf_process", "decode_flow_event",
                               "decode_transfer_event", "decode_identity", "event_string", "to_realtime")),
    ("enrich: peer class, ASN, rule", ("Enricher", "PeerClassifier", "AsnDatabase", "PrefixTrie", "prefix_trie",
                                       "RuleNames", "FlowPipeline")),
    ("service names and rankings", ("ServiceNames", "ServiceRanking", "ByteRanking", "AsnRanking", "flat_map")),
    ("metrics of a record", ("metric_values", "holding_terms", "value_if_counted", "input_value", "metric_inputs")),
    ("Prometheus series", ("Aggregator", "PendingHistogram", "prometheus::", "series_for", "size_class")),
    ("distributions (/api/v1)", ("FlowDistributions", "FlowSketch", "__ieee754_log", "log_fma")),
    ("fanout and sinks", ("RecordFanout", "ClosedLoop", "Sink::", "Routed")),
    ("periodic: counters, policy", ("InstalledPolicy", "PolicyMaps", "sample_kernel", "sample_ring", "bpf_obj_get",
                                    "map_lookup", "loaded_congestion", "DaemonHealth", "count_kernel")),
    ("wake-ups and waits", ("epoll", "schedule", "futex", "finish_task_switch", "timerfd", "pthread_cond",
                            "do_syscall", "entry_SYSCALL")),
)


def daemon_stage(frames):
    leaf = frames[0] if frames else "?"
    for stage, keys in DAEMON_STAGES:
        if any(k in leaf for k in keys):
            return stage
    return "other"


def attribute(comm, pid, frames, observer_pid):
    """One sample -> (part, detail)."""
    if pid == observer_pid:
        return "observer process", daemon_stage(frames)
    for i, f in enumerate(frames):
        prog = program_of(f)
        if prog:
            below = frames[:i]
            helper = next((name for name, keys in HELPERS if any(k in b for b in below for k in keys)), "itself")
            return f"BPF program {prog}", helper
    for part, keys in CHAIN_PARTS:
        if any(f.startswith(k) or k in f for f in frames for k in keys):
            return part, frames[0][:50] if frames else "?"
    return load_part(comm, frames), ""


def parse_script(text, observer_pid):
    parts, details = collections.Counter(), collections.Counter()
    for block in text.split("\n\n"):
        lines = [x.strip() for x in block.strip().split("\n") if x.strip()]
        if not lines:
            continue
        head = lines[0]
        m = re.match(r"(.+?)\s+(\d+)\s+\[\d+\]", head)
        if not m:
            continue
        comm, pid = m.group(1), int(m.group(2))
        frames = [x.split(None, 1)[1] if len(x.split(None, 1)) > 1 else "" for x in lines[1:]]
        part, detail = attribute(comm, pid, frames, observer_pid)
        parts[part] += 1
        details[(part, detail)] += 1
    return parts, details


def wakeups(pid):
    """Voluntary context switches of all of a process's threads so far: each
    is a sleep that a wake-up ended."""
    n = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            for line in status.read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    n += int(line.split()[1])
        except OSError:
            pass
    return n


def profiled_run(tmp, net, url, args, variant, tag):
    """One wrk run under perf: (samples per part, per (part, detail),
    connections, seconds, the observer's wake-ups)."""
    v = E.start_variant(tmp, net, variant, tag) if variant != "baseline" else None
    data = Path(tmp) / f"perf-{tag}.data"
    woken = None
    try:
        E.wrk(net, url, 1, args.connections, True)  # warm-up
        woken = wakeups(v.pid) if v else None
        argv = ["perf", "record", "-e", "cpu-clock", "-F", str(SAMPLE_HZ), "-a", "-g", "-o", str(data), "--",
                *net.wrap(net.cli, ["wrk", "-t", "2", "-c", str(args.connections), "-d", f"{args.seconds:g}s",
                                    "-H", "Connection: close", url])]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=args.seconds + 120)
        m = re.search(r"(\d+) requests in ([\d.]+)s", r.stdout)
        if not m:
            raise RuntimeError(f"wrk under perf: {r.stdout} {r.stderr[-2000:]}")
        conns, secs = int(m.group(1)), float(m.group(2))
        if v:
            woken = wakeups(v.pid) - woken
    finally:
        if v:
            v.stop()
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,pid,cpu,ip,sym"],
                          capture_output=True, text=True, timeout=900).stdout
    data.unlink(missing_ok=True)
    parts, details = parse_script(text, v.pid if v else -1)
    return parts, details, conns, secs, woken


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="floor-flows,tcpscope")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--connections", type=int, default=64)
    E.add_build_args(ap)
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("breakdown.py: needs root")
    if subprocess.run(["perf", "--version"], capture_output=True).returncode != 0:
        raise SystemExit("breakdown.py: perf not found (Debian: linux-perf)")
    variants = args.variants.split(",")
    E.check_variants("breakdown.py", variants, args)
    tmp = B.tmpdir("breakdown")
    runs = []
    net = server = None
    try:
        net = B.NetPair()
        server = E.EdgeNginx(net, tmp)
        order = []
        for i in range(args.rounds):
            for v in variants:
                order += [("baseline", f"b{i}-{v}"), (v, f"{v}-{i}")]
        order.append(("baseline", "b-last"))
        for variant, tag in order:
            parts, details, conns, secs, woken = profiled_run(tmp, net, server.url, args, variant, tag)
            runs.append({"variant": variant, "parts": parts, "details": details, "connections": conns,
                         "seconds": secs, "rate": conns / secs, "observer_wakeups_per_s":
                         round(woken / secs, 1) if woken is not None else None})
            B.log(f"{tag}: {conns / secs:.0f} conn/s, {sum(parts.values())} samples")
    finally:
        if server:
            server.close()
        if net:
            net.close()

    def per_conn(run, n):
        return 1e6 * n / SAMPLE_HZ / run["connections"]

    def mean_parts(rs):
        keys = set().union(*(r["parts"] for r in rs))
        return {k: statistics.mean(per_conn(r, r["parts"].get(k, 0)) for r in rs) for k in keys}

    base_runs = [r for r in runs if r["variant"] == "baseline"]
    base = mean_parts(base_runs)
    result = {"benchmark": "breakdown", "seconds_per_run": args.seconds, "rounds": args.rounds,
              "sample_hz": SAMPLE_HZ, "connections": args.connections,
              "baseline": {"rate": round(statistics.mean(r["rate"] for r in base_runs)),
                           "us_per_conn": {k: round(x, 3) for k, x in base.items()}},
              "variants": {}}
    for v in variants:
        v_runs = [r for r in runs if r["variant"] == v]
        ratios = [r["rate"] / B.interleaved_baseline(runs, runs.index(r)) for r in v_runs]
        mine = mean_parts(v_runs)
        keys = sorted(set(base) | set(mine), key=lambda k: -(mine.get(k, 0) - base.get(k, 0)))
        diff = {k: mine.get(k, 0) - base.get(k, 0) for k in keys}
        busy_base = sum(x for k, x in base.items() if k != "idle")
        busy_mine = sum(x for k, x in mine.items() if k != "idle")
        details = collections.Counter()
        for r in v_runs:
            for (part, detail), n in r["details"].items():
                if detail:
                    details[(part, detail)] += per_conn(r, n) / len(v_runs)
        result["variants"][v] = {
            "ratios": [round(x, 4) for x in ratios], "median_ratio": round(statistics.median(ratios), 4),
            "us_per_conn": {k: round(mine.get(k, 0), 3) for k in keys},
            "added_us_per_conn": {k: round(diff[k], 3) for k in keys},
            "all_cpu_us_per_conn": round(sum(mine.values()), 2),
            "busy_cpu_us_per_conn": round(busy_mine, 2),
            "observer_wakeups_per_s": statistics.mean(r["observer_wakeups_per_s"] for r in v_runs),
            "ratio_implied_by_busy_cpu": round(busy_base / busy_mine, 4),
            "details_us_per_conn": {f"{p}: {d}": round(x, 3) for (p, d), x in details.most_common(60)}}
        print(f"\n{v}: rate ratio in these runs, median {statistics.median(ratios):.3f} "
              f"({', '.join(f'{x:.3f}' for x in ratios)}); busy CPU per connection {busy_base:.1f} µs "
              f"(baseline) -> {busy_mine:.1f} µs, which implies {busy_base / busy_mine:.3f}; the observer woke "
              f"{statistics.mean(r['observer_wakeups_per_s'] for r in v_runs):.0f} times a second")
        rows = [[k, f"{base.get(k, 0):.2f}", f"{mine.get(k, 0):.2f}", f"{diff[k]:+.2f}"] for k in keys
                if abs(diff[k]) >= 0.02 or mine.get(k, 0) >= 0.05]
        rows.append(["all", f"{sum(base.values()):.2f}", f"{sum(mine.values()):.2f}",
                     f"{sum(mine.values()) - sum(base.values()):+.2f}"])
        print(B.fmt_table(["part (µs of CPU per connection)", "baseline", v, "added"], rows))
        top = [[f"{p}: {d}", f"{x:.3f}"] for (p, d), x in details.most_common(25) if x >= 0.01]
        if top:
            print(B.fmt_table(["inside (µs per connection)", v], top))
    B.write_result("breakdown", result, args.out)


if __name__ == "__main__":
    main()
