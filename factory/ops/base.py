"""What every op module provides, and the small value types the runtime acts on.

An op is a solver: it says which instances apply to a problem (and why the others don't), how an
instance launches for a problem, and what the right answer is (numpy reference). The runtime above
never looks inside a problem; it only executes LaunchPlans against named buffers.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from abc import ABC, abstractmethod
from typing import Any, Callable, Generic, Mapping, Protocol, Sequence, TypeVar, Union

import numpy as np

from ..device import DEFAULT_TARGET, DeviceTarget, MatrixUnit, arch_specific_variant
from ..problem import DType, KernelFactoryError, Layout, Op, Scalar


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
    offset: int = 0  # bytes into the buffer (a plan's workspace holds several regions)


@dataclass(frozen=True)
class I32:
    value: int


@dataclass(frozen=True)
class F32:
    value: float


Field = Union[Buf, I32, F32]


@dataclass(frozen=True)
class Struct:
    """One argument struct passed by value: the kernel ABI (templates/common/args.h).

    `ctype` names the C struct; `fields` are its members in declaration order. Kernels take a few
    of these instead of dozens of scalars, so the C declaration and the Python side that fills it
    are each written once; tests/test_catalog.py checks that the two agree field by field.
    """

    ctype: str
    fields: tuple[tuple[str, Field], ...]

    def __getitem__(self, name: str) -> Field:
        for field, value in self.fields:
            if field == name:
                return value
        raise KeyError(f"{self.ctype} has no field {name!r}")

    def replace(self, **values: Field) -> "Struct":
        """A copy with some fields' values replaced (names must exist)."""
        unknown = set(values) - {f for f, _ in self.fields}
        if unknown:
            raise KeyError(f"{self.ctype} has no fields {sorted(unknown)}")
        return Struct(self.ctype, tuple((f, values.get(f, v)) for f, v in self.fields))


TENSOR_MAP_BOX_MAX = 256  # elements of a box along any dimension
TENSOR_MAP_SWIZZLE_BYTES = 128  # the swizzle span: a box's innermost extent, in bytes, when swizzled
TMA_BARRIER_BYTES = 16  # a pipeline stage's `full` or `empty` barrier (common/tma.h: Bar)


@dataclass(frozen=True)
class TensorMap:
    """A bulk-tensor-copy descriptor over a buffer (templates/common/tma.h), passed by value as the kernel
    parameter `kf_tensor_map`: the tensor's dims (elements, innermost first), the byte strides of dims 1..,
    and the box one copy moves into shared memory, 128-byte swizzled. The backend encodes it when the
    buffer's pointer is bound (the encoding holds the address)."""

    buffer: Buf
    element_bytes: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]

    def __post_init__(self) -> None:
        rank = len(self.dims)
        if not 1 <= rank <= 5 or len(self.box) != rank or len(self.strides) != rank - 1:
            raise ValueError(f"a tensor map of rank 1-5 with a box of as many dims and rank - 1 strides, "
                             f"not dims {self.dims}, strides {self.strides}, box {self.box}")
        if any(d < 1 for d in self.dims) or any(not 1 <= b <= TENSOR_MAP_BOX_MAX for b in self.box):
            raise ValueError(f"tensor map dims {self.dims} and box {self.box}: positive, box at most "
                             f"{TENSOR_MAP_BOX_MAX}")
        if any(s % 16 or s <= 0 for s in self.strides):
            raise ValueError(f"tensor map strides {self.strides} must be positive multiples of 16 bytes")
        if self.box[0] * self.element_bytes != TENSOR_MAP_SWIZZLE_BYTES:
            raise ValueError(f"a box's rows are one {TENSOR_MAP_SWIZZLE_BYTES}-byte swizzle span, not "
                             f"{self.box[0]} x {self.element_bytes} bytes")


LaunchArg = Union[Buf, I32, F32, Struct, TensorMap]


