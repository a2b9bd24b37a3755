"""Plain values the database takes and gives back, so callers never see ORM objects."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from factory.backends.base import DeviceInfo


@dataclass(frozen=True)
class Measurement:
    """One candidate instance timed on one problem; failures are kept so they are not retried blindly."""

    instance: str
    median_us: float | None  # None when compiling, launching or timing failed
    spread_us: float | None  # e.g. interquartile range of the repetitions
    reps: int
    verified: bool  # output matched the reference; only verified results may win
    error: str | None = None
    gbps: float | None = None
    tflops: float | None = None
    # sha256 of the instance's rendered source when it was timed; None: unknown code (an older row).
    source_hash: str | None = None

    @property
    def failed(self) -> bool:
        """A measurement without a time could not be run at all."""
        return self.median_us is None


@dataclass(frozen=True)
class Winner:
    """The fastest verified instance for a problem on one exact device."""

    problem_key: str
    op: str
    instance: str
    median_us: float
    device: DeviceInfo
    recorded_at: datetime  # UTC time the winning measurement was recorded
    source_hash: str | None = None  # the code the winning time was measured on; None: unknown


class DeviceField(enum.Enum):
    """A part of a device's identity a stored result depends on."""

    BACKEND = "backend"
    ARCH = "arch"
    NAME = "device"
    SM_COUNT = "sm_count"
    DRIVER = "driver"
    COMPILER = "compiler"


@dataclass(frozen=True)
class Mismatch:
    """One way the device a result was recorded on differs from the current one."""

    field: DeviceField
    recorded: str
    current: str
    message: str  # phrased for a user, e.g. "recorded with driver 550.54, this machine has 560.28"


@dataclass(frozen=True)
class RefusedWinner:
    """A stored winner of another device identity, with every difference that rules it out."""

    winner: Winner
    mismatches: tuple[Mismatch, ...]


@dataclass(frozen=True)
class WinnerLookup:
    """The servable winner, plus the stored winners that were refused and why.

    Refusals are returned rather than hidden so a user can see that a result exists but was
    tuned on a different device, driver or compiler.
    """

    problem_key: str
    winner: Winner | None
    refused: tuple[RefusedWinner, ...] = ()

    @property
    def found(self) -> bool:
        return self.winner is not None

    @property
    def not_served(self) -> tuple[tuple[Winner, str], ...]:
        """(winner, its reasons joined in one phrase) per refused winner."""
        return tuple((r.winner, "; ".join(m.message for m in r.mismatches)) for r in self.refused)

    def reasons(self) -> list[str]:
        """One line per refused winner, ready to show to a user."""
        return [f"{w.instance} ({w.median_us:.3f} us): {reason}" for w, reason in self.not_served]


@dataclass(frozen=True)
class DbStats:
    """Row counts for `kfactory db stats`-style reporting."""

    url: str
    schema_version: int
    problems: int
    winners: int
    measurements: int
    failed_measurements: int
    devices: int
    winners_by_op: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportReport:
    """What an import changed, so merging databases from several machines is auditable."""

    measurements_added: int
    measurements_present: int  # already stored, skipped
    devices_added: int
    winners_added: int
    winners_replaced: int
    winners_kept: int


class JobState(enum.Enum):
    """Where a tuning job stands; the only transitions are the JobQueue's."""

    PENDING = "pending"  # waiting for a worker (new, re-queued after a failure, or released)
    RUNNING = "running"  # claimed; held by its owner's lease while heartbeats renew it
    DONE = "done"  # tuned: measurements and winner committed with this state
    FAILED = "failed"  # max_attempts used up (or a failure retrying cannot fix); `error` says why


@dataclass(frozen=True)
class JobSpec:
    """What to tune: a problem on one device identity, at one source version of its candidates."""

    problem_key: str
    op: str
    device: DeviceInfo
    source_version: str  # sha256 over the (instance, source hash) pairs of the candidates on that device


@dataclass(frozen=True)
class Job:
    """A stored tuning job; times are the database server's (UTC)."""

    id: int
    problem_key: str
    op: str
    device_id: int
    device: DeviceInfo
    source_version: str
    state: JobState
    attempts: int  # claims so far, the current one included
    max_attempts: int
    owner: str | None  # the worker holding (or that last held) the lease
    enqueued_at: datetime
    started_at: datetime | None  # the current (or last) claim
    heartbeat_at: datetime | None
    lease_expires_at: datetime | None
    finished_at: datetime | None
    error: str | None  # the last failed attempt's error
    winner_instance: str | None  # set when done with a verified winner
    winner_us: float | None


@dataclass(frozen=True)
class Lease:
    """A worker's hold on a claimed job: valid while the job's owner and token are these."""

    job: Job
    owner: str
    token: str
    seconds: float  # how long each renewal holds it


@dataclass(frozen=True)
class EnqueueReport:
    """What an enqueue changed: jobs added, and those already queued (same problem, device, source)."""

    added: int
    present: int


@dataclass(frozen=True)
class QueueStatus:
    """The queue at one moment of the server's clock, for `kfactory jobs`."""

    now: datetime
    counts: dict[JobState, int]
    running: tuple[Job, ...]  # oldest claim first
    failed: tuple[Job, ...]  # most recent first
    finished_recently: int  # jobs done or failed within `window_s` before `now`
    window_s: float  # the span those finished in (at most the throughput window, at least 1 s)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def remaining(self) -> int:
        return self.counts.get(JobState.PENDING, 0) + self.counts.get(JobState.RUNNING, 0)

    @property
    def per_minute(self) -> float | None:
        """Jobs finished per minute over the recent window; None before any finished."""
        if self.finished_recently == 0:
            return None
        return self.finished_recently * 60.0 / self.window_s

    @property
    def eta_s(self) -> float | None:
        """Seconds until the pending and running jobs are through at the recent rate."""
        rate = self.per_minute
        if rate is None:
            return None
        return self.remaining * 60.0 / rate
