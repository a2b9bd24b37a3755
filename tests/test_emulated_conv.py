"""conv_bwd_weight kernels run on the host (kernel_emulator) against the numpy reference, without a GPU.

A table of small problems, each naming a family, a split-K reduction and sometimes a shape of block
(lanes along groups, wide vectors), together reach every family, every reduction of it, the four
layouts, the five dtypes and the ranks each family supports, with odd sizes (C=3, 7x5, stride 2,
dilation 2, pad 0, N=1). The instance of a case is picked deterministically among those `lookup`
finds for its problem: a hash of the case's name indexes the sorted candidates, so the cases spread
over the catalog's tuning points rather than all taking the first. The libraries are compiled in
parallel before the first case runs. Further tests show that the checks can fail: a broken launch
plan, and kernels that misuse shared memory, barriers, shuffles or alignment.
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import kernel_emulator
from factory.catalog import Instance
from factory.ops.base import I32, Launch, Memset
from factory.ops.conv_bwd_weight import SOLVER, Reduction
from factory.problem import ConvProblem, DType, Layout

pytestmark = pytest.mark.skipif(not kernel_emulator.available(), reason="g++ is not on PATH")

L, D = Layout, DType
Pick = Callable[[Any], bool]


def wide(p: Any) -> bool:
    """Threads along adjacent groups (channels-last depthwise blocks) with vector loads."""
    return p.threads_lane > 1 and p.vector > 1


def one_lane(p: Any) -> bool:
    return p.threads_lane == 1


def vectorized(p: Any) -> bool:
    return p.vector > 1


@dataclass(frozen=True)
class Case:
    id: str
    family: str
    layout: Layout
    dtype: DType
    spec: str
    reduction: Reduction
    pick: Pick | None = None  # a property the picked tuning point must have

    @property
    def problem(self) -> ConvProblem:
        return SOLVER.parse_problem(self.spec, self.layout, self.dtype)


R = Reduction
CASES = [
    # dl: portable implicit GEMM, every layout, dtype and rank.
    Case("dl-nhwgc-fp16-2d-vec", "dl", L.NHWGC, D.FP16, "N=2,G=2,C=4,K=8,input=9x7,filter=3x3,pad=1", R.TWOSTAGE, vectorized),
    Case("dl-ngchw-bf16-2d-c3-s2-p0", "dl", L.NGCHW, D.BF16, "N=1,G=2,C=3,K=5,input=15x11,filter=3x3,stride=2,pad=0", R.DIRECT),
    Case("dl-gkyxc-fp32-3d", "dl", L.NGCHW_GKYXC, D.FP32, "N=2,G=1,C=3,K=4,input=5x6x7,filter=3x3x3,pad=1", R.ATOMIC),
    Case("dl-gnhwc-int8-1d-d2-vec", "dl", L.GNHWC, D.INT8, "N=2,G=3,C=8,K=4,input=75,filter=5,pad=2,dilation=2", R.ATOMIC, vectorized),
    Case("dl-nhwgc-bf16w-3d-s2", "dl", L.NHWGC, D.BF16_FP32W, "N=1,G=2,C=2,K=6,input=8x7x9,filter=2x3x3,stride=2x1x2,pad=0x1x1", R.TWOSTAGE),
    Case("dl-ngchw-fp16-1d", "dl", L.NGCHW, D.FP16, "N=3,G=2,C=5,K=3,input=50,filter=3,pad=1", R.ATOMIC),
    Case("dl-gnhwc-fp32-2d-c3-d2-n1", "dl", L.GNHWC, D.FP32, "N=1,G=3,C=3,K=3,input=9x8,filter=3x3,pad=2,dilation=2", R.DIRECT),
    Case("dl-ngchw-int8sat-2d-scale", "dl", L.NGCHW, D.INT8_SAT, "N=2,G=2,C=8,K=4,input=9x7,filter=3x3,pad=1,alpha=9", R.TWOSTAGE),
    # dw: few channels per group; lanes along groups (NHWGC) or threads along positions (any layout).
    Case("dw-nhwgc-fp16-2d-wide", "dw", L.NHWGC, D.FP16, "N=2,G=64,C=1,K=1,input=16x16,filter=3x3,pad=1", R.TWOSTAGE, wide),
    Case("dw-ngchw-bf16-2d-7x5", "dw", L.NGCHW, D.BF16, "N=1,G=2,C=2,K=3,input=7x5,filter=3x3,pad=1", R.DIRECT),
    Case("dw-gkyxc-int8-3d", "dw", L.NGCHW_GKYXC, D.INT8, "N=1,G=2,C=1,K=2,input=12x12x14,filter=3x3x3,pad=1", R.TWOSTAGE),
    Case("dw-gnhwc-fp32-1d-c2", "dw", L.GNHWC, D.FP32, "N=2,G=3,C=2,K=2,input=999,filter=5,pad=2", R.ATOMIC),
    Case("dw-nhwgc-bf16w-3d-n1", "dw", L.NHWGC, D.BF16_FP32W, "N=1,G=32,C=1,K=1,input=8x8x9,filter=3x3x3,pad=1", R.ATOMIC, wide),
    # dwt: depthwise, input windows staged in dynamic shared memory.
    Case("dwt-nhwgc-fp16-2d-wide", "dwt", L.NHWGC, D.FP16, "N=43,G=32,C=1,K=1,input=8x15,filter=3x3,pad=1", R.TWOSTAGE, wide),
    Case("dwt-ngchw-bf16-2d-s2-p0", "dwt", L.NGCHW, D.BF16, "N=2,G=3,C=1,K=1,input=37x23,filter=3x3,stride=2,pad=0", R.TWOSTAGE),
    Case("dwt-gkyxc-int8-1d-d2", "dwt", L.NGCHW_GKYXC, D.INT8, "N=2,G=2,C=1,K=1,input=1031,filter=7,pad=3,dilation=2", R.ATOMIC),
    Case("dwt-gnhwc-fp32-2d-5x5-n1", "dwt", L.GNHWC, D.FP32, "N=1,G=2,C=1,K=1,input=33x40,filter=5x5,pad=2", R.ATOMIC),
    Case("dwt-nhwgc-bf16w-1d-d2-wide", "dwt", L.NHWGC, D.BF16_FP32W, "N=128,G=32,C=1,K=1,input=70,filter=5,pad=4,dilation=2", R.ATOMIC, wide),
    # dwr: depthwise, filter/stride/dilation compiled in, register blocks.
    Case("dwr-nhwgc-fp16-2d-wide", "dwr", L.NHWGC, D.FP16, "N=50,G=32,C=1,K=1,input=7x11,filter=3x3,pad=1", R.TWOSTAGE, wide),
    Case("dwr-ngchw-fp32-2d-5x5-s2", "dwr", L.NGCHW, D.FP32, "N=2,G=2,C=1,K=1,input=39x79,filter=5x5,stride=2,pad=2", R.TWOSTAGE),
    Case("dwr-gkyxc-bf16-1d-f15", "dwr", L.NGCHW_GKYXC, D.BF16, "N=4,G=3,C=1,K=1,input=1540,filter=15,pad=7", R.ATOMIC),
    Case("dwr-gnhwc-int8-2d-d2", "dwr", L.GNHWC, D.INT8, "N=2,G=1,C=1,K=1,input=62x248,filter=3x3,pad=2,dilation=2", R.ATOMIC),
    Case("dwr-nhwgc-bf16w-1d-wide", "dwr", L.NHWGC, D.BF16_FP32W, "N=2,G=64,C=1,K=1,input=2024,filter=3,pad=1", R.ATOMIC, wide),
    # dwh: depthwise 2-D, a thread walks a strip of output rows with its input window in registers. Strips
    # that end inside the output, strides that carry rows over (1, 2 with dilation 2) and one that carries none
    # (stride 3 over a 2-row window), asymmetric padding, N=1.
    Case("dwh-nhwgc-fp16-wide", "dwh", L.NHWGC, D.FP16, "N=90,G=64,C=1,K=1,input=13x11,filter=3x3,pad=1", R.TWOSTAGE,
         lambda p: p.vector == 2 and p.rows == 8),
    Case("dwh-ngchw-fp32-5x5-s2", "dwh", L.NGCHW, D.FP32, "N=7,G=2,C=1,K=1,input=39x101,filter=5x5,stride=2,pad=2", R.ATOMIC),
    Case("dwh-gkyxc-bf16-s2-d2", "dwh", L.NGCHW_GKYXC, D.BF16, "N=24,G=3,C=1,K=1,input=21x67,filter=3x3,stride=2,pad=2,dilation=2",
         R.TWOSTAGE),
    Case("dwh-gnhwc-int8-2x2-s3", "dwh", L.GNHWC, D.INT8, "N=2,G=2,C=1,K=1,input=20x19,filter=2x2,stride=3,pad_left=1x0,pad_right=0x1",
         R.DIRECT),
    Case("dwh-nhwgc-bf16w-7x5-v2", "dwh", L.NHWGC, D.BF16_FP32W, "N=90,G=64,C=1,K=1,input=18x9,filter=7x5,pad=3x2", R.TWOSTAGE,
         lambda p: p.vector == 2 and p.segment == 8),
    Case("dwh-nhwgc-fp32-lanes-past-g", "dwh", L.NHWGC, D.FP32, "N=90,G=24,C=1,K=1,input=13x11,filter=3x3,stride=1,pad=1",
         R.ATOMIC, lambda p: p.vector == 1 and p.threads_lane == 32),
    # Loads one and two steps ahead: strips of odd and even step counts, a stride of 2 with dilation 2, 16
    # threads along groups.
    Case("dwh-nhwgc-fp16-ahead1", "dwh", L.NHWGC, D.FP16, "N=90,G=64,C=1,K=1,input=13x11,filter=3x3,pad=1", R.ATOMIC,
         lambda p: p.ahead == 1 and p.threads_lane == 16 and p.rows == 8),
    Case("dwh-ngchw-bf16-ahead2-s2-d2", "dwh", L.NGCHW, D.BF16, "N=3,G=2,C=1,K=1,input=37x29,filter=3x3,stride=2,pad=2,dilation=2",
         R.DIRECT, lambda p: p.ahead == 2 and p.rows == 16),
    Case("dwh-ngchw-fp16-stride-at-run-time", "dwh", L.NGCHW, D.FP16, "N=35,G=5,C=1,K=1,input=40x23,filter=3x3,pad=1", R.ATOMIC,
         lambda p: p.w_stride == 0),
    # dwl: channels-last depthwise, each tile's gradient and input window in shared memory. Blocks that walk
    # several tiles (items past the split), tiles past the plane, a chunk past G, strides 2 and 3 with
    # dilation, asymmetric padding, 1-D, 4-, 8- and 16-byte vectors, one and two windows in shared memory.
    Case("dwl-nhwgc-fp16-2d-walk", "dwl", L.NHWGC, D.FP16, "N=40,G=64,C=1,K=1,input=13x11,filter=3x3,pad=1", R.TWOSTAGE,
         lambda p: p.vector == 4 and p.cv == 16 and p.rows == 2 and p.across == 2 and p.split_k == 16 and p.stages == 2),
    Case("dwl-nhwgc-bf16-2d-s2-d2", "dwl", L.NHWGC, D.BF16, "N=70,G=40,C=1,K=1,input=21x19,filter=3x3,stride=2,pad=2x1,dilation=2x1",
         R.TWOSTAGE, lambda p: p.vector == 2 and p.split_k == 64 and p.stages == 1),
    Case("dwl-nhwgc-fp32-2d-s3-asym-chunk-past-g", "dwl", L.NHWGC, D.FP32,
         "N=40,G=24,C=1,K=1,input=30x31,filter=4x4,stride=3,pad_left=1,pad_right=2", R.TWOSTAGE,
         lambda p: p.vector == 4 and p.cv == 8 and p.split_k == 64 and p.stages == 1),
    Case("dwl-nhwgc-bf16w-1d-f15", "dwl", L.NHWGC, D.BF16_FP32W, "N=70,G=48,C=1,K=1,input=301,filter=15,pad=7", R.TWOSTAGE,
         lambda p: p.vector == 2 and p.split_k == 64 and p.stages == 2),
    Case("dwl-nhwgc-fp16-1d-s2-d2", "dwl", L.NHWGC, D.FP16, "N=70,G=32,C=1,K=1,input=200,filter=5,stride=2,pad=3,dilation=2",
         R.TWOSTAGE, lambda p: p.vector == 4 and p.split_k == 64),
    # dwv: channels-last 1-D depthwise, the input columns sliding through registers. Segments past the
    # output, a chunk past G (64 groups of 48), walks of several segments, a ring of 15 columns (period 15), stride 2 with
    # dilation 2 (a ring of 9 columns sliding 2 a step), 31 taps, stride 3 (seven columns sliding 3), 2- to
    # 4-byte vectors, the four dtypes.
    Case("dwv-nhwgc-bf16w-1d-f15", "dwv", L.NHWGC, D.BF16_FP32W, "N=70,G=48,C=1,K=1,input=301,filter=15,pad=7", R.TWOSTAGE,
         lambda p: p.vector == 2 and p.cv == 32 and p.seg == 128 and p.split_k == 16),
    Case("dwv-nhwgc-bf16-1d-f31", "dwv", L.NHWGC, D.BF16, "N=9,G=40,C=1,K=1,input=517,filter=31,pad=15", R.TWOSTAGE,
         lambda p: p.vector == 2 and p.seg == 32),
    Case("dwv-nhwgc-fp32-1d-s3", "dwv", L.NHWGC, D.FP32, "N=30,G=20,C=1,K=1,input=401,filter=7,stride=3,pad=2",
         R.TWOSTAGE, lambda p: p.vector == 1 and p.seg == 32),
    Case("dwv-nhwgc-fp16-1d-s2-d2", "dwv", L.NHWGC, D.FP16, "N=70,G=32,C=1,K=1,input=200,filter=5,stride=2,pad=3,dilation=2",
         R.TWOSTAGE, lambda p: p.vector == 1 and p.seg == 32),
    # gwl: grouped channels-last on matrix instructions, each tile's window and gradient in shared memory.
    # A walk over several tiles, a chunk past G, tiles past the plane, stride 2 with dilation, K not a
    # multiple of 16 (row tiles past K), column tiles split across warps (a set left short), fp32 steps of
    # 8 positions (atomics into the fp32 weight), 1-D, the four layouts (NGCHW ones through the transposing
    # pass), two and three stages.
    Case("gwl-nhwgc-fp16-2d-walk", "gwl", L.NHWGC, D.FP16, "N=6,G=5,C=16,K=16,input=13x21,filter=3x3,pad=1", R.TWOSTAGE,
         lambda p: p.groups == 2 and p.stages == 3 and p.split_k == 8),
    Case("gwl-gnhwc-bf16-2d-s2-d2-k24", "gwl", L.GNHWC, D.BF16,
         "N=5,G=3,C=8,K=24,input=21x35,filter=3x3,stride=2,pad=2x1,dilation=2", R.TWOSTAGE,
         lambda p: p.tiles == 6 and p.stages == 2 and p.rows >= 2),
    Case("gwl-nhwgc-fp32-2d-asym-k8", "gwl", L.NHWGC, D.FP32,
         "N=4,G=2,C=24,K=8,input=15x33,filter=4x3,stride=1x2,pad_left=1,pad_right=2", R.ATOMIC,
         lambda p: p.tiles == 4 and p.stages == 2),
    Case("gwl-nhwgc-bf16w-1d-f7", "gwl", L.NHWGC, D.BF16_FP32W, "N=5,G=4,C=32,K=16,input=301,filter=7,pad=3", R.TWOSTAGE,
         lambda p: p.tiles == 9 and p.stages == 2),
    Case("gwl-gnhwc-fp16-1d-s2-d2", "gwl", L.GNHWC, D.FP16, "N=3,G=2,C=8,K=8,input=200,filter=5,stride=2,pad=3,dilation=2",
         R.TWOSTAGE, lambda p: p.groups == 2 and p.split_k == 8),
    Case("gwl-ngchw-fp16-2d-transposed", "gwl", L.NGCHW, D.FP16, "N=3,G=3,C=8,K=16,input=13x11,filter=3x3,pad=1",
         R.TWOSTAGE, lambda p: p.groups == 2),
    Case("gwl-gkyxc-bf16w-1d-transposed", "gwl", L.NGCHW_GKYXC, D.BF16_FP32W, "N=4,G=2,C=16,K=8,input=150,filter=7,pad=3",
         R.ATOMIC),
    # Whole 16-byte vectors on both extents: the pass transposes squares in registers, tiles past both ends.
    Case("gwl-ngchw-fp16-2d-transposed-squares", "gwl", L.NGCHW, D.FP16, "N=3,G=5,C=16,K=16,input=16x20,filter=3x3,pad=1",
         R.TWOSTAGE),
    Case("gwl-ngchw-fp32-2d-transposed-squares", "gwl", L.NGCHW, D.FP32, "N=2,G=3,C=8,K=8,input=12x10,filter=3x3,pad=1",
         R.ATOMIC),
    # mma: the implicit-GEMM engine on matrix instructions (the portable lane layout here), 16-bit operands.
    Case("mma-nhwgc-fp16-2d", "mma", L.NHWGC, D.FP16, "N=2,G=2,C=8,K=16,input=17x15,filter=3x3,pad=1", R.TWOSTAGE),
    Case("mma-ngchw-bf16-2d-s2-p0", "mma", L.NGCHW, D.BF16, "N=3,G=2,C=3,K=5,input=20x18,filter=3x3,stride=2,pad=0", R.DIRECT),
    Case("mma-gkyxc-bf16w-3d", "mma", L.NGCHW_GKYXC, D.BF16_FP32W, "N=2,G=1,C=3,K=4,input=5x6x8,filter=3x3x3,pad=1", R.ATOMIC),
    Case("mma-gnhwc-fp16-1d-d2", "mma", L.GNHWC, D.FP16, "N=2,G=3,C=8,K=8,input=300,filter=5,pad=4,dilation=2", R.ATOMIC),
    Case("mma-nhwgc-bf16-3d-c3", "mma", L.NHWGC, D.BF16, "N=1,G=2,C=3,K=5,input=8x8x9,filter=3x3x3,pad=1", R.ATOMIC),
    Case("mma-ngchw-fp16-1x1-rows", "mma", L.NGCHW, D.FP16, "N=2,G=1,C=16,K=8,input=16x16,filter=1x1", R.TWOSTAGE,
         lambda p: p.vector_b > 1),
    Case("mma-nhwgc-fp16-2d-i64", "mma", L.NHWGC, D.FP16, "N=2,G=1,C=8,K=8,input=16x16,filter=3x3,pad=1", R.DIRECT,
         lambda p: p.index_bits == 64),
    Case("mma-ngchw-fp32-2d-s2", "mma", L.NGCHW, D.FP32, "N=3,G=2,C=3,K=5,input=20x18,filter=3x3,stride=2,pad=1", R.ATOMIC),
    Case("mma-gnhwc-fp32-3d", "mma", L.GNHWC, D.FP32, "N=2,G=2,C=4,K=12,input=5x6x8,filter=3x1x3,pad=1x0x1", R.TWOSTAGE,
         lambda p: p.vector_a == 4),
    Case("mma-nhwgc-bf16w-2d-n1-s2-d2", "mma", L.NHWGC, D.BF16_FP32W,
         "N=1,G=1,C=16,K=24,input=23x19,filter=3x3,stride=2,pad=2,dilation=2", R.DIRECT),
    Case("mma-nhwgc-int8-2d-k24", "mma", L.NHWGC, D.INT8, "N=2,G=2,C=8,K=24,input=17x15,filter=3x3,pad=1", R.TWOSTAGE),
    Case("mma-ngchw-int8-1d-s2", "mma", L.NGCHW, D.INT8, "N=3,G=2,C=3,K=5,input=81,filter=3,stride=2,pad=1", R.ATOMIC),
    Case("mma-gnhwc-int8-3d-v16", "mma", L.GNHWC, D.INT8, "N=2,G=1,C=16,K=32,input=5x6x7,filter=3x3x3,pad=1", R.DIRECT,
         lambda p: p.vector_a == 16),
    Case("mma-gnhwc-int8sat-2d-scale", "mma", L.GNHWC, D.INT8_SAT, "N=2,G=2,C=16,K=32,input=19x15,filter=3x3,pad=1,alpha=7", R.ATOMIC),
    Case("mma-nhwgc-fp8-2d", "mma", L.NHWGC, D.FP16_COMP_BF8_FP8, "N=2,G=2,C=8,K=24,input=17x15,filter=3x3,pad=1", R.TWOSTAGE),
    Case("mma-ngchw-fp8-1d-n1", "mma", L.NGCHW, D.FP16_COMP_BF8_FP8, "N=1,G=1,C=5,K=7,input=130,filter=5,pad=2", R.DIRECT),
    Case("mma-gkyxc-fp8-3d", "mma", L.NGCHW_GKYXC, D.FP16_COMP_BF8_FP8, "N=2,G=1,C=3,K=4,input=5x6x8,filter=3x3x3,pad=1", R.ATOMIC),
    Case("mma-gnhwc-fp8-2d-d2", "mma", L.GNHWC, D.FP16_COMP_BF8_FP8, "N=2,G=3,C=8,K=8,input=19x9,filter=3x3,pad=2,dilation=2", R.ATOMIC),
    Case("mma-ngchw-fp16-2d-transposed", "mma", L.NGCHW, D.FP16, "N=3,G=2,C=8,K=16,input=33x31,filter=3x3,stride=2,pad=1", R.TWOSTAGE,
         lambda p: p.transpose),
    Case("mma-gkyxc-fp32-3d-transposed", "mma", L.NGCHW_GKYXC, D.FP32, "N=2,G=1,C=8,K=12,input=5x6x7,filter=3x3x3,pad=1", R.ATOMIC,
         lambda p: p.transpose),
    Case("mma-gkyxc-fp32-3d-transposed-squares", "mma", L.NGCHW_GKYXC, D.FP32, "N=2,G=1,C=8,K=12,input=4x6x6,filter=3x3x3,pad=1",
         R.ATOMIC, lambda p: p.transpose),
    Case("mma-nhwgc-bf16-2d-groups-per-tile", "mma", L.NHWGC, D.BF16, "N=2,G=5,C=8,K=16,input=13x11,filter=3x3,pad=1", R.TWOSTAGE,
         lambda p: p.groups_per_tile == 4),
    Case("mma-gnhwc-fp32-1d-groups-per-tile", "mma", L.GNHWC, D.FP32, "N=8,G=3,C=4,K=8,input=130,filter=5,pad=2,stride=2", R.ATOMIC,
         lambda p: p.groups_per_tile == 2),
    # 1x1 layers channels-last (dense, strided, dilated), and a wgmma and an mfma one.
    Case("mma-nhwgc-fp16-1x1", "mma", L.NHWGC, D.FP16, "N=3,G=2,C=8,K=24,input=17x15,filter=1x1", R.TWOSTAGE),
    Case("mma-gnhwc-bf16-3d-1x1", "mma", L.GNHWC, D.BF16, "N=2,G=2,C=16,K=8,input=5x6x7,filter=1x1x1", R.ATOMIC),
    Case("mma-nhwgc-fp32-1x1-s2", "mma", L.NHWGC, D.FP32, "N=2,G=1,C=8,K=8,input=17x15,filter=1x1,stride=2", R.DIRECT),
    Case("mma-gnhwc-bf16-1d-1x1-d2", "mma", L.GNHWC, D.BF16, "N=2,G=3,C=8,K=8,input=37,filter=1,dilation=2", R.DIRECT),
    # wgmma: the same engine with warpgroup tiles in swizzled shared memory (the portable product here).
    Case("wgmma-nhwgc-fp16-1x1", "wgmma", L.NHWGC, D.FP16, "N=5,G=1,C=64,K=72,input=9x11,filter=1x1", R.TWOSTAGE),
    Case("wgmma-nhwgc-fp16-2d", "wgmma", L.NHWGC, D.FP16, "N=2,G=2,C=8,K=16,input=17x15,filter=3x3,pad=1", R.TWOSTAGE),
    Case("wgmma-gnhwc-bf16-1d-d2", "wgmma", L.GNHWC, D.BF16, "N=2,G=3,C=8,K=8,input=300,filter=5,pad=4,dilation=2", R.ATOMIC),
    Case("wgmma-nhwgc-bf16w-3d-c3", "wgmma", L.NHWGC, D.BF16_FP32W, "N=1,G=2,C=3,K=5,input=8x8x9,filter=3x3x3,pad=1", R.ATOMIC),
    Case("wgmma-nhwgc-fp16-2d-sliced", "wgmma", L.NHWGC, D.FP16, "N=3,G=1,C=24,K=40,input=13x11,filter=3x3,pad=1", R.TWOSTAGE,
         lambda p: p.slices == 4),
    Case("wgmma-gnhwc-bf16-3d-sliced-direct", "wgmma", L.GNHWC, D.BF16, "N=2,G=2,C=8,K=16,input=5x6x7,filter=3x3x3,pad=1", R.DIRECT,
         lambda p: p.slices > 1),
    Case("wgmma-nhwgc-fp16-2d-k72-s2-d2", "wgmma", L.NHWGC, D.FP16,
         "N=1,G=1,C=16,K=72,input=23x19,filter=3x3,stride=2,pad=2,dilation=2", R.DIRECT, lambda p: p.block_m == 128),
    Case("wgmma-ngchw-bf16-2d-transposed", "wgmma", L.NGCHW, D.BF16, "N=2,G=2,C=8,K=16,input=17x15,filter=3x3,pad=1", R.ATOMIC,
         lambda p: p.transpose),
    Case("wgmma-gkyxc-fp16-1d-transposed", "wgmma", L.NGCHW_GKYXC, D.FP16, "N=3,G=1,C=16,K=24,input=130,filter=5,pad=2", R.TWOSTAGE,
         lambda p: p.transpose),
    Case("wgmma-nhwgc-fp16-2d-groups-per-tile", "wgmma", L.NHWGC, D.FP16, "N=2,G=7,C=8,K=24,input=17x15,filter=3x3,pad=1", R.ATOMIC,
         lambda p: p.groups_per_tile == 2),
    Case("wgmma-gnhwc-bf16w-3d-groups-per-tile", "wgmma", L.GNHWC, D.BF16_FP32W, "N=2,G=6,C=8,K=16,input=5x6x7,filter=3x3x3,pad=1", R.TWOSTAGE,
         lambda p: p.groups_per_tile == 4),
    Case("wgmma-ngchw-bf16-2d-s2-transposed-two-warpgroups", "wgmma", L.NGCHW, D.BF16,
         "N=2,G=1,C=16,K=136,input=9x7,filter=3x3,stride=2,pad=1", R.TWOSTAGE,
         lambda p: p.transpose and p.groups_m == 2 and p.slices == 2 and p.split_k == 2),
    Case("wgmma-ngchw-fp16-2d-transposed-groups-per-tile", "wgmma", L.NGCHW, D.FP16, "N=2,G=5,C=8,K=16,input=17x15,filter=3x3,pad=1",
         R.TWOSTAGE, lambda p: p.transpose and p.groups_per_tile == 4),
    # pw: pointwise layers' rows streamed into wgmma tiles. Reduction rows that end inside a stage and a
    # split, channels past a tile's edge, several groups, two warpgroups, element-sized chunks.
    Case("pw-nhwgc-fp16-2d", "pw", L.NHWGC, D.FP16, "N=5,G=2,C=24,K=40,input=9x11,filter=1x1", R.TWOSTAGE,
         lambda p: p.block_m == 64 and p.vector_a == 8),
    Case("pw-gnhwc-bf16-1d-direct", "pw", L.GNHWC, D.BF16, "N=3,G=3,C=16,K=72,input=37,filter=1", R.DIRECT,
         lambda p: p.block_m == 128),
    Case("pw-nhwgc-bf16w-3d-atomic", "pw", L.NHWGC, D.BF16_FP32W, "N=2,G=1,C=136,K=8,input=4x8x33,filter=1x1x1",
         R.ATOMIC),
    Case("pw-nhwgc-fp16-odd-channels", "pw", L.NHWGC, D.FP16, "N=2,G=2,C=6,K=10,input=47x45,filter=1x1", R.TWOSTAGE,
         lambda p: p.vector_a == 2 and p.vector_b == 2),
    Case("pw-gnhwc-bf16-odd-weight", "pw", L.GNHWC, D.BF16, "N=3,G=2,C=5,K=7,input=40x41,filter=1x1", R.TWOSTAGE),
    # pw on NGCHW: runs of positions, both operands K-major. A sample's last stage cut short, splits that
    # start inside a sample, channels past a tile's edge, 2-element and element-wise chunks (odd runs).
    Case("pw-ngchw-fp16-2d", "pw", L.NGCHW, D.FP16, "N=5,G=2,C=24,K=40,input=9x12,filter=1x1", R.TWOSTAGE,
         lambda p: p.vector_a == 4 and p.split_k == 4),
    Case("pw-gkyxc-bf16-1d-atomic", "pw", L.NGCHW_GKYXC, D.BF16, "N=3,G=1,C=72,K=136,input=1000,filter=1", R.ATOMIC,
         lambda p: p.vector_a == 8),
    Case("pw-ngchw-bf16w-3d-direct", "pw", L.NGCHW, D.BF16_FP32W, "N=2,G=3,C=5,K=7,input=3x5x6,filter=1x1x1", R.DIRECT,
         lambda p: p.vector_a == 2),
    Case("pw-ngchw-bf16-2d-odd-run", "pw", L.NGCHW, D.BF16, "N=3,G=1,C=9,K=70,input=7x7,filter=1x1", R.DIRECT),
    Case("pw-ngchw-fp16-1d-wide", "pw", L.NGCHW, D.FP16, "N=2,G=1,C=136,K=72,input=200,filter=1", R.DIRECT,
         lambda p: p.block_m == 128 and p.block_n == 128 and p.vector_a == 8 and not p.transpose),
    # A weight of 131,072 elements: the finishing kernel sums four outputs a thread, by rows of threads over 8
    # splits and by whole threads over 2.
    Case("pw-nhwgc-bf16-wide-weight-rows", "pw", L.NHWGC, D.BF16, "N=1,G=1,C=512,K=256,input=24x24,filter=1x1",
         R.TWOSTAGE, lambda p: p.split_k == 8 and p.block_n == 128 and not p.transpose),
    Case("pw-nhwgc-bf16-wide-weight-threads", "pw", L.NHWGC, D.BF16, "N=1,G=1,C=512,K=256,input=24x24,filter=1x1",
         R.TWOSTAGE, lambda p: p.split_k == 2 and not p.transpose),
    # pw on NGCHW through channels-last copies: planes of 49 and 45 positions (the pass reads a block's planes
    # as one run), and of 75 (over a tile: rows element by element).
    Case("pw-ngchw-bf16-2d-transposed", "pw", L.NGCHW, D.BF16, "N=3,G=2,C=16,K=24,input=7x7,filter=1x1", R.TWOSTAGE,
         lambda p: p.transpose),
    Case("pw-gkyxc-fp16-3d-transposed", "pw", L.NGCHW_GKYXC, D.FP16, "N=2,G=1,C=72,K=136,input=3x3x5,filter=1x1x1",
         R.DIRECT, lambda p: p.transpose and p.block_m == 128),
    Case("pw-ngchw-fp16-1d-transposed-long-plane", "pw", L.NGCHW, D.FP16, "N=2,G=1,C=8,K=16,input=75,filter=1",
         R.TWOSTAGE, lambda p: p.transpose),
    # pw with bulk tensor copies: channels past a box's 64 columns and rows past the tensor's end arrive as
    # zeros; a ring of stages refilled several times over (25 stages through 4 slots); groups as the map's
    # third dimension; two warpgroups by four column slabs; the transposing pass's copies as the tensors.
    Case("pw-nhwgc-fp16-2d-tma", "pw", L.NHWGC, D.FP16, "N=5,G=2,C=24,K=40,input=9x11,filter=1x1", R.TWOSTAGE,
         lambda p: p.tma and p.split_k == 2 and p.block_n == 64),
    Case("pw-nhwgc-bf16-2d-tma-ring", "pw", L.NHWGC, D.BF16, "N=4,G=1,C=8,K=16,input=20x20,filter=1x1", R.DIRECT,
         lambda p: p.tma and p.split_k == 1 and p.stages == 4 and p.block_m == 64),
    Case("pw-gnhwc-bf16w-3d-tma-wide", "pw", L.GNHWC, D.BF16_FP32W, "N=2,G=3,C=136,K=72,input=3x5x7,filter=1x1x1",
         R.TWOSTAGE, lambda p: p.tma and p.block_m == 128 and p.block_n == 256 and p.split_k == 4),
    Case("pw-ngchw-fp16-2d-tma-transposed", "pw", L.NGCHW, D.FP16, "N=3,G=2,C=16,K=24,input=7x7,filter=1x1",
         R.TWOSTAGE, lambda p: p.tma and p.transpose),
    # mfma: the same engine with AMD's 64-lane MFMA layout (fragments exchanged as the instruction does).
    Case("mfma-nhwgc-fp16-2d", "mfma", L.NHWGC, D.FP16, "N=2,G=2,C=8,K=16,input=17x15,filter=3x3,pad=1", R.TWOSTAGE),
    Case("mfma-ngchw-bf16-2d-s2-p0", "mfma", L.NGCHW, D.BF16, "N=3,G=2,C=3,K=5,input=20x18,filter=3x3,stride=2,pad=0", R.DIRECT),
    Case("mfma-gkyxc-bf16w-3d", "mfma", L.NGCHW_GKYXC, D.BF16_FP32W, "N=2,G=1,C=3,K=4,input=5x6x8,filter=3x3x3,pad=1", R.ATOMIC),
    Case("mfma-gnhwc-fp32-1d-d2", "mfma", L.GNHWC, D.FP32, "N=2,G=3,C=8,K=8,input=300,filter=5,pad=4,dilation=2", R.ATOMIC),
    Case("mfma-nhwgc-fp32-3d-c3", "mfma", L.NHWGC, D.FP32, "N=1,G=2,C=3,K=5,input=8x8x9,filter=3x3x3,pad=1", R.DIRECT),
    Case("mfma-nhwgc-fp16-1x1", "mfma", L.NHWGC, D.FP16, "N=3,G=2,C=8,K=24,input=17x15,filter=1x1", R.ATOMIC),
    Case("mfma-nhwgc-bf16-2d-k40-wide", "mfma", L.NHWGC, D.BF16, "N=3,G=1,C=24,K=40,input=13x11,filter=3x3,pad=1", R.ATOMIC,
         lambda p: p.block_m == 128 and p.vector_b == 8),
]

def pick_instance(case: Case) -> Instance:
    """The case's instance: among lookup's candidates of its family, reduction and property, the one a
    hash of the case name indexes (stable across runs and machines)."""
    return kernel_emulator.pick_in_family(case, "mfma", accept=lambda params: params.reduction is case.reduction)


@pytest.fixture(scope="module")
def picked() -> dict[str, Instance]:
    """Every case's instance, their libraries compiled in parallel up front."""
    return kernel_emulator.pick_and_prebuild(CASES, pick_instance)


