"""Services by path (scenarios/service_paths.py), run as a user runs it: a
client service and a server service, each in its own cgroup and network
namespace, talk over a bridge, over the host's routing and through a proxy
service on the host, and `tcpscope compare` gives each path's latency per
service. The delay line passes its self-check first (the paths' round
trips come from it).

What is checked, against the scenario's ground truth:
  * counts: per (service, path) compare counts exactly the requests the
    client made on that path; the proxy's two legs are proxy.service's, and
    both nginx access logs count the same requests from the right addresses;
  * ownership: each request is one client record (api.service, its path's
    peer class) and, on the proxy path, its accepting end is proxy.service
    in the host namespace, whose upstream connection web.service accepted;
  * latency: each path's median FCT of the client's flows is the client's
    own median clock (just before connect() to the kernel's receive stamp
    of the response's last byte; fct_us runs from the SYN to that segment's
    arrival: measured 10-30 us apart) within TOL_FCT_US; each path's median
    smoothed RTT is its delay line's round trip plus at most TOL_RTT_US
    (the lab's fixed cost, measured 0.19-0.28 ms per path in
    tests/lab/README.md), and behind the proxy the server sees the proxy's
    RTT, not the client's.
"""
import importlib.util
import json
import random
import statistics
import subprocess

from labfixtures import (HERE, TCPSCOPE, delayline_checked, lab_suite, lab_test,  # noqa: F401
                         labmod, need_root_and_build, need_tool, run_scenario_script)

SCENARIO = HERE / "scenarios" / "service_paths.py"
_spec = importlib.util.spec_from_file_location("service_paths", SCENARIO)
scen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scen)

REQUESTS = 24            # per path: compare's 20 per arm for a verdict, and some
TOL_FCT_US = 1_000       # a path's median client FCT vs the client's median clock
TOL_RTT_US = 1_000       # a path's median srtt above its delay line's round trip
VETH_RTT_US = 1_000      # an unshaped veth's round trip, at most


def run_scenario(tmp_path, timeout=120):
    """Runs the scenario (--json, --workdir, --tag) and returns its report.
    Everything it started goes down with it, also when it fails, times out
    or this test is interrupted; then nothing of it may be left."""
    need_root_and_build()
    need_tool("nginx")
    assert TCPSCOPE.exists(), f"build first: {TCPSCOPE} missing"
    out = tmp_path / "service_paths.json"
    tag = f"p{random.randrange(1 << 12):03x}"
    left = []

    def remove_cgroups():
        cgroups = scen.ServiceCgroups(tag, create=False)
        if cgroups.base.exists():
            left.append(cgroups.base)
        cgroups.close()

    rc, stdout, stderr = run_scenario_script(SCENARIO, ["--requests", str(REQUESTS)], tmp_path, tag, out, timeout,
                                             cleanup=remove_cgroups)
    print(stdout)
    assert rc == 0, stderr
    assert not left, f"the scenario left {left[0]} behind"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{labmod.PREFIX}{tag}-" not in netns, f"the scenario left namespaces: {netns}"
    return json.loads(out.read_text())


def by_group(cmp, arm):
    """{group: (n, p50)} of one arm of a compare --json result (one size class here)."""
    got = {}
    for g in cmp["result"]["groups"]:
        assert g["group"] not in got, f"{g['group']} in two size classes: {cmp['result']['groups']}"
        got[g["group"]] = (g[f"n_{arm}"], g[arm]["p50"])
    return got


