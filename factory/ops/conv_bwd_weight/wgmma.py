"""`wgmma`: the `mma` family's implicit GEMM on Hopper's warpgroup MMA (templates/common/wgmma.h).

Same gathers and epilogues as `mma` (one template); the main loop differs: each warpgroup (four warps)
issues wgmma.mma_async m64nNk16 on operands the instruction reads from 128-byte-swizzled shared
memory, so threads load no fragments. Compiled for sm_90a (the arch-specific Hopper ISA), it runs on
sm_90 GPUs. Tiles are r-major with 16-bit elements: channels-last layouts (NGCHW ones through the
transposing pass), fp16 / bf16 operands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout
from ..conv.family import WgmmaRules
from ..conv import layouts as cl
from ..conv.warpgroups import ATOM_BYTES, GROUP_ROWS, GROUP_THREADS, MAX_N, OPERAND_BYTES, SWIZZLE_ROW, check_pipeline
from .common import ALL_CELLS, Reduction, check_split
from .mma import Mma, gemm_template_values, staging_fits_layout

MAX_THREADS = 1024
UNIT = 8  # 16-bit elements in a 16-byte unit: a chunk stays within one
CELLS = frozenset(cell for cell in ALL_CELLS if cell[1] in (DType.FP16, DType.BF16, DType.BF16_FP32W))


@dataclass(frozen=True)
class WgmmaParams:
    block_m: int
    block_n: int
    block_k: int
    groups_m: int
    groups_n: int
    stages: int
    vector_a: int
    vector_b: int
    split_k: int
    reduction: Reduction
    index_bits: int = 32
    slices: int = 1  # pipelines (each groups_m x groups_n warpgroups) summing one tile in shared memory
    transpose: bool = False  # NGCHW inputs first copied channels-last into the workspace (Mma.staging)
    groups_per_tile: int = 1  # groups side by side in a block's GEMM (only the diagonal is stored)

    def __post_init__(self) -> None:
        check_split(self.split_k, self.reduction, meets_in_kernel=True)
        if self.index_bits not in (32, 64):
            raise ValueError(f"index_bits must be 32 or 64, not {self.index_bits}")
        if self.block_m != GROUP_ROWS * self.groups_m:
            raise ValueError(f"block_m {self.block_m} must be {GROUP_ROWS} rows per warpgroup ({self.groups_m})")
        columns, rest = divmod(self.block_n, self.groups_n)
        if rest or columns % SWIZZLE_ROW or columns > MAX_N:
            raise ValueError(f"block_n {self.block_n} over {self.groups_n} warpgroups must give each a multiple of "
                             f"{SWIZZLE_ROW} columns, at most {MAX_N}")
        if self.slices < 1 or self.threads > MAX_THREADS:
            raise ValueError(f"{self.slices} slices of {self.groups_m}x{self.groups_n} warpgroups: at least one, "
                             f"at most {MAX_THREADS} threads")
        slice_threads = self.groups_m * self.groups_n * GROUP_THREADS
        check_pipeline(self, slice_threads)

    @property
    def threads(self) -> int:
        return self.groups_m * self.groups_n * GROUP_THREADS * self.slices

    def shared_bytes(self, layout: Layout, dtype: DType) -> int:
        """Every slice's stages of A and B tiles, or the slices' fp32 sums if more (wgmma.h
        Config::SHARED_BYTES), plus room to align the base to a swizzle atom (dynamic shared memory is
        16-byte aligned)."""
        pipelines = (self.block_m + self.block_n) * self.block_k * OPERAND_BYTES * self.stages * self.slices
        sums = (self.slices - 1) * self.block_m * self.block_n * 4
        return max(pipelines, sums) + ATOM_BYTES - 16

    def suffix(self) -> str:
        return (
            f"b{self.block_m}x{self.block_n}x{self.block_k}_g{self.groups_m}x{self.groups_n}_sl{self.slices}_p{self.stages}"
            f"_v{self.vector_a}x{self.vector_b}_i{self.index_bits}_sk{self.split_k}_{self.reduction.value}"
            + ("_tr" if self.transpose else "") + (f"_gt{self.groups_per_tile}" if self.groups_per_tile > 1 else "")
        )

    def template_values(self) -> dict[str, Any]:
        return {**gemm_template_values(self, "wgmma"), "groups_m": self.groups_m, "groups_n": self.groups_n,
                "slices": self.slices}


class Wgmma(WgmmaRules, Mma):
    name = "wgmma"
    params_type = WgmmaParams
    finishes_in_grid = True  # coop: kf_splitk_finish_in_grid after the tile's partials (mma.hip.j2)
    description = ("implicit GEMM on Hopper warpgroup MMA (wgmma, sm_90a): fp16/bf16, channels-last or through the "
                   "NGCHW transposing pass; split-K; slices; groups per tile")

    def supported_cells(self) -> frozenset:
        return CELLS

    def cell_allows(self, params: WgmmaParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        # Tiles are r-major: channels-last tensors, or NGCHW ones through the transposing pass.
        return staging_fits_layout(params, layout) and (cl.channel_innermost(layout) or params.transpose)

    def heuristic_score(self, p: WgmmaParams, problem: ConvProblem, target: DeviceTarget) -> float:
        # Preferred to mma.sync where both apply: the instruction reads its operands itself. Fewer slices:
        # 4 ran 1.28x slower than 1 (92 same-params pairs in suite+seed21), 1.12x slower than 2 (152 pairs).
        # 0.3, not 0.5: on the same tile, vectors and split wgmma ran 1.05x the time of mma (524 channels-last
        # pairs in suite+seed21), though its best beat mma's best on 16 of the 28 problems a GEMM family won.
        # Element-wise B (vector_b 1: C has no wider chunk) with wide A chunks: 8 ran 1.33x the time of 2
        # (27 same-params pairs over eight H100 DBs, 25 slower; bench/NOTES.md 56), against mma's coin toss.
        narrow_b = 0.3 * math.log2(p.vector_a / 2) if p.vector_b == 1 and p.vector_a > 2 else 0.0
        return super().heuristic_score(p, problem, target) + 0.3 - 0.1 * math.log2(p.slices) - narrow_b