def test_cases_reach_every_family_reduction_layout_dtype_and_rank(picked: dict[str, Instance]) -> None:
    """The table is the coverage claim; this keeps it true when cases or catalogs change."""
    seen = {(case.family, picked[case.id].params.reduction) for case in CASES}
    families = SOLVER.families
    for family in families:
        for reduction in Reduction:
            if reduction is Reduction.COOP:  # a cooperative launch, which the emulator cannot run (one block at
                continue  # a time): tests/test_gpu_pointwise.py and test_gpu_coop_grid_finish.py run every coop point on the GPU
            exists = any(i.family == family and i.params.reduction is reduction for i in _catalog())
            assert not exists or (family, reduction) in seen, f"no case runs {family} with {reduction.value}"
        cells = {(picked[c.id].layout, picked[c.id].dtype, picked[c.id].ndim) for c in CASES if c.family == family}
        supported = SOLVER.supported_cells(family)
        assert {l for l, _, _ in cells} == {l for l, _, _ in supported}, family
        assert {d for _, d, _ in cells} == {d for _, d, _ in supported}, family
        assert {n for _, _, n in cells} == {n for _, _, n in supported}, family
    # Dynamic shared memory, lanes along groups with vector loads, and both reductions' extra passes ran.
    assert any(_has_dynamic_shared(picked[c.id], c.problem) for c in CASES)
    assert sum(1 for c in CASES if c.pick is wide) >= 4


