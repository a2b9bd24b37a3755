"""`dws`: depthwise backward-data (C = K = 1) staged through shared memory, for layouts whose W axis is
contiguous (NGCHW, NGCHW_GKYXC, GNHWC); 1-D and 2-D.

A block takes a strip of whole grad_input rows of one (n, g) plane, a thread a `rows` x `run` tile
(whole stride periods, as in `dwr`). The dOut rows the strip reaches are copied once into shared
memory, coalesced along W and zero-padded, so a tile's taps read their window without bounds checks and
neighbouring tiles share one copy, where `dwr` loads each tile's window from global memory with a
bounds check per element. A plane row must fit in one block's threads (tiles per row <= threads).

Small planes leave most of a one-plane block idle; a point with `planes` > 1 takes that many whole
planes of consecutive groups a block (their tiles together within the block's threads), copied in one
pass.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, Layout
from ..base import Launch, Struct
from .common import ALL_CELLS, GRID_Y_LIMIT, BwdDataFamily
from ..conv.shape import CompiledShape, hw
from .dwr import DEPTHWISE_LEVEL, W_CONTIGUOUS, TileParams, depthwise_refusal, tile_score

CELLS = frozenset(cell for cell in ALL_CELLS if cell[0] in W_CONTIGUOUS and cell[2] <= 2)
ACC_BYTES = 4  # the window is staged as accumulator values (float or int)
GRID_Z_LIMIT = 65535


@dataclass(frozen=True)
class DwsParams(TileParams):
    planes: int = 1  # (n, g) planes a block takes side by side, each whole (1: a strip of one plane)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.planes not in (1, 2, 4, 8, 16):
            raise ValueError(f"planes {self.planes} must be 1, 2, 4, 8 or 16")

    def suffix(self) -> str:
        planes = f"_p{self.planes}" if self.planes > 1 else ""
        return f"t{self.threads}_b{self.rows}x{self.run}{planes}_{self.shape}"

    def template_values(self) -> dict[str, Any]:
        return super().template_values() | {"planes": self.planes}


@dataclass(frozen=True)
class Strip:
    """How a problem is cut for a point: tiles per row and column, tile rows per block, staged values."""

    tiles_w: int
    tiles_h: int
    strip_rows: int
    window_values: int  # of all the block's planes
    planes: int = 1

    @property
    def strips(self) -> int:
        return math.ceil(self.tiles_h / self.strip_rows)

    def busy(self, threads: int) -> float:
        """The share of a block's threads that hold a tile (a plane shorter than a strip leaves rows idle)."""
        return self.planes * self.tiles_w * min(self.strip_rows, self.tiles_h) / threads


def tile_grid(p: TileParams, problem: ConvProblem) -> tuple[int, int]:
    """Tiles along W and H of one plane, shifted as the templates' tile_shift does so that a tile's window
    starts on a whole output position (dws, dwp)."""
    shape = p.compiled
    (fh, fw), (sh, sw), (dh, dw) = hw(shape.filter), hw(shape.stride), hw(shape.dilation)
    (ph, pw), (hi, wi) = hw(problem.pad_left), hw(problem.input)
    th, tw = p.tile()
    shift_h, shift_w = _shift(ph, (fh - 1) * dh, sh), _shift(pw, (fw - 1) * dw, sw)
    return math.ceil((wi + shift_w) / tw), math.ceil((hi + shift_h) / th)


