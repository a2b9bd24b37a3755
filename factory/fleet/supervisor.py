"""`kfactory worker`: one worker process per GPU, each shown only its GPU, stopped together.

Each child is `python -m factory.fleet.worker` with CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES set
to its GPU and the database URL in $KFACTORY_DB (not on its command line, where `ps` would show a
password). Ctrl-C in the terminal reaches every child; SIGTERM to the supervisor (systemd's stop,
SLURM's end of a job) is passed on to them. Either way each child releases the job it holds and
exits; a child still running GRACE_S later, or at a second Ctrl-C, is killed, and its job comes
back when its lease expires.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tuning_db import DEFAULT_DB_ENV

from .gpus import visible

GRACE_S = 30.0
_POLL_S = 0.2
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class FleetSettings:
    url: str
    gpus: tuple[str, ...]
    lease_s: float
    poll_s: float
    reps: int
    drain: bool


def worker_argv(settings: FleetSettings, gpu: str) -> list[str]:
    argv = [sys.executable, "-m", "factory.fleet.worker", "--gpu", gpu, "--lease", repr(settings.lease_s),
            "--poll", repr(settings.poll_s), "--reps", str(settings.reps)]
    return argv + (["--drain"] if settings.drain else [])


def run_fleet(settings: FleetSettings, say: Callable[[str], None]) -> int:
    """Start the workers, wait for them; their worst exit status (130 when interrupted)."""
    children: list[subprocess.Popen[Any]] = []
    stopping: list[bool] = []

    def forward(signum: int, frame: Any) -> None:
        stopping.append(True)
        _signal_all(children, signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        for gpu in settings.gpus:
            env = dict(os.environ) | visible(gpu) | {DEFAULT_DB_ENV: settings.url}
            children.append(subprocess.Popen(worker_argv(settings, gpu), env=env))
        say(f"started {len(children)} worker(s) on GPU(s) {','.join(settings.gpus)} "
            f"(pids {' '.join(str(c.pid) for c in children)})")
        try:
            _wait(children)
        except KeyboardInterrupt:
            stopping.append(True)
            say("stopping: the workers release their jobs (Ctrl-C again to kill them)")
            _signal_all(children, signal.SIGTERM)  # those the terminal's SIGINT did not reach
            try:
                _wait(children, GRACE_S)
            except KeyboardInterrupt:
                pass
            _signal_all(children, signal.SIGKILL)
            _wait(children)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if any(c.poll() is None for c in children):  # an error of ours above: no orphans left behind
            _signal_all(children, signal.SIGKILL)
            _wait(children)
    codes = [c.returncode for c in children]
    if stopping:
        return EXIT_INTERRUPTED
    failed = [code if code >= 0 else 128 - code for code in codes if code != 0]  # killed by N: 128 + N
    return failed[0] if failed else 0


def _signal_all(children: Sequence[subprocess.Popen[Any]], signum: int) -> None:
    for child in children:
        if child.poll() is None:
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass


def _wait(children: Sequence[subprocess.Popen[Any]], timeout_s: float | None = None) -> None:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while any(c.poll() is None for c in children):
        if deadline is not None and time.monotonic() > deadline:
            return
        time.sleep(_POLL_S)
