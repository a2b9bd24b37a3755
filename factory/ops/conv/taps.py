"""The filter taps of a convolution and the output-shaped window of the (padded) input each tap reads:
the loop both convolution references (backward-weight and backward-data) are written around."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...problem import ConvProblem


def tap_windows(problem: ConvProblem) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """(tap, index) per filter tap: `index` selects, from a logical (N, G, C, *padded input) array, the
    input element every output position reads through that tap (o * stride + tap * dilation)."""
    out = problem.output
    for tap in np.ndindex(*problem.filter):
        index = [slice(None)] * 3
        for d in range(problem.ndim):
            start = tap[d] * problem.dilation[d]
            index.append(slice(start, start + (out[d] - 1) * problem.stride[d] + 1, problem.stride[d]))
        yield tuple(int(t) for t in tap), tuple(index)


def spatial_letters(problem: ConvProblem) -> str:
    """einsum letters of the spatial dims ('w', 'hw', 'dhw')."""
    return "".join("dhw"[3 - problem.ndim + d] for d in range(problem.ndim))
