#!/usr/bin/env python3
"""Where tcpscope's per-connection CPU goes, including what bpf_stats cannot
see: `perf record -a -g` (cpu-clock, 4 kHz per CPU) during loadgen churn with
tcpscope attached (the churn benchmark's config: 50-rule policy, 1M-prefix
ASN file, no flow log), then every sample is attributed by its call chain:

  tracing programs   under bpf_trace_run*: each tp_btf program, and the
                     dispatch around them (the kernel's per-run bookkeeping)
  sock_ops           under __cgroup_bpf_run_filter_sock_ops (cc_policy)
  storage free       under bpf_sk_storage_free: the socket storage freed when
                     the kernel destroys the socket
  daemon             samples of the daemon's threads (user and kernel)

and inside each program by the helper it was in (storage creation, storage
lookup, ring buffer, clock, setsockopt, ...). Printed as µs of CPU per
connection (both ends of each connection run on this host).

  bench/profile.py [--seconds 25] [--out FILE]

perf's own overhead applies to every sample alike; the absolute rate during
the profile is lower than in churn.py and is not a benchmark figure.
"""
import collections
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as B  # noqa: E402

SAMPLE_HZ = 4000
ROOTS = (("bpf_trace_run", "tracing"), ("__cgroup_bpf_run_filter_sock_ops", "sock_ops"),
         ("bpf_sk_storage_free", "storage free"))
# Inside a program: the first matching helper in the chain below it.
HELPERS = (("storage create", ("bpf_local_storage_update", "bpf_selem_alloc", "bpf_local_storage_alloc")),
           ("storage lookup", ("bpf_sk_storage_get", "bpf_local_storage_lookup")),
           ("storage delete", ("bpf_sk_storage_del",)),
           ("ring buffer", ("bpf_ringbuf",)),
           ("clock", ("bpf_ktime", "ktime_get")),
           ("setsockopt", ("bpf_sock_ops_setsockopt", "_bpf_setsockopt", "sol_tcp_sockopt",
                           "tcp_set_congestion")),
           ("map lookup", ("lookup_elem", "trie_lookup")),
           ("task info", ("bpf_get_current",)),
           ("probe read", ("bpf_probe_read",)))


def daemon_frame(syms):
    """A daemon sample's place: its innermost tcpscope function (what the
    daemon was doing, whatever library or kernel code it was in), else the
    leaf symbol (e.g. the kernel copying flow-log writes, the HTTP thread)."""
    for s in syms:
        if "tcpscope::" in s:
            name = s.split("(", 1)[0]
            return name.replace("tcpscope::", "").replace("(anonymous namespace)::", "")[:60]
    return (syms[0].split("(", 1)[0] if syms else "?")[:60]


def attribute(script_text, daemon_pid):
    """perf script output -> Counter of (part, program, helper) sample counts, total samples."""
    parts = collections.Counter()
    total = 0
    for block in script_text.split("\n\n"):
        lines = block.strip().split("\n")
        if len(lines) < 1 or not lines[0].strip():
            continue
        total += 1
        head = lines[0].split()
        pid = int(head[1].split("/")[0]) if len(head) > 1 and head[1].split("/")[0].isdigit() else -1
        syms = [l.split(None, 1)[1] if len(l.split(None, 1)) > 1 else "" for l in (x.strip() for x in lines[1:])]
        if pid == daemon_pid:
            parts[("daemon", "", daemon_frame(syms))] += 1
            continue
        for i, s in enumerate(syms):
            root = next((name for prefix, name in ROOTS if s.startswith(prefix)), None)
            if root is None:
                continue
            below = syms[:i]
            prog = next((b.split("_", 3)[-1] for b in below if b.startswith("bpf_prog_")), None)
            if root == "storage free":
                prog = "-"
            elif prog is None:
                prog = "(dispatch)"
            helper = next((name for name, keys in HELPERS if any(any(k in b for k in keys) for b in below)),
                          "program itself")
            parts[(root, prog, helper)] += 1
            break
    return parts, total


def main():
    args = B.parse_root_churn_args("profile.py", __doc__, seconds=25)
    if subprocess.run(["perf", "--version"], capture_output=True).returncode != 0:
        raise SystemExit("profile.py: perf not found (Debian: linux-perf)")
    record_s = max(2.0, args.seconds - 6)
    with B.churn_with_tcpscope("profile", args) as (tmp, net, server, d):
        data = tmp / "perf.data"
        B.churn(net, server, 1, args.threads)  # warm-up

        def record():
            time.sleep(3)
            subprocess.run(["perf", "record", "-a", "-g", "-F", str(SAMPLE_HZ), "-o", str(data),
                            "sleep", str(record_s)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=record_s + 60)
        t = threading.Thread(target=record)
        t.start()
        r = B.churn(net, server, args.seconds, args.threads)
        t.join()
        daemon_pid = d.pid
    if not data.exists():
        raise SystemExit("profile.py: perf record wrote nothing (perf_event_paranoid? run as root)")
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,pid,ip,sym"],
                          capture_output=True, text=True, timeout=600).stdout
    parts, total = attribute(text, daemon_pid)
    conns = r["rate"] * record_s  # connections made while perf recorded

    def us(n):
        return round(n / SAMPLE_HZ / conns * 1e6, 3)

    by_prog = collections.defaultdict(collections.Counter)
    for (root, prog, helper), n in parts.items():
        by_prog[(root, prog)][helper] += n
    rows, result_rows = [], []
    for (root, prog), helpers in sorted(by_prog.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(helpers.values())
        top = helpers.most_common(8)  # the daemon has many places: its largest, the rest as "other"
        rest = n - sum(v for _, v in top)
        split = ", ".join(f"{h} {us(v):.2f}" for h, v in top if us(v) >= 0.005)
        if rest and us(rest) >= 0.005:
            split += f", other {us(rest):.2f}"
        rows.append([root, prog, f"{us(n):.2f}", f"{100 * n / total:.2f}", split])
        result_rows.append({"part": root, "program": prog, "us_per_conn": us(n),
                            "pct_of_samples": round(100 * n / total, 3),
                            "by_helper_us_per_conn": {h: us(v) for h, v in helpers.most_common(20)}})
    ours = sum(parts.values())
    cpu_us_per_conn = total / SAMPLE_HZ / conns * 1e6
    print(f"profile: {r['rate']:.0f} conn/s under perf, {conns:.0f} connections in {record_s:g} s, "
          f"{total} samples; all CPU: {cpu_us_per_conn:.1f} µs per connection (idle included)")
    print(B.fmt_table(["part", "program", "µs/conn", "% of samples", "inside (µs/conn)"], rows))
    print(f"tcpscope in all: {us(ours):.2f} µs per connection ({100 * ours / total:.1f} % of the samples)")
    B.write_result("profile", {"benchmark": "profile", "seconds": args.seconds, "record_seconds": record_s,
                               "connections_per_s_under_perf": round(r["rate"]), "samples": total,
                               "sample_hz": SAMPLE_HZ, "all_cpu_us_per_conn": round(cpu_us_per_conn, 2),
                               "tcpscope_us_per_conn": us(ours), "parts": result_rows}, args.out)


if __name__ == "__main__":
    main()
