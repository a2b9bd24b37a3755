"""`window`: the fused family's sums and dx passes in one persistent launch, ordered so that dx re-reads x
and dy from L2 instead of DRAM (templates/groupnorm_bwd/window.hip.j2).

The fused tiles (stream.geometry) are cut into windows of consecutive tiles holding about `window_mb` MiB
of x and dy. Blocks take tickets in a fixed order: sums of window w + lag, then dx of window w, so the
tiles dx reads were summed one window earlier and are still in L2. A dx tile waits for the sums of every
window holding its groups; `lag` is chosen so that those tickets were handed out before it, so a block
waits only for tiles that running blocks hold: deadlock-free on any grid, without a cooperative launch.
Where `fused` moves 5 tensor-sized transfers (x and dy twice, dx once) on tensors larger than L2, this
moves about 3 while a window and the next fit L2. Sums meet through float atomics: not bit-reproducible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...device import DeviceTarget
from ...problem import Layout
from ..base import I32, Launch, LaunchPlan, Memset
from . import cost
from .common import GroupNormFamily, gn_args
from .problem import GroupNormProblem
from .stream import Finish, Geometry, StreamParams, contention_us, geometry, stream_registers, tiles_args, trip

MIB = 1 << 20
COUNTERS = 2  # the ticket counter and the count of blocks done, before one counter per window
# The heuristic (cost.py, estimate_us): what a tile costs beyond its bytes (taking a ticket, the block's
# reduction and atomics), and how much slower than cost.DRAM_BYTES_PER_US the floor's bytes move (H100,
# the best window instance of 8 problems of 51-99 MB a tensor, fp16: NGCHW 1.4-2.0 TB/s, NHWGC 1.2-1.35).
TILE_US = 0.3
# A call's fixed cost: 14 problems of 0.01-2 MB a tensor (H100) ran their best window instance in 12-16 us
# where the other families' best took 9-11 us (the persistent grid's blocks each take a ticket, spin and
# leave, and the memset covers the counters).
FIXED_US = 6.0
RATE_PENALTY = {Layout.NGCHW: 1.6, Layout.NHWGC: 2.15}


@dataclass(frozen=True)
class WindowParams:
    """Blocks of `threads` loading `unroll` vectors of `vector` elements per tensor a trip (as the fused
    tiles), tiles `trips` trips long, `blocks_per_sm` blocks an SM, windows of `window_mb` MiB of x and dy.
    Tiles are short and the grid small so that the tiles in flight are a fraction of a window: the data a
    dx tile re-reads was summed at most a window or two earlier."""

    threads: int
    vector: int
    unroll: int
    trips: int
    blocks_per_sm: int
    window_mb: int

    def __post_init__(self) -> None:
        StreamParams(self.threads, self.vector, self.unroll, 1)  # the same limits as the fused tiles
        if self.trips < 1 or self.blocks_per_sm < 1:
            raise ValueError("trips and blocks_per_sm must be >= 1")
        if not 1 <= self.window_mb <= 64:
            raise ValueError("window_mb must be in 1..64")

    def suffix(self) -> str:
        return (f"t{self.threads}_v{self.vector}_u{self.unroll}_r{self.trips}_b{self.blocks_per_sm}"
                f"_m{self.window_mb}")

    def template_values(self) -> dict[str, Any]:
        return {"threads": self.threads, "vector": self.vector, "unroll": self.unroll,
                "reduce_mode": Finish.ATOMIC.mode, "window": True}


def window_geometry(params: WindowParams, problem: GroupNormProblem, target: DeviceTarget) -> Geometry:
    return geometry(params, problem, target, tile_trips=params.trips)


@dataclass(frozen=True)
class Windows:
    """`tiles` fused tiles in `count` windows of `size` tiles; dx of window w is handed out after the sums
    of window w + `lag`."""

    tiles: int
    size: int
    count: int
    lag: int


def tile_bytes(problem: GroupNormProblem, geo: Geometry) -> float:
    """Bytes of x and dy one tile reads (on average: the last split of a row is shorter)."""
    return 2 * problem.numel * problem.dtype.tensor.nbytes / geo.blocks


def needed_windows(problem: GroupNormProblem, geo: Geometry, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) per dx tile: the windows holding every sums tile of the groups it touches (as the kernel's
    gn_needed_windows computes them)."""
    b = np.arange(geo.blocks, dtype=np.int64)
    if problem.layout is Layout.NHWGC:
        per_sample = geo.splits * geo.tiles
        n = b // per_sample
        return n * per_sample // size, ((n + 1) * per_sample - 1) // size
    D, rows = problem.per_group, problem.N * problem.C
    r0 = (b // geo.splits) * geo.rows
    r1 = np.minimum(rows, r0 + geo.rows) - 1
    first, last = (r0 // D) * D, (r1 // D + 1) * D - 1
    return (first // geo.rows) * geo.splits // size, ((last // geo.rows + 1) * geo.splits - 1) // size


def unit_tiles(problem: GroupNormProblem, geo: Geometry) -> int:
    """Consecutive tiles that hold whole groups and nothing else (1 where tiles and groups do not align):
    windows made of such units never make a dx tile wait for the next window."""
    if problem.layout is Layout.NHWGC:
        return geo.splits * geo.tiles  # a sample
    D = problem.per_group
    if D % geo.rows == 0:
        return D // geo.rows * geo.splits
    return geo.splits if geo.rows % D == 0 else 1


def windows(params: WindowParams, problem: GroupNormProblem, geo: Geometry) -> Windows:
    """Windows of about `window_mb` MiB in whole units (unit_tiles); the lag is one window past the farthest
    a dx tile's groups reach."""
    unit = unit_tiles(problem, geo)
    units = max(1, round(params.window_mb * MIB / (unit * tile_bytes(problem, geo))))
    size = min(geo.blocks, unit * units)
    count = math.ceil(geo.blocks / size)
    _, hi = needed_windows(problem, geo, size)
    reach = int(np.max(hi - np.arange(geo.blocks) // size))
    return Windows(geo.blocks, size, count, min(count, reach + 1))


class Window(GroupNormFamily):
    name = "window"
    template = "groupnorm_bwd/window.hip.j2"
    params_type = WindowParams
    description = "the fused passes in one persistent launch, dx a window behind the sums: x and dy re-read from L2"

    def why_not_here(self, params: WindowParams, problem: GroupNormProblem, target: DeviceTarget) -> str | None:
        return None  # the workspace is a few floats per channel and (n, g): smaller than the tensors

    def launch_plan(self, params: WindowParams, problem: GroupNormProblem, target: DeviceTarget) -> LaunchPlan:
        """Zero the accumulators and counters, then one grid of the blocks the device holds at once."""
        geo = window_geometry(params, problem, target)
        plan = windows(params, problem, geo)
        # fused's accumulators (per (n, g), per channel), then the counters; all zeroed before the launch
        words = 2 * problem.N * problem.G + 2 * problem.C + COUNTERS + plan.count
        args = (gn_args(problem), tiles_args(geo), I32(plan.size), I32(plan.lag), I32(plan.count), I32(plan.tiles))
        launch = Launch("kf_window", (grid_blocks(params, problem, target, geo), 1, 1), geo.block, args)
        return LaunchPlan((Memset("workspace", 4 * words), launch), 4 * words)

    def heuristic_score(self, params: WindowParams, problem: GroupNormProblem, target: DeviceTarget) -> float:
        return cost.score(self.estimate_us(params, problem, target))

    def estimate_us(self, params: WindowParams, problem: GroupNormProblem, target: DeviceTarget) -> float:
        """Microseconds: one launch and a memset, then the floor's 3 transfers at the rate this family
        reached, or the chain of load trips a block walks over its tiles, whichever binds; fused's atomic
        contention. The rate is measured, not derived: on the H100 the best window instance moved the floor's
        bytes at 1.4-2.0 TB/s in NGCHW (DRAM reads those of x and dy once, by ncu: the time goes to the
        tiles' turns, block barriers and loads, not to traffic) and 1.2-1.35 TB/s in NHWGC (x and dy read
        twice), against the 2.8 TB/s of cost.DRAM_BYTES_PER_US (bench/NOTES.md 42)."""
        geo = window_geometry(params, problem, target)
        tensor = problem.numel * problem.dtype.tensor.nbytes
        grid = grid_blocks(params, problem, target, geo)
        tiles_each = 2 * geo.blocks / grid  # sums and dx tiles one block walks in turn
        latency = tiles_each * math.ceil(geo.chunk / trip(params, geo, problem)) * cost.LATENCY_US
        traffic = cost.memory_us(3 * tensor, grid, target) * RATE_PENALTY[problem.layout]
        streaming = cost.bound_us(latency, traffic) + tiles_each * TILE_US
        return cost.launch_us(1, memsets=1) + FIXED_US + streaming + contention_us(problem, geo)


def grid_blocks(params: WindowParams, problem: GroupNormProblem, target: DeviceTarget, geo: Geometry) -> int:
    """The persistent grid: `blocks_per_sm` an SM (fewer where registers allow fewer), at most one a tile."""
    resident = cost.resident_blocks(geo.lanes * geo.rows, stream_registers(params, problem), target)
    return min(geo.blocks, min(params.blocks_per_sm, resident) * target.processors)
