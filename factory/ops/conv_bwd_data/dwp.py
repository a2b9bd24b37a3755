"""`dwp`: depthwise backward-data (C = K = 1) on whole planes copied 16 bytes at a time, for the layouts
whose planes lie one after another (NGCHW, NGCHW_GKYXC, GNHWC); 1-D and 2-D.

Both tensors are arrays of N * G planes. A block takes `planes` consecutive ones, a contiguous run of
each tensor: the dOut run is copied into zero-padded windows in shared memory by 16-byte loads, the
planes' weights are staged beside it, every plane's `rows` x `run` tiles (stride periods, as in `dwr`)
are computed into a staged dIn run, and that run is written back by 16-byte stores. `dws` stages the
same windows element by element and gives each tile a thread of its own; on small planes its copies
and its idle threads, not DRAM, set its time (bench/NOTES.md 58, 62).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, Layout
from ..base import Launch, Struct
from ..conv.shape import CompiledShape, hw
from .common import ALL_CELLS, BwdDataFamily, result_scalar
from .dwr import DEPTHWISE_LEVEL, W_CONTIGUOUS, TileParams, depthwise_refusal
from .dws import tile_grid, window_extent

CELLS = frozenset(cell for cell in ALL_CELLS if cell[0] in W_CONTIGUOUS and cell[2] <= 2)
ACC_BYTES = 4  # weights are staged as accumulator values (float or int); windows as the data's own
GRID_X_LIMIT = 2**31 - 1
PLANES = (2, 4, 8, 16, 32)
RESIDENT = (0, 2, 4, 8)
# The level against dwr and dws: +0 to +0.8 picked alike on the 26 fit problems and seed 109 (NOTES 62).
DWP_LEVEL = DEPTHWISE_LEVEL + 0.3


@dataclass(frozen=True)
class DwpParams(TileParams):
    planes: int = 8  # consecutive planes a block takes
    # 0: a block per run. k: k blocks an SM (at most what fits) that take run after run, the next run's
    # grad_output copied in (cp.async on sm_80+) while this run's sums are computed straight from the
    # copied planes, edges masked.
    resident: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.planes not in PLANES:
            raise ValueError(f"planes {self.planes} must be one of {PLANES}")
        if self.resident not in RESIDENT:
            raise ValueError(f"resident {self.resident} must be one of {RESIDENT} (0: a block per run)")

    def suffix(self) -> str:
        resident = f"_r{self.resident}" if self.resident else ""
        return f"t{self.threads}_b{self.rows}x{self.run}_p{self.planes}_{self.shape}{resident}"

    def template_values(self) -> dict[str, Any]:
        return super().template_values() | {"planes": self.planes, "resident": self.resident > 0}


@dataclass(frozen=True)
class Staging:
    """How a problem's planes are cut for a point (the template's arithmetic, in Python)."""

    tiles: int  # tiles of one plane
    window_values: int  # staged dOut values of one plane, halo included
    # windows (the data's type; resident blocks: two buffers of raw planes instead), weights (accumulator
    # values), then the staged dIn run
    shared_bytes: int

    def tile_trips(self, p: DwpParams) -> int:
        """Tiles a thread computes in turn."""
        return math.ceil(p.planes * self.tiles / p.threads)

    def busy(self, p: DwpParams) -> float:
        """The share of the block's thread-trips that hold a tile."""
        return p.planes * self.tiles / (self.tile_trips(p) * p.threads)


def staging_of(p: DwpParams, problem: ConvProblem) -> Staging:
    tiles_w, tiles_h = tile_grid(p, problem)
    rows, cols = window_extent(p, tiles_h, tiles_w)
    fh, fw = hw(p.compiled.filter)
    values, buffers = (math.prod(problem.output), 2) if p.resident else (rows * cols, 1)
    windows = buffers * math.ceil(p.planes * values * problem.dtype.tensor.nbytes / 16) * 16
    staged = windows + math.ceil(p.planes * fh * fw * ACC_BYTES / 16) * 16
    out_bytes = result_scalar(problem.dtype).nbytes
    return Staging(tiles_w * tiles_h, rows * cols, staged + p.planes * math.prod(problem.input) * out_bytes)


_SUFFIX_RE = re.compile(
    r"t(?P<threads>\d+)_b(?P<rows>\d+)x(?P<run>\d+)_p(?P<planes>\d+)_(?P<shape>[a-z0-9x]+?)(?:_r(?P<resident>\d+))?")


