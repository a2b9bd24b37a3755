"""`dwr`: depthwise backward-data (C = K = 1) with register windows; memory bound.

A thread computes a tile of grad_input positions for `vector` groups: `rows` x `run` stride periods
(rows * stride_h by run * stride_w positions, so a tile's taps meet its window the same way wherever it
starts). Each dOut
row that reaches the tile is loaded once into registers and serves every tap that meets it, where
`direct` loads a value once per tap and recomputes each tap's bounds. The problem's filter, stride and
dilation are compiled in (`shape`, spelled as `direct` spells it), so every tap-to-register mapping is
a constant: a tuning point says "problem" and `lookup` fills the shape in, so any filter is served.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, Layout
from ..base import Launch, Struct
from .common import BwdDataFamily, vector_score
from ..conv.shape import CompiledShape, Shape, hw
from .direct import BLOCKS_MAX

# Register budget, in accumulator-sized values per thread: the tile's sums, and the window row of one
# chunk of taps along W (a long filter is taken in chunks).
MAX_SUMS = 64
MAX_WINDOW = 96
GOOD_OUTPUTS = 8  # grad_input positions per thread that measured fastest (tile_score)
HELD_VALUES_FREE = 64  # sums and window values a thread holds before the prior counts their registers
DEPTHWISE_LEVEL = 4.5  # the prior's level of dwr and dws, from which their terms are taken
# Layouts whose W axis is contiguous when C = 1 (all but NHWGC, where groups are innermost).
W_CONTIGUOUS = (Layout.NGCHW, Layout.NGCHW_GKYXC, Layout.GNHWC)
# Thread axes in memory order, innermost first: v = a vector of groups, w / h = tile columns / rows,
# d = input depth, g = group, n = batch (the last one is bounded by the kernel's own test).
ORDERS = {Layout.NHWGC: "vwhdn", Layout.NGCHW: "whdgn", Layout.NGCHW_GKYXC: "whdgn", Layout.GNHWC: "whdng"}


@dataclass(frozen=True)
class TileParams:
    """A depthwise tile point (dwr, dws): threads, a thread's tile in stride periods, the compiled shape."""

    threads: int
    rows: int  # grad_input rows per thread, in stride periods (rows * stride_h positions)
    run: int  # grad_input columns per thread, in stride periods (run * stride_w positions)
    shape: str  # the compiled-in filter, stride and dilation (direct.spell_shape)

    def __post_init__(self) -> None:
        if self.threads % 32 or not 32 <= self.threads <= 1024:
            raise ValueError(f"threads {self.threads} must be whole warps, at most 1024")
        if not (1 <= self.rows <= 8 and 1 <= self.run <= 16):
            raise ValueError(f"tile {self.rows}x{self.run} must be 1-8 rows by 1-16 columns")
        if Shape.parse(self.shape) is None:
            raise ValueError(f"shape {self.shape!r} is not k<filter>s<stride>d<dilation>")

    @property
    def compiled(self) -> Shape:
        return Shape.checked(self.shape)

    def tile(self) -> tuple[int, int]:
        """The grad_input positions of a thread's tile along H and W (template TH, TW)."""
        sh, sw = hw(self.compiled.stride)
        return self.rows * sh, self.run * sw

    def template_values(self) -> dict[str, Any]:
        shape = self.compiled
        values: dict[str, Any] = {"threads": self.threads, "rows": self.rows, "run": self.run}
        return values | shape.template_values()


