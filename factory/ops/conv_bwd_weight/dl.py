"""`dl`: portable implicit GEMM on plain FMA for every layout, dtype and rank.

dW[g] (K x C*filter) = dOut[g]^T (K x N*out) . im2col(In[g]) (N*out x C*filter): blocks tile K (M) and
C*filter (N), threads own thread_m x thread_n outputs, the reduction runs over N*output positions in
block_k chunks, split across blocks (split-K) when the problem has few output tiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, Layout
from ..base import I32, Launch, Struct
from ..conv import layouts as cl
from ..conv.family import fill_score
from .common import (ALL_CELLS, GRID_Y_LIMIT, INT8_SAT_CELLS, BwdWeightFamily, Reduction, check_split,
                     reduction_length)


@dataclass(frozen=True)
class DlParams:
    block_m: int
    block_n: int
    block_k: int
    thread_m: int
    thread_n: int
    vector: int
    split_k: int
    reduction: Reduction

    def __post_init__(self) -> None:
        check_split(self.split_k, self.reduction)
        if self.block_m % self.thread_m or self.block_n % self.thread_n:
            raise ValueError(f"block {self.block_m}x{self.block_n} not divisible by thread tile")
        if self.block_m % self.vector or self.block_n % self.vector:
            raise ValueError("vector width must divide the block tile")

    @property
    def threads(self) -> int:
        return (self.block_m // self.thread_m) * (self.block_n // self.thread_n)

    def suffix(self) -> str:
        return (
            f"b{self.block_m}x{self.block_n}x{self.block_k}_t{self.thread_m}x{self.thread_n}"
            f"_v{self.vector}_sk{self.split_k}_{self.reduction.value}"
        )

    def template_values(self) -> dict[str, Any]:
        return {
            "block_m": self.block_m,
            "block_n": self.block_n,
            "block_k": self.block_k,
            "thread_m": self.thread_m,
            "thread_n": self.thread_n,
            "vector": self.vector,
            "threads": self.threads,
            "reduce_mode": self.reduction.mode,
        }


class Dl(BwdWeightFamily):
    name = "dl"
    template = "conv_bwd_weight/dl.hip.j2"
    params_type = DlParams
    description = "portable implicit GEMM on plain FMA: every layout, dtype and rank; split-K"

    def supported_cells(self) -> frozenset:
        return ALL_CELLS | INT8_SAT_CELLS

    def cell_allows(self, params: DlParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return params.vector == 1 or cl.channel_innermost(layout)

    def why_not_here(self, p: DlParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.G > GRID_Y_LIMIT:
            return f"G={problem.G} exceeds the grid's {GRID_Y_LIMIT} groups"
        if p.vector > 1 and (problem.C % p.vector or problem.K % p.vector):
            return f"vector width {p.vector} needs C and K divisible by it (C={problem.C}, K={problem.K})"
        chunks = math.ceil(reduction_length(problem) / p.block_k)
        if p.split_k > chunks:
            return f"split-K {p.split_k} exceeds the {chunks} reduction chunks of this problem"
        return None

    def layout_values(self, layout: Layout) -> dict[str, Any]:
        channels_last = int(cl.channel_innermost(layout))
        return {"wei_c_inner": int(layout.weight_order.endswith("C")),
                "a_m_fastest": channels_last, "b_j_fastest": channels_last}

    def main_launch(self, p: DlParams, problem: ConvProblem, target: DeviceTarget, args: Struct, wei_numel: int) -> Launch:
        tiles = _tiles(p, problem)
        r_per_split = math.ceil(math.ceil(reduction_length(problem) / p.split_k) / p.block_k) * p.block_k
        return Launch("kf_main", (tiles, problem.G, p.split_k), (p.threads, 1, 1),
                      (args, I32(r_per_split), I32(wei_numel)))

    def heuristic_score(self, p: DlParams, problem: ConvProblem, target: DeviceTarget) -> float:
        blocks = _tiles(p, problem) * problem.G * p.split_k
        used = problem.K / (math.ceil(problem.K / p.block_m) * p.block_m)
        return used + math.log2(p.vector) * 0.2 + fill_score(blocks, target) - self.reduction_penalty(p, problem)


def _tiles(p: DlParams, problem: ConvProblem) -> int:
    return math.ceil(problem.K / p.block_m) * math.ceil(problem.C * problem.filter_volume / p.block_n)
