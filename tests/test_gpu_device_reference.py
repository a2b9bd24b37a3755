"""On a GPU: the device references (what a tune judges candidates against) equal the numpy reference on
64 seeded random backward-convolution problems, 24 GroupNorm and 24 fused-forward problems, and their
bounds are verify.py's.

Convolutions: backward-weight and backward-data; every layout; every dtype of each op (int8: exact,
with the int32 epilogue's wrap and saturation); 1-D, 2-D and 3-D; depthwise, grouped and dense; stride 1-3, dilation 1-2, padding drawn per side; for
backward-weight an epilogue (alpha, beta and D) on a third of them. GroupNorm: both layouts, every
dtype, 1-3 D, with and without affine parameters. Fused forward: both layouts, every dtype, 1-3 D,
stride, padding, dilation, each bias and activation. Each is computed by DeviceCheck as a tune does, from
the inputs uploaded to the device, and read back."""

from __future__ import annotations

import numpy as np
import pytest

from factory.device import target_for
from factory.device_check import DeviceCheck, bounds
from factory.ops import solver_for
from factory.ops.base import Role
from factory.problem import DType, Layout, Op
from factory.tuner import DeviceTensors, host_references, problem_inputs

pytestmark = pytest.mark.gpu

SEED = 7070
COUNT = 64


