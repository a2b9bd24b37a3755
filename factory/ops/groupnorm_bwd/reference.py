"""GroupNorm backward in float64 (the reference every family is checked against) and its error scale."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .problem import GroupNormProblem, from_ncs, to_ncs


def backward(problem: GroupNormProblem, inputs: Mapping[str, np.ndarray], magnitude: bool) -> dict[str, np.ndarray]:
    """PyTorch's formula in float64; with `magnitude`, every term by its absolute value and the sums
    centred as the kernels form them (sum |gamma*dy*(x - mean)|), i.e. what fp32 rounding scales with."""
    N, G, D, S = problem.N, problem.G, problem.per_group, problem.spatial
    x = to_ncs(problem, np.asarray(inputs["x"], dtype=np.float64)).reshape(N, G, D, S)
    dy = to_ncs(problem, np.asarray(inputs["dy"], dtype=np.float64)).reshape(N, G, D, S)
    mean = np.asarray(inputs["mean"], dtype=np.float64).reshape(N, G, 1, 1)
    rstd = np.asarray(inputs["rstd"], dtype=np.float64).reshape(N, G, 1, 1)
    gamma = (np.asarray(inputs["gamma"], dtype=np.float64).reshape(1, G, D, 1) if problem.affine
             else np.ones((1, G, D, 1)))
    inv_m = 1.0 / (D * S)
    if magnitude:
        a_nc = (np.abs(dy) * np.abs(x - mean)).sum(-1, keepdims=True)
        x, dy, mean, rstd, gamma = (np.abs(v) for v in (x, dy, mean, rstd, gamma))
        sign = 1.0
    else:
        a_nc = (dy * x).sum(-1, keepdims=True) - mean * dy.sum(-1, keepdims=True)
        sign = -1.0
    b_nc = dy.sum(-1, keepdims=True)
    a_g = (gamma * a_nc).sum(2, keepdims=True)
    b_g = (gamma * b_nc).sum(2, keepdims=True)
    c2 = sign * a_g * rstd**3 * inv_m
    c3 = sign * (c2 * mean + b_g * rstd * inv_m)
    dx = rstd * gamma * dy + c2 * x + c3
    out = {"dx": from_ncs(problem, dx.reshape(N, G * D, S))}
    if problem.affine:
        out["dgamma"] = (rstd * a_nc).sum(axis=(0, 3)).reshape(G, D)
        out["dbeta"] = b_nc.sum(axis=(0, 3)).reshape(G, D)
    return out
