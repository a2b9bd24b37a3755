"""`pw`: a pointwise layer's weight gradient as the plain GEMM it is (templates/conv_bwd_weight/pw.hip.j2).

A 1x1 filter at stride 1 without padding, in a channels-last layout (NHWGC, GNHWC), makes every output
position a row of both tensors: dW[g] = dOut[g]^T . In[g] over rows of K and C elements at a fixed pitch.
The engine's main loop on row chunks (templates/common/igemm_rows.h) streams those rows straight into
wgmma's swizzled tiles: a thread's copy of a stage is its copy of the last one moved on, where `wgmma`
works out a position, bounds and an offset for each 16-byte chunk. Split-K and the epilogues are
`wgmma`'s. Compiled for sm_90a, fp16 / bf16 operands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout
from ..conv import layouts as cl
from .common import BwdWeightFamily, Reduction, check_split
from .mma import gemm_template_values
from .wgmma import CELLS as WGMMA_CELLS
from .wgmma import ATOM_BYTES, GROUP_ROWS, GROUP_THREADS, MAX_N, OPERAND_BYTES, SWIZZLE_ROW, Wgmma, check_pipeline


FINALIZE_VECTOR = 4  # outputs a thread of pw.hip.j2's kf_finalize sums


@dataclass(frozen=True)
class PwParams:
    block_m: int  # rows of dW (K) a block owns: 64 a warpgroup
    block_n: int  # columns of dW (C): one wgmma's width, a multiple of 64 up to 256
    block_k: int  # reduction rows (output positions) a pipeline stage holds
    stages: int
    vector_a: int  # elements a chunk copies along K / along C (8: 16 bytes)
    vector_b: int
    split_k: int
    reduction: Reduction

    # What `wgmma`'s checks and plan ask of a tuning point, fixed here: one pipeline of one warpgroup
    # column, no staging pass, one group a tile, 64-bit row offsets.
    groups_n = 1
    slices = 1
    transpose = False
    groups_per_tile = 1
    index_bits = 64

    def __post_init__(self) -> None:
        check_split(self.split_k, self.reduction)
        if self.block_m % GROUP_ROWS or not 0 < self.block_m <= 4 * GROUP_ROWS:
            raise ValueError(f"block_m {self.block_m} must be 64, 128, 192 or 256 (64 rows per warpgroup)")
        if self.block_n % SWIZZLE_ROW or not 0 < self.block_n <= MAX_N:
            raise ValueError(f"block_n {self.block_n} must be a multiple of {SWIZZLE_ROW} up to {MAX_N}")
        check_pipeline(self, self.threads)

    @property
    def groups_m(self) -> int:
        return self.block_m // GROUP_ROWS

    @property
    def threads(self) -> int:
        return self.groups_m * GROUP_THREADS

    def shared_bytes(self, layout: Layout, dtype: DType) -> int:
        """The stages of A and B tiles, plus room to align the base to a swizzle atom."""
        return (self.block_m + self.block_n) * self.block_k * OPERAND_BYTES * self.stages + ATOM_BYTES - 16

    def suffix(self) -> str:
        return (f"b{self.block_m}x{self.block_n}x{self.block_k}_p{self.stages}_v{self.vector_a}x{self.vector_b}"
                f"_sk{self.split_k}_{self.reduction.value}")

    def template_values(self) -> dict[str, Any]:
        return {**gemm_template_values(self, "wgmma"), "groups_m": self.groups_m,
                "finalize_vector": FINALIZE_VECTOR}


class Pw(Wgmma):
    name = "pw"
    template = "conv_bwd_weight/pw.hip.j2"
    params_type = PwParams
    description = ("pointwise (1x1, stride 1, unpadded) channels-last layers as a plain GEMM: output positions "
                   "streamed as rows straight from the tensors into wgmma tiles (sm_90a); split-K")

    def supported_cells(self) -> frozenset:
        return frozenset(cell for cell in WGMMA_CELLS if cl.channel_innermost(cell[0]))

    def cell_allows(self, params: PwParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return cl.channel_innermost(layout)

    def template_values(self, params: PwParams, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        return BwdWeightFamily.template_values(self, params, layout, dtype, ndim)  # no staging pass, no fp8

    def why_not_here(self, p: PwParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.filter_volume != 1 or any(s != 1 for s in problem.stride):
            return "pointwise layers only: a 1x1 filter at stride 1"
        if any(problem.pad) or any(problem.pad_right):
            return "pointwise layers only: no padding"
        return super().why_not_here(p, problem, target)

    def finalize_shape(self, wei_numel: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """pw.hip.j2's kf_finalize: 32 x 8 threads a block, FINALIZE_VECTOR outputs a column of threads."""
        return (math.ceil(wei_numel / (FINALIZE_VECTOR * 32)), 1, 1), (32, 8, 1)

    def heuristic_score(self, p: PwParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """`wgmma`'s score for the same tile, 1.0 above it: on the H100 the best `pw` point ran 1.08-1.61x
        faster than the best of every other family (geomean 1.30x) on the 36 pointwise layers of
        bench/suites/pointwise_bwd_weight.toml (fp16, bf16), every candidate timed; with 0.5 the prior
        still picked `mma` / `wgmma` tiles on three of them (1.35-1.43x the best). The pick then ran at
        1.043x the best (worst 1.29x; bench/NOTES.md 44). Four stages a little above six: 0.98x the
        time of the same point with six (272 pairs, the faster in 171); else the name's tie-break
        picks six."""
        return super().heuristic_score(p, problem, target) + 1.0 + (0.02 if p.stages == 4 else 0.0)
