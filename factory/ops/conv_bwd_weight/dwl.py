"""`dwl`: depthwise backward-weight (C = K = 1) in channels-last (NHWGC), 1-D and 2-D; memory bound.

A block owns a chunk of consecutive groups and walks its share (split_k) of the chunk's items: tiles of
output positions of one image. For each it copies the input window the tile reaches into shared memory
once, 16 bytes of groups a copy, as raw words (with two stages the next window is in flight, cp.async on
NVIDIA, while one is summed). A thread takes a sub-tile of positions for a vector of groups: it loads the
sub-tile's output gradient from global memory into registers (no other thread reads it) and adds each
window value it reads, times every gradient value it meets, into per-tap sums in registers. `dwh` and
`dwr` threads load their windows from the cache themselves, an element or a vector a load with a bounds
test each, and re-read halos their neighbours also read. The block's sums meet through shared memory
once, at the end of its walk, and leave through the split-K store. Filter, stride and dilation are
compiled in per axis (`shape`), so every tap-to-window mapping is a constant.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout
from ..base import I32, Launch, Struct, params_from_suffix
from ..conv.bank_pitch import VECTOR_BYTES_MAX, WARP, ThreadTiles, conflict_free_pitch, tile_point_fits
from ..conv import output_tiles
from ..conv.output_tiles import tile_items, window_reach
from ..conv.shape import CompiledShape, Shape, hw
from .common import BwdWeightFamily, Reduction, check_split, split_items_refusal

CELLS = frozenset((Layout.NHWGC, dtype, ndim)
                  for dtype in (DType.FP16, DType.BF16, DType.BF16_FP32W, DType.FP32) for ndim in (1, 2))
MAX_SUMS = 112  # per-tap sums and output-gradient values a thread holds in registers
ACC_BYTES = 4


@dataclass(frozen=True)
class DwlParams:
    threads: int
    vector: int  # consecutive groups a thread (one shared or global access)
    cv: int  # group vectors a block: its chunk is cv * vector groups
    across: int  # thread tiles of a block along W (the rest of the threads go along H)
    rows: int  # a thread's output rows
    run: int  # a thread's output columns
    stages: int  # items a block holds in shared memory: 2 copies the next item while one is summed
    split_k: int  # blocks along a chunk's items (grid y)
    reduction: Reduction
    shape: str  # the compiled-in filter, stride and dilation

    def __post_init__(self) -> None:
        check_split(self.split_k, self.reduction)
        if self.vector not in (2, 4, 8) or self.cv not in (4, 8, 16, 32):
            raise ValueError(f"vector {self.vector} must be 2, 4 or 8 and cv {self.cv} 4-32, a power of two")
        if self.threads not in (64, 128, 256, 512) or self.threads % (self.cv * self.across):
            raise ValueError(f"threads {self.threads} must be 64-512 and a multiple of cv x across "
                             f"({self.cv} x {self.across})")
        if self.stages not in (1, 2):
            raise ValueError(f"stages {self.stages} must be 1 or 2")
        if not (1 <= self.rows <= 4 and 1 <= self.run <= 16):
            raise ValueError(f"tile {self.rows}x{self.run} must be 1-4 rows by 1-16 columns")
        if Shape.parse(self.shape) is None:
            raise ValueError(f"shape {self.shape!r} is not k<filter>s<stride>d<dilation>")

    @property
    def compiled(self) -> Shape:
        return Shape.checked(self.shape)

    @property
    def across_h(self) -> int:
        return self.threads // (self.cv * self.across)

    @property
    def chunk(self) -> int:
        """Groups a block."""
        return self.cv * self.vector

    def block_tile(self) -> tuple[int, int]:
        """Output positions of an item along H and W."""
        return self.across_h * self.rows, self.across * self.run

    def block_window(self) -> tuple[int, int]:
        """Input rows and columns an item's tile reaches (the shared window)."""
        return window_reach(self.compiled, *self.block_tile())

    def taps(self) -> int:
        return math.prod(self.compiled.filter)

    def sums(self) -> int:
        """Registers of values a thread holds: its per-tap sums and its tile's output gradient."""
        return (self.taps() + self.rows * self.run) * self.vector

    def template_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {"vector": self.vector, "cv": self.cv, "across_h": self.across_h,
                                  "across_w": self.across, "rows": self.rows, "run": self.run,
                                  "stages": self.stages, "reduce_mode": self.reduction.mode}
        return values | self.compiled.template_values()

    def suffix(self) -> str:
        return (f"t{self.threads}_v{self.vector}_c{self.cv}_a{self.across}_b{self.rows}x{self.run}_p{self.stages}_{self.shape}"
                f"_sk{self.split_k}_{self.reduction.value}")


