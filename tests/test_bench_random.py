"""`kfactory bench --random`: reproducible draws, valid problems within the caps, the mix, the CLI."""

from __future__ import annotations

import json
import math
import re
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from factory.bench import random_cases as rc
from factory.bench.model import BenchError, Row, Status, Timing
from factory.bench.random_cases import (
    CONV_KINDS, DTYPES, DWSEP_KINDS, LAYOUTS, MAX_CONV_MACS, MAX_TENSOR_BYTES, NORM_KINDS, draw, draw_item, kind_of,
    parse_random_dtypes, random_meta,
)
from factory.bench.report import print_table, problem_text
from factory.bench.suite import OP_LAYOUTS
from factory.ops import SOLVERS
from factory.problem import DType, Layout, Op
from factory.selector import lookup
from test_bench import CEIL, ReferenceKernel, _env, _one_error, fixed_timer, kfactory  # noqa: F401 (fixture)

CONV, GN, DATA, DWSEP = Op.CONV_BWD_WEIGHT, Op.GROUPNORM_BWD, Op.CONV_BWD_DATA, Op.DWSEP_CONV_FWD


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
    assert [i.case.op for i in full] == [CONV] * 12 + [GN] * 12 + [DATA] * 12 + [DWSEP] * 12
    assert _keys(draw(5, 3)) == _keys([i for op in (CONV, GN, DATA, DWSEP) for i in _of(full, op)[:5]])
    assert _keys(draw(12, 3, [GN])) == _keys(_of(full, GN))
    assert _keys(draw(12, 3, [DWSEP, DATA, GN, CONV])) == _keys(full)  # ops in one fixed order, whatever --ops says
    assert _keys(draw(12, 3, [CONV, GN])) == _keys(_of(full, CONV) + _of(full, GN))  # an op added later changes none


def test_draws_are_pinned():
    """The committed random runs name their seed: the same seed must keep drawing the same problems.
    A change here changes every earlier run's problems: bump RANDOM_VERSION with it."""
    assert rc.RANDOM_VERSION == 1
    assert _keys(draw(2, 7, [CONV, GN])) == [
        ("rand_s7_000_dense_k1x1", "conv_bwd_weight:nhwgc:fp16:2d:N=8,G=1,C=24,K=91,input=13x13,filter=1x1,"
                                   "stride=1x1,pad=0x0,dilation=1x1"),
        ("rand_s7_001_dense_k1x1", "conv_bwd_weight:ngchw:fp16:2d:N=8,G=1,C=256,K=160,input=56x56,filter=1x1,"
                                   "stride=1x1,pad=0x0,dilation=1x1"),
        ("rand_s7_000_gn1d_g32", "groupnorm_bwd:ngchw:fp32:1d:N=2,C=64,G=32,input=590"),
        ("rand_s7_001_gn2d_g32", "groupnorm_bwd:ngchw:fp16:2d:N=8,C=160,G=32,input=10x10"),
    ]
    assert _keys(draw(1, 7, [DATA])) == [
        ("rand_s7_000_dense3d_k1x3x3s2", "conv_bwd_data:gnhwc:fp16:3d:N=16,G=1,C=120,K=149,input=8x10x10,"
                                         "filter=1x3x3,stride=1x2x2,pad=0x1x1,dilation=1x1x1"),
    ]
    assert _keys(draw(2, 7, [DWSEP])) == [
        ("rand_s7_000_mnv1_k3x3", "dwsep_conv_fwd:nhwgc:bf16:2d:N=64,C=64,K=16,input=39x39,filter=3x3,stride=1x1,"
                                  "pad=1x1,dilation=1x1,act_dw=relu6,act_pw=relu6"),
        ("rand_s7_001_mnv2_k3x3", "dwsep_conv_fwd:nhwgc:bf16:2d:N=64,C=840,K=120,input=53x23,filter=3x3,stride=1x1,"
                                  "pad=1x1,dilation=1x1,act_dw=relu6"),
    ]


# --- every draw valid and within the caps ------------------------------------------------------------
def _tensor_bytes(problem) -> int:
    if problem.op is DWSEP:
        return max(t.nbytes for t in SOLVERS[DWSEP].tensors(problem))
    if problem.op in (CONV, DATA):
        t, w = problem.dtype.tensor.nbytes, problem.dtype.weight.nbytes
        return max(math.prod(problem.input_shape_logical) * t, math.prod(problem.output_shape_logical) * t,
                   math.prod(problem.weight_shape_logical) * w)
    return problem.numel * problem.dtype.tensor.nbytes


def test_every_draw_is_a_valid_problem_within_the_caps(many):
    assert len(_of(many, CONV)) == len(_of(many, GN)) == len(_of(many, DATA)) == len(_of(many, DWSEP)) == 500
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
        if op in (CONV, DATA, DWSEP):
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


