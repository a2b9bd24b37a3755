"""`kfactory db verify`: re-time stored winners on this GPU and re-tune the ones that no longer hold.

A winner's time goes stale when drivers, clocks or neighbours change; a winner that now fails
verification is worse than stale. Each winner recorded on this device is timed again through the
tuner (one candidate, the same timing and verification as a tune); one slower than `threshold` x its
recorded time, or failing now, is re-tuned from scratch the way `kfactory tune --fresh` does.
A winner of this device whose time was measured on older or unknown code (a template changed since:
the DB no longer serves it) is timed the same way on today's code; within the threshold it is served
again, otherwise re-tuned. Winners that are not served here for other reasons (another device
identity, an instance that left the catalog — a renamed or removed family is named — or no longer
applies) are reported with the reasons, not timed.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Callable

from .api import candidate_code, tune_problem
from .backends import Backend
from .catalog import CatalogError, Instance, instance_by_name
from .compile_cache import CompileJob, compile_many, usable_cache_dir
from .device import target_for
from .selector import Refusal, Refused, UnreadableKey, device_refusals, lookup, problem_from_key, serving_refusals
from .shipped import ShippedWinner
from .sources import hash_of, source_of
from .tuner import Progress, TuneSettings, keep_measuring_worker, tune
from tuning_db import Measurement, TuningDB, Winner
from tuning_db.devices import mismatches

DEFAULT_THRESHOLD = 1.25
# Refusals that timing the same instance on today's code answers.
CODE_CHANGED = frozenset({Refused.OLDER_CODE, Refused.UNKNOWN_CODE})


class Action(enum.Enum):
    KEPT = "kept"  # verified now, within the threshold
    RETIMED = "retimed"  # measured on older code; verified on today's, within the threshold: served again
    RETUNED = "retuned"  # slower than the threshold or failing now; tuned again
    RETUNE_FAILED = "retune_failed"  # tuned again, but no candidate verified
    NOT_SERVED = "not_served"  # not servable on this device; left alone


class Trigger(enum.Enum):
    SLOWER = "slower"
    FAILS = "fails"


@dataclass(frozen=True)
class Recheck:
    """One stored winner after `db verify`."""

    problem_key: str
    instance: str
    recorded_us: float
    action: Action
    now: Measurement | None = None  # the re-timing; None when not timed
    trigger: Trigger | None = None  # why it was re-tuned
    new_winner: Winner | None = None  # after a re-tune
    refusals: tuple[Refusal, ...] = ()  # why it is not served; for a winner of older code, that (then timed)
    unreadable: str | None = None  # the stored problem key does not parse back

    @property
    def now_us(self) -> float | None:
        return self.now.median_us if self.now is not None and self.now.verified else None

    @property
    def ratio(self) -> float | None:
        return None if self.now_us is None else self.now_us / self.recorded_us


def compile_ahead(instances: list[Instance], device: Any, settings: TuneSettings) -> None:
    """Compile `instances` in worker processes into the compile cache before they are timed one by
    one: each timing then loads its binary instead of compiling it alone (NVRTC takes 1-3 s for a
    fused forward instance, and `tune` compiles a single candidate in-process). Without a writable
    cache there is nothing to gain."""
    jobs = {i.name: CompileJob(i.name, source_of(i).text, i.compile_arch(device.arch)) for i in instances}
    if len(jobs) > 1 and usable_cache_dir() is not None:
        compile_many(device.backend, list(jobs.values()), workers=settings.compile_workers)


def _in_catalog(name: str) -> Instance | None:
    try:
        return instance_by_name(name)
    except CatalogError:
        return None


@dataclass(frozen=True)
class _Check:
    """What verify learns of a stored winner before timing anything: its problem (None when the key no
    longer reads), the candidates here, why it is not served, and whether only code changed."""

    winner: Winner
    problem: Any = None
    unreadable: str | None = None
    candidates: dict[str, Instance] = dataclasses.field(default_factory=dict)
    refusals: tuple[Refusal, ...] = ()

    @property
    def code_changed(self) -> bool:
        return bool(self.refusals) and all(r.kind in CODE_CHANGED for r in self.refusals)

    @property
    def timed(self) -> bool:
        return self.problem is not None and (not self.refusals or self.code_changed)


def _check_of(winner: Winner, device: Any) -> _Check:
    try:
        problem = problem_from_key(winner.problem_key)
    except UnreadableKey as exc:
        return _Check(winner, unreadable=str(exc))
    target = target_for(device)
    candidates = {c.name: c for c in lookup(problem, target=target)}
    refusals = tuple(device_refusals(winner, mismatches(winner.device, device)) +
                     serving_refusals(problem, winner, candidates, target))
    return _Check(winner, problem, None, candidates, refusals)


def recheck_winners(
    db: TuningDB,
    backend: Backend,
    *,
    op: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    settings: TuneSettings = TuneSettings(),
    progress: Progress = Progress(),
    changed_only: bool = False,
    on_count: Callable[[int], None] | None = None,
    on_winner: Callable[[Winner], None] | None = None,
    on_result: Callable[[Recheck], None] | None = None,
) -> list[Recheck]:
    """Check every stored winner (of `op`, if given) against this GPU; see the module docstring.
    `changed_only`: only this device's winners measured on older code (what a template edit or an
    upgrade leaves to re-time), the others left out of the results. `on_count` hears how many will be
    checked; `on_result` each winner's outcome as soon as it is known (and stored)."""
    device = backend.device_info()
    checks = [_check_of(w, device) for w in db.winners(op)]
    if changed_only:
        checks = [c for c in checks if c.code_changed]
    if on_count is not None:
        on_count(len(checks))
    compile_ahead([c.candidates[c.winner.instance] for c in checks if c.timed], device, settings)
    results: list[Recheck] = []

    def add(result: Recheck) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    with keep_measuring_worker():  # one measuring process for every winner, not one per winner
        for check in checks:
            winner, problem, refusals = check.winner, check.problem, check.refusals
            if on_winner is not None:
                on_winner(winner)
            if problem is None:
                add(Recheck(winner.problem_key, winner.instance, winner.median_us, Action.NOT_SERVED,
                            unreadable=check.unreadable))
                continue
            if not check.timed:
                add(Recheck(problem.key, winner.instance, winner.median_us, Action.NOT_SERVED, refusals=refusals))
                continue
            instance = check.candidates[winner.instance]
            [now] = tune(problem, [instance], backend, settings)
            now = dataclasses.replace(now, source_hash=hash_of(instance))
            db.record(problem.key, problem.op.value, device, [now])
            if now.verified and now.median_us is not None and now.median_us <= threshold * winner.median_us:
                if check.code_changed:  # the older code's winner row gives way to today's measurement
                    db.decide(problem.key, device, candidate_code(problem, device))
                add(Recheck(problem.key, winner.instance, winner.median_us,
                            Action.RETIMED if check.code_changed else Action.KEPT, now, refusals=refusals))
                continue
            trigger = Trigger.SLOWER if now.verified and now.median_us is not None else Trigger.FAILS
            outcome = tune_problem(problem, backend, db, settings, progress, fresh=True)
            action = Action.RETUNED if outcome.winner is not None else Action.RETUNE_FAILED
            add(Recheck(problem.key, winner.instance, winner.median_us, action, now, trigger, outcome.winner,
                        refusals=refusals))
    return results


