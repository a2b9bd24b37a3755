"""Which instance serves a problem: the tuning DB's winner, a heuristic pick, a fresh tune, or a forced name."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Sequence

from .catalog import CatalogError, Instance, all_instances, instance_by_name
from .ops import solver_for
from .problem import KernelFactoryError, UnsupportedProblem, supported_cells_text


class SelectMode(enum.Enum):
    AUTO = "auto"  # the DB's winner when there is one, else the heuristic
    DB = "db"  # the DB's winner or an error
    HEURISTIC = "heuristic"  # never look at the DB
    TUNE = "tune"  # the DB's winner, tuning (and storing) first when there is none
    FORCE = "force"  # the named instance


class NotTuned(KernelFactoryError):
    """Mode db asked for a problem the tuning DB holds no servable winner for."""


@dataclass(frozen=True)
class Rejection:
    instance: Instance
    reason: str


def lookup(problem: Any, instances: Sequence[Instance] | None = None) -> list[Instance]:
    """Every catalog instance that computes `problem`. Raises UnsupportedProblem if its cell has none."""
    check_supported(problem)
    return [i for i in (instances or all_instances()) if i.is_applicable(problem)]


def explain(problem: Any, instances: Sequence[Instance] | None = None) -> list[Rejection]:
    """Why each instance of the op does not compute `problem` (those that do are left out)."""
    result = []
    for inst in instances or all_instances():
        if inst.op is not problem.op:
            continue
        reason = inst.why_not(problem)
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


def heuristic_pick(problem: Any, candidates: Sequence[Instance] | None = None) -> Instance:
    """The applicable instance the op's prior ranks first (used when a problem is untuned)."""
    candidates = list(candidates) if candidates is not None else lookup(problem)
    if not candidates:
        raise UnsupportedProblem(f"no instance applies to {problem.key}; `kfactory list --why` says why")
    solver = solver_for(problem.op)
    return max(candidates, key=lambda i: (solver.heuristic_score(i.family, i.params, problem), i.name))


def forced(problem: Any, name: str) -> Instance:
    try:
        inst = instance_by_name(name)
    except CatalogError as exc:
        raise UnsupportedProblem(str(exc)) from None
    reason = inst.why_not(problem)
    if reason is not None:
        raise UnsupportedProblem(f"{name} does not compute this problem: {reason}")
    return inst