def _catalog() -> list[Instance]:
    from factory.catalog import select_instances

    return select_instances(SOLVER.op)


def _has_dynamic_shared(inst: Instance, problem: ConvProblem) -> bool:
    plan = SOLVER.launch_plan(inst.family, inst.params, problem)
    return any(isinstance(s, Launch) and s.shared_bytes > 0 for s in plan.steps)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_emulated_conv_matches_reference(case: Case, picked: dict[str, Instance]) -> None:
    kernel_emulator.assert_case_matches_reference(case, picked[case.id])


# --- the checks can fail: broken launch plans --------------------------------------------------------------
def _case(case_id: str) -> Case:
    return next(c for c in CASES if c.id == case_id)


def _fewer_finalize_splits(plan: Any) -> Any:
    """The second stage sums one split fewer than the main kernel wrote."""
    def change(step: Any) -> Any:
        if isinstance(step, Launch) and step.entry == "kf_finalize":
            split_args, _epilogue = step.args  # kf_splitk_args, kf_epilogue
            splits = split_args["splits"].value
            assert splits > 1
            return dataclasses.replace(step, args=(split_args.replace(splits=I32(splits - 1)), _epilogue))
        return step
    return dataclasses.replace(plan, steps=tuple(change(s) for s in plan.steps))


