"""The tuner's worker process, without a GPU: candidates that fault, crash or hang do not stop a tune.

A fake backend stands in for the GPU. Each fake candidate's "binary" names what its kernel does in the
worker: compute the right answer at a given speed, compute a wrong one, poison the context with a
sticky error (every later call fails, as CUDA's does), kill the process with SIGSEGV, exit, hang, or
write to stderr. The tuner's compile step and solver lookup are replaced by fakes of the same shape;
everything else (tune, the worker, _measure, time_plan, verify) is the real code.

Everything the worker unpickles (backend factory, solver, problem, params) is a module-level object
of this file, which the spawned child imports by name.
"""

from __future__ import annotations

import enum
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from factory import sources, tuner
from factory.backends import BackendError, BackendKind, DeviceInfo
from factory.catalog import Instance
from factory.compile_cache import CompileOutcome
from factory.ops.base import Buf, Launch, LaunchPlan, Role, TensorSpec, Tolerance
from factory.problem import DType, Layout, Op, Scalar
from factory.tuner import Isolation, Progress, TuneSettings, candidate_timeout, tune
from factory.worker import WorkerError
from tuning_db import Measurement

DEVICE = DeviceInfo(BackendKind.CUDA, "sm_90", "Fake GPU", 1, "13000", "nvrtc 13.0")
N = 256  # elements of the fake problem's input and output


# --- the fake problem and solver: y = 2 * x ------------------------------------------------------
@dataclass(frozen=True)
class FakeProblem:
    op: Op = Op.CONV_BWD_WEIGHT
    dtype: DType = DType.FP32
    key: str = "fake_double"


