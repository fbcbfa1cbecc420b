#!/usr/bin/env python3
"""Kernel profiles from real kernels: which tracepoints a kernel has, read
from the BTF of a Debian kernel image package.

    tests/kernel_profiles/derive.py NAME [--write]

downloads NAME's kernel package with `apt-get download` (cached under
$TCPSCOPE_BUILD/kernel_profiles/, build/ by default), takes the compressed
kernel out of the bzImage in /boot/vmlinuz-*, decompresses it (lz4 or zstd,
Debian's tools), cuts the .BTF section out of the ELF vmlinux and lists its
`btf_trace_<tracepoint>` typedefs: those are the tracepoints a tp_btf program
can attach to (libbpf looks for exactly these names). It prints the profile;
--write stores it as tests/kernel_profiles/NAME.profile.

A profile states, for every tracepoint tcpscope attaches to (kHooks in
src/kernel/flow_probe.cc) and the candidates below, whether that kernel has
it; tests/integration/test_kernel_profiles.py re-derives each profile in CI
and requires the committed file to match, and runs the daemon with the
profile's missing tracepoints hidden."""
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# Each profile is the kernel a Debian 12 meta-package currently depends on:
# the registry keeps only the current build of each, so the package's name
# and version go into the profile's header, not into the comparison.
PROFILES = {
    "debian12-6.1": {
        "meta": "linux-image-cloud-amd64",
        "about": "Debian 12's own kernel (6.1)",
    },
    "linux-6.12": {
        "meta": "linux-image-6.12-cloud-amd64",
        "about": "Debian 13's kernel (6.12), as Debian 12 also ships it",
        # What the BTF cannot say: when the lacking tracepoint arrived upstream.
        "history": (
            "tcp_sendmsg_locked is later than 6.12: added by 0f08335ade71 (\"trace: tcp: Add tracepoint",
            "for tcp_sendmsg_locked()\"), in net-next in May 2025 (merged there as 8127837aae8f), so",
            "first released in v6.16. sk_data_ready and sock_{send,recv}_length came between 6.1 and",
            "6.12 (this kernel has them, debian12-6.1 does not).",
        ),
    },
}

# Tracepoints tcpscope does not attach to yet but could (send and receive
# lengths per call, retransmissions, per-ACK samples): the profile says
# where they exist, for the hooks that would replace tcp_sendmsg_locked.
CANDIDATES = ("tcp_probe", "tcp_retransmit_skb", "sock_send_length", "sock_recv_length")

DOWNLOAD_TIMEOUT_S = 600
TOOL_TIMEOUT_S = 300


def hook_tracepoints():
    """The tracepoints of kHooks, in the table's order (the one list of them)."""
    src = (ROOT / "src/kernel/flow_probe.cc").read_text()
    table = re.search(r"kHooks\[\] = \{(.*?)\n\};", src, re.S)
    if not table:
        raise RuntimeError("src/kernel/flow_probe.cc: no kHooks table")
    # Each entry names its tracepoint by a constant of flow_probe.h's tracepoints::.
    constants = dict(re.findall(r'inline constexpr char (k\w+)\[\] = "(\w+)";',
                                (ROOT / "src/kernel/flow_probe.h").read_text()))
    names = [constants.get(c) for c in re.findall(r'\{&Programs::\w+, tracepoints::(k\w+)', table.group(1))]
    if not names or None in names:
        raise RuntimeError("src/kernel/flow_probe.cc: kHooks has no entries this script can read")
    return list(dict.fromkeys(names))


def cache_dir():
    build = Path(os.environ.get("TCPSCOPE_BUILD", ROOT / "build"))
    d = build / "kernel_profiles"
    d.mkdir(parents=True, exist_ok=True)
    return d


def run(*cmd, timeout=TOOL_TIMEOUT_S, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout, **kw).stdout


