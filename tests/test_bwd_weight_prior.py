"""The backward-weight prior across families: a GEMM tile that holds one small group loses to the lane
families outside NHWGC, and keeps its place where tiles hold groups side by side."""

from __future__ import annotations

import pytest

from factory.device import target_for_device
from factory.ops import solver_for
from factory.ops.conv_bwd_weight.mfma import Mfma
from factory.ops.conv_bwd_weight.mma import Mma
from factory.problem import DType, Layout, Op
from factory.selector import heuristic_pick, lookup

H100 = target_for_device("sm_90", 132)
# Measured on the H100 (seed 51): mma picked, `dw` 2.39x faster (bench/NOTES.md §35).
TWO_CHANNEL_GROUPS = "N=32,G=138,C=2,K=2,input=37x37,filter=3x3,pad=1"


def _pick(spec: str, layout: Layout):
    problem = solver_for(Op.CONV_BWD_WEIGHT).parse_problem(spec, layout, DType("bf16_fp32w"))
    return heuristic_pick(problem, target=H100)


def test_two_channel_groups_outside_nhwgc_go_to_a_lane_family():
    assert _pick(TWO_CHANNEL_GROUPS, Layout.NGCHW).family == "dw"


@pytest.mark.parametrize(("used", "cost"), [(1.0, 0.0), (0.25, 0.0), (0.125, 0.3), (0.25 / 16, 1.2)])
def test_an_idle_tile_costs_a_third_a_halving_below_a_quarter_outside_nhwgc(used, cost):
    problem = solver_for(Op.CONV_BWD_WEIGHT).parse_problem(TWO_CHANNEL_GROUPS, Layout.NGCHW, DType.FP16)
    assert Mma().idle_tile(used, problem) == pytest.approx(cost)
    assert Mfma().idle_tile(used, problem) == 0.0  # measured on the H100 only
    channels_last = solver_for(Op.CONV_BWD_WEIGHT).parse_problem(TWO_CHANNEL_GROUPS, Layout.NHWGC, DType.FP16)
    assert Mma().idle_tile(used, channels_last) == 0.0


# Measured on the H100 (seed 71): the pick, dwr l32x8 with 2x2 blocks and split 256, ran 7.7x the best
# (bench/NOTES.md §52): 121 taps published through shared memory for 4.8 outputs a thread.
LONG_FILTER_FEW_OUTPUTS = "N=2,G=144,C=1,K=1,input=69x69,filter=11x11,pad=5"


def test_lanes_side_by_side_do_not_publish_many_taps_for_a_few_outputs():
    problem = solver_for(Op.CONV_BWD_WEIGHT).parse_problem(LONG_FILTER_FEW_OUTPUTS, Layout.NHWGC, DType.BF16)
    pick = heuristic_pick(problem, target=H100)
    assert not (pick.family == "dwr" and pick.params.threads_lane > 1), pick.name
    dwr = solver_for(Op.CONV_BWD_WEIGHT).family("dwr")
    few = dwr.parse_suffix("l32x8_v1_b2x2_k11x11s1d1_o3_sk256_twostage")
    many = dwr.parse_suffix("l32x8_v1_b16x4_k11x11s1d1_o1_sk1_direct")
    assert dwr.publish_cost(few, problem) > 1.0 and dwr.publish_cost(many, problem) == 0.0
    three = solver_for(Op.CONV_BWD_WEIGHT).parse_problem("N=2,G=144,C=1,K=1,input=69x69,filter=3x3,pad=1",
                                                         Layout.NHWGC, DType.BF16)
    assert dwr.publish_cost(dwr.parse_suffix("l32x8_v1_b2x2_k3x3s1d1_o3_sk256_twostage"), three) == 0.0


