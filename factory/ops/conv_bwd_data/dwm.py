"""`dwm`: depthwise backward-data (C = K = 1) on matrix instructions (mma.sync), for the layouts whose
planes lie one after another (NGCHW, NGCHW_GKYXC, GNHWC); 2-D, 16-bit data.

For a tile of 16 grad_input rows by 8 * stride_w columns and one filter row, the sums are a GEMM: A holds
the grad_output rows the tap row reaches (a zero row where none does) over 16 columns, B the banded
Toeplitz matrix of the filter row, so the taps cost matrix instructions instead of one FMA each. A warp
takes `depth` planes of one group, loaded 16 bytes a slot all at once and placed into zero-bordered
buffers in shared memory; B is built once a warp. Where `dwp`'s FMAs set its time (5x5 and 7x7 filters)
this runs 0.6-0.8x its time (bench/NOTES.md 66). Filter, stride and dilation are compiled in, and so are
the plane sizes and padding (`plane`), so every index is a constant expression of the lane and the loop
counters: a problem of another plane compiles an instance of its own.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout, conv_out_size
from ..base import Launch, Struct, params_from_suffix
from ..conv.family import MmaSyncRules
from ..conv.shape import CompiledShape, Shape, spell_shape, hw
from .common import BwdDataFamily
from .dwp import DWP_LEVEL
from .dwr import W_CONTIGUOUS, depthwise_refusal

CELLS = frozenset((layout, dtype, 2) for layout in W_CONTIGUOUS for dtype in (DType.FP16, DType.BF16))
WARPS = (1, 2, 4, 8)
DEPTHS = (1, 2, 4, 8)
SLOTS = (1, 2, 4, 8, 12)  # 16-byte line slots a lane holds: the planes of a warp, loaded at once
LANES = 32
K_COLUMNS = 16  # grad_output columns of one A (the instruction's reduction)
ELEMENT_BYTES = 2
GRID_Y_LIMIT = 65535
_PLANE_RE = re.compile(r"i(\d+)x(\d+)p(\d+)x(\d+)x(\d+)x(\d+)")


@dataclass(frozen=True)
class Plane:
    """A compiled-in grad_input plane (H, W) and its padding (top, left, bottom, right)."""

    din: tuple[int, int]
    pad: tuple[int, int]
    pad_end: tuple[int, int]

    def spell(self) -> str:
        return f"i{self.din[0]}x{self.din[1]}p{self.pad[0]}x{self.pad[1]}x{self.pad_end[0]}x{self.pad_end[1]}"

    @classmethod
    def parse(cls, text: str) -> "Plane | None":
        match = _PLANE_RE.fullmatch(text)
        if match is None:
            return None
        v = [int(x) for x in match.groups()]
        return cls((v[0], v[1]), (v[2], v[3]), (v[4], v[5]))

    @classmethod
    def of(cls, problem: ConvProblem) -> "Plane":
        assert problem.pad_right is not None  # filled on construction
        return cls(hw(problem.input), hw(problem.pad), hw(problem.pad_right))

    def dout(self, shape: Shape) -> tuple[int, int]:
        """grad_output's plane for this plane under `shape`."""
        return tuple(  # type: ignore[return-value]
            conv_out_size(size, f, s, before, after, d)
            for size, before, after, f, s, d in zip(self.din, self.pad, self.pad_end, hw(shape.filter),
                                                    hw(shape.stride), hw(shape.dilation)))


