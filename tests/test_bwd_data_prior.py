"""The backward-data prior where the H100 showed it wrong on fresh problems (bench/NOTES.md §55): a
depthwise NHWGC thread's per-row weight loads and held values, and short sums left to `direct`; and
wgmma's occupancy and overlapped stages on the suite's dense rows (§59); channels-last depthwise layers
on `dwc` (§68)."""

from __future__ import annotations

import math

import pytest

from factory.device import target_for_device
from factory.ops import solver_for
from factory.ops.conv_bwd_data.dwr import lane_weight_cost
from factory.ops.conv.tile_store import TileStore
from factory.ops.conv_bwd_data.wgmma import WgmmaParams
from factory.problem import DType, Layout, Op
from factory.selector import heuristic_pick, lookup

H100 = target_for_device("sm_90", 132)
SOLVER = solver_for(Op.CONV_BWD_DATA)
# Seed 83 on the H100: v4 2x4 tiles picked, 300 us; v1 1x16 tiles 46.7 us.
LONG_FILTER = "N=32,G=264,C=1,K=1,input=14x14,filter=12x12,pad=5"
# Seed 83 on the H100: an mma tile picked, 415 us; direct 83 us.
SHORT_SUM = "N=64,G=4,C=8,K=8,input=87x87,filter=1x1"


def _problem(spec: str, layout: Layout = Layout.NHWGC, dtype: DType = DType.FP32):
    return SOLVER.parse_problem(spec, layout, dtype)


def _score(problem, suffix: str) -> float:
    dwr = SOLVER.family("dwr")
    return SOLVER.heuristic_score("dwr", dwr.parse_suffix(suffix), problem, H100)


def test_a_long_filter_takes_wide_tiles_of_one_group_in_nhwgc():
    problem = _problem(LONG_FILTER)
    assert _score(problem, "t128_v1_b1x16_k12x12s1x1d1x1") > _score(problem, "t256_v4_b2x4_k12x12s1x1d1x1")
    within_dwr = heuristic_pick(problem, [i for i in lookup(problem, target=H100) if i.family == "dwr"], H100)
    assert within_dwr.params.vector < 4, within_dwr.name


# H100 (bench/NOTES.md 68), channels-last depthwise layers: dwc's best 0.54-1.0x the time of what the prior
# served before it (dwr), so it ranks first there: the public suite's MobileNetV1 layer, a 1-D layer of 15
# taps, ConvNeXt's 7x7 layer and the 12x12 filter above (dwc 38.9 us, dwr's 1x16 tiles 47.1).
CHANNELS_LAST = ["N=64,G=512,C=1,K=1,input=14x14,filter=3x3,pad=1", "N=64,G=120,C=1,K=1,input=3171,filter=15,pad=7",
                 "N=64,G=192,C=1,K=1,input=28x28,filter=7x7,pad=3", LONG_FILTER]


@pytest.mark.parametrize("spec", CHANNELS_LAST)
def test_channels_last_depthwise_layers_go_to_the_shared_window_family(spec):
    for dtype in (DType.FP16, DType.BF16, DType.FP32):
        pick = heuristic_pick(_problem(spec, dtype=dtype), target=H100)
        assert pick.family == "dwc", (dtype, pick.name)


def test_dwc_prefers_block_tiles_that_cover_the_plane():
    """16x16 tiles against 4x32 ones on a 12x60 plane (70 % and 94 % of their positions in the plane) and
    against 8x8 ones on a 20x20 plane (39 % and 69 %); on 14x14, where both cover 77 %, 16x16 tiles load
    less halo than 4x16 ones."""
    dwc = SOLVER.family("dwc")
    square = "t256_v4_c4_a4_b1x4_k3x3s1x1d1x1"
    for plane, better, worse in (("12x60", "t256_v4_c8_a8_b1x4_k3x3s1x1d1x1", square),
                                 ("20x20", "t128_v4_c8_a2_b1x4_k3x3s1x1d1x1", square),
                                 ("14x14", square, "t128_v4_c8_a4_b1x4_k3x3s1x1d1x1")):
        problem = _problem(f"N=64,G=512,C=1,K=1,input={plane},filter=3x3,pad=1", dtype=DType.FP16)
        served = {i.name.split("_dwc_")[-1] for i in lookup(problem, target=H100) if i.family == "dwc"}
        assert {better, worse} <= served, plane
        assert (SOLVER.heuristic_score("dwc", dwc.parse_suffix(better), problem, H100)
                > SOLVER.heuristic_score("dwc", dwc.parse_suffix(worse), problem, H100)), plane


