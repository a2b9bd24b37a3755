"""GroupNorm backward in float64 (the reference every family is checked against) and its error scale."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from ...reference_device import computed_on_device, to_device
from .problem import GroupNormProblem, from_ncs, to_ncs


def backward(problem: GroupNormProblem, inputs: Mapping[str, np.ndarray], magnitude: bool) -> dict[str, np.ndarray]:
    """PyTorch's formula in float64; with `magnitude`, every term by its absolute value and the sums
    centred as the kernels form them (sum |gamma*dy*(x - mean)|), i.e. what fp32 rounding scales with.

    Inside a tune, a large problem computes the same formula through PyTorch on the tuner's GPU
    (factory.reference_device); numpy computes it otherwise."""
    N, G, D, S = problem.N, problem.G, problem.per_group, problem.spatial
    x = to_ncs(problem, np.asarray(inputs["x"], dtype=np.float64)).reshape(N, G, D, S)
    dy = to_ncs(problem, np.asarray(inputs["dy"], dtype=np.float64)).reshape(N, G, D, S)
    mean = np.asarray(inputs["mean"], dtype=np.float64).reshape(N, G, 1, 1)
    rstd = np.asarray(inputs["rstd"], dtype=np.float64).reshape(N, G, 1, 1)
    gamma = np.asarray(inputs["gamma"], dtype=np.float64).reshape(1, G, D, 1) if problem.affine else None
    on_device = computed_on_device(4 * problem.numel, x.dtype,
                                   lambda device: _on_torch(problem, (x, dy, mean, rstd, gamma), magnitude, device))
    if on_device is not None:
        dx, dgamma, dbeta = on_device
    else:
        dx, dgamma, dbeta = _formula(x, dy, mean, rstd, gamma, 1.0 / (D * S), magnitude,
                                     lambda a, axis: a.sum(axis, keepdims=True))
    out = {"dx": from_ncs(problem, np.asarray(dx).reshape(N, G * D, S))}
    if problem.affine:
        out["dgamma"] = np.asarray(dgamma).reshape(G, D)
        out["dbeta"] = np.asarray(dbeta).reshape(G, D)
    return out


def _formula(x: Any, dy: Any, mean: Any, rstd: Any, gamma: Any, inv_m: float, magnitude: bool,
             total: Callable[[Any, Any], Any]) -> tuple[Any, Any, Any]:
    """(dx, dgamma, dbeta) of (N, G, D, S) operands; numpy arrays or torch tensors alike (`total` sums
    over an axis keeping it). gamma None: no affine (dgamma, dbeta come back None)."""
    if magnitude:
        a_nc = total(abs(dy) * abs(x - mean), -1)
        x, dy, mean, rstd = abs(x), abs(dy), abs(mean), abs(rstd)
        gamma = abs(gamma) if gamma is not None else None
        sign = 1.0
    else:
        a_nc = total(dy * x, -1) - mean * total(dy, -1)
        sign = -1.0
    scale = gamma if gamma is not None else 1.0
    b_nc = total(dy, -1)
    a_g = total(scale * a_nc, 2)
    b_g = total(scale * b_nc, 2)
    c2 = sign * a_g * rstd**3 * inv_m
    c3 = sign * (c2 * mean + b_g * rstd * inv_m)
    dx = rstd * scale * dy + c2 * x + c3
    if gamma is None:
        return dx, None, None
    return dx, total(total(rstd * a_nc, 3), 0), total(total(b_nc, 3), 0)


def _on_torch(problem: GroupNormProblem, operands: tuple[Any, ...], magnitude: bool, device: Any) -> tuple[Any, ...]:
    """_formula in float64 on a torch device, results back as numpy arrays."""
    import torch

    on = [to_device(a, device) if a is not None else None for a in operands]
    results = _formula(*on, 1.0 / (problem.per_group * problem.spatial), magnitude,
                       lambda a, axis: a.sum(axis, keepdim=True))
    found = tuple(r.cpu().numpy() if r is not None else None for r in results)
    del on, results
    torch.cuda.empty_cache()  # the tune's candidates need the memory
    return found
