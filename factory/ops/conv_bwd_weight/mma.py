"""`mma`: implicit GEMM on matrix instructions (templates/common/igemm.h, mma.h).

dW[g] (K x C*filter) = dOut[g]^T (K x N*out) . im2col(In[g]) (N*out x C*filter), with blocks tiling K (M)
and C*filter (N) and warps issuing mma.sync: on 16-bit operands with fp32 accumulation, on fp32 ones
as three TF32 products (fp32 accuracy), on int8 ones (s8) with int32 accumulation, and on fp16 ones
rounded to fp8 while fragments are loaded (dtype fp16_comp_bf8_fp8: e5m2 output-gradient x e4m3 input). Operands are
staged as they lie in memory: channels-last tensors in chunks along K / C (`vector_a`, `vector_b`
elements, 16 bytes at 8), NGCHW ones in chunks along output rows (see _row_chunks_why_not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ...device import DeviceTarget, MatrixUnit
from ...problem import ConvProblem, DType, Layout
from ..base import I32, Launch, Struct
from ..conv import INT32_LIMIT, geometry_ints, too_large
from ..conv import layouts as cl
from ..conv.family import CHUNK_BYTES_MAX, LANES, MMA_K, MMA_M, MMA_N, MmaSyncRules, fill_score
from ..conv.transpose import transpose_values
from .common import (ALL_CELLS, GRID_Y_LIMIT, INT8_SAT_CELLS, BwdWeightFamily, Reduction, check_split,
                     grid_finish_refusal, reduction_length)
from .split_model import GEMM_SPLITS
from .staged import staged_conv_args, staging_launches

# The instruction tile of templates/common/mma.h: m16n8k16 for 16-bit operands, m16n8k8 (three TF32
# products) for fp32, m16n8k32 for int8 and fp8; block_k is a multiple of 16, and of 32 for the k32 forms.
K32_DTYPES = frozenset({DType.INT8, DType.INT8_SAT, DType.FP16_COMP_BF8_FP8})
OPERAND_BYTES = {DType.FP16: 2, DType.BF16: 2, DType.BF16_FP32W: 2, DType.FP32: 4, DType.INT8: 1,
                 DType.INT8_SAT: 1, DType.FP16_COMP_BF8_FP8: 2}
FP8_CELLS = frozenset((layout, DType.FP16_COMP_BF8_FP8, ndim) for layout in Layout for ndim in (1, 2, 3))
CELLS = frozenset(cell for cell in ALL_CELLS if cell[1] in OPERAND_BYTES) | FP8_CELLS | INT8_SAT_CELLS
FP8_OPERANDS = "kf_mma::f16_as_fp8"  # fp16 storage that mma.h multiplies as e5m2 (A) x e4m3 (B)


@dataclass(frozen=True)
class MmaParams:
    # The instruction tile and the threads that issue it together (templates/common/mma.h).
    instruction_m: ClassVar[int] = MMA_M
    instruction_n: ClassVar[int] = MMA_N
    lanes: ClassVar[int] = LANES

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
    transpose: bool = False  # NGCHW inputs first copied channels-last into the workspace (see staging)
    groups_per_tile: int = 1  # groups side by side in a block's GEMM (only the diagonal is stored)

    def __post_init__(self) -> None:
        check_split(self.split_k, self.reduction)
        if self.index_bits not in (32, 64):
            raise ValueError(f"index_bits must be 32 or 64, not {self.index_bits}")
        im, in_ = self.instruction_m, self.instruction_n
        if self.block_m % (self.warps_m * im) or self.block_n % (self.warps_n * in_):
            raise ValueError(f"block {self.block_m}x{self.block_n} does not split into {self.warps_m}x{self.warps_n} "
                             f"warp tiles of whole {im}x{in_} instructions")
        if self.block_k % MMA_K:
            raise ValueError(f"block_k {self.block_k} is not a multiple of the instruction's {MMA_K}")
        if self.stages < 2:
            raise ValueError("the pipeline needs at least 2 stages")
        if self.groups_per_tile < 1:
            raise ValueError("groups_per_tile must be >= 1")
        for v in (self.vector_a, self.vector_b):
            if v not in (1, 2, 4, 8, 16) or self.block_k % v or min(self.block_m, self.block_n) % v:
                raise ValueError(f"vector width {v} must be 1, 2, 4, 8 or 16 and divide the block tile")

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * self.lanes

    def shared_bytes(self, layout: Layout, dtype: DType) -> int:
        """The pipeline's shared memory (igemm.h Config::SHARED_BYTES): every stage's A and B tile, rows
        padded by 16 bytes."""
        size = OPERAND_BYTES[dtype]
        pad = 16 // size
        r_major = cl.channel_innermost(layout) or self.transpose
        a = (self.block_k * (self.block_m + pad)) if r_major else (self.block_m * (self.block_k + pad))
        b = (self.block_k * (self.block_n + pad)) if r_major else (self.block_n * (self.block_k + pad))
        return (a + b) * self.stages * size

    def suffix(self) -> str:
        return (
            f"b{self.block_m}x{self.block_n}x{self.block_k}_w{self.warps_m}x{self.warps_n}_p{self.stages}"
            f"_v{self.vector_a}x{self.vector_b}_i{self.index_bits}_sk{self.split_k}_{self.reduction.value}"
            + ("_tr" if self.transpose else "") + (f"_gt{self.groups_per_tile}" if self.groups_per_tile > 1 else "")
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
        "transpose": p.transpose,
        "groups_per_tile": p.groups_per_tile,
    }


class Mma(MmaSyncRules, BwdWeightFamily):
    name = "mma"
    template = "conv_bwd_weight/mma.hip.j2"
    params_type = MmaParams
    description = ("implicit GEMM on matrix instructions (mma.sync; fp32 as 3xTF32, int8 on s8, fp8 from fp16); "
                   "split-K; NGCHW transposing pass; groups per tile")

    def supported_cells(self) -> frozenset:
        return CELLS

    def cell_allows(self, params: MmaParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        if not staging_fits_layout(params, layout):
            return False
        if dtype in K32_DTYPES and params.block_k % 32:
            return False
        return max(params.vector_a, params.vector_b) * OPERAND_BYTES[dtype] <= CHUNK_BYTES_MAX


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

    def template_values(self, params: MmaParams, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        values = super().template_values(params, layout, dtype, ndim)
        if params.transpose:  # the main kernel reads the channels-last copies
            values |= {"a_rmajor": "true", "b_rmajor": "true"}
        if dtype is DType.FP16_COMP_BF8_FP8:
            values["tin"] = FP8_OPERANDS
        return values | transpose_values()

    def why_not_here(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.dtype is DType.FP16_COMP_BF8_FP8 and MatrixUnit.MMA_FP8 not in target.matrix_units:
            return f"fp8 matrix instructions need NVIDIA sm_89 or newer, which target {target.arch} is not"
        if p.groups_per_tile > problem.G:
            return f"{p.groups_per_tile} groups per tile, but the problem has G={problem.G}"
        if math.ceil(problem.G / p.groups_per_tile) > GRID_Y_LIMIT:
            return f"G={problem.G} exceeds the grid's {GRID_Y_LIMIT} group blocks"
        if p.transpose and problem.N > GRID_Y_LIMIT:
            return f"the transposing pass takes one sample per grid z, at most {GRID_Y_LIMIT} (N={problem.N})"
        reason = self.chunks_why_not(p, problem)
        if reason:
            return reason
        shared = p.shared_bytes(problem.layout, problem.dtype)
        if shared > target.shared_optin:
            return f"the pipeline needs {shared} bytes of shared memory, over the {target.shared_optin} of {target.arch}"
        chunks = self.reduction_stages(p, problem)
        if p.split_k > chunks:
            return f"split-K {p.split_k} exceeds the {chunks} reduction chunks of this problem"
        if self.finishes_in_grid:
            return grid_finish_refusal(p, self.unsplit_blocks(p, problem) * p.split_k, problem, target)
        return None

    def chunks_why_not(self, p: MmaParams, problem: ConvProblem) -> str | None:
        """Whether the problem's tensors split into the point's copy chunks: along K and C where channels
        are innermost (as given or as the transposing pass copies them), else along output rows."""
        if cl.channel_innermost(problem.layout) or p.transpose:
            if problem.K % p.vector_a or problem.C % p.vector_b:
                return (f"chunks of {p.vector_a} along K and {p.vector_b} along C need K and C divisible by "
                        f"them (C={problem.C}, K={problem.K})")
            return None
        return _row_chunks_why_not(p, problem)

    def reduction_stages(self, p: MmaParams, problem: ConvProblem) -> int:
        """The pipeline stages of the whole reduction, which split-K shares out."""
        return math.ceil(reduction_length(problem) / p.block_k)

    def layout_values(self, layout: Layout) -> dict[str, Any]:
        r_major = "true" if cl.channel_innermost(layout) else "false"
        return {"a_rmajor": r_major, "b_rmajor": r_major}

    def staging(self, p: MmaParams, problem: ConvProblem, at: int) -> tuple[tuple[Launch, ...], int]:
        """With `transpose`: the input and the output gradient copied channels-last (NGCHW -> NHWGC)
        into the workspace by the transposing pass (factory/ops/conv/transpose.py)."""
        if not p.transpose:
            return (), 0
        return staging_launches(problem, at, OPERAND_BYTES[problem.dtype])

    def conv_args(self, p: MmaParams, problem: ConvProblem, dst: str, staging_at: int) -> Struct:
        args = super().conv_args(p, problem, dst, staging_at)
        if not p.transpose:
            return args
        return staged_conv_args(args, problem, dst, staging_at, OPERAND_BYTES[problem.dtype])

    def main_launch(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget, args: Struct, wei_numel: int) -> Launch:
        return Launch("kf_main", (_tiles(p, problem), math.ceil(problem.G / p.groups_per_tile), p.split_k), (p.threads, 1, 1),
                      (args, I32(self.split_share(p, problem)), I32(wei_numel)),
                      shared_bytes=p.shared_bytes(problem.layout, problem.dtype))

    def split_share(self, p: MmaParams, problem: ConvProblem) -> int:
        """The main kernel's share of the reduction a split takes: rows, a multiple of block_k."""
        return math.ceil(math.ceil(reduction_length(problem) / p.split_k) / p.block_k) * p.block_k

    def heuristic_score(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget) -> float:
        rows, cols = _gemm_shape(p, problem)
        # The products that count: of groups_per_tile groups side by side only the diagonal is stored, so
        # 1/gt of a tile's work is wanted. Counting the whole tile made gt4 the pick where it ran 1.6x
        # slower than gt1 (mma, geomean of 138 same-params pairs in suite+seed21; wgmma 1.19x).
        used = (rows / (math.ceil(rows / p.block_m) * p.block_m)) * (cols / (math.ceil(cols / p.block_n) * p.block_n))
        used /= p.groups_per_tile
        # Wider chunks pay at every width, not only the widest (suite+seed21, same other params, mma: vector_b 4
        # 0.44x the time of 1, 8 0.93x of 4; vector_a 2 0.67x of 1): 0.1 a doubling, 0.3 at 16 bytes of
        # 16-bit data as before.
        wide = 0.1 * (math.log2(p.vector_a) + math.log2(p.vector_b))
        # block_k 64 ran 1.25x slower than 32 (mma, 944 pairs; wgmma 1.11x, 104 pairs).
        deep = 0.1 * math.log2(p.block_k / 32) if p.block_k > 32 else 0.0
        narrow_index = 0.2 * (p.index_bits == 32)
        # Measured on the H100 (NGCHW fp16): the transposing pass wins where filters have taps (grouped
        # 3x3: 163 vs 285 us, 132 vs 216 us) and loses on 1x1 (80 vs 52 us), whose rows chunk well; a 1x1
        # layer whose odd output rows take no chunks is read element by element in place, where the pass
        # won on 16-bit data (seed 93: fp16 C=16 K=80 79x79, 215 us against 256 us in place and 803 us on
        # FMA) and lost on fp32, whose 3xTF32 products weigh more (seed 51: C=256 K=40 25x25, 114 vs 59 us).
        unchunked = problem.output[-1] % 2 == 1 and OPERAND_BYTES[problem.dtype] == 2
        staged = (0.4 if problem.filter_volume > 1 or unchunked else -0.4) if p.transpose else 0.0
        return (2.0 + used + wide - deep + narrow_index + staged + self.split_score(p, problem, target)
                - self.reduction_penalty(p, problem) - self.idle_tile(used, problem))

    def idle_tile(self, used: float, problem: ConvProblem) -> float:
        """0.3 a halving of the tile's wanted products below a quarter, outside NHWGC. The linear `used`
        barely tells 1 % from 10 %: on the H100 an NGCHW bf16 layer with C = K = 2 (a 2 x 18 GEMM in a
        64 x 64 tile) ran mma 2.39x slower than `dw` (seed 51), as two such rows of seed 41 did (2.70x,
        1.58x), while its NHWGC twin, whose tiles hold groups side by side, was won by mma. Chosen on
        those seeds, after they were looked at (the suite and seeds 21-22 have no such row and keep their
        picks): seed 51 1.141x -> 1.114x the best, worst 2.39x -> 1.96x; seed 41 1.174x -> 1.144x
        (bench/NOTES.md §35)."""
        if problem.layout is Layout.NHWGC:
            return 0.0
        return 0.3 * max(0.0, math.log2(0.25 / used))

    def split_score(self, p: MmaParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """How the tile fills the device at the split the time model prefers (split_model), less log2 of
        how much slower the model finds this split. On the H100 the model picked within 1.032x of each
        tile's best split (worst 1.67x; 1,283 tiles of the suite and seeds 21-22), where the fill alone
        picked within 1.064x (worst 3.12x); on 640 tiles of seeds 23 and 41, looked at after the fit,
        1.029x (worst 1.54x) against 1.065x (2.86x)."""
        base = self.unsplit_blocks(p, problem)
        steps = self.reduction_stages(p, problem)
        rows, cols = _gemm_shape(p, problem)
        outputs = rows * cols * math.ceil(problem.G / p.groups_per_tile)
        best = GEMM_SPLITS.best(base, steps, outputs, target.processors)
        return (self.split_fill(base * best, target)
                - GEMM_SPLITS.lost(base, steps, outputs, p.split_k, target.processors))

    def unsplit_blocks(self, p: MmaParams, problem: ConvProblem) -> int:
        """The blocks of the launch before split-K multiplies them: tiles x group columns."""
        return _tiles(p, problem) * math.ceil(problem.G / p.groups_per_tile)

    def split_fill(self, blocks: int, target: DeviceTarget) -> float:
        """Up to 1 at two blocks an SM, then 0.2 less per doubling: past that, split-K only shortens each
        block's reduction and multiplies the partial sums. On the H100 (suite+seed21) the winner put 0.5-3 blocks
        on each SM on 17 of the 30 problems mma or wgmma won (fp32's 3xTF32 winners: 6-30), and splits of
        48 ran 1.44x slower than 16 (wgmma, 256 same-params pairs; mma 96 vs 16: 1.27x, 380 pairs), which
        fill_score (full marks from 4 to 64 blocks an SM) ranked alike."""
        waves = blocks / (2 * target.processors)
        return min(waves, 1.0) - (0.2 * math.log2(waves) if waves > 1 else 0.0)


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


def staging_fits_layout(p: Any, layout: Layout) -> bool:
    """The transposing pass serves NGCHW tensors (channels-last ones need none); several groups per
    tile need channels-last data, as given or as copied by the pass."""
    channels_last = cl.channel_innermost(layout)
    if p.transpose and channels_last:
        return False
    return p.groups_per_tile == 1 or channels_last or p.transpose


def _gemm_shape(p: MmaParams, problem: ConvProblem) -> tuple[int, int]:
    """A block column's GEMM rows and columns: groups_per_tile groups side by side."""
    return p.groups_per_tile * problem.K, p.groups_per_tile * problem.C * problem.filter_volume


def _tiles(p: MmaParams, problem: ConvProblem) -> int:
    rows, cols = _gemm_shape(p, problem)
    return math.ceil(rows / p.block_m) * math.ceil(cols / p.block_n)