def image_package(meta):
    """(package, version) of the kernel image `meta` depends on, as the package lists say now."""
    deps = run("apt-cache", "depends", meta)
    m = re.search(r"^\s*Depends: (linux-image-\S+)$", deps, re.M)
    if not m:
        raise RuntimeError(f"apt-cache depends {meta}: no linux-image dependency in:\n{deps}")
    pkg = m.group(1)
    policy = run("apt-cache", "policy", pkg)
    v = re.search(r"^\s*Candidate: (\S+)$", policy, re.M)
    if not v or v.group(1) == "(none)":
        raise RuntimeError(f"apt-cache policy {pkg}: no candidate version:\n{policy}")
    return pkg, v.group(1)


def download(pkg, version, into):
    """The .deb, from the cache when it is there."""
    debs = list(into.glob(f"{pkg}_*.deb"))
    want = [d for d in debs if run("dpkg-deb", "-f", str(d), "Version").strip() == version]
    if want:
        return want[0]
    for d in debs:  # an older build of the same name
        d.unlink()
    # As root apt would hand the download to its sandbox user, who may not write here.
    run("apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", f"{pkg}={version}",
        cwd=into, timeout=DOWNLOAD_TIMEOUT_S)
    debs = list(into.glob(f"{pkg}_*.deb"))
    if len(debs) != 1:
        raise RuntimeError(f"apt-get download {pkg}={version}: expected one .deb in {into}, found {debs}")
    return debs[0]


# The kernel's compressors as x86's bzImage payload uses them; the payload
# ends with the uncompressed size (4 bytes, little-endian), which the tools
# take for trailing garbage.
DECOMPRESSORS = (
    (b"\x02\x21\x4c\x18", "LZ4 (legacy frame)", ("lz4", "-d", "-q", "-c")),
    (b"\x28\xb5\x2f\xfd", "zstd", ("zstd", "-d", "-q", "-c")),
)


def vmlinux_from_bzimage(vmlinuz, out):
    """Writes the uncompressed vmlinux (ELF) to `out`; returns the compression's name."""
    data = Path(vmlinuz).read_bytes()
    if data[0x202:0x206] != b"HdrS":
        raise RuntimeError(f"{vmlinuz}: not a bzImage (no HdrS at 0x202)")
    setup_sects = data[0x1F1] or 4
    payload_offset, payload_length = struct.unpack_from("<II", data, 0x248)
    start = (setup_sects + 1) * 512 + payload_offset
    payload = data[start:start + payload_length]
    size = struct.unpack("<I", payload[-4:])[0]
    for magic, name, cmd in DECOMPRESSORS:
        if payload.startswith(magic):
            break
    else:
        raise RuntimeError(f"{vmlinuz}: payload compressed with an unknown format (magic {payload[:4].hex()})")
    with open(out, "wb") as f:
        subprocess.run(cmd, input=payload[:-4], stdout=f, check=True, timeout=TOOL_TIMEOUT_S)
    if os.path.getsize(out) != size:
        raise RuntimeError(f"{vmlinuz}: {name} gave {os.path.getsize(out)} bytes, the image says {size}")
    return name