def test_dwsep_draws_parse_repeat_and_cover_every_cell():
    """200 dwsep_conv_fwd draws: each parses back, is the same problem whenever (seed, index) is drawn, and
    together they cover both layouts, every dtype and rank, every kind, the biases and the activations."""
    items = draw(200, 31, [DWSEP])
    assert [i.case.op for i in items] == [DWSEP] * 200
    for index in (0, 57, 199):  # alone, with another N, or twice: the same problem
        assert _keys([draw_item(DWSEP, 31, index)]) == _keys([items[index]]) == _keys([draw_item(DWSEP, 31, index)])
    assert _keys(draw(40, 31, [DWSEP])) == _keys(items[:40])
    assert [i.problem.key for i in draw(20, 32, [DWSEP])] != [i.problem.key for i in items[:20]]
    for item in items:
        assert SOLVERS[DWSEP].parse_problem(item.case.spec(), item.layout, item.dtype) == item.problem
        assert SOLVERS[DWSEP].parse_problem(item.problem.spec(), item.layout, item.dtype) == item.problem
    problems = [i.problem for i in items]
    assert Counter(kind_of(i) for i in items).keys() == {k.tag for k in DWSEP_KINDS}
    assert {i.layout for i in items} == {Layout.NHWGC, Layout.NGCHW}
    assert {i.dtype for i in items} == {DType.FP16, DType.BF16, DType.FP32}
    assert {p.ndim for p in problems} == {1, 2, 3}
    assert {(3, 3), (5, 5), (7, 7), (3, 3, 3), (1, 3, 3), (3, 1, 1)} <= {p.filter for p in problems}
    assert all(p.filter[0] % 2 and 3 <= p.filter[0] <= 31 for p in problems if p.ndim == 1)
    assert {(p.bias_dw, p.bias_pw) for p in problems} == {(False, False), (True, True), (True, False), (False, True)}
    assert 0.35 < sum(p.bias_dw or p.bias_pw for p in problems) / len(problems) < 0.65
    assert {(p.act_dw.value, p.act_pw.value) for p in problems} >= {("relu6", "relu6"), ("relu6", "none"), ("none", "none"),
                                                                    ("relu", "relu"), ("none", "relu")}
    aligned = [p for p in problems if p.C % 8 == 0 and p.K % 8 == 0]
    odd = [p for p in problems if p.C % 2 and p.K % 2]
    assert len(aligned) + len(odd) == len(problems) and 0.6 < len(aligned) / len(problems) < 0.9
    assert all(16 <= p.C <= 1024 and 16 <= p.K <= 1280 for p in problems)
    assert any(max(p.stride) == 2 for p in problems) and any(max(p.dilation) == 2 for p in problems)
    assert all(p.stride[0] == 1 for p in problems if p.ndim == 3)
    assert any(p.C == p.K for p in problems if p.filter == (7, 7))  # ConvNeXt keeps its width


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
])
def test_draw_errors(call, message):
    with pytest.raises(BenchError, match=message):
        call()


def test_an_op_without_random_draws_is_refused(monkeypatch):
    monkeypatch.setattr(rc, "RANDOM_OPS", (CONV, GN, DATA))
    with pytest.raises(BenchError, match="drawn for conv_bwd_weight, groupnorm_bwd, conv_bwd_data only .*; not dwsep_conv_fwd"):
        draw(3, 1, [DWSEP])


def test_meta_says_how_to_draw_again():
    items = draw(4, 9, [CONV])
    meta = random_meta(4, 9, [CONV], None, items)
    assert meta["n_per_op"] == 4 and meta["seed"] == 9 and meta["ops"] == ["conv_bwd_weight"]
    assert meta["version"] == rc.RANDOM_VERSION and sum(meta["kinds"]["conv_bwd_weight"].values()) == 4
    assert meta["command"] == "kfactory bench --random 4 --seed 9 --ops conv_bwd_weight"


# --- the table ---------------------------------------------------------------------------------------
def test_problem_text_drops_default_fields(many):
    key = "conv_bwd_weight:nhwgc:fp16:2d:N=8,G=48,C=1,K=1,input=55x55,filter=3x3,stride=1x1,pad=0x0,dilation=1x1"
    assert problem_text(key) == "N=8,G=48,C=1,K=1,input=55x55,filter=3x3"
    sided = ("conv_bwd_weight:ngchw:bf16:3d:N=2,G=1,C=16,K=16,input=4x8x9,filter=3x4x4,stride=1x2x2,"
             "pad_left=1x1x1,pad_right=1x2x2,dilation=2x2x2")
    assert problem_text(sided) == "N=2,G=1,C=16,K=16,input=4x8x9,filter=3x4x4,stride=1x2x2,pad_left=1,pad_right=1x2x2,dilation=2"
    assert problem_text("groupnorm_bwd:ngchw:fp16:2d:N=1,C=64,G=32,input=7x9,affine=0") == "N=1,C=64,G=32,input=7x9,affine=0"
    assert problem_text("N=1,C=4,K=8,input=8x8") == "N=1,C=4,K=8,input=8x8"  # a not-implemented row's spec
    for item in many:  # the short text is still the problem
        assert SOLVERS[item.case.op].parse_problem(problem_text(item.problem.key), item.layout, item.dtype) == item.problem


