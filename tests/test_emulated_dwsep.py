"""dwsep_conv_fwd kernels run on the host (kernel_emulator) against the numpy reference, without a GPU.

The cases reach every family (fused_mfma picked for gfx90a), both layouts, every dtype and rank, odd C
and K, stride 2, dilation, padding past the filter's half, N=1, biases and each activation, inputs held a
step ahead and read tap by tap, bf16 inputs widened from whole words, channels-last items in narrower
loads, and 7x7 filters (per-axis tap masks: over 32 taps). One case runs with fewer blocks than position tiles (each block then takes
several tiles in turn, its next tile's inputs loaded ahead), and a broken launch plan (a channel tile
left out) shows the checks can fail.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

import pytest

import kernel_emulator
from factory.catalog import Instance
from factory.device import TARGETS
from factory.ops.base import Launch
from factory.ops.dwsep_conv_fwd import SOLVER, DwsepProblem
from factory.problem import DType, Layout
from factory.selector import lookup

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
    def problem(self) -> DwsepProblem:
        return SOLVER.parse_problem(self.spec, self.layout, self.dtype)


CASES = [
    Case("fused-nhwgc-fp16-2d-s2", "fused", L.NHWGC, D.FP16,
         "N=2,C=24,K=40,input=9x7,filter=3x3,stride=2,pad=1,bias_dw=1,bias_pw=1,act_dw=relu6,act_pw=relu",
         lambda p: p.vector == 8),
    Case("fused-ngchw-bf16-2d-odd", "fused", L.NGCHW, D.BF16, "N=1,C=17,K=13,input=6x5,filter=3x3,pad=2,dilation=2"),
    Case("fused-nhwgc-fp32-1d", "fused", L.NHWGC, D.FP32, "N=2,C=8,K=20,input=11,filter=5,stride=2,pad=2,act_pw=relu6",
         lambda p: p.vector == 4),
    Case("fused-ngchw-fp32-3d", "fused", L.NGCHW, D.FP32, "N=1,C=16,K=9,input=3x5x4,filter=3x1x3,pad=1x0x1,bias_pw=1"),
    Case("fused-nhwgc-bf16-3d-odd", "fused", L.NHWGC, D.BF16, "N=1,C=5,K=7,input=4x4x5,filter=3x3x3,pad=1,act_dw=relu",
         lambda p: p.vector == 1 and p.item_bytes == 0),
    # Channels-last items of 16 bytes in narrower loads: two 4-channel loads (the second past C=12 in the
    # last chunk), and one-element loads of an odd C under a 7x7 filter.
    Case("fused-nhwgc-fp16-2d-items", "fused", L.NHWGC, D.FP16, "N=2,C=12,K=10,input=6x7,filter=3x3,pad=1,bias_dw=1",
         lambda p: p.vector == 4 and p.item_bytes == 16),
    Case("fused-nhwgc-fp32-2d-7x7-odd", "fused", L.NHWGC, D.FP32, "N=1,C=7,K=9,input=8x9,filter=7x7,pad=3,act_pw=relu",
         lambda p: p.vector == 1 and p.item_bytes == 16),
    # bf16 channels-last with 8-channel loads: inputs widened from whole 32-bit words, both halves.
    Case("fused-nhwgc-bf16-2d-words", "fused", L.NHWGC, D.BF16, "N=2,C=24,K=20,input=7x9,filter=3x3,pad=1,bias_dw=1",
         lambda p: p.vector == 8),
    Case("fused-ngchw-fp16-1d-7", "fused", L.NGCHW, D.FP16, "N=4,C=40,K=36,input=100,filter=7,pad=3,bias_dw=1",
         lambda p: p.block_k == 32),
    Case("fused-ngchw-bf16-2d-7x7", "fused", L.NGCHW, D.BF16, "N=2,C=19,K=11,input=9x8,filter=7x7,pad=3,act_dw=relu",
         lambda p: p.block_m == 128 and p.vector == 1),
    Case("fused_mfma-nhwgc-fp16-2d", "fused_mfma", L.NHWGC, D.FP16, "N=2,C=24,K=20,input=7x6,filter=3x3,pad=1,bias_pw=1",
         lambda p: p.vector == 8),
    Case("fused_mfma-ngchw-bf16-1d", "fused_mfma", L.NGCHW, D.BF16, "N=1,C=12,K=18,input=21,filter=5,stride=2,pad=2"),
    Case("fused_mfma-nhwgc-fp32-3d", "fused_mfma", L.NHWGC, D.FP32, "N=1,C=8,K=8,input=3x4x4,filter=1x3x3,pad=0x1x1,act_pw=relu6",
         lambda p: p.vector == 4),
    # twopass: the workspace's rows cut short by a tile past the positions and by C under a stage; K past a
    # column tile; odd output channels (elements stored one by one); depthwise strips past the row's end
    # (Wo = 5 under 2, 11 under 8) and exactly at it (Wo = 4 under 4, 8 under 4) with stride 2 and dilation 2.
    Case("twopass-nhwgc-fp16-2d-s2", "twopass", L.NHWGC, D.FP16,
         "N=2,C=24,K=72,input=9x7,filter=3x3,stride=2,pad=1,bias_dw=1,bias_pw=1,act_dw=relu6,act_pw=relu",
         lambda p: p.block_m == 64 and p.block_n == 64 and p.strip == 4),
    Case("twopass-ngchw-bf16-2d-odd-k", "twopass", L.NGCHW, D.BF16, "N=2,C=80,K=13,input=6x5,filter=3x3,pad=2,dilation=2,bias_pw=1",
         lambda p: p.block_n == 128 and p.strip == 2),
    Case("twopass-nhwgc-bf16-1d", "twopass", L.NHWGC, D.BF16, "N=3,C=8,K=65,input=21,filter=5,stride=2,pad=2,act_pw=relu6",
         lambda p: p.block_m == 128 and p.strip == 8),
    Case("twopass-ngchw-fp16-3d", "twopass", L.NGCHW, D.FP16, "N=1,C=16,K=70,input=3x5x4,filter=3x1x3,pad=1x0x1,bias_dw=1,act_dw=relu",
         lambda p: p.strip == 1),
    Case("twopass-nhwgc-fp16-2d-7x7", "twopass", L.NHWGC, D.FP16, "N=2,C=16,K=24,input=9x8,filter=7x7,pad=3,bias_dw=1",
         lambda p: p.strip == 4),
    # Channels-last, a depthwise block's chunks and their shared weights: 33 chunks in groups of 17 and 16 (a
    # lane of the second group idle), the last block of strips part full; under 13x13, at most 17 chunks a
    # group (19 in groups of 10 and 9).
    Case("twopass-nhwgc-bf16-2d-groups", "twopass", L.NHWGC, D.BF16, "N=2,C=264,K=20,input=5x7,filter=3x3,pad=1,bias_dw=1",
         lambda p: p.strip == 2 and p.block_n == 64),
    Case("twopass-nhwgc-fp16-2d-13x13", "twopass", L.NHWGC, D.FP16, "N=1,C=152,K=8,input=6x7,filter=13x13,pad=6,act_dw=relu",
         lambda p: p.strip == 4),
    # C not a multiple of 8: the last chunk's padding channels written as zeros, the pointwise weights copied
    # with zero padding; channels-last inputs and weights read a channel at a time.
    Case("twopass-ngchw-fp16-2d-c21", "twopass", L.NGCHW, D.FP16,
         "N=2,C=21,K=19,input=7x6,filter=3x3,pad=1,bias_dw=1,act_dw=relu", lambda p: p.strip == 2),
    Case("twopass-nhwgc-bf16-2d-c13", "twopass", L.NHWGC, D.BF16,
         "N=2,C=13,K=24,input=6x9,filter=5x5,pad=2,bias_dw=1,bias_pw=1,act_dw=relu6,act_pw=relu6", lambda p: p.strip == 4),
    # ... and in the second of two groups of chunks (33 chunks, the last of them 5 channels).
    Case("twopass-nhwgc-fp16-1d-c261", "twopass", L.NHWGC, D.FP16, "N=2,C=261,K=16,input=13,filter=3,pad=1,bias_dw=1",
         lambda p: p.strip == 2),
    # twopass with staged stores: NCHW-style rows of 30 positions (16-byte pieces unaligned past a row's first),
    # a column tile past the last position; channels-last K = 21 (one element at a time) past a tile of 128
    # rows with only 6 x 7 x 2 positions, both biases and activations.
    Case("twopass-ngchw-fp16-2d-staged", "twopass", L.NGCHW, D.FP16,
         "N=2,C=16,K=70,input=5x6,filter=3x3,pad=1,bias_pw=1,act_pw=relu", lambda p: p.store.value == "staged" and p.block_n == 128),
    Case("twopass-nhwgc-bf16-2d-staged", "twopass", L.NHWGC, D.BF16,
         "N=2,C=24,K=21,input=6x7,filter=3x3,pad=1,bias_dw=1,bias_pw=1,act_dw=relu6,act_pw=relu6",
         lambda p: p.store.value == "staged" and p.block_m == 128 and p.block_n == 128),
    # twopass's GEMM by bulk tensor copies (`_tma`): channels-last C = 80 (a stage's box past the last channel, K
    # = 70 past a column tile, 84 positions under the tile's rows), 128 and 64 rows; NCHW-style C = 21 (the padded
    # weights' copy, three samples as the map's images); C = 200 over a ring of three stages.
    Case("twopass-nhwgc-fp16-2d-tma", "twopass", L.NHWGC, D.FP16,
         "N=2,C=80,K=70,input=6x7,filter=3x3,pad=1,bias_pw=1,act_pw=relu",
         lambda p: p.tma and p.block_m == 128 and p.stages == 4),
    Case("twopass-nhwgc-bf16-2d-tma-64", "twopass", L.NHWGC, D.BF16,
         "N=2,C=80,K=70,input=6x7,filter=3x3,pad=1,bias_dw=1,act_dw=relu6",
         lambda p: p.tma and p.block_m == 64),
    Case("twopass-ngchw-fp16-2d-tma-c21", "twopass", L.NGCHW, D.FP16, "N=3,C=21,K=40,input=5x6,filter=3x3,pad=1,bias_pw=1",
         lambda p: p.tma and p.block_m == 64 and p.stages == 3),
    Case("twopass-nhwgc-bf16-2d-tma-ring", "twopass", L.NHWGC, D.BF16, "N=1,C=200,K=24,input=4x5,filter=3x3,pad=1",
         lambda p: p.tma and p.block_m == 64 and p.stages == 3),
    # twopass NCHW-style with its depthwise pass tiled (`_tl`): a block's input windows in shared memory. C = 21
    # (three chunks, the last padded) over two bands of rows and two of strips (Ho = 10, Wo = 35 under tiles of 8
    # rows by 32 strips) at stride 2; 3-D with dilation and stride along depth and W, padding past the window,
    # 1-D strips of 4 over two bands, the second's last strip cut short.
    Case("twopass-ngchw-fp16-2d-tiled", "twopass", L.NGCHW, D.FP16,
         "N=2,C=21,K=19,input=20x70,filter=5x5,stride=2,pad=2,bias_dw=1,act_dw=relu6",
         lambda p: p.depthwise.value == "tiled" and p.strip == 1),
    Case("twopass-ngchw-bf16-3d-tiled", "twopass", L.NGCHW, D.BF16,
         "N=1,C=16,K=20,input=4x5x6,filter=3x3x3,stride=1x1x2,pad=2x1x1,dilation=2x1x1,bias_pw=1,act_dw=relu",
         lambda p: p.depthwise.value == "tiled" and p.strip == 2),
    Case("twopass-ngchw-fp16-1d-tiled", "twopass", L.NGCHW, D.FP16, "N=2,C=24,K=16,input=150,filter=7,pad=3,bias_dw=1",
         lambda p: p.depthwise.value == "tiled" and p.strip == 4 and p.store.value == "staged"),
    # ... and two chunks a block (529 chunks: 265 blocks, two waves of 132 SMs), the last block's second chunk
    # absent and its first padded.
    Case("twopass-ngchw-bf16-2d-tiled-grouped", "twopass", L.NGCHW, D.BF16, "N=1,C=4227,K=8,input=2x2,filter=3x3,pad=1",
         lambda p: p.depthwise.value == "tiled" and p.strip == 2),
    # twopass channels-last with its depthwise pass on matrix instructions (`_mx`): two bands of 16 rows and two
    # of 64 columns (20x70 under 7x7: the second band one tile of 6 columns), three chunks; C = 21 through the
    # padded copy at stride 2 along H and dilation 2 along W (11 input columns a tile of 8), the padding
    # channels' warps idle; nine chunks over two samples of 6 rows (10 of a band's 16 rows past the output).
    Case("twopass-nhwgc-bf16-2d-matrix", "twopass", L.NHWGC, D.BF16,
         "N=1,C=24,K=19,input=20x70,filter=7x7,pad=3,bias_dw=1,act_dw=relu6",
         lambda p: p.depthwise.value == "matrix" and p.store.value == "staged"),
    Case("twopass-nhwgc-fp16-2d-matrix-c21", "twopass", L.NHWGC, D.FP16,
         "N=2,C=21,K=10,input=19x13,filter=3x3,stride=2x1,pad=1x2,dilation=1x2,bias_pw=1,act_dw=relu",
         lambda p: p.depthwise.value == "matrix"),
    Case("twopass-nhwgc-bf16-2d-matrix-chunks", "twopass", L.NHWGC, D.BF16, "N=2,C=72,K=8,input=6x9,filter=5x5,pad=2,bias_dw=1",
         lambda p: p.depthwise.value == "matrix"),
    # rowtile: C under the instruction's depth (24 of 32, 8 of 16: zero channels in A and B), a row's last
    # strip part past its end (Wo = 19 under strips of 4) and a second tile along a row (Wo = 70 under 64),
    # K past a channel tile (72 under 64) and odd K (elements stored one by one), stride 2, dilation 2, 1-3 D.
    Case("rowtile-nhwgc-fp16-2d-s2", "rowtile", L.NHWGC, D.FP16,
         "N=2,C=24,K=40,input=5x37,filter=3x3,stride=2,pad=1,bias_dw=1,bias_pw=1,act_dw=relu6,act_pw=relu",
         lambda p: p.block_m == 64 and p.block_n == 64 and p.strip == 4),
    Case("rowtile-nhwgc-bf16-2d-odd-k", "rowtile", L.NHWGC, D.BF16,
         "N=1,C=16,K=13,input=4x70,filter=3x3,pad=2,dilation=2,bias_pw=1", lambda p: p.block_m == 64 and p.strip == 2),
    Case("rowtile-nhwgc-bf16-1d", "rowtile", L.NHWGC, D.BF16, "N=3,C=8,K=72,input=41,filter=5,stride=2,pad=2,bias_pw=1,act_pw=relu6",
         lambda p: p.block_m == 64 and p.block_n == 64 and p.strip == 4),
    Case("rowtile-nhwgc-fp16-3d", "rowtile", L.NHWGC, D.FP16,
         "N=1,C=32,K=24,input=3x4x40,filter=3x1x3,pad=1x0x1,bias_dw=1,act_dw=relu",
         lambda p: p.block_m == 128 and p.warps_m == 4 and p.strip == 2),
]


def pick_instance(case: Case) -> Instance:
    return kernel_emulator.pick_in_family(case, "fused_mfma")


@pytest.fixture(scope="module")
def picked() -> dict[str, Instance]:
    return kernel_emulator.pick_and_prebuild(CASES, pick_instance)


def test_cases_reach_every_family_layout_dtype_and_rank(picked: dict[str, Instance]) -> None:
    kernel_emulator.assert_cases_cover_cells(SOLVER, CASES, picked)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_emulated_dwsep_matches_reference(case: Case, picked: dict[str, Instance]) -> None:
    kernel_emulator.assert_case_matches_reference(case, picked[case.id])


def _grid(plan: Any, x: Callable[[int], int] = lambda v: v, y: Callable[[int], int] = lambda v: v) -> Any:
    """The plan with its main launch's grid resized along x and y."""
    def change(step: Any) -> Any:
        if isinstance(step, Launch) and step.entry == "kf_main":
            gx, gy, gz = step.grid
            return dataclasses.replace(step, grid=(x(gx), y(gy), gz))
        return step
    return dataclasses.replace(plan, steps=tuple(change(s) for s in plan.steps))


