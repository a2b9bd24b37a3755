"""conv_bwd_weight's output epilogue: alpha * dW + beta * D (Scale, Bilinear).

The op's side (the D tensor, the reference and its error scale, launch plans, the PyTorch baseline on
CPU), then every family with every split-K reduction it has, each with a Scale and a Bilinear problem,
run on the host by kernel_emulator against the reference (odd sizes, every dtype, int8 exactly); then
plans broken on purpose, which must fail, and D given as the output buffer itself (accumulating into an
existing gradient). Problem spelling and validation are in test_problem.py.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import kernel_emulator
from test_emulated_conv import pick_instance  # the same id / family / reduction / pick / problem fields
from factory import numerics
from factory.catalog import Instance, select_instances
from factory.ops.base import F32, Buf, Launch, Memset, Role, Struct
from factory.ops.conv import EPILOGUE_ARGS
from factory.ops.conv_bwd_weight import SOLVER, Reduction
from factory.problem import ConvProblem, DType, Layout
from factory.selector import lookup
from factory.verify import reference_outputs, verify

L, D, R = Layout, DType, Reduction


def parse(spec: str, layout: Layout = L.NHWGC, dtype: DType = D.FP32) -> ConvProblem:
    return SOLVER.parse_problem(spec, layout, dtype)


def inputs_for(problem: ConvProblem, seed: int = 0) -> dict[str, np.ndarray]:
    """Exact float64 / int64 values of fresh random inputs, keyed by tensor name."""
    rng = np.random.default_rng(seed)
    specs = SOLVER.tensors(problem)
    return {s.name: numerics.exact_values(numerics.random_tensor(rng, s.shape, s.scalar), s.scalar)
            for s in specs if s.role is Role.INPUT}


# --- the op: tensors, reference, error scale ---------------------------------------------------------------
SMALL = "N=2,G=2,C=3,K=4,input=7x5,filter=3x3,pad=1"


@pytest.mark.parametrize("layout", list(Layout), ids=lambda l: l.name)
@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.value)
def test_d_is_an_input_like_the_weight_gradient_only_when_beta_is_not_zero(layout, dtype):
    plain = SOLVER.tensors(parse(SMALL, layout, dtype))
    scaled = SOLVER.tensors(parse(SMALL + ",alpha=2", layout, dtype))
    assert [s.name for s in plain] == [s.name for s in scaled] == ["input", "grad_output", "grad_weight"]
    specs = {s.name: s for s in SOLVER.tensors(parse(SMALL + ",alpha=2,beta=-1", layout, dtype))}
    assert list(specs) == ["input", "grad_output", "d", "grad_weight"]
    d, w = specs["d"], specs["grad_weight"]
    assert d.role is Role.INPUT and (d.shape, d.scalar, d.dims) == (w.shape, w.scalar, w.dims)
    assert d.scalar is dtype.weight  # fp32 for bf16_fp32w, int32 for int8
    p = parse(SMALL + ",beta=1", layout, dtype)
    assert SOLVER.framework_view(p, "d") == SOLVER.framework_view(p, "grad_weight")


@pytest.mark.parametrize("dtype", [D.FP16, D.FP32, D.INT8], ids=lambda d: d.value)
def test_reference_is_alpha_dw_plus_beta_d(dtype):
    spec = SMALL + (",alpha=-3,beta=5" if dtype is D.INT8 else ",alpha=0.375,beta=-1.5")
    p = parse(spec, L.NGCHW, dtype)
    values = inputs_for(p, seed=4)
    plain = dataclasses.replace(p, alpha=1.0, beta=0.0)
    dw = SOLVER.reference(plain, values)["grad_weight"]
    got = SOLVER.reference(p, values)["grad_weight"]
    want = p.alpha * dw + p.beta * values["d"]
    if dtype is D.INT8:
        assert got.dtype == np.int64 and np.array_equal(got, want.astype(np.int64))
    else:
        assert got.dtype == np.float64 and np.allclose(got, want, rtol=1e-12, atol=0)
    # Scale alone reads no D; the plain reference is what it was.
    scaled = dataclasses.replace(p, beta=0.0)
    assert np.allclose(SOLVER.reference(scaled, values)["grad_weight"], p.alpha * dw)


def test_int8_epilogue_wraps_to_int32_as_the_kernels_do():
    big = 2**24
    p = parse(SMALL + f",alpha={big},beta=-{big}", L.NHWGC, D.INT8)
    values = inputs_for(p, seed=6)
    dw = SOLVER.reference(dataclasses.replace(p, alpha=1.0, beta=0.0), values)["grad_weight"]
    exact = big * dw - big * values["d"]
    assert np.abs(exact).max() > 2**31  # the case is an overflowing one
    got = SOLVER.reference(p, values)["grad_weight"]
    assert np.array_equal(got, exact.astype(np.int32).astype(np.int64))  # numpy's cast wraps
    assert got.min() >= -(2**31) and got.max() < 2**31


def test_error_scale_counts_both_terms_and_cannot_cancel():
    """|alpha| sum|x dy| + |beta D|: with alpha < 0 the reference on |inputs| would subtract the parts."""
    p = parse(SMALL + ",alpha=-1,beta=1", L.NHWGC, D.FP32)
    values = inputs_for(p, seed=2)
    plain = dataclasses.replace(p, alpha=1.0, beta=0.0)
    abs_dw = SOLVER.reference(plain, {k: np.abs(v) for k, v in values.items() if k != "d"})["grad_weight"]
    _, scale = reference_outputs(SOLVER, p, values)
    assert np.allclose(scale["grad_weight"], abs_dw + np.abs(values["d"]))
    # D equal to dW: the result cancels to 0, yet an fp32-sized error there is still accepted ...
    values["d"] = SOLVER.reference(plain, values)["grad_weight"]
    ref, scale = reference_outputs(SOLVER, p, values)
    assert np.allclose(ref["grad_weight"], 0.0, atol=1e-12)
    close = {"grad_weight": ref["grad_weight"] + 1e-6 * scale["grad_weight"]}
    assert verify(SOLVER, p, close, ref, scale).ok
    # ... and a wrong one is not.
    far = {"grad_weight": ref["grad_weight"] + 1e-3 * scale["grad_weight"]}
    assert not verify(SOLVER, p, far, ref, scale).ok


def test_identity_error_scale_is_the_reference_on_absolute_inputs():
    p = parse(SMALL, L.NGCHW, D.FP16)
    values = inputs_for(p, seed=3)
    _, scale = reference_outputs(SOLVER, p, values)
    abs_ref = SOLVER.reference(p, {k: np.abs(v) for k, v in values.items()})
    assert np.allclose(scale["grad_weight"], abs_ref["grad_weight"])


# --- launch plans ------------------------------------------------------------------------------------------
def _plan(problem: ConvProblem, family: str, reduction: Reduction):
    inst = next(i for i in lookup(problem) if i.family == family and i.params.reduction is reduction)
    return SOLVER.launch_plan(inst.family, inst.params, problem)


def _epilogues(plan) -> list[Struct]:
    return [a for s in plan.steps if isinstance(s, Launch) for a in s.args
            if isinstance(a, Struct) and a.ctype == EPILOGUE_ARGS]


SPLIT = "N=4,G=2,C=3,K=4,input=15x13,filter=3x3,pad=1"  # long enough a reduction for every split-K point


@pytest.mark.parametrize("dtype", [D.FP32, D.INT8, D.BF16_FP32W], ids=lambda d: d.value)
def test_atomic_into_an_accumulator_type_output_goes_through_the_workspace_with_an_epilogue(dtype):
    plain = parse(SPLIT, L.NHWGC, dtype)
    plan = _plan(plain, "dl", R.ATOMIC)
    assert [type(s).__name__ for s in plan.steps] == ["Memset", "Launch"] and plan.workspace_bytes == 0
    assert plan.steps[0].buffer == "grad_weight"
    for spec in (SPLIT + ",alpha=2", SPLIT + ",beta=-1"):
        p = parse(spec, L.NHWGC, dtype)
        plan = _plan(p, "dl", R.ATOMIC)
        memset, main, finalize = plan.steps
        assert isinstance(memset, Memset) and memset.buffer == "workspace"
        assert main.args[0]["wei"] == Buf("workspace") and finalize.entry == "kf_finalize"
        assert finalize.args[0]["splits"].value == 1 and plan.workspace_bytes == 4 * 3 * 4 * 2 * 9


DEPTHWISE = "N=8,G=32,C=1,K=1,input=28x28,filter=3x3,pad=1"


@pytest.mark.parametrize("family, spec", [("dl", SPLIT), ("dw", DEPTHWISE), ("dwt", DEPTHWISE), ("dwr", DEPTHWISE)])
def test_every_kernel_of_a_plan_gets_the_epilogue_second_after_the_conv_arguments(family, spec):
    catalog = {i.params.reduction for i in select_instances(SOLVER.op) if i.family == family}
    for extra, d, alpha, beta in (("", "grad_weight", 1.0, 0.0), (",alpha=0.5", "grad_weight", 0.5, 0.0),
                                  (",alpha=0.5,beta=3", "d", 0.5, 3.0)):
        p = parse(spec + extra, L.NHWGC, D.FP16)
        for reduction in catalog:  # each reduction the family has
            plan = _plan(p, family, reduction)
            main = next(s for s in plan.steps if isinstance(s, Launch) and s.entry == "kf_main")
            assert main.args[0].ctype == "kf_conv_args" and main.args[1].ctype == EPILOGUE_ARGS
            finalize = [s for s in plan.steps if isinstance(s, Launch) and s.entry == "kf_finalize"]
            assert all(f.args[1].ctype == EPILOGUE_ARGS for f in finalize)
            for ep in _epilogues(plan):
                assert ep.fields == (("d", Buf(d)), ("alpha", F32(alpha)), ("beta", F32(beta)))


def test_a_main_launch_must_pass_the_conv_arguments_first(monkeypatch):
    family = SOLVER.family("dl")
    p = parse(SMALL)
    right = family.main_launch

    def swapped(*args: Any) -> Launch:
        launch = right(*args)
        return dataclasses.replace(launch, args=(*launch.args[1:], launch.args[0]))

    monkeypatch.setattr(family, "main_launch", swapped)
    inst = next(i for i in lookup(p) if i.family == "dl")
    with pytest.raises(ValueError, match="conv argument struct first"):
        SOLVER.launch_plan("dl", inst.params, p)


# --- the PyTorch baseline (CPU) --------------------------------------------------------------------------
@pytest.mark.parametrize("layout", [L.NHWGC, L.NGCHW, L.GNHWC], ids=lambda l: l.name)
@pytest.mark.parametrize("extra", [",alpha=-0.5", ",alpha=2,beta=-1.5", ",beta=0.25"])
def test_torch_baseline_computes_the_epilogue(layout, extra):
    torch = pytest.importorskip("torch")
    from factory.bench.runner import make_tensors

    p = parse("N=2,G=3,C=2,K=4,input=7x6,filter=3x3,stride=2,pad=1" + extra, layout, D.FP32)
    specs = SOLVER.tensors(p)
    tensors = make_tensors(specs, torch.device("cpu"), seed=5)
    inputs = {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT}
    assert ("d" in inputs) == p.has_d
    baseline = SOLVER.torch_baseline(p, inputs)
    baseline.run()
    got = baseline.outputs()["grad_weight"]
    want = SOLVER.reference(p, {k: v.double().numpy() for k, v in inputs.items()})["grad_weight"]
    np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-5, atol=1e-5)


# --- every family and reduction, Scale and Bilinear, on the host ------------------------------------------
emulated = pytest.mark.skipif(not kernel_emulator.available(), reason="g++ is not on PATH")


def wide(p: Any) -> bool:
    return p.threads_lane > 1 and p.vector > 1


@dataclass(frozen=True)
class Case:
    id: str
    family: str
    reduction: Reduction
    layout: Layout
    dtype: DType
    spec: str
    pick: Callable[[Any], bool] | None = None

    @property
    def problem(self) -> ConvProblem:
        return parse(self.spec, self.layout, self.dtype)


CASES = [
    Case("dl-direct-scale", "dl", R.DIRECT, L.NGCHW, D.FP16, "N=1,G=2,C=3,K=5,input=9x7,filter=3x3,stride=2,pad=0,alpha=-0.75"),
    Case("dl-direct-bilinear", "dl", R.DIRECT, L.NHWGC, D.FP32, "N=2,G=2,C=3,K=5,input=7x5,filter=3x3,pad=1,alpha=0.5,beta=-1.25"),
    Case("dl-atomic-scale", "dl", R.ATOMIC, L.GNHWC, D.FP32, "N=2,G=3,C=3,K=3,input=9x8,filter=3x3,pad=2,dilation=2,alpha=2.5"),
    Case("dl-atomic-bilinear", "dl", R.ATOMIC, L.NGCHW_GKYXC, D.BF16, "N=1,G=1,C=3,K=4,input=5x6x7,filter=3x3x3,pad=1,alpha=-1.5,beta=0.5"),
    Case("dl-twostage-scale", "dl", R.TWOSTAGE, L.NHWGC, D.INT8, "N=2,G=3,C=8,K=4,input=75,filter=5,pad=2,dilation=2,alpha=-3"),
    Case("dl-twostage-bilinear", "dl", R.TWOSTAGE, L.NHWGC, D.BF16_FP32W, "N=1,G=2,C=2,K=6,input=8x7x9,filter=2x3x3,stride=2x1x2,pad=0x1x1,alpha=0.25,beta=3"),
    Case("dw-direct-scale", "dw", R.DIRECT, L.NGCHW, D.BF16, "N=1,G=2,C=2,K=3,input=7x5,filter=3x3,pad=1,alpha=3"),
    Case("dw-direct-bilinear", "dw", R.DIRECT, L.GNHWC, D.INT8, "N=2,G=3,C=2,K=2,input=99,filter=5,pad=2,alpha=2,beta=-5"),
    Case("dw-atomic-scale", "dw", R.ATOMIC, L.GNHWC, D.FP32, "N=2,G=3,C=2,K=2,input=999,filter=5,pad=2,alpha=0.5"),
    Case("dw-atomic-bilinear", "dw", R.ATOMIC, L.NGCHW, D.INT8, "N=2,G=2,C=1,K=2,input=1001,filter=3,pad=1,alpha=1,beta=7"),
    Case("dw-twostage-scale", "dw", R.TWOSTAGE, L.NGCHW_GKYXC, D.FP16, "N=1,G=2,C=1,K=2,input=12x12x14,filter=3x3x3,pad=1,alpha=-2"),
    Case("dw-twostage-bilinear", "dw", R.TWOSTAGE, L.NHWGC, D.BF16_FP32W, "N=2,G=64,C=1,K=1,input=16x16,filter=3x3,pad=1,alpha=0.5,beta=-1", wide),
    Case("dwt-atomic-scale", "dwt", R.ATOMIC, L.GNHWC, D.FP32, "N=1,G=2,C=1,K=1,input=17x20,filter=5x5,pad=2,alpha=-0.5"),
    Case("dwt-atomic-bilinear", "dwt", R.ATOMIC, L.NHWGC, D.FP16, "N=43,G=32,C=1,K=1,input=8x15,filter=3x3,pad=1,alpha=0.75,beta=0.5", wide),
    Case("dwt-twostage-scale", "dwt", R.TWOSTAGE, L.NGCHW, D.BF16, "N=2,G=3,C=1,K=1,input=19x13,filter=3x3,stride=2,alpha=4"),
    Case("dwt-twostage-bilinear", "dwt", R.TWOSTAGE, L.NGCHW_GKYXC, D.INT8, "N=2,G=2,C=1,K=1,input=37x23,filter=3x3,stride=2,pad=0,alpha=-1,beta=3"),
    Case("dwr-atomic-scale", "dwr", R.ATOMIC, L.NHWGC, D.BF16_FP32W, "N=2,G=64,C=1,K=1,input=2024,filter=3,pad=1,alpha=0.125", wide),
    Case("dwr-atomic-bilinear", "dwr", R.ATOMIC, L.GNHWC, D.INT8, "N=2,G=1,C=1,K=1,input=62x248,filter=3x3,pad=2,dilation=2,alpha=2,beta=-1"),
    Case("dwr-twostage-scale", "dwr", R.TWOSTAGE, L.NGCHW, D.FP32, "N=2,G=2,C=1,K=1,input=39x79,filter=5x5,stride=2,pad=2,alpha=-1.5"),
    Case("dwr-twostage-bilinear", "dwr", R.TWOSTAGE, L.NHWGC, D.FP16, "N=50,G=32,C=1,K=1,input=7x11,filter=3x3,pad=1,alpha=0.5,beta=2", wide),
    Case("dwh-atomic-scale", "dwh", R.ATOMIC, L.NGCHW, D.FP16, "N=35,G=3,C=1,K=1,input=40x23,filter=3x3,pad=1,alpha=0.25"),
    Case("dwh-atomic-bilinear", "dwh", R.ATOMIC, L.NHWGC, D.BF16, "N=90,G=64,C=1,K=1,input=13x11,filter=3x3,pad=1,alpha=0.5,beta=2",
         wide),
    Case("dwh-twostage-bilinear", "dwh", R.TWOSTAGE, L.GNHWC, D.FP32,
         "N=40,G=2,C=1,K=1,input=21x30,filter=5x3,stride=2,pad=2x1,alpha=-1.5,beta=0.75"),
    Case("mma-direct-scale", "mma", R.DIRECT, L.NGCHW, D.BF16, "N=3,G=2,C=3,K=5,input=20x18,filter=3x3,stride=2,pad=0,alpha=-0.75"),
    Case("mma-direct-bilinear", "mma", R.DIRECT, L.NHWGC, D.FP16, "N=1,G=1,C=16,K=24,input=23x19,filter=3x3,stride=2,pad=2,dilation=2,alpha=0.5,beta=-1.25"),
    Case("mma-atomic-scale", "mma", R.ATOMIC, L.GNHWC, D.FP16, "N=2,G=3,C=8,K=8,input=300,filter=5,pad=4,dilation=2,alpha=2.5"),
    Case("mma-atomic-bilinear", "mma", R.ATOMIC, L.NGCHW_GKYXC, D.BF16_FP32W, "N=2,G=1,C=3,K=4,input=5x6x8,filter=3x3x3,pad=1,alpha=-1.5,beta=0.5"),
    Case("mma-twostage-scale", "mma", R.TWOSTAGE, L.NHWGC, D.BF16, "N=2,G=2,C=8,K=16,input=17x15,filter=3x3,pad=1,alpha=0.25"),
    Case("mma-twostage-bilinear", "mma", R.TWOSTAGE, L.NHWGC, D.BF16_FP32W, "N=2,G=2,C=8,K=16,input=17x15,filter=3x3,pad=1,alpha=0.25,beta=3"),
    Case("wgmma-direct-scale", "wgmma", R.DIRECT, L.GNHWC, D.BF16, "N=2,G=2,C=8,K=16,input=9x10,filter=3x3,stride=2,pad=1,alpha=-0.75"),
    Case("wgmma-direct-bilinear", "wgmma", R.DIRECT, L.NHWGC, D.FP16, "N=1,G=1,C=16,K=24,input=23x19,filter=3x3,stride=2,pad=2,dilation=2,alpha=0.5,beta=-1.25"),
    Case("wgmma-atomic-scale", "wgmma", R.ATOMIC, L.GNHWC, D.FP16, "N=2,G=3,C=8,K=8,input=300,filter=5,pad=4,dilation=2,alpha=2.5"),
    Case("wgmma-atomic-bilinear", "wgmma", R.ATOMIC, L.NHWGC, D.BF16_FP32W, "N=2,G=1,C=3,K=4,input=8x8x9,filter=3x3x3,pad=1,alpha=-1.5,beta=0.5"),
    Case("wgmma-twostage-scale", "wgmma", R.TWOSTAGE, L.NHWGC, D.BF16, "N=2,G=2,C=8,K=16,input=17x15,filter=3x3,pad=1,alpha=0.25"),
    Case("wgmma-twostage-bilinear", "wgmma", R.TWOSTAGE, L.GNHWC, D.BF16_FP32W, "N=2,G=2,C=8,K=16,input=17x15,filter=3x3,pad=1,alpha=0.25,beta=3"),
    Case("pw-direct-scale", "pw", R.DIRECT, L.NHWGC, D.FP16, "N=2,G=1,C=16,K=24,input=13x11,filter=1x1,alpha=-0.75"),
    Case("pw-direct-bilinear", "pw", R.DIRECT, L.GNHWC, D.BF16, "N=1,G=2,C=8,K=72,input=37,filter=1,alpha=0.5,beta=-1.25"),
    Case("pw-atomic-scale", "pw", R.ATOMIC, L.NHWGC, D.BF16_FP32W, "N=2,G=1,C=24,K=8,input=4x8x33,filter=1x1x1,alpha=2.5"),
    Case("pw-atomic-bilinear", "pw", R.ATOMIC, L.NHWGC, D.FP16, "N=4,G=2,C=8,K=16,input=20x20,filter=1x1,alpha=-1.5,beta=0.5"),
    Case("pw-twostage-scale", "pw", R.TWOSTAGE, L.GNHWC, D.FP16, "N=2,G=2,C=8,K=16,input=17x15,filter=1x1,alpha=0.25"),
    Case("pw-twostage-bilinear", "pw", R.TWOSTAGE, L.NHWGC, D.BF16, "N=3,G=1,C=24,K=40,input=9x11,filter=1x1,alpha=0.25,beta=3"),
    Case("mma-atomic-bilinear-fp8", "mma", R.ATOMIC, L.NHWGC, D.FP16_COMP_BF8_FP8, "N=2,G=2,C=8,K=16,input=17x15,filter=3x3,pad=1,alpha=0.5,beta=-2"),
    Case("dl-direct-bilinear-int8sat", "dl", R.DIRECT, L.NHWGC, D.INT8_SAT, "N=2,G=3,C=8,K=4,input=15,filter=5,pad=2,alpha=5,beta=-3"),
    Case("mma-twostage-bilinear-int8", "mma", R.TWOSTAGE, L.GNHWC, D.INT8, "N=2,G=2,C=16,K=32,input=29x30,filter=3x3,pad=1,alpha=-2,beta=3"),
    Case("mfma-direct-scale", "mfma", R.DIRECT, L.NGCHW, D.BF16, "N=3,G=2,C=3,K=5,input=20x18,filter=3x3,stride=2,pad=0,alpha=-0.75"),
    Case("mfma-direct-bilinear", "mfma", R.DIRECT, L.NHWGC, D.FP16, "N=1,G=1,C=16,K=24,input=23x19,filter=3x3,stride=2,pad=2,dilation=2,alpha=0.5,beta=-1.25"),
    Case("mfma-atomic-scale", "mfma", R.ATOMIC, L.GNHWC, D.FP32, "N=2,G=3,C=8,K=8,input=300,filter=5,pad=4,dilation=2,alpha=2.5"),
    Case("mfma-atomic-bilinear", "mfma", R.ATOMIC, L.NGCHW_GKYXC, D.BF16_FP32W, "N=2,G=1,C=3,K=4,input=5x6x8,filter=3x3x3,pad=1,alpha=-1.5,beta=0.5"),
    Case("mfma-twostage-scale", "mfma", R.TWOSTAGE, L.NHWGC, D.BF16, "N=2,G=2,C=8,K=16,input=17x15,filter=3x3,pad=1,alpha=0.25"),
    Case("mfma-twostage-bilinear", "mfma", R.TWOSTAGE, L.GNHWC, D.FP16, "N=2,G=2,C=8,K=16,input=17x15,filter=3x3,pad=1,alpha=0.25,beta=3"),
]


@pytest.fixture(scope="module")
def picked() -> dict[str, Instance]:
    chosen = {case.id: pick_instance(case) for case in CASES}
    kernel_emulator.prebuild([(chosen[c.id], c.problem) for c in CASES])
    return chosen


def test_cases_reach_every_family_and_reduction_with_scale_and_bilinear() -> None:
    catalog = select_instances(SOLVER.op)
    have = {(c.family, c.reduction, c.problem.has_d) for c in CASES}
    for family in SOLVER.families:
        for reduction in Reduction:
            if reduction is Reduction.COOP:  # a cooperative launch, which the emulator cannot run (one block at a
                continue  # time): tests/test_gpu_pointwise.py and test_gpu_coop_grid_finish.py run coop points on epilogue problems
            if any(i.family == family and i.params.reduction is reduction for i in catalog):
                assert {(family, reduction, False), (family, reduction, True)} <= have, (family, reduction)
    assert all(c.problem.has_epilogue for c in CASES)
    assert {c.dtype for c in CASES} == set(DType)


@emulated
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_emulated_epilogue_matches_reference(case: Case, picked: dict[str, Instance]) -> None:
    inst = picked[case.id]
    verdict = kernel_emulator.check_instance(inst, case.problem, seed=zlib.crc32(case.id.encode()))
    assert verdict.ok, f"{inst.name} on {case.spec}: {verdict.message}"


@emulated
@pytest.mark.parametrize("case_id", ["dl-direct-scale", "dl-atomic-bilinear", "dw-twostage-scale"])
def test_emulated_int8_epilogue_overflows_as_the_reference_does(case_id: str, picked: dict[str, Instance]) -> None:
    """The largest int8 alpha and beta (2**24): int32 results wrap, in the kernels as in the reference."""
    case = next(c for c in CASES if c.id == case_id)
    problem = dataclasses.replace(case.problem, dtype=D.INT8, alpha=2.0**24, beta=-(2.0**24))
    inst = next(i for i in lookup(problem) if i.family == case.family and i.params.reduction is case.reduction)
    verdict = kernel_emulator.check_instance(inst, problem, seed=11)
    assert verdict.ok, f"{inst.name} on {problem.key}: {verdict.message}"


# --- the checks can fail ---------------------------------------------------------------------------------
def _replace_epilogue(plan: Any, entries: tuple[str, ...], **fields: Any) -> Any:
    """The plan with some fields of the epilogue struct of the named launches replaced."""
    def change(step: Any) -> Any:
        if not (isinstance(step, Launch) and step.entry in entries):
            return step
        args = tuple(a.replace(**fields) if isinstance(a, Struct) and a.ctype == EPILOGUE_ARGS else a for a in step.args)
        return dataclasses.replace(step, args=args)
    return dataclasses.replace(plan, steps=tuple(change(s) for s in plan.steps))


def _identity(entries: tuple[str, ...]) -> Callable[[Any], Any]:
    return lambda plan: _replace_epilogue(plan, entries, alpha=F32(1.0), beta=F32(0.0))


def _d_from_output(plan: Any) -> Any:
    """D read from the (poisoned) output instead of the d buffer."""
    return _replace_epilogue(plan, ("kf_main", "kf_finalize"), d=Buf("grad_weight"))


def _atomics_into_output(plan: Any) -> Any:
    """The plain plan's atomics straight into an fp32 output, which no kernel then scales."""
    memset, main, _finalize = plan.steps
    args = (main.args[0].replace(wei=Buf("grad_weight")), *main.args[1:])
    return dataclasses.replace(plan, steps=(Memset("grad_weight", memset.nbytes), dataclasses.replace(main, args=args)))