@dataclass(frozen=True)
class DwmParams:
    warps: int  # warps a block, each taking `depth` images of the block's group
    depth: int  # planes a warp loads at once and computes in turn
    slots: int  # 16-byte line slots a lane: the smallest count that holds `depth` planes serves a problem
    shape: str  # the compiled-in filter, stride and dilation
    plane: str  # the compiled-in grad_input plane and padding (Plane.spell)

    def __post_init__(self) -> None:
        if self.warps not in WARPS or self.depth not in DEPTHS or self.slots not in SLOTS:
            raise ValueError(f"warps {self.warps}, depth {self.depth}, slots {self.slots} must be in "
                             f"{WARPS}, {DEPTHS}, {SLOTS}")
        shape, plane = Shape.parse(self.shape), Plane.parse(self.plane)
        if shape is None or len(shape.filter) != 2:
            raise ValueError(f"shape {self.shape!r} is not a 2-D k<filter>s<stride>d<dilation>")
        if plane is None or min(plane.dout(shape)) < 1:
            raise ValueError(f"plane {self.plane!r} is not i<H>x<W>p<top>x<left>x<bottom>x<right> with a grad_output")

    @property
    def compiled(self) -> Shape:
        return Shape.checked(self.shape)

    @property
    def compiled_plane(self) -> Plane:
        plane = Plane.parse(self.plane)
        assert plane is not None  # checked on construction
        return plane

    def suffix(self) -> str:
        return f"w{self.warps}_d{self.depth}_l{self.slots}_{self.shape}_{self.plane}"

    def template_values(self) -> dict[str, Any]:
        shape, plane = self.compiled, self.compiled_plane
        tiles_n = math.ceil(plane.din[1] / (8 * shape.stride[-1]))
        values: dict[str, Any] = {"warps": self.warps, "depth": self.depth, "slots": self.slots, "mma_rows": True,
                                  "din_plane": plane.din, "dout_plane": plane.dout(shape), "pad": plane.pad,
                                  "unroll_n": min(tiles_n, 4) if plane.din[0] <= 28 else 1}
        for name in ("filter", "stride", "dilation"):
            values[name] = (1,) + tuple(getattr(shape, name))  # (D, H, W) of a 2-D shape
        return values


@dataclass(frozen=True)
class Buffers:
    """A warp's shared memory for a problem (the template's constants, in Python): `depth` grad_output
    buffers of Ho rows by `pitch` columns (column c at c + hl, zeros around), a zero row, the staged
    grad_input plane, the group's taps."""

    hl: int  # buffer column of grad_output column 0
    reach: int  # the last buffer column a tile's A needs, from the tile's first
    pitch: int
    warp_elements: int
    lines: int  # 16-byte lines a grad_output plane can span

    @property
    def warp_bytes(self) -> int:
        return self.warp_elements * ELEMENT_BYTES


