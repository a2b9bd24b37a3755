"""`twopass`: the depthwise stage once, into a workspace, then the pointwise GEMM on warpgroup MMA: two launches
(templates/dwsep_conv_fwd/twopass.hip.j2).

Where K is wide, `fused` computes a position tile's depthwise outputs again in every block of output channels,
and that stage, not the multiplications, bounds its issue (bench/NOTES.md §36, §83: mnv1_b1024 at 8 % of its
roofline). Here `kf_depthwise` computes each depthwise output once (a thread 16 bytes of channels at a strip
of 1-8 positions along W, each input column loaded once for the strip; fp32 sums, bias and activation,
rounded once to the operand type as `fused` rounds them; channels-last, a block's weights copied into shared
memory by tap so that neighbouring lanes read them as neighbouring 16-byte vectors) into a channels-last
workspace of N x positions x C, and `kf_main` multiplies it by the pointwise weights: the
engine's main loop on run matrices (templates/common/igemm_rows.h, both operands K-major, sm_90a wgmma),
bias and activation in the store; `_tma` points bring its operands by bulk tensor copies from a producer warp
instead (templates/common/igemm_kmajor_tma.h). Channels-last, the GEMM's rows are the positions and its columns the
output channels; NCHW-style, each sample's GEMM transposed (rows the output channels, a sample a grid z).

The workspace is as large as the input. Where it fits in L2 (50 MB on the H100, 60 MB on the H200) it mostly comes back from
there; where it does not it makes a DRAM round trip that `fused` never makes, which the tuner weighs.
fp16 / bf16. The workspace's rows and the GEMM's weight rows are whole 16-byte chunks: where C is not a
multiple of 8 they are padded with zero channels, the pointwise weights copied so padded by kf_depthwise
into the workspace after the depthwise outputs.

This module holds the family (points, what serves a problem, the prior) and kf_main's launch; how each
depthwise pass lays out kf_depthwise's blocks, windows and grid is twopass_depthwise.py's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ...device import DeviceTarget
from ...problem import DType, Layout
from ..base import TMA_BARRIER_BYTES, Buf, Family, Launch, LaunchPlan, TensorMap, params_from_suffix
from ..conv import cpp_type
from ..conv import layouts as cl
from ..conv.family import WgmmaRules
from ..conv.shape import CompiledShape, Shape
from ..conv.warpgroups import OPERAND_BYTES, SWIZZLE_ROW, StackedWarpgroups, check_pipeline
from ..conv.tile_store import TileStore
from .fused import INT32_LIMIT, dwsep_args
from .problem import DwsepProblem
from .twopass_depthwise import (CHUNK, DEPTHWISE_THREADS, MATRIX_TILES, MMA_M, MMA_N, Channels, DepthwisePass,
                                DepthwiseTile, depthwise_launch, depthwise_threads, group_chunks, matrix_bands,
                                matrix_pass_reason, matrix_reach_reason, pad_input_launch, padded_channels,
                                redundant_strip, redundant_strip_reason, shared_weights_bytes)

CELLS = frozenset((layout, dtype, ndim) for layout in (Layout.NHWGC, Layout.NGCHW)
                  for dtype in (DType.FP16, DType.BF16) for ndim in (1, 2, 3))
PRODUCER_THREADS = 32  # kf_main's producer warp with bulk tensor copies (igemm_kmajor_tma.h: PRODUCER_THREADS)
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
    strip: int  # output positions along W a depthwise thread computes (a filter row's inputs read once for them)
    shape: str  # the depthwise filter, stride and dilation, compiled in (conv.shape.spell_shape)
    channels: Channels = Channels.WHOLE  # compiled in from the problem's C
    # STAGED (`_st`): kf_main's finished tile through shared memory, written 16 bytes a thread along its
    # contiguous columns; ELEMENT: each pair of accumulators where the instructions' layout puts it.
    store: TileStore = TileStore.ELEMENT
    # `_tma`: kf_main's operands by bulk tensor copies from a producer warp of its own, the warpgroups waiting on
    # per-stage barriers only (templates/common/igemm_kmajor_tma.h); else every thread's cp.async chunks.
    tma: bool = False
    depthwise: DepthwisePass = DepthwisePass.DIRECT  # TILED (`_tl`), MATRIX (`_mx`)

    def __post_init__(self) -> None:
        self.check_block()
        if self.tma and self.block_k != SWIZZLE_ROW:
            raise ValueError(f"bulk tensor copies take stages of one {SWIZZLE_ROW}-element swizzle row, "
                             f"not block_k={self.block_k}")
        if self.strip < 1:
            raise ValueError(f"strip={self.strip}: a depthwise thread computes at least one position")
        check_pipeline(self, self.threads, SWIZZLE_ROW)  # both operands K-major: whole swizzle rows
        if Shape.parse(self.shape) is None:
            raise ValueError(f"shape {self.shape!r} is not k<filter>s<stride>d<dilation>")

    @property
    def compiled(self) -> Shape:
        return Shape.checked(self.shape)

    def suffix(self) -> str:
        padded = "_cpadded" if self.channels is Channels.PADDED else ""
        staged = "_st" if self.store is TileStore.STAGED else ""
        tma = "_tma" if self.tma else ""
        tiled = {DepthwisePass.DIRECT: "", DepthwisePass.TILED: "_tl", DepthwisePass.MATRIX: "_mx"}[self.depthwise]
        return (f"b{self.block_m}x{self.block_n}x{self.block_k}_p{self.stages}_w{self.strip}{staged}{tma}{tiled}"
                f"_{self.shape}{padded}")

    @property
    def main_threads(self) -> int:
        """kf_main's block: the warpgroups, and with bulk tensor copies their producer warp."""
        return self.threads + (PRODUCER_THREADS if self.tma else 0)

    def main_shared_bytes(self) -> int:
        """kf_main's shared memory: the pipeline, and with bulk tensor copies each stage's two barriers."""
        return self.pipeline_bytes() + (2 * self.stages * TMA_BARRIER_BYTES if self.tma else 0)

    def template_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k, "groups_m": self.groups_m,
            "threads": self.threads, "stages": self.stages, "chunk": CHUNK, "strip": self.strip,
            "depthwise_threads": DEPTHWISE_THREADS, "group_chunks": group_chunks(self.compiled),
            "whole_chunks": "true" if self.channels is Channels.WHOLE else "false",
            "staged_store": self.store is TileStore.STAGED, "tma": self.tma, "wgmma_overlap": self.tma,
            "tiled": self.depthwise is DepthwisePass.TILED, "matrix": self.depthwise is DepthwisePass.MATRIX,
            "mma_rows": self.depthwise is DepthwisePass.MATRIX, "mx_tiles": MATRIX_TILES,
            "wgmma_a_k_major": True, "wgmma_b_k_major": True}
        for name in ("filter", "stride", "dilation"):
            values[name] = cl.pad_to_3d(getattr(self.compiled, name), 1)  # (D, H, W)
        return values