@pytest.mark.parametrize(("suffix", "cost"), [("t256_v1_b1x8_k3x3s1x1d1x1", 0.0),  # the reference tile
                                              ("t256_v1_b2x4_k3x3s1x1d1x1", 0.4),  # twice its weight loads
                                              ("t256_v8_b1x8_k3x3s1x1d1x1", 0.4 * math.log2(144 / 64))])  # 64 sums, 80 window
def test_weight_loads_and_held_values_past_a_1x8_tile_cost_in_nhwgc(suffix, cost):
    dwr = SOLVER.family("dwr")
    assert lane_weight_cost(dwr.parse_suffix(suffix)) == pytest.approx(cost, abs=0.05)


def test_the_weight_term_is_nhwgc_only():
    problem = _problem(LONG_FILTER, Layout.NGCHW)
    wide, narrow = "t256_v1_b1x16_k12x12s1x1d1x1", "t256_v1_b1x2_k12x12s1x1d1x1"
    nhwgc = _problem(LONG_FILTER)
    assert _score(nhwgc, wide) - _score(nhwgc, narrow) > _score(problem, wide) - _score(problem, narrow) + 1.0


def test_a_short_sum_goes_to_direct():
    assert heuristic_pick(_problem(SHORT_SUM), target=H100).family == "direct"
    # 9 taps make the sum 72 products: a matrix family keeps it (gwl, grouped at stride 1, over the
    # implicit GEMM: bench/NOTES.md 84).
    assert heuristic_pick(_problem("N=64,G=4,C=8,K=8,input=87x87,filter=3x3,pad=1"), target=H100).family == "gwl"


# The suite's resnet_s3_s2 fp16 NHWGC row on the H100 (bench/NOTES.md §59): wgmma 128x128 tiles 46.0 us,
# the same two blocks an SM 39.2 us, 192x128 38.9 us; the best, 128x256 over four warpgroups, 34.6 us.
DENSE_STRIDED = "N=32,G=1,C=256,K=256,input=28x28,filter=3x3,stride=2,pad=1"


def _wgmma_score(problem, tile: tuple[int, int, int, int], stages: int, **options) -> float:
    block_m, block_n, groups_m, groups_n = tile
    params = WgmmaParams(block_m, block_n, 64, groups_m, groups_n, stages, 8, 8, store=TileStore.STAGED, **options)
    return SOLVER.heuristic_score("wgmma", params, problem, H100)


def test_wgmma_prefers_two_blocks_an_sm_and_the_stage_left_running():
    problem = _problem(DENSE_STRIDED, dtype=DType.FP16)
    square, narrow = (128, 128, 2, 1), (128, 64, 2, 1)
    assert _wgmma_score(problem, square, 3, min_blocks=2) > _wgmma_score(problem, square, 3)
    assert _wgmma_score(problem, square, 4, overlap=True) > _wgmma_score(problem, square, 4)
    # Tiles that fit two blocks an SM unbounded gain nothing from the cap (128x64: 1.00x).
    assert _wgmma_score(problem, narrow, 3, min_blocks=2) == _wgmma_score(problem, narrow, 3)
    pick = heuristic_pick(problem, target=H100)
    assert pick.family == "wgmma" and pick.params.block_m != 192, pick.name


# Small NGCHW problems (under 4 MB) on the H100 (bench/NOTES.md §59): seed 107's 3-D layer summing 6480
# products an element ran 84.9 us through the transposing pass and 182.8 us in place (picked); seed 103's
# 3x3 layer summing 144 ran 1.46x slower through it.
LONG_SUM_SMALL = "N=1,G=1,C=16,K=240,input=6x17x17,filter=3x3x3,pad=1"
SHORT_SUM_SMALL = "N=8,G=10,C=16,K=16,input=10x10,filter=3x3,pad=1"


@pytest.mark.parametrize(("spec", "transposed"), [(LONG_SUM_SMALL, True), (SHORT_SUM_SMALL, False)])
def test_small_ngchw_problems_take_the_transposing_pass_only_for_long_sums(spec: str, transposed: bool):
    problem = _problem(spec, Layout.NGCHW, DType.FP16)
    pick = heuristic_pick(problem, target=H100)
    assert pick.family in ("mma", "wgmma") and pick.params.transpose is transposed, pick.name


# Seed 107 on the H100: K = 281 leaves only element-sized output-gradient chunks; wgmma's picked, 1660 us,
# mma's with the same chunks 1053 us.
ODD_CHANNELS = "N=128,G=1,C=348,K=281,input=40x40,filter=1x1,stride=2"


