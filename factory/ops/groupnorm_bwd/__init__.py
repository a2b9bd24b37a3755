"""GroupNorm backward: dx, dgamma, dbeta from x, dy, gamma and the forward's mean and rstd.

With D = C/G channels per group, M = D*S elements per group (S the spatial volume), xhat = (x - mean) * rstd:

    dbeta[c]  = sum_{n,s} dy
    dgamma[c] = sum_{n,s} dy * xhat                        = sum_n rstd * A[n,c]
    dx        = rstd*gamma*dy + c2[n,g]*x + c3[n,g],  with
    c2 = -Ag * rstd^3 / M,   c3 = -c2*mean - Bg * rstd / M,
    A[n,c] = sum_s dy*(x - mean),  B[n,c] = sum_s dy,  Ag = sum_{c in g} gamma*A,  Bg = sum_{c in g} gamma*B.

This is PyTorch's formula (aten native_group_norm_backward) for any given mean and rstd: the chain rule's
sum_{g}(x - mean) term is zero at the forward's own statistics and is left out. The kernels sum A
centred (dy*(x - mean), not dy*x - mean*dy) so A keeps its digits when |mean| >> std.

Kernel families (one module each), all reading the forward's fp32 statistics and accumulating in fp32:
- `threepass`: the classic scheme: per-channel sums (dgamma, dbeta), per-(n, g) sums, then dx, each pass
  reading x and dy: 7 tensor-sized transfers. Portable and simple.
- `fused`: one read of x and dy produces per-(n, c) sums A, B, from which both dgamma/dbeta and the
  per-(n, g) coefficients follow; a second pass writes dx: 5 tensor-sized transfers. The per-(n, c)
  sums meet through atomics (`atomic`) or a deterministic finishing kernel (`twostage`).

Minimum DRAM traffic (what `traffic` reports, and what GB/s figures divide): 3 tensor-sized transfers
(x and dy read once, dx written once) plus the small tensors. The fused family reads x and dy twice, so
where they do not stay in L2 between its passes it moves 5 transfers and tops out at 3/5 of the copy
bandwidth by this count; the dx pass walks the tiles in reverse to reuse what L2 still holds. The group
family re-reads a block's own rows right after summing them, mostly from cache. The resident family holds
a round of whole groups in the grid's shared memory between the sums and dx: 3 transfers at any size
(NVIDIA: it needs a cooperative launch).
The window family runs the fused family's two passes in one persistent launch, dx one window of tiles
behind the sums, so that dx re-reads x and dy from L2.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ... import numerics
from ...problem import DType, Layout, Op, Scalar
from ..base import DeviceReference, OpModule, Role, TensorSpec, Tolerance, TorchBaseline
from .common import CELLS, INT32_LIMIT
from .device_reference import groupnorm_device_reference
from .group import GROUP_CELLS, Group, GroupParams, Span, group_segments
from .problem import (
    GroupNormProblem,
    activation,
    from_ncs,
    parse_groupnorm_problem,
    to_ncs,
    torch_ncs,
    torch_physical,
)
from .reference import backward
from .resident import Resident, ResidentParams
from .stream import Finish, Fused, FusedParams, Geometry, StreamParams, ThreePass, ThreePassParams, geometry
from .window import Window, WindowParams

INPUT_EPS = 1e-5  # variance epsilon of the statistics random_inputs derives from x


class GroupNormBwd(OpModule[GroupNormProblem]):
    """The `groupnorm_bwd` op (see factory.ops.base.OpModule)."""

    op = Op.GROUPNORM_BWD
    family_list = (ThreePass(), Fused(), Group(), Resident(), Window())
    # The prior is a time model (cost.py) that a neighbour's winner seldom beats. Leave-one-out over the H100
    # suite + seed-21 DB: neighbours at 0.8-1.0 served at 1.00-1.10x the winner (the prior 1.01-1.09x),
    # those at 2-10 at 1.0-4.2x (the prior 1.0-1.14x). bench/NOTES.md 28d.
    nearest_reach = 1.0

    def parse_problem(self, spec: str, layout: Layout, dtype: DType) -> GroupNormProblem:
        return parse_groupnorm_problem(spec, layout, dtype)

    def tensors(self, problem: GroupNormProblem) -> list[TensorSpec]:
        shape, dims = activation(problem)
        t = problem.dtype.tensor
        stats = (problem.N, problem.G)
        channels = (problem.G, problem.per_group)
        specs = [
            TensorSpec("x", shape, t, Role.INPUT, dims),
            TensorSpec("dy", shape, t, Role.INPUT, dims),
            TensorSpec("mean", stats, Scalar.F32, Role.INPUT, "NG"),
            TensorSpec("rstd", stats, Scalar.F32, Role.INPUT, "NG"),
        ]
        if problem.affine:
            specs.append(TensorSpec("gamma", channels, t, Role.INPUT, "GC"))
        specs.append(TensorSpec("dx", shape, t, Role.OUTPUT, dims))
        if problem.affine:
            specs += [TensorSpec("dgamma", channels, t, Role.OUTPUT, "GC"),
                      TensorSpec("dbeta", channels, t, Role.OUTPUT, "GC")]
        return specs

    def framework_view(self, problem: GroupNormProblem, name: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """PyTorch's shapes: activations (N, C, *S) (contiguous for NGCHW, channels_last for NHWGC),
        gamma/dgamma/dbeta (C,); None for mean/rstd, whose physical (N, G) already is PyTorch's."""
        N, C, S = problem.N, problem.C, problem.spatial
        if name in ("gamma", "dgamma", "dbeta"):
            return (C,), (1,)
        if name not in ("x", "dy", "dx"):
            return None
        shape = (N, C, *problem.input)
        inner = [math.prod(problem.input[d + 1 :]) for d in range(problem.ndim)]
        if problem.layout is Layout.NHWGC:
            return shape, (S * C, 1, *(C * s for s in inner))
        return shape, (C * S, S, *inner)

    # --- numbers ---------------------------------------------------------------------------------
    def reference(self, problem: GroupNormProblem, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """dx, dgamma, dbeta in float64, physical layouts, from physical-layout inputs."""
        return backward(problem, inputs, magnitude=False)

    def error_scale(self, problem: GroupNormProblem, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Per output element, the summed magnitudes of the terms an fp32 evaluation rounds (see verify)."""
        return backward(problem, inputs, magnitude=True)

    def device_reference(self, problem: GroupNormProblem) -> DeviceReference | None:
        """reference() and error_scale() as device kernels."""
        return groupnorm_device_reference(problem)

    def tolerance(self, dtype: DType) -> Tolerance:
        # rtol against error_scale (fp32 accumulation), atol against |ref| (rounding of the stored output).
        return {
            DType.FP32: Tolerance(rtol=1e-5, atol=0.0),
            DType.FP16: Tolerance(rtol=1e-5, atol=2.0**-10),
            DType.BF16: Tolerance(rtol=1e-5, atol=2.0**-7),
        }[dtype]

    def random_inputs(self, problem: GroupNormProblem, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Storage-typed inputs whose statistics are those of x, as a forward pass leaves them.

        Each (n, g) gets its own offset and spread, so a kernel reading another group's mean or rstd
        fails; mean and rstd (eps 1e-5) are computed from the stored (rounded) x. Drawn and reduced in
        the physical layout: transposing a tune's 64 M elements to (N, C, S) and back took seconds.
        """
        N, G, D, S = problem.N, problem.G, problem.per_group, problem.spatial
        t = problem.dtype.tensor
        offset = rng.uniform(-1.0, 1.0, size=(N, G)).astype(np.float32)
        spread = rng.uniform(0.25, 2.0, size=(N, G)).astype(np.float32)
        if problem.layout is Layout.NHWGC:  # (N, S, C): a group's offset repeated over its D channels
            rows, offset, spread = (N, S, G * D), np.repeat(offset, D, 1)[:, None], np.repeat(spread, D, 1)[:, None]
            groups, by_group = (N, S, G, D), "nsgd->ng"
        else:  # (N, G, D * S)
            rows, offset, spread = (N, G, D * S), offset[..., None], spread[..., None]
            groups, by_group = rows, "ngr->ng"
        # float32, as the storage types are at most: a tune's 64 M-element x in a fraction of the time
        x = numerics.to_storage(offset + spread * numerics.random_tensor(rng, rows, Scalar.F32), t)
        # float32 holds every storage value exactly; the sums are float64
        exact = (numerics.bf16_bits_to_float(x) if t is Scalar.BF16 else x.astype(np.float32, copy=False)).reshape(groups)
        operand = by_group.split("->")[0]
        mean = np.einsum(by_group, exact, dtype=np.float64) / (D * S)
        square = np.einsum(f"{operand},{by_group}", exact, exact, dtype=np.float64) / (D * S)
        rstd = 1.0 / np.sqrt(np.maximum(square - mean * mean, 0.0) + INPUT_EPS)
        x = x.reshape(activation(problem)[0])
        specs = {s.name: s for s in self.tensors(problem)}
        values = {
            "x": x,
            "dy": numerics.random_tensor(rng, specs["dy"].shape, t),
            "mean": mean.astype(np.float32),
            "rstd": rstd.astype(np.float32),
        }
        if problem.affine:
            values["gamma"] = numerics.random_tensor(rng, specs["gamma"].shape, t)
        return values

    def traffic(self, problem: GroupNormProblem) -> tuple[int, int]:
        """(bytes: x and dy read once, dx written once, plus the small tensors;
        multiply-adds: two per element in the sums, two in dx)."""
        t = problem.dtype.tensor.nbytes
        small = 2 * problem.N * problem.G * 4 + (3 * problem.C * t if problem.affine else 0)
        return 3 * problem.numel * t + small, 4 * problem.numel

    def torch_baseline(self, problem: GroupNormProblem, inputs: Mapping[str, Any]) -> TorchBaseline:
        """PyTorch's aten.native_group_norm_backward on the same values.

        PyTorch's CUDA kernel reads mean, rstd and gamma in the input's dtype (its forward returns them so),
        so 16-bit problems hand it the statistics rounded to that dtype: its outputs differ from ours by
        that rounding (about 2**-11 relative for fp16, 2**-8 for bf16). Activations of layouts other than
        NGCHW go in as contiguous copies, made outside the timed call.
        """
        import torch

        x, dy = (torch_ncs(problem, inputs[k]) for k in ("x", "dy"))
        mean, rstd = (inputs[k].to(x.dtype) for k in ("mean", "rstd"))
        gamma = inputs["gamma"].reshape(problem.C) if problem.affine else None
        mask = [True, problem.affine, problem.affine]
        last: dict[str, Any] = {}

        def run() -> None:
            last["out"] = torch.ops.aten.native_group_norm_backward(
                dy, x, mean, rstd, gamma, problem.N, problem.C, problem.spatial, problem.G, mask)

        def outputs() -> dict[str, Any]:
            dx, dgamma, dbeta = last["out"]
            result = {"dx": torch_physical(problem, dx)}
            if problem.affine:
                shape = (problem.G, problem.per_group)
                result["dgamma"] = dgamma.to(x.dtype).reshape(shape)
                result["dbeta"] = dbeta.to(x.dtype).reshape(shape)
            return result

        notes = []
        if problem.dtype is not DType.FP32:
            notes.append(f"PyTorch given mean/rstd in {problem.dtype.value}")
        if problem.layout is not Layout.NGCHW:
            notes.append("PyTorch timed on contiguous (NGCHW) copies")
        return TorchBaseline(run, outputs, "; ".join(notes))


SOLVER = GroupNormBwd()

__all__ = [
    "CELLS", "GROUP_CELLS", "SOLVER", "Finish", "FusedParams", "Geometry", "GroupNormBwd", "GroupNormProblem",
    "GroupParams", "ResidentParams", "Span", "StreamParams", "ThreePassParams", "WindowParams", "geometry",
    "group_segments",
    "parse_groupnorm_problem", "from_ncs", "to_ncs",
]
