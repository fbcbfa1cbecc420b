#!/usr/bin/env python3
"""Connection churn: short request/response TCP connections per second over a
veth between two network namespaces, with nothing attached (baseline) and with
each way an operator could get per-flow TCP figures:

  tcpscope          tcpscope run: the 50-rule policy on a cgroup holding the load
                    generator and the server, a 1M-prefix pfx2as ASN file, flow log on
                    (its transfer lines sampled as by default)
  tcpscope-nolog    the same without the flow log (the shipped default has none)
  tcpscope-default  the shipped default: no rules, no flow log, no ASN data but a
                    one-line prefix file that names the benchmark's /24 (to count its flows)
  tcpscope-default-log  the same with a flow log (transfer lines of one flow in
                    16, the default transfer_sampling_rate)
  tcplife           libbpf-tools tcplife (Debian libbpf-tools), all flows, stdout to a file
  tcplife-bpfcc     bcc tcplife-bpfcc (Debian bpfcc-tools), all flows, stdout to a file
  ss                `ss -tin` in the server namespace once per second (a tcp_info poller)

A baseline run precedes each variant and one closes the sequence; each
variant's ratio is to the mean of the baselines either side of it, and the
spread of all baselines is the noise. Observer start-up (tcpscope loading the
ASN file, bcc compiling its program) is outside the measured window; the
window ends when the observer has drained what the load produced.

  bench/churn.py [--seconds 60] [--threads 4] [--variants a,b,...]
                 [--service-cgroups N [--service-spread even|zipf]] [--out FILE]

--service-cgroups N spreads the server's connections over N cgroups of their
own (`svc-K.service`, a listener made in each on a port of its own), so that
every record names one of N services: each as busy as the next (even) or the
K-th with weight 1/K (zipf, as a host's services carry traffic).
--one-service keeps the N listeners and ports, and the spread over them, but
makes every listener in one cgroup: the same load, one service. The cost of
naming N services is the daemon µs per connection of a run against that of
the same run with --one-service.

Needs root. Prints a table, writes JSON (bench/results/churn.json by default).
"""
import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as B  # noqa: E402

ALL_VARIANTS = ["tcpscope", "tcpscope-nolog", "tcplife", "tcplife-bpfcc", "ss"]


# ---------------------------------------------------------------- ss poller (child mode)

def ss_poller(out, interval):
    """Runs in the server namespace: `ss -tin` every `interval` s; counts the
    connections of the benchmark's addresses that showed up with tcp_info."""
    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    polls, seen, lines_total = 0, 0, 0
    next_t = time.monotonic()
    while not stop:
        text = subprocess.run(["ss", "-tin"], capture_output=True, text=True).stdout
        polls += 1
        rows = text.splitlines()
        lines_total += len(rows)
        tuples = set()
        for i, row in enumerate(rows):
            f = row.split()
            if len(f) >= 5 and f[0] not in ("State", "TIME-WAIT") and "198.18." in row:
                info = rows[i + 1] if i + 1 < len(rows) else ""
                if "rtt:" in info:
                    tuples.add((f[3], f[4]))
        seen += len(tuples)
        next_t += interval
        delay = next_t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    Path(out).write_text(json.dumps({"polls": polls, "seen": seen, "lines": lines_total,
                                     "children_maxrss_kib": ru.ru_maxrss}))


# ---------------------------------------------------------------- observers

class Observer:
    name = "?"
    pid = None
    records_expected_per_conn = 2  # both ends of every connection live on this host

    def start(self):
        pass

    def drained(self):
        """Wait until what the load produced is processed."""
        B.wait_cpu_idle(self.pid)

    def stop(self):
        pass

    def result(self, connections):
        return {}


