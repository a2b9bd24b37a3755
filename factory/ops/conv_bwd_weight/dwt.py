"""`dwt`: depthwise 1-D/2-D with the input window of an output tile staged in shared memory.

A block takes threads_lane * vector groups; each tile of tile_h x tile_w outputs reads its input window
(halo included) once into dynamic shared memory, and every thread sums its taps from there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, Layout
from ..base import I32, Launch, Struct
from .common import UP_TO_2D, BwdWeightFamily, Reduction, check_lane_block, lanes_only_channels_last
from .dw import Dw, lane_blocks


@dataclass(frozen=True)
class DwtParams:
    """Depthwise, shared-memory tiles: TG*VEC groups per block, TH x TW output positions per tile."""

    threads_lane: int
    threads_pos: int
    vector: int
    tile_h: int
    tile_w: int
    taps_max: int
    split_k: int  # blocks along tiles
    reduction: Reduction
    min_blocks: int = 1  # blocks per SM the compiler must fit (caps registers per thread)

    def __post_init__(self) -> None:
        check_lane_block(self.threads_lane, self.threads_pos, self.vector, self.split_k, self.reduction)

    @property
    def threads(self) -> int:
        return self.threads_lane * self.threads_pos

    @property
    def groups_per_block(self) -> int:
        return self.threads_lane * self.vector

    def window(self, problem: ConvProblem) -> tuple[int, int]:
        """(rows, cols) of the input window one output tile reads, halo included."""
        y, x = (1, *problem.filter)[-2:] if problem.ndim == 1 else problem.filter
        sh, sw = (1, *problem.stride)[-2:] if problem.ndim == 1 else problem.stride
        dh, dw = (1, *problem.dilation)[-2:] if problem.ndim == 1 else problem.dilation
        return (self.tile_h - 1) * sh + (y - 1) * dh + 1, (self.tile_w - 1) * sw + (x - 1) * dw + 1

    def shared_bytes(self, problem: ConvProblem, wave_size: int = 32) -> tuple[int, int]:
        """(dynamic tile bytes, static bytes): the window, and one partial per warp for the reduction."""
        rows, cols = self.window(problem)
        dynamic = rows * cols * self.groups_per_block * problem.dtype.tensor.nbytes
        # The template sizes its per-warp partials for 32-lane warps, enough for any wave size >= 32.
        warps = (self.threads + 31) // 32
        static = 4 * (warps * self.taps_max if self.threads_lane == 1 else warps * self.groups_per_block)
        return dynamic, static

    def suffix(self) -> str:
        return (
            f"l{self.threads_lane}x{self.threads_pos}_v{self.vector}_t{self.tile_h}x{self.tile_w}"
            f"_f{self.taps_max}_o{self.min_blocks}_sk{self.split_k}_{self.reduction.value}"
        )

    def template_values(self) -> dict[str, Any]:
        return {
            "min_blocks": self.min_blocks,
            "threads_lane": self.threads_lane,
            "threads_pos": self.threads_pos,
            "vector": self.vector,
            "tile_h": self.tile_h,
            "tile_w": self.tile_w,
            "taps_max": self.taps_max,
            "reduce_mode": self.reduction.mode,
        }


class Dwt(Dw):
    name = "dwt"
    template = "conv_bwd_weight/dwt.hip.j2"
    params_type = DwtParams
    description = "depthwise 1-D/2-D: the input window of an output tile staged in shared memory"
    # A doubling under dw's other kin: in 11 H100 backward-weight DBs (7,468 times) no dwt point came within
    # 1.21x of its problem's best, and dwr and dwh serve every problem it does (bench/NOTES.md 63).
    base_score = 2.0

    def supported_cells(self) -> frozenset:
        return UP_TO_2D

    def cell_allows(self, params: DwtParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        if not lanes_only_channels_last(params, layout):
            return False
        # 1-D problems get single-row tiles; 3-D ones are left to the dw family.
        return ndim == 2 and params.tile_h > 1 or ndim == 1 and params.tile_h == 1

    def why_not_here(self, p: DwtParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.C != 1 or problem.K != 1:
            return f"depthwise only (C=K=1), problem has C={problem.C}, K={problem.K}"
        if problem.ndim == 3:
            return "1-D and 2-D only"
        if problem.filter_volume > p.taps_max:
            return f"filter has {problem.filter_volume} taps, this instance holds {p.taps_max}"
        if problem.G % p.vector:
            return f"vector width {p.vector} needs G divisible by it (G={problem.G})"
        dynamic, static = p.shared_bytes(problem, target.wave_size)
        if dynamic + static > target.shared_optin:
            return (f"input window needs {dynamic + static} bytes of shared memory, over the "
                    f"{target.shared_optin} a block gets on {target.arch}")
        tiles = problem.N * math.prod(
            math.ceil(o / t) for o, t in zip(problem.output[-2:], (p.tile_h, p.tile_w)[-problem.ndim:]))
        if p.split_k > 1 and p.split_k > tiles:
            return f"split {p.split_k} exceeds the {tiles} output tiles"
        return None

    def main_launch(self, p: DwtParams, problem: ConvProblem, target: DeviceTarget, args: Struct, wei_numel: int) -> Launch:
        rows, cols = p.window(problem)
        dynamic, _ = p.shared_bytes(problem, target.wave_size)
        return Launch("kf_main", (lane_blocks(p, problem), p.split_k, 1), (p.threads_lane, p.threads_pos, 1),
                      (args, I32(wei_numel), I32(rows), I32(cols)), shared_bytes=dynamic)
