"""3-D problems that are 2-D ones in disguise (factory.ops.conv.fold): which fold, that the view computes
the same numbers on the same bytes, and that 2-D-only families then serve them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from factory.catalog import instance_by_name
from factory.ops import solver_for
from factory.ops.base import Role
from factory.ops.conv.fold import lower_rank
from factory.problem import DType, Layout, Op
from factory.selector import explain, heuristic_pick, lookup

L = Layout
BWD_OPS = (Op.CONV_BWD_WEIGHT, Op.CONV_BWD_DATA)


def problem(spec: str, layout: Layout = L.NHWGC, op: Op = Op.CONV_BWD_WEIGHT, dtype: DType = DType.FP16):
    return solver_for(op).parse_problem(spec, layout, dtype)


@pytest.mark.parametrize("layout", list(Layout))
def test_pass_through_height_and_width_fold_into_one_axis_in_every_layout(layout: Layout) -> None:
    p = problem("N=2,G=3,C=4,K=8,input=6x5x7,filter=3x1x1,stride=2x1x1,pad=1x0x0,dilation=2x1x1", layout)
    view = lower_rank(p)
    assert view is not None
    assert (view.N, view.input, view.filter, view.stride, view.pad, view.pad_right, view.dilation) == (
        2, (6, 35), (3, 1), (2, 1), (1, 0), (1, 0), (2, 1))
    assert (view.op, view.layout, view.dtype, view.G, view.C, view.K) == (p.op, layout, p.dtype, 3, 4, 8)


@pytest.mark.parametrize("layout, folds", [(L.NHWGC, True), (L.GNHWC, True), (L.NGCHW, False), (L.NGCHW_GKYXC, False)])
def test_a_pass_through_depth_joins_the_batch_only_where_they_are_adjacent(layout: Layout, folds: bool) -> None:
    p = problem("N=3,G=2,C=4,K=4,input=5x9x7,filter=1x3x5,stride=1x2x1,pad=0x1x2", layout)
    view = lower_rank(p)
    if not folds:
        assert view is None
        return
    assert (view.N, view.input, view.filter, view.stride, view.pad) == (15, (9, 7), (3, 5), (2, 1), (1, 2))


@pytest.mark.parametrize("spec", [
    "N=2,G=1,C=4,K=4,input=6x5x7,filter=3x3x3,pad=1",  # every axis filters
    "N=2,G=1,C=4,K=4,input=6x5x7,filter=3x1x3,pad=1x0x1",  # H passes through, but W does not
    "N=2,G=1,C=4,K=4,input=6x5x7,filter=3x1x1,stride=1x2x1,pad=1x0x0",  # H strided
    "N=2,G=1,C=4,K=4,input=6x5x7,filter=3x1x1,pad_left=1x0x0,pad_right=1x1x0",  # H padded after
    "N=2,G=1,C=4,K=4,input=6x5x7,filter=1x3x3,stride=2x1x1,pad=0x1x1",  # D strided
    "N=2,G=1,C=4,K=4,input=9x7,filter=3x1,pad=1x0",  # already 2-D
])
def test_no_view_where_an_axis_filters_strides_or_pads(spec: str) -> None:
    assert lower_rank(problem(spec)) is None


def _same_bytes(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(values).reshape(shape)


@pytest.mark.parametrize("op", BWD_OPS)
@pytest.mark.parametrize("layout, spec", [
    (L.NHWGC, "N=2,G=3,C=2,K=3,input=5x4x3,filter=3x1x1,stride=2x1x1,pad_left=1x0x0,pad_right=2x0x0"),
    (L.NGCHW, "N=2,G=2,C=3,K=2,input=6x3x4,filter=2x1x1,pad=1x0x0,dilation=3x1x1"),
    (L.NGCHW_GKYXC, "N=1,G=2,C=2,K=4,input=4x3x5,filter=3x1x1,pad=1x0x0"),
    (L.GNHWC, "N=2,G=2,C=3,K=2,input=3x6x5,filter=1x3x2,stride=1x2x1,pad=0x1x1"),
    (L.NHWGC, "N=3,G=1,C=4,K=2,input=2x5x6,filter=1x3x3,pad=0x1x1,dilation=1x2x1"),
])
def test_the_view_computes_the_same_numbers_on_the_same_bytes(op: Op, layout: Layout, spec: str) -> None:
    """The numpy reference of the view, fed the 3-D tensors' bytes, gives the 3-D reference's bytes: the
    fold's claim, checked without any kernel."""
    solver = solver_for(op)
    p = problem(spec, layout, op, DType.FP32)
    view = lower_rank(p)
    assert view is not None
    rng = np.random.default_rng(7)
    specs = {s.name: s for s in solver.tensors(p)}
    view_specs = {s.name: s for s in solver.tensors(view)}
    inputs = {name: rng.uniform(-1, 1, s.shape) for name, s in specs.items() if s.role is Role.INPUT}
    expected = solver.reference(p, inputs)
    got = solver.reference(view, {name: _same_bytes(a, view_specs[name].shape) for name, a in inputs.items()})
    for name, values in expected.items():
        assert values.size == got[name].size
        np.testing.assert_allclose(_same_bytes(got[name], values.shape), values, rtol=1e-12, atol=1e-12)