def describe(result: Recheck) -> str:
    """The action column of the verify table, in words."""
    if result.action is Action.NOT_SERVED:
        if result.unreadable:
            return f"not served: {result.unreadable}"
        return "not served: " + "; ".join(r.message for r in result.refusals)
    if result.action is Action.KEPT:
        return "kept"
    if result.action is Action.RETIMED:
        return "measured on older code; timed on today's code: served again"
    why = ("slower than the threshold" if result.trigger is Trigger.SLOWER
           else f"fails now ({(result.now.error if result.now else None) or 'not verified'})")
    if result.action is Action.RETUNE_FAILED:
        return f"{why}; re-tuned, no candidate verified"
    assert result.new_winner is not None
    return f"{why}; re-tuned: {result.new_winner.instance} {result.new_winner.median_us:.2f} µs"


def as_record(result: Recheck) -> dict[str, Any]:
    """The JSON form of one row of `db verify`."""
    return {
        "problem": result.problem_key,
        "instance": result.instance,
        "recorded_us": result.recorded_us,
        "now_us": result.now_us,
        "ratio": result.ratio,
        "action": result.action.value,
        "trigger": result.trigger.value if result.trigger else None,
        "error": result.now.error if result.now is not None else None,
        "new_winner": result.new_winner.instance if result.new_winner else None,
        "new_winner_us": result.new_winner.median_us if result.new_winner else None,
        "not_served": [_refusal_record(r) for r in result.refusals] if result.action is Action.NOT_SERVED else [],
        "code_changed": result.action is not Action.NOT_SERVED and bool(result.refusals),
        "unreadable": result.unreadable,
        "detail": describe(result),
    }


