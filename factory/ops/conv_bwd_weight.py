"""Grouped N-D convolution backward-weight: dW[g] = dOut[g]^T * im2col(In[g]).

Kernel families:
- `dl`: portable implicit GEMM on plain FMA; every layout, dtype and rank; tiles, work per thread,
  vector width, split-K and both split-K reductions (atomics, or an accumulator workspace + convert).
- `dw`: few channels per group (depthwise when C = K = 1): one thread per (g, k, c) lane and every
  filter tap, streaming the activations once; memory bound by design.
- `dwt`: depthwise 1-D/2-D with the input window of an output tile staged in shared memory.
- `dwr`: depthwise 1-D/2-D with the filter compiled in; a thread's block of outputs lives in registers.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..problem import ConvProblem, DType, Layout, Op, Scalar, parse_conv_problem
from . import conv_layouts as cl
from .base import (
    F32,
    I32,
    Buf,
    FamilySpec,
    Launch,
    LaunchPlan,
    Memset,
    Role,
    TensorSpec,
    Tolerance,
)

INT32_LIMIT = 2**31 - 1
GRID_Y_LIMIT = 65535
SHARED_LIMIT = 48 * 1024
DW_MAX_CHANNEL_PRODUCT = 16  # C*K per group above which the GEMM family is the right tool


class Reduction(enum.Enum):
    """How split-K partial sums meet."""

    DIRECT = "direct"  # no split: each block stores its final result
    ATOMIC = "atomic"  # atomics into an accumulator buffer (the output itself when it is fp32/int32)
    TWOSTAGE = "twostage"  # each split writes its partial to a workspace; a second kernel sums and converts

    @property
    def mode(self) -> int:
        return {"direct": 0, "atomic": 1, "twostage": 2}[self.value]


@dataclass(frozen=True)
class DlParams:
    block_m: int
    block_n: int
    block_k: int
    thread_m: int
    thread_n: int
    vector: int
    split_k: int
    reduction: Reduction

    def __post_init__(self) -> None:
        _check_split(self.split_k, self.reduction)
        if self.block_m % self.thread_m or self.block_n % self.thread_n:
            raise ValueError(f"block {self.block_m}x{self.block_n} not divisible by thread tile")
        if self.block_m % self.vector or self.block_n % self.vector:
            raise ValueError("vector width must divide the block tile")

    @property
    def threads(self) -> int:
        return (self.block_m // self.thread_m) * (self.block_n // self.thread_n)

    def suffix(self) -> str:
        return (
            f"b{self.block_m}x{self.block_n}x{self.block_k}_t{self.thread_m}x{self.thread_n}"
            f"_v{self.vector}_s{self.split_k}_{self.reduction.value}"
        )

    def template_values(self) -> dict[str, Any]:
        return {
            "block_m": self.block_m,
            "block_n": self.block_n,
            "block_k": self.block_k,
            "thread_m": self.thread_m,
            "thread_n": self.thread_n,
            "vector": self.vector,
            "threads": self.threads,
            "reduce_mode": self.reduction.mode,
        }


@dataclass(frozen=True)
class DwParams:
    threads_lane: int  # threads along (g, k, c) lanes; 1 = threads along output positions only
    threads_pos: int
    vector: int  # consecutive groups per thread (depthwise, channels-last only)
    taps_max: int  # filter taps held in registers
    split_k: int  # blocks along output positions
    reduction: Reduction

    def __post_init__(self) -> None:
        _check_lane_block(self.threads_lane, self.threads_pos, self.vector, self.split_k, self.reduction)

    @property
    def threads(self) -> int:
        return self.threads_lane * self.threads_pos

    def shared_bytes(self, acc_bytes: int = 4) -> int:
        if self.threads_lane == 1:
            return ((self.threads_pos + 31) // 32) * self.taps_max * acc_bytes + 3 * 4 * self.taps_max
        return self.threads * self.vector * acc_bytes + 3 * 4 * self.taps_max

    def suffix(self) -> str:
        return (
            f"l{self.threads_lane}x{self.threads_pos}_v{self.vector}_f{self.taps_max}"
            f"_s{self.split_k}_{self.reduction.value}"
        )

    def template_values(self) -> dict[str, Any]:
        return {
            "threads_lane": self.threads_lane,
            "threads_pos": self.threads_pos,
            "vector": self.vector,
            "taps_max": self.taps_max,
            "reduce_mode": self.reduction.mode,
        }


@dataclass(frozen=True)
class DwtParams:
    """Depthwise, shared-memory tiles: TG*VEC groups per block, TH x TW output positions per tile."""

    threads_lane: int
    threads_pos: int
    vector: int
    tile_h: int
    tile_w: int
    taps_max: int
    split_k: int  # blocks along tiles
    reduction: Reduction
    min_blocks: int = 1  # blocks per SM the compiler must fit (caps registers per thread)

    def __post_init__(self) -> None:
        _check_lane_block(self.threads_lane, self.threads_pos, self.vector, self.split_k, self.reduction)

    @property
    def threads(self) -> int:
        return self.threads_lane * self.threads_pos

    @property
    def groups_per_block(self) -> int:
        return self.threads_lane * self.vector

    def window(self, problem: ConvProblem) -> tuple[int, int]:
        """(rows, cols) of the input window one output tile reads, halo included."""
        y, x = (1, *problem.filter)[-2:] if problem.ndim == 1 else problem.filter
        sh, sw = (1, *problem.stride)[-2:] if problem.ndim == 1 else problem.stride
        dh, dw = (1, *problem.dilation)[-2:] if problem.ndim == 1 else problem.dilation
        return (self.tile_h - 1) * sh + (y - 1) * dh + 1, (self.tile_w - 1) * sw + (x - 1) * dw + 1

    def shared_bytes(self, problem: ConvProblem) -> tuple[int, int]:
        """(dynamic tile bytes, static bytes)."""
        rows, cols = self.window(problem)
        dynamic = rows * cols * self.groups_per_block * problem.dtype.tensor.nbytes
        warps = (self.threads + 31) // 32
        static = 4 * (warps * self.taps_max if self.threads_lane == 1 else warps * self.groups_per_block)
        return dynamic, static

    def suffix(self) -> str:
        return (
            f"l{self.threads_lane}x{self.threads_pos}_v{self.vector}_t{self.tile_h}x{self.tile_w}"
            f"_f{self.taps_max}_o{self.min_blocks}_s{self.split_k}_{self.reduction.value}"
        )

    def template_values(self) -> dict[str, Any]:
        return {
            "min_blocks": self.min_blocks,
            "threads_lane": self.threads_lane,
            "threads_pos": self.threads_pos,
            "vector": self.vector,
            "tile_h": self.tile_h,
            "tile_w": self.tile_w,
            "taps_max": self.taps_max,
            "reduce_mode": self.reduction.mode,
        }


@dataclass(frozen=True)
class DwrParams:
    """Depthwise with register blocking: the filter shape, stride and dilation are compiled in."""

    threads_lane: int
    threads_pos: int
    vector: int
    segment: int  # output columns per thread
    rows: int  # output rows per thread (1 for 1-D)
    filter_h: int
    filter_w: int
    stride: int  # along H and W (1-D: W)
    dilation: int
    split_k: int  # blocks along (n, row block, segment) work items
    reduction: Reduction
    min_blocks: int = 1

    def __post_init__(self) -> None:
        _check_lane_block(self.threads_lane, self.threads_pos, self.vector, self.split_k, self.reduction)
        if self.filter_h == 1 and self.rows != 1:
            raise ValueError("1-D points (filter_h = 1) take rows = 1")

    @property
    def threads(self) -> int:
        return self.threads_lane * self.threads_pos

    def work_items(self, problem: ConvProblem) -> int:
        rows = math.ceil(problem.output[-2] / self.rows) if problem.ndim == 2 else 1
        return problem.N * rows * math.ceil(problem.output[-1] / self.segment)

    def suffix(self) -> str:
        return (
            f"l{self.threads_lane}x{self.threads_pos}_v{self.vector}_b{self.rows}x{self.segment}"
            f"_k{self.filter_h}x{self.filter_w}s{self.stride}d{self.dilation}_o{self.min_blocks}"
            f"_s{self.split_k}_{self.reduction.value}"
        )

    def template_values(self) -> dict[str, Any]:
        two_d = self.filter_h > 1
        return {
            "threads_lane": self.threads_lane,
            "threads_pos": self.threads_pos,
            "vector": self.vector,
            "segment": self.segment,
            "rows": self.rows,
            "filter_h": self.filter_h,
            "filter_w": self.filter_w,
            "stride": self.stride,
            "stride_h": self.stride if two_d else 1,
            "dilation": self.dilation,
            "dilation_h": self.dilation if two_d else 1,
            "min_blocks": self.min_blocks,
            "reduce_mode": self.reduction.mode,
        }


def _check_lane_block(threads_lane: int, threads_pos: int, vector: int, split_k: int, reduction: Reduction) -> None:
    """Block shapes the depthwise kernels' warp-level reductions assume."""
    _check_split(split_k, reduction)
    if threads_lane == 1 and (threads_pos % 64 or vector != 1):
        raise ValueError("position-only blocks need threads_pos % 64 == 0 and vector 1")
    if threads_lane not in (1, 2, 4, 8, 16, 32):
        raise ValueError("threads_lane must be a power of two up to 32 (lanes fold within a warp)")


