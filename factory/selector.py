"""Which instance serves a problem: the tuning DB's winner, a heuristic pick, a fresh tune, or a forced name."""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence

from .backends import DeviceInfo
from .device import DEFAULT_TARGET, DeviceTarget, target_for
from .catalog import (CatalogError, Instance, all_instances, instance_by_name, instances_of_cell,
                      parse_instance_name, specialized_instances)
from .ops import solver_for
from .problem import DType, KernelFactoryError, Layout, Op, UnsupportedProblem, supported_cells_text
from . import sources
from .sources import hash_of
from tuning_db import Mismatch, TuningDB, Winner, WinnerLookup


class SelectMode(enum.Enum):
    AUTO = "auto"  # the DB's winner; else a shipped one (factory.shipped); else the nearest tuned problem's; else the heuristic's
    DB = "db"  # the DB's winner, else a shipped one, or an error
    HEURISTIC = "heuristic"  # never look at the DB
    TUNE = "tune"  # the DB's winner, tuning (and storing) first when there is none
    FORCE = "force"  # the named instance


class NotTuned(KernelFactoryError):
    """Mode db asked for a problem the tuning DB holds no servable winner for."""


class UnreadableKey(KernelFactoryError):
    """A stored problem key that does not parse back to the problem it names."""


class Refused(enum.Enum):
    """Why a stored winner is not served: a device difference, or a catalog that moved on."""

    BACKEND = "backend"
    ARCH = "arch"
    DEVICE = "device"
    SM_COUNT = "sm_count"
    DRIVER = "driver"
    COMPILER = "compiler"
    NOT_IN_CATALOG = "not_in_catalog"
    NOT_APPLICABLE = "not_applicable"
    OLDER_CODE = "older_code"  # measured on a source the catalog no longer renders
    UNKNOWN_CODE = "unknown_code"  # recorded before measurements carried a source hash


@dataclass(frozen=True)
class Refusal:
    """One reason one stored winner is not served here; `recorded`/`current` name what differs."""

    instance: str
    median_us: float
    kind: Refused
    message: str
    recorded: str | None = None
    current: str | None = None

    def line(self) -> str:
        return f"stored winner {self.instance} ({self.median_us:.2f} µs) is not served: {self.message}"


@dataclass(frozen=True)
class StoredChoice:
    """What the tuning DB offers for a problem on this device: a servable instance or the refusals."""

    problem_key: str
    winner: Winner | None  # servable: this device, and its instance still computes the problem
    instance: Instance | None
    refusals: tuple[Refusal, ...]


@dataclass(frozen=True)
class Rejection:
    instance: Instance
    reason: str


def lookup(problem: Any, instances: Sequence[Instance] | None = None,
           target: DeviceTarget = DEFAULT_TARGET) -> list[Instance]:
    """Every catalog instance that computes `problem`. Raises UnsupportedProblem if its cell has none.

    Only the problem's own (op, layout, dtype, rank) cell is checked, through the catalog's index: its
    listed instances, then the template points specialized for the problem (cached per values).
    """
    check_supported(problem)
    if instances is None:
        instances = cell_instances(problem)
    return [i for i in instances if i.is_applicable(problem, target)]


def cell_instances(problem: Any) -> Sequence[Instance]:
    """The instances of the problem's cell (listed, then specialized for it), then those of its lower-rank
    view's cell (factory.ops.conv.fold) from the families that have no kernels of the problem's own rank."""
    own = with_specialized(instances_of_cell(problem.op, problem.layout, problem.dtype, problem.ndim), problem)
    view = solver_for(problem.op).lower_rank_view(problem)
    if view is None:
        return own
    return list(own) + folded_instances(problem, view)


def folded_instances(problem: Any, view: Any) -> list[Instance]:
    """The instances of `view`'s cell (listed, then specialized for `view`) whose family sees `problem` as
    `view` (it has no kernels of the problem's own cell)."""
    solver = solver_for(problem.op)
    listed = with_specialized(instances_of_cell(view.op, view.layout, view.dtype, view.ndim), view)
    return [i for i in listed if solver.problem_seen_by(i.family, problem) == view]


def explain(problem: Any, instances: Sequence[Instance] | None = None,
            target: DeviceTarget = DEFAULT_TARGET) -> list[Rejection]:
    """Why each instance of the op (and each specialized for `problem`) does not compute `problem`
    (those that do are left out)."""
    if not instances:
        instances = with_specialized(all_instances(), problem)
        view = solver_for(problem.op).lower_rank_view(problem)
        if view is not None:  # the view's specialized points, which no listing holds
            instances = with_specialized(instances, view)
    result = []
    for inst in instances:
        if inst.op is not problem.op:
            continue
        reason = inst.why_not(problem, target)
        if reason is not None:
            result.append(Rejection(inst, reason))
    return result