_SUFFIX_RE = re.compile(r"b(?P<block_m>\d+)x(?P<block_n>\d+)x(?P<block_k>\d+)_p(?P<stages>\d+)_w(?P<strip>\d+)"
                        r"(?P<store>_st)?(?P<tma>_tma)?(?P<depthwise>_tl|_mx)?_(?P<shape>k[0-9x]+s[0-9x]+d[0-9x]+)(?:_c(?P<channels>padded))?")


class Twopass(WgmmaRules, CompiledShape, Family[TwopassParams, DwsepProblem]):
    name = "twopass"
    template = "dwsep_conv_fwd/twopass.hip.j2"
    params_type = TwopassParams
    suffix_re = _SUFFIX_RE
    description = ("the depthwise outputs computed once into a workspace (kept in L2 where it fits), then the "
                   "pointwise GEMM over them on wgmma (sm_90a): two launches; fp16, bf16")

    def supported_cells(self) -> frozenset[tuple[Layout, DType, int]]:
        return CELLS

    def problem_values(self, problem: DwsepProblem) -> dict[str, Any]:
        return {**super().problem_values(problem), "channels": Channels.of(problem.C)}

    def parse_suffix(self, suffix: str) -> TwopassParams | None:
        return params_from_suffix(self.suffix_re, TwopassParams, suffix,
                                  {"shape": str, "channels": Channels, "store": lambda _: TileStore.STAGED,
                                   "tma": lambda _: True,
                                   "depthwise": lambda s: DepthwisePass.TILED if s == "_tl" else DepthwisePass.MATRIX})

    def cell_allows(self, params: TwopassParams, layout: Layout, dtype: DType, ndim: int) -> bool:
        fits = {DepthwisePass.DIRECT: True,
                DepthwisePass.TILED: layout is Layout.NGCHW,  # channels-last already reads 16 bytes a column
                DepthwisePass.MATRIX: layout is Layout.NHWGC and ndim == 2}[params.depthwise]
        return len(params.compiled.filter) == ndim and fits

    def why_not(self, p: TwopassParams, problem: DwsepProblem, target: DeviceTarget) -> str | None:
        wrong = self.wrong_shape(p.shape, p.compiled, problem)
        if wrong:
            return wrong
        if p.channels is not Channels.of(problem.C):
            kind = "not a multiple" if p.channels is Channels.PADDED else "a multiple"
            return f"compiled for C {kind} of {CHUNK}, problem has C={problem.C}"
        refused = redundant_strip_reason(p.strip, problem)
        if refused:
            return refused
        largest = max(problem.N * padded_channels(problem) * math.prod(problem.input), problem.positions * problem.K,
                      problem.positions * padded_channels(problem))
        if largest > INT32_LIMIT:
            return "a tensor or the workspace has 2**31 elements or more; the kernels index with 32-bit integers"
        if p.depthwise is DepthwisePass.MATRIX:
            reason = matrix_pass_reason(p, target)
            if reason:
                return reason
        tile = DepthwiseTile.of(p, problem, target) if p.depthwise is DepthwisePass.TILED else None
        if tile is not None and tile.shared_bytes(p) > target.shared_optin:
            return (f"the depthwise pass's input window needs {tile.shared_bytes(p)} bytes of shared "
                    f"memory, over the {target.shared_optin} of {target.arch}")
        if problem.channels_last and p.depthwise is DepthwisePass.DIRECT and shared_weights_bytes(p.compiled) > target.shared_optin:
            return (f"the depthwise pass's shared weights need {shared_weights_bytes(p.compiled)} bytes, over the "
                    f"{target.shared_optin} of {target.arch}")
        shared = p.main_shared_bytes()
        if shared > target.shared_optin:
            return f"the pipeline needs {shared} bytes of shared memory, over the {target.shared_optin} of {target.arch}"
        if not problem.channels_last and problem.N > GRID_Z_LIMIT:
            return f"NCHW-style: N={problem.N} samples is over the grid's {GRID_Z_LIMIT}"
        if tile is not None and tile.blocks(p, problem) > GRID_LIMIT:
            return "too many depthwise blocks for the grid"
        if _tiles(p, problem) > GRID_LIMIT:
            return "too many tiles for the grid"
        return None

    def template_values(self, params: TwopassParams, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        return params.template_values() | {"tin": cpp_type(dtype.tensor),
                                           "channels_last": "true" if layout is Layout.NHWGC else "false"}

    def launch_plan(self, p: TwopassParams, problem: DwsepProblem, target: DeviceTarget) -> LaunchPlan:
        # Whole chunks: kf_main reads the weights in place and the third argument goes unread.
        padded = p.channels is Channels.PADDED
        padded_pw = Buf("workspace", offset=_depthwise_bytes(problem)) if padded else Buf("workspace")
        args = (dwsep_args(problem), Buf("workspace"), padded_pw)
        # Channels-last where C is not a multiple of CHUNK: kf_pad_input first copies the input to rows of whole
        # chunks, which kf_depthwise then reads 16 bytes at a time (element by element, a strip took ~2x the
        # instructions of the whole-chunk path; bench/NOTES.md 103); kf_depthwise waits for the copy itself.
        first: tuple[Launch, ...] = ()
        padded_in = Buf("workspace")  # unread where the input is read in place
        if padded and problem.channels_last:
            padded_in = Buf("workspace", offset=_depthwise_bytes(problem) + _padded_pointwise_bytes(problem))
            first = (pad_input_launch(problem, target, (dwsep_args(problem), padded_in)),)
        depthwise = depthwise_launch(p, problem, target, (*args, padded_in))
        depthwise = replace(depthwise, early_start=bool(first))
        samples = 1 if problem.channels_last else problem.N
        maps = operand_maps(p, problem, padded_pw if padded else Buf("weight_pw")) if p.tma else ()
        # kf_main waits for kf_depthwise itself, so its launch may start during kf_depthwise's last wave: on the
        # H200 the best point 1.042x geomean over 17 layers (0.96-1.18x; bench/NOTES.md 98).
        main = Launch("kf_main", (_tiles(p, problem), 1, samples), (p.main_threads, 1, 1), (*args, *maps),
                      shared_bytes=p.main_shared_bytes(), early_start=True)
        return LaunchPlan((*first, depthwise, main), workspace_bytes=workspace_bytes(problem))

    def heuristic_score(self, p: TwopassParams, problem: DwsepProblem, target: DeviceTarget) -> float:
        """Above `fused` (whose scores run 0-5) on NCHW-style layers whose C x K x taps reaches NARROW_WORK and on
        channels-last ones where it reaches WIDE_WORK, below it elsewhere; within the family, the preferred strip
        (preferred_strip), then tiles the GEMM fills and a wave of blocks.

        On the H200 (random seed 59, the 20 16-bit layers both families served, every candidate timed;
        bench/NOTES.md 87) twopass with strips ran 1.33-4.51x faster than fused's best on all 11 NCHW-style
        ones; channels-last, it won the 5 with C x K x taps of 0.52-6.1 M (1.06-2.46x) and fused the 4
        at 0.44 M and below (1.01-1.52x) and the suite's mnv1_b64 (74 k, 1.43x): WIDE_WORK lies between.
        `fused` recomputes the depthwise stage for every tile of output channels, which costs with K and with
        the taps; twopass pays the workspace's round trip once. Held out (seed 60, 13 layers): the family
        right on all, the prior alone 1.079x the tuned winner geomean, worst 1.23. Bulk tensor copies rank just
        above their twins where the reduction is long (long_reduction), well below elsewhere."""
        rows, cols = _gemm_shape(problem)
        used = (rows / (math.ceil(rows / p.block_m) * p.block_m)) * (cols / (math.ceil(cols / p.block_n) * p.block_n))
        blocks = _tiles(p, problem) * (1 if problem.channels_last else problem.N)
        fill = min(math.log2(max(blocks, 1)) / math.log2(target.processors), 1.0)
        # `_mx` tiles columns itself (a strip of 1 throughout): no strip to be away from.
        off_strip = 0.0 if p.depthwise is DepthwisePass.MATRIX else abs(math.log2(p.strip / preferred_strip(problem)))
        work = problem.C * problem.K * math.prod(problem.filter)
        # Channels-last with C % CHUNK != 0 twopass reads a whole-chunk copy of its input (§103) where fused reads
        # element by element: it won all 5 such layers of seeds 131 and 137, two under WIDE_WORK (1.08x at 169 k,
        # 1.18x at 7 k; bench/NOTES.md 105).
        # Where `_mx` pays, twopass's depthwise pass costs less again: seed 147's C = 80, K = 184 5x5 at 27x27
        # (368 k) ran 1.63x faster on an `_mx` point than on fused's first (bench/NOTES.md 112).
        preferred = (work >= (WIDE_WORK if problem.channels_last else NARROW_WORK)
                     or (problem.channels_last and Channels.of(problem.C) is Channels.PADDED) or matrix_pays(problem))
        staged = STAGED_PREFERENCE if p.store is TileStore.STAGED else 0.0
        tma = (TMA_PREFERENCE if long_reduction(problem) else -TMA_PRIOR_GAP) if p.tma else 0.0
        tiled = {DepthwisePass.DIRECT: 0.0, DepthwisePass.TILED: _tiled_prior(problem),
                 DepthwisePass.MATRIX: _matrix_prior(problem)}[p.depthwise]
        return (TWOPASS_LEVEL if preferred else -TWOPASS_LEVEL) + used + fill - STRIP_STEP * off_strip + staged + tma + tiled


TWOPASS_LEVEL = 5.0
WIDE_WORK = 500_000  # channels-last C x K x taps from which fused's recomputed depthwise stage costs more than the workspace
# NCHW-style, the same from far fewer: on the H200 twopass won at C = 80, K = 32, 1x3x3 (23 k; random seed 59)
# and fused at C = 29, K = 21, 3x3 (5.5 k: 10.7 against 17.0 µs; bench/NOTES.md 89).
NARROW_WORK = 2**14
STRIP_STEP = 0.5  # the prior's cost of each doubling or halving away from the preferred strip
# A staged store's point ranks just above its element-store twin: on the H200 the best staged point beat the best
# element-store one by 1.02x geomean over 62 channels-last layers and 0.99-1.36x on five more (bench/NOTES.md 94).
STAGED_PREFERENCE = 0.05
# Bulk tensor copies (`_tma`) just above their twin with the threads' copies where the reduction is long, well below
# it elsewhere: on the H200 the best `_tma` point ran 1.10x the best other on C = 1024 (16 stages), 1.02x at C = 512,
# 0.98x at C = 272-320 and 0.94x at C = 64, where the producer's extra step is not paid back (bench/NOTES.md 97).
TMA_PREFERENCE = 0.02
TMA_PRIOR_GAP = 0.5
# Tiled depthwise passes (`_tl`) above their direct twins where the output has rows and the filter a footprint in
# the plane, below them elsewhere (bench/NOTES.md 106; _tiled_prior).
TILED_PREFERENCE = 0.3
TILED_PRIOR_GAP = 0.3
# Depthwise passes on matrix instructions (`_mx`) above their direct twins where the filter has many taps and a
# block's band of 16 x 64 outputs is not mostly empty, below them elsewhere (bench/NOTES.md 111; _matrix_prior).
MATRIX_PREFERENCE = 0.3
MATRIX_PRIOR_GAP = 0.4
MATRIX_MIN_TAPS = 25  # taps in the plane: 5x5 won (1.11-1.14x), 3x3 lost, dilated or not (0.41-0.81x)
MATRIX_MIN_FILL = 0.1  # a band's outputs in the plane: 0.19 (14x14) won 1.21x, 0.05 (7x7) lost 0.66x
TMA_MIN_STAGES = 8  # reduction stages (64 channels each) from which bulk tensor copies rank first
FEW_THREADS = 2**13  # kf_depthwise threads under which a longer strip leaves the GPU too little to run
FEW_NCHW_THREADS = 2**15  # the same NCHW-style, where a thread's registers leave fewer of them resident
MAX_STRIP = 4


def _tiled_prior(problem: DwsepProblem) -> float:
    """A tiled point's prior against its direct twin: above it where the output has rows and the filter spans
    more than one position of a plane, below it elsewhere. A window pays where neighbouring outputs share its
    inputs: along one row the direct pass's reads already coalesce, and with a 1x1 footprint in the plane
    nothing in a window is shared (strided, it also copies the columns and rows no tap reads).

    On the H200 (bench/NOTES.md 106; every twopass point of 26 NCHW-style layers: 11 of seeds 131-139, 15 of
    seed 141) the best tiled point beat the best direct one on 20 of the 21 layers with rows and a plane
    footprint (1.05-1.63x; 0.92x on an 8x8 one) and lost or tied on 4 of the 5 1-D ones (0.71-1.00x; 1.21x at
    C = 383, 188 long); seed 143 (tuned in full) then showed 3x1x1 filters losing 2 of 3 (0.45x at stride 1x2x2,
    0.82x; 1.17x on a tiny N = 1 one) where its five layers with a plane footprint won (1.12-1.36x)."""
    _, fy, fx = cl.pad_to_3d(problem.filter, 1)
    if not problem.has_rows or fy * fx == 1:
        return -TILED_PRIOR_GAP
    return TILED_PREFERENCE


def _matrix_prior(problem: DwsepProblem) -> float:
    """An `_mx` point's prior against its direct twin: MATRIX_PREFERENCE above it where matrix_pays, else
    MATRIX_PRIOR_GAP below."""
    return MATRIX_PREFERENCE if matrix_pays(problem) else -MATRIX_PRIOR_GAP


def matrix_pays(problem: DwsepProblem) -> bool:
    """Whether `_mx` points would run faster than the direct pass: a channels-last 2-D problem they reach (their
    shared memory is why_not's to check: matrix_pass_reason), a filter of MATRIX_MIN_TAPS taps in the plane or
    more, and bands of 16 x 64 outputs (a block's) holding MATRIX_MIN_FILL real outputs or more. A filter row
    costs the matrix pass about the same whatever its width (8 outputs' 16 input columns an instruction) where
    the direct pass pays every tap; a band's outputs past the plane's edges are computed and thrown away.

    On the H200 (bench/NOTES.md 111; the heuristic's first 24 twopass points and every `_mx` point of 12
    channels-last layers, bench/results/h200-depthwise-matrix) the best `_mx` point beat the best other on the
    four 7x7 layers with planes of 14x14 and more (1.21-1.36x), the three 5x5 ones (1.11-1.14x) and a 9x9 one
    (1.87x), and lost on a 7x7 plane (0.66x), two 3x3 layers (0.47x, 0.78x) and a 3x3 dilated 2 (0.81x)."""
    if not problem.channels_last or problem.ndim != 2:
        return False
    if matrix_reach_reason(problem.stride, problem.filter, problem.dilation):
        return False
    fy, fx = problem.filter
    out_h, out_w = problem.output
    fill = out_h * out_w / (matrix_bands(problem) * MMA_M * MATRIX_TILES * MMA_N)
    return fy * fx >= MATRIX_MIN_TAPS and fill >= MATRIX_MIN_FILL


def preferred_strip(problem: DwsepProblem) -> int:
    """The strip the prior ranks first: half the columns two adjacent outputs share along W (FX - SW + 1),
    rounded up to a power of two and at most MAX_STRIP, halved while kf_depthwise would have too few threads
    (channels-last: FEW_THREADS; NCHW-style, not below 2: FEW_NCHW_THREADS), and while half the strip covers the
    output's width.

    Measured on the H200 (random seed 59's 20 layers twopass served; bench/NOTES.md 87): a strip's gain over
    one position grows with the filter's width (7x7: 1.2-2.5x, 3x3: 1.0-1.4x); with stride 2, or C = 16 at
    small sizes, one position ran fastest. Seeds 131 and 137 (31 layers, every candidate timed; bench/NOTES.md
    105): strip 8 never ran faster than 4 (1.00-2.76x its time); NCHW-style, where a thread's sums and a filter
    row's weights for 8 channels take many more registers, strip 4 lost up to 1.34x to 2 below ~32 k threads
    (a 7x7 and an 11-tap layer), and strip 2 ran within 1.08x of the best on all 12 layers, also where one
    position's threads were few."""
    fx, sw = problem.filter[-1], problem.stride[-1]
    nchw_style = not problem.channels_last
    strip = 2 if nchw_style else 1
    while strip < min(MAX_STRIP, (fx - sw + 1) / 2):
        strip *= 2
    few = FEW_NCHW_THREADS if nchw_style else FEW_THREADS
    while strip > (2 if nchw_style else 1) and depthwise_threads(problem, strip) < few:
        strip //= 2
    while redundant_strip(strip, problem):
        strip //= 2
    return strip


def long_reduction(problem: DwsepProblem) -> bool:
    """Whether kf_main's reduction runs TMA_MIN_STAGES stages or more, where bulk tensor copies pay."""
    return math.ceil(padded_channels(problem) / SWIZZLE_ROW) >= TMA_MIN_STAGES


def operand_maps(p: TwopassParams, problem: DwsepProblem, pointwise: Buf) -> tuple[TensorMap, TensorMap]:
    """kf_main's A and B as tensor maps of (reduction, rows, images) for templates/common/igemm_kmajor_tma.h, a box
    one stage of a block's rows: the workspace's rows (all samples channels-last; a sample an image NCHW-style)
    and the pointwise weights' K rows (`pointwise`: the weights, or their padded copy)."""
    width = padded_channels(problem)
    row_bytes = width * OPERAND_BYTES
    positions = problem.positions // problem.N
    weights = TensorMap(pointwise, OPERAND_BYTES, (width, problem.K, 1), (row_bytes, problem.K * row_bytes),
                        (SWIZZLE_ROW, p.block_m if not problem.channels_last else p.block_n, 1))
    if problem.channels_last:
        mid = TensorMap(Buf("workspace"), OPERAND_BYTES, (width, problem.positions, 1),
                        (row_bytes, problem.positions * row_bytes), (SWIZZLE_ROW, p.block_m, 1))
        return mid, weights
    mid = TensorMap(Buf("workspace"), OPERAND_BYTES, (width, positions, problem.N),
                    (row_bytes, positions * row_bytes), (SWIZZLE_ROW, p.block_n, 1))
    return weights, mid


def workspace_bytes(problem: DwsepProblem) -> int:
    """The depthwise outputs, N x positions x padded_channels in the operand type, rounded up to
    WORKSPACE_ALIGN; where C is not a multiple of CHUNK, then the padded pointwise weights, K x
    padded_channels (rounded up likewise), and channels-last the padded input, N x input positions x
    padded_channels."""
    if Channels.of(problem.C) is not Channels.PADDED:
        return _depthwise_bytes(problem)
    padded_in = problem.N * math.prod(problem.input) * padded_channels(problem) * OPERAND_BYTES
    return _depthwise_bytes(problem) + _padded_pointwise_bytes(problem) + (padded_in if problem.channels_last else 0)


def _padded_pointwise_bytes(problem: DwsepProblem) -> int:
    return _aligned(problem.K * padded_channels(problem) * OPERAND_BYTES)


def _depthwise_bytes(problem: DwsepProblem) -> int:
    return _aligned(problem.positions * padded_channels(problem) * OPERAND_BYTES)


def _aligned(size: int) -> int:
    """`size` bytes rounded up to WORKSPACE_ALIGN: where the workspace's next part starts."""
    return (size + WORKSPACE_ALIGN - 1) // WORKSPACE_ALIGN * WORKSPACE_ALIGN


def _gemm_shape(problem: DwsepProblem) -> tuple[int, int]:
    """The GEMM's rows and columns (NCHW-style: a sample's)."""
    if problem.channels_last:
        return problem.positions, problem.K
    return problem.K, problem.positions // problem.N


def _tiles(p: TwopassParams, problem: DwsepProblem) -> int:
    rows, cols = _gemm_shape(problem)
    return math.ceil(rows / p.block_m) * math.ceil(cols / p.block_n)