def draw(rng: np.random.Generator) -> tuple[Op, Layout, DType, str]:
    op = Op.CONV_BWD_WEIGHT if rng.random() < 0.5 else Op.CONV_BWD_DATA
    dtypes = [DType.FP16, DType.BF16, DType.FP32, DType.INT8, DType.INT8_SAT]
    if op is Op.CONV_BWD_WEIGHT:
        dtypes += [DType.BF16_FP32W, DType.FP16_COMP_BF8_FP8]
    dtype = dtypes[int(rng.integers(len(dtypes)))]
    layout = list(Layout)[int(rng.integers(len(Layout)))]
    ndim = int(rng.choice([1, 2, 2, 3]))
    shape = rng.choice(["depthwise", "grouped", "dense"])
    if shape == "depthwise":
        g, c, k = int(rng.integers(1, 40)), 1, 1
    elif shape == "grouped":
        g, c, k = int(rng.integers(2, 9)), int(rng.integers(1, 12)), int(rng.integers(1, 12))
    else:
        g, c, k = 1, int(rng.integers(1, 40)), int(rng.integers(1, 40))
    n = int(rng.choice([1, 2, 3, 5]))
    span = {1: 40, 2: 14, 3: 5}[ndim]
    filt = [int(rng.integers(1, 10 if ndim == 1 else 6)) for _ in range(ndim)]
    dil = [int(rng.choice([1, 1, 2])) for _ in range(ndim)]
    stride = [int(rng.choice([1, 1, 2, 3])) for _ in range(ndim)]
    size = [int(rng.integers(f * d, f * d + span)) for f, d in zip(filt, dil)]
    left = [int(rng.integers(0, (f - 1) * d // 2 + 2)) for f, d in zip(filt, dil)]
    right = [int(rng.integers(0, (f - 1) * d // 2 + 2)) for f, d in zip(filt, dil)]
    x = lambda values: "x".join(map(str, values))  # noqa: E731
    spec = (f"N={n},G={g},C={c},K={k},input={x(size)},filter={x(filt)},stride={x(stride)},"
            f"pad_left={x(left)},pad_right={x(right)},dilation={x(dil)}")
    if op is Op.CONV_BWD_WEIGHT and rng.random() < 1 / 3:
        if dtype.is_integer:  # integer alpha and beta; 2^24 makes int32 wrap
            spec += f",alpha={rng.choice([3, -2, 16777216])},beta={rng.choice([1, -5])}"
        else:
            spec += f",alpha={rng.choice([0.5, -1.25, 2.0])},beta={rng.choice([0.75, -0.5])}"
    return op, layout, dtype, spec


def draw_groupnorm(rng: np.random.Generator) -> tuple[Op, Layout, DType, str]:
    layout = Layout.NHWGC if rng.random() < 0.5 else Layout.NGCHW
    dtype = [DType.FP16, DType.BF16, DType.FP32][int(rng.integers(3))]
    g, d = int(rng.integers(1, 33)), int(rng.integers(1, 17))
    ndim = int(rng.choice([1, 2, 3]))
    size = [int(rng.integers(1, {1: 900, 2: 40, 3: 12}[ndim])) for _ in range(ndim)]
    spec = (f"N={int(rng.integers(1, 6))},C={g * d},G={g},input={'x'.join(map(str, size))},"
            f"affine={int(rng.random() < 0.7)}")
    return Op.GROUPNORM_BWD, layout, dtype, spec


def draw_dwsep(rng: np.random.Generator) -> tuple[Op, Layout, DType, str]:
    layout = Layout.NHWGC if rng.random() < 0.5 else Layout.NGCHW
    dtype = [DType.FP16, DType.BF16, DType.FP32][int(rng.integers(3))]
    ndim = int(rng.choice([1, 2, 2, 3]))
    filt = [int(rng.integers(1, 10 if ndim == 1 else 6)) for _ in range(ndim)]
    dil = [int(rng.choice([1, 1, 2])) for _ in range(ndim)]
    size = [int(rng.integers(f * d, f * d + {1: 60, 2: 20, 3: 6}[ndim])) for f, d in zip(filt, dil)]
    x = lambda values: "x".join(map(str, values))  # noqa: E731
    acts = ["none", "relu", "relu6"]
    spec = (f"N={int(rng.integers(1, 5))},C={int(rng.integers(1, 70))},K={int(rng.integers(1, 70))},input={x(size)},"
            f"filter={x(filt)},stride={x(int(rng.choice([1, 1, 2])) for _ in range(ndim))},"
            f"pad={x(int(rng.integers(0, (f - 1) * d // 2 + 2)) for f, d in zip(filt, dil))},dilation={x(dil)},"
            f"bias_dw={int(rng.random() < 0.5)},bias_pw={int(rng.random() < 0.5)},"
            f"act_dw={acts[int(rng.integers(3))]},act_pw={acts[int(rng.integers(3))]}")
    return Op.DWSEP_CONV_FWD, layout, dtype, spec


CASES = [draw(rng) for rng in [np.random.default_rng(SEED)] for _ in range(COUNT)]
CASES += [draw_groupnorm(rng) for rng in [np.random.default_rng(SEED + 1)] for _ in range(24)]
CASES += [draw_dwsep(rng) for rng in [np.random.default_rng(SEED + 2)] for _ in range(24)]


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c[0].value}-{c[1].value}-{c[2].value}" for i, c in enumerate(CASES)])
def test_device_reference_equals_numpy_on_random_problems(gpu_backend, case):
    op, layout, dtype, spec = case
    solver = solver_for(op)
    problem = solver.parse_problem(spec, layout, dtype)
    specs = solver.tensors(problem)
    host = problem_inputs(solver, problem, specs, np.random.default_rng(SEED))
    tensors = DeviceTensors(gpu_backend, specs, host)
    processors = target_for(gpu_backend.device_info()).processors
    check = DeviceCheck(gpu_backend, solver, problem, {s.name: s for s in specs}, None, None, processors,
                        solver.device_reference(problem), tensors.pointers)
    try:
        got_ref, got_scale = check.host_reference()
        ref, scale = host_references(solver, problem, specs, host)
        for out in (s for s in specs if s.role is Role.OUTPUT):
            if not out.scalar.is_float:  # exact integers
                assert np.array_equal(got_ref[out.name], ref[out.name]), spec
                raw = gpu_backend.copy_from_device(check.pointers[f"{out.name}.allowed"], out.numel * 4)
                assert not np.any(np.frombuffer(raw, dtype=np.float32)), spec
                continue
            assert np.all(np.abs(got_ref[out.name] - ref[out.name]) <= 1e-13 * scale[out.name] + 1e-300), spec
            assert np.all(np.abs(got_scale[out.name] - scale[out.name]) <= 1e-13 * scale[out.name] + 1e-300), spec
            raw = gpu_backend.copy_from_device(check.pointers[f"{out.name}.allowed"], out.numel * 4)
            _, allowed = bounds(solver, problem, out, got_ref[out.name], got_scale[out.name])
            # the device may fuse a multiply-add (one rounding less): within one float step of the host's
            assert np.all(np.frombuffer(raw, dtype=np.float32) >= np.nextafter(allowed, np.float32(0))), spec
            assert np.all(np.frombuffer(raw, dtype=np.float32) <= np.nextafter(allowed, np.float32(np.inf))), spec
    finally:
        check.free()
        tensors.free()
