"""The GroupNorm backward problem, its --problem parser and its activation layouts (numpy and torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...problem import DType, InvalidProblem, Layout, Op, parse_dims, parse_fields, parse_int

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}
_FIELDS = ("N", "C", "G", "input", "affine")


@dataclass(frozen=True)
class GroupNormProblem:
    """GroupNorm backward over an activation of N x C channels x spatial `input` (1-3 dims).

    C is the total channel count (C/G per group). `affine=False` is GroupNorm without gamma/beta:
    no gamma input and no dgamma/dbeta outputs.
    """

    N: int
    C: int
    G: int
    input: tuple[int, ...]
    layout: Layout = Layout.NGCHW
    dtype: DType = DType.FP16
    affine: bool = True
    op: Op = field(default=Op.GROUPNORM_BWD)

    def __post_init__(self) -> None:
        for name in ("N", "C", "G"):
            value = getattr(self, name)
            if not _positive_int(value):
                raise InvalidProblem(name, f"must be a positive integer, got {value!r}")
        if not isinstance(self.input, tuple) or len(self.input) not in (1, 2, 3):
            raise InvalidProblem("input", f"needs 1, 2 or 3 spatial sizes, got {self.input!r}")
        if not all(_positive_int(v) for v in self.input):
            raise InvalidProblem("input", f"entries must be integers >= 1, got {self.input}")
        if self.C % self.G:
            raise InvalidProblem("C", f"C={self.C} is not divisible by G={self.G}")
        if not isinstance(self.layout, Layout):
            raise InvalidProblem("layout", f"must be a Layout, got {self.layout!r}")
        if not isinstance(self.dtype, DType):
            raise InvalidProblem("dtype", f"must be a DType, got {self.dtype!r}")
        if not isinstance(self.affine, bool):
            raise InvalidProblem("affine", f"must be True or False, got {self.affine!r}")
        if self.op is not Op.GROUPNORM_BWD:
            raise InvalidProblem("op", f"a GroupNormProblem is for {Op.GROUPNORM_BWD.value}, got {self.op!r}")

    @property
    def ndim(self) -> int:
        return len(self.input)

    @property
    def spatial(self) -> int:
        """S: elements per channel of one sample."""
        return math.prod(self.input)

    @property
    def per_group(self) -> int:
        """D: channels per group."""
        return self.C // self.G

    @property
    def numel(self) -> int:
        return self.N * self.C * self.spatial

    @property
    def key(self) -> str:
        """Canonical, order-stable text key (the tuning DB's problem key)."""
        return f"{self.op.value}:{self.layout.value}:{self.dtype.value}:{self.ndim}d:{self.spec()}"

    def spec(self) -> str:
        """The --problem string that parses back to this problem's sizes."""
        text = f"N={self.N},C={self.C},G={self.G},input={'x'.join(str(s) for s in self.input)}"
        return text if self.affine else text + ",affine=0"


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def parse_groupnorm_problem(spec: str, layout: Layout, dtype: DType) -> GroupNormProblem:
    """Parse 'N=2,C=64,G=32,input=7x9' (optional affine=0 for GroupNorm without gamma/beta)."""
    values = parse_fields(spec, _FIELDS, required=("N", "C", "G", "input"))
    affine = parse_int(values.get("affine", "1"), "affine")
    if affine not in (0, 1):
        raise InvalidProblem("affine", f"must be 0 or 1, got {affine}")
    return GroupNormProblem(
        N=parse_int(values["N"], "N"),
        C=parse_int(values["C"], "C"),
        G=parse_int(values["G"], "G"),
        input=parse_dims(values["input"], "input"),
        layout=layout,
        dtype=dtype,
        affine=bool(affine),
    )


# --- layouts -------------------------------------------------------------------------------------
def activation(problem: GroupNormProblem) -> tuple[tuple[int, ...], str]:
    """Physical shape and dims of x / dy / dx: (N, G, C/G, *S) or (N, *S, G, C/G)."""
    spatial = _SPATIAL[problem.ndim]
    if problem.layout is Layout.NHWGC:
        return (problem.N, *problem.input, problem.G, problem.per_group), "N" + spatial + "GC"
    return (problem.N, problem.G, problem.per_group, *problem.input), "NGC" + spatial


def to_ncs(problem: GroupNormProblem, array: np.ndarray) -> np.ndarray:
    """Physical activation -> (N, C, S)."""
    N, C, S = problem.N, problem.C, problem.spatial
    if problem.layout is Layout.NHWGC:
        return array.reshape(N, S, C).transpose(0, 2, 1)
    return array.reshape(N, C, S)


def from_ncs(problem: GroupNormProblem, array: np.ndarray) -> np.ndarray:
    """(N, C, S) -> physical activation, contiguous."""
    shape, _ = activation(problem)
    if problem.layout is Layout.NHWGC:
        return np.ascontiguousarray(array.transpose(0, 2, 1)).reshape(shape)
    return np.ascontiguousarray(array).reshape(shape)


def torch_ncs(problem: GroupNormProblem, physical: Any) -> Any:
    """A physical-layout torch tensor as PyTorch's (N, C, *S), contiguous."""
    N, C = problem.N, problem.C
    if problem.layout is Layout.NHWGC:
        return physical.reshape(N, -1, C).transpose(1, 2).reshape(N, C, *problem.input).contiguous()
    return physical.reshape(N, C, *problem.input)


def torch_physical(problem: GroupNormProblem, ncs: Any) -> Any:
    shape, _ = activation(problem)
    if problem.layout is Layout.NHWGC:
        return ncs.reshape(problem.N, problem.C, -1).transpose(1, 2).contiguous().reshape(shape)
    return ncs.contiguous().reshape(shape)