def buffers_of(args: Sequence[LaunchArg]) -> list[Buf]:
    """Every buffer a launch's arguments name, struct fields and tensor maps included, in parameter order."""
    found: list[Buf] = []
    for arg in args:
        if isinstance(arg, Struct):
            found += [v for _, v in arg.fields if isinstance(v, Buf)]
        elif isinstance(arg, Buf):
            found.append(arg)
        elif isinstance(arg, TensorMap):
            found.append(arg.buffer)
    return found


@dataclass(frozen=True)
class Memset:
    """Zero (or fill with a byte) a buffer on the stream before the kernels that accumulate into it:
    `nbytes` from byte `offset` on (a plan's workspace holds several regions)."""

    buffer: str
    nbytes: int
    byte: int = 0
    offset: int = 0


@dataclass(frozen=True)
class Launch:
    """One kernel launch. `cooperative`: every block is resident at once (the backend's cooperative
    launch, which refuses a grid the device cannot hold), so blocks may wait for each other. `early_start`:
    the blocks may be placed while the previous launch still runs (programmatic dependent launch where the
    backend has it, else a plain launch); the kernel waits for that launch (templates/common/pdl.h) before
    reading what it wrote, and only a kernel that does may be so marked."""

    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[LaunchArg, ...]
    shared_bytes: int = 0
    cooperative: bool = False
    early_start: bool = False


