"""Run jobs in a child process that a faulting or hanging GPU kernel cannot take down with it.

A kernel that makes an illegal memory access leaves its CUDA/HIP context unusable for the rest of the
process, and one that never finishes cannot be interrupted from the host. Running such work in a
child lets the parent kill it on a deadline, notice that it died, and start a fresh one.

The child is started with "spawn" (a process that holds a GPU context must never fork). It builds its
own backend with `WorkerSpec.backend_factory`, then turns the payload (sent once per start) into a state
with `init`, then answers each job with `step(state, job)`. `launch` starts a child before its payload
exists (its interpreter, imports and GPU context come up meanwhile); `start` sends the payload.
Everything crossing the pipe is pickled, so the factory, `init`, `step`, the payload and the jobs must
be importable, module-level objects. `release` lets a caller with many payloads in turn (one tune after
another) keep the child: it drops its state (`WorkerSpec.release`) and the next `start` sends it the next
payload, so its interpreter, imports and GPU context come up once.

The child inherits the parent's stderr file descriptor, so driver messages and tracebacks land where
the parent's own output does. It ignores SIGINT (Ctrl-C reaches the whole process group; the parent
decides) and, on Linux, is killed by the kernel if the parent dies without stopping it.
"""

from __future__ import annotations

import ctypes
import enum
import multiprocessing
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

from .backends import BackendError

START_TIMEOUT_S = 120.0  # runtime initialisation, device allocations and input uploads
STOP_GRACE_S = 5.0  # a healthy child leaves on request within this, else it is killed
REAP_TIMEOUT_S = 30.0  # a killed child stuck in driver teardown is left to finish on its own


class LossKind(enum.Enum):
    DIED = "worker died"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class WorkerLost:
    """A job that took the worker with it: it died (signal, exit) or was killed on its deadline."""

    kind: LossKind
    detail: str  # "signal 11 (SIGSEGV)", "exit code 3", "exceeded 3 s"

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail}"


class WorkerError(BackendError):
    """The worker could not start, or a job raised an unexpected exception (the child's traceback follows)."""


@dataclass(frozen=True)
class WorkerSpec:
    backend_factory: Callable[[], Any]
    init: Callable[[Any, Any], Any]  # (backend, payload) -> state, once per start
    step: Callable[[Any, Any], Any]  # (state, job) -> reply, once per job
    payload: Any  # may be set after `launch` (Worker.spec is replaced), not after `start`
    start_timeout_s: float = START_TIMEOUT_S
    release: Callable[[Any], None] | None = None  # (state) -> None: free what `init` made, on `release`


@dataclass(frozen=True)
class _Ready:
    pid: int


@dataclass(frozen=True)
class _Rebind:
    """To a running child: drop the state, then (payload not None) make one from this payload."""

    payload: Any


@dataclass(frozen=True)
class _Raised:
    where: str  # "start" or "job"
    text: str  # the child's traceback


