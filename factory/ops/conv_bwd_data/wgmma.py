"""`wgmma`: backward-data's implicit GEMM on Hopper's warpgroup MMA (templates/common/wgmma.h, sm_90a).

The `mma` family's template, stride phases, gathers and stores; the main loop differs. Each warpgroup
(four warps) issues wgmma.mma_async m64nNk16 on operands the instruction reads from 128-byte-swizzled
shared memory, so threads load no fragments: output-gradient rows K-major (a position's channels
contiguous, as a channels-last tensor lies them), weights r-major. Channels-last layouts (NGCHW ones
through the transposing pass), fp16 / bf16 operands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout
from ..conv.family import WgmmaRules
from ..conv import layouts as cl
from ..conv.warpgroups import ATOM_BYTES, GROUP_ROWS, GROUP_THREADS, MAX_N, OPERAND_BYTES, SWIZZLE_ROW
from ..conv.tile_store import TileStore
from ..conv.transpose import transpose_values
from .common import ALL_CELLS
from .mma import ACC_BYTES, MAX_TAPS, TAP_BYTES, Mma, PhaseLaunch, check_groups_per_tile, groups_suffix

SWIZZLE_UNIT = 8  # 16-bit elements in a 16-byte unit of the swizzled tiles
# Groups whose GEMM is smaller than this (C*K) are left to `mma` and the memory-bound families: on random seed
# 103 (H100) wgmma's best ran 1.5-700x the time of the best other family on every such problem, depthwise
# ones taking milliseconds of tune time each (bench/NOTES.md section 59).
MIN_PRODUCTS = 256
TWO_BLOCKS_NEED_CAP = 128 * 128  # tiles from this size up need __launch_bounds__ for two blocks an SM
CELLS = frozenset(cell for cell in ALL_CELLS if cell[1] in (DType.FP16, DType.BF16))


@dataclass(frozen=True)
class WgmmaParams:
    block_m: int  # input positions per block: 64 per warpgroup along M
    block_n: int  # input channels per block: whole 64-channel swizzle rows per warpgroup along N
    block_k: int  # reduction rows (tap, k) per stage: whole 64-element swizzle rows
    groups_m: int
    groups_n: int
    stages: int
    vector_a: int  # output-gradient elements per chunk along K
    vector_b: int  # weight elements per chunk along C (GKYXC weights, or any 1x1 weight); else 1
    phases: PhaseLaunch = PhaseLaunch.MERGED
    store: TileStore = TileStore.ELEMENT
    transpose: bool = False  # NGCHW through the transposing pass (as `mma`)
    overlap: bool = False  # a stage's wgmma left running while the next stage is loaded (loads STAGES - 2 ahead)
    min_blocks: int = 1  # blocks an SM the compiler must fit (__launch_bounds__), capping registers a thread
    groups_per_tile: int = 1  # groups side by side in a block's GEMM (as `mma`)

    def __post_init__(self) -> None:
        if self.block_m != GROUP_ROWS * self.groups_m:
            raise ValueError(f"block_m {self.block_m} must be {GROUP_ROWS} rows per warpgroup ({self.groups_m})")
        columns, rest = divmod(self.block_n, self.groups_n)
        if rest or columns % SWIZZLE_ROW or columns > MAX_N:
            raise ValueError(f"block_n {self.block_n} over {self.groups_n} warpgroups must give each a multiple of "
                             f"{SWIZZLE_ROW} columns, at most {MAX_N}")
        if self.block_k % SWIZZLE_ROW or self.threads % self.block_k:
            raise ValueError(f"block_k {self.block_k} must be a multiple of {SWIZZLE_ROW} dividing the "
                             f"{self.threads} threads")
        if self.stages < (3 if self.overlap else 2):
            raise ValueError("the pipeline needs at least 2 stages, 3 with a stage's wgmma left running")
        check_groups_per_tile(self.groups_per_tile)
        if self.min_blocks not in (1, 2):
            raise ValueError(f"min_blocks must be 1 or 2, not {self.min_blocks}")
        for v in (self.vector_a, self.vector_b):
            if v not in (1, 2, 4, 8):
                raise ValueError(f"vector width {v} must be 1, 2, 4 or 8 (within a 16-byte unit)")

    @property
    def threads(self) -> int:
        return self.groups_m * self.groups_n * GROUP_THREADS

    def shared_bytes(self, layout: Layout, dtype: DType) -> int:
        """Every stage's A and B tiles (wgmma.h Config), or the finished tile of a staged store if more,
        plus room to align the base to a swizzle atom (dynamic shared memory is 16-byte aligned)."""
        pipeline = (self.block_m + self.block_n) * self.block_k * OPERAND_BYTES * self.stages
        if self.store is TileStore.STAGED:
            pipeline = max(pipeline, self.block_m * (self.block_n + 4) * ACC_BYTES)
        return pipeline + ATOM_BYTES - 16

    def suffix(self) -> str:
        per_phase = "_pp" if self.phases is PhaseLaunch.PER_PHASE else ""
        transposed = "_tr" if self.transpose else ""
        staged = "_st" if self.store is TileStore.STAGED else ""
        overlap = "_ov" if self.overlap else ""
        occupancy = f"_mb{self.min_blocks}" if self.min_blocks > 1 else ""
        return (f"b{self.block_m}x{self.block_n}x{self.block_k}_g{self.groups_m}x{self.groups_n}_p{self.stages}"
                f"_v{self.vector_a}x{self.vector_b}{per_phase}{transposed}{staged}{overlap}{occupancy}"
                f"{groups_suffix(self.groups_per_tile)}")

    def template_values(self) -> dict[str, Any]:
        return {"engine": "wgmma", "block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k,
                "groups_m": self.groups_m, "groups_n": self.groups_n, "threads": self.threads,
                "stages": self.stages, "vector_a": self.vector_a, "vector_b": self.vector_b, "max_taps": MAX_TAPS,
                "per_phase": self.phases is PhaseLaunch.PER_PHASE, "staged_store": self.store is TileStore.STAGED,
                "transpose": self.transpose, "stage_positions": True,
                "wgmma_a_k_major": True, "wgmma_overlap": self.overlap,
                "min_blocks": self.min_blocks, "groups_per_tile": self.groups_per_tile} | transpose_values()


class Wgmma(WgmmaRules, Mma):
    name = "wgmma"
    params_type = WgmmaParams
    description = ("implicit GEMM on Hopper warpgroup MMA (wgmma, sm_90a): fp16/bf16, channels-last or through the "
                   "NGCHW transposing pass; stride phases as `mma`")

    def supported_cells(self) -> frozenset:
        return CELLS

    def cell_allows(self, params: WgmmaParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        # Output-gradient tiles are K-major: channels-last tensors, or NGCHW ones through the transposing pass.
        return cl.channel_innermost(layout) or params.transpose

    def why_not_here(self, p: WgmmaParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        products = problem.C * problem.K * p.groups_per_tile ** 2  # a block's GEMM: its groups side by side
        if products < MIN_PRODUCTS:
            return (f"C*K = {problem.C * problem.K} per group, {p.groups_per_tile} a tile: a 64-channel wgmma tile "
                    f"would mostly multiply padding (at least {MIN_PRODUCTS})")
        if p.min_blocks > 1:
            shared = p.shared_bytes(problem.layout, problem.dtype) + MAX_TAPS * TAP_BYTES
            fitting = target.blocks_by_shared(shared)
            if fitting is not None and fitting < p.min_blocks:
                return (f"{p.min_blocks} blocks an SM need {p.min_blocks * (shared + target.shared_reserved)} bytes "
                        f"of shared memory, over the {target.shared_per_processor} of {target.arch}")
        return super().why_not_here(p, problem, target)

    def heuristic_score(self, p: WgmmaParams, problem: ConvProblem, target: DeviceTarget) -> float:
        # mma's terms (tile reuse, chunks, channels and stage rows used, fill, the transposing pass), with the
        # instruction reading its operands itself. A stage's wgmma left running: 0.96x the time of the same point
        # waiting for it (11 same-params pairs on the suite's dense rows, 9 faster). Two blocks an SM where a
        # block's registers would otherwise allow one (128 x 128 tiles: 146-150 a thread uncapped, 126 capped):
        # 0.77-0.90x (6 pairs); on 128 x 64 tiles, which fit two blocks anyway, 1.00x (bench/NOTES.md 59).
        # Output-gradient chunks under 16 bytes: the best wgmma point with 1- or 2-element chunks ran 1.0-13.6x
        # the time of mma's with the same chunks (typically 2x; 60 problems of five H100 DBs, section 59),
        # where 8-element chunks ran 0.75-1.6x: each element is a separate store into the swizzled tile.
        narrow_a = 1.0 if p.vector_a < SWIZZLE_UNIT else 0.0
        overlap = 0.06 if p.overlap else 0.0
        occupancy = 0.2 if p.min_blocks > 1 and p.block_m * p.block_n >= TWO_BLOCKS_NEED_CAP else 0.0
        return super().heuristic_score(p, problem, target) + 0.3 - narrow_a + overlap + occupancy
