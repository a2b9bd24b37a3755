"""`group`: a block owns whole groups' rows (every sample of a group, or one (n, g)), sums them, derives
the coefficients and writes dx re-reading its rows mostly from cache, or, with `hold`, from the copy the
sums pass left in shared memory; no memset, deterministic. NGCHW only (a group's rows are contiguous
there), and only groups small enough for one block.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import Layout
from ..base import I32, Launch, LaunchPlan
from . import cost
from .common import CELLS, GroupNormFamily, gn_args
from .problem import GroupNormProblem

FINISH_THREADS = 256  # per-sample span: threads per block of the dgamma/dbeta launch
GROUP_ROW_CAP = 1024  # (n, c) rows of one group whose sums a block keeps in shared memory
# With `hold` the rows themselves take the shared memory: the sums' arrays shrink so that two blocks of a
# 100 KB unit (resnet_gn_256: 8 channels of 56x56, x and dy in fp16) fit an SM.
HOLD_ROW_CAP = 128
GROUP_ELEMENT_CAP = 1 << 18  # elements of one group (N*D*S) one block streams at most
GROUP_CELLS = frozenset(cell for cell in CELLS if cell[0] is Layout.NGCHW)  # a group's rows are contiguous
# The heuristic (cost.py): a block's fixed time between its sums and its dx (barriers, its rows' coefficients).
BLOCK_PHASES_US = 0.5


class Span(enum.Enum):
    """What one block of the `group` family owns."""

    PER_GROUP = "per_group"  # every sample of one group: dgamma/dbeta summed in the block
    PER_SAMPLE = "per_sample"  # one (n, g): dgamma/dbeta finished by a second launch


@dataclass(frozen=True)
class GroupParams:
    """Blocks of `threads` owning `span`, each warp streaming row segments (`group_segments`) with
    `unroll` loads of `vector` elements per tensor in flight per lane."""

    threads: int
    vector: int
    unroll: int
    span: Span = Span.PER_GROUP
    hold: bool = False  # the sums pass keeps the block's x and dy rows in shared memory for the dx pass

    def __post_init__(self) -> None:
        if self.threads % 32 or not 64 <= self.threads <= 1024:
            raise ValueError("threads must be a multiple of 32 in 64..1024")
        if self.vector not in (1, 2, 4, 8):
            raise ValueError("vector must be 1, 2, 4 or 8")
        if self.unroll < 1:
            raise ValueError("unroll must be >= 1")

    @property
    def row_cap(self) -> int:
        """(n, c) rows whose sums one block keeps (kf_group's ROW_CAP)."""
        return HOLD_ROW_CAP if self.hold else GROUP_ROW_CAP

    @property
    def static_shared_bytes(self) -> int:
        """kf_group's part, sums and coef arrays: a float pair per row each."""
        return 3 * self.row_cap * 8

    def suffix(self) -> str:
        return f"t{self.threads}_v{self.vector}_u{self.unroll}_{self.span.value}" + ("_hold" if self.hold else "")

    def template_values(self) -> dict[str, Any]:
        return {"threads": self.threads, "vector": self.vector, "unroll": self.unroll, "reduce_mode": 0,
                "row_cap": self.row_cap, "per_sample": int(self.span is Span.PER_SAMPLE),
                "finish_threads": FINISH_THREADS, "hold": self.hold}


def rows_per_block(params: GroupParams, problem: GroupNormProblem) -> int:
    """The (n, c) rows one block owns: a group's channels, of one sample or of all."""
    return problem.per_group * (1 if params.span is Span.PER_SAMPLE else problem.N)


def held_bytes(params: GroupParams, problem: GroupNormProblem) -> int:
    """Dynamic shared memory of a `hold` block: its rows of x and of dy."""
    return 2 * rows_per_block(params, problem) * problem.spatial * problem.dtype.tensor.nbytes if params.hold else 0


def group_segments(params: GroupParams, problem: GroupNormProblem) -> tuple[int, int]:
    """(segments per row, elements per segment): a block with fewer rows than warps cuts each row into
    segments so that every warp streams; segments are whole multiples of a warp's 32 vector loads."""
    rows = problem.per_group * (1 if params.span is Span.PER_SAMPLE else problem.N)
    S, step = problem.spatial, 32 * params.vector
    wanted = max(1, (params.threads // 32) // rows)
    seg_len = step * math.ceil(math.ceil(S / wanted) / step)
    return math.ceil(S / seg_len), seg_len


class Group(GroupNormFamily):
    name = "group"
    template = "groupnorm_bwd/group.hip.j2"
    params_type = GroupParams
    description = "a block per group or per (n, g): sums, then dx from cache; no memset (NGCHW, small groups)"

    def supported_cells(self) -> frozenset:
        return GROUP_CELLS

    def why_not_here(self, params: GroupParams, problem: GroupNormProblem, target: DeviceTarget) -> str | None:
        per_sample = params.span is Span.PER_SAMPLE
        rows = rows_per_block(params, problem)
        owner = "(n, g)" if per_sample else "group"
        if rows > params.row_cap:
            return f"{rows} (n, c) rows per {owner}; one block keeps the sums of at most {params.row_cap}"
        if rows * problem.spatial > GROUP_ELEMENT_CAP:
            return (f"{rows * problem.spatial} elements per {owner}; one block streams at most "
                    f"{GROUP_ELEMENT_CAP} (the fused family splits big groups across the GPU)")
        held = held_bytes(params, problem)
        if held + params.static_shared_bytes > target.shared_optin:
            article = "an" if per_sample else "a"
            return (f"holding {article} {owner}'s x and dy takes {held} bytes of shared memory, over the "
                    f"{target.shared_optin - params.static_shared_bytes} a block has beside its sums")
        return None

    def launch_plan(self, params: GroupParams, problem: GroupNormProblem, target: DeviceTarget) -> LaunchPlan:
        """G blocks (per group) or N*G blocks and a finishing launch over the channels (per sample)."""
        N, C, G = problem.N, problem.C, problem.G
        segs, seg_len = group_segments(params, problem)
        common = gn_args(problem)
        args = (common, I32(segs), I32(seg_len))
        held = held_bytes(params, problem)
        if params.span is Span.PER_GROUP:
            return LaunchPlan((Launch("kf_group", (G, 1, 1), (params.threads, 1, 1), args, shared_bytes=held),), 0)
        steps = [Launch("kf_group", (N * G, 1, 1), (params.threads, 1, 1), args, shared_bytes=held)]
        if problem.affine:
            steps.append(Launch("kf_group_finish", (math.ceil(C / FINISH_THREADS), 1, 1), (FINISH_THREADS, 1, 1),
                                (common,)))
        return LaunchPlan(tuple(steps), 4 * 2 * N * C if problem.affine else 0)

    def heuristic_score(self, params: GroupParams, problem: GroupNormProblem, target: DeviceTarget) -> float:
        return cost.score(self.estimate_us(params, problem, target))

    def estimate_us(self, params: GroupParams, problem: GroupNormProblem, target: DeviceTarget) -> float:
        """Microseconds: one launch (two for per_sample's dgamma/dbeta), then the waves of blocks, each warp
        walking its segments twice (sums, dx) a trip at a time, or the traffic, whichever binds. A `hold`
        block re-reads nothing (its dx pass reads shared memory), and its shared memory bounds residency.
        No term favours `hold` further: a bonus of 3-10 % on tensors of 8 MB and more moved the pick by at
        most 0.4 % on 61 H100 problems tuned in full (bench/NOTES.md §39).

        Register-limited residency decides the waves where blocks are many (H100 suite+seed21, fp32 N=64 C=256
        10x10, 2048 blocks: per_sample t256 u1 24 us, t512 u1 30, t512 u4 58); one block per group leaves SMs
        idle and wants every warp streaming (per_group, 15 problems: t1024 u4 1.02x the best, t256 u1 1.77x)."""
        per_sample = params.span is Span.PER_SAMPLE
        blocks = problem.N * problem.G if per_sample else problem.G
        rows = rows_per_block(params, problem)
        segs, seg_len = group_segments(params, problem)
        per_warp = math.ceil(rows * segs / (params.threads // 32))
        trips = math.ceil(math.ceil(seg_len / (32 * params.vector)) / params.unroll)
        resident = cost.resident_blocks(params.threads, group_registers(params), target,
                                        params.static_shared_bytes + held_bytes(params, problem))
        waves = cost.waves(blocks, resident, target)
        latency = waves * (2 * per_warp * trips * cost.LATENCY_US + BLOCK_PHASES_US)
        tensor = problem.numel * problem.dtype.tensor.nbytes
        # x, dy, dx once; the dx half re-reads a block's x and dy, from L2 while the resident blocks' fit
        working = min(blocks, target.processors * resident) * 2 * rows * problem.spatial * problem.dtype.tensor.nbytes
        missed = 0.0 if params.hold else 2 * tensor * max(0.0, 1 - cost.L2_BYTES / working)
        traffic = cost.memory_us(3 * tensor + missed, blocks, target)
        kernels = 2 if per_sample and problem.affine else 1
        return cost.launch_us(kernels) + cost.bound_us(latency, traffic)


def group_registers(params: GroupParams) -> int:
    """Registers per thread of kf_group as ptxas -v (NVRTC, sm_90) reports them: 32 at unroll 1, 32-64 at 2
    and 40-78 at 4 (the loads in flight): 48 and 64 here."""
    return 32 if params.unroll == 1 else min(64, 32 + 8 * params.unroll)
