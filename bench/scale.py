#!/usr/bin/env python3
"""Memory at scale: N concurrent open TCP connections (both ends on this host,
so 2N sockets) held between two network namespaces, with and without tcpscope,
and the daemon with a 1M-prefix ASN file loaded.

Kernel side: tcpscope keeps per-socket state in BPF_MAP_TYPE_SK_STORAGE
(allocated from slab, charged to the memory cgroup of the process that
created the map, freed with the socket). The daemon runs in a memory cgroup
of its own, so its kernel-memory counter's growth while the connections are
open, per socket, is tcpscope's cost, unaffected by whatever else allocates
on the machine. Cross-check (noisy on a shared machine): /proc/meminfo Slab
growth with the daemon minus without it. Fixed kernel memory: the maps'
memlock (bpftool map show; the ring buffer dominates).

Daemon side: RSS with no ASN data, with the 1M-prefix file, and with N open
flows after an open-flow snapshot (which holds one decoded record per open
flow). 1M flows is extrapolated linearly from N (the figures say what was
measured and what was extrapolated).

  bench/scale.py [--connections 100000] [--prefixes 1000000] [--out FILE]
"""
import argparse
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as B  # noqa: E402



def meminfo():
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        k, v = line.split(":", 1)
        out[k] = int(v.split()[0])  # KiB
    return out


def slab_kib():
    m = meminfo()
    return m["Slab"]


def slab_caches():
    """Bytes held by each slab cache (objects x object size, /proc/slabinfo)."""
    out = {}
    try:
        with open("/proc/slabinfo") as f:
            for line in f:
                if line.startswith(("slabinfo", "#")):
                    continue
                parts = line.split()
                out[parts[0]] = int(parts[2]) * int(parts[3])
    except (OSError, ValueError, IndexError):
        pass
    return out


def settle(seconds=2.0):
    time.sleep(seconds)


def fds_per_process():
    import resource
    return max(1000, resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 1000)


def hold_connections(net, tmp, n):
    """Opens n connections cli -> srv, spread over as many server/client
    process pairs (one port each) as the fd limit needs; returns once all are open."""
    lg = B.loadgen_binary()
    per = fds_per_process()
    k = (n + per - 1) // per
    t0 = time.monotonic()
    clients = []
    for i in range(k):
        port = 9000 + i
        count = min(per, n - i * per)
        sready, cready = tmp / f"hold-serve-{i}.ready", tmp / f"hold-{i}.ready"
        sready.unlink(missing_ok=True)
        cready.unlink(missing_ok=True)
        srv = net.spawn(net.srv, lg, "hold-serve", "--bind", net.srv_v4, "--ports", port, "--ready", sready,
                        "--max-fds", count + 100)
        B.wait_for(lambda: sready.exists() or srv.poll() is not None, 10, "hold server")
        if srv.poll() is not None:
            raise RuntimeError(f"hold server: {srv.stderr.read()}")
        cli = net.spawn(net.cli, lg, "hold", "--addr", net.srv_v4, "--ports", port, "--count", count,
                        "--ready", cready)
        clients.append((cli, cready))
    for cli, cready in clients:
        B.wait_for(lambda: cready.exists() or cli.poll() is not None, 600, f"{n} connections")
        if cli.poll() is not None:
            raise RuntimeError(f"hold client: {cli.stderr.read()}")
    return k, time.monotonic() - t0


def sockets_in(net, ns):
    r = net.run(ns, "ss", "-s", check=False)
    m = re.search(r"TCP:\s+(\d+)", r.stdout)
    return int(m.group(1)) if m else None