def window_extent(p: TileParams, tile_rows: int, tiles_w: int) -> tuple[int, int]:
    """grad_output rows and columns that `tile_rows` rows of `tiles_w` tiles reach (their staged window)."""
    shape = p.compiled
    (fh, fw), (sh, sw), (dh, dw) = hw(shape.filter), hw(shape.stride), hw(shape.dilation)
    th, tw = p.tile()
    rows = (tile_rows - 1) * (th // sh) + (th - 1 + (fh - 1) * dh) // sh + 1
    cols = (tiles_w - 1) * (tw // sw) + (tw - 1 + (fw - 1) * dw) // sw + 1
    return rows, cols


def strip_of(p: DwsParams, problem: ConvProblem) -> Strip | None:
    """The template's strip arithmetic, in Python; None when a plane row has more tiles than threads, or
    (planes > 1) when the block's planes, each whole, have more tiles than threads."""
    tiles_w, tiles_h = tile_grid(p, problem)
    if tiles_w > p.threads or (p.planes > 1 and p.planes * tiles_w * tiles_h > p.threads):
        return None
    strip_rows = tiles_h if p.planes > 1 else p.threads // tiles_w
    rows, cols = window_extent(p, strip_rows, tiles_w)
    return Strip(tiles_w, tiles_h, strip_rows, p.planes * rows * cols, p.planes)


def _shift(pad: int, reach: int, stride: int) -> int:
    return (stride - (reach - pad) % stride) % stride


_SUFFIX_RE = re.compile(r"t(?P<threads>\d+)_b(?P<rows>\d+)x(?P<run>\d+)(?:_p(?P<planes>\d+))?_(?P<shape>[a-z0-9x]+)")


class Dws(CompiledShape, BwdDataFamily):
    name = "dws"
    template = "conv_bwd_data/dws.hip.j2"
    params_type = DwsParams
    suffix_re = _SUFFIX_RE
    description = ("depthwise (C = K = 1), W-contiguous layouts, 1-D/2-D: a block per strip of plane rows whose "
                   "grad_output window is staged once in shared memory; filter, stride, dilation compiled in")

    def supported_cells(self) -> frozenset:
        return CELLS

    def cell_allows(self, params: DwsParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return len(params.compiled.filter) == ndim and (ndim == 2 or params.rows == 1)

    def why_not_here(self, p: DwsParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        refusal = depthwise_refusal(self, p, problem, math.prod(p.tile()))
        if refusal:
            return refusal
        strip = strip_of(p, problem)
        if strip is None and p.planes > 1:
            return f"{p.planes} whole planes need more tiles than the block's {p.threads} threads"
        if strip is None:
            return f"a plane row needs more tiles than the block's {p.threads} threads"
        if p.planes > problem.G:
            return f"{p.planes} planes a block for G={problem.G} groups"
        if strip.window_values * ACC_BYTES > target.shared_optin:
            return f"the strip's window needs {strip.window_values * ACC_BYTES} bytes of shared memory"
        if problem.G > GRID_Y_LIMIT or problem.N > GRID_Z_LIMIT:
            return f"G={problem.G} or N={problem.N} exceeds the grid's {GRID_Y_LIMIT}"
        return None

    def main_launch(self, p: DwsParams, problem: ConvProblem, target: DeviceTarget, args: Struct) -> Launch:
        strip = strip_of(p, problem)
        assert strip is not None  # why_not_here refused it otherwise
        return Launch("kf_main", (strip.strips, math.ceil(problem.G / p.planes), problem.N), (p.threads, 1, 1), (args,),
                      shared_bytes=strip.window_values * ACC_BYTES)

    def heuristic_score(self, p: DwsParams, problem: ConvProblem, target: DeviceTarget) -> float:
        strip = strip_of(p, problem)
        assert strip is not None  # why_not_here refused it otherwise
        # Against dwr: the staging round trip (copy, barrier) costs 0.7 of a doubling, and a staged dOut row
        # serves every filter row of the strip's tiles where dwr re-loads it per tile row it reaches, 0.35
        # a doubling of filter rows back. H100 suite+seed21, best dws over best dwr: 1-D 1.28-2.03x (all 3),
        # 3x3 0.98-1.75x (1.44-1.75x on 8x8 and 14x14 planes), 7x7 0.74x, 10x10 0.90x.
        staging = 0.35 * math.log2(hw(p.compiled.filter)[0]) - 0.7
        score = DEPTHWISE_LEVEL + staging + tile_score(p, problem.layout)
        # Threads past the plane's tiles idle: 0.6 of a doubling of time a halving of the busy share (least
        # squares over the 137 dws times of suite+seed21; NGCHW 8x8 and 14x14: a tile in a 256-thread block,
        # half as busy, ran 1.57-1.65x the time of the 128-thread block). Only once the grid fills the
        # SMs: with 64 blocks (N=1 G=64) the same halving changed no time (3 pairs, within 3 %).
        blocks = strip.strips * math.ceil(problem.G / p.planes) * problem.N
        idle = 0.6 * math.log2(strip.busy(p.threads)) if blocks >= target.processors else 0.0
        # Several planes a block fill it, but gain less than its busy share says: 0.2 of a doubling back a
        # doubling of planes (H100, 18 NGCHW layers of 7x7-28x28 planes, bench/NOTES.md 58: the busy term
        # alone predicted 0.84-1.14 doublings for 8 planes, 0.08-0.77 were measured).
        planes = 0.2 * math.log2(p.planes)
        return score + idle - planes - abs(p.threads - 256) / 1024