_SUFFIX_RE = re.compile(r"t(?P<threads>\d+)_v(?P<vector>\d+)_c(?P<cv>\d+)_a(?P<across>\d+)_b(?P<rows>\d+)x(?P<run>\d+)"
                        r"_p(?P<stages>\d+)_(?P<shape>k[0-9x]+s[0-9x]+d[0-9x]+)_sk(?P<split_k>\d+)_(?P<reduction>[a-z]+)")


def copy_groups(p: DwlParams, element_bytes: int) -> int:
    """Groups one copy into shared memory moves: 16 bytes, or the whole chunk when it is smaller."""
    return min(p.chunk, VECTOR_BYTES_MAX // element_bytes)


@functools.lru_cache(maxsize=None)
def window_pitch(p: DwlParams, element_bytes: int) -> int:
    """The window's row pitch in elements, free of bank conflicts for the threads' reads of one step."""
    (_, uwb), (sh, sw) = p.block_window(), hw(p.compiled.stride)
    tiles = ThreadTiles(p.threads, p.cv, p.vector, p.across_h, row_step=p.rows * sh, col_step=p.run * sw * p.chunk)
    return conflict_free_pitch(tiles, uwb * p.chunk, element_bytes)


def window_bytes(p: DwlParams, element_bytes: int) -> int:
    """Shared memory of one item's window (16-byte aligned)."""
    uhb, _ = p.block_window()
    return -(-uhb * window_pitch(p, element_bytes) * element_bytes // 16) * 16


def taps_a_round(p: DwlParams, element_bytes: int) -> int:
    """Taps whose per-warp sums one round of the block's final reduction stages in the tiles' memory."""
    per_tap = (p.threads // WARP) * p.chunk * ACC_BYTES
    return max(1, min(p.taps(), p.stages * window_bytes(p, element_bytes) // per_tap))


def shared_bytes(p: DwlParams, element_bytes: int) -> int:
    per_tap = (p.threads // WARP) * p.chunk * ACC_BYTES
    return max(p.stages * window_bytes(p, element_bytes), taps_a_round(p, element_bytes) * per_tap)


def items_of(p: DwlParams, problem: ConvProblem) -> int:
    """Items of one chunk: images x tiles of the output plane."""
    return tile_items(problem, *p.block_tile())


def chunks_of(p: DwlParams, problem: ConvProblem) -> int:
    return math.ceil(problem.G / p.chunk)


class Dwl(CompiledShape, BwdWeightFamily):
    name = "dwl"
    template = "conv_bwd_weight/dwl.hip.j2"
    params_type = DwlParams
    suffix_re = _SUFFIX_RE
    description = ("depthwise (C = K = 1), channels-last, 1-D/2-D: a block per chunk of groups walks tiles of "
                   "output positions, each tile's input window copied into shared memory once, its gradient read "
                   "into registers; filter, stride, dilation compiled in")

    def supported_cells(self) -> frozenset:
        return CELLS

    def cell_allows(self, params: DwlParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return tile_point_fits(params, dtype.tensor.nbytes, ndim)

    def parse_suffix(self, suffix: str) -> DwlParams | None:
        return params_from_suffix(self.suffix_re, DwlParams, suffix, {"shape": str, "reduction": Reduction})

    def template_values(self, params: DwlParams, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        values = super().template_values(params, layout, dtype, ndim)
        eb = dtype.tensor.nbytes
        return values | {"in_pitch": window_pitch(params, eb), "copy_groups": copy_groups(params, eb),
                         "taps_a_round": taps_a_round(params, eb)}

    def why_not_here(self, p: DwlParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.C != 1 or problem.K != 1:
            return f"depthwise only (C = K = 1), problem has C={problem.C}, K={problem.K}"
        wrong = self.wrong_shape(p.shape, p.compiled, problem)
        if wrong:
            return wrong
        if p.sums() > MAX_SUMS:
            return f"{p.sums()} sums and gradient values a thread pass the register budget ({MAX_SUMS})"
        copy = copy_groups(p, problem.dtype.tensor.nbytes)
        if problem.G % copy:
            return f"copies of {copy} groups need G={problem.G} divisible by {copy}"
        if problem.G <= p.chunk // 2:
            return f"a chunk of {p.chunk} groups is more than twice G={problem.G}"
        (bh, bw), (ho, wo) = p.block_tile(), hw(problem.output)
        if bh > 2 * ho or bw > 2 * wo:
            return f"a block tile of {bh}x{bw} is more than twice the {ho}x{wo} output plane (half its threads idle)"
        shared = shared_bytes(p, problem.dtype.tensor.nbytes)
        if shared > target.shared_optin:
            return f"the windows need {shared} bytes of shared memory"
        return split_items_refusal(p.split_k, items_of(p, problem), chunks_of(p, problem))

    def main_launch(self, p: DwlParams, problem: ConvProblem, target: DeviceTarget, args: Struct, wei_numel: int) -> Launch:
        return Launch("kf_main", (chunks_of(p, problem), p.split_k, 1), (p.threads, 1, 1), (args, I32(wei_numel)),
                      shared_bytes=shared_bytes(p, problem.dtype.tensor.nbytes))

    def heuristic_score(self, p: DwlParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """In doublings of time. Within the family, least squares over every point of 34 tuned H100
        problems (bench/NOTES.md 70; log2 time over the problem's best dwl point, capped at 1): 0.24 a
        halving of the blocks below two an SM, 0.15 for two groups a thread on unstrided filters of up to 9
        taps (4-byte shared reads), 0.064 a halving of the share of the items' positions inside the plane,
        0.083 a halving of the share of the chunks' groups inside G. Against the other families: `tap_cost`."""
        blocks = chunks_of(p, problem) * p.split_k
        under = math.log2(min(1.0, blocks / (2 * target.processors)))
        narrow = 1.0 if p.vector == 2 and max(problem.stride) == 1 and p.taps() <= 9 else 0.0
        groups = problem.G / (chunks_of(p, problem) * p.chunk)
        within = (0.24 * under - 0.15 * narrow + 0.064 * math.log2(plane_cover(p, problem))
                  + 0.083 * math.log2(groups))
        return DWL_LEVEL + within - tap_cost(p, problem) - self.reduction_penalty(p, problem)


DWL_LEVEL = 9.5  # against dwh and dwr: AUTO over the 34 problems of bench/NOTES.md 70
TAP_COST_2D = 0.5  # doublings a doubling of 2-D taps past 9
TAP_COST_1D = 2.0  # doublings a doubling of 1-D taps past 15


def tap_cost(p: DwlParams, problem: ConvProblem) -> float:
    """Long filters: a thread's sums grow with the taps while its gradient values stay, so the window
    reads a FMA fall and the registers rise. Measured on the H100 (bench/NOTES.md 70): dwh's register
    window served 7x7 filters 1.1-1.4x faster than dwl's best, where dwl served 3x3 ones up to 1.27x
    faster; in 1-D dwl ran 15-tap filters 1.26-1.48x faster than dwr, 31 taps 1.52x and 51 taps 1.88x
    slower. The 1-D cost is set so the prior orders dwl and dwr as measured at 15, 31 and 51 taps (dwr's
    own score falls with the taps too); the 2-D one from the 34 problems' AUTO regret."""
    if problem.ndim == 2:
        return TAP_COST_2D * max(0.0, math.log2(p.taps() / 9))
    return TAP_COST_1D * max(0.0, math.log2(p.taps() / 15))


def plane_cover(p: DwlParams, problem: ConvProblem) -> float:
    """The share of the items' positions that lie in the output plane."""
    return output_tiles.plane_cover(problem, *p.block_tile())