def buffers_of(p: DwmParams, problem: ConvProblem) -> Buffers:
    (fy, fx), (sh, sw), (dh, dw) = hw(p.compiled.filter), hw(p.compiled.stride), hw(p.compiled.dilation)
    (ho, wo), (hi, wi), pw = problem.output, problem.input, problem.pad[-1]
    nw = 8 * sw
    hl = max(0, ((fx - 1) * dw - pw) // sw)  # minus the first grad_output column a tile reaches
    reach = (nw - 1 + pw) // sw + hl
    tiles_n = math.ceil(wi / nw)
    pitch = (math.ceil(max(8 * (tiles_n - 1) + 16, hl + wo) / 8) | 1) * 8
    staged = math.ceil((hi * wi + 8) / 8) * 8
    taps = math.ceil(fy * fx / 8) * 8
    plane_in = ho * wo
    return Buffers(hl, reach, pitch, p.depth * ho * pitch + pitch + staged + taps, (plane_in + 14) // 8)


_SUFFIX_RE = re.compile(
    r"w(?P<warps>\d+)_d(?P<depth>\d+)_l(?P<slots>\d+)_(?P<shape>k[0-9x]+s[0-9x]+d[0-9x]+)_(?P<plane>i[0-9xp]+)")


class Dwm(MmaSyncRules, CompiledShape, BwdDataFamily):
    name = "dwm"
    template = "conv_bwd_data/dwm.hip.j2"
    params_type = DwmParams
    suffix_re = _SUFFIX_RE
    description = ("depthwise (C = K = 1), layouts whose planes lie one after another, 2-D, 16-bit: each plane's "
                   "taps as Toeplitz GEMMs on mma.sync, a warp per few planes of a group held in shared memory; "
                   "filter, stride, dilation, plane sizes and padding compiled in")

    def supported_cells(self) -> frozenset:
        return CELLS

    def problem_values(self, problem: Any) -> dict[str, Any] | None:
        if len(problem.filter) != 2:
            return None
        return {"shape": spell_shape(problem.filter, problem.stride, problem.dilation),
                "plane": Plane.of(problem).spell()}

    def parse_suffix(self, suffix: str) -> Any:
        return params_from_suffix(self.suffix_re, self.params_type, suffix, {"shape": str, "plane": str})

    def cell_allows(self, params: DwmParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return len(params.compiled.filter) == ndim

    def layout_values(self, params: DwmParams, layout: Layout) -> dict[str, Any]:
        return {"planes_by_image": layout is Layout.GNHWC}

    def why_not_here(self, p: DwmParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        refusal = depthwise_refusal(self, p, problem, 0)
        if refusal:
            return refusal
        if p.compiled_plane != Plane.of(problem):
            return f"compiled for plane {p.plane}, problem has {Plane.of(problem).spell()}"
        sw = problem.stride[-1]
        if sw > 2:
            return f"stride {sw} along W: a tile's columns take stride 1 or 2"
        buffers = buffers_of(p, problem)
        if buffers.reach >= K_COLUMNS:
            return (f"a tile of {8 * sw} columns reaches {buffers.reach + 1} grad_output columns, past the "
                    f"{K_COLUMNS} of one matrix instruction")
        needed = p.depth * buffers.lines
        if needed > LANES * p.slots:
            return (f"depth {p.depth}: {needed} 16-byte lines of grad_output exceed {p.slots} a lane "
                    f"({LANES * p.slots} a warp)")
        smaller = [s for s in SLOTS if s < p.slots]
        if smaller and needed <= LANES * smaller[-1]:
            return f"depth {p.depth}: {needed} lines fit {smaller[-1]} slots a lane (that point serves them)"
        if (p.warps - 1) * p.depth >= problem.N:
            return f"{p.warps} warps of {p.depth} planes leave a warp idle with N = {problem.N}"
        shared = p.warps * buffers.warp_bytes
        if shared > target.shared_optin:
            return f"{p.warps} warps need {shared} bytes of shared memory"
        if math.ceil(problem.N / (p.warps * p.depth)) > GRID_Y_LIMIT:
            return f"N = {problem.N} exceeds the grid"
        return None

    def main_launch(self, p: DwmParams, problem: ConvProblem, target: DeviceTarget, args: Struct) -> Launch:
        grid = (problem.G, math.ceil(problem.N / (p.warps * p.depth)), 1)
        shared = p.warps * buffers_of(p, problem).warp_bytes
        return Launch("kf_main", grid, (LANES * p.warps, 1, 1), (args,), shared_bytes=shared)

    def heuristic_score(self, p: DwmParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """In doublings of time against `dwp`'s level, from every dwm and dwp candidate of 22 H100 problems
        (bench/NOTES.md 66). `level_of`: the taps cost matrix instructions, not FMAs. A warp's planes are
        loaded at once, a 16-byte line a lane, in rounds of 32 lines: lanes left without a line cost 0.5 a
        halving of the share that hold one (a 7x7 plane spans 7 lines: depth 4 ran 0.57x depth 1's time),
        and every doubling of depth 0.15 (its planes' sums run in turn). Warps short of the SMs' slots cost
        0.3 a halving."""
        lines = p.depth * buffers_of(p, problem).lines
        fill = lines / (LANES * math.ceil(lines / LANES))  # lanes with a line in the rounds of loads
        warps = problem.G * math.ceil(problem.N / (p.warps * p.depth)) * p.warps
        slots = target.threads_per_processor // LANES * target.processors
        short = max(0.0, math.log2(slots / warps))
        return level_of(p, problem) + 0.5 * math.log2(fill) - 0.15 * math.log2(p.depth) - 0.3 * short


def level_of(p: DwmParams, problem: ConvProblem) -> float:
    """The family's level against dwp's: its best point against dwp's best was 0.05-0.13 doublings faster
    on 3x3 layers of 14x14 planes and 0.32-0.83 faster with 7x7 filters, and its first point scored
    0.56-0.69 too low against dwp's first on 20 of the 22 problems (0.74-1.04 on 28x28 planes): 0.77
    above dwp's level and 0.21 a doubling of taps past 9."""
    taps = math.prod(p.compiled.filter)
    return DWP_LEVEL + 0.77 + 0.21 * max(0.0, math.log2(taps / 9))
