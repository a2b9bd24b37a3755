"""`kfactory bench --random`: reproducible draws, valid problems within the caps, the mix."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from factory.bench import random_cases as rc
from factory.bench.model import BenchError
from factory.bench.random_cases import (
    CONV_KINDS, DTYPES, LAYOUTS, MAX_CONV_MACS, MAX_TENSOR_BYTES, NORM_KINDS, draw, kind_of, parse_random_dtypes,
    random_meta,
)
from factory.bench.suite import OP_LAYOUTS
from factory.ops import SOLVERS
from factory.problem import DType, Layout, Op
from factory.selector import lookup

CONV, GN = Op.CONV_BWD_WEIGHT, Op.GROUPNORM_BWD


def _of(items, op):
    return [i for i in items if i.case.op is op]


def _keys(items):
    return [(i.case.name, i.problem.key) for i in items]


@pytest.fixture(scope="module")
def many():
    """500 draws per op, shared by the checks over many draws."""
    return draw(500, 2024)


# --- reproducibility -------------------------------------------------------------------------------
def test_same_seed_draws_the_same_problems_and_another_seed_others():
    a, b = draw(20, 7), draw(20, 7)
    assert _keys(a) == _keys(b)
    other = draw(20, 8)
    assert [i.problem.key for i in a] != [i.problem.key for i in other]
    assert len({i.problem.key for i in a} & {i.problem.key for i in other}) < 5
    assert all(i.case.name.startswith("rand_s8_") for i in other)


def test_fewer_problems_or_fewer_ops_draw_the_same_ones():
    full = draw(12, 3)
    assert [i.case.op for i in full] == [CONV] * 12 + [GN] * 12
    assert _keys(draw(5, 3)) == _keys(_of(full, CONV)[:5] + _of(full, GN)[:5])
    assert _keys(draw(12, 3, [GN])) == _keys(_of(full, GN))
    assert _keys(draw(12, 3, [GN, CONV])) == _keys(full)  # ops in one fixed order, whatever --ops says


def test_draws_are_pinned():
    """The committed random runs name their seed: the same seed must keep drawing the same problems.
    A change here changes every earlier run's problems: bump RANDOM_VERSION with it."""
    assert rc.RANDOM_VERSION == 1
    assert _keys(draw(2, 7)) == [
        ("rand_s7_000_dense_k1x1", "conv_bwd_weight:nhwgc:fp16:2d:N=8,G=1,C=24,K=91,input=13x13,filter=1x1,"
                                   "stride=1x1,pad=0x0,dilation=1x1"),
        ("rand_s7_001_dense_k1x1", "conv_bwd_weight:ngchw:fp16:2d:N=8,G=1,C=256,K=160,input=56x56,filter=1x1,"
                                   "stride=1x1,pad=0x0,dilation=1x1"),
        ("rand_s7_000_gn1d_g32", "groupnorm_bwd:ngchw:fp32:1d:N=2,C=64,G=32,input=590"),
        ("rand_s7_001_gn2d_g32", "groupnorm_bwd:ngchw:fp16:2d:N=8,C=160,G=32,input=10x10"),
    ]


# --- every draw valid and within the caps ------------------------------------------------------------
def _tensor_bytes(problem) -> int:
    if problem.op is CONV:
        t, w = problem.dtype.tensor.nbytes, problem.dtype.weight.nbytes
        return max(math.prod(problem.input_shape_logical) * t, math.prod(problem.output_shape_logical) * t,
                   math.prod(problem.weight_shape_logical) * w)
    return problem.numel * problem.dtype.tensor.nbytes


def test_every_draw_is_a_valid_problem_within_the_caps(many):
    assert len(_of(many, CONV)) == len(_of(many, GN)) == 500
    names = set()
    for item in many:
        op, problem = item.case.op, item.problem
        assert re.fullmatch(r"rand_s2024_\d{3}_[a-z0-9]+_[a-z0-9_]+", item.case.name), item.case.name
        assert (op, item.case.name) not in names
        names.add((op, item.case.name))
        # The suite's path: the case's sizes parse, with the op's own parser, to the item's problem.
        assert SOLVERS[op].parse_problem(item.case.spec(), item.layout, item.dtype) == problem
        assert item.case.dtypes == (item.dtype,) and item.case.layouts == (item.layout,)
        assert (problem.layout, problem.dtype) == (item.layout, item.dtype)
        assert item.layout in OP_LAYOUTS.get(op, tuple(Layout))
        assert item.dtype in [d for d, _ in DTYPES[op]]
        assert _tensor_bytes(problem) <= MAX_TENSOR_BYTES, item.case.name
        if op is CONV:
            assert min(problem.output) >= 1
            assert problem.macs <= MAX_CONV_MACS, item.case.name
            assert problem.N in (1, 2, 4, 8, 16, 32, 64, 128, 256)
        else:
            assert problem.C % problem.G == 0 and problem.G in (8, 16, 32) and 1 <= problem.N <= 64


