"""An answer for a problem nobody tuned: the winner of the nearest tuned problem on this device.

A layer nobody tuned usually has tuned neighbours (the same layer at another batch size, the next
stage of the network). Their winners are better guesses than the heuristic's prior: same op, layout,
dtype and rank, recorded on exactly this device, measured on today's code, and applicable to the asked
problem. Nearness is a distance over the logarithms of the problems' sizes (N, channels, spatial sizes,
filter, ...), so a batch twice as large counts as much as a spatial size twice as large; a neighbour
must also be of the same class (depthwise, dense, pointwise, strided) and within the op's reach
(`nearest_reach`: how far a neighbour's winner still beats the op's prior, measured per op). A winner of a
family that compiles the problem's shape in (a filter, a stride) is carried over as the same tuning
point specialized for the asked problem.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from tuning_db import TuningDB, Winner
from tuning_db.devices import mismatches

from .backends import DeviceInfo
from .catalog import CatalogError, Instance, instance_by_name
from .device import target_for
from .ops import solver_for
from .problem import ConvProblem
from .selector import UnreadableKey, code_refusal, heuristic_pick, lookup, problem_from_key

MISSING_FIELD = 1.0  # distance for a size one problem spells and the other does not


@dataclass(frozen=True)
class NearestChoice:
    """A tuned neighbour's winner, applicable to the asked problem."""

    instance: Instance  # what to run for the asked problem
    source_key: str  # the tuned problem it won on
    source_instance: str  # the winner's own name (differs when carried over to another filter)
    source_us: float  # its time on the tuned problem
    distance: float
    shipped: bool = False  # the tuned problem is one of the package's shipped winners, not the user's DB's


def cell_prefix(problem_key: str) -> str:
    """`op:layout:dtype:rank:` of a problem key: the problems whose winners may serve it."""
    return ":".join(problem_key.split(":", 4)[:4]) + ":"


def sizes(problem_key: str) -> dict[str, tuple[int, ...]]:
    """The numeric fields of a key's size part (`N=32,...,input=28x28`), each as a tuple."""
    spec = problem_key.split(":", 4)[4]
    fields: dict[str, tuple[int, ...]] = {}
    for part in spec.split(","):
        name, _, value = part.partition("=")
        try:
            fields[name] = tuple(int(v) for v in value.split("x"))
        except ValueError:
            continue  # a non-integer field (alpha=0.5): not a size
    return fields


def distance(a: Mapping[str, tuple[int, ...]], b: Mapping[str, tuple[int, ...]]) -> float:
    """Sum over sizes of |log2(1 + x) - log2(1 + y)|; a field only one side has, or of another rank,
    costs MISSING_FIELD per value."""
    total = 0.0
    for name in a.keys() | b.keys():
        x, y = a.get(name), b.get(name)
        if x is None or y is None or len(x) != len(y):
            total += MISSING_FIELD * max(len(x or ()), len(y or ()))
            continue
        total += sum(abs(math.log2(1 + u) - math.log2(1 + v)) for u, v in zip(x, y))
    return total


def problem_class(problem: Any) -> tuple[bool, ...]:
    """What a neighbour must share beyond the cell: for convolutions, whether the problem is depthwise
    (C = K = 1), dense (G = 1), pointwise (a 1x1 filter) and strided, which decide the family and tile
    that win whatever the sizes (a grouped winner serves a depthwise or dense layer badly, however close
    their sizes)."""
    if isinstance(problem, ConvProblem):
        return (problem.C == 1 and problem.K == 1, problem.G == 1, problem.filter_volume == 1,
                any(s > 1 for s in problem.stride))
    return ()


def _class_of_key(problem_key: str) -> tuple[bool, ...] | None:
    try:
        return problem_class(problem_from_key(problem_key))
    except UnreadableKey:
        return None  # a key this version cannot read: no neighbour


def nearest_choice(problem: Any, db: TuningDB, device: DeviceInfo, shipped: bool = True) -> NearestChoice | None:
    """The nearest tuned problem's winner that can serve `problem` on `device`, or None: neighbours are
    of the same cell and problem class, within the op's `nearest_reach`. With `shipped`, the winners shipped from an
    identical device (factory.shipped) are neighbours too, below the DB's own for the same problem."""
    prefix, key = cell_prefix(problem.key), problem.key
    mine, kind = sizes(key), problem_class(problem)
    reach = solver_for(problem.op).nearest_reach
    near: list[tuple[float, str, Winner]] = []
    winners, shipped_keys = _tuned_winners(problem.op.value, db, device, shipped)
    for w in winners:
        if not w.problem_key.startswith(prefix) or w.problem_key == key or mismatches(w.device, device):
            continue
        d = distance(mine, sizes(w.problem_key))
        if d <= reach and _class_of_key(w.problem_key) == kind:
            near.append((d, w.problem_key, w))
    if not near:
        return None
    target = target_for(device)
    candidates = lookup(problem, target=target)
    # The prior chooses the family well (it knows which kind of kernel a problem's shape needs); a
    # neighbour's winner refines the tuning point within it.
    family = heuristic_pick(problem, candidates, target).family
    for d, _, winner in sorted(near, key=lambda t: (t[0], t[1])):
        instance = _serving_instance(problem, winner, candidates)
        if instance is not None and instance.family == family:
            return NearestChoice(instance, winner.problem_key, winner.instance, winner.median_us, d,
                                 winner.problem_key in shipped_keys)
    return None


def _tuned_winners(op: str, db: TuningDB, device: DeviceInfo, shipped: bool) -> tuple[list[Winner], set[str]]:
    """The DB's winners of `op`, and with `shipped` those shipped for problems the DB lacks; the keys of
    the shipped ones."""
    own = db.winners(op)
    if not shipped:
        return own, set()
    from .shipped import shipped_winners  # shipped imports what this module imports: not at the top

    keys = {w.problem_key for w in own}
    extra = [w for w in shipped_winners().identical_to(device, op) if w.problem_key not in keys]
    return own + extra, {w.problem_key for w in extra}


def _serving_instance(problem: Any, winner: Winner, candidates: Iterable[Instance]) -> Instance | None:
    """The candidate that is `winner`'s tuning point for `problem`: the instance itself, or the same point
    with the problem's own filled-in values; None when the winner was timed on other code or no such
    point computes `problem`."""
    try:
        own = instance_by_name(winner.instance)
    except CatalogError:
        return None  # left the catalog
    if code_refusal(winner, own) is not None:
        return None
    by_name = {c.name: c for c in candidates}
    if own.name in by_name:
        return by_name[own.name]
    family = solver_for(problem.op).family(own.family)
    values = family.problem_values(problem) if family.takes_problem_values() else None
    if not values:
        return None
    try:
        carried = dataclasses.replace(own.params, **values)
    except (TypeError, ValueError):
        return None
    return next((c for c in by_name.values() if c.family == own.family and c.params == carried), None)
