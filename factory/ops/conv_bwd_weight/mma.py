"""`mma`: implicit GEMM on matrix instructions (templates/common/igemm.h, mma.h).

dW[g] (K x C*filter) = dOut[g]^T (K x N*out) . im2col(In[g]) (N*out x C*filter), with blocks tiling K (M)
and C*filter (N) and warps issuing mma.sync with fp32 accumulation: on 16-bit operands, or on fp32 ones
as three TF32 products (fp32 accuracy). Operands are
staged as they lie in memory: channels-last tensors in chunks along K / C (`vector_a`, `vector_b`
elements, 16 bytes at 8), NGCHW ones in chunks along output rows (see _row_chunks_why_not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget, MatrixUnit
from ...problem import ConvProblem, DType, Layout
from ..base import I32, Launch, Struct
from ..conv import INT32_LIMIT, geometry_ints, too_large
from ..conv import layouts as cl
from .common import ALL_CELLS, GRID_Y_LIMIT, BwdWeightFamily, Reduction, check_split, fill_score, reduction_length

# The instruction tile of templates/common/mma.h: m16n8k16 for 16-bit operands, m16n8k8 (three TF32
# products) for fp32; block_k is a multiple of 16, so of both.
MMA_M, MMA_N, MMA_K = 16, 8, 16
LANES = 32
OPERAND_BYTES = {DType.FP16: 2, DType.BF16: 2, DType.BF16_FP32W: 2, DType.FP32: 4}
CELLS = frozenset(cell for cell in ALL_CELLS if cell[1] in OPERAND_BYTES)
CHUNK_BYTES_MAX = 16  # cp.async's widest copy


@dataclass(frozen=True)
class MmaParams:
    block_m: int
    block_n: int
    block_k: int
    warps_m: int
    warps_n: int
    stages: int
    vector_a: int
    vector_b: int
    split_k: int
    reduction: Reduction
    index_bits: int = 32

    def __post_init__(self) -> None:
        check_split(self.split_k, self.reduction)
        if self.index_bits not in (32, 64):
            raise ValueError(f"index_bits must be 32 or 64, not {self.index_bits}")
        if self.block_m % (self.warps_m * MMA_M) or self.block_n % (self.warps_n * MMA_N):
            raise ValueError(f"block {self.block_m}x{self.block_n} does not split into {self.warps_m}x{self.warps_n} "
                             f"warp tiles of whole {MMA_M}x{MMA_N} instructions")
        if self.block_k % MMA_K:
            raise ValueError(f"block_k {self.block_k} is not a multiple of the instruction's {MMA_K}")
        if self.stages < 2:
            raise ValueError("the pipeline needs at least 2 stages")
        for v in (self.vector_a, self.vector_b):
            if v not in (1, 2, 4, 8) or self.block_k % v or min(self.block_m, self.block_n) % v:
                raise ValueError(f"vector width {v} must be 1, 2, 4 or 8 and divide the block tile")

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * LANES

    def shared_bytes(self, layout: Layout, dtype: DType) -> int:
        """The pipeline's shared memory (igemm.h Config::SHARED_BYTES): every stage's A and B tile, rows
        padded by 16 bytes."""
        size = OPERAND_BYTES[dtype]
        pad = 16 // size
        r_major = cl.channel_innermost(layout)
        a = (self.block_k * (self.block_m + pad)) if r_major else (self.block_m * (self.block_k + pad))
        b = (self.block_k * (self.block_n + pad)) if r_major else (self.block_n * (self.block_k + pad))
        return (a + b) * self.stages * size

    def suffix(self) -> str:
        return (
            f"b{self.block_m}x{self.block_n}x{self.block_k}_w{self.warps_m}x{self.warps_n}_p{self.stages}"
            f"_v{self.vector_a}x{self.vector_b}_i{self.index_bits}_sk{self.split_k}_{self.reduction.value}"
        )

    def template_values(self) -> dict[str, Any]:
        return {**gemm_template_values(self, "mma"), "warps_m": self.warps_m, "warps_n": self.warps_n}


def gemm_template_values(p: Any, engine: str) -> dict[str, Any]:
    """What templates/conv_bwd_weight/mma.hip.j2 takes from any of its engines' params."""
    return {
        "engine": engine,
        "block_m": p.block_m,
        "block_n": p.block_n,
        "block_k": p.block_k,
        "threads": p.threads,
        "stages": p.stages,
        "vector_a": p.vector_a,
        "vector_b": p.vector_b,
        "reduce_mode": p.reduction.mode,
        "index_type": "int" if p.index_bits == 32 else "long long",
    }


