"""Public Python API: problems in, a ready Kernel out.

    from factory.api import ConvProblem, Layout, DType, lookup, select, SelectMode
    p = ConvProblem(N=32, G=32, C=4, K=4, input=(56, 56), filter=(3, 3), stride=(1, 1), pad=(1, 1),
                    dilation=(1, 1), layout=Layout.NHWGC, dtype=DType.FP16)
    lookup(p)                               # the instances that compute p
    k = select(p, mode=SelectMode.TUNE)     # tuned on this GPU once, then served from the DB
    k.run(input=x, grad_output=dy, grad_weight=dw)   # torch / CuPy tensors, on their current stream
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import math
import os
import sys
import threading
import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from . import numerics
from .backends import Backend, BackendError, get_backend
from .catalog import Instance
from .compile_cache import CompileJob, compile_cached
from .device import target_for
from .executor import MODULES, PreparedPlan
from .kernel_resources import KernelResources
from .ops import solver_for
from .ops.base import Launch, Role, TensorSpec
from .problem import ConvProblem, DType, KernelFactoryError, Layout, Op, UnsupportedProblem
from .nearest import nearest_choice
from .selector import NotTuned, SelectMode, explain, forced, heuristic_pick, lookup, served_choice
from .shipped import ShippedWinner, lookup_shipped
from . import sources
from .sources import hash_of, source_of
from .tuner import Progress, TuneSettings, TuneTimes, keep_measuring_worker, retry_on_resume, tune_timed
from tuning_db import DEFAULT_DB_ENV, Measurement, TuningDB, Winner

__all__ = [
    "ConvProblem", "DType", "Layout", "Op", "SelectMode", "Kernel", "TensorMismatch", "TuneOutcome",
    "lookup", "explain", "select", "tune_problem", "candidate_code", "NotTuned", "UnsupportedProblem",
    "keep_measuring_worker",
]


class TensorMismatch(KernelFactoryError, ValueError):
    """A tensor handed to Kernel.run has the wrong shape, strides, dtype or device."""


@dataclass(frozen=True)
class Budget:
    """How much of a tune to do: the `candidates` the prior ranks first, or candidates in the prior's
    order until `seconds` of wall time have passed (compiling included). A later tune without a
    budget measures the rest."""

    candidates: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if (self.candidates is None) == (self.seconds is None):
            raise ValueError("a budget is a number of candidates or of seconds, one of the two")
        if self.candidates is not None and self.candidates < 1:
            raise ValueError(f"budget {self.candidates} must be at least 1 candidate")
        if self.seconds is not None and not (0.0 < self.seconds < float("inf")):
            raise ValueError(f"budget {self.seconds:g} s must be a positive number of seconds")

    @classmethod
    def parse(cls, text: str) -> "Budget":
        """'16' (candidates) or '5s' / '2.5s' (seconds)."""
        stripped = text.strip()
        try:
            if stripped.endswith("s"):
                return cls(seconds=float(stripped[:-1]))
            return cls(candidates=int(stripped))
        except ValueError as exc:
            if "budget" in str(exc):
                raise
            raise ValueError(f"budget {text!r} is neither a whole number of candidates nor seconds like 5s") from None

    def __str__(self) -> str:
        return f"{self.candidates} candidates" if self.candidates is not None else f"{self.seconds:g} s"


@dataclass(frozen=True)
class TuneOutcome:
    measurements: list[Measurement]  # one per candidate, in the prior's order: measured now, or the stored one a resumed run kept
    winner: Winner | None
    reused: int = 0  # candidates not measured again because this device already has their measurement
    pruned: int = 0  # applicable candidates a budget left unmeasured (by this run and before)
    times: TuneTimes = TuneTimes()  # where this run's wall time went

    @property
    def measured(self) -> int:
        """Candidates measured by this run (not reused, not pruned)."""
        return len(self.measurements) - self.reused


# How a deferred tune stores its results: finish(measurements, eligible, since) -> the winner.
# `measurements` are this run's, stamped with the code they timed; `eligible` maps each candidate to
# its current source hash; `since` is the fresh run's start (None: earlier measurements count).
Finish = Callable[[list[Measurement], Mapping[str, str], datetime | None], Winner | None]


def tune_problem(
    problem: Any,
    backend: Backend | None = None,
    db: TuningDB | None = None,
    settings: TuneSettings = TuneSettings(),
    progress: Progress = Progress(),
    *,
    fresh: bool = False,
    on_resume: Callable[[int, int], None] | None = None,
    budget: int | Budget | None = None,
    finish: Finish | None = None,
) -> TuneOutcome:
    """Measure every applicable instance on this GPU, storing the measurements as they are taken.

    A new fastest measurement is its own short transaction that also offers it to the winner rule, so
    a killed tune leaves the old winner or a verified new one, never half a result; the rest are
    stored in batches (`_storing`). A rerun on the
    same device (arch, SM count, driver, compiler) continues: candidates measured there before are
    skipped and their stored measurements count (`on_resume(already, total)` is told). `fresh`
    re-measures everything and decides the winner from this run's times only. `budget` measures only
    the `budget` candidates the op's prior ranks first (`rank_candidates`); a later tune without it
    measures the rest.

    With `finish`, nothing is stored while measuring: finish(measurements, eligible, since) stores
    them and decides the winner at the end, in one transaction of the caller's (a fleet worker's,
    which also marks its job done, only while it still holds the job's lease).
    """
    backend = backend or get_backend()
    db = db or default_db()
    device = backend.device_info()
    candidates = _candidates(problem, device)
    applicable = len(candidates)
    if isinstance(budget, int):
        budget = Budget(candidates=budget)
    # Best-ranked first, budget or not: the sooner a fast candidate is timed, the sooner the rest are
    # screened out after one probe rep (tuner.PROBE_SLOWER) instead of a warm-up and full rounds.
    candidates = rank_candidates(problem, candidates, target_for(device))
    # Every applicable candidate's stored time still counts for the winner, also those a budget leaves
    # unmeasured: a budgeted tune after a full one must not trade the incumbent for the best of its few.
    eligible = {c.name: hash_of(c) for c in candidates}
    if budget is not None:
        candidates = candidates[:budget.candidates]
    code = {c.name: eligible[c.name] for c in candidates}
    since = datetime.now(timezone.utc) if fresh else None
    stored = {} if fresh else _stored_measurements(db, problem, device, code)
    if stored and on_resume is not None:
        on_resume(len(stored), len(candidates))
    storing = contextlib.nullcontext(progress) if finish is not None else _storing(progress, db, problem, device, code)
    with storing as hooks:
        taken, times = tune_timed(problem, candidates, backend, settings, hooks, frozenset(stored),
                                  time_budget_s=budget.seconds if budget is not None else None)
    measured = [_stamped(m, code) for m in taken]
    if finish is not None:
        winner = finish(measured, eligible, since)
    else:
        winner = db.decide(problem.key, device, eligible, since)
    latest = stored | {m.instance: m for m in measured}
    kept = [latest[c.name] for c in candidates if c.name in latest]
    return TuneOutcome(kept, winner, len(stored), applicable - len(kept), times)


@dataclass(frozen=True)
class CompiledFigures:
    """A candidate's figures from its compile: what the compiler reported, and the theoretical
    occupancy its main kernel reaches on this device for the problem (None: not described)."""

    resources: KernelResources
    occupancy: float | None


def compiled_figures(problem: Any, names: Iterable[str], backend: Backend) -> dict[str, CompiledFigures]:
    """The compiler's figures (registers, spills, stack, static shared memory) and occupancy of each
    named candidate of `problem` on this device, read from the compile cache without compiling; a
    candidate whose binary is not cached (or whose compiler reports nothing) is left out."""
    from .compile_cache import cached_resources
    from .kernel_resources import MAIN_ENTRY
    from .occupancy import occupancy

    info = backend.device_info()
    target = target_for(info)
    solver = solver_for(problem.op)
    wanted = set(names)
    found: dict[str, CompiledFigures] = {}
    for c in lookup(problem, target=target):
        if c.name not in wanted:
            continue
        resources = cached_resources(info.backend, CompileJob(c.name, source_of(c).text, c.compile_arch(info.arch)))
        if resources is None:
            continue
        launches = [step for step in solver.launch_plan(c.family, c.params, problem, target).steps
                    if isinstance(step, Launch) and step.entry == MAIN_ENTRY]
        occupied = None
        if launches:
            block, shared = launches[0].block, launches[0].shared_bytes
            occupied = occupancy(resources, block[0] * block[1] * block[2], shared, target)
        found[c.name] = CompiledFigures(resources, occupied)
    return found


def rank_candidates(problem: Any, candidates: Sequence[Instance], target: Any) -> list[Instance]:
    """Candidates in the order the op's prior (its heuristic score) expects them to be fast, best first.

    Measured on the 40-problem random backward-data DB (every candidate timed; scripts/budget_regret.py):
    the best of the first 8 is within 10 % of the winner (geomean; worst 3.1x), of the first 16 within
    2 % (worst 1.39x)."""
    solver = solver_for(problem.op)
    # Ties go to the larger name, as in selector.heuristic_pick: the pick is the first ranked.
    return sorted(candidates, key=lambda c: (solver.heuristic_score(c.family, c.params, problem, target), c.name),
                  reverse=True)


def candidate_code(problem: Any, device: Any) -> dict[str, str]:
    """Each instance that computes `problem` on `device` -> the source hash of its current code.

    What a tune measures and keys its results by; a fleet job's source version is a digest of it.
    """
    return {c.name: hash_of(c) for c in _candidates(problem, device)}


def _candidates(problem: Any, device: Any) -> list[Instance]:
    candidates = lookup(problem, target=target_for(device))
    if not candidates:
        raise UnsupportedProblem(f"no instance applies to {problem.key}; `kfactory list --why` says why")
    return candidates


def _stored_measurements(db: TuningDB, problem: Any, device: Any, code: Mapping[str, str]) -> dict[str, Measurement]:
    """The latest stored measurement of each candidate on exactly this device and its current code,
    less environment failures (a cache that could not be written, a worker time limit).

    A measurement of other code (the template changed), of unknown code (a row older than source
    hashes) or failed by the environment is not reused: the candidate is measured again.
    """
    latest = {m.instance: m for m, _, _ in db.measurements(problem.key, device)
              if m.source_hash is not None and code.get(m.instance) == m.source_hash}
    return {name: m for name, m in latest.items() if not retry_on_resume(m)}


def _stamped(m: Measurement, code: Mapping[str, str]) -> Measurement:
    """`m` keyed by the code it timed (the candidate's current source hash)."""
    return m if m.source_hash is not None else dataclasses.replace(m, source_hash=code[m.instance])


STORE_BATCH = 32  # measurements that cannot win, committed together: a transaction each cost 6 ms


@contextlib.contextmanager
def _storing(progress: Progress, db: TuningDB, problem: Any, device: Any,
             code: Mapping[str, str]) -> Iterator[Progress]:
    """`progress` whose on_measured commits each measurement (and the winner it may make).

    A measurement that cannot win (failed, or slower than this tune's best so far, which is stored) waits
    for the next commit, at most STORE_BATCH of them; the rest are committed when the block ends, however
    it ends. A killed process loses at most those, which a resumed tune measures again."""
    report = progress.on_measured
    waiting: list[Measurement] = []
    best: float | None = None

    def commit() -> None:
        if waiting:
            db.record(problem.key, problem.op.value, device, list(waiting))
            waiting.clear()

    def on_measured(m: Measurement) -> None:
        nonlocal best
        m = _stamped(m, code)
        waiting.append(m)
        fastest = m.verified and m.median_us is not None and (best is None or m.median_us <= best)
        if fastest:
            best = m.median_us
        if fastest or len(waiting) >= STORE_BATCH:
            commit()
        if report is not None:
            report(m)

    try:
        yield dataclasses.replace(progress, on_measured=on_measured)
    finally:
        commit()


_DEFAULT_DBS: dict[str | None, TuningDB] = {}
_DEFAULT_DBS_KEPT = 8
_DEFAULT_DBS_LOCK = threading.Lock()


def default_db() -> TuningDB:
    """The database $KFACTORY_DB names (else the per-user default), opened once per process.

    Opening validates the schema (milliseconds); select() without db= must not pay that per call.
    """
    configured = os.environ.get(DEFAULT_DB_ENV)
    db = _DEFAULT_DBS.get(configured)
    if db is not None:
        return db
    with _DEFAULT_DBS_LOCK:
        db = _DEFAULT_DBS.get(configured)
        if db is None:
            db = TuningDB()
            while len(_DEFAULT_DBS) >= _DEFAULT_DBS_KEPT:
                _DEFAULT_DBS.pop(next(iter(_DEFAULT_DBS))).close()
            _DEFAULT_DBS[configured] = db
        return db


def select(
    problem: Any,
    mode: SelectMode | str = SelectMode.AUTO,
    instance: str | None = None,
    backend: Backend | None = None,
    db: TuningDB | None = None,
) -> "Kernel":
    """A ready Kernel for `problem`; see SelectMode for where the choice comes from.

    A stored winner is served only when it was recorded on this exact device, its instance still
    computes the problem and it was measured on the instance's current source
    (`selector.stored_choice`); otherwise the DB counts as untuned. A DB hit is memoized until the
    database changes and the Kernel is cached per process, so a repeated call costs microseconds.
    """
    mode = SelectMode(mode)
    backend = backend or get_backend()
    target = target_for(backend.device_info())
    if mode is SelectMode.FORCE:
        if instance is None:
            raise ValueError("mode force needs instance=<name>")
        return kernel_for(forced(problem, instance, target), problem, backend)
    if mode is SelectMode.HEURISTIC:
        return kernel_for(heuristic_pick(problem, target=target), problem, backend)
    db = db or default_db()
    if mode is SelectMode.AUTO:
        return kernel_for(untuned_choice(problem, db, backend).instance, problem, backend)
    choice = served_choice(problem, db, backend.device_info())
    if choice.instance is not None:
        return kernel_for(choice.instance, problem, backend)
    if mode is SelectMode.DB:
        shipped = lookup_shipped(problem, backend.device_info())
        if shipped.instance is not None:
            return kernel_for(shipped.instance, problem, backend)
        why = "".join(f"; {r.line()}" for r in choice.refusals)
        raise NotTuned(f"no tuned winner for {problem.key} on this device{why}; run `kfactory tune` or use mode=tune")
    candidates = lookup(problem, target=target)
    if mode is SelectMode.TUNE:
        by_name = {c.name: c for c in candidates}
        outcome = tune_problem(problem, backend, db)
        if outcome.winner is None or outcome.winner.instance not in by_name:
            raise NotTuned(f"tuning found no verified instance for {problem.key}")
        return kernel_for(by_name[outcome.winner.instance], problem, backend)
    return kernel_for(heuristic_pick(problem, candidates, target), problem, backend)


class Origin(enum.Enum):
    """Where a served kernel came from."""

    TUNED = "tuned"  # this problem's winner on this device
    SHIPPED = "shipped"  # the package's winner from an identical device (factory.shipped)
    NEAREST = "nearest"  # the winner of the nearest tuned problem (factory.nearest)
    HEURISTIC = "heuristic"  # the op's prior, no measurement


@dataclass(frozen=True)
class Served:
    instance: Instance
    origin: Origin
    from_problem: str | None = None  # NEAREST: the tuned problem whose winner this is
    shipped: ShippedWinner | None = None  # SHIPPED: the winner as shipped

    def describe(self) -> str:
        if self.origin is Origin.NEAREST:
            return f"served: nearest (winner of {self.from_problem})"
        if self.shipped is not None:
            return f"served: {self.shipped.describe()}"
        return f"served: {self.origin.value}"


def untuned_choice(problem: Any, db: TuningDB, backend: Backend) -> Served:
    """What select(mode=AUTO) serves without tuning: the stored winner, else the winner shipped from
    an identical device, else the nearest tuned problem's winner, else the heuristic's pick."""
    device = backend.device_info()
    choice = served_choice(problem, db, device)
    if choice.instance is not None:
        return Served(choice.instance, Origin.TUNED)
    shipped = lookup_shipped(problem, device)
    if shipped.instance is not None:
        return Served(shipped.instance, Origin.SHIPPED, shipped=shipped.found)
    near = nearest_choice(problem, db, device)
    if near is not None:
        return Served(near.instance, Origin.NEAREST, near.source_key)
    return Served(heuristic_pick(problem, target=target_for(device)), Origin.HEURISTIC)


class KernelCache:
    """Kernels per (backend, instance, problem, source generation), most recently used kept: select() on a DB hit hands
    back the Kernel it built before instead of loading and planning again. An evicted Kernel still
    works for whoever holds it; its workspace is freed when the last reference goes."""

    MAX_KERNELS = 256

    def __init__(self) -> None:
        self._kernels: dict[tuple[int, Instance, Any, int], Kernel] = {}
        self._lock = threading.Lock()

    def get(self, instance: Instance, problem: Any, backend: Backend) -> "Kernel":
        # The entry holds the backend (through its Kernel), so id(backend) is not reused while cached.
        key = (id(backend), instance, problem, sources.generation())
        kernel = self._kernels.get(key)
        if kernel is not None:
            return kernel
        kernel = Kernel(instance, problem, backend)
        with self._lock:
            kernel = self._kernels.setdefault(key, kernel)
            while len(self._kernels) > self.MAX_KERNELS:
                del self._kernels[next(iter(self._kernels))]
        return kernel

    def clear(self) -> None:
        with self._lock:
            self._kernels.clear()


KERNELS = KernelCache()


def kernel_for(instance: Instance, problem: Any, backend: Backend) -> "Kernel":
    """The process's Kernel of `instance` for `problem` on `backend` (built on first use)."""
    return KERNELS.get(instance, problem, backend)


# Every tensor pointer must be aligned to this many bytes: the widest vector load of any instance is
# 16 bytes. A misaligned load is a sticky fault that kills the caller's GPU context, so run() refuses
# such a pointer (a view at a storage offset) before launching: one AND per pointer.
POINTER_ALIGNMENT = 16
_MISALIGNED = POINTER_ALIGNMENT - 1


def _misaligned(name: str, ptr: int) -> TensorMismatch:
    return TensorMismatch(
        f"{name}: data pointer {ptr:#x} is not {POINTER_ALIGNMENT}-byte aligned (a view at a storage offset?); "
        f"the kernel's vector loads need {POINTER_ALIGNMENT}-byte aligned tensors: pass a copy (.clone())"
    )


@dataclass
class _Lane:
    """What one stream's launches of a Kernel own: packed arguments and a workspace.

    Two streams running one Kernel concurrently must not share a workspace (split-K partial sums
    would mix), so each stream gets its own, allocated on its first run.
    """

    prepared: PreparedPlan
    workspace: int
    lock: threading.Lock


def _free_workspaces(backend: Backend, workspaces: list[int]) -> None:
    """Finalizer of a Kernel: give its workspaces back (the driver waits for work still using them)."""
    while workspaces:
        try:
            backend.free(workspaces.pop())
        except BackendError:
            pass


class Kernel:
    """One compiled instance bound to one problem; run() launches on the caller's stream.

    The module is shared per process and device context (executor.MODULES); each stream the Kernel
    runs on gets its own workspace and packed arguments, so two streams may run it concurrently.
    The workspaces are freed when the Kernel is.
    """

    def __init__(self, instance: Instance, problem: Any, backend: Backend) -> None:
        self.instance = instance
        self.problem = problem
        self.backend = backend
        self._solver = solver_for(problem.op)
        self.specs: dict[str, TensorSpec] = {s.name: s for s in self._solver.tensors(problem)}
        self.target = target_for(backend.device_info())
        self.plan = self._solver.launch_plan(instance.family, instance.params, problem, self.target)
        self.source_hash = hash_of(instance)
        self._loaded = MODULES.get(backend, instance.name, self.source_hash, functools.partial(_binary, instance, backend))
        for step in self.plan.steps:  # resolve every entry now: a missing one fails here, not in run()
            if isinstance(step, Launch):
                self._loaded.kernel(step.entry)
        self._lanes: dict[int, _Lane] = {}
        self._lanes_lock = threading.Lock()
        self._workspaces: list[int] = []
        finalizer = weakref.finalize(self, _free_workspaces, backend, self._workspaces)
        finalizer.atexit = False  # at exit the process's memory goes with it; the driver may be gone
        # What run() accepts per tensor, computed once: run() sits on the caller's hot path.
        self._accepted = {name: self._accepted_layouts(name) for name in self.specs}
        self._dtypes = {name: _framework_dtype(spec) for name, spec in self.specs.items()}
        self._torch_accepted: dict[str, tuple[Any, list]] | None = None  # built on the first torch call
        # Written tensors and the tensors they must not overlap (byte extents): (output, size, others).
        aliasable = self._solver.aliasable(problem)
        self._overlap_checks = tuple(
            (out.name, out.nbytes, tuple((other.name, other.nbytes, (out.name, other.name) in aliasable)
                                         for other in self.specs.values() if other.name != out.name))
            for out in self.specs.values() if out.role is Role.OUTPUT)

    @property
    def name(self) -> str:
        return self.instance.name

    @property
    def tensor_names(self) -> list[str]:
        return list(self.specs)

    def run(self, stream: int | None = None, *, workspace: Any = None, **tensors: Any) -> None:
        """Launch on torch tensors / CuPy arrays named as `tensor_names`; checks them first.

        Accepted: a contiguous tensor of the physical shape (e.g. NHWGC -> (N, H, W, G, C)), or for
        layouts PyTorch has, the PyTorch convolution shape with that layout's strides (channels_last
        tensors for NHWGC, contiguous ones for NGCHW). Every data pointer must be 16-byte aligned
        (POINTER_ALIGNMENT); a view at an odd storage offset is refused, not launched.

        `workspace` (a device buffer of at least `workspace_bytes`, or its pointer) replaces the
        Kernel's own per-stream workspace: a caller whose allocator is stream-ordered and capture-aware
        (PyTorch's) passes one so that a first run inside a CUDA-graph capture allocates nothing itself.
        """
        if tensors.keys() != self.specs.keys():
            missing = set(self.specs) - set(tensors)
            extra = set(tensors) - set(self.specs)
            raise TensorMismatch(f"run() takes {', '.join(self.specs)}; missing {sorted(missing)}, unexpected {sorted(extra)}")
        pointers = self._torch_fast_pointers(tensors)
        if pointers is None:
            pointers = self._checked_pointers(tensors)
        self._refuse_overlap(pointers)
        if stream is None:
            # One stream lookup per call (not per tensor): it costs microseconds on the caller's hot path.
            stream = _current_stream(next(iter(tensors.values()))) or 0
        self._enqueue(pointers, stream, None if workspace is None else self._workspace_pointer(workspace))

    def run_pointers(self, pointers: Mapping[str, int], stream: int = 0, workspace: int | None = None) -> None:
        """Launch on raw device pointers laid out as `self.specs` describes (contiguous, physical order);
        `workspace` as in run()."""
        resolved: dict[str, int] = {}
        for name in self.specs:
            ptr = pointers.get(name)
            if not isinstance(ptr, int) or isinstance(ptr, bool) or ptr <= 0:  # True is an int, not a pointer
                raise TensorMismatch(f"{name}: needs a device pointer (a positive int)")
            if ptr & _MISALIGNED:
                raise _misaligned(name, ptr)
            resolved[name] = ptr
        self._refuse_overlap(resolved)
        self._enqueue(resolved, stream, None if workspace is None else self._workspace_pointer(workspace))

    def _refuse_overlap(self, pointers: Mapping[str, int]) -> None:
        """A written tensor may not share memory with another tensor of the call (the kernel would read
        what it has already overwritten), except the very same buffer where the op allows it (an
        epilogue's D may be the output itself)."""
        for out, out_bytes, others in self._overlap_checks:
            start = pointers[out]
            for name, nbytes, same_allowed in others:
                other = pointers[name]
                if other < start + out_bytes and start < other + nbytes:
                    if same_allowed and other == start:
                        continue
                    raise TensorMismatch(f"{out} overlaps {name} in memory: the output must be a buffer of its own"
                                         + (" (or exactly the same tensor)" if same_allowed else ""))

    @property
    def workspace_bytes(self) -> int:
        """Scratch memory a run needs (0: none); see run(workspace=)."""
        return self.plan.workspace_bytes

    def workspace(self, stream: int = 0) -> int:
        """The workspace pointer runs on `stream` use (0 when the plan needs none); allocated on first use."""
        return self._lane(stream, own_workspace=True).workspace

    def _lane(self, stream: int, own_workspace: bool) -> _Lane:
        lane = self._lanes.get(stream)
        if lane is not None and (lane.workspace or not own_workspace or not self.plan.workspace_bytes):
            return lane
        with self._lanes_lock:
            lane = self._lanes.get(stream)
            if lane is None:
                lane = self._lanes[stream] = _Lane(PreparedPlan(self._loaded, self.plan), 0, threading.Lock())
            if own_workspace and self.plan.workspace_bytes and not lane.workspace:
                lane.workspace = self.backend.alloc(self.plan.workspace_bytes)
                self._workspaces.append(lane.workspace)
            return lane

    def _enqueue(self, pointers: dict[str, int], stream: int, workspace: int | None = None) -> None:
        """Launch on `stream` with `workspace`, else this stream's own; `pointers` is the caller's own dict."""
        lane = self._lane(stream, own_workspace=workspace is None)
        pointers["workspace"] = lane.workspace if workspace is None else workspace
        with lane.lock:  # bind + enqueue as one: the packed arguments are the lane's
            lane.prepared.bind(pointers)
            lane.prepared.enqueue(stream)

    def _workspace_pointer(self, value: Any) -> int:
        """The device pointer of a caller's workspace: an int, a torch tensor or a CuPy array of enough bytes."""
        need = self.plan.workspace_bytes
        if isinstance(value, int) and not isinstance(value, bool):
            ptr, nbytes = value, need
        elif hasattr(value, "data_ptr"):  # torch
            if not value.is_cuda:
                raise TensorMismatch("workspace: must be on the GPU")
            ptr, nbytes = value.data_ptr(), value.numel() * value.element_size()
        elif hasattr(value, "data") and hasattr(value.data, "ptr"):  # CuPy
            ptr, nbytes = value.data.ptr, value.nbytes
        else:
            raise TensorMismatch(f"workspace: a device pointer, torch tensor or CuPy array, not {type(value).__name__}")
        if need and (ptr <= 0 or nbytes < need):
            raise TensorMismatch(f"workspace: needs {need} bytes at a device pointer, got {nbytes} bytes at {ptr:#x}")
        if ptr & _MISALIGNED:
            raise _misaligned("workspace", ptr)
        return ptr

    # --- tensor checks --------------------------------------------------------------------------
    def _accepted_layouts(self, name: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        spec = self.specs[name]
        accepted = [(spec.shape, _contiguous_strides(spec.shape))]
        alt = self._solver.framework_view(self.problem, name)
        if alt is not None:
            accepted.append(alt)
        return accepted

    def _checked_pointers(self, tensors: Mapping[str, Any]) -> dict[str, int]:
        """Data pointers after the full checks of every tensor; raises TensorMismatch naming the first bad one."""
        pointers: dict[str, int] = {}
        devices = set()
        for name, value in tensors.items():
            pointers[name], device = self._check_tensor(name, value)
            devices.add(device)
        if len(devices) > 1:
            raise TensorMismatch(f"tensors on different GPUs {sorted(devices)}: one kernel runs on one device")
        return pointers

    def _torch_fast_pointers(self, tensors: Mapping[str, Any]) -> dict[str, int] | None:
        """Data pointers when every tensor is a CUDA torch tensor of exactly an accepted dtype, shape and
        strides, all on one GPU: the common call, checked with a few attribute reads per tensor. None sends
        the call through `_checked_pointers`, which accepts the rest (size-1 dims with any stride, CuPy)
        and words the errors."""
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        if self._torch_accepted is None:
            self._torch_accepted = {name: (_torch_dtypes(torch)[spec.scalar.numpy_name], self._accepted[name])
                                    for name, spec in self.specs.items()}
        tensor_type = torch.Tensor
        pointers: dict[str, int] = {}
        device = None
        for name, value in tensors.items():
            dtype, accepted = self._torch_accepted[name]
            if not isinstance(value, tensor_type) or value.dtype is not dtype or not value.is_cuda:
                return None
            shape, strides = value.shape, value.stride()
            if not any(shape == s and strides == t for s, t in accepted):
                return None
            index = value.get_device()
            if device is None:
                device = index
            elif index != device:
                return None
            ptr = value.data_ptr()
            if ptr & _MISALIGNED:
                return None  # the checked path words the refusal
            pointers[name] = ptr
        return pointers

    def _check_tensor(self, name: str, value: Any) -> tuple[int, int]:
        """(data pointer, device index) of a tensor that matches the spec named `name`."""
        shape, strides, dtype_name, device, ptr = _describe(value)
        if device is None:
            raise TensorMismatch(f"{name}: must be on the GPU, got a host tensor")
        want_dtype = self._dtypes[name]
        if dtype_name not in want_dtype:
            raise TensorMismatch(f"{name}: dtype {dtype_name}, expected {' or '.join(sorted(want_dtype))}")
        accepted = self._accepted[name]
        if not any(_same_layout(shape, strides, s, t) for s, t in accepted):
            shown = " or ".join(f"shape {tuple(s)} strides {tuple(t)}" for s, t in accepted)
            raise TensorMismatch(f"{name}: shape {tuple(shape)} strides {tuple(strides)}; expected {shown}")
        if ptr & _MISALIGNED:
            raise _misaligned(name, ptr)
        return ptr, device


def _binary(instance: Instance, backend: Backend) -> bytes:
    """The instance's binary for the backend's device, through the on-disk compile cache."""
    outcome = compile_cached(backend.kind, CompileJob(instance.name, source_of(instance).text,
                                                            instance.compile_arch(backend.device_info().arch)))
    if outcome.binary is None:
        raise KernelFactoryError(f"{instance.name} failed to compile: {outcome.error}")
    return outcome.binary


def _same_layout(shape, strides, want_shape, want_strides) -> bool:
    """Equal shapes and equal strides on every dim longer than 1 (a size-1 dim's stride is arbitrary)."""
    if tuple(shape) != tuple(want_shape):
        return False
    return all(n == 1 or a == b for n, a, b in zip(shape, strides, want_strides))


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _framework_dtype(spec: TensorSpec) -> set[str]:
    return {
        "float16": {"float16"},
        "bfloat16": {"bfloat16"},
        "float32": {"float32"},
        "int8": {"int8"},
        "int32": {"int32"},
    }[spec.scalar.numpy_name]


def _framework(value: Any) -> str:
    module = type(value).__module__.split(".")[0]
    if module not in ("torch", "cupy"):
        raise TensorMismatch(f"unsupported tensor type {type(value).__name__}: pass torch tensors, CuPy arrays, or use run_pointers")
    return module


def _describe(value: Any) -> tuple[tuple[int, ...], tuple[int, ...], str, int | None, int]:
    """(shape, element strides, dtype name, GPU index or None for host memory, data pointer) of a torch/CuPy array."""
    if _framework(value) == "torch":
        device = value.device
        index = (device.index or 0) if device.type == "cuda" else None
        return tuple(value.shape), tuple(value.stride()), _torch_dtype_name(value.dtype), index, value.data_ptr()
    strides = tuple(s // value.itemsize for s in value.strides)
    return tuple(value.shape), strides, str(value.dtype), int(value.device.id), int(value.data.ptr)


def _current_stream(value: Any) -> int | None:
    """The framework's current stream on the value's device (None for host memory)."""
    if _framework(value) == "torch":
        import torch

        if not value.is_cuda:
            return None
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what torch's own launchers call: ~1 µs
        if raw is not None:
            return raw(value.get_device())
        return torch.cuda.current_stream(value.device).cuda_stream
    import cupy

    return cupy.cuda.get_current_stream().ptr


@functools.lru_cache(maxsize=1)
def _torch_dtypes(torch: Any) -> dict[str, Any]:
    """numpy dtype names -> torch dtypes."""
    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
            "int8": torch.int8, "int32": torch.int32}


_TORCH_DTYPE_NAMES: dict[Any, str] = {}


def _torch_dtype_name(dtype: Any) -> str:
    name = _TORCH_DTYPE_NAMES.get(dtype)
    if name is None:
        name = _TORCH_DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name
