"""Depthwise-separable forward: Out = act_pw(PW(act_dw(DW(In) + bias_dw)) + bias_pw).

The op: its problem (problem.py), tensors, numpy reference, tolerances and PyTorch baseline (the two
convolutions it replaces). The depthwise output is as large as the input: the fused families keep it on
chip and multiply it straight into the pointwise sums in one kernel; `twopass` passes it through a
workspace (in L2 where it fits) between two launches, for wide K.
- `fused`: a block owns a tile of output positions x output channels; for each chunk of input channels
  its threads compute the depthwise outputs on the vector units into shared memory, in the matrix
  engine's operand layout (templates/common/igemm.h Config), and its warps multiply them by the
  pointwise weights with matrix instructions (mma.sync; fp32 as three TF32 products). Filter, stride
  and dilation are compiled in per problem.
- `fused_mfma`: the same kernel on AMD CDNA matrix cores (MFMA, 64-lane wavefronts).
- `twopass`: not fused: the depthwise outputs computed once into a workspace (in L2 where it fits), then the
  pointwise GEMM over them on warpgroup MMA, two launches; for wide K, where `fused` computes each position's
  depthwise outputs again in every block of output channels.
- `rowtile`: fused, channels-last, every input channel in one block: a tile is a run of positions along one
  output row, depthwise threads compute strips along W (each input column loaded once for a strip) into the
  GEMM's A tile, one mma.sync pass over all of C; for large-spatial, narrow layers (MobileNet's first blocks)
  where `fused`'s per-tap chunk loop bounds its issue. Ranked last by the prior until timed on a GPU.

Numerics: the depthwise sums and both biases in fp32; the depthwise output is rounded to the tensors'
dtype where it becomes a matrix operand (PyTorch's two calls round it the same way, by storing it),
then the pointwise sums in fp32 and the output rounded once.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ...problem import DType, Layout, Op
from ..base import DeviceReference, OpModule, Role, TensorSpec, Tolerance, TorchBaseline
from .device_reference import dwsep_device_reference
from .fused import Fused, FusedMfma, FusedParams
from .rowtile import Rowtile
from .twopass import Twopass
from .problem import Activation, DwsepProblem, parse_dwsep_problem
from .reference import forward

INPUT = "input"
OUTPUT = "output"


class DwsepConvFwd(OpModule[DwsepProblem]):
    """The `dwsep_conv_fwd` op (see factory.ops.base.OpModule)."""

    op = Op.DWSEP_CONV_FWD
    family_list = (Fused(), FusedMfma(), Twopass(), Rowtile())
    # Leave-one-out over the H100 fused DBs of the suite and seeds 21, 52-58 pooled (231 problems): neighbours
    # within 5 served 44 at 1.358x the winner where the prior gave 1.116x; within 2, 3 at 1.151x against
    # 1.327x. AUTO over all 1.155x (worst 3.27) at reach 5, 1.110x (worst 1.80) at 2 (bench/NOTES.md 63).
    nearest_reach = 2.0

    def parse_problem(self, spec: str, layout: Layout, dtype: DType) -> DwsepProblem:
        return parse_dwsep_problem(spec, layout, dtype)

    def tensors(self, problem: DwsepProblem) -> list[TensorSpec]:
        """In kernel-argument order: input, the two weights, the biases a problem has, then the output."""
        t = problem.dtype.tensor
        x_shape, x_dims = problem.activation("C")
        w_shape, w_dims = problem.depthwise_weight()
        specs = [TensorSpec(INPUT, x_shape, t, Role.INPUT, x_dims),
                 TensorSpec("weight_dw", w_shape, t, Role.INPUT, w_dims),
                 TensorSpec("weight_pw", (problem.K, problem.C), t, Role.INPUT, "KC")]
        if problem.bias_dw:
            specs.append(TensorSpec("bias_dw", (problem.C,), t, Role.INPUT, "C"))
        if problem.bias_pw:
            specs.append(TensorSpec("bias_pw", (problem.K,), t, Role.INPUT, "K"))
        y_shape, y_dims = problem.activation("K")
        specs.append(TensorSpec(OUTPUT, y_shape, t, Role.OUTPUT, y_dims))
        return specs

    def framework_view(self, problem: DwsepProblem, name: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """PyTorch's shapes: activations (N, C, *S) (channels-last strides for NHWGC), the depthwise
        weight (C, 1, *filter), the pointwise one (K, C, 1, ...); None for the biases (already (C,))."""
        ones = (1,) * problem.ndim
        if name == "weight_dw":
            volume = problem.filter_volume
            inner = [math.prod(problem.filter[d + 1:]) for d in range(problem.ndim)]
            return (problem.C, 1, *problem.filter), (volume, volume, *inner)
        if name == "weight_pw":
            return (problem.K, problem.C, *ones), (problem.C, 1, *ones)
        if name not in (INPUT, OUTPUT):
            return None
        channels = problem.C if name == INPUT else problem.K
        spatial = problem.input if name == INPUT else problem.output
        inner = [math.prod(spatial[d + 1:]) for d in range(problem.ndim)]
        volume = math.prod(spatial)
        if problem.channels_last:
            return (problem.N, channels, *spatial), (volume * channels, 1, *(channels * s for s in inner))
        return (problem.N, channels, *spatial), (channels * volume, volume, *inner)

    # --- numbers ---------------------------------------------------------------------------------
    def reference(self, problem: DwsepProblem, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {OUTPUT: forward(problem, inputs)}

    def error_scale(self, problem: DwsepProblem, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The sum of every term's magnitude, activations left out (they only shrink values)."""
        return {OUTPUT: forward(problem, inputs, magnitude=True)}

    def device_reference(self, problem: DwsepProblem) -> DeviceReference | None:
        """reference() and error_scale() as device kernels."""
        return dwsep_device_reference(problem)

    def tolerance(self, dtype: DType) -> Tolerance:
        # rtol against the terms' magnitudes: the depthwise output is rounded to the dtype once before the
        # pointwise sums (unit roundoff 2^-11 for fp16, 2^-8 for bf16), with a factor 2 to spare; atol
        # against |ref| for the output's own rounding.
        return {
            DType.FP32: Tolerance(rtol=1e-5, atol=0.0),
            DType.FP16: Tolerance(rtol=2.0**-10, atol=2.0**-10),
            DType.BF16: Tolerance(rtol=2.0**-7, atol=2.0**-7),
        }[dtype]

    def traffic(self, problem: DwsepProblem) -> tuple[int, int]:
        """(bytes: the input read once, weights and biases, the output written once; the pointwise
        GEMM's multiply-adds, the part matrix instructions take)."""
        return sum(s.nbytes for s in self.tensors(problem)), problem.macs

    def torch_baseline(self, problem: DwsepProblem, inputs: Mapping[str, Any]) -> TorchBaseline:
        """PyTorch's two convolutions (depthwise with groups = C, then 1x1) with the biases and the
        activations between, on views of our own buffers (channels-last for NHWGC)."""
        import torch
        import torch.nn.functional as F

        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[problem.ndim]
        x = inputs[INPUT].as_strided(*self.framework_view(problem, INPUT))
        w_dw = inputs["weight_dw"].as_strided(*self.framework_view(problem, "weight_dw"))
        w_pw = inputs["weight_pw"].as_strided(*self.framework_view(problem, "weight_pw"))
        b_dw = inputs["bias_dw"] if problem.bias_dw else None
        b_pw = inputs["bias_pw"] if problem.bias_pw else None
        last: dict[str, Any] = {}

        def act(t: Any, kind: Activation) -> Any:
            if kind is Activation.RELU:
                return torch.relu_(t)
            if kind is Activation.RELU6:
                return t.clamp_(0.0, 6.0)
            return t

        def run() -> None:
            mid = act(conv(x, w_dw, b_dw, list(problem.stride), list(problem.pad), list(problem.dilation),
                           problem.C), problem.act_dw)
            last["y"] = act(conv(mid, w_pw, b_pw), problem.act_pw)

        def outputs() -> dict[str, Any]:
            y = last["y"]
            physical = y.movedim(1, -1) if problem.channels_last else y
            return {OUTPUT: physical.contiguous()}

        return TorchBaseline(run, outputs, "PyTorch: two convolutions, the depthwise output through DRAM")


SOLVER = DwsepConvFwd()

__all__ = ["SOLVER", "Activation", "DwsepConvFwd", "DwsepProblem", "FusedParams", "parse_dwsep_problem"]
