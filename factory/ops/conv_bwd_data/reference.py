"""The reference of backward-data in logical order (what every family is checked against): numpy, or for a
large float problem inside a tune the same formula through PyTorch on the GPU (factory.reference_device)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...problem import ConvProblem
from ...reference_device import computed_on_device, to_device
from ..conv.taps import spatial_letters, tap_windows


def reference_logical(problem: ConvProblem, dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """dIn[n,g,c,i] = sum over k, taps f and outputs o with o*stride - pad_left + f*dilation = i of
    dy[n,g,k,o] * w[g,k,c,f], logical orders (N,G,K,*out), (G,K,C,*filter) -> (N,G,C,*input).

    Each tap scatters its product into a zero-padded input; inputs no tap reaches (past the last
    window, or skipped by the stride) stay zero, as the gradient of an input the forward never read.
    """
    on_device = computed_on_device(problem.macs, dy.dtype, lambda device: _on_torch(problem, dy, w, device))
    if on_device is not None:
        return on_device
    dxp = np.zeros(_padded_shape(problem), dtype=dy.dtype)
    spatial = spatial_letters(problem)
    for tap, window in tap_windows(problem):
        wt = w[(slice(None),) * 3 + tap]  # G, K, C
        dxp[window] += np.einsum(f"ngk{spatial},gkc->ngc{spatial}", dy, wt, optimize=True)
    return np.ascontiguousarray(dxp[_crop(problem)])


def _padded_shape(problem: ConvProblem) -> tuple[int, ...]:
    padded = [problem.input[d] + problem.pad[d] + problem.pad_right[d] for d in range(problem.ndim)]
    return (problem.N, problem.G, problem.C, *padded)


def _crop(problem: ConvProblem) -> tuple[slice, ...]:
    return (slice(None),) * 3 + tuple(slice(problem.pad[d], problem.pad[d] + problem.input[d])
                                      for d in range(problem.ndim))


def _on_torch(problem: ConvProblem, dy: np.ndarray, w: np.ndarray, device: Any) -> np.ndarray:
    """reference_logical's formula in float64 on a torch device."""
    import torch

    dy_t = to_device(dy, device)
    w_t = to_device(w, device)
    dxp = torch.zeros(_padded_shape(problem), dtype=torch.float64, device=device)
    spatial = spatial_letters(problem)
    for tap, window in tap_windows(problem):
        dxp[window] += torch.einsum(f"ngk{spatial},gkc->ngc{spatial}", dy_t, w_t[(slice(None),) * 3 + tap])
    result = dxp[_crop(problem)].contiguous().cpu().numpy()
    del dy_t, w_t, dxp
    torch.cuda.empty_cache()  # the tune's candidates need the memory
    return result
