"""The device references (templates/common/reference_conv.hip.j2, reference_groupnorm.hip.j2,
reference_dwsep.hip.j2) on the host
emulator: reference and error scale match the numpy reference's: the backward convolutions on every
layout, float dtype and rank, with stride, asymmetric padding, dilation and the epilogue's alpha, beta
and D; GroupNorm backward in both layouts, with and without affine parameters; the fused forward in both
layouts, 1-3 D, with stride, dilation, biases and each activation. The bound is
verify.py's, bit for bit, from the same reference and scale. Buffers carry guard bands, so a write
outside them fails."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from factory import numerics
from factory.device_check import bounds, reference_plan, reference_source
from factory.ops import solver_for
from factory.ops.base import REFERENCE_WORKSPACE, Role
from factory.problem import DType, Layout, Op
from factory.tuner import device_reference, host_references, problem_inputs, TuneSettings
from kernel_emulator import DeviceMemory, available, compile_source, run_plan

pytestmark = pytest.mark.skipif(not available(), reason="the host emulator needs g++")

W, D, GN, F = Op.CONV_BWD_WEIGHT, Op.CONV_BWD_DATA, Op.GROUPNORM_BWD, Op.DWSEP_CONV_FWD
CASES = [
    (W, Layout.NHWGC, DType.FP16, "N=2,G=3,C=2,K=3,input=7x5,filter=3x3,stride=2,pad=1"),
    (W, Layout.NGCHW_GKYXC, DType.BF16, "N=3,G=2,C=3,K=2,input=6x7,filter=3x2,stride=1,pad_left=1x0,pad_right=0x1,dilation=2x1"),
    (W, Layout.NGCHW, DType.FP32, "N=1,G=1,C=5,K=3,input=9,filter=4,stride=3,pad=2"),
    (W, Layout.GNHWC, DType.BF16_FP32W, "N=2,G=2,C=3,K=4,input=3x4x5,filter=2x3x1,stride=1x2x1,pad=0x1x0"),
    (W, Layout.NHWGC, DType.FP16, "N=2,G=4,C=1,K=1,input=11x9,filter=5x5,stride=1,pad=2,alpha=-0.5,beta=0.25"),
    (W, Layout.GNHWC, DType.FP16_COMP_BF8_FP8, "N=2,G=1,C=7,K=5,input=5x6,filter=1x1,stride=1,pad=0,alpha=2"),
    (W, Layout.NHWGC, DType.INT8, "N=2,G=2,C=9,K=3,input=8x7,filter=3x3,stride=1,pad=1,alpha=16777216,beta=-3"),
    (W, Layout.NGCHW, DType.INT8_SAT, "N=3,G=1,C=12,K=5,input=6x6,filter=3x3,stride=1,pad=1,alpha=2,beta=1"),
    (D, Layout.NHWGC, DType.INT8, "N=2,G=2,C=3,K=20,input=7x6,filter=3x3,stride=2,pad=1"),
    (D, Layout.GNHWC, DType.INT8_SAT, "N=2,G=1,C=4,K=24,input=5x5,filter=3x3,stride=1,pad=1"),
    (D, Layout.NHWGC, DType.FP16, "N=2,G=3,C=2,K=3,input=7x5,filter=3x3,stride=2,pad=1"),
    (D, Layout.NGCHW_GKYXC, DType.BF16, "N=2,G=2,C=3,K=4,input=8x7,filter=3x3,stride=3x2,pad_left=1x0,pad_right=2x1,dilation=1x2"),
    (D, Layout.NGCHW, DType.FP32, "N=1,G=1,C=4,K=5,input=10,filter=3,stride=2,pad=0"),
    (D, Layout.GNHWC, DType.FP16, "N=2,G=5,C=1,K=1,input=3x5x6,filter=3x3x3,stride=1x2x2,pad=1"),
    (GN, Layout.NHWGC, DType.FP16, "N=3,C=12,G=4,input=7x5"),
    (GN, Layout.NGCHW, DType.BF16, "N=2,C=6,G=3,input=300"),
    (GN, Layout.NHWGC, DType.FP32, "N=2,C=10,G=5,input=3x4x5,affine=0"),
    (GN, Layout.NGCHW, DType.FP32, "N=1,C=260,G=130,input=3x3"),
    (F, Layout.NHWGC, DType.FP16, "N=2,C=5,K=7,input=9x7,filter=3x3,stride=2,pad=1,dilation=2x1,bias_dw=1,bias_pw=1,act_dw=relu6,act_pw=relu"),
    (F, Layout.NGCHW, DType.FP32, "N=2,C=6,K=3,input=5x6,filter=3x3,stride=1,pad=1,bias_dw=1,act_dw=relu6,act_pw=relu6"),
    (F, Layout.NGCHW, DType.BF16, "N=3,C=4,K=3,input=11,filter=5,stride=1,pad=4,dilation=2,act_dw=relu"),
    (F, Layout.NGCHW, DType.FP32, "N=1,C=3,K=5,input=4x5x6,filter=3x1x3,stride=1x2x1,pad=1x0x1,bias_pw=1,act_pw=relu6"),
    (F, Layout.NHWGC, DType.BF16, "N=2,C=6,K=2,input=6x6,filter=1x1,stride=1,pad=0,bias_dw=1"),
]


def _id(case) -> str:
    op, layout, dtype, spec = case
    return f"{op.value}-{layout.value}-{dtype.value}-{spec}"


def run_reference(op: Op, layout: Layout, dtype: DType, spec: str, seed: int = 0):
    """(specs, host inputs, buffers after the device reference ran on the emulator)."""
    solver = solver_for(op)
    problem = solver.parse_problem(spec, layout, dtype)
    specs = solver.tensors(problem)
    host = problem_inputs(solver, problem, specs, np.random.default_rng(seed))
    if "relu6" in spec:  # values past 6, so that the clamp is reached (x 8 is exact in every float type)
        scalar = problem.dtype.tensor
        host["input"] = numerics.to_storage(numerics.exact_values(host["input"], scalar) * 8, scalar)
    reference = solver.device_reference(problem)
    outputs = [s for s in specs if s.role is Role.OUTPUT]
    plan = reference_plan(reference, outputs, processors=1)
    entries = sorted({step.entry for step in plan.steps})
    lib = ctypes.CDLL(str(compile_source(reference_source(reference, solver, problem, outputs), entries,
                                         f"reference_{op.value}_{dtype.value}")))
    memory = DeviceMemory.empty()
    buffers = {}
    for s in specs:
        raw = memory.alloc(s.name, s.nbytes, 0xFF)
        if s.role is Role.INPUT:
            raw[:] = np.ascontiguousarray(host[s.name]).reshape(-1).view(np.uint8)
        buffers[s.name] = raw
    for s in outputs:
        for part, dtype_of in ((".ref", np.float64), (".scale", np.float64), (".allowed", np.float32)):
            buffers[s.name + part] = memory.alloc(s.name + part, s.numel * np.dtype(dtype_of).itemsize, 0xFF).view(dtype_of)
    if reference.plan.workspace_bytes:
        buffers[REFERENCE_WORKSPACE] = memory.alloc(REFERENCE_WORKSPACE, reference.plan.workspace_bytes, 0xFF)
    run_plan(lib, plan, buffers)
    assert memory.clobbered() == []
    return solver, problem, specs, host, buffers


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_device_reference_is_the_numpy_reference(case):
    solver, problem, specs, host, buffers = run_reference(*case)
    ref, scale = host_references(solver, problem, specs, host)
    for spec in (s for s in specs if s.role is Role.OUTPUT):
        got_ref = buffers[spec.name + ".ref"].reshape(spec.shape)
        got_scale = buffers[spec.name + ".scale"].reshape(spec.shape)
        assert np.all(np.isfinite(got_ref)) and np.all(np.isfinite(got_scale))  # every element written
        if not spec.scalar.is_float:  # exact integers, to be matched exactly
            assert np.array_equal(got_ref, ref[spec.name]) and not np.any(buffers[spec.name + ".allowed"])
            continue
        # float64 sums in another order: equal to a few units in the last place of the terms' scale
        assert np.all(np.abs(got_ref - ref[spec.name]) <= 1e-13 * scale[spec.name] + 1e-300)
        assert np.all(np.abs(got_scale - scale[spec.name]) <= 1e-13 * scale[spec.name] + 1e-300)
        want, allowed = bounds(solver, problem, spec, got_ref, got_scale)
        assert np.array_equal(buffers[spec.name + ".allowed"], allowed)


def test_a_wrong_reference_fails_the_comparison():
    """The comparison above can fail: the reference of other inputs (a changed seed) is far off."""
    solver, problem, specs, host, buffers = run_reference(*CASES[0], seed=1)
    ref, scale = host_references(solver, problem, specs, problem_inputs(
        solver, problem, specs, np.random.default_rng(0)))
    spec = next(s for s in specs if s.role is Role.OUTPUT)
    got = buffers[spec.name + ".ref"].reshape(spec.shape)
    assert not np.all(np.abs(got - ref[spec.name]) <= 1e-13 * scale[spec.name] + 1e-300)


def test_which_tunes_compute_the_reference_on_the_device():
    conv = solver_for(W)
    fp16 = conv.parse_problem(CASES[0][3], Layout.NHWGC, DType.FP16)
    int8 = conv.parse_problem(CASES[0][3], Layout.NHWGC, DType.INT8)
    specs = conv.tensors(fp16)
    able = SimpleNamespace(device_checks=True)
    assert device_reference(able, conv, fp16, specs, TuneSettings()) is not None
    assert device_reference(able, conv, fp16, specs, TuneSettings(device_verify=False)) is None
    assert device_reference(SimpleNamespace(), conv, fp16, specs, TuneSettings()) is None  # reads outputs back
    assert device_reference(able, conv, int8, conv.tensors(int8), TuneSettings()) is not None  # exact sums there too
    huge = solver_for(Op.DWSEP_CONV_FWD)
    problem = huge.parse_problem("N=4096,C=2048,K=8,input=32x32,filter=3x3,stride=1,pad=1", Layout.NHWGC, DType.FP16)
    assert device_reference(able, huge, problem, huge.tensors(problem), TuneSettings()) is None  # scratch too large