class Dwp(CompiledShape, BwdDataFamily):
    name = "dwp"
    template = "conv_bwd_data/dwp.hip.j2"
    params_type = DwpParams
    suffix_re = _SUFFIX_RE
    description = ("depthwise (C = K = 1), layouts whose planes lie one after another, 1-D/2-D: a block per run of "
                   "whole planes copied in and out 16 bytes at a time through shared memory; filter, stride, "
                   "dilation compiled in")

    def supported_cells(self) -> frozenset:
        return CELLS

    def cell_allows(self, params: DwpParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return len(params.compiled.filter) == ndim and (ndim == 2 or params.rows == 1)

    def layout_values(self, params: DwpParams, layout: Layout) -> dict[str, Any]:
        return {"planes_by_image": layout is Layout.GNHWC}

    def why_not_here(self, p: DwpParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        refusal = depthwise_refusal(self, p, problem, math.prod(p.tile()))
        if refusal:
            return refusal
        planes = problem.N * problem.G
        if p.planes > planes:
            return f"{p.planes} planes a block for N x G = {planes} planes"
        staging = staging_of(p, problem)
        if staging.shared_bytes > target.shared_optin:
            return f"{p.planes} planes need {staging.shared_bytes} bytes of shared memory"
        if p.planes * staging.tiles < p.threads // 2:
            return f"{p.planes} planes of {staging.tiles} tiles leave most of the block's {p.threads} threads idle"
        if math.ceil(planes / p.planes) > GRID_X_LIMIT:
            return f"{planes} planes exceed the grid"
        return None

    def main_launch(self, p: DwpParams, problem: ConvProblem, target: DeviceTarget, args: Struct) -> Launch:
        staging = staging_of(p, problem)
        blocks = math.ceil(problem.N * problem.G / p.planes)
        if p.resident:  # blocks that stay, each taking runs in turn
            blocks = min(blocks, target.processors * min(p.resident, resident_blocks(p, staging, target)))
        return Launch("kf_main", (blocks, 1, 1), (p.threads, 1, 1), (args,), shared_bytes=staging.shared_bytes)

    def heuristic_score(self, p: DwpParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """In doublings of time, from every dwp candidate of 40 H100 problems (bench/NOTES.md 62): resident
        threads under half the SM's cost 0.28 a halving (a block's copy, sums and store run in turn, so other
        blocks must cover them); a grid short of the SMs' resident blocks 0.2 a halving, and of the SMs
        themselves 0.6 more (a block's planes then run one after another on few SMs); a tile's outputs gain
        0.14 a doubling up to 16 and lose 0.07 past it (registers); idle thread-trips cost 0.22 a halving of
        the busy share. Plus `resident_score`."""
        staging = staging_of(p, problem)
        outputs = math.prod(p.tile())
        resident = resident_blocks(p, staging, target)
        low_occupancy = max(0.0, math.log2(0.5 * target.threads_per_processor / (resident * p.threads)))
        blocks = math.ceil(problem.N * problem.G / p.planes)
        short_of_slots = max(0.0, math.log2(target.processors * resident / blocks))
        short_of_sms = max(0.0, math.log2(target.processors / blocks))
        tile = 0.14 * math.log2(outputs) - 0.21 * max(0.0, math.log2(outputs / 16))
        return (DWP_LEVEL - 0.28 * low_occupancy - 0.2 * short_of_slots - 0.6 * short_of_sms + tile
                + 0.22 * math.log2(staging.busy(p)) + resident_score(p, problem))


def resident_score(p: DwpParams, problem: ConvProblem) -> float:
    """Resident blocks against a block per run, best point against best point, on the 40 H100 problems whose
    shipped winner is a dwp instance (bench/NOTES.md 64): 0.05 doublings faster on strided layers (faster on
    7 of 11), 0.09 slower on the others (faster on 5 of 29), whatever the data type."""
    if not p.resident:
        return 0.0
    return 0.05 if max(problem.stride) > 1 else -0.1


def resident_blocks(p: DwpParams, staging: Staging, target: DeviceTarget) -> int:
    """Blocks an SM holds at once, as threads and shared memory allow (registers aside); where the target
    does not describe its SMs, as many as its threads allow."""
    blocks = target.threads_per_processor // p.threads
    fitting = target.blocks_by_shared(staging.shared_bytes)
    if fitting is not None and target.blocks_per_processor is not None:
        blocks = min(blocks, target.blocks_per_processor, fitting)
    return max(blocks, 1)
