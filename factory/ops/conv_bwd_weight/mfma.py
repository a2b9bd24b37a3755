"""`mfma`: the `mma` family's implicit GEMM on AMD CDNA matrix cores (templates/common/mfma.h).

Same gathers, engine and epilogues as `mma` (one template); the matrix instructions are MFMA
(v_mfma_f32_16x16x16f16 / 16x16x16bf16_1k / 16x16x4f32) issued by 64-lane wavefronts, each owning
whole 16x16 accumulator tiles. fp32 operands run on the fp32 instruction itself (no split products).
Every layout, rank and float dtype; gfx90a and newer for bf16 (gfx908 lacks the K = 16 bf16 form).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ...device import DeviceTarget
from ...problem import ConvProblem, DType
from ..conv.family import MFMA_TILE, WAVE_LANES, MfmaRules, fill_score
from .common import ALL_CELLS
from .mma import Mma, MmaParams, gemm_template_values

CELLS = frozenset(cell for cell in ALL_CELLS if cell[1] in (DType.FP16, DType.BF16, DType.BF16_FP32W, DType.FP32))


@dataclass(frozen=True)
class MfmaParams(MmaParams):
    instruction_m: ClassVar[int] = MFMA_TILE
    instruction_n: ClassVar[int] = MFMA_TILE
    lanes: ClassVar[int] = WAVE_LANES

    def template_values(self) -> dict[str, Any]:
        return {**gemm_template_values(self, "mfma"), "warps_m": self.warps_m, "warps_n": self.warps_n}


class Mfma(MfmaRules, Mma):
    name = "mfma"
    params_type = MfmaParams
    description = "implicit GEMM on AMD CDNA matrix cores (MFMA, 64-lane wavefronts); split-K"

    def supported_cells(self) -> frozenset:
        return CELLS

    def why_not_here(self, p: MfmaParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        return self.bf16_refusal(problem, target) or super().why_not_here(p, problem, target)

    def split_score(self, p: MfmaParams, problem: ConvProblem, target: DeviceTarget) -> float:
        # mma's split rule and time model were measured on the H100 only; AMD targets keep the generic fill.
        return fill_score(self.unsplit_blocks(p, problem) * p.split_k, target)

    def idle_tile(self, used: float, problem: ConvProblem) -> float:
        # Measured on the H100 only, like the split model.
        return 0.0
