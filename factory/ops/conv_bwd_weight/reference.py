"""The numpy reference of backward-weight in logical order (what every family is checked against)."""

from __future__ import annotations

import numpy as np

from ...problem import ConvProblem


def reference_logical(problem: ConvProblem, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dW[g,k,c,*f] = sum_{n,o} dy[n,g,k,o] * x[n,g,c, o*stride - pad_left + f*dilation], logical orders."""
    nd = problem.ndim
    pads = [(0, 0)] * 3 + list(zip(problem.pad, problem.pad_right))
    xp = np.pad(x, pads)
    out = problem.output
    dw = np.zeros(problem.weight_shape_logical, dtype=x.dtype)
    for tap in np.ndindex(*problem.filter):
        index = [slice(None)] * 3
        for d in range(nd):
            start = tap[d] * problem.dilation[d]
            index.append(slice(start, start + (out[d] - 1) * problem.stride[d] + 1, problem.stride[d]))
        window = xp[tuple(index)]  # N, G, C, *out
        spatial = "".join("dhw"[3 - nd + d] for d in range(nd))
        dw[(slice(None), slice(None), slice(None)) + tap] = np.einsum(
            f"ngk{spatial},ngc{spatial}->gkc", dy, window, optimize=True
        )
    return dw