def elf_section(path, wanted):
    """The bytes of section `wanted` of a 64-bit little-endian ELF file."""
    with open(path, "rb") as f:
        ident = f.read(64)
        if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            raise RuntimeError(f"{path}: not a 64-bit little-endian ELF file")
        shoff, = struct.unpack_from("<Q", ident, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
        f.seek(shoff)
        headers = [struct.unpack("<IIQQQQIIQQ", f.read(shentsize)[:64]) for _ in range(shnum)]
        names = headers[shstrndx]
        f.seek(names[4])
        strtab = f.read(names[5])
        for h in headers:
            name = strtab[h[0]:strtab.index(b"\0", h[0])].decode()
            if name == wanted:
                f.seek(h[4])
                return f.read(h[5])
    raise RuntimeError(f"{path}: no {wanted} section")


def kernel_btf(name):
    """(BTF file, package, version, kernel release) of profile `name`, from the cache when there."""
    cache = cache_dir()
    pkg, version = image_package(PROFILES[name]["meta"])
    btf = cache / f"{pkg}_{version}.btf"
    release = pkg[len("linux-image-"):]
    if btf.exists():
        return btf, pkg, version, release
    deb = download(pkg, version, cache)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        run("dpkg-deb", "-x", str(deb), tmp)
        vmlinuz = Path(tmp, "boot", f"vmlinuz-{release}")
        if not vmlinuz.exists():
            raise RuntimeError(f"{deb}: no boot/vmlinuz-{release}")
        vmlinux = Path(tmp, "vmlinux")
        vmlinux_from_bzimage(vmlinuz, vmlinux)
        blob = elf_section(vmlinux, ".BTF")
    if blob[:2] != b"\x9f\xeb":
        raise RuntimeError(f"{deb}: .BTF does not start with BTF's magic 0xeB9F")
    partial = btf.with_suffix(".partial")
    partial.write_bytes(blob)
    partial.rename(btf)
    return btf, pkg, version, release


def btf_tracepoints(btf):
    """Every tracepoint named by a btf_trace_<name> typedef in the BTF file."""
    dump = run("bpftool", "btf", "dump", "file", str(btf))
    names = re.findall(r"^\[\d+\] TYPEDEF 'btf_trace_(\w+)'", dump, re.M)
    if not names:
        raise RuntimeError(f"{btf}: no btf_trace_* typedefs (is this a kernel's BTF?)")
    return set(names)


def derive(name):
    btf, pkg, version, release = kernel_btf(name)
    present = btf_tracepoints(btf)
    wanted = hook_tracepoints() + [c for c in CANDIDATES if c not in hook_tracepoints()]
    lines = [
        f"# tcpscope kernel profile {name}: {PROFILES[name]['about']}.",
        f"# Derived by tests/kernel_profiles/derive.py {name} from the BTF (btf_trace_* typedefs)",
        f"# of the kernel image package {pkg} {version} (kernel {release},",
        f"# {len(present)} tracepoints). One line per tracepoint tcpscope attaches to or could:",
        "# 'has NAME' or 'lacks NAME'; the lacking ones are hidden from the daemon to run it as there.",
    ]
    lines += [f"# {h}" for h in PROFILES[name].get("history", ())]
    lines += [f"{'has' if tp in present else 'lacks'} {tp}" for tp in wanted]
    return "\n".join(lines) + "\n"


def profile_path(name):
    return HERE / f"{name}.profile"


def read_profile(name):
    """{tracepoint: present?} of the committed profile, in its order."""
    out = {}
    for line in profile_path(name).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        word, tp = line.split()
        if word not in ("has", "lacks"):
            raise ValueError(f"{profile_path(name)}: bad line {line!r}")
        out[tp] = word == "has"
    return out


def body(text):
    """A profile without its comment lines: what a re-derivation must reproduce."""
    return [l for l in text.splitlines() if l.strip() and not l.startswith("#")]


def missing(name):
    """The tracepoints the profile's kernel lacks, in the profile's order."""
    return [tp for tp, has in read_profile(name).items() if not has]


def daemon_env(name, base=None):
    """An environment that runs the daemon as on the profile's kernel (None:
    as on this one): the tracepoints that kernel lacks are hidden from it."""
    env = dict(os.environ if base is None else base)
    env.pop("TCPSCOPE_TEST_MISSING_TRACEPOINTS", None)
    if name:
        env["TCPSCOPE_TEST_MISSING_TRACEPOINTS"] = ",".join(missing(name))
    return env


def main(argv):
    if len(argv) not in (1, 2) or argv[0] not in PROFILES or (len(argv) == 2 and argv[1] != "--write"):
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(PROFILES)} [--write]")
    text = derive(argv[0])
    if len(argv) == 2:
        profile_path(argv[0]).write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
