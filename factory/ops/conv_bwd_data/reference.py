"""The numpy reference of backward-data in logical order (what every family is checked against)."""

from __future__ import annotations

import numpy as np

from ...problem import ConvProblem


def reference_logical(problem: ConvProblem, dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """dIn[n,g,c,i] = sum over k, taps f and outputs o with o*stride - pad_left + f*dilation = i of
    dy[n,g,k,o] * w[g,k,c,f], logical orders (N,G,K,*out), (G,K,C,*filter) -> (N,G,C,*input).

    Each tap scatters its product into a zero-padded input; inputs no tap reaches (past the last
    window, or skipped by the stride) stay zero, as the gradient of an input the forward never read.
    """
    nd = problem.ndim
    padded = [problem.input[d] + problem.pad[d] + problem.pad_right[d] for d in range(nd)]
    dxp = np.zeros((problem.N, problem.G, problem.C, *padded), dtype=dy.dtype)
    out = problem.output
    spatial = "".join("dhw"[3 - nd + d] for d in range(nd))
    for tap in np.ndindex(*problem.filter):
        index = [slice(None)] * 3
        for d in range(nd):
            start = tap[d] * problem.dilation[d]
            index.append(slice(start, start + (out[d] - 1) * problem.stride[d] + 1, problem.stride[d]))
        wt = w[(slice(None), slice(None), slice(None)) + tap]  # G, K, C
        dxp[tuple(index)] += np.einsum(f"ngk{spatial},gkc->ngc{spatial}", dy, wt, optimize=True)
    crop = [slice(None)] * 3 + [slice(problem.pad[d], problem.pad[d] + problem.input[d]) for d in range(nd)]
    return np.ascontiguousarray(dxp[tuple(crop)])
