"""`dw`: few channels per group (depthwise when C = K = 1): one thread per (g, k, c) lane and every filter
tap, streaming the activations once; memory bound by design, every layout and rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, Layout
from ..base import I32, Launch, Struct
from ..conv.family import fill_score
from .common import (
    GRID_Y_LIMIT,
    BwdWeightFamily,
    Reduction,
    check_lane_block,
    lanes_only_channels_last,
    reduction_length,
)

INT32_LIMIT = 2**31 - 1
MAX_CHANNEL_PRODUCT = 16  # C*K per group above which a GEMM family is the right tool


@dataclass(frozen=True)
class DwParams:
    threads_lane: int  # threads along (g, k, c) lanes; 1 = threads along output positions only
    threads_pos: int
    vector: int  # consecutive groups per thread (depthwise, channels-last only)
    taps_max: int  # filter taps held in registers
    split_k: int  # blocks along output positions
    reduction: Reduction

    def __post_init__(self) -> None:
        check_lane_block(self.threads_lane, self.threads_pos, self.vector, self.split_k, self.reduction)

    @property
    def threads(self) -> int:
        return self.threads_lane * self.threads_pos

    def suffix(self) -> str:
        return (
            f"l{self.threads_lane}x{self.threads_pos}_v{self.vector}_f{self.taps_max}"
            f"_sk{self.split_k}_{self.reduction.value}"
        )

    def template_values(self) -> dict[str, Any]:
        return {
            "threads_lane": self.threads_lane,
            "threads_pos": self.threads_pos,
            "vector": self.vector,
            "taps_max": self.taps_max,
            "reduce_mode": self.reduction.mode,
        }


class Dw(BwdWeightFamily):
    name = "dw"
    template = "conv_bwd_weight/dw.hip.j2"
    params_type = DwParams
    description = "few channels per group (C*K <= 16): a thread per (g, k, c) lane, every layout and rank"

    def cell_allows(self, params: DwParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return lanes_only_channels_last(params, layout)

    def why_not_here(self, p: DwParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.C * problem.K > MAX_CHANNEL_PRODUCT:
            return f"C*K={problem.C * problem.K} per group exceeds {MAX_CHANNEL_PRODUCT}: a GEMM family fits"
        if problem.filter_volume > p.taps_max:
            return f"filter has {problem.filter_volume} taps, this instance holds {p.taps_max}"
        if p.vector > 1 and (problem.C != 1 or problem.K != 1 or problem.G % p.vector):
            return f"vector width {p.vector} needs C=K=1 and G divisible by it"
        position_blocks = math.ceil(reduction_length(problem) / p.threads_pos)
        if p.split_k > 1 and p.split_k > position_blocks:
            return f"split {p.split_k} exceeds the {position_blocks} position blocks"
        if p.threads_lane == 1 and problem.G * problem.K * problem.C > INT32_LIMIT:
            return "too many lanes for the grid"
        if p.split_k > GRID_Y_LIMIT:
            return "split exceeds the grid"
        return None

    def main_launch(self, p: DwParams, problem: ConvProblem, target: DeviceTarget, args: Struct, wei_numel: int) -> Launch:
        return Launch("kf_main", (lane_blocks(p, problem), p.split_k, 1), (p.threads_lane, p.threads_pos, 1),
                      (args, I32(wei_numel)))

    base_score = 2.0

    def heuristic_score(self, p: Any, problem: ConvProblem, target: DeviceTarget) -> float:
        blocks = lane_blocks(p, problem) * p.split_k
        score = self.base_score + (1.0 if p.threads_lane > 1 else 0.0) + math.log2(p.vector) * 0.3
        if problem.C == 1 and problem.K == 1:
            # Depthwise (dwt and dwr inherit this): a group's GEMM is 1 x taps, so the matrix families
            # fill 1/64 of each tile. On the H100 (suite+seed21) a lane family beat the best GEMM family on all
            # 25 depthwise problems, 1.6-8.6x on the three 3-D ones (dw), 1.9-56x on 1-D/2-D.
            score += 1.5
        else:
            # Each (g, k, c) lane streams its own input and output-gradient channel, so the activations
            # are read about C*K times over: NHWGC G=141 C=K=4, dw ran 9.7x slower than mma.
            score -= 0.5 * math.log2(problem.C * problem.K)
        # Splitting past the fill only adds partial sums to reduce (suite+seed21, same other params: dw split
        # 256 2.4x slower than 64, dwt 1024 2.1x slower than 256, dwr 16 1.05x slower than 4).
        waves = blocks / (4 * target.processors)
        over_split = 0.1 * math.log2(waves) if p.split_k > 1 and waves > 1 else 0.0
        return score + fill_score(blocks, target) - over_split - self.reduction_penalty(p, problem)


def lane_blocks(p: Any, problem: ConvProblem) -> int:
    """Blocks along the (g, k, c) lanes for a depthwise-style family."""
    return math.ceil(problem.G * problem.K * problem.C / (p.threads_lane * p.vector))
