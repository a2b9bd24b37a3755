"""What the backward-weight families share: split-K reductions, block-shape checks, the plan around a
main kernel (zeroing, workspace, the finishing kernel, the output epilogue) and the values every
template sees.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from abc import abstractmethod
from typing import Any, ClassVar

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout, Scalar
from ..base import I32, Buf, Launch, LaunchPlan, Memset, Struct
from ..conv import ConvTensor, cpp_type, epilogue_args, kernel_args
from ..conv.family import ConvFamily
from ..conv.transpose import COPY_ALIGN
from ..conv import layouts as cl

GRID_Y_LIMIT = 65535
STAGING_ALIGN = COPY_ALIGN  # bytes: each workspace region starts where a device allocation would
# The dtypes of the seed's tables; fp16 computed as fp8 is a variant of the matrix family only.
TABLE_DTYPES = (DType.FP16, DType.BF16, DType.BF16_FP32W, DType.FP32, DType.INT8)
ALL_CELLS = frozenset((l, d, n) for l in Layout for d in TABLE_DTYPES for n in (1, 2, 3))
# int8 with a saturated int8 weight-gradient: the portable and the matrix family take it.
INT8_SAT_CELLS = frozenset((l, DType.INT8_SAT, n) for l in Layout for n in (1, 2, 3))
UP_TO_2D = frozenset(cell for cell in ALL_CELLS if cell[2] in (1, 2))

# The op's tensors in kernel-argument order, and the one it writes.
TENSORS = {"input": ConvTensor.ACTIVATION_IN, "grad_output": ConvTensor.ACTIVATION_OUT, "grad_weight": ConvTensor.WEIGHT}
OUTPUT = "grad_weight"
D_INPUT = "d"  # the epilogue's D (beta != 0): grad_weight's shape, layout and storage type


SPLITK_ARGS = "kf_splitk_args"  # templates/common/args.h


def splitk_args(workspace: str, dst: str, total: int, splits: int, split_stride: int) -> Struct:
    """The split-K finishing kernel's argument struct: sum `splits` partials of `total` accumulators,
    `split_stride` apart in `workspace`, into `dst` in its storage type."""
    return Struct(SPLITK_ARGS, (("ws", Buf(workspace)), ("dst", Buf(dst)), ("total", I32(total)),
                                ("splits", I32(splits)), ("split_stride", I32(split_stride))))


class Reduction(enum.Enum):
    """How split-K partial sums meet."""

    DIRECT = "direct"  # no split: each block stores its final result
    ATOMIC = "atomic"  # atomics into an accumulator buffer (the output itself when it is fp32/int32 and the
    #                    epilogue is the identity)
    TWOSTAGE = "twostage"  # each split writes its partial to a workspace; a second kernel sums and converts
    COOP = "coop"  # partials as two-stage, then the blocks of a tile meet in the same (cooperative) launch and
    #                each sums and stores its share of the tile: no second kernel (meeting_launch)

    @property
    def mode(self) -> int:
        """How the main kernel stores (templates' REDUCE): coop's partials as two-stage's."""
        return {"direct": 0, "atomic": 1, "twostage": 2, "coop": 2}[self.value]


def check_split(split_k: int, reduction: Reduction, meets_in_kernel: bool = False) -> None:
    """`meets_in_kernel`: the family's kernel finishes a COOP split itself (only those may list it)."""
    if split_k < 1:
        raise ValueError("split_k must be >= 1")
    if (split_k == 1) != (reduction is Reduction.DIRECT):
        raise ValueError("split_k 1 goes with the direct reduction, and only it")
    if reduction is Reduction.COOP and not meets_in_kernel:
        raise ValueError("the coop reduction needs a kernel that finishes its split sums itself (pw, wgmma, gwl)")


def check_lane_block(threads_lane: int, threads_pos: int, vector: int, split_k: int, reduction: Reduction) -> None:
    """Block shapes the depthwise kernels' warp-level reductions assume (lanes fold within 32 threads)."""
    check_split(split_k, reduction)
    if threads_lane == 1 and (threads_pos % 64 or vector != 1):
        raise ValueError("position-only blocks need threads_pos % 64 == 0 and vector 1")
    if threads_lane not in (1, 2, 4, 8, 16, 32):
        raise ValueError("threads_lane must be a power of two up to 32 (lanes fold within a warp)")


def split_items_refusal(split_k: int, items: int, chunks: int) -> str | None:
    """Why a launch of `chunks` blocks (grid x) by `split_k` splits (grid y) over a chunk's `items` does not
    fit, or None (the windowed families dwl and gwl: each split walks every split_k-th item)."""
    if split_k > items:
        return f"split {split_k} exceeds the {items} items of a chunk"
    if split_k > GRID_Y_LIMIT or chunks >= 2**31 or items >= 2**31:
        return "too many blocks for the grid"
    return None


def reduction_length(problem: ConvProblem) -> int:
    """Terms of each weight-gradient sum: N times the output positions."""
    return problem.N * math.prod(problem.output)


class BwdWeightFamily(ConvFamily):
    """A backward-weight family: the op-wide checks, template values and split-K plan around its main kernel."""

    def supported_cells(self) -> frozenset[tuple[Layout, DType, int]]:
        return ALL_CELLS

    # Whether a COOP point's kernel finishes through kf_splitk_finish_in_grid (templates/common/splitk.h):
    # every block of the launch meets at one counter, then they share out kf_finalize's sums.
    finishes_in_grid: ClassVar[bool] = False

    def template_values(self, params: Any, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        values = dict(params.template_values()) | self.operand_types(dtype) | {"tw": cpp_type(dtype.weight)}
        values["grid_finish"] = self.finishes_in_grid and getattr(params, "reduction", None) is Reduction.COOP
        finalize = {"finalize_vector": FINALIZE_VECTOR, "finalize_split_rows": FINALIZE_SPLIT_ROWS,
                    "finalize_wide_from": FINALIZE_WIDE_FROM}
        return values | finalize | self.layout_values(layout)

    def layout_values(self, layout: Layout) -> dict[str, Any]:
        """Template values that depend on the layout (none unless a family says so)."""
        return {}

    @abstractmethod
    def main_launch(self, params: Any, problem: ConvProblem, target: DeviceTarget, args: Struct, wei_numel: int) -> Launch:
        """The family's kernel, given the conv argument struct (written tensor redirected as needed); the
        family's own arguments follow it as plain parameters, split_stride (wei_numel) among them.

        Return the Launch with `args` first; launch_plan then inserts the output epilogue struct
        (kf_epilogue) right after it, so every main kernel of this op is declared
        `kf_main(const kf_conv_args a, const kf_epilogue ep, <the family's own parameters>)` and hands
        `ep` to kf_splitk_store (templates/common/splitk.h), which applies it when REDUCE is 0."""

    def launch_plan(self, params: Any, problem: ConvProblem, target: DeviceTarget) -> LaunchPlan:
        """Memset (atomic), the main kernel, then kf_finalize when the result goes through a workspace;
        under COOP the counters' memset and the main kernel alone (it finishes the sums itself).

        The output epilogue (alpha * dW + beta * D) is applied where each output element is finally
        stored: by the main kernel's store under the direct reduction, by kf_finalize otherwise. So an
        atomic reduction with a non-identity epilogue accumulates in a workspace and finishes through
        kf_finalize even when the output is already the accumulator type (fp32 / int32), exactly as a
        16-bit output always does. That is simpler than pre-filling the output with beta * D (which a
        memset cannot do: it needs a kernel of its own) and scaling every partial by alpha: the
        epilogue stays in one place, and D may be the output itself. It costs a weight-sized fp32/int32
        workspace and one pass over the weight, small beside the activations this op reads.
        """
        wei_numel = math.prod(problem.weight_shape_logical)
        acc_bytes = 4
        out_is_acc = problem.dtype.weight in (Scalar.F32, Scalar.I32)
        red = params.reduction
        splits = params.split_k
        # Where the main kernel writes: the output itself, or an accumulator workspace.
        if red is Reduction.DIRECT or (red is Reduction.ATOMIC and out_is_acc and not problem.has_epilogue):
            dst, workspace = OUTPUT, 0
        elif red is Reduction.ATOMIC:
            dst, workspace = "workspace", wei_numel * acc_bytes
        else:
            dst, workspace = "workspace", wei_numel * acc_bytes * splits
        staging_at = -(-workspace // STAGING_ALIGN) * STAGING_ALIGN  # staged inputs follow the accumulators
        staging, staged_bytes = self.staging(params, problem, staging_at)
        args = self.conv_args(params, problem, dst, staging_at)
        epilogue = epilogue_args(problem, D_INPUT, OUTPUT)
        steps: list = list(staging)
        if staged_bytes:
            workspace = staging_at + staged_bytes
        if red is Reduction.ATOMIC:
            steps.append(Memset(dst, wei_numel * acc_bytes))
        main = with_epilogue(self.main_launch(params, problem, target, args, wei_numel), args, epilogue)
        if red is Reduction.COOP:
            # One arrival counter a tile (grid x by y; one for the launch where it finishes in the grid), after
            # every other region, zeroed before the launch.
            counters_at = -(-workspace // STAGING_ALIGN) * STAGING_ALIGN
            counters = MEETING_COUNTER_BYTES * (1 if self.finishes_in_grid else main.grid[0] * main.grid[1])
            steps.append(Memset("workspace", counters, offset=counters_at))
            steps.append(self.meeting_launch(params, main, Buf("workspace", counters_at), Buf(OUTPUT)))
            return LaunchPlan(tuple(steps), counters_at + counters)
        steps.append(main)
        if dst == "workspace":
            n_sum = splits if red is Reduction.TWOSTAGE else 1
            grid, block = finalize_shape(wei_numel, n_sum)
            steps.append(Launch("kf_finalize", grid, block,
                                (splitk_args("workspace", OUTPUT, wei_numel, n_sum, wei_numel), epilogue)))
        return LaunchPlan(tuple(steps), workspace)

    def meeting_launch(self, params: Any, main: Launch, counters: Buf, output: Buf) -> Launch:
        """The main launch of a COOP point: its kernel also takes the tiles' arrival counters and the output
        (its conv struct's weight points at the partials), and runs cooperatively (its blocks wait for
        each other). Only a family whose params accept COOP (check_split) has one: those that finish in the
        grid take the two after their own parameters (the first counter serves the whole launch)."""
        if not self.finishes_in_grid:
            raise NotImplementedError(f"{type(self).__name__} does not finish split-K tiles in its kernel")
        return dataclasses.replace(main, args=(*main.args, counters, output), cooperative=True)

    def staging(self, params: Any, problem: ConvProblem, at: int) -> tuple[tuple[Launch, ...], int]:
        """Launches that prepare the inputs in the workspace (from byte `at` on) before the main kernel,
        and the bytes they take there. Default: none; the main kernel reads the tensors themselves."""
        return (), 0

    def conv_args(self, params: Any, problem: ConvProblem, dst: str, staging_at: int) -> Struct:
        """The main kernel's conv argument struct, the weight gradient written to `dst`."""
        return kernel_args(TENSORS, problem, {OUTPUT: dst})

    def reduction_penalty(self, params: Any, problem: ConvProblem) -> float:
        """The heuristic's small preference between the split-K reductions (see launch_plan).

        Atomics straight into an fp32/int32 output with no epilogue take one launch; there two-stage was
        the faster in only 25 % of 397 same-params pairs (H100, suite+seed21). Any other output sends atomics
        through a workspace and kf_finalize too, and there two-stage, which adds no atomics, was the
        faster in 63 % of 3,001 pairs (geomean 0.988x the atomic time)."""
        if params.reduction is not Reduction.TWOSTAGE:
            return 0.0
        atomics_in_place = problem.dtype.weight in (Scalar.F32, Scalar.I32) and not problem.has_epilogue
        return 0.05 if atomics_in_place else -0.05


def coop_residency_refusal(blocks: int, target: DeviceTarget) -> str | None:
    """Why a coop point cannot run: its blocks wait for each other, so all must be resident at once; one
    a multiprocessor is what every family's block is sure to get (the driver refuses a cooperative launch
    past its own count)."""
    if blocks > target.processors:
        return (f"the coop reduction's blocks wait for each other, so all {blocks} must be resident: "
                f"at most one a multiprocessor, {target.processors}")
    return None


def grid_finish_refusal(p: Any, blocks: int, problem: ConvProblem, target: DeviceTarget) -> str | None:
    """Why a coop point of a family that finishes in the grid (kf_splitk_finish_in_grid) cannot serve: its
    blocks' residency, or a weight that is not whole groups of four outputs (a thread sums four)."""
    if p.reduction is not Reduction.COOP:
        return None
    weight = math.prod(problem.weight_shape_logical)
    if weight % GRID_FINISH_OUTPUTS:
        return f"the coop reduction's threads sum {GRID_FINISH_OUTPUTS} outputs each; the weight has {weight}"
    return coop_residency_refusal(blocks, target)


GRID_FINISH_OUTPUTS = 4  # consecutive outputs a thread of kf_splitk_finish_in_grid sums
MEETING_COUNTER_BYTES = 4  # a tile's arrival counter under the coop reduction (common/grid_sync.h)
FINALIZE_VECTOR = 4  # outputs a thread of kf_finalize (templates/common/splitk.h) sums on large weights
FINALIZE_WIDE_FROM = 1 << 17  # weight elements from which it does (below, one a thread: the blocks are few)
FINALIZE_SPLIT_ROWS = 8  # splits from which a block's 8 rows of threads share out the splits of 32 threads' outputs


def finalize_shape(wei_numel: int, splits: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Grid and block of kf_finalize over `wei_numel` outputs summed over `splits`: 32 x 8 threads a block, each
    thread's outputs FINALIZE_VECTOR on weights of FINALIZE_WIDE_FROM elements or more, else one. With
    FINALIZE_SPLIT_ROWS splits or more a block's 8 rows share out the splits of 32 threads' outputs; with
    fewer each of the 256 threads sums every split of its own. On the H100, four outputs a thread on every
    weight timed 0.88-0.93x the old kernel (one output a thread, 32 a block) on weights of 150-520 K elements
    with 4-8 splits, and up to 1.23x on depthwise weights of a few thousand with 64-256 splits (4x fewer
    blocks); hence one output a thread on small weights (bench/NOTES.md 79)."""
    vector = FINALIZE_VECTOR if wei_numel >= FINALIZE_WIDE_FROM else 1
    per_block = (32 if splits >= FINALIZE_SPLIT_ROWS else 256) * vector
    return (math.ceil(wei_numel / per_block), 1, 1), (32, 8, 1)


def with_epilogue(main: Launch, args: Struct, epilogue: Struct) -> Launch:
    """`main` (a family's main_launch, conv arguments first) with the epilogue struct as its second argument."""
    if not main.args or main.args[0] != args:
        raise ValueError(f"{main.entry}: a main launch passes the conv argument struct first")
    return dataclasses.replace(main, args=(main.args[0], epilogue, *main.args[1:]))


def lanes_only_channels_last(params: Any, layout: Layout) -> bool:
    """Whether wide loads / lane blocks fit the layout: they run along G and C, adjacent only in NHWGC."""
    if params.vector > 1 and not cl.channel_innermost(layout):
        return False
    return not (params.threads_lane > 1 and layout is not Layout.NHWGC)
