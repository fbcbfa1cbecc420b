#!/usr/bin/env python3
"""What export.kafka costs: the churn benchmark's load (short connections over
a veth, the 50-rule policy, a 1M-prefix ASN file, no flow log) with the
records going to a real Kafka broker (tests/fleet/servers.py: Apache Kafka
4.x on Debian's OpenJDK), against the same daemon without the export.

Runs alternate: off, json zstd, off, protobuf zstd, off, json lz4, ... (each
export.kafka.format of --format with each compression of --compressions),
each --seconds long at the load generator's full rate. Per run it prints the connection
rate, the records per second the daemon handled, its CPU, and for the export
runs what the exporter counted (queued, delivered, dropped, failed) and the
bytes per record the broker stored (its log segments: record batches as the
producer compressed them, i.e. the produce requests' payload).

Figures:
  cpu_per_10k_records_pct  daemon CPU (% of one core) per 10,000 records/s,
                           which is also its CPU in microseconds per record
  export_cpu_us_per_record the export's CPU per record: that figure minus the
                           mean of the neighbouring runs without export; given
                           with half the spread of the runs without export,
                           and "invalid" when that spread is not below half of it
  records_per_message      records delivered / messages the broker holds (a
                           message is a drain's records of one bucket)
  bytes_per_record         broker log bytes / records delivered, per format and compression

The broker runs on the same two cores as the load and the daemon, so the
connection rate itself is not compared across variants; CPU per record is.

  bench/kafka_export.py [--seconds 20] [--repeat 2] [--compressions zstd,lz4,none] [--format json,protobuf]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as B  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fleet"))
from servers import KafkaBroker  # noqa: E402


def topic_bytes(broker, topic):
    """Bytes of the topic's log segments on the broker's disk."""
    return sum(p.stat().st_size for p in broker.dir.rglob(f"{topic}-*/*.log"))


def one_run(ctx, name, compression, fmt=None):
    a = ctx.args
    port = B.free_port()
    cfg = B.write_config(ctx.tmp / f"tcpscope-{port}.yaml", port=port, prefix_file=ctx.pfx2as,
                         cgroup=ctx.cgroup.path, rules=a.rules)
    topics = None
    if compression:
        tag = f"{name}{port}"
        topics = {"flow": f"b{tag}.flows", "transfer": f"b{tag}.transfers"}
        for t in topics.values():
            ctx.kafka.create_topic(t, partitions=3)
        with open(cfg, "a") as f:
            f.write(f"export:\n  kafka:\n    brokers: [\"{ctx.kafka.bootstrap}\"]\n"
                    f"    topic_flows: {topics['flow']}\n    topic_transfers: {topics['transfer']}\n"
                    f"    compression: {compression}\n    format: {fmt}\n")
    d = B.Tcpscope(ctx.tmp, cfg, port)
    try:
        records0 = (d.metric("tcpscope_records_total") or 0) + (d.metric("tcpscope_transfer_records_total") or 0)
        cpu0 = B.proc_cpu_seconds(d.pid)
        r = B.churn(ctx.net, ctx.server, a.seconds, a.threads)
        # Drained: the export's queue is empty and records arrive at no more
        # than the floor the daemon's own Kafka connection makes (its
        # transfers, a few per batch).
        last, deadline = -1, time.monotonic() + 60
        while time.monotonic() < deadline:
            n = (d.metric("tcpscope_records_total") or 0) + (d.metric("tcpscope_transfer_records_total") or 0)
            queued = d.metric("tcpscope_kafka_queue_bytes") or 0
            if last >= 0 and n - last < 100 and queued == 0:
                break
            last = n
            time.sleep(0.5)
        cpu = B.proc_cpu_seconds(d.pid) - cpu0
        records = last - records0
        run = {"variant": name, "format": fmt, "compression": compression, "rate": r["rate"], "connections": r["connections"],
               "seconds": r["seconds"], "records": records, "records_per_s": round(records / r["seconds"]),
               "daemon_cpu_s": round(cpu, 3),
               "cpu_per_10k_records_pct": round(100 * cpu / r["seconds"] / (records / r["seconds"] / 1e4), 2),
               "records_lost": d.metric("tcpscope_records_lost_total") or 0}
        if compression:
            counts = {res: d.metric("tcpscope_kafka_records_total", {"result": res}) or 0
                      for res in ("queued", "delivered", "dropped", "failed")}
            messages = sum(ctx.kafka.count(t) for t in topics.values())
            stored = sum(topic_bytes(ctx.kafka, t) for t in topics.values())
            delivered = max(1, counts["delivered"])
            run.update(kafka=counts, broker_messages=messages, broker_log_bytes=stored,
                       records_per_message=round(delivered / max(1, messages), 1),
                       bytes_per_record=round(stored / delivered, 1))
        B.log(f"{name}: {r['rate']:.0f} conn/s, {run['records_per_s']} records/s, daemon {cpu:.2f} CPU s"
              + (f", kafka {run['kafka']}, {run['records_per_message']} records/message, "
                 f"{run['bytes_per_record']} B/record" if compression else ""))
        return run
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    B.add_churn_args(ap, 20)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--compressions", default="zstd,lz4")
    ap.add_argument("--format", default="json,protobuf", help="export.kafka.format values to run")
    args = ap.parse_args()
    compressions = [c for c in args.compressions.split(",") if c]
    formats = [f for f in args.format.split(",") if f]

    ctx = type("Ctx", (), {})()
    ctx.args = args
    ctx.tmp = B.tmpdir("kafka-export")
    ctx.cgroup = B.Cgroup()
    ctx.net = None
    runs = []
    try:
        with KafkaBroker() as kafka:
            ctx.kafka = kafka
            B.loadgen_binary()
            ctx.pfx2as = B.write_pfx2as(ctx.tmp / "pfx2as.tsv", args.prefixes)
            ctx.net = B.NetPair(cgroup=ctx.cgroup)
            ctx.server = B.ChurnServer(ctx.net, ctx.tmp)
            runs.append(one_run(ctx, "off", None))
            for _ in range(args.repeat):
                for c in compressions:
                    for f in formats:
                        runs.append(one_run(ctx, f"kafka-{f}-{c}", c, f))
                        runs.append(one_run(ctx, "off", None))
    finally:
        if ctx.net:
            ctx.net.close()
        ctx.cgroup.close()

    # CPU per record is small and noisy between runs without export: the
    # export's cost is stated with the spread of those runs (in us per
    # record), and called invalid where that spread is not small against it.
    off = [r for r in runs if not r["compression"]]
    off_us = [r["cpu_per_10k_records_pct"] for r in off]  # % core per 10k rec/s == us per record
    spread_us = max(off_us) - min(off_us)
    rows, summary = [], {}
    for i, r in enumerate(runs):
        if not r["compression"]:
            continue
        neighbours = [runs[j]["cpu_per_10k_records_pct"] for j in (i - 1, i + 1)
                      if 0 <= j < len(runs) and not runs[j]["compression"]]
        r["export_cpu_us_per_record"] = round(r["cpu_per_10k_records_pct"] - statistics.mean(neighbours), 3)
        summary.setdefault((r["format"], r["compression"]), []).append(r)
    for (f, c), rs in summary.items():
        cost = statistics.mean(x["export_cpu_us_per_record"] for x in rs)
        valid = spread_us < cost / 2
        rows.append([f, c, round(statistics.mean(x["records_per_s"] for x in rs)),
                     round(statistics.mean(x["cpu_per_10k_records_pct"] for x in rs), 2),
                     f"{cost:.2f} +- {spread_us / 2:.2f}" if valid else f"invalid (spread {spread_us:.2f})",
                     round(statistics.mean(x["records_per_message"] for x in rs), 1),
                     round(statistics.mean(x["bytes_per_record"] for x in rs), 1),
                     sum(x["kafka"]["dropped"] + x["kafka"]["failed"] for x in rs),
                     sum(x["records_lost"] for x in rs)])
    print(f"\nwithout export: {statistics.mean(r['records_per_s'] for r in off):.0f} records/s, "
          f"{statistics.mean(off_us):.2f} % of a core per 10k records/s ({min(off_us):.2f}-{max(off_us):.2f} "
          f"over {len(off)} runs)")
    print(B.fmt_table(["format", "compression", "records/s", "% core per 10k rec/s", "export CPU us/record",
                       "records/message", "bytes/record (broker)", "exporter dropped+failed", "ring lost"], rows))
    B.write_result("kafka_export", {"args": vars(args), "runs": runs, "off_cpu_spread_us_per_record": round(spread_us, 3)},
                   args.out)


if __name__ == "__main__":
    main()
