"""`kfactory jobs`: the queue at a glance — pending, running (which worker, since when), done, failed —
with the recent throughput and an ETA; `--watch` redraws it with a progress bar; `--json` for scripts."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from tuning_db import Job, JobState, QueueStatus, TuningDB

PROBLEM_CHARS = 70
ERROR_CHARS = 100


def duration(seconds: float) -> str:
    """12s, 3m05s, 2h07m."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat()


def _job_record(job: Job, now: datetime) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": job.id, "problem": job.problem_key, "op": job.op, "device": job.device.name, "arch": job.device.arch,
        "state": job.state.value, "attempts": job.attempts, "max_attempts": job.max_attempts, "owner": job.owner,
        "enqueued_at": _iso(job.enqueued_at), "started_at": _iso(job.started_at), "finished_at": _iso(job.finished_at),
        "error": job.error,
    }
    if job.state is JobState.RUNNING:
        record["running_s"] = None if job.started_at is None else (now - job.started_at).total_seconds()
        record["heartbeat_at"] = _iso(job.heartbeat_at)
        record["lease_expires_at"] = _iso(job.lease_expires_at)
        record["lease_expired"] = job.lease_expires_at is not None and job.lease_expires_at < now
    return record


def status_record(status: QueueStatus, location: str) -> dict[str, Any]:
    """What `kfactory jobs --json` prints."""
    return {
        "db": location,
        "now": _iso(status.now),
        "total": status.total,
        "counts": {state.value: status.counts.get(state, 0) for state in JobState},
        "per_minute": status.per_minute,
        "eta_s": status.eta_s,
        "window_s": status.window_s,
        "running": [_job_record(job, status.now) for job in status.running],
        "failed": [_job_record(job, status.now) for job in status.failed],
    }


def summary(status: QueueStatus) -> str:
    counts = ", ".join(f"{status.counts.get(state, 0)} {state.value}" for state in JobState)
    line = f"{status.total} jobs: {counts}"
    if status.per_minute is not None:
        line += f"; {status.per_minute:.1f} jobs/min over the last {duration(status.window_s)}"
        if status.remaining:
            line += f", ETA {duration(status.eta_s or 0.0)}"
    elif status.remaining:
        line += "; no job finished yet: no ETA"
    return line


def tables(status: QueueStatus) -> list[Any]:
    """The running and failed jobs as tables (only those that have rows)."""
    shown: list[Any] = []
    if status.running:
        table = Table(title="running", title_justify="left")
        for col in ("job", "problem", "worker", "since (UTC)", "for", "attempt", "lease"):
            table.add_column(col, overflow="fold")
        for job in status.running:
            since = job.started_at
            expired = job.lease_expires_at is not None and job.lease_expires_at < status.now
            lease = "expired" if expired else (
                f"{duration((job.lease_expires_at - status.now).total_seconds())} left" if job.lease_expires_at else "-")
            table.add_row(str(job.id), _cut(job.problem_key, PROBLEM_CHARS), job.owner or "-",
                          since.strftime("%Y-%m-%d %H:%M:%S") if since else "-",
                          duration((status.now - since).total_seconds()) if since else "-",
                          f"{job.attempts}/{job.max_attempts}", lease)
        shown.append(table)
    if status.failed:
        table = Table(title="failed (most recent first)", title_justify="left")
        for col in ("job", "problem", "attempts", "last error"):
            table.add_column(col, overflow="fold")
        for job in status.failed:
            table.add_row(str(job.id), _cut(job.problem_key, PROBLEM_CHARS), f"{job.attempts}/{job.max_attempts}",
                          _cut(" ".join((job.error or "").split()), ERROR_CHARS))
        shown.append(table)
    return shown


def show(console: Console, status: QueueStatus, location: str) -> None:
    console.print(Text(f"tuning jobs in {location}"))
    console.print(Text(summary(status)))
    for table in tables(status):
        console.print(table)


def watch(console: Console, db: TuningDB, interval_s: float) -> None:
    """Redraw every `interval_s` until no job is pending or running (or Ctrl-C)."""
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                   console=console)
    task = bar.add_task("finished", total=None)
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while True:
            status = db.jobs.status()
            finished = status.counts.get(JobState.DONE, 0) + status.counts.get(JobState.FAILED, 0)
            bar.update(task, completed=finished, total=status.total or None)
            live.update(Group(Text(f"tuning jobs in {db.location}"), bar, Text(summary(status)), *tables(status)))
            if status.total and not status.remaining:
                return
            time.sleep(interval_s)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
