"""Tune a problem: compile candidates in parallel, verify each on the GPU, time the good ones, rank.

Timing follows triton.testing.do_bench: warm-up, an L2 flush before every rep, device events around
the kernel alone, the median of the reps. Inputs are fresh random data; outputs are poisoned before
the verification run. A candidate that fails to compile, launch or verify is recorded with its error.

Inputs are uniform in [-1, 1) unless the op's solver provides `random_inputs(problem, rng)`, for
inputs that must hang together (a normalization's statistics are those of its input).

Candidates are measured in a worker process (factory.worker) by default: a kernel that faults leaves
its GPU context unusable for the rest of the process, and one that never finishes cannot be stopped
from the host. A candidate that takes the worker with it (a sticky error, a crash, its time limit) is
recorded as failed and the next candidate gets a fresh worker.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import math
import os
import re
import statistics
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from . import numerics
from .array_handoff import ArrayHandoff, received
from .backends import Backend, BackendError
from .catalog import Instance
from .sources import source_of
from .compile_cache import CompileJob, CompileStream
from .executor import LoadedBinary, PreparedPlan
from .device import DeviceTarget, target_for
from .device_check import MAX_CHECKED_ELEMENTS, DeviceCheck
from .ops import solver_for
from .ops.base import DeviceReference, Role, TensorSpec
from .reference_device import device_references, prefetch as prefetch_torch
from .verify import Verdict, reference_outputs, verify
from .worker import LossKind, Worker, WorkerLost, WorkerSpec
from tuning_db import Measurement

L2_FLUSH_BYTES = 256 * 1024 * 1024  # well above any current GPU's last-level cache

# Adaptive repetitions: reps are taken in rounds; a candidate stops once its median has settled, or
# once even its fastest rep is clearly slower than the best candidate so far. `reps` is the most.
ROUND_REPS = 5
MIN_STABLE_REPS = 10  # a median settles over at least this many reps
STABLE_MEDIAN = 0.01  # ... when a round moves it by at most 1 %
CLEARLY_SLOWER = 1.5  # fastest rep over the best median so far: not worth more reps
# Screening: once a best median exists, a candidate first gets one probe rep (the verification run
# has loaded and warmed it); a probe this much slower than the best ends it before any warm-up. One
# rep is noisier than a round's fastest, hence the wider margin. Most of a large tune's candidates
# end here, which is where its timing time went (warm-up and a first round each).
PROBE_SLOWER = 2.0
# A rep's flushes keep the GPU busy while the host enqueues the plan; when the host takes longer (a
# plan of several launches, the host shared with the compile workers) the GPU waits inside the events
# and the rep times the host. Reps whose median enqueue outlasted their flushes run again behind
# HOST_MARGIN x as much flushing (bench/timing.py's CudaTimer does the same), at most MAX_FLUSHES.
HOST_MARGIN = 1.5
MAX_FLUSHES = 16


def flushes_to_cover(host_us: float, flush_us: float) -> int:
    """Flushes before a rep that keep the GPU busy while the host takes `host_us` to enqueue it."""
    return max(1, math.ceil(HOST_MARGIN * host_us / flush_us))


class Isolation(enum.Enum):
    """Where candidates are verified and timed."""

    SUBPROCESS = "subprocess"  # a worker process per tune: survives faulting and hanging kernels
    IN_PROCESS = "in_process"  # the calling process: for debugging, and backends a child cannot rebuild


@dataclass(frozen=True)
class TuneSettings:
    reps: int = 25
    warmup: int = 5
    seed: int | None = None  # None: fresh entropy each run
    compile_workers: int | None = None
    isolation: Isolation = Isolation.SUBPROCESS
    adaptive: bool = True  # stop a candidate's reps early (ROUND_REPS ... CLEARLY_SLOWER); False: always `reps`
    # Check outputs on the device where the backend can (factory/device_check.py): only a failing
    # candidate's outputs are read back. False: every candidate's outputs are read back and checked here.
    device_verify: bool = True
    # Wall-clock limit for one candidate's verification and timing in the worker; None: derived, see
    # candidate_timeout(). Not applied in-process (a running kernel cannot be interrupted there).
    candidate_timeout_s: float | None = None


@dataclass
class Progress:
    """Callbacks a front end hooks to show progress; all optional."""

    on_compiled: Callable[[str, bool], None] | None = None
    on_measured: Callable[[Measurement], None] | None = None
    on_stage: Callable[[str, int], None] | None = None  # (stage name, total items)
    on_worker_restart: Callable[[str, str], None] | None = None  # (candidate that lost the worker, why)


@dataclass(frozen=True)
class TuneTimes:
    """Wall seconds of one tune by phase, so a slow tune says which phase was slow.

    `compile`: the measuring waiting for a binary not compiled yet. `reference`: the inputs drawn and
    the numpy reference computed, once per tune (compiles run meanwhile). `verify` and `time`
    are summed over the candidates as the worker measured them (a run checked against the reference;
    the timed repetitions). `workers`: the rest of the measuring, chiefly worker processes started
    and replaced and the hand-over of each candidate.
    """

    compile_s: float = 0.0  # waiting for binaries: compiles run beside the reference and the measuring
    reference_s: float = 0.0
    verify_s: float = 0.0
    time_s: float = 0.0
    workers_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.compile_s + self.reference_s + self.verify_s + self.time_s + self.workers_s

    def summary(self) -> str:
        return (f"{self.total_s:.1f} s: compile {self.compile_s:.1f}, reference {self.reference_s:.1f}, "
                f"verify {self.verify_s:.1f}, time {self.time_s:.1f}, workers {self.workers_s:.1f}")


class FailureCause(enum.Enum):
    """Why a measurement failed, which decides whether a resumed tune measures it again."""

    CANDIDATE = "candidate"  # the kernel: it does not compile, launch or verify; measuring again changes nothing
    ENVIRONMENT = "environment"  # this machine at that moment: cache I/O, a worker time limit


# Errors of the environment, as stored in Measurement.error: a worker killed on its time limit, and
# file-system errors around a compile (a cache directory that could not be written, before such
# failures stopped failing candidates).
_ENVIRONMENT_ERROR = re.compile(
    rf"^({re.escape(LossKind.TIMEOUT.value)}: |compile: (OSError|PermissionError|FileNotFoundError|FileExistsError"
    r"|IsADirectoryError|NotADirectoryError|BlockingIOError|InterruptedError)\b)"
)


def failure_cause(m: Measurement) -> FailureCause | None:
    """None for a verified measurement, else whether the candidate or the environment failed."""
    if m.verified:
        return None
    if m.error is not None and _ENVIRONMENT_ERROR.match(m.error):
        return FailureCause.ENVIRONMENT
    return FailureCause.CANDIDATE


def retry_on_resume(m: Measurement) -> bool:
    """Whether a resumed tune measures this candidate again instead of reusing `m`."""
    return failure_cause(m) is FailureCause.ENVIRONMENT


# Derived candidate time limits (seconds), see candidate_timeout().
FIRST_TIMEOUT_S = 10.0
HOST_BYTES_PER_S = 50e6  # a pessimistic rate for uploads, read-back and numpy verification
MIN_TIMEOUT_S = 2.0
KERNEL_SLACK = 50.0
HOST_SLACK = 4.0


def candidate_timeout(
    settings: TuneSettings, tensor_bytes: int, fastest_median_us: float | None, quickest_job_s: float | None
) -> float:
    """The wall-clock limit for the next candidate's verification and timing in the worker.

    `settings.candidate_timeout_s` when set. Otherwise, before any candidate has verified:
    FIRST_TIMEOUT_S + tensor_bytes / HOST_BYTES_PER_S (module load and first launch, plus the host-side
    read-back and check of large outputs, which no timing predicts yet). Once one has:

        max(MIN_TIMEOUT_S, HOST_SLACK * quickest_job_s,
            KERNEL_SLACK * (warmup + reps + 2) * fastest_median)

    where quickest_job_s is the shortest whole job (load, verify, time) of a verified candidate, so
    the host work is covered four times over, and the last term lets a kernel 50 times slower than
    the fastest so far finish its verification run, warm-up and reps (+1 for slack). A kernel that
    slow cannot win; a limit that kills it costs one worker restart, never a wrong result.
    """
    if settings.candidate_timeout_s is not None:
        return settings.candidate_timeout_s
    if fastest_median_us is None or quickest_job_s is None:
        return FIRST_TIMEOUT_S + tensor_bytes / HOST_BYTES_PER_S
    launches = settings.warmup + settings.reps + 2
    return max(MIN_TIMEOUT_S, HOST_SLACK * quickest_job_s, KERNEL_SLACK * launches * fastest_median_us * 1e-6)


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
        self._flush_us: float | None = None

    def flush_us(self) -> float:
        """GPU µs of one flush (measured once): how long the host may take to enqueue a rep unseen."""
        if self._flush_us is None:
            events = [(self.backend.event_create(), self.backend.event_create()) for _ in range(3)]
            try:
                for start, end in events:
                    self.backend.event_record(start)
                    self.backend.memset_async(self.flush, 0, L2_FLUSH_BYTES)
                    self.backend.event_record(end)
                self.backend.synchronize()
                self._flush_us = statistics.median(self.backend.event_elapsed_ms(s, e) * 1000.0 for s, e in events)
            finally:
                for start, end in events:
                    self.backend.event_destroy(start)
                    self.backend.event_destroy(end)
        return self._flush_us

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


def time_plan(backend: Backend, prepared: PreparedPlan, tensors: DeviceTensors, settings: TuneSettings,
              best_us: float | None = None) -> list[float]:
    """Per-rep microseconds of the plan alone, L2 flushed before each rep.

    The flush (a 256 MiB memset) also keeps the GPU busy while the host enqueues the rep, so host
    launch overhead does not leak into the events. With `settings.adaptive` the reps come in rounds
    of ROUND_REPS and stop early: when a round moved the median by at most STABLE_MEDIAN (after
    MIN_STABLE_REPS), or when even the fastest rep is CLEARLY_SLOWER than `best_us`, the best median
    measured so far in this tune; before any of that, a single probe rep PROBE_SLOWER than `best_us`
    ends the candidate (its one sample is returned).
    """
    flushes = 1
    if settings.adaptive and best_us is not None:
        probe, flushes = _covered_reps(backend, prepared, tensors, 1, flushes)
        if probe[0] > PROBE_SLOWER * best_us:
            return probe
    for _ in range(settings.warmup):
        prepared.enqueue()
    backend.synchronize()
    samples: list[float] = []
    settled: float | None = None
    while len(samples) < settings.reps:
        count = min(ROUND_REPS, settings.reps - len(samples)) if settings.adaptive else settings.reps
        taken, flushes = _covered_reps(backend, prepared, tensors, count, flushes)
        samples += taken
        if not settings.adaptive:
            break
        if best_us is not None and min(samples) > CLEARLY_SLOWER * best_us:
            break
        median = statistics.median(samples)
        if settled is not None and len(samples) >= MIN_STABLE_REPS and abs(median - settled) <= STABLE_MEDIAN * settled:
            break
        settled = median
    return samples


def _covered_reps(backend: Backend, prepared: PreparedPlan, tensors: DeviceTensors, count: int,
                  flushes: int) -> tuple[list[float], int]:
    """`count` timed reps behind `flushes` flushes each, taken again behind more when their median
    enqueue outlasted those flushes; the samples and the flushes the next reps start from."""
    samples, enqueue_us = _timed_reps(backend, prepared, tensors, count, flushes)
    host = statistics.median(enqueue_us)
    if host > flushes * tensors.flush_us() and flushes < MAX_FLUSHES:
        flushes = min(MAX_FLUSHES, max(flushes + 1, flushes_to_cover(host, tensors.flush_us())))
        samples, _ = _timed_reps(backend, prepared, tensors, count, flushes)
    return samples, flushes


def _timed_reps(backend: Backend, prepared: PreparedPlan, tensors: DeviceTensors, count: int,
                flushes: int = 1) -> tuple[list[float], list[float]]:
    """GPU µs of each rep, and the host's µs enqueueing it (from its start event to its end event)."""
    starts = [backend.event_create() for _ in range(count)]
    ends = [backend.event_create() for _ in range(count)]
    enqueue_us: list[float] = []
    try:
        for start, end in zip(starts, ends):
            for _ in range(flushes):
                backend.memset_async(tensors.flush, 0, L2_FLUSH_BYTES)
            began = time.perf_counter()
            backend.event_record(start)
            prepared.enqueue()
            backend.event_record(end)
            enqueue_us.append((time.perf_counter() - began) * 1e6)
        backend.synchronize()
        return [backend.event_elapsed_ms(s, e) * 1000.0 for s, e in zip(starts, ends)], enqueue_us
    finally:
        for ev in starts + ends:
            backend.event_destroy(ev)