def test_drawn_problems_have_instances():
    """As for the public suite: some catalog instance computes each drawn problem."""
    for item in draw(80, 99):
        assert lookup(item.problem), f"no instance computes {item.problem.key}"


# --- the mix -----------------------------------------------------------------------------------------
def test_conv_mix_covers_every_kind_layout_dtype_and_shape_feature(many):
    items = _of(many, CONV)[:300]
    kinds = Counter(kind_of(i) for i in items)
    assert set(kinds) == {k.tag for k in CONV_KINDS}
    assert kinds["dw2d"] > kinds["dw3d"]  # the weights show
    assert {i.layout for i in items} == {layout for layout, _ in LAYOUTS[CONV]} == set(Layout)
    assert {i.dtype for i in items} == {DType.FP16, DType.BF16, DType.FP32, DType.BF16_FP32W}
    problems = [i.problem for i in items]
    assert {p.ndim for p in problems} == {1, 2, 3}
    depthwise = [p for p in problems if p.C == p.K == 1]
    grouped = [p for p in problems if p.G > 1 and p.C > 1]
    dense = [p for p in problems if p.G == 1]
    assert depthwise and grouped and dense
    assert all(32 <= p.G <= 1024 for p in depthwise)
    assert all(p.C == p.K and 2 <= p.C <= 32 and 32 <= p.G * p.C <= 1024 for p in grouped)
    assert all(16 <= p.C <= 512 and 16 <= p.K <= 512 for p in dense)
    filters = {p.filter for p in problems}
    assert {(3, 3), (5, 5), (7, 7), (1, 1), (3, 3, 3), (1, 3, 3), (3, 1, 1)} <= filters
    assert any(p.filter[0] >= 9 and p.ndim == 2 for p in depthwise)  # the occasional large filter
    assert any(p.filter[-1] % 2 == 0 for p in depthwise)  # even filters
    assert any(p.ndim == 1 and p.filter[0] > 15 for p in depthwise)  # long 1-D filters
    assert any(max(p.stride) == 2 for p in problems) and any(max(p.dilation) == 2 for p in problems)
    assert any(not p.symmetric for p in problems)  # TensorFlow SAME padding
    assert any(p.input[-1] % 2 for p in problems if p.ndim >= 2)  # odd sizes
    assert any(p.input[-2] != p.input[-1] for p in problems if p.ndim >= 2)  # and non-square ones
    assert len({p.N for p in problems}) >= 8


def test_groupnorm_mix_covers_every_kind_layout_dtype_and_size(many):
    items = _of(many, GN)[:300]
    assert set(Counter(kind_of(i) for i in items)) == {k.tag for k in NORM_KINDS}
    assert {i.layout for i in items} == {Layout.NGCHW, Layout.NHWGC}
    assert {i.dtype for i in items} == {DType.FP16, DType.BF16, DType.FP32}
    problems = [i.problem for i in items]
    assert {p.ndim for p in problems} == {1, 2, 3}
    assert {p.G for p in problems} == {8, 16, 32}
    assert any(not p.affine for p in problems) and any(p.affine for p in problems)
    sizes = [_tensor_bytes(p) for p in problems]
    assert min(sizes) < 256 * 1024 and max(sizes) > 64 * 2**20  # launch-latency sized and large
    assert any(p.N % 2 for p in problems if p.N > 1)  # batches other than powers of two


def test_dtype_filter_restricts_the_draw():
    items = draw(30, 5, dtypes=[DType.FP32])
    assert {i.dtype for i in items} == {DType.FP32}
    wide = draw(30, 5, [CONV], dtypes=parse_random_dtypes(["bf16_fp32w"]))
    assert {i.dtype for i in wide} == {DType.BF16_FP32W}
    with pytest.raises(BenchError, match="leaves groupnorm_bwd no dtype"):
        draw(3, 5, dtypes=[DType.BF16_FP32W])
    with pytest.raises(BenchError, match="not int8"):
        parse_random_dtypes(["fp16", "int8"])
    assert parse_random_dtypes([]) is None


@pytest.mark.parametrize("call, message", [
    (lambda: draw(0, 1), "--random needs a number of problems >= 1"),
    (lambda: draw(3, -1), "--seed >= 0"),
    (lambda: draw(3, 1, [Op.CONV_BWD_DATA]), "not conv_bwd_data"),
])
def test_draw_errors(call, message):
    with pytest.raises(BenchError, match=message):
        call()


def test_meta_says_how_to_draw_again():
    items = draw(4, 9, [CONV])
    meta = random_meta(4, 9, [CONV], None, items)
    assert meta["n_per_op"] == 4 and meta["seed"] == 9 and meta["ops"] == ["conv_bwd_weight"]
    assert meta["version"] == rc.RANDOM_VERSION and sum(meta["kinds"]["conv_bwd_weight"].values()) == 4
    assert meta["command"] == "kfactory bench --random 4 --seed 9 --ops conv_bwd_weight"
