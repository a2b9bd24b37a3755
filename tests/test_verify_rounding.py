"""Verification admits the rounding of a value near zero to the output type, and no more."""

from __future__ import annotations

import numpy as np

from factory.ops.conv_bwd_data import SOLVER
from factory.problem import DType, Layout, Op, parse_conv_problem
from factory.verify import reference_outputs, verify

PROBLEM = parse_conv_problem("N=1,G=2,C=1,K=1,input=8,filter=3,pad=1", Layout.NGCHW, DType.FP16, Op.CONV_BWD_DATA)
SUBNORMAL_STEP = 2.0**-24  # fp16


def _inputs(scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {spec.name: (rng.uniform(0.5, 1.0, spec.shape) * scale).astype(np.float16)
            for spec in SOLVER.tensors(PROBLEM) if spec.name != "grad_input"}


def test_an_fp16_gradient_in_the_subnormal_range_passes_when_rounded_to_nearest() -> None:
    inputs = _inputs(2.0**-9)  # products near 2**-18..2**-16: sums land among fp16 subnormals
    ref, scale = reference_outputs(SOLVER, PROBLEM, inputs)
    want = ref["grad_input"]
    assert np.abs(want).max() < 2.0**-14, "the case must reach the subnormal range"
    rounded = want.astype(np.float16)  # what an exact kernel writes
    assert np.any(rounded.astype(np.float64) != want)
    assert verify(SOLVER, PROBLEM, {"grad_input": rounded}, ref, scale).ok


def test_two_subnormal_steps_off_fail() -> None:
    inputs = _inputs(2.0**-9)
    ref, scale = reference_outputs(SOLVER, PROBLEM, inputs)
    off = (ref["grad_input"] + 2 * SUBNORMAL_STEP).astype(np.float16)
    assert not verify(SOLVER, PROBLEM, {"grad_input": off}, ref, scale).ok
