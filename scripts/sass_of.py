"""Print the SASS instruction mix of one instance: `python3 scripts/sass_of.py NAME [--arch sm_90]`.

Compiles the instance with NVRTC to a cubin and runs the toolkit's cuobjdump on it; prints the counts
of the instructions named on the command line (default: the matrix, async-copy and ldmatrix ones)."""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import tempfile
from pathlib import Path

from factory.backends.cuda import compile_cuda
from factory.catalog import instance_by_name
from factory.codegen import render

WATCH = ("HMMA", "HGMMA", "IMMA", "QGMMA", "LDSM", "LDGSTS", "LDG", "STS", "LDS", "ATOMG", "RED")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("name")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--show", nargs="*", default=list(WATCH))
    args = parser.parse_args()
    instance = instance_by_name(args.name)
    arch = instance.compile_arch(args.arch)  # sm_90a for wgmma instances on sm_90
    binary = compile_cuda(render(instance), arch)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(binary.binary)
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    counts = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass))
    print(args.name, arch)
    for op in args.show:
        print(f"  {op:8s} {counts.get(op, 0)}")
    examples = sorted({line.strip() for line in sass.splitlines() if any(f" {op}." in line or f" {op} " in line for op in args.show[:4])})
    for line in examples[:4]:
        print("   ", line)


if __name__ == "__main__":
    main()