class Worker:
    """One child process at a time, started on first use and replaced after it is lost."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.starts = 0
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._ready = False  # the running child has its payload and state
        self._released = False  # the running child dropped its state and waits for a _Rebind

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def call(self, job: Any, timeout_s: float) -> Any:
        """`step`'s reply to `job`, or WorkerLost (and no worker) when the child died or ran out of time.

        The time limit covers the job alone: a worker that is not running yet is started first.
        """
        self.start()
        assert self._process is not None and self._conn is not None
        try:
            self._conn.send(job)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            return self._lost_after_death()
        ready = wait_interruptibly([self._conn, self._process.sentinel], timeout_s)
        if self._conn in ready:
            try:
                reply = self._conn.recv()
            except (EOFError, ConnectionResetError):
                return self._lost_after_death()
            if isinstance(reply, _Raised):
                self.stop()
                raise _error(reply)
            return reply
        if ready:
            return self._lost_after_death()
        self.kill()
        return WorkerLost(LossKind.TIMEOUT, f"exceeded {round(timeout_s, 2):g} s")

    def stop(self) -> None:
        """Ask the child to leave; kill it if it does not within STOP_GRACE_S."""
        if self._process is None:
            return
        if self._conn is not None and self._process.is_alive():
            try:
                self._conn.send(None)
            except (BrokenPipeError, ConnectionResetError, EOFError):
                pass
            self._process.join(STOP_GRACE_S)
        self.kill()

    def release(self) -> bool:
        """Have a ready child drop its state but stay up, for the next `start` to send it a new payload.
        False (and no child) when it could not: it was not ready, died, or did not answer in time."""
        if self._released and self._process is not None and self._process.is_alive():
            return True  # given no payload since the last release (nothing was measured): nothing to drop
        if not self._ready or self._process is None or self._conn is None:
            self.kill()
            return False
        try:
            self._conn.send(_Rebind(None))
            ready = wait_interruptibly([self._conn, self._process.sentinel], STOP_GRACE_S)
            answer = self._conn.recv() if self._conn in ready else None
        except (BrokenPipeError, ConnectionResetError, EOFError):
            answer = None
        except BaseException:
            self.kill()
            raise
        if not isinstance(answer, _Ready):
            self.kill()
            return False
        self._ready, self._released = False, True
        return True

    def kill(self) -> None:
        """SIGKILL the child (a kernel that never returns ignores everything else) and reap it."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        self._ready = self._released = False
        if process is not None:
            if process.is_alive():
                process.kill()
            process.join(REAP_TIMEOUT_S)
            if process.exitcode is not None:
                process.close()
        if conn is not None:
            conn.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        # On an exception (KeyboardInterrupt included) the child may be busy: do not wait for it.
        if exc_type is None:
            self.stop()
        else:
            self.kill()

    def launch(self) -> None:
        """Start the child unless it is running, without waiting: it builds its backend and then waits
        for the payload that `start` sends."""
        if self._process is not None:
            return
        context = multiprocessing.get_context("spawn")
        parent_end, child_end = context.Pipe()
        process = context.Process(
            target=_child_main,
            args=(child_end, os.getpid(), self.spec.backend_factory, self.spec.init, self.spec.step,
                  self.spec.release),
            name="kfactory-measure",
            daemon=True,
        )
        process.start()
        child_end.close()  # the parent sees EOF once the child is gone
        self._process, self._conn = process, parent_end
        self.starts += 1

    def start(self) -> None:
        """Launch the child unless it is running, send its payload unless sent, and wait until it holds
        its state (or raise WorkerError)."""
        if self._ready:
            return
        if self._released and (self._process is None or not self._process.is_alive()):
            self.kill()  # a kept child that died between payloads: start a fresh one
        self.launch()
        process, parent_end = self._process, self._conn
        assert process is not None and parent_end is not None
        try:
            try:
                parent_end.send(_Rebind(self.spec.payload) if self._released else self.spec.payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the child failed before reading it: its report, if any, is read below
            ready = wait_interruptibly([parent_end, process.sentinel], self.spec.start_timeout_s)
            message = parent_end.recv() if parent_end in ready else None
        except (ConnectionResetError, EOFError):
            message = None
        except BaseException:
            self.kill()
            raise
        if isinstance(message, _Ready):
            self._ready, self._released = True, False
            return
        if isinstance(message, _Raised):
            self.kill()
            raise _error(message)
        alive = process.is_alive()
        self.kill()
        why = f"did not start within {self.spec.start_timeout_s:g} s" if alive else _death(process.exitcode)
        raise WorkerError(f"measuring worker {why}")

    def _lost_after_death(self) -> WorkerLost:
        process = self._process
        assert process is not None
        process.join(REAP_TIMEOUT_S)
        detail = _death(process.exitcode)
        self.kill()
        return WorkerLost(LossKind.DIED, detail)


WAIT_SLICE_S = 0.2  # the longest the parent blocks at once while it waits on a child


def wait_interruptibly(objects: list[Any], timeout_s: float) -> list[Any]:
    """multiprocessing's `wait`, in slices of at most WAIT_SLICE_S. A Ctrl-C that the kernel hands to
    another of the parent's threads (a timer, a compile pool's manager) does not interrupt the main
    thread's poll; Python raises it only when that thread next runs bytecode, which one poll of a
    candidate's whole time limit (a minute, say) would delay by as long."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        ready = wait(objects, max(0.0, min(left, WAIT_SLICE_S)))
        if ready or left <= WAIT_SLICE_S:
            return ready


def _death(exitcode: int | None) -> str:
    if exitcode is None:
        return "exited (status unknown)"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
        return f"signal {-exitcode} ({name})"
    return f"exit code {exitcode}"


def _error(raised: _Raised) -> WorkerError:
    what = "measuring worker failed to start" if raised.where == "start" else "measuring worker raised"
    return WorkerError(f"{what}:\n{raised.text}")


# --- the child ---------------------------------------------------------------------------------
def _die_with_parent(parent_pid: int) -> None:
    """Linux: have the kernel SIGKILL this process when the parent dies, so no worker is orphaned."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def _child_main(conn: Connection, parent_pid: int, backend_factory: Callable[[], Any],
                init: Callable[[Any, Any], Any], step: Callable[[Any, Any], Any],
                release: Callable[[Any], None] | None = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    try:
        backend = backend_factory()  # before the payload: the parent may still be making it
        payload = conn.recv()
        state = init(backend, payload)
    except EOFError:
        return
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(_Raised("start", traceback.format_exc()))
        return
    conn.send(_Ready(os.getpid()))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        if isinstance(job, _Rebind):  # the next payload, or (None) only drop this one's state
            try:
                if release is not None and state is not None:
                    release(state)
                state = None
                if job.payload is not None:
                    state = init(backend, job.payload)
            except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
                conn.send(_Raised("start", traceback.format_exc()))
                return
            conn.send(_Ready(os.getpid()))
            continue
        try:
            reply = step(state, job)
        except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
            conn.send(_Raised("job", traceback.format_exc()))
            return
        conn.send(reply)
