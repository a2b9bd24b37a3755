"""Rank an untuned problem's candidates with every relative time a fully tuned DB measured, not only winners.

Every problem Q of a fully tuned DB says, for each candidate it timed, how far it was from Q's best:
log2 r(I, Q) = log2 t(I, Q) / t_best(Q). A candidate I of an untuned problem P (factory.selector.lookup)
is the same tuning point as a candidate of Q when family and params agree, the values a family compiles
in (dwr's filter, stride, dilation) set aside, as factory.nearest._serving_instance carries a winner over.

The prediction starts from the op's prior, guess(I, P) = alpha + beta * gap(I, P), gap being how far I's
heuristic_score is below P's best score (in log2 time: alpha + beta * gap fits log2 r over the training
DB), and adds two corrections, each a kernel-weighted mean over tuned problems shrunk toward 0 by a
pseudo-weight `lam`:

- family: on each Q, the best log2 r of I's family less the prior's guess for that family's best there
  (what the prior gets wrong about a family, e.g. wgmma against mma on dense problems); broad kernel.
- point: on each Q that measured I's point, log2 r(I, Q) less guess(I, P) and the family correction
  (what the measurements say about this very point); narrow kernel, near problems only.

Weights are exp(-(d + penalties) / h) within `reach`, d = factory.nearest.distance over log2 sizes (the
key's, or the GEMM's: groups, K, C*filter, N*output, output width, stride), penalties for another layout,
dtype or rank and per problem-class flag (depthwise, dense, pointwise, strided); inf means must match.
Q's regrets count from the best of what P can run ("shared"): a winner P cannot run does not make every
shared point (or family) look slow. The ranking is ascending prediction (the prior's order breaks ties);
with `top_k`, only the prior's first top_k candidates are reordered, the rest follow in the prior's order.

Hyper-parameters are chosen by leave-out on the training DB only: each problem is served from the others
less every problem of the same sizes (the public suite repeats a layer over layouts and dtypes; an
unseen problem has no such twin). Note the prior's rules were fitted on that same training DB, so there
the prior itself looks better than on unseen problems. The held-out DB is served from the whole training
DB. Regret of the pick is against the problem's winner (as nearest_regret.py), top-K the best of the
first K ranked candidates against the best stored time (as budget_regret.py):

    python scripts/measured_ranking.py --train train.db --test test.db [--grid] [--rows]

Open copies of the databases: TuningDB may write to a file it opens.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

from factory.catalog import Instance
from factory.device import target_for
from factory.nearest import distance, problem_class, sizes
from factory.ops import solver_for
from factory.selector import lookup, problem_from_key
from regret_common import best_of_first, fail, geomean, summary, tuned_db

BUDGETS = (4, 8)
CONV_OPS = ("conv_bwd_weight", "conv_bwd_data")  # gemm_sizes reads a ConvProblem's fields
INF = math.inf
Point = tuple[Any, ...]  # (family, (field, value)...): params less the problem's compiled-in values
Sizes = dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class Candidate:
    name: str
    point: Point
    score: float  # the op's heuristic score on this problem

    @property
    def family(self) -> str:
        return self.point[0]


@dataclass
class Tuned:
    """One fully tuned problem: its candidates in the prior's order, their times, and the relative times."""

    key: str
    cell: tuple[str, str, int]  # layout, dtype, rank
    klass: tuple[bool, ...]  # factory.nearest.problem_class
    sizes: Sizes  # the key's sizes
    gemm: Sizes  # gemm_sizes
    candidates: list[Candidate]  # the prior's order, best first
    times: dict[str, float]  # verified times by name
    measured: set[str]  # every name the DB measured (verified or not)
    winner_us: float
    log_r: dict[Point, float]  # log2 t / t_best of each verified point
    gap: dict[Point, float]  # the best heuristic score less each candidate's
    family_r: dict[str, float] = dataclasses.field(default_factory=dict)  # a family's best log_r
    family_gap: dict[str, float] = dataclasses.field(default_factory=dict)  # a family's least gap

    def __post_init__(self) -> None:
        for c in self.candidates:
            f = c.family
            self.family_gap[f] = min(self.family_gap.get(f, INF), self.gap[c.point])
            if c.point in self.log_r:
                self.family_r[f] = min(self.family_r.get(f, INF), self.log_r[c.point])

    @property
    def shape(self) -> str:
        """The key less its cell: the same layer in another layout or dtype shares it."""
        return self.key.split(":", 4)[4]