def test_table_shows_the_sizes_of_drawn_cases():
    from rich.console import Console

    item = draw(1, 7, [CONV])[0]
    t = Timing(10.0, 1.0, 9.0, 11.0, 30)
    row = Row(CONV, item.case.name, item.dtype, item.layout, Status.OK, problem=item.problem.key, ours=t, torch=t)
    console = Console(width=250, record=True)
    print_table(console, [row], CEIL, problems=True)
    text = console.export_text()
    assert re.search(r"rand_s7_000_dense_k1x1 +│ N=8,G=1,C=24,K=91,input=13x13,filter=1x1 +│", text)
    plain = Console(width=250, record=True)
    print_table(plain, [row], CEIL)
    assert "input=13x13" not in plain.export_text()


# --- the command ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["bench", "--random", "3", "--seed", "1", "--cases", "mnv1_dw3"], "--random draws its own problems"),
    (["bench", "--random", "3", "--seed", "1", "--suite", "x.toml"], "--random draws its own problems"),
    (["bench", "--random", "3"], "--random needs --seed S"),
    (["bench", "--random", "0", "--seed", "1"], "--random needs a number of problems >= 1"),
    (["bench", "--random", "2", "--seed", "-4"], "--seed >= 0"),
    (["bench", "--random", "2", "--seed", "1", "--dtypes", "int8"], "not int8"),
    (["bench", "--random", "2", "--seed", "1", "--dtypes", "bf16_fp32w"], "leaves groupnorm_bwd no dtype"),
])
def test_cli_random_one_line_errors(kfactory, capsys, argv, message):
    assert kfactory(argv) == 2
    assert message in _one_error(capsys)


def _fake_gpu(monkeypatch, seen):
    import factory.bench.ceilings as ceilings_mod
    import factory.bench.gpu as gpu

    def fake_machine(settings, db_url, stage, seed=None, serve=None):
        seen["seed"] = seed
        env = _env(ReferenceKernel, 10.0, 30.0)
        return gpu.Machine(env, fixed_timer(1.0), {"device": "CPU stand-in"})

    monkeypatch.setattr(gpu, "open_machine", fake_machine)
    monkeypatch.setattr(ceilings_mod, "measure_ceilings", lambda timer, device: CEIL)
    # Small problems, so the numpy reference and PyTorch's CPU ops stay quick.
    monkeypatch.setattr(rc, "MAX_TENSOR_BYTES", 32 << 20)
    monkeypatch.setattr(rc, "MAX_CONV_MACS", 20_000_000)


def test_cli_random_run_on_cpu_records_seed_and_n(kfactory, capsys, monkeypatch, tmp_path):
    seen = {}
    _fake_gpu(monkeypatch, seen)
    argv = ["bench", "--random", "3", "--seed", "11", "--dtypes", "fp32", "--reps", "5"]
    assert kfactory([*argv, "--out", str(tmp_path / "a")]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert seen["seed"] == 11  # the same seed seeds the inputs
    data = json.loads((tmp_path / "a" / "results.json").read_text())
    meta = data["meta"]
    assert meta["suite"] is None and meta["random"]["seed"] == 11 and meta["random"]["n_per_op"] == 3
    assert meta["random"]["ops"] == [op.value for op in rc.RANDOM_OPS] and meta["random"]["dtypes"] == ["fp32"]
    assert meta["random"]["ops"][-1] == "dwsep_conv_fwd"
    assert meta["random"]["command"] == ("kfactory bench --random 3 --seed 11 --ops "
                                         "conv_bwd_weight,groupnorm_bwd,conv_bwd_data,dwsep_conv_fwd --dtypes fp32")
    expected = draw(3, 11, dtypes=[DType.FP32])
    assert [(r["op"], r["case"], r["dtype"], r["layout"], r["problem"]) for r in data["rows"]] == [
        (i.case.op.value, i.case.name, i.dtype.value, i.layout.name, i.problem.key) for i in expected]
    assert [r["status"] for r in data["rows"]] == ["ok"] * 12
    assert data["geomean_speedup"]["overall"] == pytest.approx(3.0)
    text = " ".join(captured.out.split())
    assert "3 random problems per op, seed 11" in text
    for item in expected:  # each row spells its problem, in the table and in its progress line
        assert re.search(rf"{item.case.name} +│ {re.escape(problem_text(item.problem.key))} +│", captured.out)
    assert f"{expected[0].label} [{problem_text(expected[0].problem.key)}]" in " ".join(captured.err.split())
    # A second run with the same seed measures the same cases: --compare pairs every row.
    assert kfactory([*argv, "--out", str(tmp_path / "b"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["meta"]["random"]["seed"] == 11
    assert kfactory(["bench", "--compare", str(tmp_path / "a" / "results.json"), str(tmp_path / "b" / "results.json")]) == 0
    assert "over 12 cases in both runs" in " ".join(capsys.readouterr().out.split())
