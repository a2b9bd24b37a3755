"""conv_bwd_data kernels run on the host (kernel_emulator) against the numpy reference, without a GPU.

The cases reach every family (mfma picked for gfx90a), the four layouts, the dtypes and the three ranks, with odd sizes,
strides 2 and 3 (stride phases with several, one or no taps), dilation, pad 0, asymmetric padding, N=1
and depthwise vectors along groups. The instance of a case is picked by a hash of its name among those
`lookup` finds, so the cases spread over the catalog. Two broken launch plans show the checks can fail.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import pytest

import kernel_emulator
from factory.catalog import Instance
from factory.ops.base import Launch
from factory.ops.conv_bwd_data import SOLVER
from factory.problem import ConvProblem, DType, Layout

pytestmark = pytest.mark.skipif(not kernel_emulator.available(), reason="g++ is not on PATH")

L, D = Layout, DType


@dataclass(frozen=True)
class Case:
    id: str
    family: str
    layout: Layout
    dtype: DType
    spec: str
    pick: Callable[[Any], bool] | None = None

    @property
    def problem(self) -> ConvProblem:
        return SOLVER.parse_problem(self.spec, self.layout, self.dtype)


CASES = [
    Case("direct-nhwgc-fp16-2d-groups", "direct", L.NHWGC, D.FP16, "N=2,G=16,C=1,K=1,input=9x7,filter=3x3,pad=1",
         lambda p: p.vector == 8),
    Case("direct-ngchw-fp32-2d-s2", "direct", L.NGCHW, D.FP32, "N=2,G=2,C=3,K=5,input=9x7,filter=3x3,stride=2,pad=1"),
    Case("direct-gnhwc-int8-3d", "direct", L.GNHWC, D.INT8, "N=1,G=2,C=4,K=3,input=5x6x7,filter=3x2x3,stride=2x1x2,pad=1,dilation=1x2x1",
         lambda p: p.vector == 4),
    Case("direct-gkyxc-bf16-1d-any", "direct", L.NGCHW_GKYXC, D.BF16, "N=3,G=2,C=2,K=3,input=40,filter=5,stride=3,pad=2,dilation=2",
         lambda p: p.compiled is None),
    Case("direct-nhwgc-fp16-2d-asym", "direct", L.NHWGC, D.FP16, "N=1,G=3,C=4,K=2,input=8x9,filter=4x4,stride=2,pad_left=1,pad_right=2",
         lambda p: p.compiled is not None and p.vector == 2),
    Case("dwr-nhwgc-fp16-2d-v8", "dwr", L.NHWGC, D.FP16, "N=2,G=16,C=1,K=1,input=9x7,filter=3x3,pad=1",
         lambda p: p.vector == 8 and p.rows == 2 and p.run == 4),
    Case("dwr-nhwgc-bf16-2d-s2-d2", "dwr", L.NHWGC, D.BF16, "N=1,G=8,C=1,K=1,input=11x13,filter=5x3,stride=2,pad=3x1,dilation=2x1",
         lambda p: p.vector == 4),
    Case("dwr-ngchw-fp32-2d-s3-asym", "dwr", L.NGCHW, D.FP32, "N=2,G=3,C=1,K=1,input=13x10,filter=4x4,stride=3,pad_left=1,pad_right=2",
         lambda p: p.rows == 2 and p.run == 2),
    Case("dwr-ngchw-fp16-2d-big", "dwr", L.NGCHW, D.FP16, "N=1,G=2,C=1,K=1,input=15x17,filter=7x7,pad=3",
         lambda p: p.rows == 4 and p.run == 8),
    Case("dwr-gnhwc-int8-3d-s2", "dwr", L.GNHWC, D.INT8, "N=2,G=2,C=1,K=1,input=5x6x7,filter=3x3x3,stride=2x1x2,pad=1,dilation=1x2x1"),
    Case("dwr-gkyxc-bf16-1d-long", "dwr", L.NGCHW_GKYXC, D.BF16, "N=2,G=3,C=1,K=1,input=70,filter=21,pad_left=9,pad_right=11",
         lambda p: p.run == 16),
    Case("dwr-nhwgc-fp32-1d-s2", "dwr", L.NHWGC, D.FP32, "N=3,G=6,C=1,K=1,input=37,filter=5,stride=2,pad=0,dilation=3",
         lambda p: p.vector == 2),
    Case("dwr-nhwgc-int8-1d-chunked", "dwr", L.NHWGC, D.INT8, "N=2,G=16,C=1,K=1,input=150,filter=64,pad_left=60,pad_right=70,dilation=2",
         lambda p: p.vector == 8 and p.run == 8 and p.chunk() == 3),
    Case("mma-nhwgc-fp16-2d", "mma", L.NHWGC, D.FP16, "N=2,G=2,C=16,K=24,input=9x7,filter=3x3,pad=1"),
    Case("mma-nhwgc-bf16-2d-s2", "mma", L.NHWGC, D.BF16, "N=2,G=1,C=8,K=16,input=11x9,filter=3x3,stride=2,pad=1"),
    Case("mma-ngchw-fp32-2d-s2-p0", "mma", L.NGCHW, D.FP32, "N=2,G=2,C=3,K=5,input=9x7,filter=3x3,stride=2,pad=0"),
    Case("mma-gnhwc-int8-3d-s2-d2", "mma", L.GNHWC, D.INT8, "N=1,G=2,C=32,K=32,input=5x6x7,filter=3x3x3,stride=2,pad=1,dilation=1x2x1"),
    Case("mma-gkyxc-fp16-1d-s3-d2", "mma", L.NGCHW_GKYXC, D.FP16, "N=3,G=1,C=8,K=8,input=40,filter=5,stride=3,pad=2,dilation=2"),
    Case("mma-nhwgc-fp16-1x1-s2", "mma", L.NHWGC, D.FP16, "N=2,G=1,C=16,K=16,input=8x8,filter=1x1,stride=2,pad=0"),
    Case("mma-ngchw-fp16-1x1-chunks", "mma", L.NGCHW, D.FP16, "N=3,G=2,C=24,K=40,input=12x10,filter=1x1",
         lambda p: p.vector_a == 8 and p.vector_b == 8),
    Case("mma-gkyxc-bf16-1d-1x1-chunks", "mma", L.NGCHW_GKYXC, D.BF16, "N=2,G=1,C=32,K=16,input=36,filter=1",
         lambda p: p.vector_a == 4 and p.vector_b == 2),
    Case("mma-ngchw-int8-3d-1x1-chunks", "mma", L.NGCHW, D.INT8, "N=2,G=1,C=32,K=64,input=4x4x3,filter=1x1x1",
         lambda p: p.vector_a == 16 and p.vector_b == 16),
    Case("mma-gnhwc-fp32-3d-c3", "mma", L.GNHWC, D.FP32, "N=1,G=2,C=3,K=5,input=6x5x7,filter=2x3x3,stride=1x2x1,pad=0x1x1"),
    Case("mma-ngchw-int8-1d", "mma", L.NGCHW, D.INT8, "N=2,G=1,C=12,K=20,input=50,filter=3,pad=1"),
    # One launch per stride phase (PhaseLaunch.PER_PHASE), phases of different sizes, one without taps.
    Case("mma-nhwgc-fp16-2d-s2-per-phase", "mma", L.NHWGC, D.FP16, "N=2,G=1,C=16,K=16,input=11x9,filter=3x3,stride=2,pad=1",
         lambda p: p.phases.value == "per_phase"),
    Case("mma-ngchw-fp32-1d-s3-per-phase", "mma", L.NGCHW, D.FP32, "N=2,G=2,C=5,K=7,input=23,filter=2,stride=3,pad=1",
         lambda p: p.phases.value == "per_phase"),
    # The finished tile staged through shared memory and stored 16 bytes along C (TileStore.STAGED): tiles
    # wider than C, rows past the phase's positions, stride phases; 8 fp16, 4 fp32, 4 int32, 16 int8 a store.
    Case("mma-nhwgc-fp16-2d-s2-staged", "mma", L.NHWGC, D.FP16, "N=2,G=2,C=16,K=24,input=11x9,filter=3x3,stride=2,pad=1",
         lambda p: p.store.value == "staged" and p.vector_a == 8),
    Case("mma-gnhwc-fp32-3d-staged", "mma", L.GNHWC, D.FP32, "N=1,G=2,C=12,K=8,input=5x6x7,filter=3x2x3,stride=2x1x2,pad=1",
         lambda p: p.store.value == "staged" and p.block_n == 32),
    Case("mma-nhwgc-int8-1d-staged", "mma", L.NHWGC, D.INT8, "N=3,G=1,C=8,K=32,input=37,filter=5,stride=2,pad=2",
         lambda p: p.store.value == "staged"),
    Case("mma-nhwgc-int8sat-2d-staged", "mma", L.NHWGC, D.INT8_SAT, "N=1,G=2,C=32,K=64,input=6x5,filter=3x3,pad=1",
         lambda p: p.store.value == "staged" and p.block_n == 64),
    # NGCHW on channels-last copies (transpose): grad_output and a GKCYX weight copied, grad_input copied back;
    # odd positions (element-wise pass), stride phases, 1-D and 3-D, a GKYXC weight used as given.
    Case("mma-ngchw-fp16-2d-s2-transposed", "mma", L.NGCHW, D.FP16, "N=2,G=2,C=16,K=24,input=11x9,filter=3x3,stride=2,pad=1",
         lambda p: p.transpose and p.vector_a == 8 and p.vector_b == 8),
    Case("mma-gkyxc-bf16-1d-transposed", "mma", L.NGCHW_GKYXC, D.BF16, "N=3,G=1,C=32,K=16,input=40,filter=5,stride=3,pad=2,dilation=2",
         lambda p: p.transpose and p.block_n == 32),
    Case("mma-ngchw-fp32-3d-transposed", "mma", L.NGCHW, D.FP32, "N=1,G=3,C=8,K=4,input=5x6x7,filter=3x2x3,stride=2x1x2,pad=1",
         lambda p: p.transpose),
    Case("mma-ngchw-fp16-2d-transposed-vectors", "mma", L.NGCHW, D.FP16, "N=2,G=1,C=64,K=64,input=16x8,filter=3x3,pad=1",
         lambda p: p.transpose and p.block_n == 64),
    Case("mma-ngchw-bf16-2d-transposed-half-vectors", "mma", L.NGCHW, D.BF16, "N=2,G=1,C=32,K=16,input=6x2,filter=3x3,pad=1",
         lambda p: p.transpose),  # 12 positions: the pass copies 4 elements at a time
    Case("mma-ngchw-fp32-2d-transposed-squares", "mma", L.NGCHW, D.FP32, "N=2,G=1,C=12,K=8,input=8x10,filter=3x3,pad=1",
         lambda p: p.transpose),  # the pass's squares of 4 x 4 (the GKCYX weight's copy: 9 taps, a shared tile)
    # wgmma: the same GEMM with warpgroup tiles in swizzled shared memory, output-gradient rows K-major (the
    # portable product here): K not a multiple of a stage (rows of two taps in one stage), stride phases,
    # narrow chunks, 3-D with K a multiple of 64 (a stage's rows share their tap), the transposing pass.
    Case("wgmma-nhwgc-fp16-2d-s2", "wgmma", L.NHWGC, D.FP16, "N=2,G=2,C=16,K=24,input=11x9,filter=3x3,stride=2,pad=1",
         lambda p: p.vector_a == 8 and p.vector_b == 8 and p.store.value == "element" and p.block_n == 64),
    Case("wgmma-gnhwc-bf16-3d-staged", "wgmma", L.GNHWC, D.BF16, "N=1,G=2,C=72,K=64,input=5x6x7,filter=3x2x3,stride=2x1x2,pad=1",
         lambda p: p.store.value == "staged" and p.block_n == 128 and p.block_m == 128),
    Case("wgmma-nhwgc-bf16-2d-narrow", "wgmma", L.NHWGC, D.BF16, "N=2,G=1,C=10,K=26,input=9x7,filter=3x3,pad=1,dilation=2",
         lambda p: p.vector_a == 2 and p.vector_b == 2),
    Case("wgmma-ngchw-fp16-1d-s3-transposed", "wgmma", L.NGCHW, D.FP16, "N=3,G=1,C=16,K=16,input=40,filter=5,stride=3,pad=2,dilation=2",
         lambda p: p.transpose and p.block_m == 64),
    Case("wgmma-gkyxc-bf16-2d-transposed-staged", "wgmma", L.NGCHW_GKYXC, D.BF16, "N=2,G=1,C=24,K=72,input=7x6,filter=3x3,pad=1",
         lambda p: p.transpose and p.store.value == "staged"),
    Case("wgmma-nhwgc-fp16-2d-s2-overlap", "wgmma", L.NHWGC, D.FP16, "N=2,G=1,C=64,K=72,input=13x11,filter=3x3,stride=2,pad=1",
         lambda p: p.overlap and p.stages == 3 and p.min_blocks == 2),
    Case("wgmma-ngchw-bf16-3d-overlap-transposed", "wgmma", L.NGCHW, D.BF16, "N=1,G=2,C=24,K=64,input=4x5x6,filter=3x3x3,pad=1",
         lambda p: p.overlap and p.stages == 4 and p.transpose),
    # pw: pointwise layers as a plain GEMM. Channels-last positions as K-major runs (K past a stage's end,
    # positions past a tile's, groups), NGCHW samples' channel rows of positions (2-element and element-wise
    # chunks, 3-D, a GKYXC weight), two warpgroups and 256 columns; tiles staged through shared memory (rows
    # and columns past the tile's edge).
    Case("pw-nhwgc-fp16-2d", "pw", L.NHWGC, D.FP16, "N=3,G=2,C=24,K=40,input=9x11,filter=1x1",
         lambda p: p.vector_a == 8 and p.vector_b == 8 and p.block_m == 64),
    Case("pw-gnhwc-bf16-1d-wide", "pw", L.GNHWC, D.BF16, "N=2,G=2,C=136,K=72,input=37,filter=1",
         lambda p: p.block_m == 128 and p.block_n == 256),
    Case("pw-ngchw-fp16-2d", "pw", L.NGCHW, D.FP16, "N=2,G=2,C=72,K=24,input=13x10,filter=1x1",
         lambda p: p.vector_b == 2),
    Case("pw-gkyxc-bf16-3d", "pw", L.NGCHW_GKYXC, D.BF16, "N=2,G=1,C=40,K=136,input=3x4x8,filter=1x1x1",
         lambda p: p.vector_b == 8 and p.block_n == 128 and not p.transpose),
    Case("pw-ngchw-fp16-odd", "pw", L.NGCHW, D.FP16, "N=3,G=1,C=9,K=70,input=7x7,filter=1x1"),
    Case("pw-nhwgc-bf16-2d-staged", "pw", L.NHWGC, D.BF16, "N=2,G=2,C=72,K=40,input=9x11,filter=1x1",
         lambda p: p.store.value == "staged" and p.block_n == 64),
    Case("pw-ngchw-fp16-2d-staged", "pw", L.NGCHW, D.FP16, "N=2,G=1,C=136,K=24,input=10x16,filter=1x1",
         lambda p: p.store.value == "staged" and p.block_m == 128 and not p.transpose),
    # NGCHW through channels-last copies (grad_output copied, grad_input copied back): planes of 49 and 37
    # positions (the pass reads or writes a block's planes as one run), a strided layer (143 input positions).
    Case("pw-ngchw-fp16-2d-transposed", "pw", L.NGCHW, D.FP16, "N=2,G=2,C=24,K=16,input=7x7,filter=1x1",
         lambda p: p.transpose and p.store.value == "staged"),
    Case("pw-gkyxc-bf16-1d-transposed", "pw", L.NGCHW_GKYXC, D.BF16, "N=3,G=1,C=16,K=40,input=37,filter=1",
         lambda p: p.transpose and p.store.value == "element"),
    Case("pw-ngchw-bf16-2d-s2-transposed", "pw", L.NGCHW, D.BF16, "N=2,G=1,C=16,K=40,input=13x11,filter=1x1,stride=2",
         lambda p: p.transpose),
    # Strided channels-last layers: each output position's input, zeros to the rest of its stride cell (input
    # extents that cut the last cell short, 1-D stride 3, 3-D strides 2x1x2).
    Case("pw-nhwgc-fp16-2d-s2", "pw", L.NHWGC, D.FP16, "N=2,G=2,C=72,K=40,input=9x12,filter=1x1,stride=2",
         lambda p: p.block_m == 64),
    Case("pw-gnhwc-bf16-1d-s3", "pw", L.GNHWC, D.BF16, "N=3,G=1,C=64,K=24,input=40,filter=1,stride=3"),
    Case("pw-nhwgc-bf16-3d-s212", "pw", L.NHWGC, D.BF16, "N=1,G=1,C=24,K=16,input=5x3x7,filter=1x1x1,stride=2x1x2"),
    # Groups side by side in a block's GEMM (groups_per_tile): G not a multiple of them, stride phases, 3-D,
    # grad_input channels-last and GNHWC (its groups far apart), the transposing pass; mma and wgmma.
    Case("mma-nhwgc-fp16-2d-s2-groups-per-tile", "mma", L.NHWGC, D.FP16, "N=2,G=3,C=16,K=24,input=9x7,filter=3x3,stride=2,pad=1",
         lambda p: p.groups_per_tile == 2 and not p.transpose),
    Case("mma-gnhwc-bf16-3d-groups-per-tile", "mma", L.GNHWC, D.BF16, "N=1,G=5,C=8,K=8,input=4x5x6,filter=3x2x3,stride=2x1x2,pad=1",
         lambda p: p.groups_per_tile == 4),
    Case("mma-ngchw-fp16-1d-s3-groups-per-tile-transposed", "mma", L.NGCHW, D.FP16, "N=3,G=3,C=16,K=16,input=40,filter=5,stride=3,pad=2",
         lambda p: p.groups_per_tile == 2 and p.transpose),
    Case("wgmma-nhwgc-bf16-2d-groups-per-tile", "wgmma", L.NHWGC, D.BF16, "N=2,G=6,C=16,K=16,input=9x7,filter=3x3,pad=1",
         lambda p: p.groups_per_tile == 4 and p.block_n == 64),
    Case("wgmma-ngchw-fp16-2d-s2-groups-per-tile-transposed", "wgmma", L.NGCHW, D.FP16, "N=2,G=3,C=16,K=32,input=10x9,filter=3x3,stride=2,pad=1",
         lambda p: p.groups_per_tile == 2 and p.transpose),
    # int8_sat: int32 sums saturated to int8; sums of 300-600 products of [-4, 4] values pass +-127 often.
    Case("direct-nhwgc-int8sat-2d", "direct", L.NHWGC, D.INT8_SAT, "N=1,G=2,C=4,K=64,input=6x5,filter=3x3,pad=1",
         lambda p: p.vector == 4),
    Case("mma-ngchw-int8sat-2d-s2", "mma", L.NGCHW, D.INT8_SAT, "N=2,G=1,C=32,K=64,input=9x7,filter=3x3,stride=2,pad=1"),
    Case("dwr-nhwgc-int8sat-1d", "dwr", L.NHWGC, D.INT8_SAT, "N=2,G=16,C=1,K=1,input=100,filter=63,pad=31",
         lambda p: p.vector == 8),
    # dws: the window staged in shared memory (W-contiguous layouts, 1-D and 2-D).
    Case("dws-ngchw-fp16-2d", "dws", L.NGCHW, D.FP16, "N=2,G=3,C=1,K=1,input=14x14,filter=3x3,pad=1",
         lambda p: p.rows == 2 and p.run == 2 and p.threads == 128),
    Case("dws-gkyxc-fp32-2d-s2-d2-asym", "dws", L.NGCHW_GKYXC, D.FP32,
         "N=1,G=2,C=1,K=1,input=17x13,filter=5x3,stride=2,pad_left=3x1,pad_right=2x2,dilation=2x1",
         lambda p: p.rows == 1),
    Case("dws-gnhwc-int8sat-1d-long", "dws", L.GNHWC, D.INT8_SAT, "N=2,G=2,C=1,K=1,input=300,filter=63,pad=31",
         lambda p: p.run == 4),
    Case("dws-ngchw-bf16-1d-s3", "dws", L.NGCHW, D.BF16, "N=3,G=2,C=1,K=1,input=50,filter=4,stride=3,pad=2",
         lambda p: p.run == 2),
    Case("dws-gnhwc-int8-2d-many-strips", "dws", L.GNHWC, D.INT8, "N=1,G=2,C=1,K=1,input=40x37,filter=3x3,pad=1",
         lambda p: p.threads == 128 and p.rows == 1 and p.run == 1),
    # dws with several whole planes a block: G not a multiple of the planes, strides, 1-D.
    Case("dws-ngchw-fp16-2d-planes", "dws", L.NGCHW, D.FP16, "N=2,G=7,C=1,K=1,input=7x6,filter=3x3,pad=1",
         lambda p: p.planes == 4 and p.rows == 1 and p.run == 2),
    Case("dws-gnhwc-bf16-2d-s2-planes", "dws", L.GNHWC, D.BF16,
         "N=3,G=5,C=1,K=1,input=9x11,filter=5x5,stride=2,pad_left=2x1,pad_right=1x2",
         lambda p: p.planes == 2 and p.rows == 2),
    Case("dws-gkyxc-fp32-1d-planes", "dws", L.NGCHW_GKYXC, D.FP32, "N=1,G=9,C=1,K=1,input=29,filter=7,pad=3,dilation=2",
         lambda p: p.planes == 8 and p.run == 4),
    # dwp: runs of whole planes copied 16 bytes at a time; the last block's shorter run takes the element-wise
    # copies (N x G not a multiple of the planes), planes of GNHWC's images, strides, dilation, 1-D, int8.
    Case("dwp-ngchw-fp16-2d-tail", "dwp", L.NGCHW, D.FP16, "N=2,G=7,C=1,K=1,input=7x6,filter=3x3,pad=1",
         lambda p: p.planes == 4 and p.rows == 1 and p.run == 2 and p.threads == 128 and not p.resident),
    Case("dwp-gnhwc-bf16-2d-s2-asym", "dwp", L.GNHWC, D.BF16,
         "N=3,G=5,C=1,K=1,input=9x11,filter=5x5,stride=2,pad_left=2x1,pad_right=1x2",
         lambda p: p.planes == 8 and p.rows == 2 and p.run == 2 and p.threads == 128 and not p.resident),
    Case("dwp-gkyxc-fp32-1d-d2", "dwp", L.NGCHW_GKYXC, D.FP32, "N=1,G=9,C=1,K=1,input=29,filter=7,pad=3,dilation=2",
         lambda p: p.planes == 8 and p.run == 4 and not p.resident),
    Case("dwp-ngchw-int8sat-2d-tiles-in-turn", "dwp", L.NGCHW, D.INT8_SAT, "N=2,G=3,C=1,K=1,input=13x10,filter=3x3,pad=1",
         lambda p: p.planes == 4 and p.rows == 1 and p.run == 2 and p.threads == 128 and not p.resident),
    Case("dwp-gnhwc-int8-1d-s3", "dwp", L.GNHWC, D.INT8, "N=4,G=2,C=1,K=1,input=50,filter=4,stride=3,pad=2",
         lambda p: p.planes == 8 and p.run == 2 and p.threads == 128 and not p.resident),
    # More 16-byte lines a block than 4 per thread: loads of several lines in flight, then a second round.
    Case("dwp-ngchw-fp16-2d-many-lines", "dwp", L.NGCHW, D.FP16, "N=4,G=16,C=1,K=1,input=14x14,filter=3x3,pad=1",
         lambda p: p.planes == 32 and p.threads == 128 and p.rows == 2 and p.run == 8 and not p.resident),
    # Padding past the filter's reach: dOut's outer rows and columns meet no dIn, so the windows do not
    # hold whole planes and the copy places element by element.
    Case("dwp-ngchw-fp16-2d-pad-past-filter", "dwp", L.NGCHW, D.FP16, "N=2,G=9,C=1,K=1,input=8x8,filter=3x3,pad=3",
         lambda p: p.planes == 8 and p.rows == 1 and p.run == 4 and not p.resident),
    # dwp with resident blocks: sums straight from the copied planes (edges masked), runs taken in turn (the tests
    # below shrink the grid); runs that start on a 16-byte line and runs that do not (49- and 110-value
    # planes, 4 a run), a shorter last run, 1-D with dilation, int8's 16-value lines.
    Case("dwp-resident-ngchw-fp16-2d-tail", "dwp", L.NGCHW, D.FP16, "N=2,G=7,C=1,K=1,input=7x6,filter=3x3,pad=1",
         lambda p: p.resident and p.planes == 4 and p.rows == 1 and p.run == 2),
    Case("dwp-resident-gnhwc-bf16-2d-s2-unaligned", "dwp", L.GNHWC, D.BF16,
         "N=3,G=5,C=1,K=1,input=13x13,filter=5x5,stride=2,pad=2",
         lambda p: p.resident and p.planes == 4 and p.rows == 1 and p.run == 2 and p.threads == 128),
    Case("dwp-resident-gkyxc-fp32-1d-d2", "dwp", L.NGCHW_GKYXC, D.FP32, "N=1,G=9,C=1,K=1,input=29,filter=7,pad=3,dilation=2",
         lambda p: p.resident and p.planes == 8 and p.run == 4),
    Case("dwp-resident-ngchw-int8-2d-d2", "dwp", L.NGCHW, D.INT8, "N=3,G=3,C=1,K=1,input=11x10,filter=3x3,pad=2,dilation=2",
         lambda p: p.resident and p.planes == 4 and p.rows == 2 and p.run == 4 and p.threads == 128),
    # dwm: each plane's taps as Toeplitz GEMMs on matrix instructions (the portable lane layout here). Planes
    # that start on a 16-byte line and planes that do not, the tensor's last line partly past its end, a
    # warp with fewer images than its depth, several tiles each way, stride 2 (two instruction tiles a tile),
    # stride 2 along H only, dilation, asymmetric padding, padding past the filter's reach, GNHWC's planes;
    # planes written back element by element and (17x19) by 16-byte lines from any phase.
    Case("dwm-ngchw-fp16-2d-unaligned", "dwm", L.NGCHW, D.FP16, "N=5,G=3,C=1,K=1,input=13x11,filter=3x3,pad=1",
         lambda p: p.warps == 2 and p.depth == 2),
    Case("dwm-gnhwc-bf16-2d-s2", "dwm", L.GNHWC, D.BF16, "N=3,G=2,C=1,K=1,input=15x17,filter=5x5,stride=2,pad=2",
         lambda p: p.warps == 1 and p.depth == 2),
    Case("dwm-gkyxc-fp16-2d-7x7-tiles", "dwm", L.NGCHW_GKYXC, D.FP16, "N=9,G=2,C=1,K=1,input=17x19,filter=7x7,pad=3",
         lambda p: p.warps == 4 and p.depth == 2),
    Case("dwm-ngchw-bf16-2d-s2x1-d2-asym", "dwm", L.NGCHW, D.BF16,
         "N=2,G=3,C=1,K=1,input=12x9,filter=3x3,stride=2x1,pad_left=2x1,pad_right=1x3,dilation=2",
         lambda p: p.warps == 1 and p.depth == 1),
    Case("dwm-ngchw-fp16-2d-pad-past-filter", "dwm", L.NGCHW, D.FP16, "N=3,G=2,C=1,K=1,input=6x7,filter=3x3,pad=3",
         lambda p: p.warps == 2 and p.depth == 1),
    # dwc: channels-last blocks with the grad_output window in shared memory. G not a multiple of a block's
    # groups, tiles past the plane both ways, stride 2 and 3 (tiles shifted to whole output positions),
    # dilation, asymmetric padding, 1-D, 8-byte and 16-byte vectors.
    Case("dwc-nhwgc-fp16-2d-groups-tail", "dwc", L.NHWGC, D.FP16, "N=2,G=40,C=1,K=1,input=9x11,filter=3x3,pad=1",
         lambda p: p.cv == 8 and p.across == 4 and p.rows == 2),
    Case("dwc-nhwgc-bf16-2d-s2-d2", "dwc", L.NHWGC, D.BF16,
         "N=1,G=32,C=1,K=1,input=21x35,filter=5x3,stride=2,pad=3x1,dilation=2x1",
         lambda p: p.vector == 4 and p.cv == 4 and p.across == 4),
    Case("dwc-nhwgc-fp32-2d-s3-asym", "dwc", L.NHWGC, D.FP32,
         "N=2,G=12,C=1,K=1,input=25x50,filter=4x4,stride=1x3,pad_left=1,pad_right=2",
         lambda p: p.cv == 4 and p.across == 8),
    Case("dwc-nhwgc-fp16-1d-s2", "dwc", L.NHWGC, D.FP16, "N=3,G=24,C=1,K=1,input=300,filter=7,stride=2,pad=3",
         lambda p: p.cv == 8 and p.across == 32 and p.run == 4),
    # gwl: grouped, a chunk's weights and each tile's grad_output window in shared memory. G not a
    # multiple of the chunk, tiles past the plane both ways (and below, walks of every tile a block), K not a
    # multiple of a matrix step (zeros past K), dilation and asymmetric padding, fp32's three TF32 products,
    # 1-D, GNHWC, and NGCHW / NGCHW_GKYXC through the transposing pass.
    Case("gwl-nhwgc-fp16-2d-walk", "gwl", L.NHWGC, D.FP16, "N=5,G=3,C=16,K=16,input=13x21,filter=3x3,pad=1",
         lambda p: p.groups == 2 and p.rows == 2 and p.cols == 16 and p.walkers == 64 and p.warp_tiles == 1 and p.stages == 3),
    Case("gwl-gnhwc-bf16-2d-k24-d2-asym", "gwl", L.GNHWC, D.BF16,
         "N=2,G=2,C=8,K=24,input=11x19,filter=3x5,pad_left=2x1,pad_right=1x3,dilation=2x1",
         lambda p: p.groups == 1 and p.rows == 4 and p.cols == 16 and p.warp_tiles == 2),
    Case("gwl-nhwgc-fp32-2d-c24", "gwl", L.NHWGC, D.FP32, "N=2,G=3,C=24,K=16,input=9x9,filter=3x3,pad=1",
         lambda p: p.groups == 4 and p.rows == 2 and p.cols == 16 and p.stages == 2),
    Case("gwl-nhwgc-bf16-1d-f7", "gwl", L.NHWGC, D.BF16, "N=3,G=4,C=32,K=8,input=150,filter=7,pad=3",
         lambda p: p.groups == 2 and p.cols == 64 and p.warp_tiles == 2),
    # Stride phases (grid z): stride 2 both ways with phases of different sizes, stride 3 along W with a phase
    # no tap of a 2-wide filter reaches, stride 2 with dilation 2 in 1-D, asymmetric padding.
    Case("gwl-nhwgc-fp16-2d-s2", "gwl", L.NHWGC, D.FP16, "N=3,G=3,C=16,K=24,input=13x17,filter=3x3,stride=2,pad=1",
         lambda p: p.groups == 2 and p.rows == 2 and p.cols == 16),
    Case("gwl-gnhwc-bf16-2d-s1x3-asym", "gwl", L.GNHWC, D.BF16,
         "N=2,G=2,C=8,K=16,input=9x40,filter=3x2,stride=1x3,pad_left=1x0,pad_right=1x1",
         lambda p: p.groups == 1 and p.rows == 4),
    Case("gwl-nhwgc-fp32-1d-s2-d2", "gwl", L.NHWGC, D.FP32, "N=2,G=3,C=8,K=8,input=90,filter=5,stride=2,pad=4,dilation=2",
         lambda p: p.cols == 32),
    Case("gwl-ngchw-fp16-2d-transposed", "gwl", L.NGCHW, D.FP16, "N=3,G=3,C=8,K=16,input=13x11,filter=3x3,pad=1",
         lambda p: p.groups == 1 and p.rows == 4 and p.cols == 16),
    Case("gwl-gkyxc-fp32-1d-transposed", "gwl", L.NGCHW_GKYXC, D.FP32, "N=2,G=2,C=16,K=8,input=70,filter=5,pad=2,dilation=2",
         lambda p: p.groups == 1 and p.cols == 32),
    # mfma: the same template with AMD's 64-lane MFMA layout, picked for gfx90a.
    Case("mfma-nhwgc-fp16-2d-s2", "mfma", L.NHWGC, D.FP16, "N=2,G=2,C=16,K=24,input=11x9,filter=3x3,stride=2,pad=1",
         lambda p: p.vector_a == 8),
    Case("mfma-ngchw-bf16-3d", "mfma", L.NGCHW, D.BF16, "N=1,G=2,C=5,K=3,input=5x6x7,filter=3x3x3,pad=1,dilation=1x2x1"),
    Case("mfma-gnhwc-fp32-1d-s3", "mfma", L.GNHWC, D.FP32, "N=3,G=1,C=8,K=12,input=40,filter=5,stride=3,pad=2,dilation=2",
         lambda p: p.vector_a == 4),
    Case("mfma-gkyxc-fp16-1x1-chunks", "mfma", L.NGCHW_GKYXC, D.FP16, "N=2,G=1,C=32,K=16,input=12x10,filter=1x1",
         lambda p: p.vector_a == 8 and p.vector_b == 8),
    Case("mma-gkyxc-bf16-2d-asym", "mma", L.NGCHW_GKYXC, D.BF16, "N=1,G=1,C=24,K=8,input=10x9,filter=3x3,stride=2,pad_left=0,pad_right=1"),
]


def pick_instance(case: Case) -> Instance:
    return kernel_emulator.pick_in_family(case, "mfma")


@pytest.fixture(scope="module")
def picked() -> dict[str, Instance]:
    return kernel_emulator.pick_and_prebuild(CASES, pick_instance)


def test_cases_reach_every_family_layout_dtype_and_rank(picked: dict[str, Instance]) -> None:
    kernel_emulator.assert_cases_cover_cells(SOLVER, CASES, picked)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_emulated_bwd_data_matches_reference(case: Case, picked: dict[str, Instance]) -> None:
    kernel_emulator.assert_case_matches_reference(case, picked[case.id])


def _fewer_phases(plan: Any) -> Any:
    """The last stride phase (grid z) is not launched: its inputs keep the poison."""
    def change(step: Any) -> Any:
        if isinstance(step, Launch) and step.entry == "kf_main":
            gx, gy, gz = step.grid
            assert gz > 1
            return dataclasses.replace(step, grid=(gx, gy, gz - 1))
        return step
    return dataclasses.replace(plan, steps=tuple(change(s) for s in plan.steps))


def _fewer_blocks(plan: Any) -> Any:
    """One block fewer along grid x: the last tile of positions is never written."""
    def change(step: Any) -> Any:
        if isinstance(step, Launch) and step.entry == "kf_main":
            gx, gy, gz = step.grid
            return dataclasses.replace(step, grid=(gx - 1, gy, gz))
        return step
    return dataclasses.replace(plan, steps=tuple(change(s) for s in plan.steps))


@pytest.mark.parametrize("blocks", [1, 2])
@pytest.mark.parametrize("case_id", [c.id for c in CASES if c.id.startswith("dwp-resident-")])
def test_dwp_resident_blocks_take_runs_in_turn_on_any_grid(case_id: str, blocks: int, picked: dict[str, Instance],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    case = next(c for c in CASES if c.id == case_id)
    inst = picked[case_id]
    right = kernel_emulator._plan

    def grid_of(plan: Any) -> Any:
        steps = tuple(dataclasses.replace(s, grid=(blocks, 1, 1)) if isinstance(s, Launch) else s for s in plan.steps)
        return dataclasses.replace(plan, steps=steps)
    monkeypatch.setattr(kernel_emulator, "_plan", lambda i, p: grid_of(right(i, p)))
    verdict = kernel_emulator.check_instance(inst, case.problem, seed=blocks)
    assert verdict.ok, f"{inst.name} on {case.spec} with {blocks} blocks: {verdict.message}"


@pytest.mark.parametrize("case_id", ["dwm-ngchw-fp16-2d-unaligned", "dwm-gkyxc-fp16-2d-7x7-tiles"])
def test_dwm_takes_tensors_off_16_bytes_element_by_element(case_id: str, picked: dict[str, Instance],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """grad_output and grad_input 2 bytes past a 16-byte boundary (a view into a larger tensor): the line
    loads and stores give way to element ones (a 16-byte access there faults the emulator)."""
    case = next(c for c in CASES if c.id == case_id)
    right = kernel_emulator.DeviceMemory.alloc

    def shifted(self: Any, name: str, nbytes: int, fill: int) -> Any:
        if name not in ("grad_output", "grad_input"):
            return right(self, name, nbytes, fill)
        inner = right(self, name, nbytes + 2, fill)[2:]
        self.arrays[name] = inner
        return inner
    monkeypatch.setattr(kernel_emulator.DeviceMemory, "alloc", shifted)
    verdict = kernel_emulator.check_instance(picked[case_id], case.problem, seed=3)
    assert verdict.ok, f"{picked[case_id].name} on {case.spec}: {verdict.message}"


BROKEN = [("mma-nhwgc-bf16-2d-s2", _fewer_phases), ("direct-ngchw-fp32-2d-s2", _fewer_blocks),
          ("mma-nhwgc-fp16-2d", _fewer_blocks), ("wgmma-nhwgc-fp16-2d-s2", _fewer_blocks),
          ("dwp-ngchw-fp16-2d-tail", _fewer_blocks), ("dwm-gnhwc-bf16-2d-s2", _fewer_blocks),
          ("dwc-nhwgc-fp32-2d-s3-asym", _fewer_blocks)]


@pytest.mark.parametrize("case_id, breakage", BROKEN, ids=lambda v: getattr(v, "__name__", v))
def test_emulator_catches_a_broken_launch_plan(case_id: str, breakage: Callable[[Any], Any],
                                               picked: dict[str, Instance], monkeypatch: pytest.MonkeyPatch) -> None:
    case = next(c for c in CASES if c.id == case_id)
    inst = picked[case_id]
    assert kernel_emulator.check_instance(inst, case.problem).ok
    right = kernel_emulator._plan
    monkeypatch.setattr(kernel_emulator, "_plan", lambda i, p: breakage(right(i, p)))
    verdict = kernel_emulator.check_instance(inst, case.problem)
    assert not verdict.ok and "not finite" in verdict.message, verdict.message


@pytest.mark.parametrize("walkers", [1, 2])
@pytest.mark.parametrize("case_id", [c.id for c in CASES if c.family == "gwl"])
def test_gwl_blocks_walk_every_tile_on_any_grid(case_id: str, walkers: int, picked: dict[str, Instance],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """gwl's blocks walk a chunk's tiles gridDim.y apart, stages ahead: one or two blocks a chunk walk them all
    (the catalog's grids, sized to the GPU, give a small problem few tiles a block)."""
    case = next(c for c in CASES if c.id == case_id)
    inst = picked[case_id]
    right = kernel_emulator._plan

    def grid_of(plan: Any) -> Any:
        steps = tuple(dataclasses.replace(s, grid=(s.grid[0], walkers, s.grid[2])) if isinstance(s, Launch) and s.entry == "kf_main"
                      else s for s in plan.steps)
        return dataclasses.replace(plan, steps=steps)
    monkeypatch.setattr(kernel_emulator, "_plan", lambda i, p: grid_of(right(i, p)))
    verdict = kernel_emulator.check_instance(inst, case.problem, seed=walkers)
    assert verdict.ok, f"{inst.name} on {case.spec} with {walkers} blocks a chunk: {verdict.message}"