@dataclass(frozen=True)
class Kernel:
    """Which tuned problems count for a problem, and how much: exp(-(distance + penalties) / h)."""

    h: float = 1.0
    reach: float = 5.0  # past this (penalties included) a problem does not count
    cell_penalty: tuple[float, float, float] = (INF, 3.0, 3.0)  # another layout, dtype, rank; inf: must match
    class_penalty: float = INF  # per differing class flag
    metric: str = "sizes"  # "sizes": the key's (factory.nearest.sizes); "gemm": gemm_sizes

    def weight(self, p: Tuned, q: Tuned) -> float:
        penalties = [pen for pen, a, b in zip(self.cell_penalty, p.cell, q.cell) if a != b]
        penalties += [self.class_penalty for a, b in zip(p.klass, q.klass) if a != b]
        d = sum(penalties) + (distance(p.gemm, q.gemm) if self.metric == "gemm" else distance(p.sizes, q.sizes))
        return math.exp(-d / self.h) if d <= self.reach else 0.0


@dataclass(frozen=True)
class Variant:
    """One ranking: the prior's guess, and the point and family corrections (None: not used)."""

    name: str
    alpha: float = 0.3  # the prior's guess of its own first pick's log2 regret
    beta: float = 1.0  # log2 time per unit of heuristic score below the best
    point: Kernel | None = Kernel()
    lam: float = 0.1  # the prior's pseudo-weight against the point evidence
    family: Kernel | None = None
    family_lam: float = 1.0  # the prior's pseudo-weight against the family evidence
    top_k: int | None = None  # re-rank only the prior's first top_k; the others follow in its order

    def guess(self, gap: float) -> float:
        return self.alpha + self.beta * gap


PRIOR = Variant("prior", point=None)


def point_of(inst: Instance, problem: Any) -> Point:
    """The tuning point of `inst`: its family and params, less the fields a family fills from the problem."""
    family = solver_for(problem.op).family(inst.family)
    filled = (family.problem_values(problem) if family.takes_problem_values() else None) or {}
    fields = dataclasses.asdict(inst.params)
    return (inst.family, *((k, v) for k, v in fields.items() if k not in filled))


def gemm_sizes(problem: Any) -> Sizes:
    """What the kernels' work is shaped by: groups, the per-group GEMM (K x C*filter, reduced over N times
    the output positions), the innermost output extent and the stride."""
    return {"G": (problem.G,), "K": (problem.K,), "CF": (problem.C * problem.filter_volume,),
            "R": (problem.N * math.prod(problem.output),), "W": (problem.output[-1],),
            "S": (math.prod(problem.stride),)}


def load(path: str, op: str) -> list[Tuned]:
    """Every tuned problem of the DB at `path`, with each candidate's point, prior score and relative time."""
    problems = []
    with tuned_db(path) as db:
        for winner in db.winners(op):
            problem = problem_from_key(winner.problem_key)
            target = target_for(winner.device)
            solver = solver_for(problem.op)
            rows = db.measurements(winner.problem_key, winner.device)
            times = {m.instance: m.median_us for m, _, _ in rows if m.verified and m.median_us}
            candidates = [Candidate(c.name, point_of(c, problem), solver.heuristic_score(c.family, c.params, problem, target))
                          for c in lookup(problem, target=target)]
            candidates.sort(key=lambda c: (c.score, c.name), reverse=True)  # as factory.api.rank_candidates
            best = min(times.values())
            problems.append(Tuned(
                winner.problem_key, (problem.layout.value, problem.dtype.value, problem.ndim), problem_class(problem),
                sizes(winner.problem_key), gemm_sizes(problem), candidates, times, {m.instance for m, _, _ in rows},
                winner.median_us,
                log_r={c.point: math.log2(times[c.name] / best) for c in candidates if c.name in times},
                gap={c.point: candidates[0].score - c.score for c in candidates}))
    return problems


def shrunk_mean(pairs: Sequence[tuple[float, float]], lam: float) -> float:
    """sum w x / (lam + sum w) over (w, x): a weighted mean pulled toward 0 by a pseudo-weight lam."""
    return sum(w * x for w, x in pairs) / (lam + sum(w for w, _ in pairs))


