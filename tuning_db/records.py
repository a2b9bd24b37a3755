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
