"""`gwl`: grouped backward-data with few channels per group (C, K multiples of 8 up to 64), 1-D and 2-D, on
matrix instructions (mma.sync). The main kernel reads and writes channels-last data: NHWGC and GNHWC as they
are, NGCHW through the transposing pass (`mma`'s transposed_plan).

Per group the input gradient is a small GEMM, (positions) x C, over (tap, K). The implicit-GEMM families copy
a chunk of output gradient for every (position, tap) pair, so a 3x3 layer's grad_output passes through the
cache nine times, and their tiles of 32-64 channels leave columns idle when C is 16. Here a block owns a chunk
of groups and a stride phase (grid z: the positions one set of taps reaches): it copies the groups' weights
into shared memory once and walks its share (`walkers` blocks a chunk) of the phase's tiles of grad_input
positions, each tile's grad_output window copied into shared memory once (16 bytes a copy, cp.async, one or
two tiles ahead). A matrix instruction's sixteen rows are positions of one row of the phase, so for every tap
that reaches it the window positions it reads are one apart and ldmatrix reads them in place. A warp takes
one group and `warp_tiles` of the tile's 16-position row tiles, every channel of it, and stores its sums
after each tile. Filter, stride and dilation (`shape`) and C, K (`channels`) are compiled in.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ...device import DeviceTarget
from ...kernel_resources import KernelResources
from ...occupancy import blocks_per_processor
from ...problem import ConvProblem, DType, Layout
from ..base import Launch, LaunchPlan, Struct, params_from_suffix
from ..conv import layouts as cl
from ..conv.bank_pitch import WARP, aligned, fragment_rows_pitch
from ..conv.channels import CHANNELS_PATTERN, ShapeAndChannels, channels_refusal, spell_channels
from ..conv.family import MmaSyncRules, mma_reduction_depth
from ..conv.shape import CompiledShape, hw
from ..conv.transpose import transpose_values
from .common import GRID_Y_LIMIT, BwdDataFamily
from .mma import transpose_refusal, transposed_gain, transposed_plan

CELLS = frozenset((layout, dtype, ndim) for layout in (Layout.NHWGC, Layout.GNHWC, Layout.NGCHW, Layout.NGCHW_GKYXC)
                  for dtype in (DType.FP16, DType.BF16, DType.FP32) for ndim in (1, 2))
TILE_M, TILE_N = 16, 8  # mma.sync's accumulator tile: rows of positions, columns of channels
ACC_PER_TILE = TILE_M * TILE_N // WARP  # accumulator registers a lane, per tile
MAX_ACC = 64  # accumulator registers a lane
MAX_THREADS = 512
CHANNELS_MAX = 64


@dataclass(frozen=True)
class GwlParams(ShapeAndChannels):
    groups: int  # groups a block (its chunk)
    warp_tiles: int  # 16-position row tiles a warp
    rows: int  # grad_input rows of a tile
    cols: int  # grad_input columns of a tile: a multiple of 16, so a matrix step's positions share a row
    stages: int  # tiles a block holds in shared memory: the next stages - 1 are copied while one is summed
    walkers: int  # blocks along a chunk's tiles (grid y)
    shape: str  # the compiled-in filter, stride and dilation
    channels: str  # the compiled-in C and K per group, c<C>k<K>

    def __post_init__(self) -> None:
        if self.groups not in (1, 2, 4) or self.warp_tiles not in (1, 2, 4):
            raise ValueError(f"groups {self.groups} and warp_tiles {self.warp_tiles} must be 1, 2 or 4")
        if not (1 <= self.rows <= 16 and self.cols in (16, 32, 64)):
            raise ValueError(f"tile {self.rows}x{self.cols} must be 1-16 rows by 16, 32 or 64 columns")
        if self.row_tiles() % self.warp_tiles:
            raise ValueError(f"a tile's {self.row_tiles()} row tiles do not share out {self.warp_tiles} a warp")
        if self.stages not in (2, 3):
            raise ValueError(f"stages {self.stages} must be 2 or 3")
        if not 1 <= self.walkers <= GRID_Y_LIMIT:
            raise ValueError(f"walkers {self.walkers} must be 1-{GRID_Y_LIMIT} (the grid's y)")
        self.check_shape_and_channels(TILE_N, CHANNELS_MAX)

    @property
    def threads(self) -> int:
        return self.groups * self.row_tiles() // self.warp_tiles * WARP

    def row_tiles(self) -> int:
        return self.rows * self.cols // TILE_M

    def taps(self) -> int:
        return math.prod(self.compiled.filter)

    def accumulators(self) -> int:
        """Accumulator registers a lane holds through a tile."""
        return ACC_PER_TILE * self.warp_tiles * (self.c // TILE_N)

    def block_window(self) -> tuple[int, int]:
        """grad_output rows and columns a tile of a stride phase reaches (the shared window)."""
        (fy, fx), (sh, sw), (dh, dw) = hw(self.compiled.filter), hw(self.compiled.stride), hw(self.compiled.dilation)
        return self.rows + -(-(fy - 1) * dh // sh), self.cols + -(-(fx - 1) * dw // sw)

    def phases(self) -> int:
        return math.prod(self.compiled.stride)

    def template_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {"c": self.c, "k": self.k, "groups": self.groups, "warp_tiles": self.warp_tiles,
                                  "rows": self.rows, "cols": self.cols, "stages": self.stages}
        return values | self.compiled.template_values()

    def suffix(self) -> str:
        return (f"g{self.groups}_m{self.warp_tiles}_b{self.rows}x{self.cols}_p{self.stages}_w{self.walkers}"
                f"_{self.shape}_{self.channels}")


_SUFFIX_RE = re.compile(r"g(?P<groups>\d+)_m(?P<warp_tiles>\d+)_b(?P<rows>\d+)x(?P<cols>\d+)_p(?P<stages>\d+)"
                        rf"_w(?P<walkers>\d+)_(?P<shape>k[0-9x]+s[0-9x]+d[0-9x]+)_(?P<channels>{CHANNELS_PATTERN})")


def padded_k(p: GwlParams, element_bytes: int) -> int:
    """A group's reduction rows a tap in shared memory: K rounded up to whole matrix steps (zeros past K)."""
    step = mma_reduction_depth(element_bytes)
    return -(-p.k // step) * step


@functools.lru_cache(maxsize=None)
def window_pitch(p: GwlParams, element_bytes: int) -> int:
    """Elements between a window's positions (a chunk's groups, then padding): a fragment's rows are
    consecutive positions."""
    return fragment_rows_pitch(p.groups * padded_k(p, element_bytes), 1, element_bytes)


@functools.lru_cache(maxsize=None)
def weight_pitch(p: GwlParams, element_bytes: int) -> int:
    """Elements between a tap's weight rows k in shared memory."""
    return fragment_rows_pitch(p.c, 1, element_bytes)


def shared_bytes(p: GwlParams, element_bytes: int) -> int:
    """The chunk's weights, then `stages` windows, each 16-byte aligned."""
    uhb, uwb = p.block_window()
    weights = aligned(p.groups * p.taps() * padded_k(p, element_bytes) * weight_pitch(p, element_bytes), element_bytes)
    window = aligned(uhb * uwb * window_pitch(p, element_bytes), element_bytes)
    return (weights + p.stages * window) * element_bytes


def phase_plane(problem: ConvProblem) -> tuple[int, int]:
    """Rows and columns of the largest stride phase of the grad_input plane."""
    (hi, wi), (sh, sw) = hw(problem.input), hw(problem.stride)
    return math.ceil(hi / sh), math.ceil(wi / sw)


def tiles_of(p: GwlParams, problem: ConvProblem) -> int:
    """Tiles of one chunk and stride phase (the largest): images x tiles of the phase's plane."""
    hp, wp = phase_plane(problem)
    return problem.N * math.ceil(hp / p.rows) * math.ceil(wp / p.cols)


def chunks_of(p: GwlParams, problem: ConvProblem) -> int:
    return math.ceil(problem.G / p.groups)


def plane_cover(p: GwlParams, problem: ConvProblem) -> float:
    """The share of the tiles' positions that lie in the (largest phase's) plane."""
    hp, wp = phase_plane(problem)
    return hp * wp / (math.ceil(hp / p.rows) * p.rows * math.ceil(wp / p.cols) * p.cols)


class Gwl(MmaSyncRules, CompiledShape, BwdDataFamily):
    name = "gwl"
    template = "conv_bwd_data/gwl.hip.j2"
    params_type = GwlParams
    suffix_re = _SUFFIX_RE
    description = ("grouped, C and K multiples of 8 up to 64, 1-D/2-D, mma.sync (NGCHW through the transposing "
                   "pass): a block per chunk of groups and stride phase keeps their weights in shared memory and "
                   "walks tiles of grad_input positions, each tile's grad_output window copied into shared memory "
                   "once and read in place by the matrix instructions; filter, stride, dilation, C and K compiled in")

    def supported_cells(self) -> frozenset:
        return CELLS

    def problem_values(self, problem: Any) -> Mapping[str, Any] | None:
        return {**super().problem_values(problem), "channels": spell_channels(problem.C, problem.K)}

    def parse_suffix(self, suffix: str) -> GwlParams | None:
        return params_from_suffix(self.suffix_re, GwlParams, suffix, {"shape": str, "channels": str})

    def cell_allows(self, params: GwlParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return len(params.compiled.filter) == ndim and (ndim == 2 or params.rows == 1)

    def template_values(self, params: GwlParams, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        values = super().template_values(params, layout, dtype, ndim)
        eb = dtype.tensor.nbytes
        return values | {"pos_pitch": window_pitch(params, eb), "weight_pitch": weight_pitch(params, eb)}

    def layout_values(self, params: GwlParams, layout: Layout) -> dict[str, Any]:
        return {"transpose": not cl.channel_innermost(layout)} | transpose_values()

    def why_not_here(self, p: GwlParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        wrong = channels_refusal(p.channels, problem, TILE_N, CHANNELS_MAX) or self.wrong_shape(p.shape, p.compiled, problem)
        if wrong:
            return wrong
        if not cl.channel_innermost(problem.layout) and (refusal := transpose_refusal(problem)):
            return refusal
        if p.accumulators() > MAX_ACC:
            return (f"{p.warp_tiles} x {p.c // TILE_N} accumulator tiles a warp ({p.accumulators()} registers a "
                    f"lane) pass the budget of {MAX_ACC}")
        if p.threads > MAX_THREADS:
            return f"{p.groups} groups x {p.row_tiles() // p.warp_tiles} warps a group is {p.threads} threads, over {MAX_THREADS}"
        if problem.G <= p.groups // 2:
            return f"a chunk of {p.groups} groups is more than twice G={problem.G}"
        (hp, wp) = phase_plane(problem)
        if p.rows > 2 * hp or p.cols > 2 * wp:
            return f"a tile of {p.rows}x{p.cols} is more than twice the {hp}x{wp} plane of a stride phase"
        if p.walkers > tiles_of(p, problem):
            return f"{p.walkers} blocks a chunk for {tiles_of(p, problem)} tiles (some would have none)"
        if (refusal := grid_refusal(p, problem, target)):
            return refusal
        shared = shared_bytes(p, problem.dtype.tensor.nbytes)
        if shared > target.shared_optin:
            return f"the weights and windows need {shared} bytes of shared memory"
        return None

    def main_launch(self, p: GwlParams, problem: ConvProblem, target: DeviceTarget, args: Struct) -> Launch:
        return Launch("kf_main", (chunks_of(p, problem), p.walkers, p.phases()), (p.threads, 1, 1), (args,),
                      shared_bytes=shared_bytes(p, problem.dtype.tensor.nbytes))

    def launch_plan(self, p: GwlParams, problem: ConvProblem, target: DeviceTarget) -> LaunchPlan:
        if cl.channel_innermost(problem.layout):
            return super().launch_plan(p, problem, target)
        return transposed_plan(self, p, problem, target)

    def heuristic_score(self, p: GwlParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """In doublings of time: GWL_LEVEL against the implicit-GEMM families (gwl's best ran 1.1-3x faster
        than theirs on every grouped layer measured, strided ones included; bench/NOTES.md 84), less weights
        found by coordinate descent over every point of twelve timed H100 problems (the pick's time over the
        best): 0.1 a halving of the row tiles a warp below the most its accumulator budget allows (B
        fragments shared by fewer matrix steps), 0.05 a doubling of the window over the tile, 0.05 a doubling
        of the groups a block, 0.05 a halving of the warps an SM runs below eight. 1x1 filters GWL_ONE_TAP
        lower: `pw` needs no window, and gwl was not timed against the others there. Two cases where the
        shipped problems' full tunes kept `mma` rank below it: grids that WALKERS_MAX keeps short of one block
        an SM where the problem has the tiles for more (GWL_SHORT_GRID a halving: large G = 1 layers), and
        NGCHW problems the transposing pass does not pay on (small and short sums: `mma`'s own rule,
        `transposed_gain`)."""
        uhb, uwb = p.block_window()
        halo = math.log2(uhb * uwb / (p.rows * p.cols))
        blocks = chunks_of(p, problem) * p.walkers * p.phases()
        warps = min(blocks / target.processors, resident_blocks(p, problem, target)) * p.threads / WARP
        slower = (0.1 * math.log2(most_warp_tiles(p) / p.warp_tiles) + 0.05 * halo + 0.05 * math.log2(p.groups)
                  - 0.05 * math.log2(min(1.0, warps / 8)))
        chunks, tiles = chunks_of(p, problem), tiles_of(p, problem)
        capped = chunks * min(tiles, WALKERS_MAX) * p.phases() / min(target.processors, chunks * tiles * p.phases())
        short_grid = -GWL_SHORT_GRID * math.log2(min(1.0, capped))
        copies = 0.0 if cl.channel_innermost(problem.layout) or transposed_gain(problem) >= 0 else GWL_LEVEL
        return GWL_LEVEL - slower - short_grid - copies - (GWL_ONE_TAP if p.taps() == 1 else 0.0)


def most_warp_tiles(p: GwlParams) -> int:
    """The most row tiles a warp may take: within the accumulator budget, and sharing out the tile's."""
    return max(m for m in (1, 2, 4) if ACC_PER_TILE * m * (p.c // TILE_N) <= MAX_ACC and p.row_tiles() % m == 0)


def resident_blocks(p: GwlParams, problem: ConvProblem, target: DeviceTarget) -> int:
    """Blocks an SM holds at once by shared memory, threads and the SM's block limit (registers are not
    modelled: they are known only once compiled); one where the target does not describe its SMs."""
    shared = shared_bytes(p, problem.dtype.tensor.nbytes)
    return max(1, blocks_per_processor(KernelResources(0, 0, 0, 0, 0), p.threads, shared, target) or 1)


GWL_LEVEL = 12.0
GWL_SHORT_GRID = 8.0  # below mma where the walkers' cap leaves SMs idle (G = 1, C = K = 32, N = 128 at 55x55: mma won)
GWL_ONE_TAP = 14.0  # 1x1 filters: below every other family (pw, direct, mma), unmeasured against them there
# Blocks a processor the walk is sized for, and how far off a point may be: on twelve H100 problems every
# problem's best lay within 1.05x of the best point with chunks x walkers within 2^1.5 of two an SM
# (bench/NOTES.md 84); far fewer blocks leave the SMs idle, far more load the chunk's weights per block.
BLOCKS_PER_PROCESSOR = 2
BLOCKS_REACH = 2**1.5
WALKERS_MIN, WALKERS_MAX = 4, 64  # the catalog's fewest and most walkers (instances/conv_bwd_data_gwl.toml)


def grid_refusal(p: GwlParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
    """Why the grid of `p` is too far from BLOCKS_PER_PROCESSOR blocks an SM, or None. Long grids are refused
    only past the catalog's fewest walkers (many groups keep those), short ones only where twice the walkers
    would still have tiles (and the catalog lists them)."""
    blocks, aim = chunks_of(p, problem) * p.walkers * p.phases(), BLOCKS_PER_PROCESSOR * target.processors
    if blocks > aim * BLOCKS_REACH and p.walkers > WALKERS_MIN:
        return f"{blocks} blocks, over {BLOCKS_REACH:.1f}x {BLOCKS_PER_PROCESSOR} an SM (each loads its chunk's weights)"
    if blocks * BLOCKS_REACH < aim and 2 * p.walkers <= min(tiles_of(p, problem), WALKERS_MAX):
        return f"{blocks} blocks, under 1/{BLOCKS_REACH:.1f} of {BLOCKS_PER_PROCESSOR} an SM (twice the walkers serve)"
    return None