def measure_phase(tmp, n, cg, daemon=None, memcg=None):
    """Slab growth (KiB) while n connections are open; the network pair is torn down after."""
    net = B.NetPair(cgroup=cg)
    try:
        settle(1)
        s0 = slab_kib()
        c0 = slab_caches()
        k0 = memcg.kernel_bytes() if memcg else None
        procs, open_s = hold_connections(net, tmp, n)
        settle(2)
        out = {"connections": n, "open_seconds": round(open_s, 2), "process_pairs": procs,
               "sockets_srv_ns": sockets_in(net, net.srv), "sockets_cli_ns": sockets_in(net, net.cli)}
        if daemon:
            # Wait for an open-flow snapshot that sees them (snapshot_interval_s = 5).
            def seen():
                v = daemon.metric("tcpscope_snapshot_flows") or 0
                return v if v >= 2 * n else None
            try:
                B.wait_for(seen, 60, "a snapshot with every open flow", interval=1)
            except B.WaitTimeout:
                pass
            out["snapshot_flows"] = daemon.metric("tcpscope_snapshot_flows")
            rss, hwm = B.proc_mem_kib(daemon.pid)
            out["daemon_rss_kib"], out["daemon_hwm_kib"] = rss, hwm
        s1 = slab_kib()
        out["slab_growth_kib"] = s1 - s0
        c1 = slab_caches()
        out["slab_cache_growth_bytes"] = {k: v - c0.get(k, 0) for k, v in c1.items() if v != c0.get(k, 0)}
        if memcg:
            out["daemon_memcg_kernel_growth_bytes"] = memcg.kernel_bytes() - k0
        return out
    finally:
        net.close()
        settle(3)  # namespace teardown frees the sockets asynchronously


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=100000)
    ap.add_argument("--prefixes", type=int, default=1000000)
    ap.add_argument("--rules", type=int, default=50)
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("scale.py: needs root")
    n = args.connections
    tmp = B.tmpdir("scale")
    cg = B.Cgroup()
    result = {"benchmark": "scale", "connections": n, "sockets": 2 * n, "asn_prefixes": args.prefixes}
    try:
        pfx = B.write_pfx2as(tmp / "pfx2as.tsv", args.prefixes)

        # Daemon RSS with and without the ASN data, no flows of ours.
        port = B.free_port()
        d = B.Tcpscope(tmp, B.write_config(tmp / "noasn.yaml", port=port, rules=0), port)
        time.sleep(1)
        result["daemon_rss_kib_no_asn"] = B.proc_mem_kib(d.pid)[0]
        d.stop()

        without = measure_phase(tmp, n, cg)
        B.log(f"without tcpscope: slab +{without['slab_growth_kib']} KiB for {n} connections")

        port = B.free_port()
        cfg = B.write_config(tmp / "tcpscope.yaml", port=port, prefix_file=pfx, cgroup=cg.path, rules=args.rules,
                             snapshot_interval_s=5)
        # In a memory cgroup of its own: the BPF maps it creates, sk_storage
        # elements included, are charged there, apart from everything else
        # that allocates slab on this machine.
        memcg = B.MemoryCgroup.create()
        d = B.Tcpscope(tmp, cfg, port, memcg=memcg)
        try:
            time.sleep(6)  # one snapshot with nothing of ours open
            rss0, hwm0 = B.proc_mem_kib(d.pid)
            result["daemon_start_seconds_with_asn"] = round(d.start_seconds, 2)
            result["daemon_rss_kib_asn_loaded"] = rss0
            result["daemon_hwm_kib_asn_loaded"] = hwm0
            maps = B.bpf_maps_of(d.pid)
            result["bpf_maps"] = [{"name": m.get("name"), "type": m.get("type"), "bytes_memlock": m.get("bytes_memlock")}
                                  for m in maps]
            with_ = measure_phase(tmp, n, cg, daemon=d, memcg=memcg)
            result["records_lost_total"] = d.metric("tcpscope_records_lost_total")
        finally:
            d.stop()
            if memcg:
                memcg.close()
        B.log(f"with tcpscope: slab +{with_['slab_growth_kib']} KiB for {n} connections")
    finally:
        cg.close()

    extra_kib = with_["slab_growth_kib"] - without["slab_growth_kib"]
    slab_per_socket = extra_kib * 1024 / (2 * n)
    memcg_growth = with_.get("daemon_memcg_kernel_growth_bytes")
    # The memory cgroup's counter is exact and isolated; the slab difference
    # is the fallback (and a cross-check) where no memory cgroup is available.
    per_socket = memcg_growth / (2 * n) if memcg_growth is not None else slab_per_socket
    daemon_per_flow = (with_["daemon_rss_kib"] - result["daemon_rss_kib_asn_loaded"]) * 1024 / (2 * n)
    memlock = sum(m["bytes_memlock"] or 0 for m in result["bpf_maps"])
    # Which slab caches tcpscope's sockets grow (with - without, per socket):
    # says which size class the socket storage element lands in.
    gw, go = with_.get("slab_cache_growth_bytes", {}), without.get("slab_cache_growth_bytes", {})
    per_cache = {k: (gw.get(k, 0) - go.get(k, 0)) / (2 * n) for k in set(gw) | set(go)}
    result["slab_bytes_per_socket_by_cache"] = {
        k: round(v) for k, v in sorted(per_cache.items(), key=lambda kv: -abs(kv[1]))[:6]}
    result.update({
        "without": without, "with": with_,
        "kernel_bytes_per_socket": round(per_socket),
        "kernel_bytes_per_socket_method": "daemon memory cgroup kernel memory growth" if memcg_growth is not None
        else "slab growth with - without tcpscope",
        "kernel_bytes_per_socket_slab_crosscheck": round(slab_per_socket),
        "kernel_maps_memlock_bytes": memlock,
        "daemon_bytes_per_open_flow": round(daemon_per_flow),
        "asn_data_daemon_kib": result["daemon_rss_kib_asn_loaded"] - result["daemon_rss_kib_no_asn"],
        "extrapolated_1m_flows": {
            "note": f"measured at {2 * n} sockets ({n} connections), linear extrapolation to 1M open flows "
                    "(one socket per flow, as on an edge server whose peers are remote)",
            "kernel_mib": round(per_socket * 1e6 / 1048576, 1),
            "daemon_rss_mib": round((result["daemon_rss_kib_asn_loaded"] * 1024 + daemon_per_flow * 1e6) / 1048576, 1),
        },
    })
    print(f"scale: {n} open connections ({2 * n} sockets on this host), {args.prefixes} ASN prefixes")
    print(B.fmt_table(["what", "value"], [
        ["slab growth without tcpscope (KiB)", without["slab_growth_kib"]],
        ["slab growth with tcpscope (KiB)", with_["slab_growth_kib"]],
        ["tcpscope kernel bytes per socket (" + result["kernel_bytes_per_socket_method"] + ")", round(per_socket)],
        ["  cross-check: slab difference per socket (noisy)", round(slab_per_socket)],
        *[[f"    of which {k} (bytes per socket)", v] for k, v in result["slab_bytes_per_socket_by_cache"].items()],
        ["BPF maps memlock (fixed, bytes)", memlock],
        ["daemon RSS, no ASN data (MiB)", round(result["daemon_rss_kib_no_asn"] / 1024, 1)],
        [f"daemon RSS, {args.prefixes} prefixes loaded (MiB)", round(result["daemon_rss_kib_asn_loaded"] / 1024, 1)],
        [f"daemon RSS, + {2 * n} open flows (MiB)", round(with_["daemon_rss_kib"] / 1024, 1)],
        ["daemon bytes per open flow", round(daemon_per_flow)],
        ["1M open flows, kernel (MiB, extrapolated)", result["extrapolated_1m_flows"]["kernel_mib"]],
        ["1M open flows, daemon RSS (MiB, extrapolated)", result["extrapolated_1m_flows"]["daemon_rss_mib"]],
    ]))
    B.write_result("scale", result, args.out)


if __name__ == "__main__":
    main()