def _iqr(samples: Sequence[float]) -> float:
    if len(samples) < 2:
        return 0.0  # a screened-out candidate's single probe: no spread to report
    q = statistics.quantiles(samples, n=4)
    return q[2] - q[0]


def make_host_inputs(specs: Sequence[TensorSpec], rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {s.name: numerics.random_tensor(rng, s.shape, s.scalar) for s in specs if s.role is Role.INPUT}


def problem_inputs(solver: Any, problem: Any, specs: Sequence[TensorSpec], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Host inputs in storage types: the op's own `random_inputs` when it draws them, else uniform."""
    custom = solver.random_inputs(problem, rng)
    return custom if custom is not None else make_host_inputs(specs, rng)


def tune(
    problem: Any,
    candidates: Sequence[Instance],
    backend: Backend,
    settings: TuneSettings = TuneSettings(),
    progress: Progress = Progress(),
    skip: frozenset[str] = frozenset(),
) -> list[Measurement]:
    """Measure every candidate (except those named in `skip`); failures are measurements too.
    tune_timed's measurements, without the wall times."""
    return tune_timed(problem, candidates, backend, settings, progress, skip)[0]


def tune_timed(
    problem: Any,
    candidates: Sequence[Instance],
    backend: Backend,
    settings: TuneSettings = TuneSettings(),
    progress: Progress = Progress(),
    skip: frozenset[str] = frozenset(),
    time_budget_s: float | None = None,
) -> tuple[list[Measurement], TuneTimes]:
    """Measure the candidates (except those named in `skip`) in the order given; failures are
    measurements too. Also returns where the wall time went.

    Candidates compile in worker processes from the start, in that order, while the reference is
    computed and earlier candidates are measured; the measuring waits only for a binary not ready yet.
    With `time_budget_s`, no candidate after the first starts once that many seconds have passed since
    the tune began: those left are not measured, nor compiled if not started (a later tune measures them).

    The parent compiles; with `Isolation.SUBPROCESS` (the default) a worker process, rebuilt from
    `backend.worker_factory()`, holds the device tensors and verifies and times each binary. It is
    started on first use, replaced after a sticky error, a crash or a time limit, and always stopped
    before this returns or raises. A backend without a worker factory is measured in-process, with a
    warning.
    """
    solver = solver_for(problem.op)
    info = backend.device_info()
    todo = [c for c in candidates if c.name not in skip]
    measurements: list[Measurement] = []
    if not todo:
        return measurements, TuneTimes()

    started = time.monotonic()
    if progress.on_stage:
        progress.on_stage("compile", len(todo))
    jobs = [CompileJob(c.name, source_of(c).text, c.compile_arch(info.arch)) for c in todo]
    on_compiled = (lambda o: progress.on_compiled(o.name, o.binary is not None)) if progress.on_compiled else None
    with CompileStream(info.backend, jobs, workers=settings.compile_workers, on_done=on_compiled) as compiles, \
            _launched_worker(backend, settings) as launched:
        specs = solver.tensors(problem)
        min_bytes, macs = solver.traffic(problem)
        on_device = device_reference(backend, solver, problem, specs, settings)
        ordinal = getattr(backend, "ordinal", None)  # None: a backend PyTorch cannot address (a test's fake GPU)
        if on_device is None:
            prefetch_torch(ordinal, macs)
        seed = settings.seed if settings.seed is not None else int.from_bytes(os.urandom(4), "little")
        host = problem_inputs(solver, problem, specs, np.random.default_rng(seed))
        ref = abs_ref = None  # computed by the measuring side, on the device, from the tensors it uploads
        if on_device is None:
            with device_references(ordinal):  # a large convolution's float64 reference may compute on this GPU
                ref, abs_ref = host_references(solver, problem, specs, host)

        bench = Bench(solver, problem, tuple(specs), host, ref, abs_ref, settings, min_bytes, macs, target_for(info),
                      on_device)
        referenced_at = time.monotonic()
        compile_s = verify_s = time_s = 0.0
        best_us: float | None = None  # the fastest verified median so far: a candidate far above it stops early
        if progress.on_stage:
            progress.on_stage("benchmark", len(todo))
        with _runner(backend, bench, progress, launched) as runner:
            for cand in todo:
                if time_budget_s is not None and measurements and time.monotonic() - started >= time_budget_s:
                    break  # the prior's first candidate is always measured: a tune answers something
                waited_from = time.monotonic()
                compiled = compiles.result(cand.name)
                compile_s += time.monotonic() - waited_from
                if compiled.binary is None:
                    m = Measurement(cand.name, None, None, 0, False, f"compile: {compiled.error}")
                else:
                    outcome = runner.measure(cand, compiled.binary, best_us)
                    m, verify_s, time_s = outcome.measurement, verify_s + outcome.verify_s, time_s + outcome.time_s
                    if m.verified and m.median_us is not None:
                        best_us = m.median_us if best_us is None else min(best_us, m.median_us)
                measurements.append(m)
                if progress.on_measured:
                    progress.on_measured(m)
        measuring_s = time.monotonic() - referenced_at
    times = TuneTimes(compile_s, referenced_at - started, verify_s, time_s,
                      max(0.0, measuring_s - compile_s - verify_s - time_s))
    return measurements, times


def device_reference(backend: Backend, solver: Any, problem: Any, specs: Sequence[TensorSpec],
                     settings: TuneSettings) -> DeviceReference | None:
    """The op's reference kernel where this tune checks outputs on the device and the op has one for
    the problem: the reference then never exists on the host unless a candidate fails (its message reads
    it back). None: the host computes it (numpy, or PyTorch on the GPU for a large one)."""
    return solver.device_reference(problem) if checks_on_device(backend, specs, settings) else None


def checks_on_device(backend: Backend, specs: Sequence[TensorSpec], settings: TuneSettings) -> bool:
    """Whether a tune checks outputs on the device: the settings ask for it, the backend runs our own
    kernels (`device_checks`: the CUDA and HIP backends) and the outputs are small enough to hold
    references beside them."""
    return (settings.device_verify and getattr(backend, "device_checks", False)
            and sum(s.numel for s in specs if s.role is Role.OUTPUT) <= MAX_CHECKED_ELEMENTS)


def host_references(solver: Any, problem: Any, specs: Sequence[TensorSpec],
                    host: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(reference, error scale) of every output from the storage-typed inputs `host`."""
    scalars = {s.name: s.scalar for s in specs}
    values = {name: numerics.exact_values(arr, scalars[name]) for name, arr in host.items()}
    return reference_outputs(solver, problem, values)


@dataclass(frozen=True)
class Bench:
    """What measuring a candidate needs besides its binary; sent once to each worker it starts (its large
    arrays as files in shared memory, factory.array_handoff, which the worker maps when it starts).
    `ref` and `abs_ref` are None where `on_device` computes them on the measuring side."""

    solver: Any
    problem: Any
    specs: tuple[TensorSpec, ...]
    host: dict[str, np.ndarray]
    ref: dict[str, np.ndarray] | None
    abs_ref: dict[str, np.ndarray] | None
    settings: TuneSettings
    min_bytes: int
    macs: int
    target: DeviceTarget  # the device the launch plans are laid out for
    on_device: DeviceReference | None = None

    @property
    def tensor_bytes(self) -> int:
        return sum(s.nbytes for s in self.specs)


@dataclass(frozen=True)
class Outcome:
    """A measurement, whether its error left the device context unusable, and the seconds its
    verification run and its timed repetitions took."""

    measurement: Measurement
    sticky: bool = False
    verify_s: float = 0.0
    time_s: float = 0.0


@dataclass(frozen=True)
class _Job:
    cand: Instance
    binary: bytes
    best_us: float | None = None  # the tune's fastest verified median so far


@dataclass(frozen=True)
class _Launched:
    worker: Worker
    handoff: ArrayHandoff  # where its payload's large arrays go instead of the pipe
    kept: bool = False  # the worker outlives the tune (keep_measuring_worker): released, not stopped


class _KeptWorker:
    """The measuring worker that keep_measuring_worker's block keeps between tunes (one backend at a time)."""

    def __init__(self) -> None:
        self.worker: Worker | None = None
        self.key: Any = None

    def worker_for(self, rebuild: Callable[[], Any]) -> Worker:
        key = _factory_key(rebuild)
        if self.worker is None or self.key != key:
            self.close()
            self.worker = Worker(WorkerSpec(rebuild, _worker_init, _worker_step, None, release=_worker_release))
            self.key = key
        return self.worker

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None


_KEPT: contextvars.ContextVar[_KeptWorker | None] = contextvars.ContextVar("kfactory_kept_worker", default=None)


@contextlib.contextmanager
def keep_measuring_worker() -> Iterator[None]:
    """Within the block, tune after tune shares one measuring worker process: its interpreter, imports
    and GPU context start once, and each tune sends it only its payload (the worker drops the last tune's
    tensors first). A worker a candidate took down is replaced as in a single tune. Stopped when the
    block ends; a nested block uses the outer one's."""
    if _KEPT.get() is not None:
        yield
        return
    kept = _KeptWorker()
    token = _KEPT.set(kept)
    try:
        yield
    finally:
        _KEPT.reset(token)
        kept.close()


def _factory_key(rebuild: Callable[[], Any]) -> Any:
    """What makes two backend factories the same (functools.partial compares by identity)."""
    if isinstance(rebuild, functools.partial):
        return (rebuild.func, rebuild.args, tuple(sorted(rebuild.keywords.items())))
    return rebuild


@contextlib.contextmanager
def _launched_worker(backend: Backend, settings: TuneSettings) -> Iterator[_Launched | None]:
    """The tune's measuring worker, launched now: its interpreter, imports and GPU context come up while
    the parent draws the inputs and computes the reference. None where the tune measures in-process.
    Inside keep_measuring_worker, the kept worker: released at the end instead of stopped."""
    factory = getattr(backend, "worker_factory", None)
    rebuild = factory() if factory is not None and settings.isolation is Isolation.SUBPROCESS else None
    if rebuild is None:
        yield None
        return
    kept = _KEPT.get()
    if kept is None:
        with ArrayHandoff() as handoff, Worker(WorkerSpec(rebuild, _worker_init, _worker_step, None)) as worker:
            worker.launch()
            yield _Launched(worker, handoff)
        return
    worker = kept.worker_for(rebuild)
    with ArrayHandoff() as handoff:
        worker.launch()
        try:
            yield _Launched(worker, handoff, kept=True)
        except BaseException:
            worker.kill()  # it may be busy with a candidate: the next tune starts a fresh one
            raise
        worker.release()  # drops this tune's tensors; one that cannot is stopped, and the next starts afresh


def _runner(backend: Backend, bench: Bench, progress: Progress, launched: _Launched | None) -> "_InProcess | _Isolated":
    """The worker `_launched_worker` started, given its payload; else measurement in this process."""
    if launched is not None:
        share = launched.handoff.share
        payload = replace(bench, host=share(bench.host), ref=bench.ref and share(bench.ref),
                          abs_ref=bench.abs_ref and share(bench.abs_ref))
        launched.worker.spec = replace(launched.worker.spec, payload=payload)
        return _Isolated(launched.worker, bench, progress, launched.kept)
    if bench.settings.isolation is Isolation.SUBPROCESS:
        warnings.warn(
            f"{type(backend).__name__} cannot be rebuilt in a worker process; measuring in this process "
            "(a faulting kernel ends the tune, a hanging one hangs it)",
            RuntimeWarning,
            stacklevel=3,
        )
    return _InProcess(backend, bench)


class _InProcess:
    """Measure in the calling process, on device tensors allocated once for the whole tune."""

    def __init__(self, backend: Backend, bench: Bench) -> None:
        self.backend = backend
        self.tensors = DeviceTensors(backend, bench.specs, bench.host)
        self.check = device_check_for(backend, bench, self.tensors)
        self.bench = with_references(bench, self.check)

    def measure(self, cand: Instance, binary: bytes, best_us: float | None = None) -> Outcome:
        return _measure(self.backend, self.bench, cand, binary, self.tensors, best_us, self.check)

    def __enter__(self) -> "_InProcess":
        return self

    def __exit__(self, *_: object) -> None:
        if self.check is not None:
            self.check.free()
        self.tensors.free()


class _Isolated:
    """Measure in a worker process; a candidate that takes the worker with it fails, the next gets a new one."""

    def __init__(self, worker: Worker, bench: Bench, progress: Progress, kept: bool = False) -> None:
        self.bench = bench
        self.progress = progress
        self.worker = worker
        self.kept = kept  # the worker outlives the tune: _launched_worker releases it
        self.fastest_us: float | None = None
        self.quickest_job_s: float | None = None

    def measure(self, cand: Instance, binary: bytes, best_us: float | None = None) -> Outcome:
        limit = candidate_timeout(self.bench.settings, self.bench.tensor_bytes, self.fastest_us, self.quickest_job_s)
        self.worker.start()  # outside the timed job: a fresh worker's start has its own limit
        started = time.monotonic()
        reply = self.worker.call(_Job(cand, binary, best_us), limit)
        elapsed = time.monotonic() - started
        if isinstance(reply, WorkerLost):
            self._restarted(cand, str(reply))
            return Outcome(Measurement(cand.name, None, None, 0, False, str(reply)))
        m = reply.measurement
        if reply.sticky:
            self.worker.stop()
            self._restarted(cand, m.error or "sticky error")
            return replace(reply, measurement=replace(m, error=f"{m.error} (worker restarted)"))
        if m.verified and m.median_us is not None:
            self.fastest_us = m.median_us if self.fastest_us is None else min(self.fastest_us, m.median_us)
            self.quickest_job_s = elapsed if self.quickest_job_s is None else min(self.quickest_job_s, elapsed)
        return reply

    def _restarted(self, cand: Instance, why: str) -> None:
        if self.progress.on_worker_restart:
            self.progress.on_worker_restart(cand.name, why)

    def __enter__(self) -> "_Isolated":
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not self.kept:
            self.worker.__exit__(exc_type, exc, tb)


# --- the worker process's side -----------------------------------------------------------------
@dataclass
class _WorkerState:
    backend: Backend
    bench: Bench
    tensors: DeviceTensors
    check: DeviceCheck | None


def _worker_init(backend: Backend, sent: Bench) -> _WorkerState:
    # Large arrays arrive as files in shared memory (factory.array_handoff): mapped, not copied.
    bench = replace(sent, host=received(sent.host), ref=sent.ref and received(sent.ref),
                    abs_ref=sent.abs_ref and received(sent.abs_ref))
    tensors = DeviceTensors(backend, bench.specs, bench.host)
    check = device_check_for(backend, bench, tensors)
    return _WorkerState(backend, with_references(bench, check), tensors, check)


def _worker_release(state: _WorkerState) -> None:
    """A kept worker's state given up before the next tune's: its device tensors and references."""
    if state.check is not None:
        state.check.free()
    state.tensors.free()


def _worker_step(state: _WorkerState, job: _Job) -> Outcome:
    return _measure(state.backend, state.bench, job.cand, job.binary, state.tensors, job.best_us, state.check)


def device_check_for(backend: Backend, bench: Bench, tensors: DeviceTensors) -> DeviceCheck | None:
    """The tune's device-side output check where checks_on_device says so; None means outputs are read
    back. A check that cannot be set up (its kernel fails to compile, memory runs out) is said and read
    back instead."""
    if not checks_on_device(backend, bench.specs, bench.settings):
        return None
    try:
        return DeviceCheck(backend, bench.solver, bench.problem, {s.name: s for s in bench.specs}, bench.ref,
                           bench.abs_ref, bench.target.processors, bench.on_device, tensors.pointers)
    except (BackendError, RuntimeError, ValueError) as exc:
        warnings.warn(f"outputs are checked on the host: the device check could not be set up ({exc})",
                      RuntimeWarning, stacklevel=2)
        return None


def with_references(bench: Bench, check: DeviceCheck | None) -> Bench:
    """`bench` as the measuring side judges with it: where the references were left to a device check
    that could not be set up, computed here on the host instead (slow for a large problem, never wrong)."""
    if bench.ref is not None or check is not None:
        return bench
    ref, abs_ref = host_references(bench.solver, bench.problem, bench.specs, bench.host)
    return replace(bench, ref=ref, abs_ref=abs_ref)


def _measure(backend: Backend, bench: Bench, cand: Instance, binary: bytes, tensors: DeviceTensors,
             best_us: float | None = None, check: DeviceCheck | None = None) -> Outcome:
    solver, problem, settings = bench.solver, bench.problem, bench.settings
    started = time.monotonic()
    verified_at: float | None = None
    try:
        loaded = LoadedBinary(backend, binary, {})
        plan = solver.launch_plan(cand.family, cand.params, problem, bench.target)
        tensors.ensure_workspace(plan.workspace_bytes)
        outputs = [s for s in tensors.specs.values() if s.role is Role.OUTPUT]
        for spec in outputs:
            backend.memset_async(tensors.pointers[spec.name], numerics.poison_byte(spec.scalar), spec.nbytes)
        if plan.workspace_bytes:
            backend.memset_async(tensors.pointers["workspace"], 0xFF, plan.workspace_bytes)
        prepared = PreparedPlan(loaded, plan)
        prepared.bind(tensors.pointers)
        prepared.enqueue()
        on_device = check.verdict(tensors.pointers) if check is not None else None
        if on_device is not None and on_device.ok:
            verdict = Verdict(True, on_device.worst_ratio, "matches the reference (checked on the device)")
        else:  # read back: no device check, or the host words why it failed (and has the last word)
            backend.synchronize()
            got = {s.name: numerics.exact_values(tensors.read(s.name), s.scalar) for s in outputs}
            if bench.ref is not None and bench.abs_ref is not None:
                ref, abs_ref = bench.ref, bench.abs_ref
            else:  # with_references left them to the check that computed them
                assert check is not None
                ref, abs_ref = check.host_reference()
            verdict = verify(solver, problem, got, ref, abs_ref)
        verified_at = time.monotonic()
        if not verdict.ok:
            return Outcome(Measurement(cand.name, None, None, 0, False, f"verify: {verdict.message}"),
                           verify_s=verified_at - started)
        samples = time_plan(backend, prepared, tensors, settings, best_us)
    except BackendError as exc:
        ended = time.monotonic()
        split = verified_at if verified_at is not None else ended  # failed while verifying, or while timing
        return Outcome(Measurement(cand.name, None, None, 0, False, f"launch: {exc}"), exc.sticky,
                       verify_s=split - started, time_s=ended - split)
    assert verified_at is not None
    verify_s, time_s = verified_at - started, time.monotonic() - verified_at
    median = statistics.median(samples)
    if not (median > 0.0 and median < float("inf")):
        # Events that report no time cannot rank a kernel; a time of 0 would beat every real one.
        return Outcome(Measurement(cand.name, None, None, len(samples), False, f"timing: median {median!r} us is not a time"),
                       verify_s=verify_s, time_s=time_s)
    seconds = median * 1e-6
    return Outcome(Measurement(
        cand.name,
        median,
        _iqr(samples),
        len(samples),
        True,
        None,
        gbps=bench.min_bytes / seconds / 1e9,
        tflops=2 * bench.macs / seconds / 1e12,
    ), verify_s=verify_s, time_s=time_s)