def test_each_path_latency_per_service(tmp_path, delayline_checked):
    rep = run_scenario(tmp_path)
    n = REQUESTS
    paths = list(scen.PATH_DELAY_MS)
    reqs = rep["client"]["requests"]
    assert [q["path"] for q in reqs] == paths * n, "the client's rounds"
    addr = rep["addresses"]
    netns = rep["netns"]
    recs = rep["records"]

    # Ownership: each end of each connection is the service whose cgroup
    # made the socket, in its own namespace.
    owner = {netns["client"]: ("api.service", {"active"}), netns["server"]: ("web.service", {"passive"}),
             netns["host"]: ("proxy.service", {"active", "passive"})}
    for r in recs:
        service, dirs = owner[r["netns"]]
        assert r["service"] == service and r["dir"] in dirs and r["outcome"] == "ok", r
    assert len(recs) == 8 * n, f"{len(recs)} records for {3 * n} requests: {rep['lost']}"

    def four_tuple(r):
        return r["laddr"], r["lport"], r["raddr"], r["rport"]
    by_tuple = {}
    for r in recs:
        by_tuple.setdefault(four_tuple(r), []).append(r)
    for q in reqs:
        client = by_tuple.get((q["laddr"], q["lport"], q["raddr"], q["rport"]), [])
        assert len(client) == 1 and client[0]["peer_class"] == q["path"], (q, client)
        accepted = by_tuple.get((q["raddr"], q["rport"], q["laddr"], q["lport"]), [])
        want = "proxy.service" if q["path"] == "proxy" else "web.service"
        assert [(r["service"], r["dir"], r["peer_class"]) for r in accepted] == [(want, "passive", q["path"])], \
            (q, accepted)
    # The proxy's upstream connections: from its bind address to the
    # server, each accepted by web.service.
    upstream = [r for r in recs if r["service"] == "proxy.service" and r["dir"] == "active"]
    assert len(upstream) == n and all(r["laddr"] == addr["proxy_bind"] and r["peer_class"] == "proxy"
                                      for r in upstream), upstream
    for r in upstream:
        accepted = by_tuple.get((r["raddr"], r["rport"], r["laddr"], r["lport"]), [])
        assert [x["service"] for x in accepted] == ["web.service"], (r, accepted)

    # Both nginx access logs: the same requests, from the addresses of each path.
    def senders(log):
        assert all(e["status"] == 200 for e in log), log
        got = {}
        for e in log:
            got[e["remote_addr"]] = got.get(e["remote_addr"], 0) + 1
        return got
    assert senders(rep["nginx"]["web"]) == {addr["client"]["bridge"]: n, addr["client"]["host"]: n,
                                            addr["proxy_bind"]: n}
    assert senders(rep["nginx"]["proxy"]) == {addr["client"]["proxy"]: n}

    # Counts per (service, path) from compare: exactly the requests.
    cmp = rep["compare"]
    assert by_group(cmp["by_service_fct"], "a").keys() == {"api.service", "web.service", "proxy.service"}
    counts = {}
    for key, pa, pb in (("by_service_fct", "bridge", "proxy"), ("by_service_host_fct", "bridge", "host")):
        for arm, path in (("a", pa), ("b", pb)):
            for service, (count, _) in by_group(cmp[key], arm).items():
                counts[(service, path)] = count
    assert counts == {("api.service", "bridge"): n, ("web.service", "bridge"): n, ("proxy.service", "bridge"): 0,
                      ("api.service", "host"): n, ("web.service", "host"): n,
                      ("api.service", "proxy"): n, ("web.service", "proxy"): n, ("proxy.service", "proxy"): 2 * n}
    legs_in, legs_out = by_group(cmp["proxy_legs_fct"], "a"), by_group(cmp["proxy_legs_fct"], "b")
    assert legs_in["proxy"][0] == n and legs_out["proxy"][0] == n

    # Latency per path: compare's medians against the client's clock and
    # the delay lines.
    fct_api, rtt_api = by_group(cmp["by_path_fct"], "a"), by_group(cmp["by_path_rtt"], "a")
    rtt_web = by_group(cmp["by_path_rtt"], "b")
    for path, delay_ms in scen.PATH_DELAY_MS.items():
        clock_us = statistics.median((q["last"][2] - q["connect"][1]) / 1e3 for q in reqs if q["path"] == path)
        assert fct_api[path][0] == n and abs(fct_api[path][1] - clock_us) <= TOL_FCT_US, \
            f"{path}: client FCT p50 {fct_api[path][1]} us, the client's clock {clock_us:.0f} us"
        rtt_us = 2 * delay_ms * 1000
        assert rtt_us <= rtt_api[path][1] <= rtt_us + TOL_RTT_US, \
            f"{path}: client srtt p50 {rtt_api[path][1]} us, the path's round trip {rtt_us:.0f} us"
        if path != "proxy":   # the server's end of the same path
            assert rtt_us <= rtt_web[path][1] <= rtt_us + TOL_RTT_US, (path, rtt_web[path])
    # Behind the proxy: the proxy's client leg has the client's round trip,
    # its upstream leg and the server only the veth's.
    rtt_in, rtt_out = by_group(cmp["proxy_legs_rtt"], "a"), by_group(cmp["proxy_legs_rtt"], "b")
    proxy_rtt_us = 2 * scen.PATH_DELAY_MS["proxy"] * 1000
    assert proxy_rtt_us <= rtt_in["proxy"][1] <= proxy_rtt_us + TOL_RTT_US, rtt_in
    assert rtt_out["proxy"][1] <= VETH_RTT_US and rtt_web["proxy"][1] <= VETH_RTT_US, (rtt_out, rtt_web)
    # The table the scenario printed is these numbers.
    rows = {(r["path"], r["service"], r["side"]): r for r in rep["table"]}
    assert rows[("proxy", "api.service", "client")]["fct_p50_us"] == [fct_api["proxy"][1]]
    assert len(rows) == 8, rows