def _refusal_record(r: Refusal) -> dict[str, Any]:
    return {"kind": r.kind.value, "reason": r.message, "recorded": r.recorded, "current": r.current}


@dataclass(frozen=True)
class ShippedRetime:
    """One winner shipped from a similar device, after `db verify --shipped`."""

    problem_key: str
    shipped: ShippedWinner
    now: Measurement | None = None  # this GPU's measurement of it; None when not timed
    winner: Winner | None = None  # this device's winner in the user's DB afterwards
    refusals: tuple[Refusal, ...] = ()  # why it cannot be served at all (catalog, code)
    already: bool = False  # re-timed here before: not timed again

    @property
    def trusted(self) -> bool:
        """Verified on this GPU: served here from now on (as this device's winner, or beaten by one)."""
        return self.now is not None and self.now.verified and self.now.median_us is not None


def retime_shipped(
    db: TuningDB,
    backend: Backend,
    *,
    op: str | None = None,
    settings: TuneSettings = TuneSettings(),
    on_winner: Callable[[ShippedWinner], None] | None = None,
) -> list[ShippedRetime]:
    """Time each winner shipped from a device similar to this one (factory.shipped), once, on this
    GPU; record the measurement in `db` and re-decide this device's winner among the problem's
    current candidates, so a verified one is served here from then on (a faster own winner stays)."""
    from .shipped import shipped_winners

    device = backend.device_info()
    results: list[ShippedRetime] = []
    todo = [s for s in shipped_winners().similar_to(device) if op is None or s.winner.op == op]
    known = [_in_catalog(s.winner.instance) for s in todo]
    compile_ahead([i for i in known if i is not None], device, settings)
    with keep_measuring_worker():  # one measuring process for every winner, not one per winner
        for shipped in todo:
            if on_winner is not None:
                on_winner(shipped)
            key = shipped.winner.problem_key
            try:
                problem = problem_from_key(key)
            except UnreadableKey:
                continue  # a key of another version's ops: nothing here could serve it
            refusals = tuple(serving_refusals(problem, shipped.winner, None, target_for(device)))
            if refusals:
                results.append(ShippedRetime(key, shipped, refusals=refusals))
                continue
            instance = instance_by_name(shipped.winner.instance)
            code = hash_of(instance)
            before = [m for m, _, _ in db.measurements(key, device)
                      if m.instance == instance.name and m.source_hash == code]
            if before:
                results.append(ShippedRetime(key, shipped, before[-1], db.best(key, device), already=True))
                continue
            [now] = tune(problem, [instance], backend, settings)
            now = dataclasses.replace(now, source_hash=code)
            db.record(key, problem.op.value, device, [now])
            winner = db.decide(key, device, candidate_code(problem, device))
            results.append(ShippedRetime(key, shipped, now, winner))
    return results


def describe_shipped(result: ShippedRetime) -> str:
    """The action column of `db verify --shipped`, in words."""
    if result.refusals:
        return "not served: " + "; ".join(r.message for r in result.refusals)
    now = result.now
    timed = f"{now.median_us:.2f} µs here" if now is not None and now.median_us is not None else "not timed"
    if not result.trusted:
        return f"fails here ({(now.error if now else None) or 'not verified'}); not served"
    served = "served here"
    if result.winner is not None and result.winner.instance != result.shipped.winner.instance:
        served = f"this device's own winner {result.winner.instance} is faster"
    return f"{'re-timed before' if result.already else 're-timed'}: {timed}; {served}"
