"""The coop split-K reduction (backward-weight `pw`, `wgmma`, `gwl`): its launch plans, where it applies, and
`pw`'s prior term. `pw`'s blocks of a tile meet and finish it; `wgmma`'s and `gwl`'s whole launch meets at one
counter and shares out kf_finalize's sums (kf_splitk_finish_in_grid).

The host emulator cannot run a cooperative launch (its blocks wait for each other; the emulator runs one
block at a time), so these check the plan and the choices; tests/test_gpu_pointwise.py runs every coop
instance on the GPU, tests/test_gpu_coop_grid_finish.py every `wgmma` and `gwl` one.
"""

from __future__ import annotations

import dataclasses

import pytest

from factory.catalog import instance_by_name
from factory.codegen import render
from factory.device import DEFAULT_TARGET
from factory.ops.base import Buf, Launch, Memset
from factory.ops.conv_bwd_weight import SOLVER
from factory.ops.conv_bwd_weight.common import STAGING_ALIGN, Reduction, grid_finish_refusal
from factory.ops.conv_bwd_weight.mma import MmaParams
from factory.ops.conv_bwd_weight.wgmma import WgmmaParams
from factory.problem import DType, Layout

RESNET_1X1 = SOLVER.parse_problem("N=32,G=1,C=512,K=128,input=28x28,filter=1x1", Layout.NHWGC, DType.FP16)
PREFIX = "conv_bwd_weight_2d_nhwgc_fp16_pw_"