class Mma(BwdWeightFamily):
    name = "mma"
    template = "conv_bwd_weight/mma.hip.j2"
    params_type = MmaParams
    description = "implicit GEMM on matrix instructions (mma.sync; fp32 as 3xTF32); split-K"

    def supported_cells(self) -> frozenset:
        return CELLS

    def cell_allows(self, params: MmaParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return max(params.vector_a, params.vector_b) * OPERAND_BYTES[dtype] <= CHUNK_BYTES_MAX


    def why_not_on(self, params: MmaParams, target: DeviceTarget) -> str | None:
        if MatrixUnit.MMA_SYNC not in target.matrix_units:
            return f"needs mma.sync (NVIDIA sm_80 or newer), which target {target.arch} lacks"
        return None

    def needs(self, params: MmaParams) -> frozenset[MatrixUnit]:
        return frozenset({MatrixUnit.MMA_SYNC})

    def why_not(self, params: MmaParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        # 64-bit offsets take tensors of 2^31 elements or more, as long as each stride fits the argument
        # struct's 32-bit fields (any tensor with N > 1 whose samples are under 2^31 elements).
        if params.index_bits == 32:
            return too_large(problem) or self.why_not_here(params, problem, target)
        if any(abs(v) > INT32_LIMIT for v in geometry_ints(problem)):
            return "a stride or size of 2**31 elements or more does not fit the 32-bit argument struct"
        if reduction_length(problem) > INT32_LIMIT or math.prod(problem.weight_shape_logical) > INT32_LIMIT:
            return "2**31 or more output positions or weight elements: reduction rows and weight offsets are 32-bit"
        return self.why_not_here(params, problem, target)

    def why_not_here(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.G > GRID_Y_LIMIT:
            return f"G={problem.G} exceeds the grid's {GRID_Y_LIMIT} groups"
        if cl.channel_innermost(problem.layout):
            if problem.K % p.vector_a or problem.C % p.vector_b:
                return (f"chunks of {p.vector_a} along K and {p.vector_b} along C need K and C divisible by "
                        f"them (C={problem.C}, K={problem.K})")
        else:
            reason = _row_chunks_why_not(p, problem)
            if reason:
                return reason
        shared = p.shared_bytes(problem.layout, problem.dtype)
        if shared > target.shared_optin:
            return f"the pipeline needs {shared} bytes of shared memory, over the {target.shared_optin} of {target.arch}"
        chunks = math.ceil(reduction_length(problem) / p.block_k)
        if p.split_k > chunks:
            return f"split-K {p.split_k} exceeds the {chunks} reduction chunks of this problem"
        return None

    def layout_values(self, layout: Layout) -> dict[str, Any]:
        r_major = "true" if cl.channel_innermost(layout) else "false"
        return {"a_rmajor": r_major, "b_rmajor": r_major}

    def main_launch(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget, args: Struct, wei_numel: int) -> Launch:
        r_per_split = math.ceil(math.ceil(reduction_length(problem) / p.split_k) / p.block_k) * p.block_k
        return Launch("kf_main", (_tiles(p, problem), problem.G, p.split_k), (p.threads, 1, 1),
                      (args, I32(r_per_split), I32(wei_numel)), shared_bytes=p.shared_bytes(problem.layout, problem.dtype))

    def heuristic_score(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget) -> float:
        blocks = _tiles(p, problem) * problem.G * p.split_k
        n_cols = problem.C * problem.filter_volume
        used = (problem.K / (math.ceil(problem.K / p.block_m) * p.block_m)) * (
            n_cols / (math.ceil(n_cols / p.block_n) * p.block_n))
        full = CHUNK_BYTES_MAX // OPERAND_BYTES[problem.dtype]
        wide = 0.3 * (p.vector_a == full) + 0.3 * (p.vector_b == full)
        narrow_index = 0.2 * (p.index_bits == 32)
        return 2.0 + used + wide + narrow_index + fill_score(blocks, target) - self.reduction_penalty(p)


def _row_chunks_why_not(p: MmaParams, problem: ConvProblem) -> str | None:
    """NGCHW operands are staged in chunks along output rows. Output-gradient chunks need the output
    width divisible by the chunk; input chunks are contiguous, aligned and wholly inside or outside the
    input row only at stride 1 with the row width, left padding and every tap's shift multiples of it."""
    wo = problem.output[-1]
    if wo % p.vector_a or wo % p.vector_b:
        return f"chunks of {max(p.vector_a, p.vector_b)} output positions need the output width {wo} divisible by it"
    v = p.vector_b
    if v > 1:
        taps_aligned = problem.filter[-1] == 1 or problem.dilation[-1] % v == 0
        if problem.stride[-1] != 1 or problem.input[-1] % v or problem.pad[-1] % v or not taps_aligned:
            return (f"input chunks of {v} along rows need stride 1 and the input width, left padding and "
                    f"dilation (with more than one tap) divisible by {v}")
    return None


def _tiles(p: MmaParams, problem: ConvProblem) -> int:
    return math.ceil(problem.K / p.block_m) * math.ceil(problem.C * problem.filter_volume / p.block_n)
