"""`direct`: backward-data as a gather, a thread per grad_input element; memory bound, every cell.

dIn[n, g, c, i] = sum over k and the taps f that reach i (o = (i + pad - f * dilation) / stride whole
and inside the output) of dOut[n, g, k, o] * W[g, k, c, f]. Threads run over grad_input in its memory
order, so the writes and the neighbouring reads coalesce; each thread keeps `vector` consecutive
channels (of one group, or of consecutive groups when C = K = 1 in NHWGC) for independent sums. The
fallback for small groups, and for depthwise tiles past `dwr`'s register budget: with C = K = 1 every
element of dOut is read once per tap, mostly from cache.

`shape` is "any" (filter, stride and dilation read at run time) or, in a point that says "problem",
the problem's own ones compiled in (`k3x3s2x2d1x1`): the tap loops unroll and the stride's
divisibility tests become constants.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, Layout
from ..base import Launch, Struct
from ..conv import layouts as cl
from ..conv.shape import CompiledShape, Shape
from .common import BwdDataFamily, input_positions, reduction_rows, vector_score

ANY_SHAPE = "any"
BLOCKS_MAX = 2**31 - 1
MAX_CHANNEL_PRODUCT = 16  # C*K per group above which a GEMM family is the right tool
SHORT_SUM = 32  # products per grad_input element below which direct gains on a GEMM family (a stage's rows)
SMALL_GROUP_C = 16  # channels of a group up to which a channels-last vector past two channels loses (_vector_gain)
# Memory order of grad_input's axes, innermost first ("s" = the spatial axes, W fastest), per layout.
ORDERS = {Layout.NHWGC: "cgsn", Layout.NGCHW: "scgn", Layout.NGCHW_GKYXC: "scgn", Layout.GNHWC: "csng"}


@dataclass(frozen=True)
class DirectParams:
    threads: int
    vector: int  # consecutive channels per thread
    shape: str = ANY_SHAPE  # "any", or the compiled-in filter, stride and dilation (spell_shape)

    def __post_init__(self) -> None:
        if self.threads % 32 or not 32 <= self.threads <= 1024:
            raise ValueError(f"threads {self.threads} must be whole warps, at most 1024")
        if self.vector not in (1, 2, 4, 8):
            raise ValueError(f"vector {self.vector} must be 1, 2, 4 or 8")
        if self.shape != ANY_SHAPE and Shape.parse(self.shape) is None:
            raise ValueError(f"shape {self.shape!r} is neither {ANY_SHAPE!r} nor k<filter>s<stride>d<dilation>")

    @property
    def compiled(self) -> Shape | None:
        return None if self.shape == ANY_SHAPE else Shape.parse(self.shape)

    def suffix(self) -> str:
        return f"t{self.threads}_v{self.vector}_{self.shape}"

    def template_values(self) -> dict[str, Any]:
        shape = self.compiled
        values: dict[str, Any] = {"threads": self.threads, "vector": self.vector, "specialized": shape is not None}
        if shape is not None:
            for name, fill in (("filter", 1), ("stride", 1), ("dilation", 1)):
                values[name] = cl.pad_to_3d(getattr(shape, name), fill)  # (D, H, W)
        return values


_SUFFIX_RE = re.compile(r"t(?P<threads>\d+)_v(?P<vector>\d+)_(?P<shape>[a-z0-9x]+)")


class Direct(CompiledShape, BwdDataFamily):
    name = "direct"
    template = "conv_bwd_data/direct.hip.j2"
    params_type = DirectParams
    suffix_re = _SUFFIX_RE
    description = ("a thread per grad_input element (a vector of channels), every layout, dtype and rank; "
                   "small groups; filter, stride and dilation compiled in from the problem")

    def cell_allows(self, params: DirectParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        shape = params.compiled
        return (params.vector == 1 or cl.channel_innermost(layout)) and (shape is None or len(shape.filter) == ndim)

    def why_not_here(self, p: DirectParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        wrong = self.wrong_shape(p.shape, p.compiled, problem)
        if wrong:
            return wrong
        if p.vector > 1 and channel_lanes(problem) % p.vector:
            return (f"vector {p.vector} needs the channels a thread takes (C={problem.C}, or G*C when "
                    f"C=K=1 in NHWGC) divisible by it")
        if _blocks(p, problem) > BLOCKS_MAX:
            return "too many blocks for the grid"
        return None

    def layout_values(self, params: DirectParams, layout: Layout) -> dict[str, Any]:
        return {"order": ORDERS[layout]}

    def main_launch(self, p: DirectParams, problem: ConvProblem, target: DeviceTarget, args: Struct) -> Launch:
        return Launch("kf_main", (_blocks(p, problem), 1, 1), (p.threads, 1, 1), (args,))

    def heuristic_score(self, p: DirectParams, problem: ConvProblem, target: DeviceTarget) -> float:
        # Memory bound where few channels meet in a sum (depthwise); a GEMM family beats it elsewhere.
        few = problem.C * problem.K <= MAX_CHANNEL_PRODUCT
        compiled = 0.5 if p.compiled is not None else 0.0
        # A short sum is a copy's work, where a GEMM tile idles: 0.5 a halving of the sum below 32 products
        # (H100, seed 83: fp32 NHWGC 1x1 C = K = 8 ran 83 us here, 415 us on the best-scored mma tile).
        short = 0.0 if few else 0.5 * max(0.0, math.log2(SHORT_SUM / reduction_rows(problem)))
        return (3.0 if few else 0.0) + compiled + short + _vector_gain(p, problem) - abs(p.threads - 256) / 1024


def _vector_gain(p: DirectParams, problem: ConvProblem) -> float:
    """vector_score, except for channels-last groups of 2-16 channels: there a vector past two channels ran
    0.57 (4 against 2) and 0.59 (8 against 4) doublings slower and two against one no faster (H100, nine
    backward-data random DBs, same other params: 21, 18 and 12 pairs; bench/NOTES.md 62)."""
    if problem.layout is Layout.NHWGC and 1 < problem.C <= SMALL_GROUP_C:
        return -0.55 * max(0.0, math.log2(p.vector / 2))
    return vector_score(p.vector)


def channel_lanes(problem: ConvProblem) -> int:
    """The run of channels a thread's vector is taken from: the whole G*C row when C = K = 1 in NHWGC
    (consecutive groups, each its own sum), else one group's C."""
    if problem.C == 1 and problem.K == 1 and problem.layout is Layout.NHWGC:
        return problem.G
    return problem.C


def _blocks(p: DirectParams, problem: ConvProblem) -> int:
    return math.ceil(input_positions(problem) * problem.G * problem.C / p.vector / p.threads)
