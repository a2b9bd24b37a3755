"""`gwl`'s tuning points for a problem: names that parse back, shared-memory pitches whose fragment reads
fall into distinct banks, and the refusals the catalog relies on (16-bit atomics, sets another point splits
the same way), and no instance for channels the instructions cannot tile."""

from __future__ import annotations

import pytest

from factory.catalog import specialized_instances
from factory.device import target_for_device
from factory.ops.conv.bank_pitch import most_on_one_bank
from factory.ops.conv_bwd_weight.gwl import MAX_ACC, MAX_THREADS, Gwl, grad_pitch, window_pitch
from factory.problem import DType, Layout, parse_conv_problem

H100 = target_for_device("sm_90", 132)
RESNEXT = "N=32,G=32,C=16,K=16,input=28x28,filter=3x3,pad=1"
REGNET = "N=32,G=14,C=24,K=24,input=28x28,filter=3x3,pad=1"


def _own(spec: str, layout: Layout = Layout.NHWGC, dtype: DType = DType.FP16):
    problem = parse_conv_problem(spec, layout, dtype)
    return problem, [i for i in specialized_instances(problem) if i.family == "gwl"]


@pytest.mark.parametrize("spec", [RESNEXT, REGNET, "N=4,G=8,C=8,K=40,input=300,filter=9,pad=4"])
def test_names_parse_back_and_applicable_points_fit_registers_and_threads(spec):
    problem, own = _own(spec)
    applicable = [i for i in own if i.why_not(problem, H100) is None]
    assert applicable
    for inst in own:
        assert Gwl().parse_suffix(inst.name.split("_gwl_")[1]) == inst.params
    for inst in applicable:
        assert inst.params.accumulators() <= MAX_ACC and inst.params.threads <= MAX_THREADS


@pytest.mark.parametrize("spec", [RESNEXT, REGNET])
def test_unstrided_16_bit_fragment_reads_fall_into_distinct_banks(spec):
    _, own = _own(spec)
    for inst in own:
        window, grad = window_pitch(inst.params, 2), grad_pitch(inst.params, 2)
        assert most_on_one_bank(window * 2, 2) == 1, inst.name
        assert most_on_one_bank(grad * 2, 2) == 1, inst.name


def test_atomics_only_where_the_weight_gradient_is_fp32():
    for dtype, allowed in ((DType.FP16, False), (DType.BF16, False), (DType.BF16_FP32W, True), (DType.FP32, True)):
        problem, own = _own(RESNEXT, dtype=dtype)
        atomic = [i for i in own if i.params.reduction.value == "atomic"]
        assert atomic
        assert any(i.why_not(problem, H100) is None for i in atomic) is allowed, dtype


def test_a_point_whose_sets_a_smaller_one_splits_the_same_way_is_refused():
    problem, own = _own(RESNEXT)  # 18 column tiles: 9 and 18 a warp give 2 and 1 sets, 6 gives 3, 4 gives 5
    sets = {i.params.tiles: i.params.tap_sets() for i in own}
    assert sets == {4: 5, 6: 3, 9: 2, 18: 1}
    _, regnet = _own(REGNET)  # 27 tiles: 18 a warp gives 2 sets, 9 gives 3; none repeats
    assert all("same" not in (i.why_not(problem, H100) or "") for i in own)
    problem64, own64 = _own("N=8,G=2,C=8,K=8,input=20x20,filter=1x1")  # one tile: every size is one set
    reasons = {i.params.tiles: i.why_not(problem64, H100) or "" for i in own64 if i.params.reduction.value == "twostage"}
    assert "same 1 sets" in reasons[6] and "same 1 sets" in reasons[18] and "same" not in reasons[4]
    assert regnet


@pytest.mark.parametrize("spec", ["N=2,G=4,C=4,K=8,input=20x20,filter=3x3,pad=1",
                                  "N=2,G=4,C=8,K=72,input=20x20,filter=3x3,pad=1"])
def test_channels_the_tiles_cannot_hold_make_no_instance(spec):
    _, own = _own(spec)  # the channels field refuses them: no point is specialized for the problem
    assert own == []
