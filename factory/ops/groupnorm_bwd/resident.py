"""`resident`: x and dy read from DRAM once, whatever the group size, by holding them on chip between the
sums and dx (templates/groupnorm_bwd/resident.hip.j2).

A persistent grid (blocks_per_sm blocks on every SM, launched cooperatively so all are resident) takes
the tensor in rounds of whole units: an (n, g) group in NGCHW; in NHWGC a sample (contiguous; a group's
channels are a strided slice of every pixel), or a sample's block of whole groups' channels where a sample
is more than a round holds. A round holds as many units as the
grid's shared memory takes; each block sums its share per (n, c) while copying it into shared memory,
the sums meet in the workspace, a grid barrier ends the round's sums, and dx is written from shared
memory. DRAM traffic is the floor's 3 transfers where `fused` moves 5; the cost is a barrier per round
and a grid that reads, then writes, in step. Sums meet through float atomics: not bit-reproducible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget, Vendor
from ...problem import DType, Layout
from ..base import I32, Launch, LaunchPlan, Memset
from . import cost
from .common import GroupNormFamily, gn_args
from .problem import GroupNormProblem

FINISH_THREADS = 256  # threads per block of kf_resident_finish (dgamma, dbeta)
ROWS_CAP = 2048  # (n, c) row sums a block keeps per round; also its (n, g) coefficients (in NHWGC first its
# threads' channel sums, THREADS * VEC pairs: the template asserts they fit)
PAIR_BYTES = 8  # a float pair in shared memory
SECTOR_BYTES = 32  # NHWGC units narrower than all C: their pixel rows stay whole DRAM sectors
# NHWGC: a thread keeps its VEC channels' sums, means and dx coefficients in registers; at 64 registers a
# thread wider vectors spill (H100, seed-31 and suite problems: vector 4 1.2-1.6x, 8 2.2-3.4x the best).
NHWGC_MAX_VECTOR = 2
# The heuristic, fitted on the best resident instance of the H100 suite + 60 random problems of seed 31
# (bench/NOTES.md 30, the runs before the sums lost their shared-memory atomics): a round costs about 15 us beyond streaming its bytes (the grid barrier, the
# blocks reading, summing, then writing in step); narrow vectors cost more (geomean of each point's time
# over the problem's best resident time, by layout).
ROUND_US = 15.0
VECTOR_COST = {Layout.NGCHW: {1: 1.27, 2: 1.17, 4: 1.1, 8: 1.04}, Layout.NHWGC: {1: 1.1, 2: 1.04}}


@dataclass(frozen=True)
class ResidentParams:
    """Blocks of `threads`, `blocks_per_sm` resident per SM, copying vectors of `vector` elements."""

    threads: int
    vector: int
    blocks_per_sm: int = 1

    def __post_init__(self) -> None:
        if self.threads % 32 or not 64 <= self.threads <= 1024:
            raise ValueError("threads must be a multiple of 32 in 64..1024")
        if self.vector not in (1, 2, 4, 8):
            raise ValueError("vector must be 1, 2, 4 or 8")
        if self.blocks_per_sm not in (1, 2):
            raise ValueError("blocks_per_sm must be 1 or 2")
        if self.threads * self.blocks_per_sm > 1024:
            raise ValueError("threads * blocks_per_sm must be <= 1024 (64 registers a thread)")

    def suffix(self) -> str:
        return f"t{self.threads}_v{self.vector}_b{self.blocks_per_sm}"

    def template_values(self) -> dict[str, Any]:
        return {"threads": self.threads, "vector": self.vector, "unroll": 1, "reduce_mode": 0,
                "rows_cap": ROWS_CAP, "blocks_per_sm": self.blocks_per_sm, "finish_threads": FINISH_THREADS}


@dataclass(frozen=True)
class Rounds:
    """How the grid walks a problem: `blocks` blocks of `cap` vectors of x (and of dy) each, `round_units`
    units of `unit_vecs` vectors a round; a block's share is a multiple of `gran` vectors."""

    blocks: int
    cap: int
    unit_vecs: int
    units: int
    round_units: int
    gran: int
    shared_bytes: int

    @property
    def count(self) -> int:
        return math.ceil(self.units / self.round_units) if self.round_units else 0

    @property
    def share(self) -> int:
        """The most vectors one block takes in a round."""
        return self.gran * math.ceil(math.ceil(self.round_units * self.unit_vecs / self.blocks) / self.gran)


