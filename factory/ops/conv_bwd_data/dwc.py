"""`dwc`: depthwise backward-data (C = K = 1) in channels-last (NHWGC), 1-D and 2-D; memory bound.

A block takes a tile of grad_input positions of one image for a chunk of consecutive groups and copies
the grad_output window the tile reaches into shared memory once, up to 16 bytes of groups a load, with
the chunk's taps as floats beside it. Its threads then compute sub-tiles of positions for a vector of
groups each from shared memory, as `dwr`'s threads do from global memory: where a `dwr` thread reads
each window row of its tile from the cache once per tile row and loads each weight separately, here the
window is read from DRAM once a block and a tap's weights for a vector of groups in one shared load.
Filter, stride and dilation are compiled in (`shape`), so every tap-to-window mapping is a constant.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout
from ..base import Launch, Struct
from ..conv.bank_pitch import ThreadTiles, conflict_free_pitch, tile_point_fits
from ..conv.shape import CompiledShape, Shape, hw
from .common import BwdDataFamily
from .dwr import DEPTHWISE_LEVEL, MAX_WINDOW, WindowRow, depthwise_refusal

CELLS = frozenset((Layout.NHWGC, dtype, ndim) for dtype in (DType.FP16, DType.BF16, DType.FP32) for ndim in (1, 2))
BATCH_MAX = 8  # window loads a thread keeps in flight before storing them
DWC_LEVEL = DEPTHWISE_LEVEL + 1.0  # the prior's level, against dwr's (bench/NOTES.md 68)


@dataclass(frozen=True)
class DwcParams(WindowRow):
    threads: int
    vector: int  # consecutive groups a thread (one shared or global access)
    cv: int  # group vectors a block: the block's chunk is cv * vector groups
    across: int  # thread tiles of a block along W (the rest of the threads go along H)
    rows: int  # a thread's grad_input rows, in stride periods
    run: int  # a thread's grad_input columns, in stride periods
    shape: str  # the compiled-in filter, stride and dilation

    def __post_init__(self) -> None:
        if self.vector not in (4, 8) or self.cv not in (4, 8, 16):
            raise ValueError(f"vector {self.vector} must be 4 or 8 and cv {self.cv} 4, 8 or 16")
        if self.threads not in (64, 128, 256, 512) or self.threads % (self.cv * self.across):
            raise ValueError(f"threads {self.threads} must be 64-512 and a multiple of cv x across "
                             f"({self.cv} x {self.across})")
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

    def tile(self) -> tuple[int, int]:
        """A thread's grad_input positions along H and W."""
        (sh, sw) = hw(self.compiled.stride)
        return self.rows * sh, self.run * sw

    def block_tile(self) -> tuple[int, int]:
        th, tw = self.tile()
        return self.across_h * th, self.across * tw

    def block_window(self) -> tuple[int, int]:
        """grad_output rows and columns a block's tile reaches (the shared window)."""
        (fy, fx), (sh, sw), (dh, dw) = hw(self.compiled.filter), hw(self.compiled.stride), hw(self.compiled.dilation)
        bh, bw = self.block_tile()
        return (bh - 1 + (fy - 1) * dh) // sh + 1, (bw - 1 + (fx - 1) * dw) // sw + 1

    def sums(self) -> int:
        return math.prod(self.tile()) * self.vector

    def template_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {"vector": self.vector, "cv": self.cv, "across_h": self.across_h,
                                  "across_w": self.across, "rows": self.rows, "run": self.run, "chunk": self.chunk()}
        return values | self.compiled.template_values()

    def suffix(self) -> str:
        return f"t{self.threads}_v{self.vector}_c{self.cv}_a{self.across}_b{self.rows}x{self.run}_{self.shape}"


@functools.lru_cache(maxsize=None)
def pitch_of(p: DwcParams, element_bytes: int) -> int:
    """The window's row pitch in elements: at least a row's columns, free of bank conflicts for the
    threads' reads of one step (a thread tile is `rows` window rows and `run` positions of the chunk)."""
    _, uwb = p.block_window()
    cb = p.cv * p.vector
    tiles = ThreadTiles(p.threads, p.cv, p.vector, p.across_h, row_step=p.rows, col_step=p.run * cb)
    return conflict_free_pitch(tiles, cb * uwb, element_bytes)


def shared_bytes(p: DwcParams, element_bytes: int) -> int:
    uhb, _ = p.block_window()
    window = math.ceil(uhb * pitch_of(p, element_bytes) * element_bytes / 16) * 16
    return window + math.prod(p.compiled.filter) * p.cv * p.vector * 4


