"""The streaming families `threepass` and `fused`: blocks of TL lanes x TR rows sweep x and dy in tiles
sized to fill the device (`geometry`); the per-(n, c) or per-(n, g) sums meet in a workspace.

- `threepass`: per-channel sums, per-(n, g) sums, then dx, each pass reading x and dy.
- `fused`: one read of x and dy gives per-(n, c) sums A, B, from which dgamma/dbeta and the per-(n, g)
  coefficients follow; a second pass writes dx. The sums meet through atomics or a finishing kernel.
"""

from __future__ import annotations

import enum
import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from ...device import DEFAULT_TARGET, DeviceTarget
from ...problem import Layout
from ..base import I32, Launch, LaunchPlan, Memset, Struct
from .common import INT32_LIMIT, GroupNormFamily, gn_args
from .problem import GroupNormProblem

FINISH_BLOCK = (32, 8, 1)  # twostage finishing kernel: one 32-lane row per (n, g) or 32 channels per block


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


def geometry(params: StreamParams, problem: GroupNormProblem, target: DeviceTarget = DEFAULT_TARGET) -> Geometry:
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
    wanted = params.waves * target.resident_threads / (lanes * rows)
    splits = min(max(1, round(wanted / unsplit)), trips)
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

    def heuristic_score(self, params: Any, problem: GroupNormProblem, target: DeviceTarget) -> float:
        geo = geometry(params, problem, target)
        fill = min(geo.blocks * geo.lanes * geo.rows / target.resident_threads, 1.0)
        load_bytes = params.vector * problem.dtype.tensor.nbytes
        in_flight = min(params.unroll * load_bytes / 32, 1.0)  # >= 2 wide loads per tensor in flight
        score = (2.0 if self.fused else 0.0) + math.log2(load_bytes) * 0.3 + in_flight + fill
        if self.fused and params.finish is Finish.ATOMIC:
            score += 0.1  # one launch fewer than twostage
        return score - 0.05 * abs(math.log2(params.waves / 2)) - (0.05 if params.threads != 256 else 0.0)


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