def _check_split(split_k: int, reduction: Reduction) -> None:
    if split_k < 1:
        raise ValueError("split_k must be >= 1")
    if (split_k == 1) != (reduction is Reduction.DIRECT):
        raise ValueError("split_k 1 goes with the direct reduction, and only it")


FAMILIES: dict[str, FamilySpec] = {
    "dl": FamilySpec("dl", "conv_bwd_weight/dl.hip.j2", DlParams, "portable implicit GEMM (plain FMA)"),
    "dw": FamilySpec("dw", "conv_bwd_weight/dw.hip.j2", DwParams, "depthwise / few channels per group"),
    "dwt": FamilySpec("dwt", "conv_bwd_weight/dwt.hip.j2", DwtParams, "depthwise 1-D/2-D, shared-memory tiles"),
    "dwr": FamilySpec("dwr", "conv_bwd_weight/dwr.hip.j2", DwrParams, "depthwise 1-D/2-D, filter compiled in, register blocks"),
}

ALL_CELLS = frozenset((l, d, n) for l in Layout for d in DType for n in (1, 2, 3))


class ConvBwdWeight:
    """The solver for `conv_bwd_weight` (see factory.ops.base.OpSolver)."""

    op = Op.CONV_BWD_WEIGHT
    families = FAMILIES

    # --- what exists -----------------------------------------------------------------------------
    def supported_cells(self, family: str | None = None) -> frozenset[tuple[Layout, DType, int]]:
        """Every cell for the op and for `dl`/`dw`; the depthwise tile families stop at 2-D."""
        if family in ("dwt", "dwr"):
            return frozenset(cell for cell in ALL_CELLS if cell[2] in (1, 2))
        return ALL_CELLS

    def cell_allows(self, family: str, params: Any, layout: Layout, dtype: DType, ndim: int) -> bool:
        """Whether a tuning point makes sense at all for a (layout, dtype, ndim) cell."""
        if params.vector > 1 and not cl.channel_innermost(layout):
            return False  # wide loads run along channels, which only channels-last layouts keep contiguous
        if family in ("dw", "dwt", "dwr") and params.threads_lane > 1 and layout is not Layout.NHWGC:
            return False  # lanes are adjacent in memory only when G and C are the innermost dims
        if family == "dwt":
            # 1-D problems get single-row tiles; 3-D ones are left to the dw family.
            return ndim == 2 and params.tile_h > 1 or ndim == 1 and params.tile_h == 1
        if family == "dwr":
            return ndim == 2 and params.filter_h > 1 or ndim == 1 and params.filter_h == 1
        return True

    def parse_problem(self, spec: str, layout: Layout, dtype: DType) -> ConvProblem:
        return parse_conv_problem(spec, layout, dtype, self.op)

    # --- applicability -----------------------------------------------------------------------------
    def why_not(self, family: str, params: Any, problem: ConvProblem) -> str | None:
        """None when the instance computes this problem; otherwise the reason it does not."""
        if problem.element_count_max() > INT32_LIMIT:
            return "a tensor has 2**31 elements or more; kernels index with 32-bit integers"
        if family == "dl":
            return self._why_not_dl(params, problem)
        if family == "dwt":
            return self._why_not_dwt(params, problem)
        if family == "dwr":
            return self._why_not_dwr(params, problem)
        return self._why_not_dw(params, problem)

    def _why_not_dwr(self, p: DwrParams, problem: ConvProblem) -> str | None:
        if problem.C != 1 or problem.K != 1:
            return f"depthwise only (C=K=1), problem has C={problem.C}, K={problem.K}"
        if problem.ndim == 3:
            return "1-D and 2-D only"
        filt = (p.filter_h, p.filter_w)[-problem.ndim :]
        if tuple(problem.filter) != filt:
            return f"compiled for filter {'x'.join(map(str, filt))}, problem has {'x'.join(map(str, problem.filter))}"
        if set(problem.stride) != {p.stride} or set(problem.dilation) != {p.dilation}:
            return (f"compiled for stride {p.stride} / dilation {p.dilation} on every axis, problem has "
                    f"{'x'.join(map(str, problem.stride))} / {'x'.join(map(str, problem.dilation))}")
        if problem.G % p.vector:
            return f"vector width {p.vector} needs G divisible by it (G={problem.G})"
        items = math.ceil(p.work_items(problem) / p.threads_pos)
        if p.split_k > 1 and p.split_k > items:
            return f"split {p.split_k} exceeds the {items} blocks of work items"
        if p.split_k > GRID_Y_LIMIT:
            return "split exceeds the grid"
        return None

    def _why_not_dwt(self, p: DwtParams, problem: ConvProblem) -> str | None:
        if problem.C != 1 or problem.K != 1:
            return f"depthwise only (C=K=1), problem has C={problem.C}, K={problem.K}"
        if problem.ndim == 3:
            return "1-D and 2-D only"
        if problem.filter_volume > p.taps_max:
            return f"filter has {problem.filter_volume} taps, this instance holds {p.taps_max}"
        if problem.G % p.vector:
            return f"vector width {p.vector} needs G divisible by it (G={problem.G})"
        dynamic, static = p.shared_bytes(problem)
        if dynamic + static > SHARED_LIMIT:
            return f"input window needs {dynamic + static} bytes of shared memory, over {SHARED_LIMIT}"
        tiles = problem.N * math.prod(math.ceil(o / t) for o, t in zip(problem.output[-2:], (p.tile_h, p.tile_w)[-problem.ndim:]))
        if p.split_k > 1 and p.split_k > tiles:
            return f"split {p.split_k} exceeds the {tiles} output tiles"
        return None

    def _why_not_dl(self, p: DlParams, problem: ConvProblem) -> str | None:
        if problem.G > GRID_Y_LIMIT:
            return f"G={problem.G} exceeds the grid's {GRID_Y_LIMIT} groups"
        if p.vector > 1 and (problem.C % p.vector or problem.K % p.vector):
            return f"vector width {p.vector} needs C and K divisible by it (C={problem.C}, K={problem.K})"
        chunks = math.ceil(self._reduction_length(problem) / p.block_k)
        if p.split_k > chunks:
            return f"split-K {p.split_k} exceeds the {chunks} reduction chunks of this problem"
        return None

    def _why_not_dw(self, p: DwParams, problem: ConvProblem) -> str | None:
        if problem.C * problem.K > DW_MAX_CHANNEL_PRODUCT:
            return f"C*K={problem.C * problem.K} per group exceeds {DW_MAX_CHANNEL_PRODUCT}: a GEMM family fits"
        if problem.filter_volume > p.taps_max:
            return f"filter has {problem.filter_volume} taps, this instance holds {p.taps_max}"
        if p.vector > 1 and (problem.C != 1 or problem.K != 1 or problem.G % p.vector):
            return f"vector width {p.vector} needs C=K=1 and G divisible by it"
        positions = self._reduction_length(problem)
        if p.split_k > 1 and p.split_k > math.ceil(positions / p.threads_pos):
            return f"split {p.split_k} exceeds the {math.ceil(positions / p.threads_pos)} position blocks"
        if p.threads_lane == 1 and problem.G * problem.K * problem.C > INT32_LIMIT:
            return "too many lanes for the grid"
        if p.split_k > GRID_Y_LIMIT:
            return "split exceeds the grid"
        return None

    @staticmethod
    def _reduction_length(problem: ConvProblem) -> int:
        return problem.N * math.prod(problem.output)

    # --- tensors and launches ---------------------------------------------------------------------
    def tensors(self, problem: ConvProblem) -> list[TensorSpec]:
        act_in = cl.activation(problem, "C")
        act_out = cl.activation(problem, "K")
        wei = cl.weight(problem)
        t = problem.dtype.tensor
        return [
            TensorSpec("input", act_in.shape, t, Role.INPUT, act_in.dims),
            TensorSpec("grad_output", act_out.shape, t, Role.INPUT, act_out.dims),
            TensorSpec("grad_weight", wei.shape, problem.dtype.weight, Role.OUTPUT, wei.dims),
        ]

    def template_values(self, family: str, params: Any, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        values = dict(params.template_values())
        values.update(
            tin=_cpp(dtype.tensor),
            tw=_cpp(dtype.weight),
            acc="int" if dtype.accumulator is Scalar.I32 else "float",
        )
        if family == "dl":
            channels_last = cl.channel_innermost(layout)
            values.update(
                wei_c_inner=int(layout.weight_order.endswith("C")),
                a_m_fastest=int(channels_last),
                b_j_fastest=int(channels_last),
            )
        return values

    def launch_plan(self, family: str, params: Any, problem: ConvProblem) -> LaunchPlan:
        wei_numel = math.prod(problem.weight_shape_logical)
        acc_bytes = 4
        out_is_acc = problem.dtype.weight in (Scalar.F32, Scalar.I32)
        red = params.reduction
        splits = params.split_k
        # Where the main kernel writes: the output itself, or an accumulator workspace.
        if red is Reduction.DIRECT or (red is Reduction.ATOMIC and out_is_acc):
            dst, workspace = "grad_weight", 0
        elif red is Reduction.ATOMIC:
            dst, workspace = "workspace", wei_numel * acc_bytes
        else:
            dst, workspace = "workspace", wei_numel * acc_bytes * splits

        common = self._main_args(problem, dst)
        if family == "dl":
            lanes_grid = math.ceil(problem.K / params.block_m) * math.ceil(
                problem.C * problem.filter_volume / params.block_n
            )
            r_per_split = math.ceil(math.ceil(self._reduction_length(problem) / splits) / params.block_k) * params.block_k
            main = Launch("kf_main", (lanes_grid, problem.G, splits), (params.threads, 1, 1),
                          common + (I32(r_per_split), I32(wei_numel)))
        elif family == "dwt":
            rows, cols = params.window(problem)
            dynamic, _ = params.shared_bytes(problem)
            grid_x = math.ceil(problem.G / params.groups_per_block)
            main = Launch("kf_main", (grid_x, splits, 1), (params.threads_lane, params.threads_pos, 1),
                          common + (I32(0), I32(wei_numel), I32(rows), I32(cols)), shared_bytes=dynamic)
        else:  # dw, dwr: lanes along x, splits of the positions along y
            lanes = problem.G * problem.K * problem.C
            grid_x = math.ceil(lanes / (params.threads_lane * params.vector))
            main = Launch("kf_main", (grid_x, splits, 1), (params.threads_lane, params.threads_pos, 1),
                          common + (I32(0), I32(wei_numel)))

        steps: list = []
        if red is Reduction.ATOMIC:
            steps.append(Memset(dst, wei_numel * acc_bytes))
        steps.append(main)
        if dst == "workspace":
            n_sum = splits if red is Reduction.TWOSTAGE else 1
            steps.append(Launch("kf_finalize", (math.ceil(wei_numel / 32), 1, 1), (32, 8, 1),
                                (Buf("workspace"), Buf("grad_weight"), I32(wei_numel), I32(n_sum), I32(wei_numel))))
        return LaunchPlan(tuple(steps), workspace)

    def _main_args(self, problem: ConvProblem, dst: str) -> tuple:
        act_in = cl.activation(problem, "C")
        act_out = cl.activation(problem, "K")
        wei = cl.weight(problem)
        sp_in = "DHW"
        ints = [problem.N, problem.G, problem.C, problem.K]
        ints += cl.pad_to_3d(problem.input, 1) + cl.pad_to_3d(problem.output, 1) + cl.pad_to_3d(problem.filter, 1)
        ints += cl.pad_to_3d(problem.stride, 1) + cl.pad_to_3d(problem.pad, 0) + cl.pad_to_3d(problem.dilation, 1)
        ints += cl.strides_3d(act_in, "NGC" + sp_in)
        ints += cl.strides_3d(act_out, "NGK" + sp_in)
        ints += cl.strides_3d(wei, "GKCZYX")
        return (Buf("input"), Buf("grad_output"), Buf(dst)) + tuple(I32(v) for v in ints)

    def framework_view(self, problem: ConvProblem, name: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """PyTorch's conv shape of a tensor ((N, G*C, *S) / (G*K, C, *F)) with this layout's strides.

        None when the layout has no such view (groups and channels not adjacent, as in GNHWC).
        """
        if name == "grad_weight":
            t, outer, inner = cl.weight(problem), "G", "K"
            rest = "C" + "ZYX"[3 - problem.ndim :]
        else:
            letter = "C" if name == "input" else "K"
            t, outer, inner = cl.activation(problem, letter), "G", letter
            rest = "DHW"[3 - problem.ndim :]
        s = t.strides()
        if s[outer] != t.sizes[inner] * s[inner]:
            return None
        if name == "grad_weight":
            shape = (problem.G * problem.K, *(t.sizes[d] for d in rest))
            strides = (s["K"], *(s[d] for d in rest))
        else:
            shape = (problem.N, problem.G * t.sizes[inner], *(t.sizes[d] for d in rest))
            strides = (s["N"], s[inner], *(s[d] for d in rest))
        return shape, strides

    # --- numbers ---------------------------------------------------------------------------------
    def reference(self, problem: ConvProblem, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """dW in float64 (int64 for int8), physical layout, from physical-layout inputs."""
        x = cl.activation(problem, "C").to_logical(inputs["input"])
        dy = cl.activation(problem, "K").to_logical(inputs["grad_output"])
        acc = np.int64 if problem.dtype is DType.INT8 else np.float64
        dw = reference_logical(problem, x.astype(acc), dy.astype(acc))
        return {"grad_weight": cl.weight(problem).from_logical(dw)}

    def tolerance(self, dtype: DType) -> Tolerance:
        # rtol bounds |out - ref| relative to sum |x*dy| (the dot products' own scale) plus output rounding.
        return {
            DType.FP32: Tolerance(rtol=1e-5, atol=0.0),
            DType.BF16_FP32W: Tolerance(rtol=1e-5, atol=0.0),
            DType.FP16: Tolerance(rtol=1e-5, atol=2.0**-10),
            DType.BF16: Tolerance(rtol=1e-5, atol=2.0**-7),
            DType.INT8: Tolerance(rtol=0.0, atol=0.0),
        }[dtype]

    def traffic(self, problem: ConvProblem) -> tuple[int, int]:
        return problem.min_bytes, problem.macs

    def heuristic_score(self, family: str, params: Any, problem: ConvProblem) -> float:
        """Higher is better: a rough prior used when a problem is untuned."""
        sms = 132
        if family in ("dw", "dwt", "dwr"):
            lanes = problem.G * problem.K * problem.C
            blocks = math.ceil(lanes / (params.threads_lane * params.vector)) * params.split_k
            score = {"dw": 2.0, "dwt": 3.0, "dwr": 3.5}[family] + (1.0 if params.threads_lane > 1 else 0.0) + math.log2(params.vector) * 0.3
        else:
            tiles = math.ceil(problem.K / params.block_m) * math.ceil(problem.C * problem.filter_volume / params.block_n)
            blocks = tiles * problem.G * params.split_k
            waste = (problem.K / (math.ceil(problem.K / params.block_m) * params.block_m))
            score = waste + math.log2(params.vector) * 0.2
        fill = min(blocks / (4 * sms), 1.0)
        oversub = 0.0 if blocks <= 64 * sms else 0.5
        return score + fill - oversub - (0.1 if getattr(params, "reduction", None) is Reduction.TWOSTAGE else 0.0)

    # --- PyTorch baseline (`kfactory bench`) ------------------------------------------------------
    def torch_baseline(self, problem: ConvProblem, inputs: Mapping[str, Any]) -> Any:
        """cuDNN's weight gradient (aten.convolution_backward, weight only) on the same values.

        Layouts PyTorch has run on views of our own buffers (NHWGC as channels_last, NGCHW contiguous);
        one it lacks (GNHWC) runs on an NHWGC copy, and the note says so. The caller sets cudnn flags.
        """
        import dataclasses

        import torch

        from ..problem import UnsupportedProblem
        from .base import TorchBaseline

        if problem.dtype is DType.INT8:
            raise UnsupportedProblem("PyTorch has no int8 convolution on the GPU")
        names = ("input", "grad_output", "grad_weight")
        native = all(self.framework_view(problem, n) is not None for n in names)
        torch_problem = problem if native else dataclasses.replace(problem, layout=Layout.NHWGC)
        note = "" if native else (
            f"PyTorch timed on an NHWGC copy ({problem.layout.name} has no PyTorch layout)"
        )
        tensor_dtype = inputs["input"].dtype
        device = inputs["input"].device

        def as_framework(physical: Any, ours: cl.PhysicalTensor, theirs: cl.PhysicalTensor, name: str) -> Any:
            """Our physical tensor re-laid in torch_problem's layout, viewed in PyTorch's conv shape."""
            if native:
                moved = physical
            else:
                logical = physical.permute([ours.dims.index(d) for d in ours.logical])
                moved = logical.permute([theirs.logical.index(d) for d in theirs.dims]).contiguous()
            shape, strides = self.framework_view(torch_problem, name)
            return moved.as_strided(shape, strides)

        x = as_framework(inputs["input"], cl.activation(problem, "C"), cl.activation(torch_problem, "C"), "input")
        dy = as_framework(inputs["grad_output"], cl.activation(problem, "K"), cl.activation(torch_problem, "K"),
                          "grad_output")
        wei = cl.weight(torch_problem)
        w = torch.zeros(wei.shape, dtype=tensor_dtype, device=device).as_strided(
            *self.framework_view(torch_problem, "grad_weight"))
        nd = problem.ndim
        last: dict[str, Any] = {}

        def run() -> None:
            last["dw"] = torch.ops.aten.convolution_backward(
                dy, x, w, None, list(problem.stride), list(problem.pad), list(problem.dilation),
                False, [0] * nd, problem.G, [False, True, False],
            )[1]

        def outputs() -> dict[str, Any]:
            ours = cl.weight(problem)
            logical = last["dw"].reshape(problem.G, problem.K, problem.C, *problem.filter)
            return {"grad_weight": logical.permute([ours.logical.index(d) for d in ours.dims]).contiguous()}

        return TorchBaseline(run, outputs, note)


def _cpp(scalar: Scalar) -> str:
    return {Scalar.F16: "f16_t", Scalar.BF16: "bf16_t", Scalar.F32: "float", Scalar.I8: "int8_t", Scalar.I32: "int"}[scalar]


def reference_logical(problem: ConvProblem, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dW[g,k,c,*f] = sum_{n,o} dy[n,g,k,o] * x[n,g,c, o*stride - pad + f*dilation], logical orders."""
    nd = problem.ndim
    pads = [(0, 0)] * 3 + [(p, p) for p in problem.pad]
    xp = np.pad(x, pads)
    out = problem.output
    dw = np.zeros(problem.weight_shape_logical, dtype=x.dtype)
    for tap in np.ndindex(*problem.filter):
        index = [slice(None)] * 3
        for d in range(nd):
            start = tap[d] * problem.dilation[d]
            index.append(slice(start, start + (out[d] - 1) * problem.stride[d] + 1, problem.stride[d]))
        window = xp[tuple(index)]  # N, G, C, *out
        spatial = "".join("dhw"[3 - nd + d] for d in range(nd))
        dw[(slice(None), slice(None), slice(None)) + tap] = np.einsum(
            f"ngk{spatial},ngc{spatial}->gkc", dy, window, optimize=True
        )
    return dw


SOLVER = ConvBwdWeight()
