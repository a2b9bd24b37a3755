"""`pw`: a pointwise layer's weight gradient as the plain GEMM it is (templates/conv_bwd_weight/pw.hip.j2).

A 1x1 filter at stride 1 without padding makes dW[g] = dOut[g]^T . In[g] over the output positions. In a
channels-last layout (NHWGC, GNHWC) every output position is a row of both tensors, K and C elements at
a fixed pitch; in NGCHW every channel of a sample is a run of contiguous positions, the GEMM's reduction,
which wgmma reads K-major from both operands. Where a sample's run is short and odd (7x7: 49 positions, read
element by element), `transpose` points copy both tensors channels-last first (the transposing pass, whole
runs of planes 16 bytes at a time) and read the copies' rows. The engine's main loop on row or
run chunks (templates/common/igemm_rows.h) streams them straight into wgmma's swizzled tiles: a thread's
copy of a stage is its copy of the last one moved on, where `wgmma` works out a position, bounds and an
offset for each 16-byte chunk. `tma` points take the rows by bulk tensor copies instead
(templates/common/igemm_tma.h: one thread issues a stage, no other spends an instruction on loads; the
tensor maps follow the kernel's other parameters). Split-K and the epilogues are `wgmma`'s. Compiled for
sm_90a, fp16 / bf16 operands.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout
from ..base import I32, TMA_BARRIER_BYTES, Buf, Launch, Struct, TensorMap
from ..conv import layouts as cl
from ..conv.transpose import transpose_values
from ..conv.warpgroups import OPERAND_BYTES, SWIZZLE_ROW, StackedWarpgroups, check_pipeline
from .common import BwdWeightFamily, Reduction, check_split, coop_residency_refusal
from .mma import gemm_template_values, staging_fits_layout
from .wgmma import CELLS as WGMMA_CELLS
from .wgmma import Wgmma



@dataclass(frozen=True)
class PwParams(StackedWarpgroups):
    block_m: int  # rows of dW (K) a block owns: 64 a warpgroup
    block_n: int  # columns of dW (C): one wgmma's width, a multiple of 64 up to 256
    block_k: int  # reduction rows (output positions) a pipeline stage holds
    stages: int
    vector_a: int  # elements a chunk copies along K / along C (8: 16 bytes)
    vector_b: int
    split_k: int
    reduction: Reduction

    transpose: bool = False  # NGCHW tensors copied channels-last into the workspace first (staged.py)
    tma: bool = False  # rows brought in by bulk tensor copies (common/igemm_tma.h), not the threads' cp.async

    # What `wgmma`'s checks and plan ask of a tuning point, fixed here: one pipeline of one warpgroup
    # column, one group a tile, 64-bit row offsets.
    groups_n = 1
    slices = 1
    groups_per_tile = 1
    index_bits = 64

    def __post_init__(self) -> None:
        check_split(self.split_k, self.reduction, meets_in_kernel=True)
        self.check_block()
        check_pipeline(self, self.threads)
        if self.tma and (self.vector_a, self.vector_b) != (TMA_VECTOR, TMA_VECTOR):
            raise ValueError(f"bulk tensor copies move 16-byte aligned rows: vectors {TMA_VECTOR}x{TMA_VECTOR} "
                             "(what the alignment check reads), not "
                             f"{self.vector_a}x{self.vector_b}")

    def shared_bytes(self, layout: Layout, dtype: DType) -> int:
        return self.pipeline_bytes() + (2 * self.stages * TMA_BARRIER_BYTES if self.tma else 0)

    def suffix(self) -> str:
        return (f"b{self.block_m}x{self.block_n}x{self.block_k}_p{self.stages}_v{self.vector_a}x{self.vector_b}"
                f"_sk{self.split_k}_{self.reduction.value}" + ("_tr" if self.transpose else "")
                + ("_tma" if self.tma else ""))

    def template_values(self) -> dict[str, Any]:
        return ({**gemm_template_values(self, "wgmma"), "groups_m": self.groups_m, "tma": self.tma,
                 "wgmma_overlap": self.tma, "coop": self.reduction is Reduction.COOP} | transpose_values())


MEETING_ARGS_AT = 4  # kf_main's parameters before the coop ones: conv struct, epilogue, r_per_split, split_stride
TMA_VECTOR = 8  # elements of a 16-byte unit: rows and group strides of whole units are what a tensor map takes
TMA_PRIOR_GAP = 0.5  # heuristic_score, doublings: bulk tensor copies below the threads' copies (see there)
COOP_PRIOR = 0.1  # heuristic_score, doublings: the coop reduction against its two-stage twin (see there)
COOP_PRIOR_SPLITS = 16  # ... above it up to this many splits, below it past them


def row_maps(p: PwParams, problem: ConvProblem, args: Struct) -> tuple[TensorMap, TensorMap]:
    """dOut and In (as `args` point at them: the tensors, or the transposing pass's copies) as tensor maps of
    (channels, rows, groups), a box one 64-column slab of a stage: templates/common/igemm_tma.h's maps."""
    rows = problem.N * math.prod(problem.output)

    def field(name: str, kind: type) -> Any:
        value = args[name]
        assert isinstance(value, kind), f"{args.ctype}.{name} is {value!r}"
        return value

    def rows_map(tensor: str, channels: int, pitch: str, group_pitch: str) -> TensorMap:
        row_bytes = field(pitch, I32).value * OPERAND_BYTES
        # One group: any positive multiple of 16 bytes serves as the unused third dimension's stride.
        group_bytes = field(group_pitch, I32).value * OPERAND_BYTES if problem.G > 1 else rows * row_bytes
        return TensorMap(field(tensor, Buf), OPERAND_BYTES, (channels, rows, problem.G), (row_bytes, group_bytes),
                         (SWIZZLE_ROW, p.block_k, 1))

    return rows_map("out", problem.K, "out_w", "out_g"), rows_map("in", problem.C, "in_w", "in_g")


class Pw(Wgmma):
    name = "pw"
    template = "conv_bwd_weight/pw.hip.j2"
    finishes_in_grid = False  # the blocks of a tile meet and finish it themselves (finish_tile in the template)
    params_type = PwParams
    description = ("pointwise (1x1, stride 1, unpadded) layers as a plain GEMM: output positions streamed "
                   "straight from the tensors into wgmma tiles (sm_90a), as rows (channels-last) or as "
                   "K-major runs (NGCHW); split-K")

    def supported_cells(self) -> frozenset:
        return WGMMA_CELLS

    def cell_allows(self, params: PwParams, layout: Layout, dtype: Any, ndim: int) -> bool:
        # Every layout reads in place (rows where channels are innermost, else runs); NGCHW also through copies.
        return staging_fits_layout(params, layout)

    def template_values(self, params: PwParams, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        k_major = not (cl.channel_innermost(layout) or params.transpose)
        return (BwdWeightFamily.template_values(self, params, layout, dtype, ndim)  # no staging pass, no fp8
                | {"k_major": k_major, "wgmma_a_k_major": k_major, "wgmma_b_k_major": k_major})

    def why_not_here(self, p: PwParams, problem: ConvProblem, target: DeviceTarget) -> str | None:
        if problem.filter_volume != 1 or any(s != 1 for s in problem.stride):
            return "pointwise layers only: a 1x1 filter at stride 1"
        if any(problem.pad) or any(problem.pad_right):
            return "pointwise layers only: no padding"
        if p.tma and not reads_rows(p, problem):
            return ("bulk tensor copies read rows of channels: channels-last tensors, or NGCHW ones through "
                    "the transposing pass's copies")
        if p.reduction is Reduction.COOP:
            refusal = coop_residency_refusal(self.unsplit_blocks(p, problem) * p.split_k, target)
            if refusal:
                return refusal
        return super().why_not_here(p, problem, target)

    def meeting_launch(self, p: PwParams, main: Launch, counters: Buf, output: Buf) -> Launch:
        """pw.hip.j2's kf_main takes the counters and the output after split_stride (before any tensor maps)."""
        at = MEETING_ARGS_AT
        return dataclasses.replace(main, args=(*main.args[:at], counters, output, *main.args[at:]), cooperative=True)

    def main_launch(self, p: PwParams, problem: ConvProblem, target: DeviceTarget, args: Struct,
                    wei_numel: int) -> Launch:
        """`wgmma`'s launch; with bulk tensor copies, the two operands' tensor maps after its parameters."""
        launch = super().main_launch(p, problem, target, args, wei_numel)
        return dataclasses.replace(launch, args=(*launch.args, *row_maps(p, problem, args))) if p.tma else launch

    def chunks_why_not(self, p: PwParams, problem: ConvProblem) -> str | None:
        """NGCHW: chunks of positions, so the positions of a sample (the run) must split into them; both
        operands' chunks run along the same positions, so a pair of widths would only repeat a point."""
        if reads_rows(p, problem):
            return super().chunks_why_not(p, problem)
        if p.vector_a != p.vector_b:
            return "NGCHW chunks run along positions in both operands: one width for both"
        run = math.prod(problem.output)
        if run % p.vector_a:
            return f"chunks of {p.vector_a} positions need the {run} output positions of a sample divisible by it"
        return None

    def reduction_stages(self, p: PwParams, problem: ConvProblem) -> int:
        """NGCHW: a stage holds block_k positions of one sample, the last of each sample cut short."""
        if reads_rows(p, problem):
            return super().reduction_stages(p, problem)
        return problem.N * math.ceil(math.prod(problem.output) / p.block_k)

    def split_share(self, p: PwParams, problem: ConvProblem) -> int:
        """NGCHW: pw.hip.j2 takes stages per split."""
        if reads_rows(p, problem):
            return super().split_share(p, problem)
        return math.ceil(self.reduction_stages(p, problem) / p.split_k)

    def heuristic_score(self, p: PwParams, problem: ConvProblem, target: DeviceTarget) -> float:
        """`wgmma`'s score for the same tile, 1.0 above it: on the H100 the best `pw` point ran 1.08-1.61x
        faster than the best of every other family (geomean 1.30x) on the 36 pointwise layers of
        bench/suites/pointwise_bwd_weight.toml (fp16, bf16), every candidate timed; with 0.5 the prior
        still picked `mma` / `wgmma` tiles on three of them (1.35-1.43x the best). The pick then ran at
        1.043x the best (worst 1.29x; bench/NOTES.md 44). Four stages a little above six: 0.98x the
        time of the same point with six (272 pairs, the faster in 171); else the name's tie-break
        picks six. NGCHW runs pay `run_cost`; copies pay `copy_cost`. Bulk tensor copies (`tma`) half a
        doubling below: on the H100 the best of each ran within 0.91-1.07x of the other on twelve random
        pointwise layers (0.99x geomean; bench/NOTES.md 80), so the prior's pick and a budgeted tune's first
        candidates stay the points its terms were fitted on (with 0.01, near-twins of the first candidates
        filled 188 of the first four places over 124 pointwise problems); a full tune still measures them. The coop
        reduction: `coop_term`."""
        score = (super().heuristic_score(p, problem, target) + 1.0 + (0.02 if p.stages == 4 else 0.0)
                 - (TMA_PRIOR_GAP if p.tma else 0.0) + self.coop_term(p))
        if p.transpose:
            return score - self.copy_cost(problem)
        return score if reads_rows(p, problem) else score - self.run_cost(p, problem)

    def coop_term(self, p: PwParams) -> float:
        """The coop reduction against the same point's two-stage split: on the H100, timed in alternating rounds,
        0.92-0.98x its twin's time at 8-16 splits on six pointwise layers, 0.99-1.03x at 4 and 64 splits on four
        (bench/NOTES.md 81). A tenth of a doubling either way: the twin keeps its place where the gain is not
        measured."""
        if p.reduction is not Reduction.COOP:
            return 0.0
        return COOP_PRIOR if p.split_k <= COOP_PRIOR_SPLITS else -COOP_PRIOR

    def copy_cost(self, problem: ConvProblem) -> float:
        """A transposing point against in-place runs that take chunks (an even run): 0.5 a doubling beyond the
        pass's weight in `mma`'s score. On the H100 ResNet-50's 14x14 NGCHW layers (runs of 196, chunks of 4)
        ran 1.39x slower on the copies' best-ranked point than in place (bench/NOTES.md 77)."""
        return 0.5 if math.prod(problem.output) % 2 == 0 else 0.0

    def run_cost(self, p: PwParams, problem: ConvProblem) -> float:
        """NGCHW, in doublings of time: the stage rows a sample's last stage leaves empty, and for an odd
        run (element-wise copies, not cp.async) 0.5 a doubling of the operands past 1 MB. On the H100 the
        element-wise points ran 0.77-0.93x the best other family on four layers of 0.4-2.2 MB and
        1.1-2.8x it on fifteen others, larger or with 7x7 planes (bench/NOTES.md 72)."""
        run = math.prod(problem.output)
        stages = math.ceil(run / p.block_k)
        cost = math.log2(stages * p.block_k / run)
        if p.vector_a == 1:
            operand_bytes = problem.N * problem.G * run * (problem.C + problem.K) * OPERAND_BYTES
            cost += 0.5 * max(0.0, math.log2(operand_bytes / 2**20))
        return cost


def reads_rows(p: PwParams, problem: ConvProblem) -> bool:
    """Whether the main kernel reads rows of channels: channels-last tensors, as given or as copied."""
    return cl.channel_innermost(problem.layout) or p.transpose