class TcpscopeObserver(Observer):
    """sampling_rate: transfer_sampling_rate (None: the default). server_only:
    the client's namespace left alone (ignore_netns), as on an edge server
    whose clients are remote: half the flows, the server's ends."""

    def __init__(self, ctx, flow_log, default_config=False, sampling_rate=None, server_only=False):
        self.ctx, self.with_log, self.default_config = ctx, flow_log, default_config
        self.sampling_rate, self.server_only = sampling_rate, server_only
        self.name = ("tcpscope-default" + ("-log" if flow_log else "") if default_config
                     else "tcpscope" if flow_log else "tcpscope-nolog")
        if sampling_rate == 1:
            self.name += "-every"
        if server_only:
            self.name += "-server"

    def start(self):
        c = self.ctx
        port = B.free_port()
        self.flow_log = c.tmp / f"flows-{port}.ndjson" if self.with_log else None
        if self.default_config:
            own = B.write_pfx2as(c.tmp / "pfx2as-own.tsv", 0, own=c.net)
            cfg = B.write_config(c.tmp / f"tcpscope-{port}.yaml", port=port, flow_log=self.flow_log,
                                 prefix_file=own, cgroup=c.cgroup.path, rules=0, peer_classes=False,
                                 transfer_sampling_rate=self.sampling_rate,
                                 ignore_netns=[c.net.cli] if self.server_only else ())
        else:
            cfg = B.write_config(c.tmp / f"tcpscope-{port}.yaml", port=port, flow_log=self.flow_log,
                                 prefix_file=c.pfx2as, cgroup=c.cgroup.path, rules=c.args.rules)
        self.d = B.Tcpscope(c.tmp, cfg, port)
        self.pid = self.d.pid
        self.start_seconds = self.d.start_seconds
        self.lost0 = self.d.metric("tcpscope_records_lost_total") or 0
        self.scrapes0 = self.d.scrapes
        self.records0 = self.d.metric("tcpscope_records_total") or 0
        self.ours0 = self.d.metric("tcpscope_flows_total", {"asn": B.BENCH_ASN}) or 0
        self.programs = sorted(p["name"] for p in B.bpf_programs_of(self.pid).values())

    def drained(self):
        # The daemon drains every 100 ms; wait until the count of the
        # benchmark's own flows stops moving (the record count never does:
        # each of these scrapes is a connection, two records).
        last = -1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            n = self.d.metric("tcpscope_flows_total", {"asn": B.BENCH_ASN}) or 0
            if n == last:
                break
            last = n
            time.sleep(1.0)  # a server socket whose last ACK was lost closes after a FIN resent
        self.ours1 = last
        time.sleep(0.3)  # the last scrape's own records drained (the daemon drains every 100 ms)
        self.scrapes1 = self.d.scrapes
        # The services the benchmark's flows were counted under (label values
        # of their series: the top-N plus "other").
        self.service_labels = sorted({m.group(1) for m in re.finditer(
            r'^tcpscope_flows_total\{[^}]*asn="' + str(B.BENCH_ASN) + r'"[^}]*service="([^"]*)"',
            self.d.metrics(), re.M)})
        self.records1 = self.d.metric("tcpscope_records_total")
        self.lost1 = self.d.metric("tcpscope_records_lost_total") or 0
        self.dropped = self.d.metric("tcpscope_flow_log_dropped_total") or 0
        # A tracing program that fires while the same program is already
        # running on that CPU (process context interrupted by a softirq) is
        # skipped by the kernel and counted here.
        self.recursion_misses = {p["name"]: p.get("recursion_misses", 0)
                                 for p in B.bpf_programs_of(self.pid).values() if p.get("recursion_misses")}

    def stop(self):
        self.rc = self.d.stop() if hasattr(self, "d") else None

    def result(self, connections):
        expected = connections if self.server_only else 2 * connections
        r = {"records_lost_total": self.lost1 - self.lost0, "start_seconds": round(self.start_seconds, 2),
             "bpf_programs": self.programs, "records_total_delta": self.records1 - self.records0,
             "flow_log_dropped": self.dropped, "bpf_recursion_misses": self.recursion_misses,
             "service_labels": self.service_labels,
             "exit_code": self.rc}
        if self.flow_log:
            detail = {}
            recorded = B.count_flow_log(self.flow_log, self.ctx.net.netns_ids.values(), detail=detail)
            r["flow_log_breakdown"] = detail
            r["netns_ids"] = self.ctx.net.netns_ids
            r["flow_log_bytes"] = self.flow_log.stat().st_size if self.flow_log.exists() else 0
            r["flow_log_lines"] = B.count_lines(self.flow_log)
            self.flow_log.unlink(missing_ok=True)
            r["how_counted"] = "flow-log records of the benchmark's two network namespaces"
        elif getattr(self.ctx.args, "service_cgroups", 0):
            # The series of services that leave the top-N are removed, and
            # their counts with them: count records instead, less the ones
            # of the observer's own scrapes (two a scrape).
            recorded = int(self.records1 - self.records0) - 2 * (self.scrapes1 - self.scrapes0)
            r["how_counted"] = "tcpscope_records_total delta less 2 per scrape of the window"
        else:
            # Both ends of the benchmark's connections have a remote address in
            # its own /24, which the ASN file maps to BENCH_ASN.
            recorded = int(self.ours1 - self.ours0)
            r["how_counted"] = f'tcpscope_flows_total{{asn="{B.BENCH_ASN}"}} delta (the benchmark\'s own /24)'

        r.update(flows_expected=expected, flows_recorded=recorded, flows_missed=max(0, expected - recorded))
        return r


