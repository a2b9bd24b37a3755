"""Tune a problem: compile candidates in parallel, verify each on the GPU, time the good ones, rank.

Timing follows triton.testing.do_bench: warm-up, an L2 flush before every rep, device events around
the kernel alone, the median of the reps. Inputs are fresh random data; outputs are poisoned before
the verification run. A candidate that fails to compile, launch or verify is recorded with its error.

Inputs are uniform in [-1, 1) unless the op's solver provides `random_inputs(problem, rng)`, for
inputs that must hang together (a normalization's statistics are those of its input).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from . import numerics
from .backends import Backend, BackendError
from .catalog import Instance
from .codegen import render
from .compile_cache import CompileJob, compile_many
from .executor import LoadedBinary, PreparedPlan
from .ops import solver_for
from .ops.base import Role, TensorSpec
from .verify import reference_outputs, verify
from tuning_db import Measurement

L2_FLUSH_BYTES = 256 * 1024 * 1024  # well above any current GPU's last-level cache


@dataclass(frozen=True)
class TuneSettings:
    reps: int = 25
    warmup: int = 5
    seed: int | None = None  # None: fresh entropy each run
    compile_workers: int | None = None


@dataclass
class Progress:
    """Callbacks a front end hooks to show progress; all optional."""

    on_compiled: Callable[[str, bool], None] | None = None
    on_measured: Callable[[Measurement], None] | None = None
    on_stage: Callable[[str, int], None] | None = None  # (stage name, total items)


class DeviceTensors:
    """Device copies of a problem's tensors, plus workspace and an L2-flush buffer."""

    def __init__(self, backend: Backend, specs: Sequence[TensorSpec], host: dict[str, np.ndarray]) -> None:
        self.backend = backend
        self.specs = {s.name: s for s in specs}
        self.pointers: dict[str, int] = {}
        self._owned: list[int] = []
        for spec in specs:
            ptr = self._alloc(spec.nbytes)
            self.pointers[spec.name] = ptr
            if spec.role is Role.INPUT:
                backend.copy_to_device(ptr, host[spec.name].tobytes())
        self.flush = self._alloc(L2_FLUSH_BYTES)
        self.workspace_bytes = 0

    def _alloc(self, nbytes: int) -> int:
        ptr = self.backend.alloc(nbytes)
        self._owned.append(ptr)
        return ptr

    def ensure_workspace(self, nbytes: int) -> None:
        if nbytes > self.workspace_bytes:
            self.pointers["workspace"] = self._alloc(nbytes)
            self.workspace_bytes = nbytes
        self.pointers.setdefault("workspace", 0)

    def read(self, name: str) -> np.ndarray:
        spec = self.specs[name]
        return numerics.from_bytes(self.backend.copy_from_device(self.pointers[name], spec.nbytes), spec.shape, spec.scalar)

    def free(self) -> None:
        for ptr in self._owned:
            try:
                self.backend.free(ptr)
            except BackendError:
                pass
        self._owned.clear()


def time_plan(backend: Backend, prepared: PreparedPlan, tensors: DeviceTensors, settings: TuneSettings) -> list[float]:
    """Per-rep microseconds of the plan alone, L2 flushed before each rep.

    The flush (a 256 MiB memset) also keeps the GPU busy while the host enqueues the rep, so host
    launch overhead does not leak into the events.
    """
    for _ in range(settings.warmup):
        prepared.enqueue()
    backend.synchronize()
    starts = [backend.event_create() for _ in range(settings.reps)]
    ends = [backend.event_create() for _ in range(settings.reps)]
    try:
        for start, end in zip(starts, ends):
            backend.memset_async(tensors.flush, 0, L2_FLUSH_BYTES)
            backend.event_record(start)
            prepared.enqueue()
            backend.event_record(end)
        backend.synchronize()
        return [backend.event_elapsed_ms(s, e) * 1000.0 for s, e in zip(starts, ends)]
    finally:
        for ev in starts + ends:
            backend.event_destroy(ev)


def _iqr(samples: Sequence[float]) -> float:
    q = statistics.quantiles(samples, n=4)
    return q[2] - q[0]