Step = Union[Memset, Launch]


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a Kernel does for one problem, in stream order; workspace is owned by the Kernel."""

    steps: tuple[Step, ...]
    workspace_bytes: int = 0


REFERENCE_WORKSPACE = "reference.workspace"  # a DeviceReference plan's scratch buffer (plan.workspace_bytes)
REFERENCE_THREADS = 256  # the reference kernels' block
_REFERENCE_GRID_CAP = 132 * 16  # enough blocks to fill any current GPU; each strides over the rest


def reference_blocks(elements: int) -> tuple[int, int, int]:
    """The grid of a reference kernel that strides over `elements`, REFERENCE_THREADS to a block."""
    return (max(1, min(_REFERENCE_GRID_CAP, -(-elements // REFERENCE_THREADS))), 1, 1)


@dataclass(frozen=True)
class DeviceReference:
    """An op's float64 reference as a kernel of the runtime's own, for a tune to compute on the device
    instead of on the host (factory/device_check.py). `plan` reads the input tensors by name and writes,
    for each output `o`, buffers `o.ref` (the reference) and `o.scale` (verify.py's scale: the sum of its
    terms' magnitudes), float64 in the output's memory order; its scratch, plan.workspace_bytes of it, is
    the buffer REFERENCE_WORKSPACE. The source is templates/common/`template`
    rendered with `values` and, from the device check, `bounds` (see reference_bounds.hip.j2)."""

    template: str
    values: tuple[tuple[str, Any], ...]
    plan: LaunchPlan


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


class FamilyParams(Protocol):
    """A kernel family's tuning point: a frozen dataclass whose suffix encodes every field."""

    def suffix(self) -> str: ...

    def template_values(self) -> Mapping[str, Any]: ...


def params_from_suffix(pattern: "re.Pattern[str]", params_type: type, suffix: str,
                       convert: Mapping[str, Callable[[str], Any]] | None = None) -> Any:
    """The params a name suffix spells (Family.parse_suffix for families whose points take problem values):
    `pattern`'s named groups are the fields, integers unless `convert` names another reading; an optional
    group the suffix leaves out takes the field's default. None when the suffix does not match, names values
    the params refuse, or is not how params_type spells them."""
    match = pattern.fullmatch(suffix)
    if match is None:
        return None
    convert = convert or {}
    try:
        params = params_type(**{k: convert.get(k, int)(v) for k, v in match.groupdict().items() if v is not None})
    except (ValueError, TypeError):  # TypeError: a field without a default left out
        return None
    return params if params.suffix() == suffix else None


class UnknownFamily(KernelFactoryError):
    """A family name that no family of the op carries."""


P = TypeVar("P")  # a family's params type
Q = TypeVar("Q")  # an op's problem type


class Family(ABC, Generic[P, Q]):
    """One kernel family of one op: MIOpen's solver shape (IsApplicable / GetSolution / Search).

    A family owns everything about its kernels: which tuning points exist (`params_type`, catalogs),
    which (layout, dtype, rank) cells they serve, whether one computes a problem on a device
    (`why_not`), how it launches (`launch_plan`), what the template sees (`template_values`) and how
    promising it looks untuned (`heuristic_score`). Adding a family is one module, one template, one
    catalog file.
    """

    name: str
    template: str  # path under templates/
    params_type: type
    description: str

    # --- what exists -----------------------------------------------------------------------------
    @abstractmethod
    def supported_cells(self) -> frozenset[tuple[Layout, DType, int]]:
        """The (layout, dtype, ndim) cells this family has kernels for."""

    def cell_allows(self, params: P, layout: Layout, dtype: DType, ndim: int) -> bool:
        """Whether a tuning point makes sense in a cell at all (catalog expansion drops the rest)."""
        return True

    def needs(self, params: P) -> frozenset[MatrixUnit]:
        """Matrix instructions the instance is built on; a target without them cannot run it."""
        return frozenset()

    # --- problem-specialized points --------------------------------------------------------------
    def problem_values(self, problem: Q) -> Mapping[str, Any] | None:
        """The params fields this family takes from a problem (a catalog point's `"problem"` fields);
        None when its specialized kernels cannot serve the problem. Default: takes nothing, so a
        catalog of this family may not use `"problem"`."""
        return None

    def parse_suffix(self, suffix: str) -> P | None:
        """The params a name suffix spells (the inverse of `suffix()`), or None when it spells none;
        lets a specialized instance's name parse back without the problem it was made for."""
        return None

    def takes_problem_values(self) -> bool:
        """Whether catalog points of this family may say `"problem"`: it fills them (`problem_values`)
        and can read the names they make back (`parse_suffix`)."""
        cls = type(self)
        return cls.problem_values is not Family.problem_values and cls.parse_suffix is not Family.parse_suffix

    # --- applicability ---------------------------------------------------------------------------
    def why_not_on(self, params: P, target: DeviceTarget) -> str | None:
        """None when the instance can run on `target` at all, whatever the problem."""
        missing = target.lacks(self.needs(params))
        if missing:
            names = ", ".join(sorted(m.value for m in missing))
            variant = arch_specific_variant(target, self.needs(params))
            hint = (f" (its arch-specific ISA {variant.arch} has it, as a tune on the GPU itself uses: "
                    f"--target {variant.arch})") if variant else ""
            return f"needs {names}, which target {target.arch} lacks{hint}"
        return None

    @abstractmethod
    def why_not(self, params: P, problem: Q, target: DeviceTarget) -> str | None:
        """None when the instance computes `problem` on `target`; otherwise the reason, in words."""

    # --- the solution ----------------------------------------------------------------------------
    @abstractmethod
    def launch_plan(self, params: P, problem: Q, target: DeviceTarget) -> LaunchPlan: ...

    @abstractmethod
    def template_values(self, params: P, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]: ...

    @abstractmethod
    def heuristic_score(self, params: P, problem: Q, target: DeviceTarget) -> float:
        """Higher is better: the prior that ranks untuned candidates."""


class OpModule(ABC, Generic[Q]):
    """One op: its problem, tensors, numpy reference and PyTorch baseline, and its list of families.

    Every hook the runtime calls is declared here; the defaults are what an op without the feature
    means (no framework view, uniform random inputs, no PyTorch baseline). The family-level methods
    (`why_not`, `launch_plan`, ...) forward to the named family, so the runtime keeps one entry point
    per op; an unknown family name is an error.
    """

    op: Op
    family_list: tuple[Family, ...]
    # How far (factory.nearest.distance, over log2 sizes) a tuned problem's winner still serves an
    # untuned one better than the op's prior does: measured per op by leave-one-out on a DB tuned in full
    # (scripts/nearest_regret.py). The better the prior, the nearer a neighbour must be.
    nearest_reach: float = 5.0

    @property
    def families(self) -> Mapping[str, Family]:
        return {f.name: f for f in self.family_list}

    def family(self, name: str) -> Family:
        for f in self.family_list:
            if f.name == name:
                return f
        known = ", ".join(f.name for f in self.family_list)
        raise UnknownFamily(f"unknown family {name!r} for {self.op.value}; families: {known}")

    # --- problems --------------------------------------------------------------------------------
    @abstractmethod
    def parse_problem(self, spec: str, layout: Layout, dtype: DType) -> Q: ...

    @abstractmethod
    def tensors(self, problem: Q) -> Sequence[TensorSpec]: ...

    @abstractmethod
    def reference(self, problem: Q, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The right answer in float64 (int64 for integer ops), physical layout."""

    def error_scale(self, problem: Q, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """The magnitude each output's error is judged against; None: the reference of |inputs|."""
        return None

    def device_reference(self, problem: Q) -> DeviceReference | None:
        """The reference (and error scale) as a device kernel, for tunes; None: computed on the host."""
        return None

    @abstractmethod
    def tolerance(self, dtype: DType) -> Tolerance: ...

    def random_inputs(self, problem: Q, rng: np.random.Generator) -> dict[str, np.ndarray] | None:
        """Inputs in storage types for verification; None: uniform in [-1, 1) for every input."""
        return None

    @abstractmethod
    def traffic(self, problem: Q) -> tuple[int, int]:
        """(minimum DRAM bytes, multiply-accumulates) for roofline figures."""

    def framework_view(self, problem: Q, name: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """PyTorch's (shape, strides) of a tensor when its layout has one; None otherwise."""
        return None

    def aliasable(self, problem: Q) -> frozenset[tuple[str, str]]:
        """(output, input) pairs that may be the very same buffer (Kernel.run refuses any other overlap
        of a written tensor with another tensor of the call). Default: none."""
        return frozenset()

    def torch_baseline(self, problem: Q, inputs: Mapping[str, Any]) -> "TorchBaseline | None":
        """PyTorch's own implementation bound to `inputs` (what `kfactory bench` times); None: none."""
        return None

    # --- cells -----------------------------------------------------------------------------------
    def supported_cells(self, family: str | None = None) -> frozenset[tuple[Layout, DType, int]]:
        if family is not None:
            return self.family(family).supported_cells()
        return frozenset().union(*(f.supported_cells() for f in self.family_list))

    # --- problems of lower rank ------------------------------------------------------------------
    def lower_rank_view(self, problem: Q) -> Q | None:
        """The same computation on the same tensors as a problem of lower rank, or None (the default: an
        op whose problems have no such view)."""
        return None

    def problem_seen_by(self, family: str, problem: Q) -> Q:
        """The problem `family` computes for `problem`: itself, or its lower-rank view where the family has
        no kernels of the problem's own cell but has them for the view's."""
        view = self.lower_rank_view(problem)
        if view is None:
            return problem
        cells = self.family(family).supported_cells()
        if (problem.layout, problem.dtype, problem.ndim) in cells:
            return problem
        return view if (view.layout, view.dtype, view.ndim) in cells else problem

    # --- forwarded to the family (which sees `problem_seen_by`) ------------------------------------
    def cell_allows(self, family: str, params: Any, layout: Layout, dtype: DType, ndim: int) -> bool:
        return self.family(family).cell_allows(params, layout, dtype, ndim)

    def why_not(self, family: str, params: Any, problem: Q, target: DeviceTarget = DEFAULT_TARGET) -> str | None:
        fam = self.family(family)
        return fam.why_not_on(params, target) or fam.why_not(params, self.problem_seen_by(family, problem), target)

    def launch_plan(self, family: str, params: Any, problem: Q, target: DeviceTarget = DEFAULT_TARGET) -> LaunchPlan:
        return self.family(family).launch_plan(params, self.problem_seen_by(family, problem), target)

    def template_values(self, family: str, params: Any, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        return self.family(family).template_values(params, layout, dtype, ndim)

    def heuristic_score(self, family: str, params: Any, problem: Q, target: DeviceTarget = DEFAULT_TARGET) -> float:
        return self.family(family).heuristic_score(params, self.problem_seen_by(family, problem), target)


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
