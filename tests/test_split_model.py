"""The prior's split-K time model for the implicit-GEMM backward-weight families (split_model.py)."""

from __future__ import annotations

import dataclasses

import pytest

from factory.device import target_for_device
from factory.ops import solver_for
from factory.ops.conv_bwd_weight.split_model import GEMM_SPLITS, SPLITS
from factory.problem import DType, Layout, Op
from factory.selector import heuristic_pick, lookup

H100 = target_for_device("sm_90", 132)  # what the tuner sees on an H100: wgmma included
SMS = H100.processors


def test_a_grid_that_fills_the_device_with_a_short_reduction_is_not_split():
    assert GEMM_SPLITS.best(blocks=8 * SMS, steps=4, outputs=10**6, processors=SMS) == 1


def test_few_tiles_with_a_long_reduction_are_split():
    # 133 tiles of a 205-step reduction: the case where the fill alone picked split 1 (H100: 2.9x the best).
    assert GEMM_SPLITS.best(blocks=133, steps=205, outputs=403 * 1215, processors=SMS) > 1


@pytest.mark.parametrize("blocks", [1, 16, 133, 1000])
def test_a_longer_reduction_never_asks_for_fewer_splits(blocks):
    splits = [GEMM_SPLITS.best(blocks, steps, 10**5, SMS) for steps in (2, 8, 32, 128, 512, 2048, 8192)]
    assert splits == sorted(splits)
    assert splits[0] == 1 and splits[-1] > 1


def test_the_best_split_loses_nothing_and_others_lose_time():
    best = GEMM_SPLITS.best(133, 205, 10**5, SMS)
    assert GEMM_SPLITS.lost(133, 205, 10**5, best, SMS) == 0.0
    assert all(GEMM_SPLITS.lost(133, 205, 10**5, s, SMS) >= 0.0 for s in SPLITS if s <= 205)
    assert GEMM_SPLITS.lost(133, 205, 10**5, 1, SMS) > 0.3  # split 1: a 205-step chain on one wave


def test_dearer_partial_sums_ask_for_fewer_splits():
    cheap, dear = (dataclasses.replace(GEMM_SPLITS, partial_cost=c) for c in (0.0, 100.0))
    assert dear.best(133, 205, 10**6, SMS) < cheap.best(133, 205, 10**6, SMS)


def test_the_best_split_is_never_more_than_the_reduction_has_steps():
    assert GEMM_SPLITS.best(1, 3, 10, SMS) <= 3
    assert GEMM_SPLITS.best(1, 0, 10, SMS) == 1


def _gemm_pick(spec: str, layout: Layout = Layout.GNHWC):
    solver = solver_for(Op.CONV_BWD_WEIGHT)
    problem = solver.parse_problem(spec, layout, DType.FP16)
    gemm = [c for c in lookup(problem, target=H100) if c.family in ("mma", "wgmma")]
    return heuristic_pick(problem, gemm, H100)


def test_the_prior_splits_a_dense_layer_of_few_tiles_and_a_long_reduction():
    # Measured on the H100: the prior's pick was wgmma's 64x64 tile unsplit (2.9x the best); mma's 64x64
    # tile ran 508 us unsplit, 297 at split 4, 268 at split 16.
    assert _gemm_pick("N=4,G=1,C=135,K=403,input=91x18,filter=3x3,pad=1").params.split_k > 1


def test_the_prior_does_not_split_a_layer_whose_tiles_fill_the_device_over_a_short_reduction():
    assert _gemm_pick("N=1,G=1,C=512,K=512,input=7x7,filter=3x3,pad=1").params.split_k == 1