def family_correction(p: Tuned, pool: Sequence[Tuned], v: Variant) -> dict[str, float]:
    """Per family of p: what the prior got wrong about the family's best on similar problems, counted
    from the best family that p also has."""
    if v.family is None:
        return {}
    found: dict[str, list[tuple[float, float]]] = {f: [] for f in p.family_gap}
    for q in pool:
        w = v.family.weight(p, q)
        shared = [f for f in p.family_gap if f in q.family_r]
        if w <= 0 or len(shared) < 2:
            continue  # a single shared family says nothing about the choice
        r0 = min(q.family_r[f] for f in shared)
        g0 = min(q.family_gap[f] for f in shared)
        for f in shared:
            found[f].append((w, q.family_r[f] - r0 - v.beta * (q.family_gap[f] - g0)))
    return {f: shrunk_mean(pairs, v.family_lam) for f, pairs in found.items()}


def point_correction(p: Tuned, pool: Sequence[Tuned], v: Variant, family: dict[str, float]) -> dict[Point, float]:
    """Per point of p: how far the point's measured log2 regret on similar problems was from its guess on p,
    family correction included (regrets counted from the best point p and q share)."""
    if v.point is None:
        return {}
    found: dict[Point, list[tuple[float, float]]] = {c.point: [] for c in p.candidates}
    for q in pool:
        w = v.point.weight(p, q)
        shared = [c.point for c in p.candidates if c.point in q.log_r]
        if w <= 0 or not shared:
            continue
        r0 = min(q.log_r[s] for s in shared)
        for s in shared:
            found[s].append((w, q.log_r[s] - r0 - v.guess(p.gap[s]) - family.get(s[0], 0.0)))
    return {s: shrunk_mean(pairs, v.lam) for s, pairs in found.items() if pairs}


def predict(p: Tuned, pool: Sequence[Tuned], v: Variant) -> dict[str, float]:
    """Each of p's candidates' predicted log2 regret, from the measurements of `pool` (p not in it)."""
    family = family_correction(p, pool, v)
    point = point_correction(p, pool, v, family)
    return {c.name: v.guess(p.gap[c.point]) + family.get(c.family, 0.0) + point.get(c.point, 0.0)
            for c in p.candidates}


def rank(p: Tuned, pool: Sequence[Tuned], v: Variant) -> list[str]:
    """p's candidate names, the fastest predicted first (ties in the prior's order)."""
    predicted = predict(p, pool, v)
    head = p.candidates[:v.top_k] if v.top_k else p.candidates
    order = sorted(head, key=lambda c: predicted[c.name])  # stable
    return [c.name for c in order] + [c.name for c in p.candidates[len(head):]]


@dataclass
class Regrets:
    """Per-problem regrets of the pick and of the best of the first K ranked."""

    pick: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    top: dict[int, list[float]] = dataclasses.field(default_factory=lambda: {k: [] for k in BUDGETS})
    missing: int = 0  # picks that did not verify on their problem

    def add(self, p: Tuned, ranked: list[str]) -> None:
        if ranked[0] in p.times:
            self.pick.append((p.times[ranked[0]] / p.winner_us, p.key))
        else:
            self.missing += 1
        best = min(p.times.values())
        measured = [name for name in ranked if name in p.measured]  # as budget_regret.py
        for k in BUDGETS:
            found = best_of_first(measured, p.times, k)
            if found is not None:
                self.top[k].append(found / best)

    def line(self) -> str:
        tops = "; ".join(f"top-{k} {summary(self.top[k]).split(', ', 1)[1]}" for k in BUDGETS)
        missed = f"; {self.missing} picks unverified" if self.missing else ""
        return f"pick {summary([r for r, _ in self.pick])}; {tops}{missed}"

    def objective(self) -> tuple[float, float]:
        """What the grid minimizes: the pick's geomean (to 0.1 %), then its worst."""
        values = [r for r, _ in self.pick]
        return round(geomean(values), 3), max(values)


def leave_out(train: Sequence[Tuned], v: Variant) -> Regrets:
    """Each training problem ranked from the others, less every problem of the same sizes."""
    out = Regrets()
    for p in train:
        out.add(p, rank(p, [q for q in train if q.shape != p.shape], v))
    return out


def served(test: Sequence[Tuned], train: Sequence[Tuned], v: Variant) -> Regrets:
    """Each held-out problem ranked from the whole training DB."""
    out = Regrets()
    for p in test:
        out.add(p, rank(p, train, v))
    return out


