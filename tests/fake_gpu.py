"""A stand-in GPU for tuning tests on machines without one, usable in-process and as a script.

FakeGPU implements the backend calls the tuner makes. Its kernels "run" by writing the numpy
reference into the output buffers (so the tuner's real verification passes), except the instances
named `wrong`, which leave the poisoned outputs alone (verification fails). Device events report a
fixed time per instance (`fake_us`, or the `us` override), and `synchronize` sleeps so a tune takes
a few milliseconds per candidate. `install_fake_compiler` replaces the runtime compiler behind the
compile cache with one that only hashes the source, so no NVRTC runs.

As a script (`python tests/fake_gpu.py --db FILE --problem SPEC ...`) it runs api.tune_problem on a
FakeGPU and prints `stage NAME TOTAL`, `resume N M` and finally one JSON line, for kill tests.
FleetGPU puts fleet workers (`kfactory worker`) on FakeGPUs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from factory import abi, numerics
from factory.backends import BackendKind, CompiledBinary, DeviceInfo
from factory.catalog import Instance
from factory.codegen import render
from factory.device import target_for
from factory.ops import solver_for
from factory.ops.base import Launch, Role, buffers_of
from factory.selector import lookup
from factory.tuner import TuneSettings

DEVICE = DeviceInfo(BackendKind.CUDA, "sm_90", "Fake H100", 132, "13000", "nvrtc 13.0")
FAKE_TARGET = target_for(DEVICE)  # what the tuner sees on it: an sm_90 GPU, wgmma included
FAKE_COMPILER = "fake-compiler 1"
_MAGIC = b"FAKE"
# Fast enough for tests, and valid for the tuner's statistics (the IQR needs two samples).
SETTINGS = TuneSettings(reps=4, warmup=1, seed=0, compile_workers=1)


def fake_us(name: str) -> float:
    """A fixed, distinct-looking time per instance name, in microseconds."""
    return 5.0 + int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little") % 5000 / 100.0


def code_of(name: str) -> str:
    """The source hash a measurement of instance `name` carries when taken on today's code."""
    from factory.catalog import instance_by_name
    from factory.sources import hash_of

    return hash_of(instance_by_name(name))


def fake_compile(source: str, arch: str, options: Any = ()) -> CompiledBinary:
    return CompiledBinary(_MAGIC + hashlib.sha256(source.encode()).digest(), arch, FAKE_COMPILER)


def isolate(monkeypatch: Any, tmp_path: Path) -> None:
    """A test's own compile cache and default DB, no backend left over from another test, and the fake compiler."""
    import factory.backends

    monkeypatch.setenv("KFACTORY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KFACTORY_DB", str(tmp_path / "default.sqlite"))
    monkeypatch.setattr(factory.backends, "_ACTIVE", {})
    install_fake_compiler(monkeypatch.setattr)


def install_fake_compiler(setattr: Callable[[Any, str, Any], None] = setattr) -> None:
    """Compile through the real cache, but with `fake_compile` (pass monkeypatch.setattr in tests).

    Compiles stay in this process (worker processes would not see the replacement), whatever
    compile_workers the caller's settings ask for.
    """
    import factory.compile_cache as cache
    import factory.tuner as tuner

    stream = cache.CompileStream
    setattr(cache, "compiler_for", lambda kind: fake_compile)
    setattr(cache, "compiler_version", lambda kind: FAKE_COMPILER)
    setattr(tuner, "CompileStream", lambda kind, jobs, workers=None, on_done=None: stream(kind, jobs, 1, on_done))


FLUSH_US = 85.0  # an H100's 256 MiB flush