def test_blocks_that_take_several_tiles_compute_the_same(picked: dict[str, Instance],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A third of the blocks (rounded up): each takes every gridDim.x-th position tile, the next tile's
    depthwise inputs loaded under the current one's multiplications."""
    case = next(c for c in CASES if c.id == "fused-ngchw-fp16-1d-7")
    right = kernel_emulator._plan
    assert right(picked[case.id], case.problem).steps[0].grid[0] >= 3
    monkeypatch.setattr(kernel_emulator, "_plan", lambda i, p: _grid(right(i, p), x=lambda gx: math.ceil(gx / 3)))
    verdict = kernel_emulator.check_instance(picked[case.id], case.problem)
    assert verdict.ok, verdict.message


def test_rowtile_blocks_that_walk_several_tiles_compute_the_same(picked: dict[str, Instance],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """rowtile on a large layer has a wave of blocks, each walking the tiles gridDim.x apart with its weights
    loaded once and A, B and the staged output tile reused: a third of the blocks here (rounded up)."""
    case = next(c for c in CASES if c.id == "rowtile-nhwgc-fp16-3d")
    right = kernel_emulator._plan
    assert right(picked[case.id], case.problem).steps[0].grid[0] >= 6
    monkeypatch.setattr(kernel_emulator, "_plan", lambda i, p: _grid(right(i, p), x=lambda gx: math.ceil(gx / 3)))
    verdict = kernel_emulator.check_instance(picked[case.id], case.problem)
    assert verdict.ok, verdict.message


def test_depthwise_blocks_that_loop_over_strips_compute_the_same(picked: dict[str, Instance],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """twopass channels-last: one kf_depthwise block a group of chunks, looping over every block of strips
    (as a grid capped at a few blocks an SM does on large layers)."""
    case = next(c for c in CASES if c.id == "twopass-nhwgc-bf16-2d-groups")
    right = kernel_emulator._plan

    def one_block_a_group(step: Any) -> Any:
        if isinstance(step, Launch) and step.entry == "kf_depthwise":
            return dataclasses.replace(step, grid=(2, 1, 1))  # the case's two groups of chunks
        return step

    assert right(picked[case.id], case.problem).steps[0].grid[0] == 2 * 3
    def plan(inst: Instance, problem: Any) -> Any:
        usual = right(inst, problem)
        return dataclasses.replace(usual, steps=tuple(one_block_a_group(s) for s in usual.steps))

    monkeypatch.setattr(kernel_emulator, "_plan", plan)
    verdict = kernel_emulator.check_instance(picked[case.id], case.problem)
    assert verdict.ok, verdict.message


def test_emulator_catches_a_broken_launch_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """One block fewer along the output channels: the last channel tile is never written and stays
    poisoned. (Fewer blocks along the positions is no breakage: blocks stride over the tiles.)"""
    case = CASES[0]
    inst = next(i for i in lookup(case.problem, target=TARGETS["sm_90a"]) if i.family == "fused" and i.params.block_n == 32)
    right = kernel_emulator._plan
    assert right(inst, case.problem).steps[0].grid[1] == 2
    monkeypatch.setattr(kernel_emulator, "_plan", lambda i, p: _grid(right(i, p), y=lambda gy: gy - 1))
    verdict = kernel_emulator.check_instance(inst, case.problem)
    assert not verdict.ok and "not finite" in verdict.message, verdict.message

