"""The coop split-K reduction (pw backward-weight): its launch plan, where it applies, and its prior term.

The host emulator cannot run a cooperative launch (its blocks wait for each other; the emulator runs one
block at a time), so these check the plan and the choices; tests/test_gpu_pointwise.py runs every coop
instance on the GPU.
"""

from __future__ import annotations

import dataclasses

import pytest

from factory.catalog import instance_by_name
from factory.device import DEFAULT_TARGET
from factory.ops.base import Buf, Launch, Memset
from factory.ops.conv_bwd_weight import SOLVER
from factory.ops.conv_bwd_weight.common import STAGING_ALIGN, Reduction
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


def test_only_a_family_that_finishes_its_tiles_accepts_coop() -> None:
    wgmma = instance_by_name("conv_bwd_weight_2d_nhwgc_fp16_wgmma_b128x128x32_g2x1_sl1_p4_v8x8_i32_sk16_twostage")
    with pytest.raises(ValueError, match="coop"):
        WgmmaParams(**{**dataclasses.asdict(wgmma.params), "reduction": Reduction.COOP})


@pytest.mark.parametrize(("splits", "coop_first"), [(8, True), (16, True), (64, False)])
def test_prior_puts_coop_above_its_twin_up_to_16_splits(splits: int, coop_first: bool) -> None:
    scores = {red: SOLVER.heuristic_score("pw", instance_by_name(f"{PREFIX}b64x64x64_p6_v8x8_sk{splits}_{red}").params,
                                          SOLVER.parse_problem("N=2,G=1,C=64,K=64,input=30x30,filter=1x1",
                                                               Layout.NHWGC, DType.FP16), DEFAULT_TARGET)
              for red in ("coop", "twostage")}
    assert (scores["coop"] > scores["twostage"]) is coop_first
