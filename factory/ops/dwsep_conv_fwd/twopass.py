"""`twopass`: the depthwise stage once, into a workspace, then the pointwise GEMM on warpgroup MMA: two launches
(templates/dwsep_conv_fwd/twopass.hip.j2).

Where K is wide, `fused` computes a position tile's depthwise outputs again in every block of output channels,
and that stage, not the multiplications, bounds its issue (bench/NOTES.md §36, §83: mnv1_b1024 at 8 % of its
roofline). Here `kf_depthwise` computes each depthwise output once (a thread 16 bytes of one position's
channels; fp32 sums, bias and activation, rounded once to the operand type as `fused` rounds them) into a
channels-last workspace of N x positions x C, and `kf_main` multiplies it by the pointwise weights: the
engine's main loop on run matrices (templates/common/igemm_rows.h, both operands K-major, sm_90a wgmma),
bias and activation in the store. Channels-last, the GEMM's rows are the positions and its columns the
output channels; NCHW-style, each sample's GEMM transposed (rows the output channels, a sample a grid z).

The workspace is as large as the input. Where it fits in L2 (50 MB on the H100) it mostly comes back from
there; where it does not it makes a DRAM round trip that `fused` never makes, which the tuner weighs.
fp16 / bf16; C a multiple of 8 (16-byte chunks of the workspace's and the weight's rows).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ...device import DeviceTarget
from ...problem import DType, Layout
from ..base import Buf, Family, Launch, LaunchPlan
from ..conv import cpp_type
from ..conv import layouts as cl
from ..conv.family import WgmmaRules
from ..conv.shape import CompiledShape, Shape
from ..conv.warpgroups import OPERAND_BYTES, SWIZZLE_ROW, StackedWarpgroups, check_pipeline
from .fused import INT32_LIMIT, dwsep_args
from .problem import DwsepProblem

CELLS = frozenset((layout, dtype, ndim) for layout in (Layout.NHWGC, Layout.NGCHW)
                  for dtype in (DType.FP16, DType.BF16) for ndim in (1, 2, 3))
CHUNK = 8  # channels of one 16-byte chunk: a depthwise thread's, and the GEMM's copies'
DEPTHWISE_THREADS = 256
GRID_LIMIT = 2**31 - 1
GRID_Z_LIMIT = 65535
WORKSPACE_ALIGN = 256


@dataclass(frozen=True)
class TwopassParams(StackedWarpgroups):
    vector_a: ClassVar[int] = CHUNK  # the GEMM copies 16-byte chunks of both operands
    vector_b: ClassVar[int] = CHUNK

    block_m: int  # GEMM rows a block owns: 64 a warpgroup (positions channels-last, output channels NCHW-style)
    block_n: int  # GEMM columns (output channels channels-last, a sample's positions NCHW-style)
    block_k: int  # input channels a pipeline stage holds: whole 64-element swizzle rows
    stages: int
    shape: str  # the depthwise filter, stride and dilation, compiled in (conv.shape.spell_shape)

    def __post_init__(self) -> None:
        self.check_block()
        check_pipeline(self, self.threads, SWIZZLE_ROW)  # both operands K-major: whole swizzle rows
        if Shape.parse(self.shape) is None:
            raise ValueError(f"shape {self.shape!r} is not k<filter>s<stride>d<dilation>")

    @property
    def compiled(self) -> Shape:
        return Shape.checked(self.shape)

    def suffix(self) -> str:
        return f"b{self.block_m}x{self.block_n}x{self.block_k}_p{self.stages}_{self.shape}"

    def template_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k, "groups_m": self.groups_m,
            "threads": self.threads, "stages": self.stages, "chunk": CHUNK, "depthwise_threads": DEPTHWISE_THREADS,
            "wgmma_a_k_major": True, "wgmma_b_k_major": True}
        for name in ("filter", "stride", "dilation"):
            values[name] = cl.pad_to_3d(getattr(self.compiled, name), 1)  # (D, H, W)
        return values


_SUFFIX_RE = re.compile(r"b(?P<block_m>\d+)x(?P<block_n>\d+)x(?P<block_k>\d+)_p(?P<stages>\d+)_(?P<shape>[a-z0-9x]+)")


class Twopass(WgmmaRules, CompiledShape, Family[TwopassParams, DwsepProblem]):
    name = "twopass"
    template = "dwsep_conv_fwd/twopass.hip.j2"
    params_type = TwopassParams
    suffix_re = _SUFFIX_RE
    description = ("the depthwise outputs computed once into a workspace (kept in L2 where it fits), then the "
                   "pointwise GEMM over them on wgmma (sm_90a): two launches; fp16, bf16, C a multiple of 8")

    def supported_cells(self) -> frozenset[tuple[Layout, DType, int]]:
        return CELLS

    def cell_allows(self, params: TwopassParams, layout: Layout, dtype: DType, ndim: int) -> bool:
        return len(params.compiled.filter) == ndim

    def why_not(self, p: TwopassParams, problem: DwsepProblem, target: DeviceTarget) -> str | None:
        wrong = self.wrong_shape(p.shape, p.compiled, problem)
        if wrong:
            return wrong
        if problem.C % CHUNK:
            return f"C={problem.C} must be a multiple of {CHUNK} (16-byte chunks of the workspace's rows)"
        largest = max(problem.N * problem.C * math.prod(problem.input), problem.positions * problem.K,
                      problem.positions * problem.C)
        if largest > INT32_LIMIT:
            return "a tensor or the workspace has 2**31 elements or more; the kernels index with 32-bit integers"
        shared = p.pipeline_bytes()
        if shared > target.shared_optin:
            return f"the pipeline needs {shared} bytes of shared memory, over the {target.shared_optin} of {target.arch}"
        if not problem.channels_last and problem.N > GRID_Z_LIMIT:
            return f"NCHW-style: N={problem.N} samples is over the grid's {GRID_Z_LIMIT}"
        if _tiles(p, problem) > GRID_LIMIT:
            return "too many tiles for the grid"
        return None

    def template_values(self, params: TwopassParams, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        return params.template_values() | {"tin": cpp_type(dtype.tensor),
                                           "channels_last": "true" if layout is Layout.NHWGC else "false"}

    def launch_plan(self, p: TwopassParams, problem: DwsepProblem, target: DeviceTarget) -> LaunchPlan:
        args = (dwsep_args(problem), Buf("workspace"))
        threads = problem.positions * problem.C // CHUNK
        depthwise = Launch("kf_depthwise", (math.ceil(threads / DEPTHWISE_THREADS), 1, 1),
                           (DEPTHWISE_THREADS, 1, 1), args)
        samples = 1 if problem.channels_last else problem.N
        main = Launch("kf_main", (_tiles(p, problem), 1, samples), (p.threads, 1, 1), args,
                      shared_bytes=p.pipeline_bytes())
        return LaunchPlan((depthwise, main), workspace_bytes=workspace_bytes(problem))

    def heuristic_score(self, p: TwopassParams, problem: DwsepProblem, target: DeviceTarget) -> float:
        """Above `fused` (whose scores run 0-5) on NCHW-style layers and on channels-last ones with C x K of at
        least WIDE_PRODUCTS, below it elsewhere; within the family, tiles the GEMM fills and a wave of blocks.

        On the H100 (random seed 59, the 20 16-bit layers both families served, every candidate timed;
        bench/NOTES.md 86) twopass ran 1.20-4.27x faster than fused's best on all 11 NCHW-style ones, and on
        channels-last ones 2.5x at the suite's mnv1_b1024 (C = K = 1024), 1.31x at C = 952, K = 208, 0.99x at
        C = K = 352 and 0.47-0.95x on the 7 with smaller C x K, where fused's few channel tiles cost little
        and the workspace's round trip is all loss. The within-family terms pick 1.03x the best twopass
        point geomean on those 20 layers (worst 1.12)."""
        rows, cols = _gemm_shape(problem)
        used = (rows / (math.ceil(rows / p.block_m) * p.block_m)) * (cols / (math.ceil(cols / p.block_n) * p.block_n))
        blocks = _tiles(p, problem) * (1 if problem.channels_last else problem.N)
        fill = min(math.log2(max(blocks, 1)) / math.log2(target.processors), 1.0)
        preferred = not problem.channels_last or problem.C * problem.K >= WIDE_PRODUCTS
        return (TWOPASS_LEVEL if preferred else -TWOPASS_LEVEL) + used + fill


TWOPASS_LEVEL = 5.0
WIDE_PRODUCTS = 2**17  # channels-last C x K from which fused's recomputed depthwise stage costs more than the workspace


def workspace_bytes(problem: DwsepProblem) -> int:
    """The depthwise outputs, N x positions x C in the operand type, rounded up to WORKSPACE_ALIGN."""
    size = problem.positions * problem.C * OPERAND_BYTES
    return (size + WORKSPACE_ALIGN - 1) // WORKSPACE_ALIGN * WORKSPACE_ALIGN


def _gemm_shape(problem: DwsepProblem) -> tuple[int, int]:
    """The GEMM's rows and columns (NCHW-style: a sample's)."""
    if problem.channels_last:
        return problem.positions, problem.K
    return problem.K, problem.positions // problem.N


def _tiles(p: TwopassParams, problem: DwsepProblem) -> int:
    rows, cols = _gemm_shape(problem)
    return math.ceil(rows / p.block_m) * math.ceil(cols / p.block_n)

