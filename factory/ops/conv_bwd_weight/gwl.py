"""`gwl`: grouped backward-weight with few channels per group (C, K multiples of 8, up to 64), 1-D and 2-D,
on matrix instructions (mma.sync). The main kernel reads channels-last data: NHWGC and GNHWC as they are,
NGCHW tensors copied NHWGC into the workspace first (the transposing pass, staged.py).

Per group the weight gradient is a small GEMM, K x (C x taps), over every output position. The implicit-GEMM
families copy a chunk of input for every (position, tap) pair, so a 3x3 layer's input passes through the
cache nine times, and their 64-row tiles leave most rows idle when K is 16. Here a block owns a chunk of
groups and walks its share (split_k) of the chunk's items, tiles of output positions of one image: for each
it copies the input window the tile reaches and the tile's output gradient into shared memory once (16
bytes a copy, cp.async; with `stages` 2 or 3 the next one or two items are in flight). The im2col operand is never built: a
matrix instruction's sixteen positions lie along one output row, so the window rows of a tap are a constant
stride apart and ldmatrix reads them in place. A warp takes one group and a set of its (tap, 8 channels)
column tiles, for all of K (16-row tiles), so the instruction's rows are the group's own K. Its sums stay in
registers for the whole walk and leave once through the split-K store. Filter, stride, dilation (`shape`)
and C, K (`channels`) are compiled in.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout, Scalar
from ..base import I32, Launch, Struct, params_from_suffix
from ..conv import layouts as cl
from ..conv import output_tiles
from ..conv.bank_pitch import WARP, aligned, fragment_rows_pitch
from ..conv.channels import ShapeAndChannels, channels_refusal, spell_channels
from ..conv.family import MmaSyncRules
from ..conv.output_tiles import tile_items, window_reach
from ..conv.shape import CompiledShape, hw
from ..conv.transpose import transpose_values
from .common import GRID_Y_LIMIT, BwdWeightFamily, Reduction, check_split, grid_finish_refusal, split_items_refusal
from .staged import staged_conv_args, staging_launches

CELLS = frozenset((layout, dtype, ndim) for layout in (Layout.NHWGC, Layout.GNHWC, Layout.NGCHW, Layout.NGCHW_GKYXC)
                  for dtype in (DType.FP16, DType.BF16, DType.BF16_FP32W, DType.FP32) for ndim in (1, 2))
TILE_M, TILE_N = 16, 8  # mma.sync's accumulator tile: rows of K, columns of (tap, channel)
ACC_PER_TILE = TILE_M * TILE_N // WARP  # accumulator registers a lane, per tile
MAX_ACC = 96  # accumulator registers a lane
MAX_THREADS = 512
CHANNELS_MAX = 64
TILES = (4, 6, 9, 18)  # column tiles a warp, at most: the values a point may take
@dataclass(frozen=True)
class GwlParams(ShapeAndChannels):
    groups: int  # groups a block (its chunk)
    tiles: int  # most (tap, 8 channels) column tiles a warp: a group's are split into sets of at most this many
    rows: int  # output rows of an item
    cols: int  # output columns of an item: a multiple of 16, so a matrix step's positions share a row
    stages: int  # items a block holds in shared memory: the next stages - 1 are copied while one is summed
    split_k: int  # blocks along a chunk's items (grid y)
    reduction: Reduction
    shape: str  # the compiled-in filter, stride and dilation
    channels: str  # the compiled-in C and K per group, c<C>k<K>

    def __post_init__(self) -> None:
        check_split(self.split_k, self.reduction, meets_in_kernel=True)
        if self.groups not in (1, 2, 4, 8) or self.tiles not in TILES:
            raise ValueError(f"groups {self.groups} must be 1, 2, 4 or 8 and tiles {self.tiles} one of {TILES}")
        if not (1 <= self.rows <= 16 and self.cols in (16, 32, 64)):
            raise ValueError(f"tile {self.rows}x{self.cols} must be 1-16 rows by 16, 32 or 64 columns")
        if self.stages not in (1, 2, 3):
            raise ValueError(f"stages {self.stages} must be 1, 2 or 3")
        self.check_shape_and_channels(TILE_N, CHANNELS_MAX)

    @property
    def threads(self) -> int:
        return self.groups * self.tap_sets() * WARP

    def taps(self) -> int:
        return math.prod(self.compiled.filter)

    def m_tiles(self) -> int:
        return -(-self.k // TILE_M)

    def n_tiles(self) -> int:
        """Column tiles of a group: (tap, 8 channels) pairs."""
        return self.taps() * (self.c // TILE_N)

    def tap_sets(self) -> int:
        """Warps a group: its column tiles in sets of at most `tiles`."""
        return -(-self.n_tiles() // self.tiles)

    def tiles_a_warp(self) -> int:
        """The sets' size, balanced: never more than `tiles`, and no set left empty."""
        return -(-self.n_tiles() // self.tap_sets())

    def accumulators(self) -> int:
        """Accumulator registers a lane holds for the whole walk."""
        return ACC_PER_TILE * self.m_tiles() * self.tiles_a_warp()

    def block_window(self) -> tuple[int, int]:
        """Input rows and columns an item's tile reaches (the shared window)."""
        return window_reach(self.compiled, self.rows, self.cols)

    def template_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {"c": self.c, "k": self.k, "groups": self.groups, "tap_sets": self.tap_sets(),
                                  "rows": self.rows, "cols": self.cols, "stages": self.stages,
                                  "reduce_mode": self.reduction.mode}
        return values | self.compiled.template_values()

    def suffix(self) -> str:
        return (f"g{self.groups}_j{self.tiles}_b{self.rows}x{self.cols}_p{self.stages}_{self.shape}_{self.channels}"
                f"_sk{self.split_k}_{self.reduction.value}")


_SUFFIX_RE = re.compile(r"g(?P<groups>\d+)_j(?P<tiles>\d+)_b(?P<rows>\d+)x(?P<cols>\d+)_p(?P<stages>\d+)"
                        r"_(?P<shape>k[0-9x]+s[0-9x]+d[0-9x]+)_(?P<channels>c\d+k\d+)_sk(?P<split_k>\d+)_(?P<reduction>[a-z]+)")


@functools.lru_cache(maxsize=None)
def window_pitch(p: GwlParams, element_bytes: int) -> int:
    """Elements between a window's positions (a chunk's groups, then padding)."""
    _, sw = hw(p.compiled.stride)
    return fragment_rows_pitch(p.groups * p.c, sw, element_bytes)


@functools.lru_cache(maxsize=None)
def grad_pitch(p: GwlParams, element_bytes: int) -> int:
    """Elements between the gradient tile's positions. The last 16-row tile of K reads up to 16 columns from
    its group's first: rows past K (discarded) must stay within the position."""
    return fragment_rows_pitch((p.groups - 1) * p.k + p.m_tiles() * TILE_M, 1, element_bytes)


def stage_bytes(p: GwlParams, element_bytes: int) -> int:
    """Shared memory of one item: its window and its gradient tile, each 16-byte aligned."""
    uhb, uwb = p.block_window()
    window = aligned(uhb * uwb * window_pitch(p, element_bytes), element_bytes)
    grad = aligned(p.rows * p.cols * grad_pitch(p, element_bytes), element_bytes)
    return (window + grad) * element_bytes


def items_of(p: GwlParams, problem: ConvProblem) -> int:
    """Items of one chunk: images x tiles of the output plane."""
    return tile_items(problem, p.rows, p.cols)


def chunks_of(p: GwlParams, problem: ConvProblem) -> int:
    return math.ceil(problem.G / p.groups)


def plane_cover(p: GwlParams, problem: ConvProblem) -> float:
    """The share of the items' positions that lie in the output plane."""
    return output_tiles.plane_cover(problem, p.rows, p.cols)


class Gwl(MmaSyncRules, CompiledShape, BwdWeightFamily):
    name = "gwl"
    template = "conv_bwd_weight/gwl.hip.j2"
    finishes_in_grid = True  # coop: kf_splitk_finish_in_grid after the walk's partials
    params_type = GwlParams
    suffix_re = _SUFFIX_RE
    description = ("grouped, C and K multiples of 8 up to 64, 1-D/2-D, mma.sync (NGCHW copied channels-last first): "
                   "a block per chunk of groups walks tiles of output positions, each tile's input window and "
                   "gradient copied into shared memory once and read in place by the matrix instructions; filter, "
                   "stride, dilation, C and K compiled in")

    def supported_cells(self) -> frozenset:
        return CELLS

    def problem_values(self, problem: Any) -> Mapping[str, Any] | None:
        return {**super().problem_values(problem), "channels": spell_channels(problem.C, problem.K)}

    def parse_suffix(self, suffix: str) -> GwlParams | None:
        return params_from_suffix(self.suffix_re, GwlParams, suffix,
                                  {"shape": str, "channels": str, "reduction": Reduction})

    def cell_allows(self, params: GwlParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return len(params.compiled.filter) == ndim and (ndim == 2 or params.rows == 1)

    def template_values(self, params: GwlParams, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        values = super().template_values(params, layout, dtype, ndim)
        eb = dtype.tensor.nbytes
        return values | {"pos_pitch": window_pitch(params, eb), "grad_pitch": grad_pitch(params, eb)}

    def layout_values(self, layout: Layout) -> dict[str, Any]:
        return {"transpose": not cl.channel_innermost(layout)} | transpose_values()

    def staging(self, p: GwlParams, problem: ConvProblem, at: int) -> tuple[tuple[Launch, ...], int]:
        """NGCHW problems: the input and the output gradient copied channels-last first (staged.py)."""
        if cl.channel_innermost(problem.layout):
            return (), 0
        return staging_launches(problem, at, problem.dtype.tensor.nbytes)

    def conv_args(self, p: GwlParams, problem: ConvProblem, dst: str, staging_at: int) -> Struct:
        args = super().conv_args(p, problem, dst, staging_at)
        if cl.channel_innermost(problem.layout):
            return args
        return staged_conv_args(args, problem, dst, staging_at, problem.dtype.tensor.nbytes)

    def why_not_here(self, p: GwlParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        wrong = channels_refusal(p.channels, problem, TILE_N, CHANNELS_MAX) or self.wrong_shape(p.shape, p.compiled, problem)
        if wrong:
            return wrong
        if p.reduction is Reduction.ATOMIC and problem.dtype.weight is not Scalar.F32:
            return ("atomics on a 16-bit weight gradient go through a workspace and a finishing pass (two-stage "
                    "points were the faster on every problem measured, bench/NOTES.md 71)")
        refusal = grid_finish_refusal(p, chunks_of(p, problem) * p.split_k, problem, target)
        if refusal:
            return refusal
        if p.accumulators() > MAX_ACC:
            return (f"{p.m_tiles()} x {p.tiles_a_warp()} accumulator tiles a warp ({p.accumulators()} registers a "
                    f"lane) pass the budget of {MAX_ACC}")
        if not cl.channel_innermost(problem.layout) and problem.N > GRID_Y_LIMIT:
            return f"the transposing pass takes N up to {GRID_Y_LIMIT} (its grid's z), problem has N={problem.N}"
        if p.threads > MAX_THREADS:
            return (f"{p.groups} groups x {p.tap_sets()} sets of column tiles a block is {p.threads} threads, "
                    f"over {MAX_THREADS}")
        smaller = dataclasses.replace(p, tiles=TILES[TILES.index(p.tiles) - 1]) if p.tiles != TILES[0] else None
        if smaller is not None and smaller.tap_sets() == p.tap_sets():
            return (f"a group's {p.n_tiles()} column tiles split into the same {p.tap_sets()} sets with at most "
                    f"{smaller.tiles} a warp (that point serves them)")
        if problem.G <= p.groups // 2:
            return f"a chunk of {p.groups} groups is more than twice G={problem.G}"
        (ho, wo) = hw(problem.output)
        if p.rows > 2 * ho or p.cols > 2 * wo:
            return f"a tile of {p.rows}x{p.cols} is more than twice the {ho}x{wo} output plane"
        shared = p.stages * stage_bytes(p, problem.dtype.tensor.nbytes)
        if shared > target.shared_optin:
            return f"the items need {shared} bytes of shared memory"
        return split_items_refusal(p.split_k, items_of(p, problem), chunks_of(p, problem))

    def main_launch(self, p: GwlParams, problem: ConvProblem, target: DeviceTarget, args: Struct, wei_numel: int) -> Launch:
        return Launch("kf_main", (chunks_of(p, problem), p.split_k, 1), (p.threads, 1, 1), (args, I32(wei_numel)),
                      shared_bytes=p.stages * stage_bytes(p, problem.dtype.tensor.nbytes))

    def heuristic_score(self, p: GwlParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """In doublings of time: GWL_LEVEL against the other families, less a time model fitted by least squares
        over every point of twelve tuned H100 problems (bench/NOTES.md 71; log2 time over the problem's best
        gwl point, capped at 1): 0.18 a halving of the blocks below two an SM, 0.04 a doubling past four,
        0.145 per input's worth of split-K partials written and read, 0.33 a halving of the items' positions
        inside the plane, 0.08 a doubling of the window over the tile (input re-read from the cache), and
        -0.03 a doubling of the warps a group (sets of column tiles)."""
        blocks = chunks_of(p, problem) * p.split_k
        under = math.log2(min(1.0, blocks / (2 * target.processors)))
        over = math.log2(max(1.0, blocks / (4 * target.processors)))
        uhb, uwb = p.block_window()
        halo = math.log2(uhb * uwb / (p.rows * p.cols))
        slower = (-0.18 * under + 0.04 * over + 0.145 * partials_share(p, problem) - 0.33 * math.log2(plane_cover(p, problem))
                  + 0.08 * halo - 0.03 * math.log2(p.tap_sets()))
        return GWL_LEVEL - slower - (GWL_ONE_TAP if p.taps() == 1 else 0.0)


GWL_LEVEL = 12.0  # above the implicit-GEMM families' scores (3.8-5.6 on the twelve): gwl ran 1.1-2.2x faster
# 1x1 filters: below `pw`, whose rows or runs need no window (H100: 15.1 against 17.3 us on a 64-channel
# NHWGC layer; NGCHW C=32 K=16 112x112, bench/NOTES.md 72, 47.9 against 174.5, where 7 still ranked gwl
# first: its scores there, 4.8 against pw's 3.8-4.1).
GWL_ONE_TAP = 9.0


def partials_share(p: GwlParams, problem: ConvProblem) -> float:
    """Bytes of split-K partials (two-stage and coop: written, then read) over the bytes of the input and the
    gradient."""
    if p.reduction not in (Reduction.TWOSTAGE, Reduction.COOP):
        return 0.0
    elements = math.prod(problem.input) * problem.G * problem.C + math.prod(problem.output) * problem.G * problem.K
    return p.split_k * math.prod(problem.weight_shape_logical) * 4 / (problem.N * elements * problem.dtype.tensor.nbytes)