_MERGED: dict[tuple[int, int], tuple[Sequence[Instance], tuple[Instance, ...], tuple[Instance, ...]]] = {}


def with_specialized(listed: Sequence[Instance], problem: Any) -> Sequence[Instance]:
    """`listed` (catalog order), then the template points specialized for `problem` that it lacks.

    Memoized on the identity of both sequences (the catalog hands out the same cached tuples for a
    cell and a set of problem values): comparing names costs more than checking the problem itself.
    """
    extra = specialized_instances(problem)
    if not extra:
        return listed
    key = (id(listed), id(extra))
    hit = _MERGED.get(key)
    if hit is not None and hit[0] is listed and hit[1] is extra:
        return hit[2]
    names = {i.name for i in listed}
    merged = list(listed)
    for inst in extra:
        if inst.name not in names:
            names.add(inst.name)
            merged.append(inst)
    if len(_MERGED) >= 4096:
        _MERGED.clear()
    _MERGED[key] = (listed, extra, tuple(merged))
    return _MERGED[key][2]


def check_supported(problem: Any) -> None:
    solver = solver_for(problem.op)
    cell = (problem.layout, problem.dtype, problem.ndim)
    if cell not in solver.supported_cells():
        raise UnsupportedProblem(
            f"{problem.op.value} has no kernels for {problem.layout.value}/{problem.dtype.value}/{problem.ndim}D; "
            f"supported: {supported_cells_text(solver.supported_cells())}"
        )


def heuristic_pick(problem: Any, candidates: Sequence[Instance] | None = None,
                   target: DeviceTarget = DEFAULT_TARGET) -> Instance:
    """The applicable instance the op's prior ranks first (used when a problem is untuned)."""
    candidates = list(candidates) if candidates is not None else lookup(problem, target=target)
    if not candidates:
        raise UnsupportedProblem(f"no instance applies to {problem.key}; `kfactory list --why` says why")
    solver = solver_for(problem.op)
    return max(candidates, key=lambda i: (solver.heuristic_score(i.family, i.params, problem, target), i.name))


def forced(problem: Any, name: str, target: DeviceTarget = DEFAULT_TARGET) -> Instance:
    try:
        inst = instance_by_name(name)
    except CatalogError as exc:
        raise UnsupportedProblem(str(exc)) from None
    reason = inst.why_not(problem, target)
    if reason is not None:
        raise UnsupportedProblem(f"{name} does not compute this problem: {reason}")
    return inst


def device_refusals(winner: Winner, mismatches: Sequence[Mismatch]) -> list[Refusal]:
    return [
        Refusal(winner.instance, winner.median_us, Refused(m.field.value), m.message, m.recorded, m.current)
        for m in mismatches
    ]


def catalog_refusal(problem: Any, winner: Winner, candidates: Mapping[str, Instance] | None = None,
                    target: DeviceTarget = DEFAULT_TARGET) -> Refusal | None:
    """None when the winner's instance still computes `problem`; else why not.

    `candidates` (lookup(problem) by name) may be given when the caller has it; otherwise the
    winner's instance alone is resolved and checked, which is what the serving path can afford.
    """
    if candidates is not None and winner.instance in candidates:
        return None
    try:
        inst = instance_by_name(winner.instance)
    except CatalogError:
        return Refusal(winner.instance, winner.median_us, Refused.NOT_IN_CATALOG,
                       "its instance is no longer in the catalog" + _family_gone(winner.instance))
    reason = inst.why_not(problem, target)
    if reason is None and candidates is None:
        return None
    return Refusal(winner.instance, winner.median_us, Refused.NOT_APPLICABLE,
                   f"its instance no longer applies to this problem: {reason or 'not among the instances lookup() returns'}")


def _family_gone(name: str) -> str:
    """': family 'x' is not one of op's families (renamed or removed)' when that is why a name is unknown."""
    try:
        fields = parse_instance_name(name)
        families = solver_for(fields["op"]).families
    except KernelFactoryError:
        return ""
    if fields["family"] in families:
        return ""
    return (f": family {fields['family']!r} is not one of {fields['op'].value}'s "
            f"({', '.join(sorted(families))}; renamed or removed)")


