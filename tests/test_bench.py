"""`kfactory bench` without a GPU: suites, filters, the row logic on CPU tensors, reports, --compare, errors."""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import time
from pathlib import Path

import numpy as np
from rich.console import Console
import pytest

torch = pytest.importorskip("torch")

from factory import cli
from factory.bench import add_bench_parser
from factory.bench import command as bench_command
from factory.bench.check import agreement_floor, compare_outputs
from factory.bench.compare import compare_runs, load_results, print_comparison
from factory.bench.model import BenchError, BenchItem, Case, Ceilings, Row, Serve, Status, Timing
from factory.bench.report import COLUMNS, geomeans, print_table, record, row_from_record, write_all, write_json
from factory.bench.runner import Env, bench_item, make_tensors
from factory.bench.suite import default_suite_path, expand, load_suite, parse_dtypes, parse_ops
from factory.ops import SOLVERS
from factory.ops.base import Role
from factory.ops.conv_bwd_weight import SOLVER as CONV
from factory.problem import ConvProblem, DType, Layout, Op, parse_conv_problem
from factory.selector import lookup

CPU = torch.device("cpu")


# --- suite --------------------------------------------------------------------------------------
def test_public_suite_cases_are_valid_problems_or_not_implemented_rows():
    suite = load_suite()
    assert suite.path == default_suite_path() and suite.path.is_file()
    items = expand(suite)
    by_op: dict[Op, list[BenchItem]] = {}
    for item in items:
        by_op.setdefault(item.case.op, []).append(item)
    assert set(by_op) == set(Op)  # the public suite covers every op
    for op, op_items in by_op.items():
        for item in op_items:
            if op in SOLVERS:
                assert item.problem is not None and item.problem.op is op
                assert (item.problem.layout, item.problem.dtype) == (item.layout, item.dtype)
                assert lookup(item.problem), f"no instance computes {item.problem.key}"
            else:
                assert item.problem is None
                row = bench_item(item, _env(kernel=None))
                assert row.status is Status.NOT_IMPLEMENTED and row.problem == item.case.spec()
    # 15 (case, layout) pairs x fp16/bf16, plus fp32 for the two cases that set it (2 layouts each).
    assert len(by_op[Op.CONV_BWD_WEIGHT]) == 15 * 2 + 4
    assert len(by_op[Op.GROUPNORM_BWD]) == 3 * 2 + 1
    assert all(i.layout is Layout.NGCHW for i in by_op[Op.GROUPNORM_BWD])


@pytest.mark.parametrize("path", sorted((Path(__file__).parent.parent / "bench" / "suites").glob("*.toml")),
                         ids=lambda p: p.stem)
def test_every_committed_suite_reads_and_its_cases_are_problems(path):
    items = expand(load_suite(path))
    assert items and all(item.problem is not None and item.problem.op is item.case.op for item in items)


def test_conv_case_becomes_the_problem_the_suite_describes():
    suite = load_suite()
    item = next(i for i in expand(suite, cases=["mnv3_dw5_s2"], dtypes=[DType.FP32]) if i.layout is Layout.NGCHW)
    assert item.case.spec() == "N=64,G=72,C=1,K=1,input=56x56,filter=5x5,stride=2x2,pad=2x2"
    assert item.problem == ConvProblem(N=64, G=72, C=1, K=1, input=(56, 56), filter=(5, 5), stride=(2, 2),
                                       pad=(2, 2), dilation=(1, 1), layout=Layout.NGCHW, dtype=DType.FP32)


def test_a_case_may_name_words_of_its_ops_problem_language(tmp_path):
    path = _suite(tmp_path, "dwsep_conv_fwd = [ { name = 'd', N = 2, C = 8, K = 16, input = [9, 9], filter = [3, 3], "
                            "pad = [1, 1], bias_pw = 1, act_dw = 'relu6', layouts = ['NHWGC'] } ]")
    item = next(iter(expand(load_suite(path), dtypes=[DType.FP16])))
    assert item.problem.act_dw.value == "relu6" and item.problem.act_pw.value == "none" and item.problem.bias_pw


def test_filters():
    suite = load_suite()
    only = expand(suite, ops=parse_ops("conv_bwd_weight"), dtypes=parse_dtypes("fp32"))
    assert {i.case.name for i in only} == {"regnety_gw24", "mnv3_dw5_s2"}
    assert all(i.dtype is DType.FP32 and i.case.op is Op.CONV_BWD_WEIGHT for i in only)
    two = expand(suite, ops=parse_ops("conv_bwd_weight, groupnorm_bwd"), dtypes=parse_dtypes("bf16"))
    assert {i.case.op for i in two} == {Op.CONV_BWD_WEIGHT, Op.GROUPNORM_BWD}
    assert all(i.dtype is DType.BF16 for i in two)
    picked = expand(suite, cases=["mnv1_dw3"])
    assert [(i.dtype, i.layout) for i in picked] == [
        (d, l) for d in (DType.FP16, DType.BF16) for l in (Layout.NHWGC, Layout.NGCHW, Layout.GNHWC)
    ]
    assert parse_ops(None) is None and parse_dtypes("") is None