class LineToolObserver(Observer):
    """A tool that prints one line per finished flow (tcplife, tcplife-bpfcc)."""

    def __init__(self, ctx, name, argv, env=None):
        self.ctx, self.name, self.argv, self.env = ctx, name, argv, env

    def start(self):
        self.out_path = self.ctx.tmp / f"{self.name}.out"
        self.err_path = self.ctx.tmp / f"{self.name}.err"
        self.out, self.err = open(self.out_path, "w"), open(self.err_path, "w")
        t0 = time.monotonic()
        self.p = subprocess.Popen(B.with_tracefs(self.argv), stdout=self.out, stderr=self.err,
                                  env={**os.environ, **(self.env or {})})
        self.pid = self.p.pid
        # Attached once the process holds BPF programs (bcc compiles first).
        B.wait_for(lambda: B._fdinfo_ids(self.pid, "prog_id") or self.p.poll() is not None, 300,
                   f"{self.name} attach", interval=0.5)
        if self.p.poll() is not None:
            raise RuntimeError(f"{self.name} exited: {self.err_path.read_text()[-2000:]}")
        time.sleep(1)  # the tool opens its buffers after the programs load
        self.start_seconds = time.monotonic() - t0
        self.programs = sorted(p["name"] for p in B.bpf_programs_of(self.pid).values())

    def stop(self):
        if not hasattr(self, "p"):
            return
        self.rc = B.stop_process(self.p, sig=signal.SIGINT, timeout=30)
        self.out.close()
        self.err.close()

    def result(self, connections):
        recorded = 0
        with open(self.out_path, errors="replace") as f:
            for line in f:
                if "198.18." in line:
                    recorded += 1
        err = self.err_path.read_text(errors="replace")
        lost = sum(int(x) for x in re.findall(r"[Ll]ost (\d+)", err))
        expected = 2 * connections
        r = {"flows_expected": expected, "flows_recorded": recorded, "flows_missed": max(0, expected - recorded),
             "lost_reported": lost, "start_seconds": round(self.start_seconds, 2), "bpf_programs": self.programs,
             "exit_code": self.rc, "how_counted": "output lines naming 198.18.x addresses"}
        self.out_path.unlink(missing_ok=True)
        return r