def code_refusal(winner: Winner, instance: Instance) -> Refusal | None:
    """None when the winner was measured on the source `instance` renders today; else why not."""
    current = hash_of(instance)
    if winner.source_hash == current:
        return None
    if winner.source_hash is None:
        return Refusal(winner.instance, winner.median_us, Refused.UNKNOWN_CODE,
                       "measured on unknown code (recorded before results carried a source hash); "
                       "a tune measures the current code", None, current)
    return Refusal(winner.instance, winner.median_us, Refused.OLDER_CODE,
                   f"measured on older code (source {winner.source_hash[:12]}, the catalog now renders "
                   f"{current[:12]}); a tune measures the current code", winner.source_hash, current)


def serving_refusals(problem: Any, winner: Winner, candidates: Mapping[str, Instance] | None = None,
                     target: DeviceTarget = DEFAULT_TARGET) -> list[Refusal]:
    """Why `winner` cannot be served for `problem` apart from its device: catalog, then code."""
    gone = catalog_refusal(problem, winner, candidates, target)
    if gone is not None:
        return [gone]
    instance = candidates[winner.instance] if candidates is not None else instance_by_name(winner.instance)
    stale = code_refusal(winner, instance)
    return [] if stale is None else [stale]


def stored_choice(problem: Any, found: WinnerLookup, candidates: Sequence[Instance] | None = None,
                  target: DeviceTarget = DEFAULT_TARGET) -> StoredChoice:
    """The DB's servable winner for `problem` (from `found`, a lookup on this device), or why none is.

    A winner is served only when it was recorded on this exact device (backend, arch, name, SM
    count, driver, compiler), its instance still exists and still computes the problem, and it was
    measured on the source that instance renders today (results are keyed by code).
    """
    by_name = {c.name: c for c in candidates} if candidates is not None else None
    check_supported(problem)
    refusals: list[Refusal] = []
    for refused in found.refused:
        refusals += device_refusals(refused.winner, refused.mismatches)
        refusals += serving_refusals(problem, refused.winner, by_name, target)
    winner = found.winner
    instance = None
    if winner is not None:
        why = serving_refusals(problem, winner, by_name, target)
        if why:
            refusals[:0] = why
            winner = None
        else:
            instance = by_name[winner.instance] if by_name is not None else instance_by_name(winner.instance)
    return StoredChoice(found.problem_key, winner, instance, tuple(refusals))


class ServedMemo:
    """What stored_choice decided per (database, problem, device), kept until the database changes.

    A DB hit must still see a winner another process wrote a moment ago, so every entry carries
    the database's change token (TuningDB.change_token: equal only when nothing was committed in
    between) and is used only while the token is unchanged. A database that gives no token is read
    every time. The catalog is fixed for the process, and so are the source hashes unless
    sources.forget() drops them (its generation is part of every entry).
    """

    MAX_ENTRIES = 4096

    def __init__(self) -> None:
        self._entries: dict[tuple[str, Any, DeviceInfo], tuple[Hashable, int, StoredChoice]] = {}
        self._lock = threading.Lock()

    def choice(self, problem: Any, db: TuningDB, device: DeviceInfo) -> StoredChoice:
        token = db.change_token()
        code = sources.generation()
        key = (db.url, problem, device)
        if token is not None:
            hit = self._entries.get(key)
            if hit is not None and hit[0] == token and hit[1] == code:
                return hit[2]
        # The token was read before the lookup: a write in between changes the next token.
        choice = stored_choice(problem, db.lookup(problem.key, device), target=target_for(device))
        if token is not None:
            with self._lock:
                if len(self._entries) >= self.MAX_ENTRIES:
                    self._entries.clear()
                self._entries[key] = (token, code, choice)
        return choice

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


SERVED = ServedMemo()


def served_choice(problem: Any, db: TuningDB, device: DeviceInfo) -> StoredChoice:
    """stored_choice of the DB's lookup on `device`, memoized until the DB changes (see ServedMemo)."""
    return SERVED.choice(problem, db, device)


def problem_from_key(key: str) -> Any:
    """The problem a stored key names, read back with its op's own --problem parser."""
    parts = key.split(":", 4)
    if len(parts) != 5:
        raise UnreadableKey(f"stored problem key {key!r} is not op:layout:dtype:rank:sizes")
    op, layout, dtype, _rank, spec = parts
    try:
        problem = solver_for(Op.parse(op)).parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
    except KernelFactoryError as exc:
        raise UnreadableKey(f"stored problem key {key!r} does not parse: {exc}") from None
    if problem.key != key:
        raise UnreadableKey(f"stored problem key {key!r} reads back as {problem.key!r}")
    return problem


def tune_command(problem: Any) -> str:
    """The kfactory command line that tunes `problem`."""
    return (f"kfactory tune --op {problem.op.value} --layout {problem.layout.value} --dtype {problem.dtype.value} "
            f'--problem "{problem.spec()}"')
