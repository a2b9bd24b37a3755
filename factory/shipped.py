"""Winners shipped with the package, read-only beneath the user's tuning DB (as MIOpen's system DB).

The package's `shipped/` folder holds exports in the DB's transfer format (winners and their
measurements only; `scripts/ship_winners.py` writes one from a DB tuned on the device). A shipped
winner is served for a problem the user's DB has no winner of on this device:

- on an **identical** device (same backend, arch, device name and SM count; driver and compiler may
  differ), directly;
- on a **similar** device (same backend and arch, another name or SM count), only after it was
  re-timed here once: `kfactory db verify --shipped` measures it on this GPU as a one-candidate tune
  (verified against the reference, as `db verify` re-times a stored winner) and records it in the
  user's DB, where it is this device's own winner from then on (a later tune measures the rest).

Either way its instance must still compute the problem and the shipped time must have been measured
on today's source of that instance (results are keyed by code; a template edit retires a shipped
winner until the file is rebuilt). $KFACTORY_SHIPPED names another folder of such files, or `off`.
"""

from __future__ import annotations

import enum
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from .backends import DeviceInfo
from .catalog import Instance, instance_by_name
from .device import target_for
from .problem import KernelFactoryError
from .resources import shipped_dir
from .selector import Refusal, UnreadableKey, problem_from_key, serving_refusals
from tuning_db import SCHEMA_VERSION, TuningDB, TuningDBError, Winner
from tuning_db.devices import mismatches
from tuning_db.records import DeviceField
from tuning_db.transfer import TransferDocument, TransferMeasurement, TransferWinner, read_document

SHIPPED_ENV = "KFACTORY_SHIPPED"


class ShippedError(KernelFactoryError):
    """$KFACTORY_SHIPPED names no folder, or a shipped file is defective: one line, naming it."""


class Match(enum.Enum):
    """How the device a winner was shipped from relates to this one."""

    IDENTICAL = "identical"  # same backend, arch, name, SM count: served as it is
    SIMILAR = "similar"  # same backend and arch: served once re-timed here


@dataclass(frozen=True)
class ShippedWinner:
    winner: Winner
    match: Match

    def describe(self) -> str:
        d = self.winner.device
        return f"shipped winner ({self.match.value} device: {d.name}, {d.sm_count} SMs, {self.winner.median_us:.2f} µs there)"


def match_of(recorded: DeviceInfo, current: DeviceInfo) -> Match | None:
    """IDENTICAL, SIMILAR, or None when a result from `recorded` says nothing about `current`."""
    fields = {m.field for m in mismatches(recorded, current)}
    if fields & {DeviceField.BACKEND, DeviceField.ARCH}:
        return None
    if fields & {DeviceField.NAME, DeviceField.SM_COUNT}:
        return Match.SIMILAR
    return Match.IDENTICAL


def winners_of(document: TransferDocument) -> list[Winner]:
    """The winners of an export, each with its device and its winning measurement's time and code."""
    found = []
    for w in document.winners:
        m = document.measurements[w.measurement]
        found.append(Winner(w.problem_key, w.op, m.measurement.instance, m.measurement.median_us,
                            document.devices[w.device], m.recorded_at, m.measurement.source_hash))
    return found


class ShippedWinners:
    """The shipped winners, by problem key."""

    def __init__(self, winners: Iterable[Winner] = ()) -> None:
        self._by_key: dict[str, list[Winner]] = {}
        for winner in winners:
            if winner.median_us is not None:
                self._by_key.setdefault(winner.problem_key, []).append(winner)

    @classmethod
    def load(cls, folder: Path) -> "ShippedWinners":
        """Every `*.json` export in `folder`; a defective file is a ShippedError naming it."""
        winners: list[Winner] = []
        for path in sorted(folder.glob("*.json")):
            try:
                winners += winners_of(read_document(path))
            except TuningDBError as exc:
                raise ShippedError(f"shipped winners: {exc}") from None
        return cls(winners)

    def __len__(self) -> int:
        return sum(len(ws) for ws in self._by_key.values())

    def find(self, problem_key: str, device: DeviceInfo) -> ShippedWinner | None:
        """The winner shipped for this problem from an identical device, else from a similar one."""
        best: ShippedWinner | None = None
        for winner in self._by_key.get(problem_key, ()):
            match = match_of(winner.device, device)
            if match is Match.IDENTICAL:
                return ShippedWinner(winner, match)
            if match is Match.SIMILAR and best is None:
                best = ShippedWinner(winner, match)
        return best

    def identical_to(self, device: DeviceInfo, op: str) -> list[Winner]:
        """The winners of `op` shipped from a device identical to `device`: neighbours for an untuned
        problem (factory.nearest) as a user's own tuned problems are."""
        return [w for ws in self._by_key.values() for w in ws
                if w.op == op and match_of(w.device, device) is Match.IDENTICAL]

    def similar_to(self, device: DeviceInfo) -> list[ShippedWinner]:
        """One winner per problem shipped from a device similar (not identical) to `device`, for
        `db verify --shipped`; problems with an identical device's winner are served as they are."""
        found = [self.find(key, device) for key in sorted(self._by_key)]
        return [s for s in found if s is not None and s.match is Match.SIMILAR]