class FakeGPU:
    """A backend for one problem: correct (or `wrong`) outputs, fixed times, no device."""

    kind = BackendKind.CUDA

    def __init__(
        self,
        problem: Any,
        device: DeviceInfo = DEVICE,
        *,
        us: Mapping[str, float] | None = None,
        wrong: frozenset[str] = frozenset(),
        delay_s: float = 0.0,
    ) -> None:
        self.problem = problem
        self.info = device
        self.us = dict(us or {})
        self.wrong = wrong
        self.delay_s = delay_s
        self.solver = solver_for(problem.op)
        self.specs = {s.name: s for s in self.solver.tensors(problem)}
        self._by_digest: dict[bytes, Instance] = {
            hashlib.sha256(render(c).encode()).digest(): c for c in lookup(problem, target=target_for(device))
        }
        self._sizes: dict[int, int] = {}
        self._data: dict[int, bytearray] = {}
        self._fill: dict[int, int] = {}
        self._bound: dict[str, int] = {}
        self._events: dict[int, str | None] = {}
        self._running: str | None = None
        self._reference: dict[bytes, dict[str, bytes]] = {}
        self.timed: list[str] = []  # instances in the order their times were read

    def device_info(self) -> DeviceInfo:
        return self.info

    # --- memory: sparse, so the tuner's 256 MiB L2-flush buffer costs nothing -------------------
    def alloc(self, nbytes: int) -> int:
        ptr = 0x1000_0000 + 0x100_0000 * (len(self._sizes) + 1) + sum(self._sizes.values())
        self._sizes[ptr] = nbytes
        self._fill[ptr] = 0
        return ptr

    def free(self, ptr: int) -> None:
        self._sizes.pop(ptr, None)
        self._data.pop(ptr, None)
        self._fill.pop(ptr, None)

    def _buffer(self, ptr: int) -> bytearray:
        if ptr not in self._data:
            self._data[ptr] = bytearray([self._fill[ptr]]) * self._sizes[ptr]
        return self._data[ptr]

    def memset_async(self, ptr: int, byte: int, nbytes: int, stream: int = 0) -> None:
        if nbytes >= self._sizes[ptr]:
            self._data.pop(ptr, None)
            self._fill[ptr] = byte
        else:
            self._buffer(ptr)[:nbytes] = bytes([byte]) * nbytes

    def copy_to_device(self, ptr: int, data: bytes | memoryview) -> None:
        self._buffer(ptr)[: len(data)] = bytes(data)

    def copy_from_device(self, ptr: int, nbytes: int) -> bytes:
        return bytes(self._buffer(ptr)[:nbytes])

    def synchronize(self) -> None:
        if self.delay_s:
            time.sleep(self.delay_s / 3)  # the tuner synchronizes about three times per candidate

    # --- kernels ----------------------------------------------------------------------------------
    def load(self, binary: bytes, kernel_name: str) -> tuple[Instance, str]:
        assert binary.startswith(_MAGIC), "compiled by the real compiler: call install_fake_compiler()"
        return self._by_digest[binary[len(_MAGIC):]], kernel_name

    def prepare_args(self, args: list) -> list:
        return args

    def encode_tensor_map(self, at: int, tmap: object, address: int) -> None:
        """No kernel runs here, so a tensor map's bytes stay as packed (zeros)."""

    def launch_prepared(self, kernel, grid, block, prepared, shared_bytes: int = 0, stream: int = 0) -> None:
        inst, entry = kernel
        self._running = inst.name
        plan = self.solver.launch_plan(inst.family, inst.params, self.problem)
        step = next(s for s in plan.steps if isinstance(s, Launch) and s.entry == entry)
        self._bound.update(abi.bound_pointers(step.args, prepared))
        if inst.name in self.wrong:
            return
        outputs = [s for s in self.specs.values() if s.role is Role.OUTPUT and s.name in self._bound]
        written = {b.name for b in buffers_of(step.args)}
        for spec in outputs:
            if spec.name in written:
                self.copy_to_device(self._bound[spec.name], self._answer()[spec.name])

    def launch_early(self, kernel, grid, block, prepared, shared_bytes: int = 0, stream: int = 0) -> None:
        """Launches run one after another here; starting early changes nothing."""
        self.launch_prepared(kernel, grid, block, prepared, shared_bytes, stream)

    def launch_cooperative(self, kernel, grid, block, prepared, shared_bytes: int = 0, stream: int = 0) -> None:
        """Every block resident at once is what a real device guarantees; here the launch writes the answer."""
        self.launch_prepared(kernel, grid, block, prepared, shared_bytes, stream)

    def _answer(self) -> dict[str, bytes]:
        """The reference outputs of the inputs now on the device, in storage bytes (cached)."""
        inputs = {n: self.copy_from_device(self._bound[n], s.nbytes) for n, s in self.specs.items() if s.role is Role.INPUT}
        digest = hashlib.sha256(b"".join(inputs[n] for n in sorted(inputs))).digest()
        if digest not in self._reference:
            values = {
                n: numerics.exact_values(numerics.from_bytes(blob, self.specs[n].shape, self.specs[n].scalar), self.specs[n].scalar)
                for n, blob in inputs.items()
            }
            ref = self.solver.reference(self.problem, values)
            self._reference[digest] = {name: _storage(ref[name], self.specs[name].scalar) for name in ref}
        return self._reference[digest]

    # --- timing -----------------------------------------------------------------------------------
    def event_create(self) -> int:
        event = len(self._events) + 1
        self._events[event] = None
        return event

    def event_record(self, event: int, stream: int = 0) -> None:
        self._events[event] = self._running

    def event_elapsed_ms(self, start: int, end: int) -> float:
        name = self._events[end]
        if name is None:  # no kernel between the events yet: the tuner timing its L2 flush
            return FLUSH_US / 1000.0
        if not self.timed or self.timed[-1] != name:
            self.timed.append(name)
        return self.us.get(name, fake_us(name)) / 1000.0

    def event_destroy(self, event: int) -> None:
        pass


