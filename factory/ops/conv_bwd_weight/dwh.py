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
    """dwr's fields (rows: the strip's length) and the column stride compiled in (0: from the arguments)."""

    w_stride: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.w_stride < 0:
            raise ValueError("w_stride is an element stride (0: read at run time)")

    def suffix(self) -> str:
        return f"{super().suffix()}_w{self.w_stride}"

    def template_values(self) -> dict[str, Any]:
        return super().template_values() | {"w_stride": self.w_stride}


_SUFFIX_RE = re.compile(DWR_SUFFIX_RE.pattern + r"_w(?P<w_stride>\d+)")


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
        return params_from_suffix(_SUFFIX_RE, DwhParams, suffix, {"reduction": Reduction})

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
          (dwh 1.10-1.22x dwr's time; NHWGC planes of 28x28 and less), dw on 2 (7x7 planes)."""
        strips = 0.2 * math.log2(p.rows) - 0.6 * math.log2(p.vector) + 0.3
        return super().heuristic_score(p, problem, target) + strips

    def block_size_cost(self, p: DwhParams) -> float:
        """None: dwr's preference for about 8 outputs a thread is about its registers, and a strip's hold
        one output row whatever its length."""
        return 0.0