# --- the variants and how they were chosen ------------------------------------------------------------
# Each method's hyper-parameters: the best leave-out figure on the training DB over its grid (--grid reruns
# the search; the family+point grid starts from the point and family kernels the first two chose).
NEAR = Kernel(h=2.0, reach=5.0, cell_penalty=(INF, 1.0, 2.0))  # same layout and class, dtype/rank cost 1/2
BROAD = Kernel(h=2.0, reach=INF, cell_penalty=(0.0, 0.0, 0.0), metric="gemm")  # same class, any cell
CHOSEN = (
    PRIOR,
    Variant("point", alpha=0.3, beta=0.5, point=NEAR, lam=0.03, top_k=16),
    Variant("family", alpha=0.3, beta=0.5, point=None, family=BROAD, family_lam=0.1),
    Variant("family+point", alpha=0.3, beta=0.5, point=NEAR, lam=0.03, family=BROAD, family_lam=0.1, top_k=16),
)


def point_grid() -> list[Variant]:
    cells = ((INF, 1.0, 2.0), (INF, 3.0, 3.0), (2.0, 1.0, 2.0))  # the last: other layouts count too
    return [Variant("point", beta=b, point=Kernel(h=h, reach=r, cell_penalty=c), lam=lam, top_k=k)
            for b, lam, h, r, c, k in itertools.product((0.5, 1.0), (0.03, 0.3), (1.0, 2.0), (3.0, 5.0, 7.0), cells,
                                                         (None, 16))]


def family_grid() -> list[Variant]:
    return [Variant("family", beta=b, point=None, family=Kernel(h=h, reach=INF, cell_penalty=c, metric=m), family_lam=lam)
            for b, h, lam, m, c in itertools.product((0.5, 1.0), (1.0, 2.0, 4.0), (0.1, 1.0), ("sizes", "gemm"),
                                                      ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)))]


def both_grid(point: Variant, family: Variant) -> list[Variant]:
    return [Variant("family+point", beta=b, point=point.point, lam=lam, family=family.family, family_lam=flam, top_k=k)
            for b, lam, flam, k in itertools.product((0.5, 1.0), (0.03, 0.3), (0.1, 1.0), (None, 16))]


def choose(train: Sequence[Tuned], grid: Sequence[Variant]) -> tuple[Variant, Regrets]:
    """The grid's variant with the best leave-out figure (the first of equals: grids list simpler first)."""
    scored = [(leave_out(train, v), v) for v in grid]
    best = min(range(len(scored)), key=lambda i: (scored[i][0].objective(), i))
    return scored[best][1], scored[best][0]


def search(train: Sequence[Tuned]) -> list[Variant]:
    """Rerun the hyper-parameter search on the training DB (leave-out only), printing each choice."""
    point, r = choose(train, point_grid())
    print(f"grid point ({len(point_grid())} variants): {point}\n    train leave-out: {r.line()}")
    family, r = choose(train, family_grid())
    print(f"grid family ({len(family_grid())} variants): {family}\n    train leave-out: {r.line()}")
    both, r = choose(train, both_grid(point, family))
    print(f"grid family+point ({len(both_grid(point, family))} variants): {both}\n    train leave-out: {r.line()}")
    return [PRIOR, point, family, both]


def rows(name: str, baseline: Regrets, result: Regrets) -> None:
    """Per-problem pick regret, the prior's next to the variant's."""
    for (was, key), (now, _) in zip(baseline.pick, result.pick):
        print(f"{name}: {was:5.2f} -> {now:5.2f}  {key.split(':', 1)[1]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, metavar="DB", help="the fully tuned DB the ranking learns from")
    parser.add_argument("--test", metavar="DB", help="a held-out fully tuned DB, served from --train")
    parser.add_argument("--grid", action="store_true", help="rerun the hyper-parameter search (leave-out on --train)")
    parser.add_argument("--rows", choices=("train", "test", "none"), default="none",
                        help="print the last variant's per-problem pick regrets (default: none)")
    parser.add_argument("--op", choices=CONV_OPS, default=CONV_OPS[0],
                        help="the op whose problems are ranked (its features are a convolution's)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    train = load(args.train, args.op)
    test = load(args.test, args.op) if args.test else []
    if not train:
        fail(f"{args.train}: no tuned {args.op} problem (choose the op with --op)")
    variants = search(train) if args.grid else list(CHOSEN)
    results = [(v, leave_out(train, v), served(test, train, v) if test else None) for v in variants]
    for v, loo, _ in results:
        print(f"train leave-out: {v.name:13s} {loo.line()}")
    for v, _, held in results:
        if held is not None:
            print(f"test: {v.name:13s} {held.line()}")
    if args.rows != "none":
        (_, loo0, held0), (_, loo, held) = results[0], results[-1]
        rows(args.rows, loo0, loo) if args.rows == "train" else rows(args.rows, held0, held)
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