def _no_memset(plan: Any) -> Any:
    """Atomics accumulate onto whatever the accumulator held (the poison) instead of zeros."""
    assert any(isinstance(s, Memset) for s in plan.steps)
    return dataclasses.replace(plan, steps=tuple(s for s in plan.steps if not isinstance(s, Memset)))


def _half_the_splits(plan: Any) -> Any:
    """The implicit GEMM's grid lacks the second half of its reduction splits (grid z). (Not just the
    last: rounding each split's range up to whole block_k chunks can leave the last one empty.)"""
    def change(step: Any) -> Any:
        if isinstance(step, Launch) and step.entry == "kf_main":
            gx, gy, gz = step.grid
            assert gz > 1
            return dataclasses.replace(step, grid=(gx, gy, gz // 2))
        return step
    return dataclasses.replace(plan, steps=tuple(change(s) for s in plan.steps))


def _half_shared(plan: Any) -> Any:
    """The tile kernel gets half the dynamic shared memory its input windows need."""
    def change(step: Any) -> Any:
        if isinstance(step, Launch) and step.shared_bytes:
            return dataclasses.replace(step, shared_bytes=step.shared_bytes // 2)
        return step
    return dataclasses.replace(plan, steps=tuple(change(s) for s in plan.steps))


BROKEN = [
    ("dl-nhwgc-fp16-2d-vec", _fewer_finalize_splits, "grad_weight"),
    ("dl-gnhwc-int8-1d-d2-vec", _no_memset, "integers differ"),
    ("dw-gnhwc-fp32-1d-c2", _no_memset, "not finite"),
    ("dl-gkyxc-fp32-3d", _half_the_splits, "grad_weight"),
    ("dwt-ngchw-bf16-2d-s2-p0", _half_shared, "dynamic shared memory overrun"),
]


@pytest.mark.parametrize("case_id, breakage, says", BROKEN, ids=lambda v: getattr(v, "__name__", v))
def test_emulator_catches_a_broken_launch_plan(case_id: str, breakage: Callable[[Any], Any], says: str,
                                               picked: dict[str, Instance], monkeypatch: pytest.MonkeyPatch) -> None:
    """The same instance and problem that pass above fail once their launch plan is wrong."""
    case = _case(case_id)
    inst = picked[case_id]
    assert kernel_emulator.check_instance(inst, case.problem).ok
    right = kernel_emulator._plan
    monkeypatch.setattr(kernel_emulator, "_plan", lambda i, p: breakage(right(i, p)))
    verdict = kernel_emulator.check_instance(inst, case.problem)
    assert not verdict.ok and says in verdict.message, verdict.message


# --- the emulator behaves as a GPU would for these constructs -----------------------------------------------
PROBES = r"""
#include "prelude.h"
// Each thread publishes its index in shared memory and reads its neighbour's, with or without a barrier.
extern "C" __global__ void neighbour(int* out, int sync) {
  __shared__ int s[64];
  const int t = threadIdx.x;
  s[t] = t;
  if (sync) __syncthreads();
  out[blockIdx.x * 64 + t] = s[(t + 1) % 64];
}
// Reads a shared array no thread wrote.
extern "C" __global__ void unwritten(int* out) {
  __shared__ int s[64];
  out[threadIdx.x] = s[threadIdx.x];
}
// Warp sums of the lane index with shuffles: every lane of warp w gets sum(32w .. 32w+31).
extern "C" __global__ void warp_sums(int* out) {
  out[threadIdx.x] = kf_warp_sum((int)threadIdx.x);
}
// Half the warp shuffles while the other half waits at a block barrier: hangs on a GPU.
extern "C" __global__ void divergent(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = kf_shfl_xor((int)threadIdx.x, 1);
  __syncthreads();
}
// A 16-byte vector load `offset` floats past a 256-byte aligned pointer.
extern "C" __global__ void vector_load(const float* in, float* out, int offset) {
  const kf_vec<float, 4> v = *reinterpret_cast<const kf_vec<float, 4>*>(in + offset);
  out[threadIdx.x] = v.v[threadIdx.x % 4];
}
// Every thread of every block adds 1 to one float and one int accumulator.
extern "C" __global__ void count(float* f, int* i) {
  atomicAdd(f, 1.0f);
  atomicAdd(i, 1);
}
// Fills `n` bytes of dynamic shared memory, then sums them back.
extern "C" __global__ void fill_dynamic(int* out, int n) {
  extern __shared__ unsigned char dyn[];
  for (int e = threadIdx.x; e < n; e += blockDim.x) dyn[e] = 1;
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0;
    for (int e = 0; e < n; ++e) s += dyn[e];
    out[blockIdx.x] = s;
  }
}
"""
PROBE_ENTRIES = ["neighbour", "unwritten", "warp_sums", "divergent", "vector_load", "count", "fill_dynamic"]


@pytest.fixture(scope="module")
def probes() -> ctypes.CDLL:
    from factory.resources import templates_dir

    prelude = (templates_dir() / "common" / "prelude.h").read_text()
    source = PROBES.replace('#include "prelude.h"', prelude)
    return ctypes.CDLL(str(kernel_emulator.compile_source(source, PROBE_ENTRIES, "emulator probes")))


def _launch(lib: ctypes.CDLL, entry: str, grid: int, block: int, args: tuple, shared: int = 0,
            **buffers: np.ndarray) -> None:
    plan = kernel_emulator.LaunchPlan((Launch(entry, (grid, 1, 1), (block, 1, 1), args, shared),))
    kernel_emulator.run_plan(lib, plan, buffers)


def _device(memory: kernel_emulator.DeviceMemory, name: str, count: int, dtype: Any) -> np.ndarray:
    return memory.alloc(name, count * np.dtype(dtype).itemsize, 0).view(dtype)


def test_barriers_order_shared_memory_and_a_missing_one_is_seen(probes: ctypes.CDLL) -> None:
    """With the barrier every thread reads its neighbour's index; without it, in both scheduling
    orders (even and odd blocks), some thread reads a slot not yet written (the 0xFF poison)."""
    from factory.ops.base import Buf, I32

    memory = kernel_emulator.DeviceMemory.empty()
    out = _device(memory, "out", 128, np.int32)
    want = np.tile((np.arange(64) + 1) % 64, 2)
    _launch(probes, "neighbour", 2, 64, (Buf("out"), I32(1)), out=out)
    assert np.array_equal(out, want)
    _launch(probes, "neighbour", 2, 64, (Buf("out"), I32(0)), out=out)
    for block in (0, 1):
        assert np.any(out[block * 64 : block * 64 + 64] == -1), f"block {block} raced unseen"


def test_shared_memory_starts_poisoned_in_every_block(probes: ctypes.CDLL) -> None:
    from factory.ops.base import Buf

    memory = kernel_emulator.DeviceMemory.empty()
    out = _device(memory, "out", 64, np.int32)
    for _ in range(2):  # the first launch and a later one (static storage would keep old values)
        _launch(probes, "unwritten", 3, 64, (Buf("out"),), out=out)
        assert np.all(out == -1)


def test_warp_shuffles_sum_within_each_warp(probes: ctypes.CDLL) -> None:
    from factory.ops.base import Buf

    memory = kernel_emulator.DeviceMemory.empty()
    out = _device(memory, "out", 64, np.int32)
    _launch(probes, "warp_sums", 1, 64, (Buf("out"),), out=out)
    assert np.array_equal(out, np.repeat([sum(range(32)), sum(range(32, 64))], 32))


def test_a_divergent_shuffle_is_a_deadlock(probes: ctypes.CDLL) -> None:
    from factory.ops.base import Buf

    memory = kernel_emulator.DeviceMemory.empty()
    out = _device(memory, "out", 32, np.int32)
    with pytest.raises(kernel_emulator.KernelFault, match="deadlock.*16 threads wait at __syncthreads, 16 at a warp"):
        _launch(probes, "divergent", 1, 32, (Buf("out"),), out=out)


def test_a_misaligned_vector_load_faults(probes: ctypes.CDLL) -> None:
    from factory.ops.base import Buf, I32

    memory = kernel_emulator.DeviceMemory.empty()
    src = _device(memory, "src", 16, np.float32)
    src[:] = np.arange(16)
    out = _device(memory, "out", 4, np.float32)
    _launch(probes, "vector_load", 1, 4, (Buf("src"), Buf("out"), I32(4)), src=src, out=out)
    assert np.array_equal(out, [4, 5, 6, 7])
    with pytest.raises(kernel_emulator.KernelFault, match="misaligned access.*16-byte alignment"):
        _launch(probes, "vector_load", 1, 4, (Buf("src"), Buf("out"), I32(2)), src=src, out=out)


def test_atomics_on_float_and_int_count_every_thread(probes: ctypes.CDLL) -> None:
    from factory.ops.base import Buf

    memory = kernel_emulator.DeviceMemory.empty()
    f = _device(memory, "f", 1, np.float32)
    i = _device(memory, "i", 1, np.int32)
    _launch(probes, "count", 5, 96, (Buf("f"), Buf("i")), f=f, i=i)
    assert (f[0], i[0]) == (480.0, 480)


def test_dynamic_shared_memory_is_the_launch_size_and_guarded(probes: ctypes.CDLL) -> None:
    from factory.ops.base import Buf, I32

    memory = kernel_emulator.DeviceMemory.empty()
    out = _device(memory, "out", 3, np.int32)
    _launch(probes, "fill_dynamic", 3, 64, (Buf("out"), I32(1000)), shared=1000, out=out)
    assert np.array_equal(out, [1000] * 3)
    with pytest.raises(kernel_emulator.KernelFault, match="dynamic shared memory overrun.*byte 1000"):
        _launch(probes, "fill_dynamic", 3, 64, (Buf("out"), I32(1001)), shared=1000, out=out)


def test_writes_outside_a_buffer_are_seen() -> None:
    memory = kernel_emulator.DeviceMemory.empty()
    inner = memory.alloc("out", 100, 0)
    assert inner.ctypes.data % kernel_emulator.ALIGN == 0 and memory.clobbered() == []
    memory.raw["out"][kernel_emulator.GUARD + 100] = 0  # one byte past the end
    assert memory.clobbered() == ["out"]
