"""The facts of templates/common/wgmma.h that the conv ops' warpgroup-MMA families check tuning points against,
and the block shape their plain-GEMM (`pw`) families share: 1-4 warpgroups stacked along M over one column tile,
a pipeline of 128-byte-swizzled 16-bit stages."""

from __future__ import annotations

from typing import Any

GROUP_ROWS = 64  # rows of one wgmma: a warpgroup's share of the block tile
GROUP_THREADS = 128
SWIZZLE_ROW = 64  # 16-bit elements in a 128-byte swizzle row
MAX_N = 256  # the widest wgmma
ATOM_BYTES = 1024  # a swizzle atom; the pipeline's base is aligned to it
OPERAND_BYTES = 2
INSTRUCTION_K = 16  # reduction depth of one wgmma on 16-bit operands


def check_pipeline(p: Any, threads: int, k_unit: int = INSTRUCTION_K) -> None:
    """What every wgmma pipeline needs of a tuning point: stages of whole k_units (instructions, or swizzle
    rows where the reduction is a tile's stored row) and whole threads per reduction row, two stages at
    least, chunks within a 16-byte unit."""
    if p.block_k % k_unit or threads % p.block_k:
        raise ValueError(f"block_k {p.block_k} must be a multiple of {k_unit} dividing a pipeline's "
                         f"{threads} threads")
    if p.stages < 2:
        raise ValueError("the pipeline needs at least 2 stages")
    for v in (p.vector_a, p.vector_b):
        if v not in (1, 2, 4, 8):
            raise ValueError(f"vector width {v} must be 1, 2, 4 or 8 (within a 16-byte unit)")


class StackedWarpgroups:
    """A tuning point's block of block_m / 64 warpgroups over block_n columns, `stages` stages of block_k
    reduction rows (the fields of the dataclass that mixes this in)."""

    block_m: int
    block_n: int
    block_k: int
    stages: int

    def check_block(self) -> None:
        if self.block_m % GROUP_ROWS or not 0 < self.block_m <= 4 * GROUP_ROWS:
            raise ValueError(f"block_m {self.block_m} must be 64, 128, 192 or 256 (64 rows a warpgroup)")
        if self.block_n % SWIZZLE_ROW or not 0 < self.block_n <= MAX_N:
            raise ValueError(f"block_n {self.block_n} must be a multiple of {SWIZZLE_ROW} up to {MAX_N}")

    @property
    def groups_m(self) -> int:
        return self.block_m // GROUP_ROWS

    @property
    def threads(self) -> int:
        return self.groups_m * GROUP_THREADS

    def pipeline_bytes(self) -> int:
        """The stages of A and B tiles, plus room to align the base to a swizzle atom (dynamic shared memory
        is 16-byte aligned)."""
        return (self.block_m + self.block_n) * self.block_k * OPERAND_BYTES * self.stages + ATOM_BYTES - 16