def test_element_sized_output_gradient_chunks_go_to_mma_not_wgmma():
    pick = heuristic_pick(_problem(ODD_CHANNELS, dtype=DType.FP16), target=H100)
    assert pick.family == "mma", pick.name


# dwp on the H100 (bench/NOTES.md 62): whole planes copied 16 bytes at a time won every NGCHW layer of small
# planes (the suite's 14x14 G=512 row: 24.0 us against dwr's 35.8); a 1-D layer of 64 planes, whose
# four-plane blocks fill 16 SMs, ran 14.6 us on dwp and 6.1 on dwr (random seed 109).
SMALL_PLANES = "N=64,G=512,C=1,K=1,input=14x14,filter=3x3,pad=1"
FEW_PLANES = "N=2,G=32,C=1,K=1,input=5124,filter=17,stride=2,pad=8"


def test_small_planes_go_to_dwm_or_dwp_and_a_grid_short_of_the_sms_does_not():
    # bench/NOTES.md 66: on 14x14 planes dwm's best ran 0.90-0.97x dwp's in 16-bit; dwm takes no fp32.
    assert heuristic_pick(_problem(SMALL_PLANES, Layout.NGCHW, DType.FP16), target=H100).family == "dwm"
    assert heuristic_pick(_problem(SMALL_PLANES, Layout.NGCHW, DType.FP32), target=H100).family == "dwp"
    assert heuristic_pick(_problem(FEW_PLANES, Layout.NGCHW, DType.BF16), target=H100).family not in ("dwp", "dwm")


# bench/NOTES.md 66 (every dwm and dwp candidate of the small-planes and ConvNeXt suites timed on the H100).
@pytest.mark.parametrize("spec, family", [
    ("N=64,G=384,C=1,K=1,input=14x14,filter=7x7,pad=3", "dwm"),  # dwm's best 0.64x dwp's: taps on mma
    ("N=64,G=192,C=1,K=1,input=28x28,filter=3x3,pad=1", "dwm"),  # 0.76x
    ("N=64,G=960,C=1,K=1,input=7x7,filter=3x3,pad=1", "dwp"),  # 1.10x: 7-line planes, 9 taps
])
def test_depthwise_16_bit_planes_go_to_the_family_that_ran_faster(spec: str, family: str):
    assert heuristic_pick(_problem(spec, Layout.NGCHW, DType.FP16), target=H100).family == family


def test_dwm_fills_its_lanes_with_lines_before_it_takes_planes_one_at_a_time():
    # 7x7 planes span 7 16-byte lines: four planes a warp ran 0.57x the time of one (fp16, G=768, 7x7 filter);
    # 14x14 planes span 26: one plane a warp ran 0.86x the time of four (G=384).
    for plane, groups, best_depth in (("7x7", 768, 4), ("14x14", 384, 1)):
        problem = _problem(f"N=64,G={groups},C=1,K=1,input={plane},filter=7x7,pad=3", Layout.NGCHW, DType.FP16)
        dwm = [c for c in lookup(problem, target=H100) if c.family == "dwm"]
        first = max(dwm, key=lambda c: SOLVER.heuristic_score("dwm", c.params, problem, H100))
        assert first.params.depth == best_depth, first.name


def test_dwp_prefers_a_grid_that_fills_the_sms():
    problem = _problem(FEW_PLANES, Layout.NGCHW, DType.BF16)
    dwp = SOLVER.family("dwp")
    four, eight = (dwp.parse_suffix(f"t256_b1x8_p{p}_k17s2d1") for p in (4, 8))
    assert SOLVER.heuristic_score("dwp", four, problem, H100) > SOLVER.heuristic_score("dwp", eight, problem, H100) + 0.5


@pytest.mark.parametrize("spec, dtype, resident", [
    # bench/NOTES.md 64, the 40 shipped dwp problems: resident blocks faster on 7 of 11 strided layers,
    # on 5 of 29 others.
    ("N=64,G=192,C=1,K=1,input=56x56,filter=3x3,stride=2,pad=1", DType.FP16, True),
    ("N=32,G=240,C=1,K=1,input=28x28,filter=5x5,stride=2,pad=2", DType.FP32, True),
    ("N=64,G=512,C=1,K=1,input=14x14,filter=3x3,pad=1", DType.FP32, False),
    ("N=64,G=512,C=1,K=1,input=14x14,filter=3x3,pad=1", DType.FP16, False),
    ("N=64,G=384,C=1,K=1,input=14x14,filter=7x7,pad=3", DType.FP16, False),
])
def test_dwp_keeps_blocks_resident_for_strided_planes_only(spec: str, dtype: DType, resident: bool):
    problem = _problem(spec, Layout.NGCHW, dtype)  # dwp's own order (16-bit planes may go to dwm)
    best = {kept: max(SOLVER.heuristic_score("dwp", i.params, problem, H100)
                      for i in lookup(problem, target=H100) if i.family == "dwp" and bool(i.params.resident) is kept)
            for kept in (False, True)}
    assert (best[True] - best[False] > 0.02) if resident else (best[False] - best[True] > 0.05), best


