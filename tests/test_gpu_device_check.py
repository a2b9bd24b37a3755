"""On a GPU: the tuner's device-side output check (factory/device_check.py) agrees with verify.py — an
output equal to the reference passes, one element past the tolerance or unwritten fails with the ratio
numpy computes — and a tune verifies the same candidates with it as without it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from factory.device import target_for
from factory.device_check import DeviceCheck
from factory.ops.base import Role, TensorSpec, Tolerance
from factory.problem import DType, Layout, Scalar, parse_conv_problem
from factory.selector import lookup
from factory.tuner import TuneSettings, tune

pytestmark = pytest.mark.gpu


class Solver:
    def __init__(self, tol: Tolerance) -> None:
        self.tol = tol

    def tolerance(self, dtype):
        return self.tol


@pytest.mark.parametrize("scalar", [Scalar.F16, Scalar.BF16, Scalar.F32, Scalar.I32], ids=lambda s: s.name)
def test_the_check_on_the_gpu_finds_what_numpy_finds(gpu_backend, scalar):
    n = 3 * 2**20 + 7
    rng = np.random.default_rng(1)
    ref = rng.normal(0, 2, n)
    if scalar is Scalar.I32:
        ref = np.round(ref * 10)
    elif scalar is not Scalar.F32:
        ref = ref.astype(np.float16 if scalar is Scalar.F16 else np.float32).astype(np.float64)
    if scalar is Scalar.BF16:
        ref = (ref.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32).astype(np.float64)
    abs_ref = np.abs(ref) + 1.0
    spec = TensorSpec("out", (n,), scalar, Role.OUTPUT, "X")
    check = DeviceCheck(gpu_backend, Solver(Tolerance(1e-2, 1e-3)), type("P", (), {"dtype": None})(),
                        {"out": spec}, {"out": ref}, {"out": abs_ref}, processors=132)
    out = gpu_backend.alloc(spec.nbytes)
    try:
        def store(values: np.ndarray) -> np.ndarray:
            """Put `values` in the output as its type holds them; returns what it holds, in float64."""
            if scalar is Scalar.BF16:
                bits = values.astype(np.float32).view(np.uint32) >> 16
                raw, held = bits.astype(np.uint16), (bits << 16).astype(np.uint32).view(np.float32)
            else:
                raw = values.astype({Scalar.F16: np.float16, Scalar.F32: np.float32, Scalar.I32: np.int32}[scalar])
                held = raw
            gpu_backend.copy_to_device(out, raw.tobytes())
            return held.astype(np.float64)

        store(ref)
        assert check.verdict({"out": out}).ok
        wrong = ref.copy()
        wrong[n - 1] += 64.0
        wrong = store(wrong)  # the ratio is of the value the output type holds
        verdict = check.verdict({"out": out})
        assert not verdict.ok and verdict.output == "out" and verdict.worst_ratio > 1.0
        if scalar.is_float:
            allowed = np.float32(1e-2 * abs_ref[n - 1] + 1e-3 * abs(ref[n - 1]) + scalar.rounding_floor + 1e-30)
            assert verdict.worst_ratio == pytest.approx(abs(wrong[n - 1] - ref[n - 1]) / float(allowed), rel=1e-6)
            unwritten = ref.copy()
            unwritten[[5, n // 2]] = np.nan
            store(unwritten)
            assert check.verdict({"out": out}).nonfinite == 2
    finally:
        gpu_backend.free(out)
        check.free()


def test_a_tune_verifies_the_same_candidates_on_the_device_as_on_the_host(gpu_backend):
    problem = parse_conv_problem("N=3,G=8,C=4,K=4,input=13x11,filter=3x3,stride=2,pad=1", Layout.NHWGC, DType.FP16)
    candidates = lookup(problem, target=target_for(gpu_backend.device_info()))[:12]
    settings = TuneSettings(reps=5, seed=11)
    on_device = tune(problem, candidates, gpu_backend, settings)
    on_host = tune(problem, candidates, gpu_backend, dataclasses.replace(settings, device_verify=False))
    assert [m.verified for m in on_device] == [m.verified for m in on_host]
    assert any(m.verified for m in on_device)


def test_tunes_of_different_ops_share_a_kept_worker_on_the_gpu(gpu_backend):
    """Inside keep_measuring_worker a backward-weight, a backward-data and a GroupNorm tune run in one
    measuring process, each on its own inputs and device reference; each verifies what it verifies alone."""
    import factory.tuner as tuner
    from factory.ops import solver_for
    from factory.problem import Op

    target = target_for(gpu_backend.device_info())
    problems = [parse_conv_problem("N=3,G=8,C=4,K=4,input=13x11,filter=3x3,stride=2,pad=1", Layout.NHWGC, DType.FP16),
                solver_for(Op.CONV_BWD_DATA).parse_problem("N=2,G=1,C=24,K=40,input=9x9,filter=3x3,stride=2,pad=1",
                                                           Layout.NHWGC, DType.BF16),
                solver_for(Op.GROUPNORM_BWD).parse_problem("N=3,C=64,G=8,input=17x9", Layout.NGCHW, DType.FP32)]
    settings = TuneSettings(reps=5, seed=11)
    alone = [tune(p, lookup(p, target=target)[:8], gpu_backend, settings) for p in problems]
    with tuner.keep_measuring_worker():
        kept = [tune(p, lookup(p, target=target)[:8], gpu_backend, settings) for p in problems]
        assert tuner._KEPT.get().worker.starts == 1
    for one, other in zip(alone, kept):
        assert [m.verified for m in one] == [m.verified for m in other] and any(m.verified for m in one)