def make_host_inputs(specs: Sequence[TensorSpec], rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {s.name: numerics.random_tensor(rng, s.shape, s.scalar) for s in specs if s.role is Role.INPUT}


def problem_inputs(solver: Any, problem: Any, specs: Sequence[TensorSpec], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Host inputs in storage types: the solver's own `random_inputs` when it has one, else uniform."""
    custom = getattr(solver, "random_inputs", None)
    return custom(problem, rng) if custom is not None else make_host_inputs(specs, rng)


def tune(
    problem: Any,
    candidates: Sequence[Instance],
    backend: Backend,
    settings: TuneSettings = TuneSettings(),
    progress: Progress = Progress(),
    skip: frozenset[str] = frozenset(),
) -> list[Measurement]:
    """Measure every candidate (except those named in `skip`); failures are measurements too."""
    solver = solver_for(problem.op)
    info = backend.device_info()
    todo = [c for c in candidates if c.name not in skip]
    measurements: list[Measurement] = []
    if not todo:
        return measurements

    if progress.on_stage:
        progress.on_stage("compile", len(todo))
    jobs = [CompileJob(c.name, render(c), info.arch) for c in todo]
    compiled = compile_many(
        info.backend,
        jobs,
        workers=settings.compile_workers,
        on_done=(lambda o: progress.on_compiled(o.name, o.binary is not None)) if progress.on_compiled else None,
    )

    specs = solver.tensors(problem)
    seed = settings.seed if settings.seed is not None else int.from_bytes(os.urandom(4), "little")
    host = problem_inputs(solver, problem, specs, np.random.default_rng(seed))
    values = {name: numerics.exact_values(arr, next(s.scalar for s in specs if s.name == name)) for name, arr in host.items()}
    ref, abs_ref = reference_outputs(solver, problem, values)
    min_bytes, macs = solver.traffic(problem)

    if progress.on_stage:
        progress.on_stage("benchmark", len(todo))
    tensors = DeviceTensors(backend, specs, host)
    try:
        for cand in todo:
            outcome = compiled[cand.name]
            if outcome.binary is None:
                m = Measurement(cand.name, None, None, 0, False, f"compile: {outcome.error}")
            else:
                m = _measure(backend, solver, problem, cand, outcome.binary, tensors, ref, abs_ref, settings, min_bytes, macs)
            measurements.append(m)
            if progress.on_measured:
                progress.on_measured(m)
    finally:
        tensors.free()
    return measurements


def _measure(backend, solver, problem, cand, binary, tensors, ref, abs_ref, settings, min_bytes, macs) -> Measurement:
    try:
        loaded = LoadedBinary(backend, binary, {})
        plan = solver.launch_plan(cand.family, cand.params, problem)
        tensors.ensure_workspace(plan.workspace_bytes)
        outputs = [s for s in tensors.specs.values() if s.role is Role.OUTPUT]
        for spec in outputs:
            backend.memset_async(tensors.pointers[spec.name], numerics.poison_byte(spec.scalar), spec.nbytes)
        if plan.workspace_bytes:
            backend.memset_async(tensors.pointers["workspace"], 0xFF, plan.workspace_bytes)
        prepared = PreparedPlan(loaded, plan)
        prepared.bind(tensors.pointers)
        prepared.enqueue()
        backend.synchronize()
        got = {s.name: numerics.exact_values(tensors.read(s.name), s.scalar) for s in outputs}
        verdict = verify(solver, problem, got, ref, abs_ref)
        if not verdict.ok:
            return Measurement(cand.name, None, None, 0, False, f"verify: {verdict.message}")
        samples = time_plan(backend, prepared, tensors, settings)
    except BackendError as exc:
        return Measurement(cand.name, None, None, 0, False, f"launch: {exc}")
    median = statistics.median(samples)
    seconds = median * 1e-6
    return Measurement(
        cand.name,
        median,
        _iqr(samples),
        len(samples),
        True,
        None,
        gbps=min_bytes / seconds / 1e9,
        tflops=2 * macs / seconds / 1e12,
    )