def block_shared_bytes(params: ResidentParams, target: DeviceTarget) -> int:
    """Dynamic shared memory of one block: its SM's share, less what each resident block costs the system."""
    per_sm = target.shared_per_processor or target.shared_optin
    return min(target.shared_optin, per_sm // params.blocks_per_sm - target.shared_reserved)


def rounds(params: ResidentParams, problem: GroupNormProblem, target: DeviceTarget) -> Rounds:
    """The grid, each block's capacity, and the units a round takes (0 when no unit fits)."""
    vec_bytes = params.vector * problem.dtype.tensor.nbytes
    shared = block_shared_bytes(params, target)
    cap = max(0, (shared - 2 * ROWS_CAP * PAIR_BYTES) // (2 * vec_bytes))
    blocks = target.processors * params.blocks_per_sm
    plan = None
    for unit_vecs, units, gran in _unit_shapes(params, problem):
        round_units = min(units, blocks * (cap // gran * gran) // unit_vecs)
        plan = Rounds(blocks, cap, unit_vecs, units, round_units, gran, 2 * cap * vec_bytes + 2 * ROWS_CAP * PAIR_BYTES)
        if round_units >= 1:
            break
    assert plan is not None
    return plan


def _unit_shapes(params: ResidentParams, problem: GroupNormProblem) -> list[tuple[int, int, int]]:
    """(vectors a unit, units, vectors a share is a multiple of), the preferred first. NGCHW: an (n, g)
    group. NHWGC: a sample's block of channels, all C first, then fewer whole groups (a divisor of G)
    down to the narrowest whose pixel rows are still a 32-byte sector, for samples a round cannot hold
    or pixels wider than a block's threads."""
    S, v = problem.spatial, params.vector
    if problem.layout is not Layout.NHWGC:
        return [(problem.per_group * S // v, problem.N * problem.G, 32)]
    shapes = []
    for groups in sorted((d for d in range(1, problem.G + 1) if problem.G % d == 0), reverse=True):
        channels = groups * problem.per_group
        narrow = groups < problem.G and channels * problem.dtype.tensor.nbytes < SECTOR_BYTES
        if channels % v or narrow or channels // v > params.threads:
            continue
        shapes.append((S * channels // v, problem.N * (problem.G // groups), channels // v))
    return shapes or [(S * problem.C // v, problem.N, problem.C // v)]


def rows_per_block(params: ResidentParams, problem: GroupNormProblem, plan: Rounds) -> tuple[int, int]:
    """(the most (n, c) rows of whole groups, the most (n, g) groups) one block's share of a round touches."""
    if problem.layout is Layout.NHWGC:
        units = math.ceil(plan.share // plan.gran / problem.spatial) + 1
        channels = plan.gran * params.vector
        return units * channels, units * channels // problem.per_group
    rows = math.ceil(plan.share * params.vector / problem.spatial) + 1
    return rows + 2 * problem.per_group, rows  # the rows of the share's whole groups


class Resident(GroupNormFamily):
    name = "resident"
    template = "groupnorm_bwd/resident.hip.j2"
    params_type = ResidentParams
    description = ("a persistent grid holding each round's x and dy in shared memory: 3 transfers, "
                   "a grid barrier a round (NVIDIA, cooperative launch)")

    def cell_allows(self, params: ResidentParams, layout: Layout, dtype: DType, ndim: int) -> bool:
        wide = layout is Layout.NHWGC and params.vector > NHWGC_MAX_VECTOR
        return super().cell_allows(params, layout, dtype, ndim) and not wide

    def why_not_on(self, params: ResidentParams, target: DeviceTarget) -> str | None:
        if target.vendor is not Vendor.NVIDIA:
            return f"needs a cooperative launch, which the {target.vendor.value} backend does not issue"
        return super().why_not_on(params, target)

    def why_not_here(self, params: ResidentParams, problem: GroupNormProblem, target: DeviceTarget) -> str | None:
        plan = rounds(params, problem, target)
        unit = "sample's block of channels" if problem.layout is Layout.NHWGC else "(n, g) group"
        if problem.layout is Layout.NHWGC and plan.gran > params.threads:
            return (f"{plan.gran} channel vectors a pixel of a unit; a block of {params.threads} threads "
                    "loads whole pixels")
        if plan.round_units < 1:
            vec_bytes = params.vector * problem.dtype.tensor.nbytes
            return (f"one {unit}'s x and dy ({2 * plan.unit_vecs * vec_bytes // 1024} KiB) exceed the grid's "
                    f"shared memory ({2 * plan.blocks * plan.cap * vec_bytes // 1024} KiB)")
        rows, groups = rows_per_block(params, problem, plan)
        if max(rows, groups) > ROWS_CAP:
            return f"a block's share spans {rows} (n, c) rows; it keeps the sums of at most {ROWS_CAP}"
        return None

    def launch_plan(self, params: ResidentParams, problem: GroupNormProblem, target: DeviceTarget) -> LaunchPlan:
        """Zero the per-(n, c) sums and the barrier counter, the cooperative grid, then dgamma/dbeta."""
        plan = rounds(params, problem, target)
        common = gn_args(problem)
        args = (common, I32(plan.unit_vecs), I32(plan.units), I32(plan.round_units), I32(plan.gran), I32(plan.cap))
        workspace = 4 * (2 * problem.N * problem.C + 1)
        steps: list = [Memset("workspace", workspace),
                       Launch("kf_resident", (plan.blocks, 1, 1), (params.threads, 1, 1), args,
                              shared_bytes=plan.shared_bytes, cooperative=True)]
        if problem.affine:
            steps.append(Launch("kf_resident_finish", (math.ceil(problem.C / FINISH_THREADS), 1, 1),
                                (FINISH_THREADS, 1, 1), (common,)))
        return LaunchPlan(tuple(steps), workspace)

    def heuristic_score(self, params: ResidentParams, problem: GroupNormProblem, target: DeviceTarget) -> float:
        return cost.score(self.estimate_us(params, problem, target))

    def estimate_us(self, params: ResidentParams, problem: GroupNormProblem, target: DeviceTarget) -> float:
        """Microseconds: the launches and memset, the floor's 3 transfers, and each round's fixed cost."""
        plan = rounds(params, problem, target)
        tensor = problem.numel * problem.dtype.tensor.nbytes
        kernels = 2 if problem.affine else 1
        streaming = plan.count * ROUND_US + cost.memory_us(3 * tensor, plan.blocks, target)
        return cost.launch_us(kernels, 1) + streaming * VECTOR_COST[problem.layout][params.vector]