@pytest.mark.parametrize("call, message", [
    (lambda s: expand(s, ops=parse_ops("conv_fwd")), "unknown op 'conv_fwd'"),
    (lambda s: expand(s, dtypes=parse_dtypes("int8")), "not int8"),
    (lambda s: expand(s, cases=["nope"]), "unknown case nope"),
    (lambda s: expand(s, dtypes=[DType.FP32], cases=["resnext101_s2"]), "no suite case matches"),
])
def test_filter_errors(call, message):
    with pytest.raises(BenchError, match=message):
        call(load_suite())


def _suite(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("conv_bwd_weight = [ { name = 'a', N = 1", "not valid TOML"),
    ("conv_fwd = [ { name = 'a', N = 1 } ]", "unknown op 'conv_fwd'"),
    ("conv_bwd_weight = 3", "must be an array of tables"),
    ("conv_bwd_weight = [ { N = 1 } ]", "case #1 has no name"),
    ("conv_bwd_weight = [ { name = 'a', N = 1, G = 1, C = 1, K = 1, input = [8], filter = [3], layouts = ['NCHW5'] } ]",
     "unknown layout"),
    ("groupnorm_bwd = [ { name = 'g', N = 1, C = 8, G = 2, input = [4, 4], layouts = ['GNHWC'] } ]",
     "NGCHW, NHWGC only"),
    ("conv_bwd_weight = [ { name = 'a', N = 1, G = 1, C = 1, K = 1, input = [4], filter = [9] } ]",
     "conv_bwd_weight/a .*filter"),
    ("conv_bwd_weight = [ { name = 'a', N = 1, G = 1, C = 1, K = 1, input = [8], filter = [3], X = 1.5 } ]",
     "X must be an integer, a list of integers or a word"),
    ("dwsep_conv_fwd = [ { name = 'd', N = 1, C = 8, K = 8, input = [8, 8], filter = [3, 3], act_dw = 'gelu' } ]",
     "dwsep_conv_fwd/d .*gelu"),
    ("conv_bwd_weight = [ { name = 'a', N = 1, G = 1, C = 1, K = 1, input = [8], filter = [3], bogus = 1 } ]",
     "unknown field 'bogus'"),
    ("conv_bwd_weight = [ { name = 'a', N = 1, G = 1, C = 1, K = 1, input = [8], filter = [3] },"
     " { name = 'a', N = 2, G = 1, C = 1, K = 1, input = [8], filter = [3] } ]", "appears twice"),
    ("", "no cases"),
])
def test_suite_errors(tmp_path, text, message):
    with pytest.raises(BenchError, match=message):
        expand(load_suite(_suite(tmp_path, text)))


def test_missing_suite_file(tmp_path):
    with pytest.raises(BenchError, match="no such file"):
        load_suite(tmp_path / "absent.toml")


def test_op_without_cases_in_suite(tmp_path):
    path = _suite(tmp_path, "conv_bwd_weight = [ { name = 'a', N = 1, G = 1, C = 1, K = 1, input = [8], filter = [3] } ]")
    with pytest.raises(BenchError, match="has no cases for groupnorm_bwd"):
        expand(load_suite(path), ops=[Op.GROUPNORM_BWD])
    items = expand(load_suite(path))
    assert [(i.dtype, i.layout) for i in items] == [(DType.FP16, Layout.NGCHW), (DType.BF16, Layout.NGCHW)]


