"""What the compiler says a kernel uses per thread and block: registers, spills, stack, static shared memory.

NVRTC reports it when asked (`--ptxas-options=-v`, which compile_cuda always passes): per entry function,

    ptxas info    : Compiling entry function 'kf_main' for 'sm_90'
    ptxas         .     256 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
    ptxas info    : Used 32 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem

The compile cache keeps the figures beside each binary, so a tune can show them for every candidate
(a spilling candidate is the first suspect of a slow one) without compiling again.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

MAIN_ENTRY = "kf_main"  # every template's kernel; other entries (split-K finishing passes) are smaller

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclass(frozen=True)
class KernelResources:
    registers: int  # per thread
    spill_store_bytes: int  # per thread
    spill_load_bytes: int
    stack_bytes: int  # per thread: local arrays and spills
    shared_bytes: int  # static shared memory per block (dynamic shared memory comes on top)

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "KernelResources | None":
        """The figures a cache entry stored; None for anything else (a damaged or foreign file)."""
        try:
            fields = json.loads(text)
            resources = cls(**{k: int(fields[k]) for k in cls.__dataclass_fields__})
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return resources


def from_ptxas_log(log: str) -> dict[str, KernelResources]:
    """Each entry function's figures in a `ptxas -v` log (empty when the log has none)."""
    found: dict[str, KernelResources] = {}
    entry: str | None = None
    frame: tuple[int, int, int] | None = None
    for line in log.splitlines():
        started = _ENTRY.search(line)
        if started:
            entry, frame = started.group(1), None
            continue
        framed = _FRAME.search(line)
        if framed and entry is not None:
            frame = (int(framed.group(1)), int(framed.group(2)), int(framed.group(3)))
            continue
        used = _USED.search(line)
        if used and entry is not None:
            smem = _SMEM.search(line)
            stack, stores, loads = frame or (0, 0, 0)
            found[entry] = KernelResources(int(used.group(1)), stores, loads, stack, int(smem.group(1)) if smem else 0)
            entry = None
    return found


def main_resources(log: str) -> KernelResources | None:
    """The main kernel's figures (`kf_main`, else the only entry), or None when the log has none."""
    found = from_ptxas_log(log)
    if MAIN_ENTRY in found:
        return found[MAIN_ENTRY]
    return next(iter(found.values())) if len(found) == 1 else None
