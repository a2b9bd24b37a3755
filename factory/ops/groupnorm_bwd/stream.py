"""The streaming families `threepass` and `fused`: blocks of TL lanes x TR rows sweep x and dy in tiles
sized to fill the device (`geometry`); the per-(n, c) or per-(n, g) sums meet in a workspace.

- `threepass`: per-channel sums, per-(n, g) sums, then dx, each pass reading x and dy.
- `fused`: one read of x and dy gives per-(n, c) sums A, B, from which dgamma/dbeta and the per-(n, g)
  coefficients follow; a second pass writes dx. The sums meet through atomics or a finishing kernel.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from ...device import DEFAULT_TARGET, DeviceTarget
from ...problem import Layout
from ..base import I32, Launch, LaunchPlan, Memset, Struct
from . import cost
from .common import INT32_LIMIT, GroupNormFamily, gn_args
from .problem import GroupNormProblem

FINISH_BLOCK = (32, 8, 1)  # twostage finishing kernel: one 32-lane row per (n, g) or 32 channels per block

# The heuristic's costs of meeting the sums (see cost.py for the rest of its time model).
# Same-address fp32 atomics into one (n, g) accumulator serialise, each waiting on the last: each block adds
# D channels' sums, D*splits in all. H100 suite+seed21, atomic / twostage time of the same tiles: 0.95x under
# 128 adds (419 pairs), 3.6x at 512-4096 (slower in 44 pairs of 44; +45 us at 950 adds, +91 us at 1296).
# Not discounted by the pass's own time: a large NHWGC problem's many splits queue all the same (fp32 C=160
# G=8, 7220 adds: atomic 1.8x twostage's 80 us).
ATOMIC_FREE_ADDS = 128  # what an accumulator absorbs while the blocks stream
ATOMIC_US = 0.05  # each add beyond ATOMIC_FREE_ADDS
# kf_finish's 32-lane rows walk D*splits partial sums per (n, g), its 8-row blocks N*splits per channel, one
# L2 round trip a step: NHWGC fp32 C=160 G=8 twostage went from 80 to 175 us as splits grew from 361 to 1442.
FINISH_STEP_US = 0.1
# Waves that give the same grid as waves=1 launch the same kernels (427 such pairs: 1.01x the time of w1):
# ranked just after it, so a tuning budget reaches distinct candidates first.
SAME_GRID_PENALTY = 0.05


class Finish(enum.Enum):
    """How the per-(n, c) sums of the fused family meet."""

    ATOMIC = "atomic"  # fp32 atomics into per-channel and per-(n, g) accumulators; dx pass converts
    TWOSTAGE = "twostage"  # each split writes its sums; a small kernel adds them in a fixed order

    @property
    def mode(self) -> int:
        return {"atomic": 1, "twostage": 2}[self.value]


@dataclass(frozen=True)
class StreamParams:
    """A streaming tile: `threads` per block, each loading `unroll` vectors of `vector` elements per trip
    (per tensor): vector * unroll elements per trip. The spatial extent is split so that the grid holds
    about `waves` x the device's resident threads; the trips per thread follow (fewer splits, fewer
    partial sums)."""

    threads: int
    vector: int
    unroll: int
    waves: int

    def __post_init__(self) -> None:
        if self.threads % 32 or not 64 <= self.threads <= 512:
            raise ValueError("threads must be a multiple of 32 in 64..512 (a block's sums fit 32 KiB of shared memory)")
        if self.vector not in (1, 2, 4, 8):
            raise ValueError("vector must be 1, 2, 4 or 8")
        if self.unroll < 1 or self.waves < 1:
            raise ValueError("unroll and waves must be >= 1")

    def stream_suffix(self) -> str:
        return f"t{self.threads}_v{self.vector}_u{self.unroll}_w{self.waves}"

    def stream_values(self) -> dict[str, Any]:
        return {"threads": self.threads, "vector": self.vector, "unroll": self.unroll}


@dataclass(frozen=True)
class ThreePassParams(StreamParams):
    def suffix(self) -> str:
        return self.stream_suffix()

    def template_values(self) -> dict[str, Any]:
        return self.stream_values() | {"reduce_mode": 0}


@dataclass(frozen=True)
class FusedParams(StreamParams):
    finish: Finish = Finish.ATOMIC

    def suffix(self) -> str:
        return f"{self.stream_suffix()}_{self.finish.value}"

    def template_values(self) -> dict[str, Any]:
        return self.stream_values() | {"reduce_mode": self.finish.mode}


@dataclass(frozen=True)
class Geometry:
    """How the streaming kernels tile a problem; the same tiles for the sums and the dx pass.

    NGCHW: rows are (n, c) pairs of S contiguous elements; a block is TL lanes along a row x TR rows,
    and each row's extent is cut into `splits` chunks of `chunk` elements.
    NHWGC: for each n, rows are the S spatial positions of C contiguous channels; a block is TL lanes
    of `vector` channels x TR rows, each chunk `chunk` rows long; `tiles` lane tiles cover C.
    """

    lanes: int  # TL
    rows: int  # TR
    chunk: int
    splits: int
    tiles: int  # NGCHW: row tiles; NHWGC: lane tiles
    blocks: int

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.lanes, self.rows, 1)


def geometry(params: Any, problem: GroupNormProblem, target: DeviceTarget = DEFAULT_TARGET,
             tile_trips: int | None = None) -> Geometry:
    """The tiles of `params` (threads, vector, unroll): split to fill `params.waves` waves of the device,
    or, given `tile_trips`, split so that each tile is that many trips of the block long."""
    S, vec = problem.spatial, params.vector
    if problem.layout is Layout.NHWGC:
        vector_lanes = problem.C // vec
        tiles = math.ceil(vector_lanes / params.threads)
        lanes = math.ceil(vector_lanes / tiles)
        rows = max(1, params.threads // lanes)
        trip = rows * params.unroll  # spatial rows one trip of the block covers
        unsplit = problem.N * tiles
    else:
        per_trip = math.ceil(S / (vec * params.unroll))  # lanes one trip along a row could keep busy
        lanes = min(params.threads, 32 * math.ceil(per_trip / 32))
        rows = params.threads // lanes
        trip = lanes * vec * params.unroll  # elements of a row one trip covers
        tiles = math.ceil(problem.N * problem.C / rows)
        unsplit = tiles
    trips = math.ceil(S / trip)
    if tile_trips is None:
        wanted = params.waves * target.resident_threads / (lanes * rows)
        splits = min(max(1, round(wanted / unsplit)), trips)
    else:
        splits = math.ceil(trips / tile_trips)
    chunk = math.ceil(trips / splits) * trip
    splits = math.ceil(S / chunk)
    return Geometry(lanes, rows, chunk, splits, tiles, unsplit * splits)


GN_TILES = "kf_gn_tiles"  # templates/common/args.h


def tiles_args(geo: Geometry) -> Struct:
    """The streaming kernels' second struct: how the grid tiles the problem (see Geometry)."""
    return Struct(GN_TILES, (("lanes", I32(geo.lanes)), ("rows", I32(geo.rows)), ("chunk", I32(geo.chunk)),
                             ("splits", I32(geo.splits)), ("tiles", I32(geo.tiles))))