class WindowRow:
    """A thread's window row in registers (dwr, dwc; the params give `compiled`, `vector` and `tile()`):
    a tile `tile()[1]` positions wide for `vector` groups, the filter's taps along W taken `chunk()` at a
    time so that the row fits the budget."""

    def window(self, chunk: int) -> int:
        """Values a thread holds for one window row when taking `chunk` filter taps along W at a time."""
        sw, dw = self.compiled.stride[-1], self.compiled.dilation[-1]
        return ((self.tile()[1] - 1 + (chunk - 1) * dw + sw - 1) // sw + 1) * self.vector

    def chunk(self) -> int:
        """Filter taps along W taken at a time (template XC): the most whose window row fits the budget
        (at least one; why_not refuses a point where even one does not fit)."""
        fits = [c for c in range(1, self.compiled.filter[-1] + 1) if self.window(c) <= MAX_WINDOW]
        return max(fits, default=1)


@dataclass(frozen=True)
class DwrParams(WindowRow, TileParams):
    vector: int = 1  # consecutive groups per thread (NHWGC only)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.vector not in (1, 2, 4, 8):
            raise ValueError(f"vector {self.vector} must be 1, 2, 4 or 8")

    def suffix(self) -> str:
        return f"t{self.threads}_v{self.vector}_b{self.rows}x{self.run}_{self.shape}"

    def template_values(self) -> dict[str, Any]:
        return super().template_values() | {"vector": self.vector, "chunk": self.chunk()}


_SUFFIX_RE = re.compile(r"t(?P<threads>\d+)_v(?P<vector>\d+)_b(?P<rows>\d+)x(?P<run>\d+)_(?P<shape>[a-z0-9x]+)")


def depthwise_refusal(family: CompiledShape, p: TileParams, problem: ConvProblem, sums: int) -> str | None:
    """Why a depthwise tile point with its shape compiled in (dwr, dws, dwp) cannot serve `problem` whatever
    its layout of work: not depthwise, another filter, stride or dilation, or `sums` a thread past the
    register budget. None when none of these holds."""
    if problem.C != 1 or problem.K != 1:
        return f"depthwise only (C = K = 1), problem has C={problem.C}, K={problem.K}"
    wrong = family.wrong_shape(p.shape, p.compiled, problem)
    if wrong:
        return wrong
    if sums > MAX_SUMS:
        return f"{sums} sums per thread pass the register budget ({MAX_SUMS})"
    return None


class Dwr(CompiledShape, BwdDataFamily):
    name = "dwr"
    template = "conv_bwd_data/dwr.hip.j2"
    params_type = DwrParams
    suffix_re = _SUFFIX_RE
    description = ("depthwise (C = K = 1): a thread per tile of grad_input positions for a vector of groups, "
                   "each dOut row loaded once into registers for every tap; filter, stride, dilation compiled in")

    def cell_allows(self, params: DwrParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        if len(params.compiled.filter) != ndim or (ndim == 1 and params.rows != 1):
            return False
        return params.vector == 1 or layout is Layout.NHWGC

    def why_not_here(self, p: DwrParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        refusal = depthwise_refusal(self, p, problem, math.prod(p.tile()) * p.vector)
        if refusal:
            return refusal
        if problem.G % p.vector:
            return f"vector {p.vector} needs G={problem.G} divisible by it"
        if p.window(1) > MAX_WINDOW:
            return f"a window row of {p.window(1)} values passes the register budget ({MAX_WINDOW})"
        if _threads_needed(p, problem) > BLOCKS_MAX * p.threads:
            return "too many blocks for the grid"
        return None

    def layout_values(self, params: DwrParams, layout: Layout) -> dict[str, Any]:
        return {"order": ORDERS[layout]}

    def main_launch(self, p: DwrParams, problem: ConvProblem, target: DeviceTarget, args: Struct) -> Launch:
        return Launch("kf_main", (math.ceil(_threads_needed(p, problem) / p.threads), 1, 1), (p.threads, 1, 1), (args,))

    def heuristic_score(self, p: DwrParams, problem: ConvProblem, target: DeviceTarget) -> float:
        # Ahead of `direct` on depthwise problems (H100 suite+seed21: the best direct point ran 1.6-17x the
        # best dwr time on all 20 depthwise problems). The terms are in doublings of time (least squares
        # over the 466 dwr times of suite+seed21, each problem's mean taken out).
        score = DEPTHWISE_LEVEL + vector_score(p.vector) + tile_score(p, problem.layout)
        if problem.layout in W_CONTIGUOUS:
            # W contiguous: a warp's threads hold neighbouring tiles of one row, so its loads stride by a
            # tile's width; 0.15 of a doubling a doubling of the run, on top of the tile size.
            score -= 0.15 * math.log2(p.run)
        else:
            score -= lane_weight_cost(p)
        # Fewer threads than the GPU holds hide less latency: 0.2 a halving (1-D N=2 G=168: runs of 16
        # with 0.2 of the resident threads ran 1.73x the time of runs of 4 with 0.78). Counted against a
        # thread per position where that is fewer (direct's), so small problems keep their level.
        most = min(target.resident_threads, math.prod(problem.input) * problem.N * problem.G // p.vector)
        fill = _threads_needed(p, problem) / most
        return score + 0.2 * min(0.0, math.log2(fill)) - abs(p.threads - 256) / 1024


def lane_weight_cost(p: DwrParams) -> float:
    """The prior's cost, in doublings of time, of what an NHWGC thread loads and keeps beyond a 1x8 tile.

    Each lane of a warp holds its own groups, so a tap's weight is a load of its own line, made once per
    tile row the tap serves: a tile narrower than 8 positions pays per weight load it makes per grad_input
    element (0.4 a doubling). Past 64 sums and window values a thread holds fewer threads fit an SM (0.4 a
    doubling). H100 seed 83, fp32 12x12 filter: 1x16 tiles of one group ran 46.7 us, 2x4 tiles of 4
    groups (twice the weight loads of 1x8, 92 values) 300 us. bench/NOTES.md section 55."""
    (fy, fx), (sh, _), (dh, _) = hw(p.compiled.filter), hw(p.compiled.stride), hw(p.compiled.dilation)
    th, tw = p.tile()
    tile_rows_served = sum(1 for r in range(th) for y in range(fy) if (r + (fy - 1 - y) * dh) % sh == 0)
    weight_loads = tile_rows_served * fx / (th * tw)  # per grad_input element
    held = th * tw * p.vector + p.window(p.chunk())
    return (0.4 * max(0.0, math.log2(weight_loads / (fy * fx / sh / GOOD_OUTPUTS)))
            + 0.4 * max(0.0, math.log2(held / HELD_VALUES_FREE)))


def tile_score(p: TileParams, layout: Layout) -> float:
    """The prior's term for a thread's tile (dwr, dws), in doublings of time: about 8 grad_input positions
    a thread. Fewer load more of the window per position kept: 0.3 a halving (least squares, H100
    suite+seed21: dwr 0.31, dws 0.21). More cost where W is contiguous, 0.2 a doubling (dwr 0.24, dws 0.27;
    NGCHW 14x14: dwr 2x8 1.8x the time of 2x2); channels-last dwr tiles showed no such cost (-0.08)."""
    outputs = math.prod(p.tile())
    fewer = max(0.0, math.log2(GOOD_OUTPUTS / outputs))
    more = max(0.0, math.log2(outputs / GOOD_OUTPUTS)) if layout in W_CONTIGUOUS else 0.0
    return -0.3 * fewer - 0.2 * more


def _threads_needed(p: DwrParams, problem: ConvProblem) -> int:
    """Threads of the launch: one per tile per group vector (a tile may start up to stride - 1 early)."""
    (sh, sw), (th, tw) = hw(problem.stride), p.tile()
    hi, wi = hw(problem.input)
    di = problem.input[0] if problem.ndim == 3 else 1
    tiles = math.ceil((hi + sh - 1) / th) * math.ceil((wi + sw - 1) / tw)
    return problem.N * problem.G // p.vector * di * tiles
