"""`dwv`: depthwise backward-weight (C = K = 1) in channels-last (NHWGC), 1-D; memory bound.

A thread owns a vector of consecutive groups and walks segments of output positions (a few rows by up to
`seg` columns of one image); the input columns a segment needs slide through a ring of registers, so
each input value is loaded once a segment and no shared memory or barrier stands between the loads and
the sums until the end. `dwl` copies each tile's window into shared memory and meets at two barriers a
tile; `dwh` threads load every window element themselves. A block's sums meet once, at the end of its
walk, through the split-K store (templates/conv_bwd_weight/publish_sums.h, shared with `dwl`). Filter,
stride and dilation are compiled in per axis (`shape`).

The template also walks 2-D segments (several output rows, a ring of input rows); measured on the H200
(bench/NOTES.md 91) every 2-D point ran behind `dwl` or `dwh`, so the catalog lists 1-D points only, where
it served filters of 19-38 taps 1.1-2.6x faster than `dwl` and `dwr`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout
from ..base import I32, Launch, Struct, params_from_suffix
from ..conv.bank_pitch import VECTOR_BYTES_MAX, WARP
from ..conv.output_tiles import tile_items
from ..conv.shape import CompiledShape, Shape, hw
from .common import BwdWeightFamily, Reduction, check_split, split_items_refusal

CELLS = frozenset((Layout.NHWGC, dtype, 1) for dtype in (DType.FP16, DType.BF16, DType.BF16_FP32W, DType.FP32))
# Registers a thread's values take (DwvParams.held: its ring of input columns, its per-tap sums, its periods of
# loads), an estimate: the compiler's count differs (19 taps, estimated 114, compiled to 143 on the H200). At
# 192 it refused 33-42-tap layers that then ran 2.7-7.5x slower on dwr's picks; at 255 every one of ten random
# long-filter layers ran (bench/NOTES.md 91), and 51 taps and more stay refused (estimated 306 at stride 1).
MAX_HELD = 255
ACC_BYTES = 4
REDUCTION_SHARED = 32 * 1024  # bytes of shared memory for the final reduction's staging (rounds of taps)


@dataclass(frozen=True)
class DwvParams:
    threads: int
    vector: int  # consecutive groups a thread (one load)
    cv: int  # group vectors a block: its chunk is cv * vector groups
    rows: int  # output rows a segment
    seg: int  # output columns a segment (at most)
    ahead: int  # periods of loads in flight while one is summed
    split_k: int  # blocks along the segments of a chunk (grid y)
    reduction: Reduction
    shape: str  # the compiled-in filter, stride and dilation

    def __post_init__(self) -> None:
        check_split(self.split_k, self.reduction)
        if self.vector not in (1, 2, 4, 8) or self.cv not in (4, 8, 16, 32):
            raise ValueError(f"vector {self.vector} must be 1-8 and cv {self.cv} 4-32, powers of two")
        if self.threads not in (64, 128, 256, 512) or self.threads % self.cv:
            raise ValueError(f"threads {self.threads} must be 64-512 and a multiple of cv {self.cv}")
        if not (1 <= self.rows <= 4 and 1 <= self.seg <= 1024):
            raise ValueError(f"segment {self.rows}x{self.seg} must be 1-4 rows by 1-1024 columns")
        if self.ahead not in (1, 2):
            raise ValueError(f"ahead {self.ahead} must be 1 or 2 periods")
        if Shape.parse(self.shape) is None:
            raise ValueError(f"shape {self.shape!r} is not k<filter>s<stride>d<dilation>")

    @property
    def compiled(self) -> Shape:
        return Shape.checked(self.shape)

    @property
    def chunk(self) -> int:
        """Groups a block."""
        return self.cv * self.vector

    def taps(self) -> int:
        return math.prod(self.compiled.filter)

    def ring(self) -> tuple[int, int]:
        """Input rows and columns a thread holds: the rows a segment reads by the columns one output column reaches."""
        (fy, fx), (sh, _), (dh, dw) = hw(self.compiled.filter), hw(self.compiled.stride), hw(self.compiled.dilation)
        return (self.rows - 1) * sh + (fy - 1) * dh + 1, (fx - 1) * dw + 1

    def period(self) -> int:
        """Steps after which the ring's slots repeat (the step loop's unrolled body)."""
        _, uw = self.ring()
        sw = hw(self.compiled.stride)[1]
        return uw // math.gcd(uw, sw) if sw < uw else 1

    def held(self, element_bytes: int) -> int:
        """Registers a thread's values take: the ring (its used rows) and the per-tap sums, VEC accumulators
        each, and 1 + ahead periods of raw loads (the one summed and those in flight)."""
        _, uw = self.ring()
        (fy, _), (sh, sw), (dh, _) = hw(self.compiled.filter), hw(self.compiled.stride), hw(self.compiled.dilation)
        used_rows = len({o * sh + y * dh for o in range(self.rows) for y in range(fy)})
        fresh = min(sw, uw)
        load_words = -(-self.vector * element_bytes // 4)
        loads = (1 + self.ahead) * self.period() * (fresh * used_rows + self.rows) * load_words
        return (used_rows * uw + self.taps()) * self.vector + loads

    def taps_a_round(self) -> int:
        per_tap = math.ceil(self.threads / WARP) * self.chunk * ACC_BYTES
        return max(1, min(self.taps(), REDUCTION_SHARED // per_tap))

    def shared_bytes(self) -> int:
        return self.taps_a_round() * math.ceil(self.threads / WARP) * self.chunk * ACC_BYTES

    def template_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {"threads": self.threads, "vector": self.vector, "cv": self.cv, "rows": self.rows,
                                  "seg": self.seg, "ahead": self.ahead, "reduce_mode": self.reduction.mode,
                                  "taps_a_round": self.taps_a_round()}
        return values | self.compiled.template_values()

    def suffix(self) -> str:
        return (f"t{self.threads}_v{self.vector}_c{self.cv}_r{self.rows}x{self.seg}_a{self.ahead}_{self.shape}"
                f"_sk{self.split_k}_{self.reduction.value}")


_SUFFIX_RE = re.compile(r"t(?P<threads>\d+)_v(?P<vector>\d+)_c(?P<cv>\d+)_r(?P<rows>\d+)x(?P<seg>\d+)_a(?P<ahead>\d+)"
                        r"_(?P<shape>k[0-9x]+s[0-9x]+d[0-9x]+)_sk(?P<split_k>\d+)_(?P<reduction>[a-z]+)")


def segments_of(p: DwvParams, problem: ConvProblem) -> int:
    """Segments of one chunk: images x rows x column runs of the output plane."""
    return tile_items(problem, p.rows, p.seg)


def chunks_of(p: DwvParams, problem: ConvProblem) -> int:
    return math.ceil(problem.G / p.chunk)


class Dwv(CompiledShape, BwdWeightFamily):
    name = "dwv"
    template = "conv_bwd_weight/dwv.hip.j2"
    params_type = DwvParams
    suffix_re = _SUFFIX_RE
    description = ("depthwise (C = K = 1), channels-last, 1-D: a thread walks segments of output positions for a "
                   "vector of groups, the input columns sliding through registers; no shared memory until the "
                   "block's sums meet; filter, stride, dilation compiled in")

    def supported_cells(self) -> frozenset:
        return CELLS

    def cell_allows(self, params: DwvParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        if len(params.compiled.filter) != ndim or (ndim == 1 and params.rows != 1):
            return False
        return params.vector * dtype.tensor.nbytes <= VECTOR_BYTES_MAX

    def parse_suffix(self, suffix: str) -> DwvParams | None:
        return params_from_suffix(self.suffix_re, DwvParams, suffix, {"shape": str, "reduction": Reduction})

    def why_not_here(self, p: DwvParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.C != 1 or problem.K != 1:
            return f"depthwise only (C = K = 1), problem has C={problem.C}, K={problem.K}"
        wrong = self.wrong_shape(p.shape, p.compiled, problem)
        if wrong:
            return wrong
        held = p.held(problem.dtype.tensor.nbytes)
        if held > MAX_HELD:
            return f"{held} registers of ring values, sums and loads a thread pass the budget ({MAX_HELD})"
        if problem.G % p.vector:
            return f"loads of {p.vector} groups need G={problem.G} divisible by {p.vector}"
        if problem.G <= p.chunk // 2:
            return f"a chunk of {p.chunk} groups is more than twice G={problem.G}"
        ho, wo = hw(problem.output)
        if p.seg > 2 * wo or p.rows > 2 * ho:
            return f"a segment of {p.rows}x{p.seg} is more than twice the {ho}x{wo} output plane"
        walkers = p.threads // p.cv
        return split_items_refusal(p.split_k, math.ceil(segments_of(p, problem) / walkers), chunks_of(p, problem))

    def main_launch(self, p: DwvParams, problem: ConvProblem, target: DeviceTarget, args: Struct, wei_numel: int) -> Launch:
        return Launch("kf_main", (chunks_of(p, problem), p.split_k, 1), (p.threads, 1, 1), (args, I32(wei_numel)),
                      shared_bytes=p.shared_bytes())

    def heuristic_score(self, p: DwvParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """In doublings of time, from the five 1-D layers of bench/NOTES.md 91 (H200): a doubling of the
        loads a segment makes per output column (its ring filled again at each segment's start: seg 32
        ran 1.34x and 1.62x slower than seg 128 at 15 and 31 taps, 0.42 and 0.70 doublings, where this
        counts 0.37 and 0.65), 0.1 a doubling of the vector (one group a thread was the fastest on every
        layer), 0.05 a halving of the group vectors a block (cv 8 ran 1.07-1.16x slower than 16 or 32),
        and the share of the chunks' groups inside G as `dwl` weighs it. Against the other families:
        DWV_LEVEL, which `dwl`'s own 1-D tap cost (dwl.tap_cost) puts dwl below past 15 taps. Past 42 taps at
        stride 1 (31 at stride 2 with an odd filter) the register budget refuses dwv, and `dwr` serves."""
        (_, uw), (_, sw) = p.ring(), hw(p.compiled.stride)
        refill = math.log2((p.seg * sw + uw - sw) / (p.seg * sw))
        groups = problem.G / (chunks_of(p, problem) * p.chunk)
        within = -refill - 0.1 * math.log2(p.vector) + 0.05 * math.log2(p.cv / 32) + 0.083 * math.log2(groups)
        return DWV_LEVEL + within - self.reduction_penalty(p, problem)


# On the H200 (bench/NOTES.md 91): dwl 1.03x faster at 15 taps, dwv 1.07x faster than dwl at 25 taps and
# 1.76x faster than dwr at 31; the level sits just under dwl's (9.5), which its tap cost lowers past 15.
DWV_LEVEL = 9.4
