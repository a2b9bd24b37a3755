"""`dwh`: depthwise 2-D with the filter shape, stride and dilation compiled in; a thread walks a strip of
output rows, keeping the output-gradient rows an input row meets in registers and shifting them one row a
step, so an input row is loaded once per strip instead of once per block of rows as in `dwr`.

Its tuning points are `dwr`'s with `rows` the strip's length (the strip's registers do not grow with it,
so strips are long, 4-16 rows, where dwr's blocks hold 1-4), plus the element stride between adjacent
columns compiled in (`w_stride`; G in NHWGC, 1 in the W-contiguous layouts; 0: read from the arguments):
a row's loads then sit at constant offsets from one address.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ...device import DeviceTarget
from ...problem import ConvProblem, Layout
from ..base import params_from_suffix
from ..conv import layouts as cl
from .common import UP_TO_2D, Reduction
from .dwr import SUFFIX_RE as DWR_SUFFIX_RE
from .dwr import Dwr, DwrParams

TWO_D = frozenset(cell for cell in UP_TO_2D if cell[2] == 2)


@dataclass(frozen=True)
class DwhParams(DwrParams):
    """dwr's fields (rows: the strip's length), the column stride compiled in (0: from the arguments), and
    how a thread keeps the next steps' loads in flight (`ahead`): 0, the next step's behind a branch (the
    compiler may sink them below the step's FMAs); 1 or 2, the next one or two steps' as predicated loads
    issued before the FMAs (twice the load registers at 2). Names spell it only when it is not 0."""

    w_stride: int = 0
    ahead: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.w_stride < 0:
            raise ValueError("w_stride is an element stride (0: read at run time)")
        if self.ahead not in (0, 1, 2):
            raise ValueError("ahead is 0 (the next step's loads behind a branch), 1 or 2 steps")

    def suffix(self) -> str:
        ahead = f"_a{self.ahead}" if self.ahead else ""
        return f"{super().suffix()}_w{self.w_stride}{ahead}"

    def template_values(self) -> dict[str, Any]:
        return super().template_values() | {"w_stride": self.w_stride, "ahead": self.ahead}


_SUFFIX_RE = re.compile(DWR_SUFFIX_RE.pattern + r"_w(?P<w_stride>\d+)(?:_a(?P<ahead>\d+))?")


def column_stride(problem: ConvProblem) -> int | None:
    """The element stride between adjacent columns, when input and output gradient share it."""
    act_in = cl.strides_3d(cl.activation(problem, "C"), "NGCDHW")[-1]
    act_out = cl.strides_3d(cl.activation(problem, "K"), "NGKDHW")[-1]
    return act_in if act_in == act_out else None


class Dwh(Dwr):
    name = "dwh"
    template = "conv_bwd_weight/dwh.hip.j2"
    params_type = DwhParams
    description = "depthwise 2-D, filter compiled in; a thread walks a strip of output rows, the gradient window in registers"

    def supported_cells(self) -> frozenset:
        return TWO_D

    def cell_allows(self, params: DwhParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return ndim == 2 and params.filter_h > 1 and super().cell_allows(params, layout, dtype, ndim)

    def problem_values(self, problem: ConvProblem) -> Mapping[str, Any] | None:
        """dwr's values and the column stride for a 2-D problem; None for any other rank (1-D strips are
        dwr's own rows)."""
        values = super().problem_values(problem) if problem.ndim == 2 else None
        stride = column_stride(problem) if values is not None else None
        return None if stride is None else {**values, "w_stride": stride}

    def parse_suffix(self, suffix: str) -> DwhParams | None:
        return params_from_suffix(_SUFFIX_RE, DwhParams, suffix,
                                  {"reduction": Reduction})

    def why_not_here(self, p: DwhParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.ndim != 2:
            return "2-D only"
        if p.w_stride and column_stride(problem) != p.w_stride:
            return f"compiled for a column stride of {p.w_stride} elements, problem has {column_stride(problem)}"
        return super().why_not_here(p, problem, target)

    def heuristic_score(self, p: DwhParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """dwr's score (fill, busy threads, input loaded per output kept) with what the strips change, fitted
        on the H100 (every candidate of 26 depthwise problems timed: MobileNetV2's and ConvNeXt-T's layers
        at batch 64 in NHWGC, the suite's mnv1_dw3 and mnv3_dw5_s2 in every layout; bench/NOTES.md 29):
        - no preference for about 8 outputs a thread (block_size_cost);
        - one group a thread over two or more: the wider vectors multiply the accumulators and the gradient
          window, and v1 was the fastest dwh point on 9 of the 10 NHWGC problems dwh won (v2 on the fp32 one);
        - longer strips: less of a strip is drain steps and per-item setup; the winners walked 8-16 rows;
        - 0.3 above dwr: dwh was the faster family on 17 of the 26 (dwr 1.02-1.89x its time), dwr on 7
          (dwh 1.10-1.22x dwr's time; NHWGC planes of 28x28 and less), dw on 2 (7x7 planes).
        Plus `ahead_score`."""
        strips = 0.2 * math.log2(p.rows) - 0.6 * math.log2(p.vector) + 0.3
        return super().heuristic_score(p, problem, target) + strips + ahead_score(p)

    def block_size_cost(self, p: DwhParams) -> float:
        """None: dwr's preference for about 8 outputs a thread is about its registers, and a strip's hold
        one output row whatever its length."""
        return 0.0


def ahead_score(p: DwhParams) -> float:
    """Predicated loads one step ahead, in an uncapped block, for filters of up to 9 taps: a little above
    their branch twin; every other `ahead` point well below it, left to tuning.

    Measured on the H100 (the 28 depthwise layers of MobileNetV2 and ConvNeXt-T at batch 64, bf16, NHWGC
    and NGCHW, every candidate timed; bench/NOTES.md 43): ahead 1 with at most 9 taps ran 1.04x (NHWGC, 38
    pairs, 0.92-1.19x) and 1.05x (NGCHW, 91 pairs, 0.84-1.62x) faster than the same point at ahead 0; with
    7x7 filters 0.89-0.93x. Ahead 2 and the register cap of two blocks an SM (`min_blocks` 2) won the
    large channels-last 3x3 layers by up to 1.12x, and lost up to 20x where the cap made a strip spill."""
    if not p.ahead:
        return 0.0
    if p.ahead == 1 and p.min_blocks == 1 and p.filter_h * p.filter_w <= 9:
        return 0.02
    return -0.5
