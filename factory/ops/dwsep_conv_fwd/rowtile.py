"""`rowtile`: the fused forward for channels-last layers whose every input channel fits one block
(templates/dwsep_conv_fwd/rowtile.hip.j2).

`fused` loops over chunks of input channels, a thread computing a position's depthwise outputs tap by tap, and
on large-spatial, narrow layers (MobileNet's first blocks: mnv1_b64, C = 64, K = 128 at 112x112) it is bound
by instruction issue at a quarter of the DRAM floor (bench/NOTES.md §36). Here a tile is a run of positions
along one output row with every channel: a thread computes 16 bytes of channels at a strip of positions
along W, each input column of a filter row loaded and widened once for the strip; the tile's depthwise
outputs become the GEMM's A in shared memory, the block's pointwise weights (loaded once, the whole
reduction) its B, one pass of mma.sync, and the output tile leaves 16 bytes a thread. Filter, stride,
dilation and C are compiled in (C rounded up to the instruction's depth is the reduction). fp16 / bf16; C a
multiple of 8. Points differ also in how many blocks an SM their launch bounds ask for (`blocks_per_sm`,
`_o3` / `_o4` in names): more resident warps to hide the tile's latencies, fewer registers a thread.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import DType, Layout
from ..base import Family, Launch, LaunchPlan, params_from_suffix
from ..conv import cpp_type
from ..conv import layouts as cl
from ..conv.family import LANES, MMA_K, MMA_M, MMA_N, MmaSyncRules
from ..conv.shape import CompiledShape, Shape
from ..conv.warpgroups import OPERAND_BYTES
from .fused import GRID_Y_LIMIT, INT32_LIMIT, dwsep_args
from .problem import DwsepProblem
from .twopass_depthwise import redundant_strip_reason

CELLS = frozenset((Layout.NHWGC, dtype, ndim) for dtype in (DType.FP16, DType.BF16) for ndim in (1, 2, 3))
CHUNK = 8  # channels of a depthwise thread: 16 bytes
DEPTH = MMA_K  # the instruction's reduction depth (mma.sync m16n8k16): C is rounded up to it
FP32_BYTES = 4
BLOCKS_PER_SM = (2, 3, 4)  # what launch bounds may ask: a 256-thread block's registers capped at 128, 80, 64 a thread
DEFAULT_BLOCKS_PER_SM = 2  # unnamed in suffixes


@dataclass(frozen=True)
class RowtileParams:
    block_m: int  # output positions along one row a tile takes
    block_n: int  # output channels a block takes
    warps_m: int
    warps_n: int
    strip: int  # positions along W a depthwise thread computes (a filter row's inputs loaded once for them)
    channels: int  # the problem's C, compiled in (a multiple of CHUNK); rounded up to DEPTH, the GEMM's whole reduction
    shape: str  # the depthwise filter, stride and dilation, compiled in (conv.shape.spell_shape)
    blocks_per_sm: int = DEFAULT_BLOCKS_PER_SM  # resident blocks an SM the launch bounds ask for, and the wave's size

    def __post_init__(self) -> None:
        if self.block_m % (self.warps_m * MMA_M) or self.block_n % (self.warps_n * MMA_N):
            raise ValueError(f"block {self.block_m}x{self.block_n} does not split into {self.warps_m}x{self.warps_n} "
                             f"warp tiles of whole {MMA_M}x{MMA_N} instructions")
        if self.strip < 1 or self.block_m % self.strip:
            raise ValueError(f"strip={self.strip} must divide block_m={self.block_m}")
        if self.channels < CHUNK or self.channels % CHUNK:
            raise ValueError(f"C={self.channels} is not a multiple of {CHUNK}: rowtile reads a position's channels "
                             f"16 bytes at a time (twopass and fused serve any C)")
        if Shape.parse(self.shape) is None:
            raise ValueError(f"shape {self.shape!r} is not k<filter>s<stride>d<dilation>")
        if self.blocks_per_sm not in BLOCKS_PER_SM:
            raise ValueError(f"blocks_per_sm={self.blocks_per_sm} must be one of {BLOCKS_PER_SM}")

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * LANES

    @property
    def compiled(self) -> Shape:
        return Shape.checked(self.shape)

    def shared_bytes(self) -> int:
        """A [block_m][channels] and B [block_n][channels] (rows padded by 16 bytes, igemm.h Config), the
        staged output tile [block_m][block_n + 8], then fp32: the depthwise weights [taps][channels], their
        biases [channels] and the block's pointwise biases [block_n]."""
        pad = 16 // OPERAND_BYTES
        width = reduction_width(self.channels)
        operands = (self.block_m + self.block_n) * (width + pad) + self.block_m * (self.block_n + pad)
        floats = (math.prod(self.compiled.filter) + 1) * width + self.block_n
        return operands * OPERAND_BYTES + floats * FP32_BYTES

    def suffix(self) -> str:
        blocks = f"_o{self.blocks_per_sm}" if self.blocks_per_sm != DEFAULT_BLOCKS_PER_SM else ""
        return (f"b{self.block_m}x{self.block_n}_w{self.warps_m}x{self.warps_n}_r{self.strip}{blocks}_c{self.channels}"
                f"_{self.shape}")

    def template_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "block_m": self.block_m, "block_n": self.block_n, "warps_m": self.warps_m, "warps_n": self.warps_n,
            "threads": self.threads, "strip": self.strip, "channels": self.channels,
            "min_blocks": max(1, self.blocks_per_sm * 256 // self.threads)}
        for name in ("filter", "stride", "dilation"):
            values[name] = cl.pad_to_3d(getattr(self.compiled, name), 1)  # (D, H, W)
        return values


_SUFFIX_RE = re.compile(r"b(?P<block_m>\d+)x(?P<block_n>\d+)_w(?P<warps_m>\d+)x(?P<warps_n>\d+)_r(?P<strip>\d+)"
                        r"(?:_o(?P<blocks_per_sm>\d+))?_c(?P<channels>\d+)_(?P<shape>k[0-9x]+s[0-9x]+d[0-9x]+)")


def reduction_width(C: int) -> int:
    """C rounded up to the instruction's depth: the GEMM's reduction, whose channels from C on are zeros."""
    return math.ceil(C / DEPTH) * DEPTH


class Rowtile(MmaSyncRules, CompiledShape, Family[RowtileParams, DwsepProblem]):
    name = "rowtile"
    template = "dwsep_conv_fwd/rowtile.hip.j2"
    params_type = RowtileParams
    suffix_re = _SUFFIX_RE
    description = ("channels-last, every input channel in one block: a tile of positions along one row, depthwise "
                   "strips along W into shared memory, one mma.sync pass over all of C; filter and C compiled in; "
                   "fp16, bf16, C a multiple of 8")

    def supported_cells(self) -> frozenset[tuple[Layout, DType, int]]:
        return CELLS

    def problem_values(self, problem: DwsepProblem) -> dict[str, Any]:
        return {**super().problem_values(problem), "channels": problem.C}

    def parse_suffix(self, suffix: str) -> RowtileParams | None:
        return params_from_suffix(self.suffix_re, RowtileParams, suffix, {"shape": str})

    def cell_allows(self, params: RowtileParams, layout: Layout, dtype: DType, ndim: int) -> bool:
        return len(params.compiled.filter) == ndim

    def why_not(self, p: RowtileParams, problem: DwsepProblem, target: DeviceTarget) -> str | None:
        wrong = self.wrong_shape(p.shape, p.compiled, problem)
        if wrong:
            return wrong
        if problem.C % CHUNK:
            return f"C={problem.C} is not a multiple of {CHUNK} (a depthwise thread's 16-byte chunk)"
        if p.channels != problem.C:
            return f"compiled for C={p.channels}, problem has C={problem.C}"
        refused = redundant_strip_reason(p.strip, problem)
        if refused:
            return refused
        if problem.output[-1] <= p.block_m // 4:
            return (f"the output's rows are {problem.output[-1]} positions long: a tile of {p.block_m} along one "
                    "would leave three quarters of it idle")
        largest = max(problem.N * problem.C * math.prod(problem.input), problem.positions * problem.K)
        if largest > INT32_LIMIT:
            return "a tensor has 2**31 elements or more; the kernel indexes its channels with 32-bit integers"
        if math.ceil(problem.K / p.block_n) > GRID_Y_LIMIT:
            return f"K={problem.K} needs more than {GRID_Y_LIMIT} channel tiles"
        shared = p.shared_bytes()
        if shared > target.shared_optin:
            return f"needs {shared} bytes of shared memory, over the {target.shared_optin} of {target.arch}"
        fitting = target.blocks_by_shared(shared)
        if p.blocks_per_sm > DEFAULT_BLOCKS_PER_SM and fitting is not None and fitting < p.blocks_per_sm:
            return (f"{p.blocks_per_sm} blocks of {shared} bytes of shared memory do not fit an SM of {target.arch}: "
                    "asking for them would only cap the registers")
        return None

    def template_values(self, params: RowtileParams, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        return params.template_values() | {"tin": cpp_type(dtype.tensor)}

    def launch_plan(self, p: RowtileParams, problem: DwsepProblem, target: DeviceTarget) -> LaunchPlan:
        grid = (_blocks(p, problem, target), math.ceil(problem.K / p.block_n), 1)
        return LaunchPlan((Launch("kf_main", grid, (p.threads, 1, 1), (dwsep_args(problem),),
                                  shared_bytes=p.shared_bytes()),))

    def heuristic_score(self, p: RowtileParams, problem: DwsepProblem, target: DeviceTarget) -> float:
        """Above every other family's point (their scores stay within +-7) where `preferred` holds, below them
        elsewhere; within the family: the fewest channel tiles (each recomputes the depthwise stage), then the
        narrower block_n, the share of the tiles' positions used, block_m 128 where both use a row alike (on
        the H200 it won 25 of 29 such pairs), the preferred strip (`preferred_strip`), warps 2x4, and then
        the blocks an SM (`blocks_preference`).

        On the H200 (bench/NOTES.md 94; the shipped channels-last layers rowtile serves, halves fit and
        heldout, every candidate timed) rowtile won 37 of 62 layers, up to 2.6x the best other family."""
        tiles_n = math.ceil(problem.K / p.block_n)
        used_n = problem.K / (tiles_n * p.block_n)
        positions = problem.output[-1]
        used_m = positions / (math.ceil(positions / p.block_m) * p.block_m)
        level = ROWTILE_LEVEL if preferred(problem) else -ROWTILE_LEVEL
        return (level - 0.5 * math.log2(tiles_n) + 0.3 * used_n + 0.5 * used_m + 0.1 * (p.block_m == 128)
                + 0.2 * (p.strip == preferred_strip(p, problem)) + 0.01 * (p.warps_m == 2)
                + blocks_preference(p.blocks_per_sm, problem))


ROWTILE_LEVEL = 10.0
# Where rowtile loses (H200, NOTES 94): every channel tile recomputes the depthwise stage over all of C, so a
# layer whose C x channel tiles reaches RECOMPUTE_LIMIT goes to twopass (C = 352-592 at K = 200-552 lost
# 1.1-4.8x); rows much shorter than a tile waste the GEMM's positions, which costs where the pointwise stage
# outweighs the taps (SHORT_ROW_TAPS_PER_K), and under C = NARROW_C on rows shorter than 64 a tile's work is too
# small for its fixed cost (C = 16-24 on rows of 17-29: 1.1-2.5x behind fused; on rows of 66-88 rowtile won).
RECOMPUTE_LIMIT = 1000
# Where the output has rows, already from two channel tiles where C x taps passes RECOMPUTE_ROWS_WORK: over the
# H200's ten fully tuned dwsep DBs (bench/NOTES.md 107) rowtile's best ran 0.41-0.97x the best other family on 16
# of 18 such layers from C x taps 1296 (C = 288, K = 224 at 33x33 7x7: 445 against twopass's 182 µs). The two it
# won had under FEW_POSITIONS output positions (1456 and 2304: 1.15-1.19x), where one launch beats twopass's two
# whatever it recomputes; the fewest among the losers had 3456. Below, rowtile lost on 8 of 12 too, but the family
# ranked next there (fused, under WIDE_WORK) did worse still for the prior's first pick (C = 48 at 25 taps, C x taps
# 1200: rowtile 1.09x the best, fused 1.38x): the threshold sits between 1200 and 1296, fitted on those DBs.
# Long 1-D rows keep rowtile (1.12-1.31x at two or three tiles).
RECOMPUTE_ROWS_WORK = 1250
FEW_POSITIONS = 3072
SHORT_ROW_USE = 0.5
SHORT_ROW_TAPS_PER_K = 0.1
NARROW_C = 32
PREFERRED_STRIP_UNITS = 128  # depthwise work items (strips x chunks) of a tile under which a strip of 2 beats 4


# Blocks an SM (H200, NOTES 96): three beside two ran 3x3 layers' points 1.05-1.25x faster (C = 16-80, every
# tile but 128x128, whose 64 accumulators a thread spill under 80 registers: the catalog leaves it at two);
# on 21-25 taps two stayed 1.1-1.4x ahead (the strip's inputs need the registers). Four, strips of 2 only
# (strips of 4 spill 0.5 KB under 64 registers), was within 4 % of three either way.
SHORT_FILTER_TAPS = 9
BLOCKS_STEP = 0.05  # under every within-family term above: it orders a point and its twins only


def blocks_preference(blocks_per_sm: int, problem: DwsepProblem) -> float:
    """Three blocks an SM just above two on short filters and just below on long ones; four under both."""
    if blocks_per_sm == 3:
        return BLOCKS_STEP if math.prod(problem.filter) <= SHORT_FILTER_TAPS else -BLOCKS_STEP
    return -2 * BLOCKS_STEP if blocks_per_sm == 4 else 0.0


def _channel_tiles(problem: DwsepProblem) -> int:
    return 1 if problem.K <= 64 else math.ceil(problem.K / 128)


def preferred(problem: DwsepProblem) -> bool:
    """Whether rowtile's points rank above the other families' on this layer (see ROWTILE_LEVEL's notes)."""
    positions = problem.output[-1]
    if problem.C * _channel_tiles(problem) >= RECOMPUTE_LIMIT or (problem.C < NARROW_C and positions < 64):
        return False
    recomputed = problem.C * math.prod(problem.filter)  # a position's depthwise work, done again in every channel tile
    if (problem.has_rows and _channel_tiles(problem) > 1 and recomputed > RECOMPUTE_ROWS_WORK
            and problem.positions >= FEW_POSITIONS):
        return False
    used = positions / (math.ceil(positions / 64) * 64) if positions < 128 else 1.0
    return used >= SHORT_ROW_USE or math.prod(problem.filter) * used / problem.K >= SHORT_ROW_TAPS_PER_K


def preferred_strip(p: RowtileParams, problem: DwsepProblem) -> int:
    """4, unless a tile would then hold fewer than PREFERRED_STRIP_UNITS strips x 16-byte chunks (short rows,
    narrow C): then 2, which gives the block's threads twice the items."""
    strips = math.ceil(min(problem.output[-1], p.block_m) / 4)
    return 4 if strips * (problem.C // CHUNK) >= PREFERRED_STRIP_UNITS else 2


def _tiles(p: RowtileParams, problem: DwsepProblem) -> int:
    """Tiles of a channel tile: every output row's runs of block_m positions."""
    rows = problem.N * math.prod(problem.output[:-1])
    return rows * math.ceil(problem.output[-1] / p.block_m)


def _blocks(p: RowtileParams, problem: DwsepProblem, target: DeviceTarget) -> int:
    """One wave of resident blocks (at most the point's blocks_per_sm an SM, fewer where shared memory allows
    fewer), each walking the tiles gridDim.x apart with its weights loaded once; never more blocks than tiles."""
    fitting = target.blocks_by_shared(p.shared_bytes())
    per_sm = p.blocks_per_sm if fitting is None else max(1, min(p.blocks_per_sm, fitting))
    tiles_n = math.ceil(problem.K / p.block_n)
    return max(1, min(_tiles(p, problem), math.ceil(per_sm * target.processors / tiles_n)))
