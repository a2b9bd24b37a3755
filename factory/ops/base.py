"""What every op module provides, and the small value types the runtime acts on.

An op is a solver: it says which instances apply to a problem (and why the others don't), how an
instance launches for a problem, and what the right answer is (numpy reference). The runtime above
never looks inside a problem; it only executes LaunchPlans against named buffers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence, Union

import numpy as np

from ..problem import DType, Layout, Op, Scalar


class Role(enum.Enum):
    INPUT = "input"
    OUTPUT = "output"


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a problem in its physical (memory) order, row-major contiguous."""

    name: str
    shape: tuple[int, ...]
    scalar: Scalar
    role: Role
    dims: str  # one letter per axis of `shape`, e.g. "NHWGC"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.scalar.nbytes

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


# Launch arguments: a named buffer's pointer, or a scalar value.
@dataclass(frozen=True)
class Buf:
    name: str  # a TensorSpec name, or "workspace"


@dataclass(frozen=True)
class I32:
    value: int


@dataclass(frozen=True)
class F32:
    value: float


LaunchArg = Union[Buf, I32, F32]


@dataclass(frozen=True)
class Memset:
    """Zero (or fill with a byte) a buffer on the stream before the kernels that accumulate into it."""

    buffer: str
    nbytes: int
    byte: int = 0


@dataclass(frozen=True)
class Launch:
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[LaunchArg, ...]
    shared_bytes: int = 0


Step = Union[Memset, Launch]


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a Kernel does for one problem, in stream order; workspace is owned by the Kernel."""

    steps: tuple[Step, ...]
    workspace_bytes: int = 0


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


class FamilyParams(Protocol):
    """A kernel family's tuning point (a frozen dataclass)."""

    def suffix(self) -> str: ...

    def template_values(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class FamilySpec:
    """How a kernel family of an op is named, rendered and checked."""

    name: str
    template: str  # path under templates/
    params_type: type
    description: str


class OpSolver(Protocol):
    op: Op

    @property
    def families(self) -> Mapping[str, FamilySpec]: ...

    def supported_cells(self, family: str | None = None) -> frozenset[tuple[Layout, DType, int]]: ...

    def cell_allows(self, family: str, params: Any, layout: Layout, dtype: DType, ndim: int) -> bool: ...

    def why_not(self, family: str, params: Any, problem: Any) -> str | None: ...

    def tensors(self, problem: Any) -> Sequence[TensorSpec]: ...

    def launch_plan(self, family: str, params: Any, problem: Any) -> LaunchPlan: ...

    def reference(self, problem: Any, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def tolerance(self, dtype: DType) -> Tolerance: ...

    def parse_problem(self, spec: str, layout: Layout, dtype: DType) -> Any: ...

    def heuristic_score(self, family: str, params: Any, problem: Any) -> float: ...

    def traffic(self, problem: Any) -> tuple[int, int]:
        """(minimum DRAM bytes, multiply-accumulates) for roofline figures."""
        ...


@dataclass(frozen=True)
class TorchBaseline:
    """PyTorch's own implementation of an op, bound to one set of inputs (what `kfactory bench` times).

    An op module may provide `torch_baseline(problem, inputs) -> TorchBaseline`, where `inputs` maps the
    op's input TensorSpec names to contiguous physical-layout torch tensors. It is optional: an op
    without it is benchmarked without a PyTorch comparison. Kept torch-free here; torch is imported by
    the op module inside the method.
    """

    run: Callable[[], Any]  # launches PyTorch's op once on the current stream
    # The last run's results by name, contiguous in our physical layout, in PyTorch's dtype (which may be
    # narrower than ours, e.g. bf16 where we write fp32; the comparison then allows for it).
    outputs: Callable[[], dict[str, Any]]
    note: str = ""  # what differs from our run, e.g. the layout PyTorch was timed in


class HasTorchBaseline(Protocol):
    def torch_baseline(self, problem: Any, inputs: Mapping[str, Any]) -> TorchBaseline: ...
