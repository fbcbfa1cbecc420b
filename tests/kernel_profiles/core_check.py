#!/usr/bin/env python3
"""Do a BPF object's CO-RE relocations resolve against a kernel's BTF?

    tests/kernel_profiles/core_check.py KERNEL.btf OBJECT.bpf.o...

`bpftool gen min_core_btf` relocates every program of an object against a
BTF file as libbpf would at load, without loading anything. Its exit status
says nothing about the relocations: a field the kernel lacks leaves libbpf's
"relo #N: no matching targets found" in its debug log (-d) and exits 0, as
libbpf itself goes on to load the program with that instruction poisoned (the
verifier refuses it if reachable). So the log is read: every relocation that
found no target is listed, and one counts as guarded only if the same program
asks bpf_core_field_exists() of the same field (a <field_exists> relocation
of the same access that also found nothing, which libbpf turns into the
constant 0 that cuts the read away). Anything else is a read the kernel
would refuse."""
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TIMEOUT_S = 300

# libbpf: prog 'tp_btf/x': relo #7: <byte_off> [198] struct tcp_sock.total_rto (0:152 @ offset 2208)
_SPEC = re.compile(r"^libbpf: prog '([^']+)': relo #(\d+): <(\w+)> \[\d+\] (\S+ \S+?) \(")
_MISS = re.compile(r"^libbpf: prog '([^']+)': relo #(\d+): no matching targets found$")


def relocations(btf, obj):
    """(every relocation as (program, kind, access), the unresolved ones, bpftool's log)."""
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run(["bpftool", "-d", "gen", "min_core_btf", str(btf), str(Path(tmp, "min.btf")), str(obj)],
                           capture_output=True, text=True, timeout=TIMEOUT_S)
    log = p.stdout + p.stderr
    if p.returncode != 0:
        raise RuntimeError(f"bpftool gen min_core_btf {btf} {obj}: exit {p.returncode}:\n{log[-4000:]}")
    specs, missing = {}, []
    for line in log.splitlines():
        if m := _SPEC.match(line):
            specs.setdefault((m.group(1), m.group(2)), (m.group(1), m.group(3), m.group(4)))
        elif m := _MISS.match(line):
            missing.append(specs[(m.group(1), m.group(2))])
    if not specs:
        raise RuntimeError(f"bpftool gen min_core_btf {btf} {obj}: no relocation in its log:\n{log[-4000:]}")
    return list(specs.values()), missing, log


def unguarded(missing):
    """The unresolved relocations no field-existence check of the same field guards."""
    checked = {(prog, access) for prog, kind, access in missing if kind == "field_exists"}
    return sorted({r for r in missing if r[1] != "field_exists" and (r[0], r[2]) not in checked})


def main(argv):
    if len(argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} KERNEL.btf OBJECT.bpf.o...")
    bad = False
    for obj in argv[1:]:
        all_relos, missing, _ = relocations(argv[0], obj)
        hard = unguarded(missing)
        guarded = sorted({(p, a) for p, k, a in missing if k == "field_exists"})
        print(f"{obj}: {len(all_relos)} relocations, {len(missing)} unresolved, {len(hard)} of them unguarded")
        for prog, access in guarded:
            print(f"  guarded by bpf_core_field_exists: {prog}: {access}")
        for prog, kind, access in hard:
            print(f"  UNRESOLVED: {prog}: <{kind}> {access}")
        bad |= bool(hard)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