def loads_a_thread(p: DwcParams) -> int:
    uhb, uwb = p.block_window()
    return math.ceil(uhb * uwb * p.cv / p.threads)


_SUFFIX_RE = re.compile(r"t(?P<threads>\d+)_v(?P<vector>\d+)_c(?P<cv>\d+)_a(?P<across>\d+)_b(?P<rows>\d+)x(?P<run>\d+)"
                        r"_(?P<shape>k[0-9x]+s[0-9x]+d[0-9x]+)")


class Dwc(CompiledShape, BwdDataFamily):
    name = "dwc"
    template = "conv_bwd_data/dwc.hip.j2"
    params_type = DwcParams
    suffix_re = _SUFFIX_RE
    description = ("depthwise (C = K = 1), channels-last, 1-D/2-D: a block per tile of positions and chunk of "
                   "groups, the grad_output window copied into shared memory once; filter, stride, dilation "
                   "compiled in")

    def supported_cells(self) -> frozenset:
        return CELLS

    def cell_allows(self, params: DwcParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return tile_point_fits(params, dtype.tensor.nbytes, ndim)

    def template_values(self, params: DwcParams, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        values = super().template_values(params, layout, dtype, ndim)
        return values | {"pitch": pitch_of(params, dtype.tensor.nbytes),
                         "batch": min(BATCH_MAX, loads_a_thread(params))}

    def why_not_here(self, p: DwcParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        refusal = depthwise_refusal(self, p, problem, p.sums())
        if refusal:
            return refusal
        if problem.G % p.vector:
            return f"vector {p.vector} needs G={problem.G} divisible by it"
        if problem.G <= p.cv * p.vector // 2:
            return f"a chunk of {p.cv * p.vector} groups is more than twice G={problem.G}"
        if p.window(1) > MAX_WINDOW:
            return f"a window row of {p.window(1)} values passes the register budget ({MAX_WINDOW})"
        (bh, bw), (hi, wi) = p.block_tile(), hw(problem.input)
        if bh > 2 * hi or bw > 2 * wi:
            return f"a block tile of {bh}x{bw} is more than twice the {hi}x{wi} plane (half its threads idle)"
        shared = shared_bytes(p, problem.dtype.tensor.nbytes)
        if shared > target.shared_optin:
            return f"the window and taps need {shared} bytes of shared memory"
        if _items(p, problem) >= 2**31:
            return "too many tiles for the grid"
        return None

    def main_launch(self, p: DwcParams, problem: ConvProblem, target: DeviceTarget, args: Struct) -> Launch:
        return Launch("kf_main", (_items(p, problem), 1, 1), (p.threads, 1, 1), (args,),
                      shared_bytes=shared_bytes(p, problem.dtype.tensor.nbytes))

    def heuristic_score(self, p: DwcParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """In doublings of time against `dwr`'s level, least squares over every point of 28 tuned H100
        problems (bench/NOTES.md 68): a block's tile past the plane costs 0.67 a halving of the share it
        covers, and the window's halo 0.35 a doubling of the grad_output positions it loads per grad_input
        position (short tiles, long filters)."""
        return DWC_LEVEL + 0.67 * math.log2(plane_cover(p, problem)) - 0.35 * math.log2(halo_loads(p, problem))


def plane_cover(p: DwcParams, problem: ConvProblem) -> float:
    """The share of the block tiles' positions that lie in the plane."""
    (bh, bw), (hi, wi) = p.block_tile(), hw(problem.input)
    return hi * wi / (_tiles(p, problem) * bh * bw)


def halo_loads(p: DwcParams, problem: ConvProblem) -> float:
    """grad_output positions a block loads per grad_output position its tile needs (1 without a halo)."""
    (uhb, uwb), (bh, bw), (sh, sw) = p.block_window(), p.block_tile(), hw(problem.stride)
    return uhb * uwb * sh * sw / (bh * bw)


def _tiles(p: DwcParams, problem: ConvProblem) -> int:
    """Block tiles of a plane (a tile may start up to stride - 1 positions early)."""
    (sh, sw), (bh, bw), (hi, wi) = hw(problem.stride), p.block_tile(), hw(problem.input)
    return math.ceil((hi + sh - 1) / bh) * math.ceil((wi + sw - 1) / bw)


def _items(p: DwcParams, problem: ConvProblem) -> int:
    """Blocks of the launch: one per tile, chunk of groups and image."""
    return _tiles(p, problem) * math.ceil(problem.G / (p.cv * p.vector)) * problem.N
