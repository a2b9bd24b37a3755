"""`pw`: a pointwise layer's input gradient as the plain GEMM it is (templates/conv_bwd_data/pw.hip.j2).

A 1x1 filter without padding makes dIn[g] = dOut[g] . W[g] with no gather and no stride phases.
Channels-last (NHWGC, GNHWC): the group's positions are the GEMM's rows, read as K-major runs of K
channels, the weight's rows r-major. NGCHW (both weight layouts are one for a 1x1 filter): each sample's
GEMM transposed, the weight's rows as A and the output gradient's channel rows of positions as B, both
r-major. The engine's main loop on row and run chunks (templates/common/igemm_rows.h) streams them
straight into wgmma's swizzled tiles (sm_90a), fp16 / bf16 operands. The reduction (K) is a layer's
output channels, short beside the rows, so there is no split-K: every grad_input element is written once.
A strided channels-last layer (staged stores) is the same GEMM over its output positions; the staged tile
goes to the input positions they came from, and zeros to the rest of each stride cell. `transpose` points
serve NGCHW through channels-last copies (grad_output copied first, grad_input copied back: `mma`'s
transposing plan), where a sample's positions are too short and odd for wide chunks (7x7) or strided.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout
from ..base import Launch, LaunchPlan, Struct
from ..conv import layouts as cl
from ..conv.family import WgmmaRules
from ..conv.transpose import transpose_values
from ..conv.warpgroups import GROUP_ROWS, OPERAND_BYTES, SWIZZLE_ROW, StackedWarpgroups, check_pipeline
from .common import ALL_CELLS, GRID_Y_LIMIT, BwdDataFamily
from ..conv.tile_store import TileStore
from .mma import channels_last_copy, transpose_refusal, transposed_gain, transposed_plan
from .wgmma import MIN_PRODUCTS

CELLS = frozenset(cell for cell in ALL_CELLS if cell[1] in (DType.FP16, DType.BF16))
GRID_X_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class PwParams(StackedWarpgroups):
    block_m: int  # GEMM rows a block owns: 64 a warpgroup (positions channels-last, input channels NGCHW)
    block_n: int  # GEMM columns (input channels channels-last, positions NGCHW): a multiple of 64 up to 256
    block_k: int  # output channels a pipeline stage holds: whole 64-element swizzle rows
    stages: int
    vector_a: int  # elements a copy moves: along K (channels-last) or C (NGCHW) for A
    vector_b: int  # along C (channels-last) or positions (NGCHW) for B
    store: TileStore = TileStore.ELEMENT  # STAGED: the tile through shared memory, 16 bytes a thread
    transpose: bool = False  # NGCHW: grad_output copied channels-last, the channels-last grad_input copied back

    def __post_init__(self) -> None:
        self.check_block()
        check_pipeline(self, self.threads, SWIZZLE_ROW)  # K-major A: whole swizzle rows of reduction elements

    def shared_bytes(self) -> int:
        return self.pipeline_bytes()  # a staged tile reuses the pipeline's shared memory

    def suffix(self) -> str:
        staged = "_st" if self.store is TileStore.STAGED else ""
        transposed = "_tr" if self.transpose else ""
        return (f"b{self.block_m}x{self.block_n}x{self.block_k}_p{self.stages}_v{self.vector_a}x{self.vector_b}"
                f"{transposed}{staged}")

    def template_values(self) -> dict[str, Any]:
        return {"block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k, "groups_m": self.groups_m,
                "threads": self.threads, "stages": self.stages, "vector_a": self.vector_a, "vector_b": self.vector_b,
                "staged_store": self.store is TileStore.STAGED, "transpose": self.transpose} | transpose_values()


class Pw(WgmmaRules, BwdDataFamily):
    name = "pw"
    template = "conv_bwd_data/pw.hip.j2"
    params_type = PwParams
    description = ("pointwise (1x1, unpadded) layers as a plain GEMM on wgmma (sm_90a): channels-last positions as "
                   "K-major rows (strided ones with staged stores), NGCHW samples' channel rows of positions; fp16, bf16")

    def supported_cells(self) -> frozenset:
        return CELLS

    def cell_allows(self, params: PwParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        return not (params.transpose and cl.channel_innermost(layout))  # copies serve NGCHW only

    def layout_values(self, params: PwParams, layout: Layout) -> dict[str, Any]:
        channels_last = cl.channel_innermost(layout) or params.transpose  # as given, or the copies
        # Channels-last A (the output gradient's positions) is K-major; NGCHW's weight rows are r-major.
        return {"channels_last": channels_last, "wgmma_a_k_major": channels_last}

    def why_not_here(self, p: PwParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.filter_volume != 1:
            return "pointwise layers only: a 1x1 filter"
        if any(problem.pad) or any(problem.pad_right):
            return "pointwise layers only: no padding"
        if p.transpose and (refusal := transpose_refusal(problem)):
            return refusal
        read = channels_last_copy(problem) if p.transpose else problem  # what the main kernel reads
        if any(s != 1 for s in problem.stride) and not (cl.channel_innermost(read.layout) and p.store is TileStore.STAGED):
            return ("strided layers: channels-last (as given or copied), with staged stores (which write the zeros "
                    "between the outputs' inputs)")
        if problem.C * problem.K < MIN_PRODUCTS:
            return (f"C*K = {problem.C * problem.K} per group: a 64-channel wgmma tile would mostly multiply "
                    f"padding (at least {MIN_PRODUCTS})")
        a_along, b_along = _chunked_extents(read)
        for v, (what, extent) in ((p.vector_a, a_along), (p.vector_b, b_along)):
            if extent % v:
                return f"chunks of {v} along {what} need {what} ({extent}) divisible by it"
        if p.shared_bytes() > target.shared_optin:
            return (f"the pipeline needs {p.shared_bytes()} bytes of shared memory, over the {target.shared_optin} "
                    f"of {target.arch}")
        if problem.G > GRID_Y_LIMIT or (not cl.channel_innermost(read.layout) and problem.N > GRID_Y_LIMIT):
            return f"G={problem.G} and (NGCHW) N={problem.N} must each be at most {GRID_Y_LIMIT} (the grid's y and z)"
        if _tiles(p, read) > GRID_X_LIMIT:
            return "too many tiles for the grid"
        return None

    def main_launch(self, p: PwParams, problem: ConvProblem, target: DeviceTarget, args: Struct) -> Launch:
        samples = 1 if cl.channel_innermost(problem.layout) else problem.N
        return Launch("kf_main", (_tiles(p, problem), problem.G, samples), (p.threads, 1, 1), (args,),
                      shared_bytes=p.shared_bytes())

    def launch_plan(self, p: PwParams, problem: ConvProblem, target: DeviceTarget) -> LaunchPlan:
        if p.transpose:
            return transposed_plan(self, p, problem, target)
        return super().launch_plan(p, problem, target)

    def heuristic_score(self, p: PwParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """In doublings of time: PW_LEVEL, above the implicit-GEMM families (whose gathers, phases and stores a
        pointwise layer does not need: on the H100 pw's best ran 0.46-1.13x the time of their best, geomean
        0.82x, on 36 pointwise suite layers before the staged store, bench/NOTES.md 73), less a least-squares
        time model over every pw point of 61 tuned H100 problems (log2 time over the problem's best pw
        point): the staged store -0.40 (+0.28 back with four stages), four stages -0.18, 0.29 a doubling of
        block_n, 0.05 of block_m, -0.22 / -0.16 a doubling of A's / B's chunks, -0.06 a doubling of the share
        of the tile the GEMM fills, 0.04 a halving of the waves (two blocks an SM) below one and 0.14 a
        doubling past it. A transposing point is scored on the copies, plus the pass's weight against the
        in-place reads (copies_gain)."""
        read = channels_last_copy(problem) if p.transpose else problem
        rows, cols = _gemm_shape(read)
        used = (rows / (math.ceil(rows / p.block_m) * p.block_m)) * (cols / (math.ceil(cols / p.block_n) * p.block_n))
        blocks = _tiles(p, read) * problem.G * (1 if cl.channel_innermost(read.layout) else problem.N)
        waves = math.log2(blocks / (2 * target.processors))
        staged = p.store is TileStore.STAGED
        slower = (-0.397 * staged + 0.284 * (staged and p.stages == 4) - 0.184 * (p.stages == 4)
                  + 0.287 * math.log2(p.block_n / GROUP_ROWS) + 0.049 * math.log2(p.block_m / GROUP_ROWS)
                  - 0.216 * math.log2(p.vector_a) - 0.157 * math.log2(p.vector_b)
                  - 0.061 * math.log2(used) - 0.043 * min(0.0, waves) + 0.143 * max(0.0, waves))
        transposed = self.copies_gain(problem) if p.transpose else 0.0
        return PW_LEVEL - slower - self.small_strided(problem) + transposed

    def copies_gain(self, problem: ConvProblem) -> float:
        """`mma`'s weight of the transposing pass (transposed_gain), but no gain where the copies' GEMM would leave
        most of a tile's columns empty (C under COPY_FILLED_C): there at most the -0.5 of in-place reads that
        take chunks, as the in-place GEMM, C x positions a sample, keeps the positions as its wide side. On the
        H100 an NGCHW layer with C=16 K=80 at 79x79 ran 2.04x slower on the copies' best-ranked point than in
        place, element-wise reads and all (bench/NOTES.md 77)."""
        gain = transposed_gain(problem)
        return gain if problem.C >= COPY_FILLED_C else min(gain, -0.5)

    def small_strided(self, problem: ConvProblem) -> float:
        """Strided layers under STRIDED_SMALL_BYTES of grad_input: 2 a halving, which takes pw below `mma` there.
        On the H100 pw ran 0.68-1.02x the best other family's time on six strided layers of 5.5-49 MB (ResNet-50's
        downsampling shortcuts among them) and 1.10-1.32x on five of 0.06-0.7 MB, whose staged stores write a
        tile's stride cells position by position (bench/NOTES.md 75)."""
        if max(problem.stride) == 1:
            return 0.0
        grad_input = problem.N * problem.G * problem.C * math.prod(problem.input) * OPERAND_BYTES
        return 2.0 * max(0.0, math.log2(STRIDED_SMALL_BYTES / grad_input))


PW_LEVEL = 7.0  # above mma's and wgmma's scores on pointwise layers (3-6)
STRIDED_SMALL_BYTES = 4 << 20
COPY_FILLED_C = 64  # input channels from which a transposing point's tiles (128-256 columns of C) are half full


def _gemm_shape(problem: ConvProblem) -> tuple[int, int]:
    """One block column's GEMM rows and columns (per group; NGCHW per sample): over the output positions,
    which a strided layer's input positions outnumber."""
    positions = math.prod(problem.output)
    if cl.channel_innermost(problem.layout):
        return problem.N * positions, problem.C
    return problem.C, positions


def _chunked_extents(problem: ConvProblem) -> tuple[tuple[str, int], tuple[str, int]]:
    """What A's and B's chunks run along, and its extent."""
    if cl.channel_innermost(problem.layout):
        return ("K", problem.K), ("C", problem.C)
    return ("C", problem.C), ("the positions of a sample", math.prod(problem.input))


def _tiles(p: PwParams, problem: ConvProblem) -> int:
    rows, cols = _gemm_shape(problem)
    return math.ceil(rows / p.block_m) * math.ceil(cols / p.block_n)
