#!/usr/bin/env python3
"""The verifier's work per BPF program: for each program of one or more
linked objects, the instructions the verifier processed to accept it (what
grows toward its 1,000,000 limit and its time) and the program's size after
loading (xlated instructions), objects side by side.

    bench/bpf_insns.py [OBJECT ...] [--json FILE]

OBJECT defaults to build/bpf/tcpscope.bpf.o; give an older build's object
first to compare (e.g. before and after moving code between headers). Each
object is loaded with `bpftool -d prog loadall` into a bpffs mounted by this
script in a temporary directory, with its read-only config at its defaults,
and unloaded again (the mount goes with it). Loads nothing else, attaches
nothing. Needs root. It judges nothing."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN = re.compile(r"^libbpf: prog '([^']+)': -- BEGIN PROG LOAD LOG --")
PROCESSED = re.compile(r"^processed (\d+) insns")


def verifier_work(obj):
    """{program: {"processed": n, "xlated": n}} of `obj`, loaded once."""
    with tempfile.TemporaryDirectory(prefix="tcpscope-insns-") as d:
        subprocess.run(["mount", "-t", "bpf", "bpf", d], check=True)
        try:
            pin = os.path.join(d, "progs")
            r = subprocess.run(["bpftool", "-d", "prog", "loadall", str(obj), pin],
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                tail = "\n".join(r.stderr.splitlines()[-20:])
                sys.exit(f"bpf_insns: bpftool prog loadall {obj} failed (exit {r.returncode}):\n{tail}")
            out, prog = {}, None
            for line in r.stderr.splitlines():
                m = BEGIN.match(line)
                if m:
                    prog = m.group(1)
                    continue
                m = PROCESSED.match(line)
                if m and prog:
                    out[prog] = {"processed": int(m.group(1))}
                    prog = None
            for name in sorted(os.listdir(pin)):
                info = json.loads(subprocess.run(["bpftool", "-j", "prog", "show", "pinned", os.path.join(pin, name)],
                                                 capture_output=True, text=True, check=True).stdout)
                out.setdefault(name, {})["xlated"] = info.get("bytes_xlated", 0) // 8
            return out
        finally:
            subprocess.run(["umount", "-l", d], check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("objects", nargs="*", default=[str(ROOT / "build/bpf/tcpscope.bpf.o")])
    ap.add_argument("--json", help="write {object: {program: {processed, xlated}}} here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bpf_insns: needs root (it loads BPF programs)")
    works = {o: verifier_work(o) for o in args.objects}
    programs = sorted({p for w in works.values() for p in w})
    header = f"{'program':<24}" + "".join(f" {'processed':>10} {'xlated':>7}" for _ in works)
    print("\n".join(f"[{i}] {o}" for i, o in enumerate(works)))
    print(header)
    for p in programs:
        cells = "".join(f" {w.get(p, {}).get('processed', '-'):>10} {w.get(p, {}).get('xlated', '-'):>7}"
                        for w in works.values())
        print(f"{p:<24}{cells}")
    totals = "".join(f" {sum(v.get('processed', 0) for v in w.values()):>10} "
                     f"{sum(v.get('xlated', 0) for v in w.values()):>7}" for w in works.values())
    print(f"{'total':<24}{totals}")
    if args.json:
        Path(args.json).write_text(json.dumps(works, indent=1) + "\n")


if __name__ == "__main__":
    main()