class FakeSolver:
    def tensors(self, problem: FakeProblem) -> list[TensorSpec]:
        return [TensorSpec("x", (N,), Scalar.F32, Role.INPUT, "N"), TensorSpec("y", (N,), Scalar.F32, Role.OUTPUT, "N")]

    def launch_plan(self, family: str, params: Any, problem: FakeProblem, target: Any = None) -> LaunchPlan:
        return LaunchPlan((Launch("double", (1, 1, 1), (N, 1, 1), (Buf("x"), Buf("y"))),))

    def reference(self, problem: FakeProblem, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": 2.0 * inputs["x"]}

    def tolerance(self, dtype: DType) -> Tolerance:
        return Tolerance(1e-6, 1e-6)

    def random_inputs(self, problem: FakeProblem, rng: np.random.Generator) -> None:
        return None  # uniform inputs, as OpModule's default

    def error_scale(self, problem: FakeProblem, inputs: dict[str, np.ndarray]) -> None:
        return None  # judged against the reference of |inputs|, as OpModule's default

    def traffic(self, problem: FakeProblem) -> tuple[int, int]:
        return 2 * N * 4, N


SOLVER = FakeSolver()


class Kind(enum.Enum):
    GOOD = "good"
    WRONG = "wrong"
    STICKY = "sticky"
    SEGV = "segv"
    EXIT = "exit"
    HANG = "hang"
    NOISY = "noisy"  # good, and writes to stderr
    NOCOMPILE = "nocompile"


@dataclass(frozen=True)
class FakeParams:
    kind: Kind
    us: float
    tag: int

    def suffix(self) -> str:
        return f"{self.kind.value}{self.tag}"


def candidates(*kinds: tuple[Kind, float]) -> list[Instance]:
    return [Instance(Op.CONV_BWD_WEIGHT, "fake", Layout.NHWGC, DType.FP32, 1, FakeParams(k, us, i))
            for i, (k, us) in enumerate(kinds)]


# --- the fake backend ----------------------------------------------------------------------------
@dataclass(frozen=True)
class FakeKernel:
    name: str
    kind: Kind
    us: float


class FakeBackend:
    """Host memory as device memory; a kernel does what its binary ("kind:µs") says."""

    kind = BackendKind.CUDA
    BIG = 16 << 20  # allocations above this (the L2 flush buffer) are not backed

    def __init__(self) -> None:
        self.memory: dict[int, bytearray | None] = {}
        self.next_ptr = 0x1000_0000
        self.last_us = 0.0
        self.poisoned: str | None = None

    def worker_factory(self):
        return FakeBackend

    def device_info(self) -> DeviceInfo:
        return DEVICE

    def _alive(self, what: str) -> None:
        if self.poisoned:
            raise BackendError(f"{what} failed: {self.poisoned}", sticky=True)

    def load(self, binary: bytes, kernel_name: str) -> FakeKernel:
        self._alive("cuModuleLoadData")
        kind, us = binary.decode().split(":")
        return FakeKernel(kernel_name, Kind(kind), float(us))

    def prepare_args(self, args):
        return list(args)

    def launch_prepared(self, kernel: FakeKernel, grid, block, prepared, shared_bytes=0, stream=0) -> None:
        self._alive("cuLaunchKernel")
        x, y = (self.memory[a.value] for a in prepared)
        if kernel.kind is Kind.STICKY:  # an illegal address: reported at the next synchronization
            self.poisoned = "CUDA_ERROR_ILLEGAL_ADDRESS"
        elif kernel.kind is Kind.SEGV:
            os.kill(os.getpid(), signal.SIGSEGV)
        elif kernel.kind is Kind.EXIT:
            os._exit(3)
        elif kernel.kind is Kind.HANG:
            while True:
                time.sleep(60)
        elif kernel.kind is Kind.WRONG:
            y[:] = bytes(len(y))
        else:
            if kernel.kind is Kind.NOISY:
                print(f"fake driver: {kernel.name} in pid {os.getpid()} says hello", file=sys.stderr, flush=True)
            y[:] = (2.0 * np.frombuffer(x, np.float32)).astype(np.float32).tobytes()
        self.last_us = kernel.us

    def alloc(self, nbytes: int) -> int:
        self._alive("cuMemAlloc")
        ptr = self.next_ptr
        self.next_ptr += (nbytes + 0xFFFF) & ~0xFFFF
        self.memory[ptr] = bytearray(nbytes) if nbytes <= self.BIG else None
        return ptr

    def free(self, ptr: int) -> None:
        self.memory.pop(ptr)

    def memset_async(self, ptr: int, byte: int, nbytes: int, stream: int = 0) -> None:
        self._alive("cuMemsetD8Async")
        if self.memory[ptr] is not None:
            self.memory[ptr][:nbytes] = bytes([byte]) * nbytes

    def copy_to_device(self, ptr: int, data) -> None:
        self._alive("cuMemcpyHtoD")
        self.memory[ptr][: len(data)] = bytes(data)

    def copy_from_device(self, ptr: int, nbytes: int) -> bytes:
        self._alive("cuMemcpyDtoH")
        return bytes(self.memory[ptr][:nbytes])

    def event_create(self) -> int:
        return 1

    def event_record(self, event: int, stream: int = 0) -> None:
        self._alive("cuEventRecord")

    def event_elapsed_ms(self, start: int, end: int) -> float:
        self._alive("cuEventSynchronize")
        return self.last_us / 1000.0

    def event_destroy(self, event: int) -> None:
        pass

    def synchronize(self, stream: int = 0) -> None:
        self._alive("cuCtxSynchronize")


class NoWorkerBackend(FakeBackend):
    def worker_factory(self):
        return None


def failing_backend() -> FakeBackend:
    raise BackendError("cuInit failed: CUDA_ERROR_NO_DEVICE")


class StartFailsBackend(FakeBackend):
    def worker_factory(self):
        return failing_backend


# --- the tuner's compile step and solver lookup, faked --------------------------------------------
class FakeCompileStream:
    """tuner.CompileStream's interface: a job's "binary" is its source, NOCOMPILE sources fail."""

    def __init__(self, kind, jobs, workers=None, on_done=None) -> None:
        self.jobs = {job.name: job for job in jobs}
        self.on_done = on_done

    def __enter__(self) -> "FakeCompileStream":
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def result(self, name: str) -> CompileOutcome:
        job = self.jobs[name]
        failed = job.source.startswith(Kind.NOCOMPILE.value)
        outcome = CompileOutcome(job.name, None if failed else job.source.encode(), "CompileError: fake" if failed else None, False)
        if self.on_done:
            self.on_done(outcome)
        return outcome


@pytest.fixture(autouse=True)
def fake_toolchain(monkeypatch):
    monkeypatch.setattr(tuner, "solver_for", lambda op: SOLVER)
    sources.forget()
    monkeypatch.setattr(sources, "render", lambda c: f"{c.params.kind.value}:{c.params.us}")
    monkeypatch.setattr(tuner, "CompileStream", FakeCompileStream)
    yield
    sources.forget()  # the fake sources must not outlive the test
    assert multiprocessing.active_children() == [], "a worker process outlived its tune"


@dataclass
class Recorder:
    """Progress callbacks that note restarts, and which worker processes were alive per measurement."""

    restarts: list[tuple[str, str]]
    workers: dict[str, tuple[int, ...]]

    @classmethod
    def new(cls) -> "Recorder":
        return cls([], {})

    def progress(self) -> Progress:
        return Progress(on_measured=self.measured, on_worker_restart=lambda name, why: self.restarts.append((name, why)))

    def measured(self, m: Measurement) -> None:
        self.workers[m.instance] = tuple(p.pid for p in multiprocessing.active_children())


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


FAST = dict(reps=3, warmup=1, seed=1)


# --- tests ---------------------------------------------------------------------------------------
def test_faults_crashes_and_hangs_are_recorded_and_the_tune_goes_on():
    cands = candidates(
        (Kind.GOOD, 5.0), (Kind.STICKY, 1.0), (Kind.GOOD, 3.0), (Kind.SEGV, 1.0), (Kind.GOOD, 4.0),
        (Kind.EXIT, 1.0), (Kind.WRONG, 1.0), (Kind.HANG, 1.0), (Kind.GOOD, 6.0), (Kind.NOCOMPILE, 1.0),
    )
    names = [c.name for c in cands]
    rec = Recorder.new()
    started = time.monotonic()
    ms = tune(FakeProblem(), cands, FakeBackend(), TuneSettings(candidate_timeout_s=1.5, **FAST), rec.progress())
    elapsed = time.monotonic() - started

    assert [m.instance for m in ms] == names
    by = {m.instance: m for m in ms}
    good = [n for n in names if "_good" in n]
    assert [(by[n].verified, by[n].median_us, by[n].error) for n in good] == [
        (True, 5.0, None), (True, 3.0, None), (True, 4.0, None), (True, 6.0, None)
    ]
    assert all(by[n].reps == 3 for n in good)
    sticky, segv, exit_, wrong, hang, nocompile = (names[i] for i in (1, 3, 5, 6, 7, 9))
    assert by[sticky].error == "launch: cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (worker restarted)"
    assert by[segv].error == "worker died: signal 11 (SIGSEGV)"
    assert by[exit_].error == "worker died: exit code 3"
    assert by[wrong].error.startswith("verify: y: element ") and " is 0, reference " in by[wrong].error
    assert by[hang].error == "timeout: exceeded 1.5 s"
    assert by[nocompile].error == "compile: CompileError: fake"
    assert not any(by[n].verified or by[n].median_us is not None for n in (sticky, segv, exit_, wrong, hang, nocompile))

    # One restart per candidate that took the worker with it; a wrong answer does not need one.
    assert rec.restarts == [
        (sticky, by[sticky].error.removesuffix(" (worker restarted)")),
        (segv, by[segv].error), (exit_, by[exit_].error), (hang, by[hang].error),
    ]
    # Each good candidate after a lost worker ran in a new process (one worker alive at a time).
    seen = [rec.workers[n] for n in (good[0], good[1], good[2], wrong, good[3])]
    assert all(len(pids) == 1 for pids in seen)
    assert len({pids[0] for pids in seen}) == 5
    assert all(gone(pids[0]) for pids in seen)
    assert elapsed < 45, f"tune took {elapsed:.1f} s"


def test_derived_time_limit_stops_a_hang():
    cands = candidates((Kind.GOOD, 2.0), (Kind.HANG, 1.0), (Kind.GOOD, 1.0))
    rec = Recorder.new()
    started = time.monotonic()
    ms = tune(FakeProblem(), cands, FakeBackend(), TuneSettings(**FAST), rec.progress())
    elapsed = time.monotonic() - started
    assert [(m.verified, m.median_us) for m in ms] == [(True, 2.0), (False, None), (True, 1.0)]
    # The limit after a verified candidate is MIN_TIMEOUT_S unless a loaded machine made its job slow.
    match = re.fullmatch(r"timeout: exceeded (\S+) s", ms[1].error)
    assert match and tuner.MIN_TIMEOUT_S <= float(match.group(1)) < 5, ms[1].error
    assert [name for name, _ in rec.restarts] == [cands[1].name]
    assert elapsed < float(match.group(1)) + 20


def test_derived_time_limit_formula():
    s = TuneSettings(reps=25, warmup=5)
    nbytes = 100_000_000
    assert candidate_timeout(s, nbytes, None, None) == tuner.FIRST_TIMEOUT_S + nbytes / tuner.HOST_BYTES_PER_S
    assert candidate_timeout(s, nbytes, 10.0, 0.01) == tuner.MIN_TIMEOUT_S
    assert candidate_timeout(s, nbytes, 10.0, 3.0) == tuner.HOST_SLACK * 3.0
    assert candidate_timeout(s, nbytes, 20_000.0, 0.5) == pytest.approx(tuner.KERNEL_SLACK * 32 * 0.02)
    assert candidate_timeout(TuneSettings(candidate_timeout_s=0.25), nbytes, None, None) == 0.25


def test_keyboard_interrupt_while_a_candidate_hangs_stops_the_worker():
    cands = candidates((Kind.GOOD, 1.0), (Kind.HANG, 1.0), (Kind.GOOD, 1.0))
    rec = Recorder.new()
    timers: list[threading.Timer] = []

    def measured(m: Measurement) -> None:
        rec.measured(m)
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        timers.append(timer)
        timer.start()

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        tune(FakeProblem(), cands, FakeBackend(), TuneSettings(candidate_timeout_s=60, **FAST), Progress(on_measured=measured))
    assert time.monotonic() - started < 10
    assert len(timers) == 1  # interrupted during the hang, before a second measurement
    (pid,) = rec.workers[cands[0].name]
    assert multiprocessing.active_children() == [] and gone(pid)


def test_keyboard_interrupt_in_a_callback_stops_the_worker():
    cands = candidates((Kind.GOOD, 1.0), (Kind.GOOD, 1.0))
    rec = Recorder.new()

    def measured(m: Measurement) -> None:
        rec.measured(m)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tune(FakeProblem(), cands, FakeBackend(), TuneSettings(**FAST), Progress(on_measured=measured))
    (pid,) = rec.workers[cands[0].name]
    assert multiprocessing.active_children() == [] and gone(pid)


def test_worker_stderr_reaches_the_parents_stderr(capfd):
    (cand,) = candidates((Kind.NOISY, 1.0))
    rec = Recorder.new()
    (m,) = tune(FakeProblem(), [cand], FakeBackend(), TuneSettings(**FAST), rec.progress())
    assert m.verified
    (pid,) = rec.workers[cand.name]
    err = capfd.readouterr().err
    assert f"fake driver: double in pid {pid} says hello" in err
    assert pid != os.getpid()


def test_in_process_isolation_starts_no_worker():
    cands = candidates((Kind.GOOD, 2.0), (Kind.WRONG, 1.0), (Kind.GOOD, 1.0))
    rec = Recorder.new()
    ms = tune(FakeProblem(), cands, FakeBackend(), TuneSettings(isolation=Isolation.IN_PROCESS, **FAST), rec.progress())
    assert [(m.verified, m.median_us) for m in ms] == [(True, 2.0), (False, None), (True, 1.0)]
    assert all(pids == () for pids in rec.workers.values())


def test_backend_without_worker_factory_is_measured_in_process_with_a_warning():
    cands = candidates((Kind.GOOD, 2.0), (Kind.GOOD, 1.0))
    rec = Recorder.new()
    with pytest.warns(RuntimeWarning, match="NoWorkerBackend cannot be rebuilt in a worker process"):
        ms = tune(FakeProblem(), cands, NoWorkerBackend(), TuneSettings(**FAST), rec.progress())
    assert [(m.verified, m.median_us) for m in ms] == [(True, 2.0), (True, 1.0)]
    assert all(pids == () for pids in rec.workers.values())


def test_a_worker_that_cannot_start_raises_a_backend_error():
    with pytest.raises(WorkerError, match="CUDA_ERROR_NO_DEVICE") as info:
        tune(FakeProblem(), candidates((Kind.GOOD, 1.0)), StartFailsBackend(), TuneSettings(**FAST))
    assert isinstance(info.value, BackendError)
    assert "failed to start" in str(info.value)


def test_cuda_errors_are_classified_sticky_by_code():
    driver = pytest.importorskip("cuda.bindings.driver")
    from factory.backends.cuda import _check

    for code, sticky in [("CUDA_ERROR_ILLEGAL_ADDRESS", True), ("CUDA_ERROR_MISALIGNED_ADDRESS", True),
                         ("CUDA_ERROR_LAUNCH_FAILED", True), ("CUDA_ERROR_ILLEGAL_INSTRUCTION", True),
                         ("CUDA_ERROR_HARDWARE_STACK_ERROR", True), ("CUDA_ERROR_OUT_OF_MEMORY", False),
                         ("CUDA_ERROR_INVALID_VALUE", False), ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", False)]:
        with pytest.raises(BackendError, match=code) as info:
            _check((getattr(driver.CUresult, code),), "cuCtxSynchronize")
        assert info.value.sticky is sticky, code


def test_hip_errors_are_classified_sticky_by_code():
    hip = pytest.importorskip("hip.hip")
    from factory.backends.hip import _call

    for code, sticky in [("hipErrorIllegalAddress", True), ("hipErrorLaunchFailure", True),
                         ("hipErrorOutOfMemory", False), ("hipErrorInvalidValue", False)]:
        with pytest.raises(BackendError, match=code) as info:
            _call("hipDeviceSynchronize", lambda: (getattr(hip.hipError_t, code),))
        assert info.value.sticky is sticky, code


def test_backend_errors_keep_the_sticky_flag_when_pickled():
    import pickle

    err = pickle.loads(pickle.dumps(BackendError("cuCtxSynchronize failed", sticky=True)))
    assert err.sticky is True and str(err) == "cuCtxSynchronize failed"
    assert BackendError("x").sticky is False


def test_the_worker_is_launched_before_the_reference_is_computed(monkeypatch):
    """Its interpreter, imports and GPU context come up while the parent computes the reference; it
    gets its payload (the inputs and the reference) only after."""
    seen: list[list[str]] = []
    real = tuner.reference_outputs

    def reference_outputs(*args: Any) -> Any:
        seen.append([p.name for p in multiprocessing.active_children()])
        return real(*args)

    monkeypatch.setattr(tuner, "reference_outputs", reference_outputs)
    ms = tune(FakeProblem(), candidates((Kind.GOOD, 2.0), (Kind.GOOD, 1.0)), FakeBackend(), TuneSettings(**FAST))
    assert seen == [["kfactory-measure"]]
    assert [(m.verified, m.median_us) for m in ms] == [(True, 2.0), (True, 1.0)]
    assert not [p for p in multiprocessing.active_children() if p.name == "kfactory-measure"]


def test_a_worker_launched_early_is_stopped_when_the_reference_fails(monkeypatch):
    def fails(*_: Any) -> Any:
        raise RuntimeError("reference failed")

    monkeypatch.setattr(tuner, "reference_outputs", fails)
    with pytest.raises(RuntimeError, match="reference failed"):
        tune(FakeProblem(), candidates((Kind.GOOD, 1.0)), FakeBackend(), TuneSettings(**FAST))
    assert not [p for p in multiprocessing.active_children() if p.name == "kfactory-measure"]


def test_a_tune_hands_its_worker_the_arrays_through_files(monkeypatch):
    """With every array over the size limit, inputs, reference and error scale reach the worker as files
    in shared memory (factory.array_handoff); the tune measures and verifies as through the pipe."""
    from factory import array_handoff
    from factory.array_handoff import ArrayHandoff, MappedArray

    monkeypatch.setattr(array_handoff, "HANDOFF_MIN_BYTES", 0)
    shared: list[MappedArray] = []
    real_share = ArrayHandoff.share

    def share(self: ArrayHandoff, found: Any) -> Any:
        out = real_share(self, found)
        shared.extend(a for a in out.values() if isinstance(a, MappedArray))
        return out

    monkeypatch.setattr(ArrayHandoff, "share", share)
    ms = tune(FakeProblem(), candidates((Kind.GOOD, 2.0), (Kind.WRONG, 1.0)), FakeBackend(), TuneSettings(**FAST))
    if not array_handoff.SHARED_MEMORY.is_dir():
        pytest.skip("no /dev/shm here: the arrays went through the pipe")
    assert len(shared) == 3  # x, the reference and the error scale of y
    assert (ms[0].verified, ms[0].median_us) == (True, 2.0) and not ms[1].verified
    assert not any(os.path.exists(a.path) for a in shared)  # removed once the tune ended


def test_a_ctrl_c_that_lands_on_another_thread_interrupts_a_long_wait_on_the_child():
    # The kernel may hand a process's SIGINT to any thread; Python raises it in the main thread only when
    # that thread runs bytecode again, so a single poll of a long time limit would sit on it.
    from factory.worker import wait_interruptibly

    reader, writer = multiprocessing.Pipe(duplex=False)  # nothing is ever written: never ready
    sender = threading.Thread(target=lambda: (time.sleep(0.3), signal.pthread_kill(threading.get_ident(), signal.SIGINT)))
    started = time.monotonic()
    sender.start()
    with pytest.raises(KeyboardInterrupt):
        wait_interruptibly([reader], 30.0)
    sender.join()
    assert time.monotonic() - started < 5
    reader.close()
    writer.close()


class DeviceReferenceSolver(FakeSolver):
    """FakeSolver whose reference would be computed on the device (a backend with device checks)."""

    def device_reference(self, problem: FakeProblem) -> Any:
        from factory.ops.base import DeviceReference

        return DeviceReference("unused.hip.j2", (), LaunchPlan(()))


def test_a_device_reference_that_cannot_be_set_up_falls_back_to_the_host_reference(monkeypatch):
    """The parent leaves the reference to the device check; when that check cannot be set up, the
    measuring side computes the host reference itself and judges every candidate as before."""
    monkeypatch.setattr(tuner, "solver_for", lambda op: DeviceReferenceSolver())
    calls = []
    real = tuner.reference_outputs
    monkeypatch.setattr(tuner, "reference_outputs", lambda *args: calls.append(1) or real(*args))

    def broken(*args: Any) -> Any:
        assert args[4] is None and args[5] is None  # no host reference was made for it
        raise RuntimeError("the device_reference kernel did not compile: no")

    monkeypatch.setattr(tuner, "DeviceCheck", broken)
    backend = FakeBackend()
    backend.device_checks = True
    settings = TuneSettings(**FAST, isolation=Isolation.IN_PROCESS)
    with pytest.warns(RuntimeWarning, match="checked on the host: .*device_reference kernel did not compile"):
        ms = tune(FakeProblem(), candidates((Kind.GOOD, 1.0), (Kind.WRONG, 1.0)), backend, settings)
    assert [m.verified for m in ms] == [True, False] and "verify:" in (ms[1].error or "")
    assert calls == [1]  # once, on the measuring side


def _measuring_children() -> list:
    return [p for p in multiprocessing.active_children() if p.name == "kfactory-measure"]


def test_tunes_in_a_keep_block_share_one_worker_and_send_it_each_payload():
    """The second tune's worker is the first's (started once), given the second tune's inputs: a right
    kernel verifies against a reference of other inputs (another seed), a wrong one fails; the block's
    end stops it."""
    kinds = ((Kind.GOOD, 2.0), (Kind.WRONG, 1.0), (Kind.GOOD, 1.0))
    with tuner.keep_measuring_worker():
        first = tune(FakeProblem(), candidates(*kinds), FakeBackend(), TuneSettings(**FAST))
        kept = tuner._KEPT.get()
        assert kept is not None and kept.worker is not None and kept.worker.starts == 1
        pid = kept.worker.pid
        assert pid is not None and [p.pid for p in _measuring_children()] == [pid]  # alive between tunes
        second = tune(FakeProblem(), candidates(*kinds), FakeBackend(), TuneSettings(**{**FAST, "seed": 2}))
        assert kept.worker.starts == 1 and kept.worker.pid == pid
    assert [m.verified for m in first] == [m.verified for m in second] == [True, False, True]
    assert _measuring_children() == []


def test_a_tune_that_measures_nothing_leaves_the_kept_worker_up():
    """A tune whose candidates all fail to compile never sends the kept worker a payload; the worker
    stays released and serves the next tune without a new start."""
    with tuner.keep_measuring_worker():
        tune(FakeProblem(), candidates((Kind.GOOD, 1.0)), FakeBackend(), TuneSettings(**FAST))
        kept = tuner._KEPT.get()
        failed = tune(FakeProblem(), candidates((Kind.NOCOMPILE, 1.0)), FakeBackend(), TuneSettings(**FAST))
        after = tune(FakeProblem(), candidates((Kind.GOOD, 1.0)), FakeBackend(), TuneSettings(**{**FAST, "seed": 3}))
        assert kept.worker.starts == 1
    assert not failed[0].verified and after[0].verified


def test_a_kept_worker_taken_down_by_a_candidate_is_replaced_and_kept():
    with tuner.keep_measuring_worker():
        crashed = tune(FakeProblem(), candidates((Kind.SEGV, 1.0), (Kind.GOOD, 1.0)), FakeBackend(), TuneSettings(**FAST))
        kept = tuner._KEPT.get()
        assert kept.worker.starts == 2  # the crash's replacement
        after = tune(FakeProblem(), candidates((Kind.GOOD, 1.0)), FakeBackend(), TuneSettings(**FAST))
        assert kept.worker.starts == 2
    assert [m.verified for m in crashed] == [False, True] and after[0].verified
    assert _measuring_children() == []


def test_a_tune_interrupted_inside_a_keep_block_leaves_no_worker_behind(monkeypatch):
    def interrupted(*_: Any) -> Any:
        raise KeyboardInterrupt

    with tuner.keep_measuring_worker():
        tune(FakeProblem(), candidates((Kind.GOOD, 1.0)), FakeBackend(), TuneSettings(**FAST))
        monkeypatch.setattr(tuner, "_measure", interrupted)  # in-process only: the parent's own step
        monkeypatch.setattr(tuner._Isolated, "measure", lambda *_: interrupted())
        with pytest.raises(KeyboardInterrupt):
            tune(FakeProblem(), candidates((Kind.GOOD, 1.0)), FakeBackend(), TuneSettings(**FAST))
        assert _measuring_children() == []  # killed: it might have been busy
    assert _measuring_children() == []


def test_the_api_offers_the_kept_worker_block():
    from factory import api

    assert api.keep_measuring_worker is tuner.keep_measuring_worker and "keep_measuring_worker" in api.__all__
