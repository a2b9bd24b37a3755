"""Execute an op's LaunchPlan on a backend: resolve buffer names to pointers, launch in stream order."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Mapping

from .backends import Backend
from .ops.base import F32, I32, Buf, Launch, LaunchPlan, Memset


@dataclass
class LoadedBinary:
    """A compiled instance loaded on a device: one handle per entry point it has."""

    backend: Backend
    binary: bytes
    kernels: dict[str, object]

    def kernel(self, entry: str) -> object:
        if entry not in self.kernels:
            self.kernels[entry] = self.backend.load(self.binary, entry)
        return self.kernels[entry]


def _ctype(arg: object, pointers: Mapping[str, int]):
    if isinstance(arg, Buf):
        return ctypes.c_uint64(pointers[arg.name])
    if isinstance(arg, I32):
        return ctypes.c_int32(arg.value)
    if isinstance(arg, F32):
        return ctypes.c_float(arg.value)
    raise TypeError(f"unknown launch argument {arg!r}")


def run_plan(loaded: LoadedBinary, plan: LaunchPlan, pointers: Mapping[str, int], stream: int = 0) -> None:
    """Enqueue every step of `plan` on `stream`; `pointers` maps buffer names (and "workspace") to addresses."""
    backend = loaded.backend
    for step in plan.steps:
        if isinstance(step, Memset):
            backend.memset_async(pointers[step.buffer], step.byte, step.nbytes, stream)
        elif isinstance(step, Launch):
            args = [_ctype(a, pointers) for a in step.args]
            backend.launch(loaded.kernel(step.entry), step.grid, step.block, args, step.shared_bytes, stream)
        else:  # pragma: no cover - the plan types are closed
            raise TypeError(f"unknown plan step {step!r}")
