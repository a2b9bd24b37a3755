"""Execute an op's LaunchPlan on a backend.

A PreparedPlan packs every launch's arguments once; binding new buffers only rewrites the pointer
slots in place, so a launch from Python costs one driver call (this keeps host overhead out of
both user calls and timed benchmark reps).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Mapping

from .abi import PackedArgs, pack
from .backends import Backend
from .ops.base import Launch, LaunchPlan, Memset


@dataclass
class LoadedBinary:
    """A compiled instance loaded on a device: one handle per entry point it has."""

    backend: Backend
    binary: bytes
    kernels: dict[str, object]

    def kernel(self, entry: str) -> object:
        found = self.kernels.get(entry)
        if found is None:
            found = self.kernels[entry] = self.backend.load(self.binary, entry)
        return found


class ModuleCache:
    """Loaded binaries per (backend, instance name, source hash): a module is loaded once per process
    and device context, however many Kernels (problems, select() calls) use it.

    A backend object stands for one device context (get_backend keeps one per device); entries
    hold it, so its id cannot be reused while cached. The oldest entries are dropped past
    MAX_ENTRIES; a Kernel keeps its own reference, and the backends keep one module per binary.
    """

    MAX_ENTRIES = 1024

    def __init__(self) -> None:
        self._loaded: dict[tuple[int, str, str], LoadedBinary] = {}
        self._lock = threading.Lock()

    def get(self, backend: Backend, name: str, source_hash: str, binary: Callable[[], bytes]) -> LoadedBinary:
        """The cached LoadedBinary, or one made from `binary()` (called only on a miss)."""
        key = (id(backend), name, source_hash)
        found = self._loaded.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._loaded.get(key)
            if found is None:
                found = self._loaded[key] = LoadedBinary(backend, binary(), {})
                while len(self._loaded) > self.MAX_ENTRIES:
                    del self._loaded[next(iter(self._loaded))]
            return found

    def clear(self) -> None:
        with self._lock:
            self._loaded.clear()


MODULES = ModuleCache()


@dataclass
class _PreparedLaunch:
    kernel: object
    step: Launch
    args: PackedArgs  # the ctypes values; bind() rewrites their pointer slots in place
    packed: object  # the backend's form of args.values


class PreparedPlan:
    """A LaunchPlan with kernels resolved and arguments packed; bind() then enqueue() per call."""

    def __init__(self, loaded: LoadedBinary, plan: LaunchPlan) -> None:
        self.backend = loaded.backend
        self.plan = plan
        self._pointers: dict[str, int] = {}
        self._steps: list[_PreparedLaunch | Memset] = []
        for step in plan.steps:
            if isinstance(step, Memset):
                self._steps.append(step)
                continue
            args = pack(step.args)
            packed = self.backend.prepare_args(args.values)
            self._steps.append(_PreparedLaunch(loaded.kernel(step.entry), step, args, packed))

    def bind(self, pointers: Mapping[str, int]) -> None:
        if pointers == self._pointers:
            return
        for step in self._steps:
            if isinstance(step, _PreparedLaunch):
                # Tensor maps hold their buffer's address: encoded again with it (a host call, no GPU work).
                step.args.bind(pointers, self.backend.encode_tensor_map if step.args.maps else None)
        self._pointers = dict(pointers)

    def enqueue(self, stream: int = 0) -> None:
        backend = self.backend
        for step in self._steps:
            if isinstance(step, Memset):
                backend.memset_async(self._pointers[step.buffer] + step.offset, step.byte, step.nbytes, stream)
            else:
                s = step.step
                if s.cooperative:
                    backend.launch_cooperative(step.kernel, s.grid, s.block, step.packed, s.shared_bytes, stream)
                elif s.early_start:
                    backend.launch_early(step.kernel, s.grid, s.block, step.packed, s.shared_bytes, stream)
                else:
                    backend.launch_prepared(step.kernel, s.grid, s.block, step.packed, s.shared_bytes, stream)


def run_plan(loaded: LoadedBinary, plan: LaunchPlan, pointers: Mapping[str, int], stream: int = 0) -> None:
    """One-off execution of a plan (tests, verification)."""
    prepared = PreparedPlan(loaded, plan)
    prepared.bind(pointers)
    prepared.enqueue(stream)
