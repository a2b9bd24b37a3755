"""`mfma`: the `mma` family's backward-data GEMM on AMD CDNA matrix cores (templates/common/mfma.h).

The same template, stride-phase split and gathers as `mma`; the matrix instructions are MFMA
(v_mfma_f32_16x16x16f16 / 16x16x16bf16_1k / 16x16x4f32) issued by 64-lane wavefronts, each owning whole
16x16 accumulator tiles. fp32 runs on the fp32 instruction itself (no split products); int8 is left to
`direct` and `mma`. gfx90a and newer for bf16 (gfx908 lacks the K = 16 bf16 form).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ...device import DeviceTarget
from ...problem import ConvProblem, DType
from ..conv.family import CHUNK_BYTES_MAX, MFMA_TILE, WAVE_LANES, MfmaRules, fill_score
from .common import ALL_CELLS
from .mma import OPERAND_BYTES, Mma, MmaParams, merged_blocks

CELLS = frozenset(cell for cell in ALL_CELLS if cell[1] in (DType.FP16, DType.BF16, DType.FP32))


@dataclass(frozen=True)
class MfmaParams(MmaParams):
    instruction_m: ClassVar[int] = MFMA_TILE
    instruction_n: ClassVar[int] = MFMA_TILE
    lanes: ClassVar[int] = WAVE_LANES
    engine: ClassVar[str] = "mfma"


class Mfma(MfmaRules, Mma):
    name = "mfma"
    params_type = MfmaParams
    description = ("implicit GEMM on AMD CDNA matrix cores (MFMA, 64-lane wavefronts); strided problems split by "
                   "stride phase as `mma`")

    def supported_cells(self) -> frozenset:
        return CELLS

    def why_not_here(self, p: MfmaParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        return self.bf16_refusal(problem, target) or super().why_not_here(p, problem, target)

    def heuristic_score(self, p: MfmaParams, problem: ConvProblem, target: DeviceTarget) -> float:
        # mma's rules were measured on the H100 only; AMD targets keep the generic prior (tile fill,
        # channels used, widest chunks).
        blocks = merged_blocks(problem, p.block_m, p.block_n)
        used_n = problem.C / (math.ceil(problem.C / p.block_n) * p.block_n)
        full = CHUNK_BYTES_MAX // OPERAND_BYTES[problem.dtype]
        wide = 0.3 * (p.vector_a == full) + 0.3 * (p.vector_b == full)
        many = 1.0 if problem.C * problem.K > 16 else -1.0  # few channels per group: the direct family's
        return 2.0 + many + used_n + wide + fill_score(blocks, target)
