"""The reference of backward-weight in logical order (what every family is checked against): numpy, or for
a large float problem inside a tune the same formula through PyTorch on the GPU (factory.reference_device)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...problem import ConvProblem
from ...reference_device import computed_on_device, to_device
from ..conv.taps import spatial_letters, tap_windows


def reference_logical(problem: ConvProblem, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dW[g,k,c,*f] = sum_{n,o} dy[n,g,k,o] * x[n,g,c, o*stride - pad_left + f*dilation], logical orders."""
    on_device = computed_on_device(problem.macs, x.dtype, lambda device: _on_torch(problem, x, dy, device))
    if on_device is not None:
        return on_device
    xp = np.pad(x, [(0, 0)] * 3 + list(zip(problem.pad, problem.pad_right)))
    spatial = spatial_letters(problem)
    dw = np.zeros(problem.weight_shape_logical, dtype=x.dtype)
    for tap, window in tap_windows(problem):
        dw[(slice(None),) * 3 + tap] = np.einsum(f"ngk{spatial},ngc{spatial}->gkc", dy, xp[window], optimize=True)
    return dw


def _on_torch(problem: ConvProblem, x: np.ndarray, dy: np.ndarray, device: Any) -> np.ndarray:
    """reference_logical's formula in float64 on a torch device."""
    import torch

    pads = [p for d in reversed(range(problem.ndim)) for p in (problem.pad[d], problem.pad_right[d])]
    xp = torch.nn.functional.pad(to_device(x, device), pads)
    dy_t = to_device(dy, device)
    spatial = spatial_letters(problem)
    dw = torch.zeros(problem.weight_shape_logical, dtype=torch.float64, device=device)
    for tap, window in tap_windows(problem):
        dw[(slice(None),) * 3 + tap] = torch.einsum(f"ngk{spatial},ngc{spatial}->gkc", dy_t, xp[window])
    result = dw.cpu().numpy()
    del xp, dy_t, dw
    torch.cuda.empty_cache()  # the tune's candidates need the memory
    return result