class StreamFamily(GroupNormFamily):
    """The shared part of `threepass` and `fused`: geometry, workspace, the sizes every pass takes."""

    fused: bool

    def workspace_floats(self, params: Any, problem: GroupNormProblem, geo: Geometry) -> tuple[int, int]:
        """(floats zeroed before the sums, total floats): per-(n, g) pairs, per-channel pairs, split partials."""
        accumulators = 2 * problem.N * problem.G + 2 * problem.C
        twostage = self.fused and params.finish is Finish.TWOSTAGE
        partials = 2 * geo.splits * problem.N * problem.C if twostage else 0
        return accumulators, accumulators + partials

    def why_not_here(self, params: Any, problem: GroupNormProblem, target: DeviceTarget) -> str | None:
        geo = geometry(params, problem, target)
        if self.workspace_floats(params, problem, geo)[1] > INT32_LIMIT:
            return "the per-split sums need a workspace of 2**31 floats or more"
        return None

    def launch_plan(self, params: Any, problem: GroupNormProblem, target: DeviceTarget) -> LaunchPlan:
        geo = geometry(params, problem, target)
        zeroed, total = self.workspace_floats(params, problem, geo)
        args = (gn_args(problem), tiles_args(geo))

        def stream(entry: str) -> Launch:
            return Launch(entry, (geo.blocks, 1, 1), geo.block, args)

        steps = self.passes(params, problem, geo, args, zeroed, stream) + [stream("kf_dx")]
        return LaunchPlan(tuple(steps), 4 * total)

    @abstractmethod
    def passes(self, params: Any, problem: GroupNormProblem, geo: Geometry, args: tuple, zeroed: int,
               stream: Any) -> list:
        """The steps before the dx pass; `args` are every streaming kernel's (gn_args, tiles_args)."""

    # --- the heuristic (cost.py) -----------------------------------------------------------------------
    @abstractmethod
    def sums_us(self, params: Any, problem: GroupNormProblem, geo: Geometry, pass_us: float) -> float:
        """Everything before the dx pass, launches included, given one sums pass's streaming time."""

    def heuristic_score(self, params: Any, problem: GroupNormProblem, target: DeviceTarget) -> float:
        geo = geometry(params, problem, target)
        score = cost.score(self.estimate_us(params, problem, target, geo))
        if params.waves != 1 and geo == geometry(dataclasses.replace(params, waves=1), problem, target):
            score -= SAME_GRID_PENALTY
        return score

    def estimate_us(self, params: Any, problem: GroupNormProblem, target: DeviceTarget, geo: Geometry) -> float:
        """Microseconds: the sums (sums_us) and the dx pass, each bound by its trips or its traffic."""
        resident = cost.resident_blocks(geo.lanes * geo.rows, stream_registers(params, problem), target)
        chain = cost.waves(geo.blocks, resident, target) * math.ceil(geo.chunk / trip(params, geo, problem))
        latency = chain * cost.LATENCY_US
        tensor = problem.numel * problem.dtype.tensor.nbytes
        sums = cost.bound_us(latency, cost.memory_us(2 * tensor, geo.blocks, target))
        missed = 2 * tensor * max(0.0, 1 - cost.L2_BYTES / (2 * tensor))  # x, dy the dx pass finds in DRAM
        dx = cost.bound_us(latency, cost.memory_us(tensor + missed, geo.blocks, target))
        return self.sums_us(params, problem, geo, sums) + dx