def test_channels_last_groups_of_few_channels_take_narrow_vectors():
    # Seed 111 on the H100: direct with 4-channel vectors picked, 823 us; 2-channel vectors 500 us.
    problem = _problem("N=16,G=243,C=4,K=4,input=35x35,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    pick = heuristic_pick(problem, target=H100)
    assert pick.family == "direct" and pick.params.vector <= 2, pick.name


# Measured on the H100 (bench/NOTES.md §73): on pointwise layers `pw` ran 0.46-1.13x the time of the best
# implicit-GEMM point (geomean 0.82x; MobileNetV2's C=160 K=960 7x7 NGCHW: 22.9 against 39.7 us, where the
# prior before it picked a transposing mma tile, 55.2), and on two-channel groups 6-11x `direct`'s.
@pytest.mark.parametrize("layout", [Layout.NHWGC, Layout.GNHWC, Layout.NGCHW, Layout.NGCHW_GKYXC])
@pytest.mark.parametrize("spec", ["N=64,G=1,C=160,K=960,input=7x7,filter=1x1",
                                  "N=32,G=1,C=512,K=128,input=28x28,filter=1x1",
                                  "N=64,G=1,C=24,K=144,input=56x56,filter=1x1"])
def test_pointwise_layers_go_to_pw(spec, layout):
    assert heuristic_pick(_problem(spec, layout, DType.FP16), target=H100).family == "pw"


def test_two_channel_groups_are_not_pw():
    problem = _problem("N=32,G=244,C=2,K=2,input=20x20,filter=1x1", Layout.NHWGC, DType.FP16)
    assert not [c for c in lookup(problem, target=H100) if c.family == "pw"]
    assert heuristic_pick(problem, target=H100).family == "direct"


# Measured on the H100 (bench/NOTES.md §75): on strided 1x1 layers pw ran 0.68-0.81x the best other family on
# ResNet-50's downsampling shortcuts and 1.10-1.32x `mma`'s time on layers under a megabyte of grad_input.
def test_large_strided_pointwise_layers_go_to_pw_and_small_ones_to_mma():
    large = _problem("N=32,G=1,C=256,K=512,input=56x56,filter=1x1,stride=2", Layout.NHWGC, DType.FP16)
    small = _problem("N=32,G=1,C=152,K=32,input=8x8,filter=1x1,stride=2", Layout.GNHWC, DType.BF16)
    assert heuristic_pick(large, target=H100).family == "pw"
    assert heuristic_pick(small, target=H100).family == "mma"


def test_strided_pw_is_channels_last_as_given_or_copied_with_staged_stores_only():
    ngchw = _problem("N=32,G=1,C=256,K=512,input=56x56,filter=1x1,stride=2", Layout.NGCHW, DType.FP16)
    on_copies = [c for c in lookup(ngchw, target=H100) if c.family == "pw"]
    assert on_copies and all(c.params.transpose and c.params.store is TileStore.STAGED for c in on_copies)
    nhwgc = _problem("N=32,G=1,C=256,K=512,input=56x56,filter=1x1,stride=2", Layout.NHWGC, DType.FP16)
    served = [c for c in lookup(nhwgc, target=H100) if c.family == "pw"]
    assert served and all(c.params.store is TileStore.STAGED for c in served)


def test_gwl_grids_sized_to_the_gpu_keep_the_fewest_walkers_for_many_groups():
    """gwl refuses grids far from two blocks an SM, but a layer with so many groups that its fewest walkers
    pass that still gets those (bench/NOTES.md 84)."""
    def grids(spec: str) -> set[tuple[int, int]]:
        problem = _problem(spec, dtype=DType.FP16)
        return {(math.ceil(problem.G / c.params.groups) * c.params.walkers, c.params.walkers)
                for c in lookup(problem, target=H100) if c.family == "gwl"}
    aim = 2 * H100.processors
    resnext = grids("N=32,G=32,C=32,K=32,input=14x14,filter=3x3,pad=1")
    assert resnext and all(aim / 2**1.5 <= blocks <= aim * 2**1.5 for blocks, _ in resnext)
    assert {walkers for _, walkers in grids("N=8,G=4096,C=8,K=8,input=14x14,filter=3x3,pad=1")} == {4}