# --- timing statistics and the agreement check -----------------------------------------------------
def test_timing_from_samples():
    t = Timing.from_samples([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (t.median_us, t.min_us, t.max_us, t.reps) == (3.0, 1.0, 5.0, 5)
    assert t.iqr_us == pytest.approx(2.0)
    assert Timing.from_samples([7.0]).iqr_us == 0.0
    with pytest.raises(ValueError):
        Timing.from_samples([])


def _conv_problem(spec: str, layout: Layout, dtype: DType) -> ConvProblem:
    return parse_conv_problem(spec, layout, dtype)


def test_compare_outputs_bounds():
    p = _conv_problem("N=1,G=2,C=2,K=2,input=5x5,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    specs = CONV.tensors(p)
    shape = specs[2].shape
    ref = torch.linspace(-10, 10, math.prod(shape)).reshape(shape).half()
    assert compare_outputs(specs, {"grad_weight": ref}, {"grad_weight": ref}).ok
    near = ref.float() + 0.05  # 0.5 % of max |ref|
    assert compare_outputs(specs, {"grad_weight": near.half()}, {"grad_weight": ref}).ok
    far = compare_outputs(specs, {"grad_weight": (ref.float() + 0.5).half()}, {"grad_weight": ref})
    assert not far.ok and far.max_rel_err == pytest.approx(0.05, rel=1e-2) and far.tolerance == 1e-2
    nan = ref.clone()
    nan[0] = float("nan")
    assert "not finite" in compare_outputs(specs, {"grad_weight": nan}, {"grad_weight": ref}).message
    assert not compare_outputs(specs, {"grad_weight": ref[:1]}, {"grad_weight": ref}).ok
    # Ours fp32 (bf16_fp32w) against PyTorch's bf16: bf16's bound applies.
    p32 = _conv_problem("N=1,G=2,C=2,K=2,input=5x5,filter=3x3,pad=1", Layout.NHWGC, DType.BF16_FP32W)
    exact = torch.linspace(-1, 1, math.prod(shape)).reshape(shape) * 3.3
    verdict = compare_outputs(CONV.tensors(p32), {"grad_weight": exact}, {"grad_weight": exact.bfloat16()})
    assert verdict.ok and verdict.tolerance == 1.6e-2 and verdict.max_rel_err > 1e-4
    # fp16 computed as fp8: the operands' rounding is the floor, and it still bounds.
    floor = agreement_floor(DType.FP16_COMP_BF8_FP8)
    assert floor == 2.0**-3 and agreement_floor(DType.FP16) == 0.0
    assert compare_outputs(specs, {"grad_weight": (ref.float() + 0.5).half()}, {"grad_weight": ref}, floor).ok
    assert not compare_outputs(specs, {"grad_weight": (ref.float() + 1.5).half()}, {"grad_weight": ref}, floor).ok


# --- the conv PyTorch baseline, on CPU ----------------------------------------------------------------
BASELINE_SPECS = [
    "N=2,G=3,C=2,K=4,input=7x6,filter=3x3,stride=2,pad=1",
    "N=2,G=4,C=1,K=1,input=19,filter=5,pad=2,dilation=2",
    "N=1,G=2,C=3,K=2,input=5x6x4,filter=3x1x2,pad=1x0x0",
    "N=2,G=2,C=2,K=3,input=8x7,filter=4x3,stride=2,pad_left=1x0,pad_right=2x1",
]


@pytest.mark.parametrize("layout", list(Layout), ids=lambda l: l.name)
@pytest.mark.parametrize("spec", BASELINE_SPECS)
def test_conv_torch_baseline_matches_reference_in_every_layout(layout, spec):
    p = _conv_problem(spec, layout, DType.FP32)
    specs = CONV.tensors(p)
    tensors = make_tensors(specs, CPU, seed=3)
    inputs = {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT}
    baseline = CONV.torch_baseline(p, inputs)
    baseline.run()
    got = baseline.outputs()["grad_weight"]
    want = CONV.reference(p, {k: v.numpy() for k, v in inputs.items()})["grad_weight"]
    assert got.is_contiguous() and tuple(got.shape) == want.shape
    np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-5, atol=1e-5)
    assert ("NHWGC copy" in baseline.note) == (layout is Layout.GNHWC)
    assert ("explicitly padded" in baseline.note) == (not p.symmetric)


def test_conv_baseline_shares_our_buffers_where_pytorch_has_the_layout():
    p = _conv_problem(BASELINE_SPECS[0], Layout.NHWGC, DType.FP32)
    specs = CONV.tensors(p)
    tensors = make_tensors(specs, CPU, seed=1)
    inputs = {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT}
    baseline = CONV.torch_baseline(p, inputs)
    baseline.run()
    before = baseline.outputs()["grad_weight"].clone()
    inputs["input"].mul_(2)  # a view of our buffer: PyTorch sees the change
    baseline.run()
    np.testing.assert_allclose(baseline.outputs()["grad_weight"].numpy(), 2 * before.numpy(), rtol=1e-5, atol=1e-5)


def test_int8_has_no_baseline():
    from factory.problem import UnsupportedProblem

    p = _conv_problem("N=1,G=2,C=2,K=2,input=5x5,filter=3x3", Layout.NHWGC, DType.INT8)
    specs = CONV.tensors(p)
    t = make_tensors(specs, CPU, 0)
    assert t["input"].dtype is torch.int8 and int(t["input"].abs().max()) <= 4
    with pytest.raises(UnsupportedProblem, match="int8"):
        CONV.torch_baseline(p, {"input": t["input"], "grad_output": t["grad_output"]})


def test_groupnorm_case_runs_in_both_of_its_layouts(tmp_path):
    path = _suite(tmp_path, "groupnorm_bwd = [ { name = 'g', N = 2, C = 12, G = 3, input = [5, 7], fp32 = true, "
                            "layouts = ['NGCHW', 'NHWGC'] } ]")
    items = expand(load_suite(path), dtypes=[DType.FP32])
    assert [i.layout for i in items] == [Layout.NGCHW, Layout.NHWGC]
    for item in items:
        assert item.problem.layout is item.layout
        row = bench_item(item, _env(ReferenceKernel))
        assert row.status is Status.OK, row.note


# --- the row logic with a CPU "GPU" --------------------------------------------------------------------
class ReferenceKernel:
    """Stands in for factory.api.Kernel on CPU: writes the numpy reference (optionally off by a factor)."""

    def __init__(self, problem, factor: float = 1.0) -> None:
        self.problem, self.factor, self.name, self.calls = problem, factor, "fake_instance", 0

    def run(self, stream=None, **tensors):
        self.calls += 1
        solver = SOLVERS[self.problem.op]
        inputs = {s.name: tensors[s.name].float().numpy() for s in solver.tensors(self.problem) if s.role is Role.INPUT}
        for name, value in solver.reference(self.problem, inputs).items():
            tensors[name].copy_(torch.from_numpy(value * self.factor))


def fixed_timer(us: float):
    def timer(fn):
        fn()
        return Timing(us, 0.1 * us, 0.9 * us, 1.2 * us, 30)

    return timer


def _env(kernel, us_ours: float = 10.0, us_torch: float = 20.0) -> Env:
    """Ours is timed at us_ours, PyTorch at us_torch (told apart by the callable's owner)."""
    def timer(fn):
        fn()
        ours = getattr(fn, "__qualname__", "").endswith("ours")
        us = us_ours if ours else us_torch
        return Timing(us, 1.0, us, us, 30)

    def kernel_for(problem):
        if kernel is None:
            raise AssertionError("no kernel expected")
        return kernel(problem)

    return Env(device=CPU, timer=timer, kernel_for=kernel_for, synchronize=lambda: None, seed=5)


def _item(spec: str, layout: Layout, dtype: DType, name: str = "case") -> BenchItem:
    p = _conv_problem(spec, layout, dtype)
    case = Case(Op.CONV_BWD_WEIGHT, name, (), (dtype,), (layout,))
    return BenchItem(case, dtype, layout, p)


SMALL = "N=2,G=4,C=2,K=3,input=9x9,filter=3x3,pad=1"


@pytest.mark.parametrize("layout", [Layout.NHWGC, Layout.NGCHW, Layout.GNHWC], ids=lambda l: l.name)
@pytest.mark.parametrize("dtype", [DType.FP32, DType.BF16])
def test_row_ok_when_outputs_agree(layout, dtype):
    row = bench_item(_item(SMALL, layout, dtype), _env(ReferenceKernel, 10.0, 25.0))
    assert row.status is Status.OK, row.note
    assert row.speedup == pytest.approx(2.5)
    assert row.instance == "fake_instance" and row.min_bytes == row_problem_bytes(layout, dtype)
    assert row.max_rel_err is not None and row.max_rel_err <= row.tolerance
    assert ("NHWGC copy" in row.note) == (layout is Layout.GNHWC)


def row_problem_bytes(layout: Layout, dtype: DType) -> int:
    return _conv_problem(SMALL, layout, dtype).min_bytes


def test_wrong_result_is_reported_and_gets_no_speed():
    row = bench_item(_item(SMALL, Layout.NHWGC, DType.FP32), _env(lambda p: ReferenceKernel(p, factor=1.01)))
    assert row.status is Status.WRONG and row.ours is None and row.speedup is None
    assert row.torch is not None and "wrong: grad_weight: max relative error" in row.note


def test_pytorch_off_and_ours_exact_is_ok_with_a_note(monkeypatch):
    """Where PyTorch's result is the one further from the float64 reference, the row keeps its speed."""
    import factory.bench.runner as runner
    from factory.ops.base import TorchBaseline

    class OffBaseline:
        """conv_bwd_weight whose PyTorch result is 5 % off (as a twice-rounded bf16 result can be)."""

        def torch_baseline(self, problem, inputs):
            true = CONV.torch_baseline(problem, inputs)
            return TorchBaseline(run=true.run, outputs=lambda: {k: v * 1.05 for k, v in true.outputs().items()})

        def __getattr__(self, name):
            return getattr(CONV, name)

    monkeypatch.setattr(runner, "solver_for", lambda op: OffBaseline())
    row = bench_item(_item(SMALL, Layout.NHWGC, DType.FP32), _env(ReferenceKernel, 10.0, 20.0))
    assert row.status is Status.OK and row.speedup == pytest.approx(2.0)
    assert row.note.startswith("PyTorch differs (grad_weight: max relative error") and "ours matches the float64" in row.note
    wrong = bench_item(_item(SMALL, Layout.NHWGC, DType.FP32), _env(lambda p: ReferenceKernel(p, factor=0.95)))
    assert wrong.status is Status.WRONG and "against the float64 reference" in wrong.note


def test_unwritten_output_is_wrong():
    class Lazy(ReferenceKernel):
        def run(self, stream=None, **tensors):
            pass

    row = bench_item(_item(SMALL, Layout.NGCHW, DType.FP16), _env(Lazy))
    assert row.status is Status.WRONG and "not finite" in row.note


def test_no_baseline_rows(monkeypatch):
    int8 = bench_item(_item(SMALL, Layout.NHWGC, DType.INT8), _env(ReferenceKernel))
    assert int8.status is Status.NO_BASELINE and int8.ours is not None and "int8" in int8.note

    class WithoutBaseline:
        """conv_bwd_weight as an op without a PyTorch implementation (the base hook's None)."""

        def torch_baseline(self, problem, inputs):
            return None

        def __getattr__(self, name):
            return getattr(CONV, name)

    import factory.bench.runner as runner

    monkeypatch.setattr(runner, "solver_for", lambda op: WithoutBaseline())
    row = bench_item(_item(SMALL, Layout.NHWGC, DType.FP16), _env(ReferenceKernel))
    assert row.status is Status.NO_BASELINE and row.note.startswith("no PyTorch baseline") and row.speedup is None


def test_exposed_launch_overhead_is_noted():
    env = _env(ReferenceKernel)

    def slow_host(fn):
        t = env.timer(fn)
        return Timing.from_samples([t.median_us], host_us=120.0, flush_us=90.0)

    row = bench_item(_item(SMALL, Layout.NHWGC, DType.FP32), Env(CPU, slow_host, env.kernel_for, env.synchronize))
    assert row.status is Status.OK
    assert "ours: host enqueue 120 µs outlasts the 90 µs flush" in row.note and "PyTorch: host enqueue" in row.note
    assert not Timing.from_samples([1.0], host_us=50.0, flush_us=90.0).launch_exposed
    assert not Timing.from_samples([1.0]).launch_exposed


def test_no_kernel_and_failures_become_rows():
    from factory.selector import NotTuned

    def untunable(problem):
        raise NotTuned("tuning verified no instance")

    env = _env(None)
    row = bench_item(_item(SMALL, Layout.NHWGC, DType.FP16), Env(CPU, env.timer, untunable, env.synchronize))
    assert row.status is Status.NO_KERNEL and "verified no instance" in row.note

    class Crashing(ReferenceKernel):
        def run(self, stream=None, **tensors):
            raise RuntimeError("CUDA error: an illegal memory access\nmore detail")

    crashed = bench_item(_item(SMALL, Layout.NHWGC, DType.FP16), _env(Crashing))
    assert crashed.status is Status.FAILED and crashed.note == "CUDA error: an illegal memory access"


# --- reports ---------------------------------------------------------------------------------------
CEIL = Ceilings(copy_gbps=3000.0, matmul_tflops=800.0, copy_bytes=1 << 30, matmul_n=8192)


def _row(op: Op, case: str, ours: float | None, theirs: float | None, status: Status = Status.OK,
         dtype: DType = DType.FP16, layout: Layout = Layout.NHWGC) -> Row:
    t = lambda us: None if us is None else Timing(us, 0.5, us - 1, us + 1, 30)  # noqa: E731
    return Row(op, case, dtype, layout, status, problem=f"{op.value}:{case}", instance="inst" if ours else None,
               ours=t(ours), torch=t(theirs), max_rel_err=1e-3 if status is Status.OK else None, tolerance=1e-2,
               min_bytes=30_000_000, macs=10**9, note="")


def synthetic_rows() -> list[Row]:
    return [
        _row(Op.CONV_BWD_WEIGHT, "a", 10.0, 20.0),  # 2x
        _row(Op.CONV_BWD_WEIGHT, "b", 40.0, 10.0),  # 0.25x
        _row(Op.CONV_BWD_WEIGHT, "c", 10.0, 80.0, dtype=DType.BF16),  # 8x
        _row(Op.CONV_BWD_WEIGHT, "w", None, 12.0, Status.WRONG),
        _row(Op.GROUPNORM_BWD, "g", 5.0, 20.0, layout=Layout.NGCHW),  # 4x
        _row(Op.GROUPNORM_BWD, "h", 7.0, None, Status.NO_BASELINE, layout=Layout.NGCHW),
        _row(Op.DWSEP_CONV_FWD, "d", None, None, Status.NOT_IMPLEMENTED),
    ]


def test_geomeans():
    g = geomeans(synthetic_rows())
    assert list(g) == ["conv_bwd_weight", "groupnorm_bwd", "dwsep_conv_fwd", "overall"]
    assert g["conv_bwd_weight"] == pytest.approx((2 * 0.25 * 8) ** (1 / 3))
    assert g["groupnorm_bwd"] == pytest.approx(4.0)
    assert g["dwsep_conv_fwd"] is None
    assert g["overall"] == pytest.approx((2 * 0.25 * 8 * 4) ** (1 / 4))


def test_record_percentages():
    r = record(_row(Op.CONV_BWD_WEIGHT, "a", 10.0, 20.0), CEIL)
    assert r["ours_gbps"] == pytest.approx(3000.0)  # 30 MB in 10 us
    assert r["ours_dram_pct"] == pytest.approx(100.0) and r["torch_dram_pct"] == pytest.approx(50.0)
    assert r["ours_mma_pct"] == pytest.approx(100 * 2e9 / 10e-6 / 800e12)
    assert r["speedup"] == pytest.approx(2.0) and r["reps"] == 30
    assert record(_row(Op.CONV_BWD_WEIGHT, "a", 10.0, 20.0), None)["ours_dram_pct"] is None
    # The binding roofline is the larger floor: here DRAM (100 %) over matmul (25 %).
    assert r["ours_roofline_pct"] == pytest.approx(100.0) and r["torch_roofline_pct"] == pytest.approx(50.0)


def test_binding_roofline_takes_the_larger_floor():
    # 1 MB and 1e12 MACs in 10 ms: DRAM floor 0.33 us, matmul floor 2.5 ms, so matmul binds: 25 %.
    assert CEIL.roofline_pct(10**6, 10**12, 10_000.0) == pytest.approx(25.0)
    assert CEIL.roofline_pct(None, 10**12, 10_000.0) == pytest.approx(25.0)
    assert CEIL.roofline_pct(None, None, 10_000.0) is None


def test_write_all(tmp_path):
    rows = synthetic_rows()
    meta = {"suite": "x.toml", "reps": 30}
    written = write_all(tmp_path / "out", rows, CEIL, meta)
    names = sorted(p.name for p in written)
    assert names == ["results.csv", "results.json", "roofline.png", "speedup.png"]
    for png in ("speedup.png", "roofline.png"):
        data = (tmp_path / "out" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    with (tmp_path / "out" / "results.csv").open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == COLUMNS
        table = list(reader)
    assert [(r["case"], r["status"]) for r in table] == [(r.case, r.status.value) for r in rows]
    assert table[6]["status"] == "not_implemented" and table[6]["ours_us"] == ""
    assert float(table[0]["speedup"]) == pytest.approx(2.0) and table[3]["speedup"] == ""
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["meta"] == meta and data["ceilings"]["copy_gbps"] == 3000.0
    assert all(tuple(r) == COLUMNS for r in data["rows"])
    assert data["geomean_speedup"]["overall"] == pytest.approx(geomeans(rows)["overall"])


def test_table_ends_with_geomeans():
    from rich.console import Console

    console = Console(record=True, width=250)
    print_table(console, synthetic_rows(), CEIL)
    text = console.export_text()
    tail = text.strip().splitlines()[-4:]
    assert tail[0].startswith("geomean speedup conv_bwd_weight: 1.59×")
    assert tail[2] == "geomean speedup dwsep_conv_fwd: not implemented"
    assert tail[3].startswith("geomean speedup overall: 2.00×")
    assert "not implemented" in text and "WRONG" in text and "no PyTorch baseline" in text
    console = Console(record=True, width=250)
    odd = Row(Op.CONV_BWD_WEIGHT, "x[1]", DType.FP16, Layout.NHWGC, Status.FAILED, "p", note="see [bold]log[/]")
    print_table(console, [odd], None)
    text = console.export_text()
    assert "failed; see [bold]log[/]" in text and "x[1]" in text


# --- compare -------------------------------------------------------------------------------------------
def test_compare_two_runs(tmp_path):
    a_rows = synthetic_rows()
    b_rows = [_row(Op.CONV_BWD_WEIGHT, "a", 5.0, 20.0), _row(Op.CONV_BWD_WEIGHT, "b", 40.0, 10.0),
              _row(Op.CONV_BWD_WEIGHT, "new", 3.0, 6.0)]
    write_json(tmp_path / "a.json", a_rows, CEIL, {})
    write_json(tmp_path / "b.json", b_rows, CEIL, {})
    compared = compare_runs(load_results(tmp_path / "a.json"), load_results(tmp_path / "b.json"))
    by_case = {c.key[1]: c for c in compared}
    assert by_case["a"].ours_ratio == pytest.approx(2.0) and by_case["a"].torch_ratio == pytest.approx(1.0)
    assert by_case["b"].ours_ratio == pytest.approx(1.0)
    assert by_case["c"].where == "only in A" and by_case["new"].where == "only in B"
    assert by_case["c"].ours_ratio is None
    assert [c.key[1] for c in compared] == ["a", "b", "c", "w", "g", "h", "d", "new"]
    from rich.console import Console

    console = Console(record=True, width=250)
    mean = print_comparison(console, compared, "a.json", "b.json")
    assert mean == pytest.approx(math.sqrt(2.0))
    assert "geomean ours A/B: 1.41× over 2 cases" in console.export_text()


def test_compare_rejects_other_json(tmp_path):
    (tmp_path / "x.json").write_text('{"rows": [{"op": "a"}]}')
    (tmp_path / "y.json").write_text("not json")
    with pytest.raises(BenchError, match="not a kfactory bench results.json"):
        load_results(tmp_path / "x.json")
    with pytest.raises(BenchError, match="not a readable JSON"):
        load_results(tmp_path / "y.json")
    with pytest.raises(BenchError, match="no such file"):
        load_results(tmp_path / "z.json")


# --- the command ------------------------------------------------------------------------------------
@pytest.fixture
def kfactory(monkeypatch):
    """cli.main with `bench` registered (whether or not the CLI registers it itself)."""
    original = cli.build_parser

    def build():
        parser = original()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        if "bench" not in sub.choices:
            add_bench_parser(sub)
        return parser

    monkeypatch.setattr(cli, "build_parser", build)
    return cli.main


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("kfactory: error: ") and "Traceback" not in err
    return " ".join(err.split())


@pytest.mark.parametrize("argv, message", [
    (["bench", "--suite", "/no/such/suite.toml"], "suite /no/such/suite.toml: no such file"),
    (["bench", "--ops", "conv_bwd_weight,nope"], "unknown op 'nope'"),
    (["bench", "--cases", "nope"], "unknown case nope"),
    (["bench", "--dtypes", "fp8"], "unknown dtype 'fp8'"),
    (["bench", "--compare", "/no/a.json", "/no/b.json"], "results /no/a.json: no such file"),
])
def test_cli_one_line_errors(kfactory, capsys, argv, message):
    assert kfactory(argv) == 2
    assert message in _one_error(capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cli_without_gpu(kfactory, capsys):
    assert kfactory(["bench", "--cases", "mnv1_dw3", "--reps", "3"]) == 2
    assert "needs a CUDA GPU visible to PyTorch" in _one_error(capsys)


def test_module_entry_point_prints_exactly_one_line(capsys):
    assert bench_command.main(["--suite", "/no/such/suite/with/a/rather/long/path/so/that/it/would/wrap.toml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kfactory: error: suite ")


def test_cli_compare(kfactory, capsys, tmp_path):
    write_json(tmp_path / "a.json", synthetic_rows(), CEIL, {})
    write_json(tmp_path / "b.json", synthetic_rows(), CEIL, {})
    assert kfactory(["bench", "--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "geomean ours A/B: 1.00× over 5 cases" in " ".join(out.split())


def test_cli_full_run_on_cpu(kfactory, capsys, monkeypatch, tmp_path):
    """The whole command with the GPU swapped for CPU tensors, a reference "kernel" and a fixed timer."""
    import factory.bench.ceilings as ceilings_mod
    import factory.bench.gpu as gpu

    suite = _suite(tmp_path, """
conv_bwd_weight = [
  { name = "small", N = 2, G = 4, C = 2, K = 3, input = [9, 9], filter = [3, 3], pad = [1, 1], fp32 = true, layouts = ["NHWGC", "GNHWC"] },
]
dwsep_conv_fwd = [ { name = "dws", N = 1, C = 4, K = 8, input = [8, 8], filter = [3, 3], pad = [1, 1], layouts = ["NHWGC"] } ]
""")
    seen = {}

    def fake_machine(settings, db_url, stage, seed=None, serve=None):
        seen["reps"], seen["db"], seen["serve"] = settings.reps, db_url, serve
        advance = stage("tune compile", 2)
        advance(), advance()
        return gpu.Machine(_env(ReferenceKernel, 10.0, 15.0), fixed_timer(1.0), {"device": "CPU stand-in"})

    monkeypatch.setattr(gpu, "open_machine", fake_machine)
    monkeypatch.setattr(ceilings_mod, "measure_ceilings", lambda timer, device: CEIL)
    out = tmp_path / "out"
    rc = kfactory(["bench", "--suite", str(suite), "--out", str(out), "--reps", "7", "--db", "x.db", "--dtypes", "fp32,bf16"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert seen == {"reps": 7, "db": "x.db", "serve": Serve.TUNED}
    data = json.loads((out / "results.json").read_text())
    statuses = [(r["case"], r["dtype"], r["layout"], r["status"]) for r in data["rows"]]
    assert statuses == [
        ("small", "bf16", "NHWGC", "ok"), ("small", "bf16", "GNHWC", "ok"),
        ("small", "fp32", "NHWGC", "ok"), ("small", "fp32", "GNHWC", "ok"),
        ("dws", "bf16", "NHWGC", "ok"),
    ]
    assert data["geomean_speedup"]["conv_bwd_weight"] == pytest.approx(1.5)
    assert data["meta"]["reps"] == 7 and data["meta"]["machine"]["device"] == "CPU stand-in"
    assert (out / "speedup.png").stat().st_size > 0 and (out / "roofline.png").stat().st_size > 0
    text = " ".join(captured.out.split())
    assert "geomean speedup overall: 1.50×" in text
    assert "smoke run" in captured.err
    monkeypatch.delitem(SOLVERS, Op.DWSEP_CONV_FWD)  # an op without kernels: its rows say so
    assert kfactory(["bench", "--suite", str(suite), "--out", str(tmp_path / "j"), "--json", "--cases", "dws"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in printed["rows"]] == ["not_implemented", "not_implemented"]
    assert printed["geomean_speedup"] == {"dwsep_conv_fwd": None, "overall": None}


def test_public_suite_is_package_data():
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert '"factory.data.bench" = "bench"' in pyproject and '"factory.data.bench" = ["*.toml"]' in pyproject
    assert '"factory.bench"' in pyproject


def _stop_by_sigterm():
    os.kill(os.getpid(), signal.SIGTERM)  # `timeout`'s or a scheduler's stop
    time.sleep(5)  # the handler raises before this ends
    raise AssertionError("SIGTERM did not stop the run")


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_interrupted_run_keeps_what_it_measured(kfactory, capsys, monkeypatch, tmp_path, stop):
    import factory.bench.ceilings as ceilings_mod
    import factory.bench.gpu as gpu

    suite = _suite(tmp_path, "conv_bwd_weight = [ { name = 's', N = 1, G = 2, C = 1, K = 1, input = [6, 6], "
                             "filter = [3, 3], pad = [1, 1], layouts = ['NHWGC', 'NGCHW'] } ]")
    calls = []
    before = signal.getsignal(signal.SIGTERM)

    def kernel_for(problem):
        calls.append(problem)
        if len(calls) > 1:
            if stop == "sigterm":
                _stop_by_sigterm()
            raise KeyboardInterrupt
        return ReferenceKernel(problem)

    env = _env(ReferenceKernel)
    machine = gpu.Machine(Env(CPU, env.timer, kernel_for, env.synchronize), env.timer, {"device": "cpu"})
    monkeypatch.setattr(gpu, "open_machine", lambda *a, **k: machine)
    monkeypatch.setattr(ceilings_mod, "measure_ceilings", lambda timer, device: CEIL)
    assert kfactory(["bench", "--suite", str(suite), "--out", str(tmp_path / "o"), "--dtypes", "fp16"]) == 130
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert [r["status"] for r in data["rows"]] == ["ok"] and data["meta"]["complete"] is False
    assert "interrupted after 1 of 2 rows" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before  # the CLI's handler is put back


def test_replot_redraws_figures_from_results_json(tmp_path, kfactory):
    from factory.bench.report import record, row_from_record

    rows = synthetic_rows()
    write_all(tmp_path / "run", rows, CEIL, {"reps": 30})
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    back = [row_from_record(r) for r in data["rows"]]
    assert [record(r, CEIL) for r in back] == data["rows"]  # every stored column survives the round trip
    rc = kfactory(["bench", "--replot", str(tmp_path / "run" / "results.json"), "--out", str(tmp_path / "figs")])
    assert rc == 0
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["roofline.png", "speedup.png"]
    assert kfactory(["bench", "--replot", str(tmp_path / "missing.json"), "--out", str(tmp_path / "figs")]) == 2


def test_a_row_says_how_long_getting_its_kernel_took_and_keeps_it_through_results_json(tmp_path):
    def slow_tune(problem):
        time.sleep(0.05)  # a tune, as kernel_for runs one for an untuned problem
        return ReferenceKernel(problem)

    row = bench_item(_item(SMALL, Layout.NHWGC, DType.FP32), _env(slow_tune))
    assert row.status is Status.OK and row.tune_s is not None and 0.05 <= row.tune_s < 5.0
    write_all(tmp_path, [row], None, {})
    again = row_from_record(json.loads((tmp_path / "results.json").read_text())["rows"][0])
    assert again.tune_s == pytest.approx(row.tune_s)
    console = Console(width=200, record=True)
    print_table(console, [row], None)
    text = console.export_text()
    assert "tune s" in text and f"{row.tune_s:.1f}" in text and "getting our kernels" in text


def test_a_kernel_served_without_tuning_says_where_it_came_from_in_the_note():
    class Served(ReferenceKernel):
        served = "served: nearest (winner of conv_bwd_weight:nhwgc:fp32:2d:N=4,...)"

    row = bench_item(_item(SMALL, Layout.NHWGC, DType.FP32), _env(Served))
    assert row.status is Status.OK and row.note.startswith(Served.served)
    assert not bench_item(_item(SMALL, Layout.NHWGC, DType.FP32), _env(ReferenceKernel)).note.startswith("served")


def test_timer_runs_the_reps_again_behind_more_flushes_when_their_enqueue_outlasts_the_flushes():
    """Warm-up enqueues fast (one flush), timed reps at 135 µs against an 85 µs flush: a second round
    behind ceil(1.5 * 135 / 85) = 3 flushes, whose times are the ones reported."""
    from factory.bench.timing import CudaTimer, TimingSettings

    class FakeTimer(CudaTimer):
        def __init__(self) -> None:  # no torch, no GPU: only the decision under test
            self.settings = TimingSettings(reps=3, warmup=0)
            self.device = None
            self.flush_us = 85.0
            self.rounds: list[int] = []

            class Cuda:
                @staticmethod
                def synchronize(device: object) -> None:
                    return None

            self._torch = type("FakeTorch", (), {"cuda": Cuda})

        def _reps(self, fn, flushes):
            self.rounds.append(flushes)
            return ([218.0] * 3, [135.0] * 3) if len(self.rounds) == 1 else ([10.4] * 3, [135.0] * 3)

    timer = FakeTimer()
    timing = timer(lambda: None)
    assert timer.rounds == [1, 3]
    assert timing.median_us == 10.4 and timing.flush_us == 255.0 and not timing.launch_exposed

    quick = FakeTimer()
    quick._reps = lambda fn, flushes: (quick.rounds.append(flushes), ([10.0] * 3, [40.0] * 3))[1]
    quick(lambda: None)
    assert quick.rounds == [1]  # enqueue covered by the first round's flush: no second round
