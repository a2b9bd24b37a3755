"""Do our outputs agree with PyTorch's on the same inputs? A row that is wrong gets no speed.

The measure is norm-wise: max |ours - theirs| / max |theirs| per output tensor, against a bound per
output element type. Both sides accumulate in fp32 but in different orders and round the result
once, so the bound is a couple of output ulps for 16-bit types and well above cuDNN's fp32
algorithms' error (TF32 is turned off for the comparison). Integers must match exactly.

PyTorch's result is not exact either (a depthwise-separable block in bf16 rounds its intermediate to
bf16 in DRAM between two calls), so where the two disagree the float64 reference on the same inputs
decides (`matches_reference`): ours is wrong only if it misses the reference by more than the op's
verification tolerance, the one the tuner holds every candidate to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..ops.base import Role, TensorSpec
from ..problem import DType, Scalar
from ..verify import Verdict, reference_outputs, verify

AGREEMENT: dict[Scalar, float] = {
    Scalar.F16: 1e-2,
    Scalar.BF16: 1.6e-2,  # 2 ulps of bf16's 8-bit significand
    Scalar.F32: 1e-4,
    Scalar.I32: 0.0,
    Scalar.I8: 0.0,
}


# Dtypes whose kernels multiply rounded operands: the bound is at least their operands' rounding.
# fp16 computed as fp8: e5m2 output-gradients carry 2^-3 relative rounding (e4m3 inputs 2^-4); the
# errors of a sum's terms are independent, so norm-wise they stay near the larger (measured on the
# H100: 0.05-0.065 over 100 random problems).
OPERAND_ROUNDING: dict[DType, float] = {DType.FP16_COMP_BF8_FP8: 2.0**-3}


def agreement_floor(dtype: DType) -> float:
    """The least bound a dtype's outputs are held to, whatever their storage type."""
    return OPERAND_ROUNDING.get(dtype, 0.0)


@dataclass(frozen=True)
class Agreement:
    ok: bool
    max_rel_err: float  # worst over the outputs
    tolerance: float  # the bound of the output that came closest to (or crossed) it
    message: str


def _scalar_of(tensor: Any) -> Scalar | None:
    """The Scalar of a torch tensor's dtype (None for dtypes we have no kernels for)."""
    name = str(tensor.dtype).replace("torch.", "")
    return next((s for s in Scalar if s.numpy_name == name), None)


def compare_outputs(specs: Sequence[TensorSpec], ours: Mapping[str, Any], theirs: Mapping[str, Any],
                    floor: float = 0.0) -> Agreement:
    """Compare every OUTPUT tensor of `specs`; the bound is the looser of our and PyTorch's output types,
    and at least `floor` (agreement_floor of the problem's dtype)."""
    import torch

    worst, worst_tol, worst_ratio = 0.0, 0.0, -1.0
    for spec in specs:
        if spec.role is not Role.OUTPUT:
            continue
        if spec.name not in theirs:
            return Agreement(False, float("inf"), AGREEMENT[spec.scalar], f"{spec.name}: PyTorch produced no such output")
        tol = max(AGREEMENT[spec.scalar], AGREEMENT.get(_scalar_of(theirs[spec.name]), 0.0), floor)
        a = ours[spec.name].detach().to(dtype=torch.float64)
        b = theirs[spec.name].detach().to(device=a.device, dtype=torch.float64)
        if tuple(a.shape) != tuple(b.shape):
            return Agreement(False, float("inf"), tol, f"{spec.name}: shape {tuple(a.shape)} vs PyTorch's {tuple(b.shape)}")
        if not bool(torch.isfinite(a).all()):
            bad = int((~torch.isfinite(a)).sum())
            return Agreement(False, float("inf"), tol, f"{spec.name}: {bad} of {a.numel()} elements not finite")
        if not bool(torch.isfinite(b).all()):
            return Agreement(False, float("inf"), tol, f"{spec.name}: PyTorch's result is not finite")
        scale = float(b.abs().max()) if b.numel() else 0.0
        diff = float((a - b).abs().max()) if a.numel() else 0.0
        rel = 0.0 if diff == 0.0 else diff / (scale if scale > 0.0 else 1e-30)
        ratio = rel / tol if tol > 0 else (0.0 if rel == 0.0 else float("inf"))
        if ratio > worst_ratio:
            worst_ratio, worst_tol = ratio, tol
        worst = max(worst, rel)
        if rel > tol:
            return Agreement(False, rel, tol, f"{spec.name}: max relative error {rel:.3g} > {tol:.3g}")
    return Agreement(True, worst, worst_tol, "agrees with PyTorch")


def exact_host_values(tensor: Any) -> np.ndarray:
    """A torch tensor's exact values as a float64 (or int64) host array, as references take them."""
    if tensor.is_floating_point():
        return tensor.detach().double().cpu().numpy()  # bf16 and fp16 widen exactly
    return tensor.detach().cpu().numpy().astype(np.int64)


def matches_reference(solver: Any, problem: Any, specs: Sequence[TensorSpec], tensors: Mapping[str, Any]) -> Verdict:
    """Our outputs in `tensors` against the float64 reference computed from its inputs, within the op's
    verification tolerance: the arbiter where PyTorch and we disagree."""
    values = {s.name: exact_host_values(tensors[s.name]) for s in specs if s.role is Role.INPUT}
    ref, abs_ref = reference_outputs(solver, problem, values)
    outputs = {s.name: exact_host_values(tensors[s.name]) for s in specs if s.role is Role.OUTPUT}
    return verify(solver, problem, outputs, ref, abs_ref)
