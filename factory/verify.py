"""Check a kernel's outputs against the op's numpy reference.

Floating-point sums are checked against the scale of their own terms: |out - ref| <= rtol * sum|terms|
+ atol * |ref| (the output's rounding) + half a subnormal step of the output type (the rounding of a
value near zero), with sum|terms| obtained by running the reference on |inputs|.
That bound fails for a wrong, unwritten (NaN-poisoned) or zero result, yet admits any summation order.

Running the reference on |inputs| measures the terms only when the op has no subtractions. An op whose
formula subtracts (a normalization's centring) provides `error_scale(problem, inputs)`, the same
outputs with every term's magnitude summed; it is used in place of the reference on |inputs|.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .ops.base import OpModule, Role, Tolerance
from .problem import Scalar


@dataclass(frozen=True)
class Verdict:
    ok: bool
    worst_ratio: float  # largest |err| / allowed over all elements (<= 1 passes)
    message: str


def reference_outputs(solver: OpModule, problem: Any, values: Mapping[str, np.ndarray]) -> tuple[dict, dict]:
    """(reference, scale of the terms) for every output tensor."""
    ref = solver.reference(problem, values)
    scale = solver.error_scale(problem, values)
    if scale is not None:
        return ref, scale
    abs_ref = solver.reference(problem, {k: np.abs(v) for k, v in values.items()})
    return ref, abs_ref


def allowed_error(tol: Tolerance, scale: np.ndarray, want: np.ndarray, scalar: Scalar) -> np.ndarray:
    """Each element's allowed |out - ref| (float64): the terms' scale x rtol + |ref| x atol + the output
    type's rounding floor (never 0, so a ratio against it is defined)."""
    return (tol.rtol * np.abs(np.asarray(scale, dtype=np.float64)) + tol.atol * np.abs(np.asarray(want, dtype=np.float64))
            + scalar.rounding_floor + 1e-30)


def verify(
    solver: OpModule,
    problem: Any,
    outputs: Mapping[str, np.ndarray],
    ref: Mapping[str, np.ndarray],
    abs_ref: Mapping[str, np.ndarray],
) -> Verdict:
    tol = solver.tolerance(problem.dtype)
    worst = 0.0
    for spec in solver.tensors(problem):
        if spec.role is not Role.OUTPUT:
            continue
        got = outputs[spec.name]
        want = ref[spec.name]
        if not spec.scalar.is_float:
            bad = np.count_nonzero(got.astype(np.int64) != want.astype(np.int64))
            if bad:
                return Verdict(False, float("inf"), f"{spec.name}: {bad} of {want.size} integers differ")
            continue
        got64 = got.astype(np.float64)
        if not np.all(np.isfinite(got64)):
            bad = int(np.count_nonzero(~np.isfinite(got64)))
            return Verdict(False, float("inf"), f"{spec.name}: {bad} of {want.size} elements not finite (unwritten?)")
        allowed = allowed_error(tol, abs_ref[spec.name], want, spec.scalar)
        ratio = np.abs(got64 - want) / allowed
        index = int(np.argmax(ratio))
        worst = max(worst, float(ratio.flat[index]))
        if ratio.flat[index] > 1.0:
            return Verdict(
                False,
                float(ratio.flat[index]),
                f"{spec.name}: element {np.unravel_index(index, want.shape)} is {got64.flat[index]:.6g}, "
                f"reference {want.flat[index]:.6g} (error {ratio.flat[index]:.3g}x the tolerance)",
            )
    return Verdict(True, worst, "matches the reference")
