"""`dwr`: depthwise 1-D/2-D with the filter shape, stride and dilation compiled in; a thread's block of
rows x segment outputs and the input window it reads live in registers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ...device import DeviceTarget
from ...problem import ConvProblem, Layout
from ..base import params_from_suffix
from .common import GRID_Y_LIMIT, UP_TO_2D, Reduction, check_lane_block, lanes_only_channels_last
from .dw import Dw


@dataclass(frozen=True)
class DwrParams:
    """Depthwise with register blocking: the filter shape, stride and dilation are compiled in."""

    threads_lane: int
    threads_pos: int
    vector: int
    segment: int  # output columns per thread
    rows: int  # output rows per thread (1 for 1-D)
    filter_h: int
    filter_w: int
    stride: int  # along H and W (1-D: W)
    dilation: int
    split_k: int  # blocks along (n, row block, segment) work items
    reduction: Reduction
    min_blocks: int = 1

    def __post_init__(self) -> None:
        check_lane_block(self.threads_lane, self.threads_pos, self.vector, self.split_k, self.reduction)
        if self.filter_h == 1 and self.rows != 1:
            raise ValueError("1-D points (filter_h = 1) take rows = 1")

    @property
    def threads(self) -> int:
        return self.threads_lane * self.threads_pos

    def work_items(self, problem: ConvProblem) -> int:
        rows = math.ceil(problem.output[-2] / self.rows) if problem.ndim == 2 else 1
        return problem.N * rows * math.ceil(problem.output[-1] / self.segment)

    def suffix(self) -> str:
        return (
            f"l{self.threads_lane}x{self.threads_pos}_v{self.vector}_b{self.rows}x{self.segment}"
            f"_k{self.filter_h}x{self.filter_w}s{self.stride}d{self.dilation}_o{self.min_blocks}"
            f"_sk{self.split_k}_{self.reduction.value}"
        )

    def template_values(self) -> dict[str, Any]:
        two_d = self.filter_h > 1
        return {
            "threads_lane": self.threads_lane,
            "threads_pos": self.threads_pos,
            "vector": self.vector,
            "segment": self.segment,
            "rows": self.rows,
            "filter_h": self.filter_h,
            "filter_w": self.filter_w,
            "stride": self.stride,
            "stride_h": self.stride if two_d else 1,
            "dilation": self.dilation,
            "dilation_h": self.dilation if two_d else 1,
            "min_blocks": self.min_blocks,
            "reduce_mode": self.reduction.mode,
        }


SUFFIX_RE = re.compile(
    r"l(?P<threads_lane>\d+)x(?P<threads_pos>\d+)_v(?P<vector>\d+)_b(?P<rows>\d+)x(?P<segment>\d+)"
    r"_k(?P<filter_h>\d+)x(?P<filter_w>\d+)s(?P<stride>\d+)d(?P<dilation>\d+)_o(?P<min_blocks>\d+)"
    r"_sk(?P<split_k>\d+)_(?P<reduction>[a-z]+)"
)


class Dwr(Dw):
    name = "dwr"
    template = "conv_bwd_weight/dwr.hip.j2"
    params_type = DwrParams
    description = "depthwise 1-D/2-D with the filter, stride and dilation compiled in; outputs in registers"
    # Above dwt by more than its vector and fill terms can make up: dwr was 1.9-6.6x faster than dwt on
    # all 18 suite+seed21 problems both computed (dwt's wider vectors had made it the pick on NHWGC 5x5, 2.4-2.9x).
    base_score = 5.0

    def supported_cells(self) -> frozenset:
        return UP_TO_2D

    def cell_allows(self, params: DwrParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        if not lanes_only_channels_last(params, layout):
            return False
        return ndim == 2 and params.filter_h > 1 or ndim == 1 and params.filter_h == 1

    def problem_values(self, problem: ConvProblem) -> Mapping[str, Any] | None:
        """The filter (1-D: filter_h = 1), stride and dilation a kernel compiles in; None when stride or
        dilation differ between axes (one value serves every axis) or the problem is not 1-D/2-D."""
        if problem.ndim not in (1, 2) or len(set(problem.stride)) != 1 or len(set(problem.dilation)) != 1:
            return None
        filter_h, filter_w = (1, problem.filter[0]) if problem.ndim == 1 else problem.filter
        return {"filter_h": filter_h, "filter_w": filter_w, "stride": problem.stride[0],
                "dilation": problem.dilation[0]}

    def parse_suffix(self, suffix: str) -> DwrParams | None:
        return params_from_suffix(SUFFIX_RE, DwrParams, suffix, {"reduction": Reduction})

    def why_not_here(self, p: DwrParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.C != 1 or problem.K != 1:
            return f"depthwise only (C=K=1), problem has C={problem.C}, K={problem.K}"
        if problem.ndim == 3:
            return "1-D and 2-D only"
        filt = (p.filter_h, p.filter_w)[-problem.ndim :]
        if tuple(problem.filter) != filt:
            return f"compiled for filter {'x'.join(map(str, filt))}, problem has {'x'.join(map(str, problem.filter))}"
        if set(problem.stride) != {p.stride} or set(problem.dilation) != {p.dilation}:
            return (f"compiled for stride {p.stride} / dilation {p.dilation} on every axis, problem has "
                    f"{'x'.join(map(str, problem.stride))} / {'x'.join(map(str, problem.dilation))}")
        if problem.G % p.vector:
            return f"vector width {p.vector} needs G divisible by it (G={problem.G})"
        items = math.ceil(p.work_items(problem) / p.threads_pos)
        if p.split_k > 1 and p.split_k > items:
            return f"split {p.split_k} exceeds the {items} blocks of work items"
        if p.split_k > GRID_Y_LIMIT:
            return "split exceeds the grid"
        return None

    def heuristic_score(self, p: DwrParams, problem: ConvProblem, target: DeviceTarget) -> float:
        score = super().heuristic_score(p, problem, target)
        # Dw's fill counts blocks; threads along positions past the work items idle. NGCHW G=640 N=8 with
        # 3x18 outputs has 216 items of 1x2 outputs but 24 of 4x8 for 256 threads: 1x2 ran 3.8x faster
        # than 4x8 (NHWGC G=197 N=32 4x4 outputs: 3.9x).
        busy = min(1.0, p.work_items(problem) / (p.threads_pos * p.split_k))
        # Elements a thread loads per output it keeps (input window and output gradient; a block past the
        # output's edge keeps less): 1.22x the time per doubling at equal busy (564 same-params pairs of block
        # shapes in suite+seed21; the block with more was the slower in 69 % of 578 pairs). Counted from the
        # fewest an endless block would load, so the family's level against dwt and dw stays.
        halo = math.log2(loads_per_output(p, problem) / least_loads_per_output(p))
        # A register cap that fits 3 blocks an SM (min_blocks 3): 0.78x the time of min_blocks 1, geomean of
        # 40 same-params pairs in suite+seed21 (0.48x on NHWGC 5x5 filters).
        occupancy = 0.2 if p.min_blocks > 1 else 0.0
        return (score + 0.5 * math.log2(busy) - self.block_size_cost(p) - 0.3 * halo + occupancy
                - self.publish_cost(p, problem))

    def publish_cost(self, p: DwrParams, problem: ConvProblem) -> float:
        """Lanes side by side (threads_lane > 1) publish each tap through shared memory with two barriers
        (dw_reduce.h), so a block pays per tap whatever its threads computed. With many taps and few
        outputs a thread, that dominates: an 11x11 NHWGC layer (N=2, 69x69) whose l32x8 2x2-block
        split-256 point sums 4.8 outputs a thread ran 7.7x the best (an l1x256 dwh point); over the
        suite, seeds 21-71, l32 points with 49 taps or more ran 2.1 doublings over their problem's best dwr
        below 8 outputs a thread, 1.4 below 32, 0.55 above (taps under 49: 0.4-0.6 whatever the outputs).
        A doubling a doubling of taps past two per output a thread: past four at half that, a 51-tap 1-D
        layer (seed 99) at 13.5 outputs a thread paid nothing and ran 3.5x the best (bench/NOTES.md 56)."""
        if p.threads_lane == 1:
            return 0.0
        outputs = p.work_items(problem) / (p.threads_pos * p.split_k) * p.rows * p.segment
        return max(0.0, math.log2(p.filter_h * p.filter_w / (2.0 * outputs)))

    def block_size_cost(self, p: DwrParams) -> float:
        """About 8 outputs a thread: fewer re-read more input halo per output, more cost registers. The
        best 8-output block was the fastest on 15 of the 22 suite+seed21 problems; the best 2-output block
        was 1.06-5.1x slower on 20 of them, the best 32-output block 1.1-4.7x slower on 17. With the halo
        counted, what is left of that preference is 0.09 of log2 time per doubling away from 8 (least
        squares over the 670 same-params pairs of block shapes in suite+seed21, with busy and the halo)."""
        return 0.1 * abs(math.log2(p.rows * p.segment / 8))


def loads_per_output(p: DwrParams, problem: ConvProblem) -> float:
    """Input-window and output-gradient elements a thread loads per work item, over the outputs of the
    item that lie inside the output (rows and columns past its edge are loaded as zeros and kept nowhere)."""
    two_d = p.filter_h > 1
    in_rows = (p.rows - 1) * (p.stride if two_d else 1) + (p.filter_h - 1) * (p.dilation if two_d else 1) + 1
    in_cols = (p.segment - 1) * p.stride + (p.filter_w - 1) * p.dilation + 1
    wo = problem.output[-1]
    ho = problem.output[-2] if problem.ndim == 2 else 1
    kept = ho * wo / (math.ceil(ho / p.rows) * math.ceil(wo / p.segment))
    return (in_rows * in_cols + p.rows * p.segment) / kept


def least_loads_per_output(p: DwrParams) -> float:
    """loads_per_output of an endless block: one output-gradient element and the stride's input elements."""
    return (p.stride * p.stride if p.filter_h > 1 else p.stride) + 1
