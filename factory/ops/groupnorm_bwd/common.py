"""What the GroupNorm backward families share: the cells, op-wide checks and the values templates see."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from ...device import DeviceTarget
from ...problem import DType, Layout
from ..base import F32, I32, Buf, Family, Struct
from ..conv import cpp_type
from .problem import GroupNormProblem

INT32_LIMIT = 2**31 - 1
MAX_VECTOR_BYTES = 16  # the widest global load one thread issues
LAYOUTS = (Layout.NGCHW, Layout.NHWGC)
DTYPES = (DType.FP16, DType.BF16, DType.FP32)
CELLS = frozenset((l, d, n) for l in LAYOUTS for d in DTYPES for n in (1, 2, 3))


def affine_buffers(problem: GroupNormProblem) -> tuple[str, str, str]:
    """gamma, dgamma, dbeta buffers; without gamma the kernels never touch them, so any bound buffer fills the slots."""
    return ("gamma", "dgamma", "dbeta") if problem.affine else ("x", "dx", "dx")


GN_ARGS = "kf_gn_args"  # templates/common/args.h


def gn_args(problem: GroupNormProblem) -> Struct:
    """Every GroupNorm kernel's argument struct: all nine buffers (pointers first), the sizes, 1/(D*S).

    Each kernel reads the fields it needs; a family's own arguments (tiles, segments) follow the
    struct as a second struct or plain parameters.
    """
    gamma, dgamma, dbeta = affine_buffers(problem)
    buffers = (("x", "x"), ("dy", "dy"), ("mean", "mean"), ("rstd", "rstd"), ("gamma", gamma), ("dx", "dx"),
               ("dgamma", dgamma), ("dbeta", dbeta), ("ws", "workspace"))
    sizes = (("N", problem.N), ("C", problem.C), ("G", problem.G), ("D", problem.per_group),
             ("S", problem.spatial), ("affine", int(problem.affine)))
    return Struct(GN_ARGS, tuple((f, Buf(b)) for f, b in buffers) + tuple((f, I32(v)) for f, v in sizes)
                  + (("inv_m", F32(1.0 / (problem.per_group * problem.spatial))),))


class GroupNormFamily(Family[Any, GroupNormProblem]):
    """A GroupNorm backward family: the op-wide checks (size, vector widths) before its own."""

    def supported_cells(self) -> frozenset[tuple[Layout, DType, int]]:
        return CELLS

    def cell_allows(self, params: Any, layout: Layout, dtype: DType, ndim: int) -> bool:
        return params.vector * dtype.tensor.nbytes <= MAX_VECTOR_BYTES

    def why_not(self, params: Any, problem: GroupNormProblem, target: DeviceTarget) -> str | None:
        if problem.numel > INT32_LIMIT:
            return "the activation has 2**31 elements or more; kernels index with 32-bit integers"
        if problem.layout is Layout.NHWGC and problem.C % params.vector:
            return f"vector width {params.vector} needs C divisible by it (C={problem.C})"
        if problem.layout is Layout.NGCHW and problem.spatial % params.vector:
            return f"vector width {params.vector} needs the spatial size divisible by it (S={problem.spatial})"
        return self.why_not_here(params, problem, target)

    @abstractmethod
    def why_not_here(self, params: Any, problem: GroupNormProblem, target: DeviceTarget) -> str | None: ...

    def template_values(self, params: Any, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        return dict(params.template_values()) | {"tin": cpp_type(dtype.tensor), "channels_last": int(layout is Layout.NHWGC)}