BROKEN = [
    ("dl-direct-scale", _identity(("kf_main",)), "grad_weight"),
    ("dl-direct-bilinear", _d_from_output, "not finite"),
    ("dw-direct-bilinear", _identity(("kf_main",)), "integers differ"),
    ("dl-twostage-bilinear", _identity(("kf_finalize",)), "grad_weight"),
    ("dwr-twostage-bilinear", _d_from_output, "not finite"),
    ("dw-atomic-bilinear", _d_from_output, "integers differ"),
    ("dl-atomic-scale", _atomics_into_output, "grad_weight"),
    # The main kernel ignores the epilogue under split-K: the finishing kernel alone applies it.
    ("dwt-atomic-bilinear", _identity(("kf_finalize",)), "grad_weight"),
]


@emulated
@pytest.mark.parametrize("case_id, breakage, says", BROKEN, ids=lambda v: getattr(v, "__name__", v))
def test_emulator_catches_a_wrong_epilogue(case_id: str, breakage: Callable[[Any], Any], says: str,
                                           picked: dict[str, Instance], monkeypatch: pytest.MonkeyPatch) -> None:
    case = next(c for c in CASES if c.id == case_id)
    inst = picked[case_id]
    right = kernel_emulator._plan
    monkeypatch.setattr(kernel_emulator, "_plan", lambda i, p: breakage(right(i, p)))
    verdict = kernel_emulator.check_instance(inst, case.problem)
    assert not verdict.ok and says in verdict.message, verdict.message