class FleetGPU:
    """The GPU of a fleet worker process, faked: `KFACTORY_FLEET_GPU=fake_gpu:FleetGPU` with tests/ on
    PYTHONPATH (factory.fleet.gpus). Each job's problem gets a FakeGPU of its own, compiled with the fake
    compiler (installed on the first backend; pass monkeypatch.setattr in-process); $KFACTORY_FAKE_DELAY
    is the seconds per candidate, $KFACTORY_FAKE_GPUS what `--gpus all` finds, and a problem whose key
    contains $KFACTORY_FAKE_FAIL fails every attempt with a launch error."""

    def __init__(self, setattr: Callable[[Any, str, Any], None] = setattr) -> None:
        self._setattr = setattr
        self._installed = False
        self.delay_s = float(os.environ.get("KFACTORY_FAKE_DELAY", "0"))
        self.fail = os.environ.get("KFACTORY_FAKE_FAIL", "")

    def device(self) -> DeviceInfo:
        return DEVICE

    def backend(self, problem: Any) -> FakeGPU:
        from factory.backends import BackendError

        if not self._installed:
            import warnings

            install_fake_compiler(self._setattr)
            warnings.filterwarnings("ignore", ".*cannot be rebuilt in a worker process", RuntimeWarning)
            self._installed = True
        if self.fail and self.fail in problem.key:
            raise BackendError(f"launch: simulated failure of {problem.key}")
        return FakeGPU(problem, delay_s=self.delay_s)

    def count(self) -> int:
        return int(os.environ.get("KFACTORY_FAKE_GPUS", "2"))


def _storage(values: np.ndarray, scalar: Any) -> bytes:
    if scalar.is_float:
        return numerics.to_storage(values, scalar).tobytes()
    return np.asarray(values).astype(numerics.STORAGE[scalar]).tobytes()


def main(argv: list[str] | None = None) -> int:
    """Tune one problem on a FakeGPU into --db, telling the parent how far it got."""
    from factory.api import tune_problem
    from factory.problem import DType, Layout, parse_conv_problem
    from factory.tuner import Progress
    from tuning_db import TuningDB

    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--cache", required=True, help="compile cache directory (fake binaries go there)")
    parser.add_argument("--problem", required=True)
    parser.add_argument("--layout", default="NHWGC")
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--delay", type=float, default=0.03, help="seconds per candidate")
    parser.add_argument("--wrong", default="", help="comma-separated instances whose outputs are wrong")
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args(argv)

    os.environ["KFACTORY_CACHE_DIR"] = args.cache
    install_fake_compiler()
    problem = parse_conv_problem(args.problem, Layout.parse(args.layout), DType.parse(args.dtype))
    wrong = frozenset(filter(None, args.wrong.split(",")))
    gpu = FakeGPU(problem, wrong=wrong, delay_s=args.delay)

    def say(*words: object) -> None:
        print(*words, flush=True)

    measured: list[str] = []
    hooks = Progress(on_stage=lambda name, total: say("stage", name, total),
                     on_measured=lambda m: measured.append(m.instance))
    with TuningDB(args.db) as db:
        outcome = tune_problem(problem, gpu, db, SETTINGS, hooks, fresh=args.fresh,
                               on_resume=lambda done, total: say("resume", done, total))
    say(json.dumps({
        "measured": measured,
        "reused": outcome.reused,
        "winner": outcome.winner.instance if outcome.winner else None,
    }))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
