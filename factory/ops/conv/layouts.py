"""Physical shapes, strides and numpy transposes of convolution tensors in each Layout.

Kernels see every tensor through per-dimension element strides of its logical order
(activations N,G,C,D,H,W; weights G,K,C,Z,Y,X), so one place decides what a layout means.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...problem import ConvProblem, Layout

_SPATIAL_ACT = {1: "W", 2: "HW", 3: "DHW"}
_SPATIAL_WEI = {1: "X", 2: "YX", 3: "ZYX"}


@dataclass(frozen=True)
class PhysicalTensor:
    """Memory order (letters) and the logical order the references compute in."""

    dims: str  # physical order, outermost first, e.g. "NHWGC"
    logical: str  # e.g. "NGCHW"
    sizes: dict[str, int]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.sizes[d] for d in self.dims)

    def strides(self) -> dict[str, int]:
        """Element stride of every dimension letter (row-major in physical order)."""
        result: dict[str, int] = {}
        step = 1
        for d in reversed(self.dims):
            result[d] = step
            step *= self.sizes[d]
        return result

    def to_logical(self, array: np.ndarray) -> np.ndarray:
        return np.transpose(array, [self.dims.index(d) for d in self.logical])

    def from_logical(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.transpose(array, [self.logical.index(d) for d in self.dims]))


def _expand(order: str, spatial: str) -> str:
    return order.replace("S", spatial)


def activation(problem: ConvProblem, channel_letter: str = "C") -> PhysicalTensor:
    """The input (channel_letter 'C') or output-gradient ('K') tensor."""
    spatial = _SPATIAL_ACT[problem.ndim]
    sizes_sp = problem.input if channel_letter == "C" else problem.output
    order = problem.layout.input_order if channel_letter == "C" else problem.layout.output_order
    sizes = {"N": problem.N, "G": problem.G, channel_letter: getattr(problem, channel_letter)}
    sizes.update(dict(zip(spatial, sizes_sp)))
    return PhysicalTensor(_expand(order, spatial), f"NG{channel_letter}{spatial}", sizes)


def weight(problem: ConvProblem) -> PhysicalTensor:
    spatial = _SPATIAL_WEI[problem.ndim]
    sizes = {"G": problem.G, "K": problem.K, "C": problem.C}
    sizes.update(dict(zip(spatial, problem.filter)))
    return PhysicalTensor(_expand(problem.layout.weight_order, spatial), f"GKC{spatial}", sizes)


def strides_3d(tensor: PhysicalTensor, letters: str) -> list[int]:
    """Strides for `letters` (e.g. "NGC" + "DHW"); spatial dims a rank lacks get stride 0."""
    s = tensor.strides()
    return [s.get(d, 0) for d in letters]


def pad_to_3d(values: tuple[int, ...], fill: int) -> list[int]:
    """Spatial tuple (outermost first) padded at the front to (D, H, W)."""
    return [fill] * (3 - len(values)) + list(values)


def channel_innermost(layout: Layout) -> bool:
    """Whether activations keep channels contiguous (the layouts where vector loads run along C/K)."""
    return layout.input_order.endswith("C")