# --- D may be the output itself: accumulating into an existing gradient -----------------------------------
def run_in_place(inst: Instance, problem: ConvProblem, seed: int = 0):
    """check_instance with one buffer for d and grad_weight, holding D before the run."""
    rng = np.random.default_rng(seed)
    specs, host = kernel_emulator._tensors(problem, rng)
    plan = kernel_emulator._plan(inst, problem)
    memory = kernel_emulator.DeviceMemory.empty()
    buffers: dict[str, np.ndarray] = {}
    for s in specs:
        if s.name == "d":
            continue
        storage = numerics.STORAGE[s.scalar]
        raw = memory.alloc(s.name, s.nbytes, 0)
        source = host["d"] if s.name == "grad_weight" else host[s.name]
        raw[:] = np.ascontiguousarray(source, dtype=storage).reshape(-1).view(np.uint8)
        buffers[s.name] = raw.view(storage).reshape(s.shape)
    buffers["d"] = buffers["grad_weight"]
    buffers["workspace"] = memory.alloc("workspace", plan.workspace_bytes, 0xFF)
    kernel_emulator.run_plan(kernel_emulator.build(inst, kernel_emulator._entries(plan)), plan, buffers)
    assert not memory.clobbered()
    return kernel_emulator._judge(problem, specs, host, buffers)


@emulated
@pytest.mark.parametrize("case_id", ["dl-direct-bilinear", "dl-atomic-bilinear", "dw-direct-bilinear",
                                     "dwr-twostage-bilinear"])
def test_d_may_be_the_output_buffer(case_id: str, picked: dict[str, Instance]) -> None:
    case = next(c for c in CASES if c.id == case_id)
    accumulate = dataclasses.replace(case.problem, alpha=1.0, beta=1.0)  # grad += dW
    for problem in (case.problem, accumulate):
        verdict = run_in_place(picked[case_id], problem, seed=7)
        assert verdict.ok, f"{picked[case_id].name} on {problem.key}: {verdict.message}"
