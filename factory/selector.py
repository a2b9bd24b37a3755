"""Which instance serves a problem: the tuning DB's winner, a heuristic pick, a fresh tune, or a forced name."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .device import DEFAULT_TARGET, DeviceTarget
from .catalog import CatalogError, Instance, all_instances, instance_by_name
from .ops import solver_for
from .problem import DType, KernelFactoryError, Layout, Op, UnsupportedProblem, supported_cells_text
from tuning_db import Mismatch, Winner, WinnerLookup


class SelectMode(enum.Enum):
    AUTO = "auto"  # the DB's winner when there is one, else the heuristic
    DB = "db"  # the DB's winner or an error
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
    """Every catalog instance that computes `problem` on `target`. Raises UnsupportedProblem if its cell has none."""
    check_supported(problem)
    return [i for i in (instances or all_instances()) if i.is_applicable(problem, target)]


def explain(problem: Any, instances: Sequence[Instance] | None = None,
            target: DeviceTarget = DEFAULT_TARGET) -> list[Rejection]:
    """Why each instance of the op does not compute `problem` on `target` (those that do are left out)."""
    result = []
    for inst in instances or all_instances():
        if inst.op is not problem.op:
            continue
        reason = inst.why_not(problem, target)
        if reason is not None:
            result.append(Rejection(inst, reason))
    return result


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
    """The applicable instance the op's prior ranks first on `target` (used when a problem is untuned)."""
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


def catalog_refusal(problem: Any, winner: Winner, candidates: Mapping[str, Instance],
                    target: DeviceTarget = DEFAULT_TARGET) -> Refusal | None:
    """None when the winner's instance is one of `candidates` (lookup(problem)); else why not."""
    if winner.instance in candidates:
        return None
    try:
        inst = instance_by_name(winner.instance)
    except CatalogError:
        return Refusal(winner.instance, winner.median_us, Refused.NOT_IN_CATALOG, "its instance is no longer in the catalog")
    reason = inst.why_not(problem, target) or "not among the instances lookup() returns"
    return Refusal(winner.instance, winner.median_us, Refused.NOT_APPLICABLE,
                   f"its instance no longer applies to this problem: {reason}")


def stored_choice(problem: Any, found: WinnerLookup, candidates: Sequence[Instance] | None = None,
                  target: DeviceTarget = DEFAULT_TARGET) -> StoredChoice:
    """The DB's servable winner for `problem` (from `found`, a lookup on this device), or why none is.

    A winner is served only when it was recorded on this exact device (backend, arch, name, SM
    count, driver, compiler) and its instance still exists and still computes the problem.
    """
    by_name = {c.name: c for c in (candidates if candidates is not None else lookup(problem, target=target))}
    refusals: list[Refusal] = []
    for refused in found.refused:
        refusals += device_refusals(refused.winner, refused.mismatches)
        gone = catalog_refusal(problem, refused.winner, by_name, target)
        if gone is not None:
            refusals.append(gone)
    winner = found.winner
    if winner is not None:
        gone = catalog_refusal(problem, winner, by_name, target)
        if gone is not None:
            refusals.insert(0, gone)
            winner = None
    instance = by_name[winner.instance] if winner is not None else None
    return StoredChoice(found.problem_key, winner, instance, tuple(refusals))


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