_loaded: dict[str, ShippedWinners] = {}
_lock = threading.Lock()


def shipped_winners() -> ShippedWinners:
    """The package's shipped winners (or $KFACTORY_SHIPPED's), read once per process."""
    setting = os.environ.get(SHIPPED_ENV, "")
    with _lock:
        if setting not in _loaded:
            if setting.strip().lower() == "off":
                _loaded[setting] = ShippedWinners()
            elif setting:
                folder = Path(setting).expanduser()
                if not folder.is_dir():
                    raise ShippedError(f"${SHIPPED_ENV}={setting!r} is not a folder of shipped-winner files "
                                       "(or `off`)")
                _loaded[setting] = ShippedWinners.load(folder)
            else:  # the package's own, where it has any
                folder = shipped_dir()
                _loaded[setting] = ShippedWinners.load(folder) if folder.is_dir() else ShippedWinners()
        return _loaded[setting]


@dataclass(frozen=True)
class ShippedLookup:
    """The shipped winner for a problem on this device, and whether it is served as it is."""

    found: ShippedWinner | None
    instance: Instance | None  # set when served now: an identical device's, still applicable and current
    refusals: tuple[Refusal, ...] = ()  # why a found winner cannot be served (catalog, code)


def lookup_shipped(problem: Any, device: DeviceInfo) -> ShippedLookup:
    """What the shipped winners offer `problem` on `device` (see the module docstring)."""
    found = shipped_winners().find(problem.key, device)
    if found is None:
        return ShippedLookup(None, None)
    refusals = tuple(serving_refusals(problem, found.winner, None, target_for(device)))
    if refusals or found.match is not Match.IDENTICAL:
        return ShippedLookup(found, None, refusals)
    return ShippedLookup(found, instance_by_name(found.winner.instance))


def winners_document(db: TuningDB, arch: str) -> tuple[TransferDocument, list[str]]:
    """An export of `db`'s winners recorded on `arch` that are servable today (instance in the
    catalog and applicable, time measured on its current source), each with its winning
    measurement: what shipped/ holds. Also the problem keys left out, with why."""
    devices: list[DeviceInfo] = []
    measurements: list[TransferMeasurement] = []
    winners: list[TransferWinner] = []
    left_out: list[str] = []
    for winner in db.winners():
        if winner.device.arch != arch:
            continue
        try:
            problem = problem_from_key(winner.problem_key)
        except UnreadableKey as exc:
            left_out.append(f"{winner.problem_key}: {exc}")
            continue
        refusals = serving_refusals(problem, winner, None, target_for(winner.device))
        if refusals:
            left_out.append(f"{winner.problem_key}: {refusals[0].message}")
            continue
        taken = [(m, at) for m, _, at in db.measurements(winner.problem_key, winner.device)
                 if m.verified and m.instance == winner.instance and m.source_hash == winner.source_hash
                 and m.median_us == winner.median_us]
        if not taken:
            left_out.append(f"{winner.problem_key}: its winning measurement is not stored")
            continue
        if winner.device not in devices:
            devices.append(winner.device)
        device = devices.index(winner.device)
        measurements.append(TransferMeasurement(winner.problem_key, winner.op, device, *taken[-1]))
        winners.append(TransferWinner(winner.problem_key, winner.op, device, len(measurements) - 1))
    document = TransferDocument(SCHEMA_VERSION, tuple(devices), tuple(measurements), tuple(winners))
    return document, left_out