# Measured on the H100 (seed 93, fp16): `dl` picked, 803 us; a transposing wgmma point 215 us, in place
# 256 us. The output rows (79) take no chunks, so the in-place GEMM reads element by element. On fp32
# (seed 51, C=256 K=40 25x25) the pass lost: 114 against 59 us in place.
ODD_ROWS_POINTWISE = "N=64,G=1,C=16,K=80,input=79x79,filter=1x1"


@pytest.mark.parametrize(("dtype", "transposes"), [(DType.FP16, True), (DType.FP32, False)])
def test_a_16_bit_pointwise_layer_with_odd_rows_is_transposed(dtype, transposes):
    problem = solver_for(Op.CONV_BWD_WEIGHT).parse_problem(ODD_ROWS_POINTWISE, Layout.NGCHW_GKYXC, dtype)
    pick = heuristic_pick(problem, target=H100)
    assert getattr(pick.params, "transpose", False) is transposes, pick.name
    even = solver_for(Op.CONV_BWD_WEIGHT).parse_problem(ODD_ROWS_POINTWISE.replace("79x79", "80x80"),
                                                        Layout.NGCHW_GKYXC, dtype)
    assert not getattr(heuristic_pick(even, target=H100).params, "transpose", False)


# Measured on the H100 (seed 95): wgmma with 8-wide output-gradient chunks picked, 410 us; 2-wide 142 us.
# C = 153 takes no chunk wider than 1, and with element-wise B the wide A chunks ran slower (25 of 27 pairs).
ODD_CHANNELS = "N=32,G=1,C=153,K=40,input=65x65,filter=3x3,stride=2,pad=1"


def test_wgmma_keeps_narrow_output_gradient_chunks_beside_element_wise_weights():
    solver = solver_for(Op.CONV_BWD_WEIGHT)
    problem = solver.parse_problem(ODD_CHANNELS, Layout.GNHWC, DType.FP16)
    points = {c.name.split("_wgmma_")[1]: c.params for c in lookup(problem, target=H100) if c.family == "wgmma"}
    wide, narrow = (points[f"b64x64x32_g1x1_sl1_p4_v{a}x1_i32_sk16_atomic"] for a in (8, 2))
    assert solver.heuristic_score("wgmma", narrow, problem, H100) > solver.heuristic_score("wgmma", wide, problem, H100)
    pick = heuristic_pick(problem, target=H100)
    assert not (pick.family in ("mma", "wgmma") and pick.params.vector_a == 8), pick.name


# Measured on the H100 (seed 99): dwr l32x8 v4 1x8 split 64 picked, 126 us, at 13.5 outputs a thread for
# 51 taps; one lane a thread (l1x256 1x16) 36.6 us.
LONG_1D_FILTER = "N=8,G=128,C=1,K=1,input=857,filter=51,pad=25"


def test_a_long_1d_filter_does_not_publish_its_taps_for_a_few_outputs():
    problem = solver_for(Op.CONV_BWD_WEIGHT).parse_problem(LONG_1D_FILTER, Layout.NHWGC, DType.BF16)
    pick = heuristic_pick(problem, target=H100)
    assert pick.family == "dwr" and pick.params.threads_lane == 1, pick.name


def test_dwt_is_not_picked_where_dwr_serves():
    # Seed 101 on the H100: dwt picked, 26.2 us; dwr 9.1 us. No dwt point came within 1.21x of its problem's
    # best in 11 backward-weight DBs (bench/NOTES.md 63).
    problem = solver_for(Op.CONV_BWD_WEIGHT).parse_problem("N=4,G=111,C=1,K=1,input=8x8,filter=5x5,pad=2",
                                                           Layout.NGCHW, DType.FP16)
    assert heuristic_pick(problem, target=H100).family != "dwt"