def test_coop_plan_zeroes_one_counter_a_tile_after_the_partials_and_launches_cooperatively() -> None:
    inst = instance_by_name(PREFIX + "b64x128x64_p6_v8x8_sk16_coop")
    plan = SOLVER.launch_plan(inst.family, inst.params, RESNET_1X1)
    memset, main = plan.steps
    assert isinstance(memset, Memset) and isinstance(main, Launch)
    assert main.entry == "kf_main" and main.cooperative and main.grid == (2 * 4, 1, 16)
    partials = 4 * 128 * 512 * 16  # fp32, one weight-sized slice a split
    counters_at = -(-partials // STAGING_ALIGN) * STAGING_ALIGN
    assert (memset.buffer, memset.offset, memset.nbytes) == ("workspace", counters_at, 4 * 8)
    assert plan.workspace_bytes == counters_at + 4 * 8
    # The partials go to the workspace's start, the sums to the output: after the four leading parameters.
    assert main.args[0]["wei"] == Buf("workspace")
    assert main.args[4:6] == (Buf("workspace", counters_at), Buf("grad_weight"))
    twin = instance_by_name(PREFIX + "b64x128x64_p6_v8x8_sk16_twostage")
    twin_plan = SOLVER.launch_plan(twin.family, twin.params, RESNET_1X1)
    assert [s.entry for s in twin_plan.steps if isinstance(s, Launch)] == ["kf_main", "kf_finalize"]
    assert not any(isinstance(s, Launch) and s.cooperative for s in twin_plan.steps)


def test_coop_refuses_grids_that_cannot_all_be_resident() -> None:
    fits = instance_by_name(PREFIX + "b64x128x64_p6_v8x8_sk16_coop")  # 8 tiles x 16 splits = 128 blocks
    too_many = instance_by_name(PREFIX + "b64x64x64_p6_v8x8_sk32_coop")  # 16 tiles x 32 = 512
    assert fits.why_not(RESNET_1X1, DEFAULT_TARGET) is None
    why = too_many.why_not(RESNET_1X1, DEFAULT_TARGET)
    assert why is not None and "512 must be resident" in why
    fewer = dataclasses.replace(DEFAULT_TARGET, processors=100)
    assert "128 must be resident" in (fits.why_not(RESNET_1X1, fewer) or "")


def test_only_a_family_that_finishes_its_sums_accepts_coop() -> None:
    mma = instance_by_name("conv_bwd_weight_2d_nhwgc_fp16_mma_b128x128x32_w2x4_p3_v8x1_i32_sk16_twostage")
    with pytest.raises(ValueError, match="coop"):
        MmaParams(**{**dataclasses.asdict(mma.params), "reduction": Reduction.COOP})
    wgmma = instance_by_name("conv_bwd_weight_2d_nhwgc_fp16_wgmma_b128x128x32_g2x1_sl1_p4_v8x8_i32_sk16_twostage")
    WgmmaParams(**{**dataclasses.asdict(wgmma.params), "reduction": Reduction.COOP})  # accepted


R2PLUS1D = SOLVER.parse_problem("N=4,G=1,C=64,K=64,input=16x28x28,filter=3x1x1,pad=1x0x0", Layout.NHWGC, DType.FP16)
R2PLUS1D_WGMMA = "conv_bwd_weight_3d_nhwgc_fp16_wgmma_b64x64x32_g1x1_sl4_p3_v8x8_i32_sk32_"


def test_grid_finish_plan_appends_the_counter_and_output_and_drops_kf_finalize() -> None:
    inst = instance_by_name(R2PLUS1D_WGMMA + "coop")
    memset, main = SOLVER.launch_plan(inst.family, inst.params, R2PLUS1D).steps
    assert isinstance(memset, Memset) and isinstance(main, Launch) and main.cooperative
    assert main.grid == (3, 1, 32)  # 64 rows x 3 column tiles of 64 (C x 3 taps), 32 splits
    partials = 4 * 64 * 64 * 3 * 32
    counters_at = -(-partials // STAGING_ALIGN) * STAGING_ALIGN
    assert (memset.offset, memset.nbytes) == (counters_at, 4)  # one counter for the whole launch
    # kf_main(conv, epilogue, r_per_split, split_stride, counter, output): the finish's two come last.
    assert main.args[0]["wei"] == Buf("workspace") and len(main.args) == 6
    assert main.args[4:] == (Buf("workspace", counters_at), Buf("grad_weight"))
    twin = instance_by_name(R2PLUS1D_WGMMA + "twostage")
    twin_main = SOLVER.launch_plan(twin.family, twin.params, R2PLUS1D).steps[0]
    assert twin_main.args == main.args[:4] and twin_main.grid == main.grid and not twin_main.cooperative


def test_grid_finish_is_rendered_only_into_coop_sources() -> None:
    coop, twin = (render(instance_by_name(R2PLUS1D_WGMMA + red)) for red in ("coop", "twostage"))
    assert "kf_splitk_finish_in_grid<" in coop and "kf_grid_sync" in coop
    assert "kf_splitk_finish_in_grid" not in twin and "kf_grid_sync" not in twin


def test_grid_finish_refusals_name_the_blocks_and_the_weight() -> None:
    too_many = instance_by_name("conv_bwd_weight_3d_nhwgc_fp16_wgmma_b64x64x32_g1x1_sl1_p4_v8x8_i32_sk40_coop")
    assert too_many.why_not(R2PLUS1D, DEFAULT_TARGET) is None  # 3 x 40 = 120 blocks
    fewer = dataclasses.replace(DEFAULT_TARGET, processors=100)
    assert "120 must be resident" in (too_many.why_not(R2PLUS1D, fewer) or "")
    resnext = SOLVER.parse_problem("N=32,G=32,C=16,K=16,input=28x28,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    gwl = "conv_bwd_weight_2d_nhwgc_fp16_gwl_g4_j9_b4x32_p2_k3x3s1x1d1x1_c16k16_sk{}_coop"
    assert instance_by_name(gwl.format(16)).why_not(resnext, DEFAULT_TARGET) is None  # 8 chunks x 16
    assert "256 must be resident" in (instance_by_name(gwl.format(32)).why_not(resnext, DEFAULT_TARGET) or "")


@pytest.mark.parametrize(("splits", "coop_first"), [(8, True), (16, True), (64, False)])
def test_prior_puts_coop_above_its_twin_up_to_16_splits(splits: int, coop_first: bool) -> None:
    scores = {red: SOLVER.heuristic_score("pw", instance_by_name(f"{PREFIX}b64x64x64_p6_v8x8_sk{splits}_{red}").params,
                                          SOLVER.parse_problem("N=2,G=1,C=64,K=64,input=30x30,filter=1x1",
                                                               Layout.NHWGC, DType.FP16), DEFAULT_TARGET)
              for red in ("coop", "twostage")}
    assert (scores["coop"] > scores["twostage"]) is coop_first


def test_grid_finish_refuses_a_weight_that_is_not_whole_fours() -> None:
    """The finish sums four consecutive outputs a thread (16-byte loads of every split's slice)."""
    coop = instance_by_name(R2PLUS1D_WGMMA + "coop").params
    odd = SOLVER.parse_problem("N=2,G=1,C=7,K=9,input=9x9,filter=1x1", Layout.NHWGC, DType.FP16)  # 63 outputs
    assert "the weight has 63" in (grid_finish_refusal(coop, 1, odd, DEFAULT_TARGET) or "")
    assert grid_finish_refusal(coop, 1, R2PLUS1D, DEFAULT_TARGET) is None
    twin = instance_by_name(R2PLUS1D_WGMMA + "twostage").params
    assert grid_finish_refusal(twin, 10_000, odd, DEFAULT_TARGET) is None  # only coop points meet