def _families(instances) -> set[str]:
    return {i.family for i in instances}


def test_families_without_3d_kernels_serve_a_3d_problem_through_its_view() -> None:
    separable = problem("N=8,G=192,C=1,K=1,input=8x28x28,filter=3x1x1,pad=1x0x0")
    full = problem("N=8,G=192,C=1,K=1,input=8x28x28,filter=3x3x3,pad=1")
    found = lookup(separable)
    assert {"dwl", "dwh", "dwr", "dwt"} <= _families(found)
    assert {i.ndim for i in found if i.family == "dwl"} == {2}
    assert {i.ndim for i in found if i.family in ("dl", "dw")} == {3}  # families with 3-D kernels keep their own
    assert not {"dwl", "dwh", "dwr", "dwt"} & _families(lookup(full))
    assert heuristic_pick(separable, found).ndim == 2


def test_a_grouped_3d_layer_reaches_the_2d_matrix_families() -> None:
    weight = problem("N=4,G=1,C=64,K=64,input=16x28x28,filter=3x1x1,pad=1x0x0")
    data = problem("N=4,G=1,C=64,K=64,input=16x28x28,filter=1x3x3,pad=0x1x1", op=Op.CONV_BWD_DATA)
    assert "gwl" in _families(lookup(weight)) and "gwl" in _families(lookup(data))
    assert any(i.family == "dwc" for i in lookup(problem("N=2,G=24,C=1,K=1,input=4x9x9,filter=1x3x3,pad=0x1x1",
                                                         op=Op.CONV_BWD_DATA)))


def test_a_folded_instance_refuses_other_problems_in_words() -> None:
    separable = problem("N=8,G=192,C=1,K=1,input=8x28x28,filter=3x1x1,pad=1x0x0")
    served = next(i for i in lookup(separable) if i.family == "dwl")
    assert instance_by_name(served.name).why_not(separable) is None
    full = problem("N=8,G=192,C=1,K=1,input=8x28x28,filter=3x3x3,pad=1")
    assert "rank is 2D, problem is 3D" in served.why_not(full)
    one_d = next(i for i in explain(separable) if i.instance.family == "dwt" and i.instance.ndim == 1)
    assert f"as {lower_rank(separable).key}" in one_d.reason
    assert served.cell_matches(separable) and not served.cell_matches(full)


def test_a_kernel_of_the_view_takes_the_3d_problems_tensors() -> None:
    """Specs, and so the tensors run() checks, are the 3-D problem's; the plan is the view's."""
    separable = problem("N=2,G=64,C=1,K=1,input=4x12x12,filter=1x3x3,pad=0x1x1")
    solver = solver_for(separable.op)
    inst = next(i for i in lookup(separable) if i.family == "dwl")
    plan = solver.launch_plan(inst.family, inst.params, separable)
    assert plan == solver.launch_plan(inst.family, inst.params, lower_rank(separable))
    assert [s.shape for s in solver.tensors(separable)][0] == (2, 4, 12, 12, 64, 1)


def test_list_names_the_view_a_3d_problem_is_served_through(capsys) -> None:
    from test_cli import run

    spec = "N=8,G=192,C=1,K=1,input=8x28x28,filter=3x1x1,pad=1x0x0"
    code, out, _ = run(capsys, "list", "--op", "conv_bwd_weight", "--layout", "NHWGC", "--dtype", "fp16",
                       "--problem", spec, "--family", "dwl", "--json")
    assert code == 0
    listed = json.loads(out)
    view = lower_rank(problem(spec))
    assert listed["lower_rank_view"] == view.key
    assert listed["applicable"] and {i["ndim"] for i in listed["applicable"]} == {2}
    code, out, _ = run(capsys, "list", "--op", "conv_bwd_weight", "--layout", "NHWGC", "--dtype", "fp16",
                       "--problem", spec.replace("3x1x1", "3x3x3").replace("1x0x0", "1x1x1"), "--json")
    assert code == 0 and json.loads(out)["lower_rank_view"] is None