class SsObserver(Observer):
    name = "ss"
    records_expected_per_conn = 1

    def __init__(self, ctx):
        self.ctx = ctx

    def start(self):
        self.out = self.ctx.tmp / "ss-poller.json"
        self.out.unlink(missing_ok=True)
        # The poller runs in the server namespace, where one socket per connection lives.
        self.p = subprocess.Popen(["ip", "netns", "exec", self.ctx.net.srv, sys.executable, __file__,
                                   "--ss-poller", str(self.out), "--ss-interval", "1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.pid = self.p.pid
        time.sleep(1.5)
        if self.p.poll() is not None:
            raise RuntimeError(f"ss poller exited: {self.p.stderr.read()}")

    def drained(self):
        pass

    def stop(self):
        if hasattr(self, "p"):
            self.rc = B.stop_process(self.p, timeout=10)

    def result(self, connections):
        d = json.loads(self.out.read_text())
        seen = min(d["seen"], connections)
        return {"flows_expected": connections, "flows_recorded": seen, "flows_missed": connections - seen,
                "polls": d["polls"], "ss_lines_per_poll": round(d["lines"] / max(1, d["polls"])),
                "children_maxrss_kib": d["children_maxrss_kib"],
                "how_counted": "server-side connections that appeared with tcp_info in a poll"}


def bcc_env():
    """bcc compiles its program against kernel headers. This kernel ships none
    (no /lib/modules/$(uname -r)/build, no CONFIG_IKHEADERS); Debian's 6.1
    headers, merged into one tree, let it compile. tcplife-bpfcc reads the
    tracepoint's own fields (addresses, ports, states) from the tracepoint
    format, so its event path and costs are those of a matching build; only
    its TX_KB/RX_KB columns (read from struct tcp_sock through 6.1 offsets)
    are wrong. Returns (env, note) or (None, reason)."""
    if not Path("/usr/sbin/tcplife-bpfcc").exists():
        return None, "bpfcc-tools not installed"
    if Path(f"/lib/modules/{os.uname().release}/build").exists():
        return {}, ""
    common = sorted(Path("/usr/src").glob("linux-headers-*-common"))
    arch = sorted(p for p in Path("/usr/src").glob("linux-headers-*-amd64") if "cloud" not in p.name and "rt" not in p.name)
    if not common or not arch:
        return None, "no kernel headers for bcc (install linux-headers-amd64)"
    kdir = Path("/tmp/tcpscope-bench-bcc-kdir")
    if not (kdir / "include" / "linux" / "kconfig.h").exists():
        subprocess.run(["rm", "-rf", str(kdir)])
        kdir.mkdir(parents=True)
        subprocess.run(["cp", "-as", f"{common[-1]}/.", f"{kdir}/"], check=True)
        subprocess.run(["cp", "-asf", f"{arch[-1]}/.", f"{kdir}/"], check=True)
    return ({"BCC_KERNEL_SOURCE": str(kdir)},
            f"compiled against {arch[-1].name} (this kernel ships no headers): byte columns invalid, "
            "event path as on a matching build")


def make_observer(ctx, name):
    if name == "tcpscope":
        return TcpscopeObserver(ctx, True), ""
    if name == "tcpscope-nolog":
        return TcpscopeObserver(ctx, False), ""
    if name == "tcpscope-default":
        return TcpscopeObserver(ctx, False, default_config=True), ""
    if name == "tcpscope-default-log":
        return TcpscopeObserver(ctx, True, default_config=True), ""
    if name.startswith("tcpscope-default") and name.endswith(("-every", "-server")):
        base = name.removesuffix("-server").removesuffix("-every")
        if base in ("tcpscope-default", "tcpscope-default-log"):
            return TcpscopeObserver(ctx, base.endswith("-log"), default_config=True,
                                    sampling_rate=1 if "-every" in name else None,
                                    server_only=name.endswith("-server")), ""
    if name == "tcplife":
        if not Path("/usr/sbin/tcplife").exists():
            return None, "libbpf-tools not installed"
        return LineToolObserver(ctx, "tcplife", ["/usr/sbin/tcplife"]), ""
    if name == "tcplife-bpfcc":
        env, note = bcc_env()
        if env is None:
            return None, note
        return LineToolObserver(ctx, "tcplife-bpfcc", ["/usr/bin/python3", "/usr/sbin/tcplife-bpfcc"], env), note
    if name == "ss":
        return SsObserver(ctx), ""
    raise SystemExit(f"unknown variant {name}")


# ---------------------------------------------------------------- runs

class Ctx:
    pass


def measured_run(ctx, name, observer=None):
    a = ctx.args
    if observer:
        try:
            observer.start()
            cpu0 = B.proc_cpu_seconds(observer.pid)
            load = B.loadavg()[0]
            t0 = time.monotonic()
            r = B.churn(ctx.net, ctx.server, a.seconds, a.threads)
            observer.drained()
            window = time.monotonic() - t0
            cpu1 = B.proc_cpu_seconds(observer.pid)
            rss, hwm = B.proc_mem_kib(observer.pid)
        finally:
            observer.stop()
    else:
        load = B.loadavg()[0]
        r = B.churn(ctx.net, ctx.server, a.seconds, a.threads)
    run = {"variant": name, "rate": r["rate"], "connections": r["connections"], "failed": r["failed"],
           "seconds": r["seconds"], "loadavg_1m_before": load}
    if r["failed"]:
        run["first_errno"] = r["first_errno"]
    if observer:
        cpu = cpu1 - cpu0
        run.update(observer_cpu_s=round(cpu, 3), observer_cpu_pct_core=round(100 * cpu / r["seconds"], 2),
                   window_s=round(window, 2), rss_end_kib=rss, peak_rss_kib=hwm)
        run.update(observer.result(r["connections"]))
        if run.get("children_maxrss_kib"):
            run["peak_rss_kib"] = max(hwm, run["children_maxrss_kib"])
        run["missed_fraction"] = round(run["flows_missed"] / max(1, run["flows_expected"]), 6)
    B.log(f"{name}: {r['rate']:.0f} conn/s" + (f", observer {run['observer_cpu_s']} CPU s, "
                                                f"missed {run['flows_missed']}/{run['flows_expected']}"
                                                if observer else ""))
    return run


def summarize(runs, skipped):
    noise = B.baseline_noise([r["rate"] for r in runs if r["variant"] == "baseline"])
    variants = []
    for i, r in enumerate(runs):
        if r["variant"] == "baseline":
            continue
        ref = B.interleaved_baseline(runs, i)
        v = dict(r)
        v["baseline_ref_rate"] = round(ref, 1)
        v["ratio"] = round(r["rate"] / ref, 4)
        if r["variant"].startswith("tcpscope"):
            flows_per_s = r["flows_recorded"] / r["seconds"]
            v["flows_per_s"] = round(flows_per_s, 1)
            v["cpu_pct_core_per_10k_flows_s"] = round(r["observer_cpu_pct_core"] / (flows_per_s / 1e4), 3) \
                if flows_per_s else None
            v["daemon_us_per_conn"] = round(1e6 * r["observer_cpu_s"] / r["connections"], 3) \
                if r["connections"] else None
        variants.append(v)
    for name, why in skipped.items():
        variants.append({"variant": name, "skipped": why})
    return noise, variants


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--threads", type=int, default=4, help="parallel clients")
    ap.add_argument("--server-threads", type=int, default=2, help="server threads (loadgen) or nginx workers")
    ap.add_argument("--load", choices=("loadgen", "nginx"), default="loadgen",
                    help="loadgen: bench/loadgen.cc TCP request/response (default); "
                         "nginx: nginx + wrk -H 'Connection: close' (HTTP)")
    ap.add_argument("--variants", default=",".join(ALL_VARIANTS))
    ap.add_argument("--prefixes", type=int, default=1000000, help="lines of the generated pfx2as file")
    ap.add_argument("--rules", type=int, default=50, help="cc_policy rules")
    ap.add_argument("--service-cgroups", type=int, default=0,
                    help="spread the server's connections over this many cgroups (services)")
    ap.add_argument("--service-spread", choices=("even", "zipf"), default="even",
                    help="how the connections spread over the services")
    ap.add_argument("--one-service", action="store_true",
                    help="the --service-cgroups listeners all in one cgroup (the same load, one service)")
    ap.add_argument("--out", help="JSON output (default bench/results/churn.json)")
    ap.add_argument("--ss-poller", help=argparse.SUPPRESS)
    ap.add_argument("--ss-interval", type=float, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ss_poller:
        return ss_poller(args.ss_poller, args.ss_interval)
    if os.geteuid() != 0:
        raise SystemExit("churn.py: needs root (network namespaces, BPF)")
    if args.service_cgroups and args.load != "loadgen":
        raise SystemExit("churn.py: --service-cgroups needs --load loadgen")

    ctx = Ctx()
    ctx.args = args
    ctx.tmp = B.tmpdir("churn")
    ctx.cgroup = B.Cgroup()
    ctx.net = None
    runs, skipped, notes = [], {}, {}
    try:
        B.tcpscope_binary()
        B.loadgen_binary()
        ctx.net = B.NetPair(cgroup=ctx.cgroup)
        ctx.pfx2as = B.write_pfx2as(ctx.tmp / "pfx2as.tsv", args.prefixes, own=ctx.net)
        ctx.server = ChurnServerWrap(ctx)
        B.churn(ctx.net, ctx.server, min(2.0, args.seconds), args.threads)  # warm-up
        names = [v for v in args.variants.split(",") if v and v != "baseline"]
        runs.append(measured_run(ctx, "baseline"))
        for name in names:
            obs, why = make_observer(ctx, name)
            if obs is None:
                skipped[name] = why
                B.log(f"{name}: skipped: {why}")
                continue
            if why:
                notes[name] = why
            runs.append(measured_run(ctx, name, obs))
            runs.append(measured_run(ctx, "baseline"))
    finally:
        if ctx.net:
            ctx.net.close()
        if getattr(ctx, "server", None) is not None and hasattr(ctx.server, "remove_cgroups"):
            ctx.server.remove_cgroups()
        ctx.cgroup.close()
    noise, variants = summarize(runs, skipped)
    for v in variants:
        if v["variant"] in notes:
            v["note"] = notes[v["variant"]]
    rows = []
    for v in variants:
        if "skipped" in v:
            rows.append([v["variant"], "skipped: " + v["skipped"], "", "", "", "", "", ""])
            continue
        rows.append([v["variant"], round(v["rate"]), B.ratio_text(noise, v["ratio"]), v["observer_cpu_s"],
                     v.get("daemon_us_per_conn", ""), round(v["peak_rss_kib"] / 1024, 1),
                     f"{v['flows_missed']}/{v['flows_expected']}",
                     v.get("records_lost_total", v.get("lost_reported", ""))])
    print(f"connection churn ({args.load}): {args.threads} clients, {args.seconds:g} s per run, "
          + (f"{args.service_cgroups} listeners ({args.service_spread}) in "
             f"{1 if args.one_service else args.service_cgroups} services, " if args.service_cgroups else "")
          + f"baseline {noise['mean']:.0f} conn/s (stdev {noise['stdev_pct']}% over {noise['baseline_runs']} runs)")
    print(B.fmt_table(["variant", "conn/s", "ratio", "CPU s", "µs/conn", "peak MiB", "missed/expected", "lost"], rows))
    if noise["invalid"]:
        print(f"RUN INVALID: {noise['invalid']}; no ratio is printed.")
    result = {"benchmark": "churn", "load": args.load, "seconds_per_run": args.seconds, "client_threads": args.threads,
              "server_threads": args.server_threads, "request_bytes": 100, "response_bytes": 1000,
              "asn_prefixes": args.prefixes, "policy_rules": args.rules,
              "service_cgroups": args.service_cgroups, "service_spread": args.service_spread,
              "one_service": args.one_service,
              "baseline_noise": noise, "variants": variants, "runs": runs}
    B.write_result("churn", result, args.out)


def ChurnServerWrap(ctx):
    a = ctx.args  # floor.py's and the others' have no service options
    if a.load == "nginx":
        return B.NginxServer(ctx.net, ctx.tmp, workers=a.server_threads)
    return B.ChurnServer(ctx.net, ctx.tmp, threads=a.server_threads, cgroups=getattr(a, "service_cgroups", 0),
                         spread=getattr(a, "service_spread", "even"), one_cgroup=getattr(a, "one_service", False))


if __name__ == "__main__":
    main()
