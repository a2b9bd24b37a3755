"""What every conv op's kernel families share: the op-wide refusal of oversized problems, the element
types a template sees, how well a grid fills the device, and the facts of the matrix engine
(templates/common/mma.h, igemm.h) that tuning points are checked against."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from ...device import DeviceTarget, MatrixUnit
from ...problem import ConvProblem, DType, Scalar
from ..base import Family
from . import cpp_type, too_large

# mma.h's instruction tile for 16-bit operands (m16n8k16), a warp's lanes, and cp.async's widest copy.
MMA_M, MMA_N, MMA_K = 16, 8, 16
LANES = 32
CHUNK_BYTES_MAX = 16


def mma_reduction_depth(element_bytes: int) -> int:
    """Reduction rows one mma.sync takes on 16-bit operands (m16n8k16) or fp32 ones (TF32 m16n8k8, three times)."""
    return MMA_K if element_bytes == 2 else MMA_K // 2


def fill_score(blocks: int, target: DeviceTarget) -> float:
    """How well `blocks` fill the device: up to 1 at four blocks per processor, minus a penalty past 64."""
    fill = min(blocks / (4 * target.processors), 1.0)
    return fill - (0.5 if blocks > 64 * target.processors else 0.0)


class ConvFamily(Family[Any, ConvProblem]):
    """A conv op's family: problems too large for 32-bit indexing are refused before the family's own
    reasons (a family that indexes in 64 bits overrides `why_not`)."""

    def why_not(self, params: Any, problem: ConvProblem, target: DeviceTarget) -> str | None:
        return too_large(problem) or self.why_not_here(params, problem, target)

    @abstractmethod
    def why_not_here(self, params: Any, problem: ConvProblem, target: DeviceTarget) -> str | None:
        """The family's own reasons (the op-wide ones are checked first)."""

    @staticmethod
    def operand_types(dtype: DType) -> dict[str, str]:
        """The template's operand type `tin` and accumulator type `acc` (int for int8 operands)."""
        return {"tin": cpp_type(dtype.tensor), "acc": "int" if dtype.accumulator is Scalar.I32 else "float"}


# mfma.h's instruction tile and wavefront; CDNA1 (gfx908) has bf16 MFMA only with K = 8, and the
# templates issue the K = 16 form.
WAVE_LANES = 64
MFMA_TILE = 16
BF16_K16_MISSING = frozenset({"gfx908"})


class MmaSyncRules:
    """What the families that need mma.sync and have no portable fallback share (`mma`, `gwl`, `dwm`, the
    fused forward's `fused`): NVIDIA sm_80 or newer. Listed before the op's family base."""

    def needs(self, params: Any) -> frozenset[MatrixUnit]:
        return frozenset({MatrixUnit.MMA_SYNC})

    def why_not_on(self, params: Any, target: DeviceTarget) -> str | None:
        if MatrixUnit.MMA_SYNC not in target.matrix_units:
            return f"needs mma.sync (NVIDIA sm_80 or newer), which target {target.arch} lacks"
        return None


class WgmmaRules:
    """What the warpgroup-MMA families (`wgmma`, `pw`, the fused forward's `twopass`) share: they need Hopper's
    warpgroup MMA (sm_90a), not mma.sync. Listed before the family's other bases (`mma` for `wgmma`)."""

    def needs(self, params: Any) -> frozenset[MatrixUnit]:
        return frozenset({MatrixUnit.WGMMA})

    def why_not_on(self, params: Any, target: DeviceTarget) -> str | None:
        return Family.why_not_on(self, params, target)  # type: ignore[arg-type]  # the generic check of needs()


class MfmaRules:
    """What the conv ops' MFMA families (subclasses of their `mma` family) share: they need AMD's matrix
    cores, not mma.sync, and bf16 needs gfx90a or newer. Listed before the `mma` family among the bases."""

    def needs(self, params: Any) -> frozenset[MatrixUnit]:
        return frozenset({MatrixUnit.MFMA})

    def why_not_on(self, params: Any, target: DeviceTarget) -> str | None:
        return Family.why_not_on(self, params, target)  # type: ignore[arg-type]  # the generic check of needs()

    @staticmethod
    def bf16_refusal(problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.dtype in (DType.BF16, DType.BF16_FP32W) and target.arch in BF16_K16_MISSING:
            return f"bf16 MFMA with K = 16 needs gfx90a or newer, not {target.arch}"
        return None
