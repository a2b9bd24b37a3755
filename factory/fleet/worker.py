"""One fleet worker: a process on one GPU that claims jobs, tunes them and writes the results back.

The loop: claim the oldest job of this GPU's device identity under a lease; a heartbeat thread (its
own database connections) renews the lease every quarter of its length; the problem is tuned through
api.tune_problem with its writes deferred, and the measurements, the winner and the job's state are
written in one transaction that happens only while this worker still holds the lease (else nothing is
stored: another worker took the job over after this one's lease expired). A failed attempt stores
its error and re-queues the job until its attempts are used up. SIGINT/SIGTERM stop the worker
between or inside a job: a claimed job is released (pending again, the attempt not counted).

A worker killed outright (kill -9, power loss) leaves its job running under a lease nobody renews;
once it expires, the next claim of any worker takes it over and counts a second attempt.

Started by `kfactory worker` (supervisor.py) as `python -m factory.fleet.worker`, with the database
URL in $KFACTORY_DB and the GPU made its device 0 by CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from ..backends import BackendError
from ..problem import KernelFactoryError
from ..tuner import Progress, TuneSettings, keep_measuring_worker
from .gpus import FleetError, GpuSource, gpu_source
from .problems import source_version
from tuning_db import DEFAULT_DB_ENV, Lease, LeaseLost, TuningDB, TuningDBError
from tuning_db.jobs import DEFAULT_LEASE_S

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
DEFAULT_POLL_S = 5.0
HEARTBEATS_PER_LEASE = 4  # a lease survives three missed heartbeats


@dataclass(frozen=True)
class WorkerSettings:
    url: str
    gpu: str  # the GPU's ordinal as `kfactory worker --gpus` named it, for the owner name and the log
    lease_s: float = DEFAULT_LEASE_S
    poll_s: float = DEFAULT_POLL_S
    reps: int = 25
    drain: bool = False  # exit once no job of this device is pending or running

    @property
    def owner(self) -> str:
        return f"{socket.gethostname()}:{os.getpid()}:gpu{self.gpu}"


class Heartbeat:
    """Renews a lease from a thread, on connections of its own, until stopped; `lost` once it cannot.

    A renewal that fails on a database error is retried at the next beat: the lease only counts as
    lost when the database says the job is no longer this worker's.
    """

    def __init__(self, url: str, lease: Lease) -> None:
        self.lease = lease
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._url = url
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-job{lease.job.id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def check(self) -> None:
        """Raise LeaseLost if the job was taken over (called between candidates)."""
        if self.lost.is_set():
            raise LeaseLost(f"job {self.lease.job.id}: the lease was taken over by another worker")

    def _run(self) -> None:
        interval = max(0.05, self.lease.seconds / HEARTBEATS_PER_LEASE)
        db: TuningDB | None = None
        try:
            while not self._stop.wait(interval):
                try:
                    db = db or TuningDB(self._url)
                    if not db.jobs.renew(self.lease):
                        self.lost.set()
                        return
                except TuningDBError:
                    continue  # the database is unreachable for now: the lease may still outlast it
        finally:
            if db is not None:
                db.close()


class Worker:
    """Claims and tunes jobs of one GPU until stopped (or, draining, until none is left)."""

    def __init__(self, settings: WorkerSettings, source: GpuSource, say: Callable[[str], None]) -> None:
        self.settings = settings
        self.source = source
        self.say = say
        self.db = TuningDB(settings.url)
        self.device = source.device()
        self.device_id = self.db.jobs.register(self.device)
        self.lease: Lease | None = None

    def run(self) -> int:
        s, d = self.settings, self.device
        self.say(f"worker {s.owner}: device #{self.device_id} {d.name} ({d.arch}, {d.sm_count} SMs, driver "
                 f"{d.driver_version}, compiler {d.compiler_version}); lease {s.lease_s:g} s; db {self.db.location}")
        with keep_measuring_worker():  # one measuring process for the jobs, not one per job
            return self._claim_and_work()

    def _claim_and_work(self) -> int:
        s = self.settings
        idle = False
        while True:
            lease = self.db.jobs.claim(self.device, s.owner, s.lease_s)
            if lease is None:
                if s.drain and self.db.jobs.outstanding(self.device) == 0:
                    self.say(f"worker {s.owner}: no job left for this device; exiting")
                    return EXIT_OK
                if not idle:
                    self.say(f"worker {s.owner}: waiting for jobs (every {s.poll_s:g} s)")
                    idle = True
                time.sleep(s.poll_s)
                continue
            idle = False
            self.lease = lease  # released by `release` if a signal stops the worker inside the job
            code = self.work(lease)
            self.lease = None
            if code != EXIT_OK:
                return code

    def work(self, lease: Lease) -> int:
        """Tune one claimed job; EXIT_OK to go on, anything else to stop the worker."""
        job = lease.job
        self.say(f"job {job.id} claimed (attempt {job.attempts}/{job.max_attempts}): {job.problem_key}")
        started = time.monotonic()
        try:
            with Heartbeat(self.settings.url, lease) as heartbeat:
                outcome = self._tune(lease, heartbeat)
        except LeaseLost as exc:
            self.say(f"job {job.id}: lease lost, nothing stored ({exc})")
            return EXIT_OK
        except KernelFactoryError as exc:
            # The problem or its code cannot be tuned by this worker as enqueued: retrying cannot help.
            return self._failed(lease, exc, retry=False)
        except BackendError as exc:
            code = self._failed(lease, exc, retry=True)
            if exc.sticky:
                self.say(f"worker {self.settings.owner}: the GPU context is unusable after that error; exiting")
                return EXIT_ERROR
            return code
        except TuningDBError as exc:
            try:
                return self._failed(lease, exc, retry=True)
            except TuningDBError:
                # The database is gone for now: the job comes back when its lease expires.
                self.say(f"job {job.id}: database error, job left to its lease: {_one_line(exc)}")
                time.sleep(self.settings.poll_s)
                return EXIT_OK
        except Exception as exc:  # a bug of ours or an unforeseen runtime failure: recorded, retried elsewhere
            traceback.print_exc(file=sys.stderr)
            return self._failed(lease, exc, retry=True)
        winner = outcome.winner
        result = f"winner {winner.instance} {winner.median_us:.2f} µs" if winner else "no candidate verified"
        self.say(f"job {job.id} done in {time.monotonic() - started:.1f} s: {result} "
                 f"({len(outcome.measurements)} candidates, {outcome.reused} reused)")
        return EXIT_OK

    def _tune(self, lease: Lease, heartbeat: Heartbeat) -> Any:
        from ..api import candidate_code, tune_problem
        from ..selector import problem_from_key

        job = lease.job
        problem = problem_from_key(job.problem_key)
        version = source_version(candidate_code(problem, self.device))
        if version != job.source_version:
            raise FleetError(f"source version {job.source_version[:12]} was enqueued, this worker's code has "
                             f"{version[:12]} (other templates or catalog): enqueue again from this code")
        progress = Progress(on_compiled=lambda name, ok: heartbeat.check(),
                            on_measured=lambda m: heartbeat.check())

        def finish(measured: list[Any], eligible: Any, since: datetime | None) -> Any:
            heartbeat.check()
            return self.db.jobs.complete(lease, self.device, measured, eligible, since, datetime.now(timezone.utc))

        return tune_problem(problem, self.source.backend(problem), self.db, TuneSettings(reps=self.settings.reps),
                            progress, finish=finish)

    def _failed(self, lease: Lease, exc: BaseException, retry: bool) -> int:
        error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, (KernelFactoryError, TuningDBError)) else str(exc)
        try:
            state = self.db.jobs.fail(lease, error, retry=retry)
        except LeaseLost:
            self.say(f"job {lease.job.id} failed after its lease was lost: {_one_line(error)}")
            return EXIT_OK
        self.say(f"job {lease.job.id} failed (attempt {lease.job.attempts}/{lease.job.max_attempts}, now {state.value}): "
                 f"{_one_line(error)}")
        return EXIT_OK

    def release(self) -> None:
        """Give back the job in hand, if any (the worker is stopping)."""
        lease = self.lease
        if lease is not None and self.db.jobs.release(lease):
            self.say(f"job {lease.job.id} released: pending again")

    def close(self) -> None:
        self.db.close()


def _one_line(value: object) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _stop_on_signals() -> None:
    """SIGTERM (systemd, the supervisor) stops the worker as Ctrl-C does; a second signal is ignored
    while the stop releases the job."""
    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m factory.fleet.worker",
                                     description="one fleet worker (started by `kfactory worker`)")
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--lease", type=float, default=DEFAULT_LEASE_S)
    parser.add_argument("--poll", type=float, default=DEFAULT_POLL_S)
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--drain", action="store_true")
    args = parser.parse_args(argv)
    url = os.environ.get(DEFAULT_DB_ENV, "")
    settings = WorkerSettings(url, args.gpu, args.lease, args.poll, args.reps, args.drain)
    prefix = f"[gpu{args.gpu} pid {os.getpid()}]"

    def say(line: str) -> None:
        # One write per line: the workers of a machine share one stdout, and lines must not interleave.
        sys.stdout.write(f"{prefix} {line}\n")
        sys.stdout.flush()

    _stop_on_signals()
    worker = None
    try:
        worker = Worker(settings, gpu_source(), say)
        return worker.run()
    except KeyboardInterrupt:
        if worker is not None:
            try:
                worker.release()
            except TuningDBError as exc:
                say(f"could not release the job (it returns when its lease expires): {_one_line(exc)}")
        say("stopped")
        return EXIT_INTERRUPTED
    except (KernelFactoryError, TuningDBError, BackendError) as exc:
        print(f"{prefix} kfactory worker: error: {_one_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    finally:
        if worker is not None:
            worker.close()


if __name__ == "__main__":
    sys.exit(main())