def trip(params: StreamParams, geo: Geometry, problem: GroupNormProblem) -> int:
    """Elements of a row (NGCHW) or spatial rows (NHWGC) one trip of a block covers: a chunk takes chunk/trip."""
    if problem.layout is Layout.NHWGC:
        return geo.rows * params.unroll
    return geo.lanes * params.vector * params.unroll


def stream_registers(params: StreamParams, problem: GroupNormProblem) -> int:
    """Registers per thread of kf_stats and kf_dx, as ptxas -v (NVRTC, sm_90) reports them: 32 up to 16 bytes
    of each tensor in flight, then a register per 2 bytes (NGCHW bf16 v8 u4: 57-62); NHWGC keeps a sum pair
    and a mean per channel of the vector too (v4 u2 40, v4 u4 48-51, v8 u2 61-64, v8 u4 76-81)."""
    in_flight = params.vector * params.unroll * problem.dtype.tensor.nbytes
    if problem.layout is Layout.NHWGC:
        return 24 + 3 * params.vector + in_flight // 2
    return max(32, 24 + in_flight // 2)


def contention_us(problem: GroupNormProblem, geo: Geometry) -> float:
    """What the per-(n, g) atomics add by queueing on one address."""
    return ATOMIC_US * max(0, problem.per_group * geo.splits - ATOMIC_FREE_ADDS)


class ThreePass(StreamFamily):
    name = "threepass"
    template = "groupnorm_bwd/threepass.hip.j2"
    params_type = ThreePassParams
    description = "per-channel sums, per-(n, g) sums, then dx: three reads of x and dy"
    fused = False

    def passes(self, params, problem, geo, args, zeroed, stream) -> list:
        steps: list = [Memset("workspace", 4 * zeroed)]
        if problem.affine:
            steps.append(stream("kf_channel"))
        return steps + [stream("kf_group")]

    def sums_us(self, params: Any, problem: GroupNormProblem, geo: Geometry, pass_us: float) -> float:
        passes = 2 if problem.affine else 1  # kf_channel, kf_group
        return cost.launch_us(passes + 1, memsets=1) + passes * pass_us + contention_us(problem, geo)


class Fused(StreamFamily):
    name = "fused"
    template = "groupnorm_bwd/fused.hip.j2"
    params_type = FusedParams
    description = "per-(n, c) sums in one read of x and dy, then dx: two reads"
    fused = True

    def passes(self, params, problem, geo, args, zeroed, stream) -> list:
        if params.finish is Finish.ATOMIC:
            return [Memset("workspace", 4 * zeroed), stream("kf_stats")]
        blocks = math.ceil(problem.N * problem.G / FINISH_BLOCK[1])
        if problem.affine:
            blocks += math.ceil(problem.C / FINISH_BLOCK[0])
        finish = Launch("kf_finish", (blocks, 1, 1), FINISH_BLOCK, args)
        return [stream("kf_stats"), finish]

    def sums_us(self, params: FusedParams, problem: GroupNormProblem, geo: Geometry, pass_us: float) -> float:
        if params.finish is Finish.ATOMIC:
            return cost.launch_us(2, memsets=1) + pass_us + contention_us(problem, geo)
        steps = math.ceil(problem.per_group * geo.splits / FINISH_BLOCK[0])
        if problem.affine:
            steps += math.ceil(problem.N * geo.splits / FINISH_BLOCK[1])
        return cost.launch_us(3) + pass_us + FINISH_STEP_US * steps