# dwl on the H100 (bench/NOTES.md 70, bench/results/h100-dwl/): held-out channels-last 3x3 layer
# 34x62 G=64 N=32, dwl's best 1.11x faster than any other family's (dwh picked before: 1.67x the best);
# ConvNeXt-T's 28x28 7x7 layer, dwh's best 1.39x faster than dwl's; 1-D, dwl 1.26-1.32x faster than dwr at
# 15 taps, dwr 1.52x faster at 31 taps and 1.88x at 51. dwv on the H200 (bench/NOTES.md 91,
# bench/results/h200-dwv/long_1d.txt): 1.07x faster than dwl at 25 taps and 1.76x faster than dwr at 31,
# 0.97x dwl at 15; at 51 taps it is refused (its register budget).
@pytest.mark.parametrize(("spec", "family"), [
    ("N=32,G=64,C=1,K=1,input=34x62,filter=3x3,pad=1", "dwl"),
    ("N=64,G=192,C=1,K=1,input=28x28,filter=7x7,pad=3", "dwh"),
    ("N=32,G=256,C=1,K=1,input=2048,filter=15,pad=7", "dwl"),
    ("N=8,G=512,C=1,K=1,input=4000,filter=25,pad=12", "dwv"),
    ("N=16,G=256,C=1,K=1,input=1000,filter=31,pad=15", "dwv"),
    ("N=8,G=128,C=1,K=1,input=857,filter=51,pad=25", "dwr"),
])
def test_channels_last_depthwise_goes_to_dwl_up_to_the_filters_it_was_measured_faster_on(spec, family):
    problem = solver_for(Op.CONV_BWD_WEIGHT).parse_problem(spec, Layout.NHWGC, DType.FP16)
    assert heuristic_pick(problem, target=H100).family == family


# Measured on the H100 (bench/NOTES.md §71): on grouped channels-last layers with 8-64 channels a group the
# windowed family ran 1.5-2.2x faster than the best implicit-GEMM point (ResNeXt's stage 2: 44.6 against
# 77.0 us), and on a 1x1 layer `pw` ran 15.1 us where gwl's best took 17.3.
RESNEXT_STAGE2 = "N=32,G=32,C=16,K=16,input=28x28,filter=3x3,pad=1"
POINTWISE_64 = "N=64,G=1,C=64,K=64,input=28x28,filter=1x1"


@pytest.mark.parametrize("layout", [Layout.NHWGC, Layout.GNHWC])
def test_grouped_channels_last_layers_go_to_the_windowed_family(layout):
    assert _pick(RESNEXT_STAGE2, layout).family == "gwl"


def test_pointwise_layers_stay_with_pw():
    problem = solver_for(Op.CONV_BWD_WEIGHT).parse_problem(POINTWISE_64, Layout.NHWGC, DType.FP16)
    assert heuristic_pick(problem, target=H100).family == "pw"


# Measured on the H100 (bench/NOTES.md §72): on NGCHW pointwise layers whose runs of positions take
# 2-8-element chunks `pw` ran 1.1-2.8x faster than the best other family (resnet_1x1: 29.9 against 49.8 us;
# C=32 K=16 112x112: 47.9 against gwl's 174.5, which the prior had ranked first), while element-wise
# chunks of large odd runs lost (79x79, 15.7 MB of operands: 361 against 217 us for the transposing wgmma);
# there the pick is a point on channels-last copies (pw's or wgmma's).
@pytest.mark.parametrize("spec", ["N=32,G=1,C=512,K=128,input=28x28,filter=1x1",
                                  "N=64,G=1,C=32,K=16,input=112x112,filter=1x1",
                                  "N=64,G=1,C=64,K=384,input=14x14,filter=1x1"])
@pytest.mark.parametrize("layout", [Layout.NGCHW, Layout.NGCHW_GKYXC])
def test_ngchw_pointwise_layers_with_chunked_runs_go_to_pw(spec, layout):
    assert _pick(spec, layout).family == "pw"


def test_large_odd_runs_leave_pw_s_in_place_reads():
    assert _pick(ODD_ROWS_POINTWISE, Layout.NGCHW).params.transpose
