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

Three kernel families, all reading the forward's fp32 statistics and accumulating in fp32:
- `threepass`: the classic scheme: per-channel sums (dgamma, dbeta), per-(n, g) sums, then dx, each pass
  reading x and dy: 7 tensor-sized transfers. Portable and simple.
- `fused`: one read of x and dy produces per-(n, c) sums A, B, from which both dgamma/dbeta and the
  per-(n, g) coefficients follow; a second pass writes dx: 5 tensor-sized transfers. The per-(n, c)
  sums meet through atomics (`atomic`) or a deterministic finishing kernel (`twostage`).

Minimum DRAM traffic (what `traffic` reports, and what GB/s figures divide): 3 tensor-sized transfers
(x and dy read once, dx written once) plus the small tensors. The fused family reads x and dy twice, so
where they do not stay in L2 between its passes it moves 5 transfers and tops out at 3/5 of the copy
bandwidth by this count; the dx pass walks the tiles in reverse to reuse what L2 still holds. The group
family re-reads a block's own rows right after summing them, mostly from cache.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .. import numerics
from ..problem import (
    DType,
    InvalidProblem,
    Layout,
    Op,
    Scalar,
    parse_dims,
    parse_fields,
    parse_int,
)
from .base import F32, I32, Buf, FamilySpec, Launch, LaunchPlan, Memset, Role, TensorSpec, Tolerance

INT32_LIMIT = 2**31 - 1
MAX_VECTOR_BYTES = 16  # the widest global load one thread issues
FINISH_THREADS = 256  # group family, per-sample span: threads per block of the dgamma/dbeta launch
FINISH_BLOCK = (32, 8, 1)  # twostage finishing kernel: one 32-lane row per (n, g) or 32 channels per block
# A big GPU (H100 SXM: 132 SMs x 2048 threads; MI250X's GCD holds about as many): the grids aim at
# `waves` times this many threads, so few (n, c) rows still fill the device and many need no splitting.
RESIDENT_THREADS = 132 * 2048
GROUP_ROW_CAP = 1024  # `group` family: (n, c) rows of one group whose sums a block keeps in shared memory
GROUP_ELEMENT_CAP = 1 << 18  # `group` family: elements of one group (N*D*S) one block streams at most
GROUP_SMALL_BYTES = 8 << 20  # the heuristic's guess: below this per tensor, one launch per problem wins
INPUT_EPS = 1e-5  # variance epsilon of the statistics random_inputs derives from x

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}
_CPP = {Scalar.F16: "f16_t", Scalar.BF16: "bf16_t", Scalar.F32: "float"}
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


# --- tuning points ---------------------------------------------------------------------------------
class Finish(enum.Enum):
    """How the per-(n, c) sums of the fused family meet."""

    ATOMIC = "atomic"  # fp32 atomics into per-channel and per-(n, g) accumulators; dx pass converts
    TWOSTAGE = "twostage"  # each split writes its sums; a small kernel adds them in a fixed order

    @property
    def mode(self) -> int:
        return {"atomic": 1, "twostage": 2}[self.value]


@dataclass(frozen=True)
class StreamParams:
    """A streaming tile: `threads` per block, each loading `unroll` vectors of `vector` elements per trip
    (per tensor): vector * unroll elements per trip. The spatial extent is split so that the grid holds
    about `waves` x RESIDENT_THREADS threads; the trips per thread follow (fewer splits, fewer partial sums)."""

    threads: int
    vector: int
    unroll: int
    waves: int

    def __post_init__(self) -> None:
        if self.threads % 32 or not 64 <= self.threads <= 512:
            raise ValueError("threads must be a multiple of 32 in 64..512 (a block's sums fit 32 KiB of shared memory)")
        if self.vector not in (1, 2, 4, 8):
            raise ValueError("vector must be 1, 2, 4 or 8")
        if self.unroll < 1 or self.waves < 1:
            raise ValueError("unroll and waves must be >= 1")

    def stream_suffix(self) -> str:
        return f"t{self.threads}_v{self.vector}_u{self.unroll}_w{self.waves}"

    def stream_values(self) -> dict[str, Any]:
        return {"threads": self.threads, "vector": self.vector, "unroll": self.unroll}


@dataclass(frozen=True)
class ThreePassParams(StreamParams):
    def suffix(self) -> str:
        return self.stream_suffix()

    def template_values(self) -> dict[str, Any]:
        return self.stream_values() | {"reduce_mode": 0}


@dataclass(frozen=True)
class FusedParams(StreamParams):
    finish: Finish = Finish.ATOMIC

    def suffix(self) -> str:
        return f"{self.stream_suffix()}_{self.finish.value}"

    def template_values(self) -> dict[str, Any]:
        return self.stream_values() | {"reduce_mode": self.finish.mode}


class Span(enum.Enum):
    """What one block of the `group` family owns."""

    PER_GROUP = "per_group"  # every sample of one group: dgamma/dbeta summed in the block
    PER_SAMPLE = "per_sample"  # one (n, g): dgamma/dbeta finished by a second launch


@dataclass(frozen=True)
class GroupParams:
    """Blocks of `threads` owning `span`, each warp streaming row segments (`group_segments`) with
    `unroll` loads of `vector` elements per tensor in flight per lane."""

    threads: int
    vector: int
    unroll: int
    span: Span = Span.PER_GROUP

    def __post_init__(self) -> None:
        if self.threads % 32 or not 64 <= self.threads <= 1024:
            raise ValueError("threads must be a multiple of 32 in 64..1024")
        if self.vector not in (1, 2, 4, 8):
            raise ValueError("vector must be 1, 2, 4 or 8")
        if self.unroll < 1:
            raise ValueError("unroll must be >= 1")

    def suffix(self) -> str:
        return f"t{self.threads}_v{self.vector}_u{self.unroll}_{self.span.value}"

    def template_values(self) -> dict[str, Any]:
        return {"threads": self.threads, "vector": self.vector, "unroll": self.unroll, "reduce_mode": 0,
                "row_cap": GROUP_ROW_CAP, "per_sample": int(self.span is Span.PER_SAMPLE),
                "finish_threads": FINISH_THREADS}


FAMILIES: dict[str, FamilySpec] = {
    "threepass": FamilySpec("threepass", "groupnorm_bwd/threepass.hip.j2", ThreePassParams,
                            "per-channel sums, per-(n, g) sums, then dx: three reads of x and dy"),
    "fused": FamilySpec("fused", "groupnorm_bwd/fused.hip.j2", FusedParams,
                        "per-(n, c) sums in one read of x and dy, then dx: two reads"),
    "group": FamilySpec("group", "groupnorm_bwd/group.hip.j2", GroupParams,
                        "a block per group or per (n, g): sums, then dx from cache; no memset (NGCHW, small)"),
}

LAYOUTS = (Layout.NGCHW, Layout.NHWGC)
DTYPES = (DType.FP16, DType.BF16, DType.FP32)
CELLS = frozenset((l, d, n) for l in LAYOUTS for d in DTYPES for n in (1, 2, 3))
GROUP_CELLS = frozenset(cell for cell in CELLS if cell[0] is Layout.NGCHW)  # a group's rows are contiguous


# --- geometry --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Geometry:
    """How the streaming kernels tile a problem; the same tiles for the sums and the dx pass.

    NGCHW: rows are (n, c) pairs of S contiguous elements; a block is TL lanes along a row x TR rows,
    and each row's extent is cut into `splits` chunks of `chunk` elements.
    NHWGC: for each n, rows are the S spatial positions of C contiguous channels; a block is TL lanes
    of `vector` channels x TR rows, each chunk `chunk` rows long; `tiles` lane tiles cover C.
    """

    lanes: int  # TL
    rows: int  # TR
    chunk: int
    splits: int
    tiles: int  # NGCHW: row tiles; NHWGC: lane tiles
    blocks: int

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.lanes, self.rows, 1)


def geometry(params: StreamParams, problem: GroupNormProblem) -> Geometry:
    S, vec = problem.spatial, params.vector
    if problem.layout is Layout.NHWGC:
        vector_lanes = problem.C // vec
        tiles = math.ceil(vector_lanes / params.threads)
        lanes = math.ceil(vector_lanes / tiles)
        rows = max(1, params.threads // lanes)
        trip = rows * params.unroll  # spatial rows one trip of the block covers
        unsplit = problem.N * tiles
    else:
        per_trip = math.ceil(S / (vec * params.unroll))  # lanes one trip along a row could keep busy
        lanes = min(params.threads, 32 * math.ceil(per_trip / 32))
        rows = params.threads // lanes
        trip = lanes * vec * params.unroll  # elements of a row one trip covers
        tiles = math.ceil(problem.N * problem.C / rows)
        unsplit = tiles
    trips = math.ceil(S / trip)
    wanted = params.waves * RESIDENT_THREADS / (lanes * rows)
    splits = min(max(1, round(wanted / unsplit)), trips)
    chunk = math.ceil(trips / splits) * trip
    splits = math.ceil(S / chunk)
    return Geometry(lanes, rows, chunk, splits, tiles, unsplit * splits)


def _group_why_not(params: GroupParams, problem: GroupNormProblem) -> str | None:
    per_sample = params.span is Span.PER_SAMPLE
    rows = problem.per_group if per_sample else problem.N * problem.per_group
    owner = "(n, g)" if per_sample else "group"
    if rows > GROUP_ROW_CAP:
        return f"{rows} (n, c) rows per {owner}; one block keeps the sums of at most {GROUP_ROW_CAP}"
    if rows * problem.spatial > GROUP_ELEMENT_CAP:
        return (f"{rows * problem.spatial} elements per {owner}; one block streams at most "
                f"{GROUP_ELEMENT_CAP} (the fused family splits big groups across the GPU)")
    return None


def group_segments(params: GroupParams, problem: GroupNormProblem) -> tuple[int, int]:
    """(segments per row, elements per segment): a block with fewer rows than warps cuts each row into
    segments so that every warp streams; segments are whole multiples of a warp's 32 vector loads."""
    rows = problem.per_group * (1 if params.span is Span.PER_SAMPLE else problem.N)
    S, step = problem.spatial, 32 * params.vector
    wanted = max(1, (params.threads // 32) // rows)
    seg_len = step * math.ceil(math.ceil(S / wanted) / step)
    return math.ceil(S / seg_len), seg_len


def _group_plan(params: GroupParams, problem: GroupNormProblem) -> LaunchPlan:
    """G blocks (per group) or N*G blocks and a finishing launch over the channels (per sample).

    Without gamma the kernels never touch gamma/dgamma/dbeta; any bound buffer fills the slots."""
    N, C, G = problem.N, problem.C, problem.G
    affine = problem.affine
    gamma, dgamma, dbeta = ("gamma", "dgamma", "dbeta") if affine else ("x", "dx", "dx")
    segs, seg_len = group_segments(params, problem)
    args = (Buf("x"), Buf("dy"), Buf("mean"), Buf("rstd"), Buf(gamma), Buf("dx"), Buf(dgamma), Buf(dbeta),
            Buf("workspace"), *(I32(v) for v in (N, C, G, problem.per_group, problem.spatial, int(affine))),
            F32(1.0 / (problem.per_group * problem.spatial)), I32(segs), I32(seg_len))
    if params.span is Span.PER_GROUP:
        return LaunchPlan((Launch("kf_group", (G, 1, 1), (params.threads, 1, 1), args),), 0)
    steps = [Launch("kf_group", (N * G, 1, 1), (params.threads, 1, 1), args)]
    if affine:
        steps.append(Launch("kf_group_finish", (math.ceil(C / FINISH_THREADS), 1, 1), (FINISH_THREADS, 1, 1),
                            (Buf("workspace"), Buf(dgamma), Buf(dbeta), I32(N), I32(C))))
    return LaunchPlan(tuple(steps), 4 * 2 * N * C if affine else 0)


def _workspace_floats(problem: GroupNormProblem, geo: Geometry, params: Any) -> tuple[int, int]:
    """(floats zeroed before the sums, total floats): per-(n, g) pairs, per-channel pairs, split partials."""
    accumulators = 2 * problem.N * problem.G + 2 * problem.C
    partials = 2 * geo.splits * problem.N * problem.C if getattr(params, "finish", None) is Finish.TWOSTAGE else 0
    return accumulators, accumulators + partials


# --- the solver ------------------------------------------------------------------------------------
class GroupNormBwd:
    """The solver for `groupnorm_bwd` (see factory.ops.base.OpSolver)."""

    op = Op.GROUPNORM_BWD
    families = FAMILIES

    # --- what exists -----------------------------------------------------------------------------
    def supported_cells(self, family: str | None = None) -> frozenset[tuple[Layout, DType, int]]:
        return GROUP_CELLS if family == "group" else CELLS

    def cell_allows(self, family: str, params: Any, layout: Layout, dtype: DType, ndim: int) -> bool:
        return params.vector * dtype.tensor.nbytes <= MAX_VECTOR_BYTES

    def parse_problem(self, spec: str, layout: Layout, dtype: DType) -> GroupNormProblem:
        return parse_groupnorm_problem(spec, layout, dtype)

    # --- applicability ---------------------------------------------------------------------------
    def why_not(self, family: str, params: Any, problem: GroupNormProblem) -> str | None:
        """None when the instance computes this problem; otherwise the reason it does not."""
        if problem.numel > INT32_LIMIT:
            return "the activation has 2**31 elements or more; kernels index with 32-bit integers"
        if problem.layout is Layout.NHWGC and problem.C % params.vector:
            return f"vector width {params.vector} needs C divisible by it (C={problem.C})"
        if problem.layout is Layout.NGCHW and problem.spatial % params.vector:
            return f"vector width {params.vector} needs the spatial size divisible by it (S={problem.spatial})"
        if family == "group":
            return _group_why_not(params, problem)
        geo = geometry(params, problem)
        if _workspace_floats(problem, geo, params)[1] > INT32_LIMIT:
            return "the per-split sums need a workspace of 2**31 floats or more"
        return None

    # --- tensors and launches ---------------------------------------------------------------------
    def tensors(self, problem: GroupNormProblem) -> list[TensorSpec]:
        shape, dims = _activation(problem)
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

    def template_values(self, family: str, params: Any, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        values = dict(params.template_values())
        values.update(tin=_CPP[dtype.tensor], channels_last=int(layout is Layout.NHWGC))
        return values

    def launch_plan(self, family: str, params: Any, problem: GroupNormProblem) -> LaunchPlan:
        if family == "group":
            return _group_plan(params, problem)
        geo = geometry(params, problem)
        zeroed, total = _workspace_floats(problem, geo, params)
        affine = problem.affine
        # Without gamma the kernels never touch gamma/dgamma/dbeta; any bound buffer fills the slots.
        gamma, dgamma, dbeta = ("gamma", "dgamma", "dbeta") if affine else ("x", "dx", "dx")
        sizes = tuple(I32(v) for v in (
            problem.N, problem.C, problem.G, problem.per_group, problem.spatial,
            geo.lanes, geo.rows, geo.chunk, geo.splits, geo.tiles, int(affine),
        ))
        reads = (Buf("x"), Buf("dy"), Buf("mean"), Buf("rstd"), Buf(gamma), Buf("workspace"))

        def stream(entry: str, *args: Any) -> Launch:
            return Launch(entry, (geo.blocks, 1, 1), geo.block, args)

        dx = stream("kf_dx", *reads, Buf("dx"), Buf(dgamma), Buf(dbeta), *sizes,
                    F32(1.0 / (problem.per_group * problem.spatial)))
        steps: list = []
        if family == "threepass":
            steps.append(Memset("workspace", 4 * zeroed))
            if affine:
                steps.append(stream("kf_channel", *reads, *sizes))
            steps += [stream("kf_group", *reads, *sizes), dx]
        elif params.finish is Finish.ATOMIC:
            steps += [Memset("workspace", 4 * zeroed), stream("kf_stats", *reads, *sizes), dx]
        else:
            blocks = math.ceil(problem.N * problem.G / FINISH_BLOCK[1])
            if affine:
                blocks += math.ceil(problem.C / FINISH_BLOCK[0])
            finish = Launch("kf_finish", (blocks, 1, 1), FINISH_BLOCK,
                            (Buf("mean"), Buf("rstd"), Buf(gamma), Buf("workspace"), Buf(dgamma), Buf(dbeta), *sizes))
            steps += [stream("kf_stats", *reads, *sizes), finish, dx]
        return LaunchPlan(tuple(steps), 4 * total)

    # --- numbers ---------------------------------------------------------------------------------
    def reference(self, problem: GroupNormProblem, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """dx, dgamma, dbeta in float64, physical layouts, from physical-layout inputs."""
        return _backward(problem, inputs, magnitude=False)

    def error_scale(self, problem: GroupNormProblem, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Per output element, the summed magnitudes of the terms an fp32 evaluation rounds (see verify)."""
        return _backward(problem, inputs, magnitude=True)

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
        fails; mean and rstd (eps 1e-5) are computed from the stored (rounded) x.
        """
        N, G, D, S = problem.N, problem.G, problem.per_group, problem.spatial
        t = problem.dtype.tensor
        offset = rng.uniform(-1.0, 1.0, size=(N, G, 1))
        spread = rng.uniform(0.25, 2.0, size=(N, G, 1))
        x_groups = offset + spread * rng.uniform(-1.0, 1.0, size=(N, G, D * S))
        x = numerics.to_storage(_from_ncs(problem, x_groups.reshape(N, problem.C, S)), t)
        exact = _to_ncs(problem, numerics.exact_values(x, t)).reshape(N, G, D * S)
        mean = exact.mean(axis=-1)
        rstd = 1.0 / np.sqrt(exact.var(axis=-1) + INPUT_EPS)
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

    def heuristic_score(self, family: str, params: Any, problem: GroupNormProblem) -> float:
        """Higher is better: a rough prior used when a problem is untuned."""
        if family == "group":  # small problems: one launch beats three; large ones need the whole GPU
            load_bytes = params.vector * problem.dtype.tensor.nbytes
            small = problem.numel * problem.dtype.tensor.nbytes <= GROUP_SMALL_BYTES
            spread = 0.2 if (params.span is Span.PER_SAMPLE) == (problem.N > 1) else 0.0  # more blocks
            return ((4.0 if small else 0.0) + spread + math.log2(load_bytes) * 0.3
                    - 0.05 * abs(math.log2(params.threads / 512)))
        geo = geometry(params, problem)
        fill = min(geo.blocks * geo.lanes * geo.rows / RESIDENT_THREADS, 1.0)
        load_bytes = params.vector * problem.dtype.tensor.nbytes
        in_flight = min(params.unroll * load_bytes / 32, 1.0)  # >= 2 wide loads per tensor in flight
        score = (2.0 if family == "fused" else 0.0) + math.log2(load_bytes) * 0.3 + in_flight + fill
        if family == "fused" and params.finish is Finish.ATOMIC:
            score += 0.1  # one launch fewer than twostage
        return score - 0.05 * abs(math.log2(params.waves / 2)) - (0.05 if params.threads != 256 else 0.0)

    def torch_baseline(self, problem: GroupNormProblem, inputs: Mapping[str, Any]) -> Any:
        """PyTorch's aten.native_group_norm_backward on the same values.

        PyTorch's CUDA kernel reads mean, rstd and gamma in the input's dtype (its forward returns them so),
        so 16-bit problems hand it the statistics rounded to that dtype: its outputs differ from ours by
        that rounding (about 2**-11 relative for fp16, 2**-8 for bf16). Activations of layouts other than
        NGCHW go in as contiguous copies, made outside the timed call.
        """
        import torch

        from .base import TorchBaseline

        x, dy = (_torch_ncs(problem, inputs[k]) for k in ("x", "dy"))
        mean, rstd = (inputs[k].to(x.dtype) for k in ("mean", "rstd"))
        gamma = inputs["gamma"].reshape(problem.C) if problem.affine else None
        mask = [True, problem.affine, problem.affine]
        last: dict[str, Any] = {}

        def run() -> None:
            last["out"] = torch.ops.aten.native_group_norm_backward(
                dy, x, mean, rstd, gamma, problem.N, problem.C, problem.spatial, problem.G, mask)

        def outputs() -> dict[str, Any]:
            dx, dgamma, dbeta = last["out"]
            result = {"dx": _torch_physical(problem, dx)}
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


# --- layouts -------------------------------------------------------------------------------------
def _activation(problem: GroupNormProblem) -> tuple[tuple[int, ...], str]:
    """Physical shape and dims of x / dy / dx: (N, G, C/G, *S) or (N, *S, G, C/G)."""
    spatial = _SPATIAL[problem.ndim]
    if problem.layout is Layout.NHWGC:
        return (problem.N, *problem.input, problem.G, problem.per_group), "N" + spatial + "GC"
    return (problem.N, problem.G, problem.per_group, *problem.input), "NGC" + spatial


def _to_ncs(problem: GroupNormProblem, array: np.ndarray) -> np.ndarray:
    """Physical activation -> (N, C, S)."""
    N, C, S = problem.N, problem.C, problem.spatial
    if problem.layout is Layout.NHWGC:
        return array.reshape(N, S, C).transpose(0, 2, 1)
    return array.reshape(N, C, S)


def _from_ncs(problem: GroupNormProblem, array: np.ndarray) -> np.ndarray:
    """(N, C, S) -> physical activation, contiguous."""
    shape, _ = _activation(problem)
    if problem.layout is Layout.NHWGC:
        return np.ascontiguousarray(array.transpose(0, 2, 1)).reshape(shape)
    return np.ascontiguousarray(array).reshape(shape)


def _torch_ncs(problem: GroupNormProblem, physical: Any) -> Any:
    """A physical-layout torch tensor as PyTorch's (N, C, *S), contiguous."""
    N, C = problem.N, problem.C
    if problem.layout is Layout.NHWGC:
        return physical.reshape(N, -1, C).transpose(1, 2).reshape(N, C, *problem.input).contiguous()
    return physical.reshape(N, C, *problem.input)


def _torch_physical(problem: GroupNormProblem, ncs: Any) -> Any:
    shape, _ = _activation(problem)
    if problem.layout is Layout.NHWGC:
        return ncs.reshape(problem.N, problem.C, -1).transpose(1, 2).contiguous().reshape(shape)
    return ncs.contiguous().reshape(shape)


# --- reference -------------------------------------------------------------------------------------
def _backward(problem: GroupNormProblem, inputs: Mapping[str, np.ndarray], magnitude: bool) -> dict[str, np.ndarray]:
    """PyTorch's formula in float64; with `magnitude`, every term by its absolute value and the sums
    centred as the kernels form them (sum |gamma*dy*(x - mean)|), i.e. what fp32 rounding scales with."""
    N, G, D, S = problem.N, problem.G, problem.per_group, problem.spatial
    x = _to_ncs(problem, np.asarray(inputs["x"], dtype=np.float64)).reshape(N, G, D, S)
    dy = _to_ncs(problem, np.asarray(inputs["dy"], dtype=np.float64)).reshape(N, G, D, S)
    mean = np.asarray(inputs["mean"], dtype=np.float64).reshape(N, G, 1, 1)
    rstd = np.asarray(inputs["rstd"], dtype=np.float64).reshape(N, G, 1, 1)
    gamma = (np.asarray(inputs["gamma"], dtype=np.float64).reshape(1, G, D, 1) if problem.affine
             else np.ones((1, G, D, 1)))
    inv_m = 1.0 / (D * S)
    if magnitude:
        a_nc = (np.abs(dy) * np.abs(x - mean)).sum(-1, keepdims=True)
        x, dy, mean, rstd, gamma = (np.abs(v) for v in (x, dy, mean, rstd, gamma))
        sign = 1.0
    else:
        a_nc = (dy * x).sum(-1, keepdims=True) - mean * dy.sum(-1, keepdims=True)
        sign = -1.0
    b_nc = dy.sum(-1, keepdims=True)
    a_g = (gamma * a_nc).sum(2, keepdims=True)
    b_g = (gamma * b_nc).sum(2, keepdims=True)
    c2 = sign * a_g * rstd**3 * inv_m
    c3 = sign * (c2 * mean + b_g * rstd * inv_m)
    dx = rstd * gamma * dy + c2 * x + c3
    out = {"dx": _from_ncs(problem, dx.reshape(N, G * D, S))}
    if problem.affine:
        out["dgamma"] = (rstd * a_nc).sum(axis=(0, 3)).reshape(G, D)
        out["dbeta"] = b_nc.sum(axis=(0, 3)).reshape(G, D)
    return out


SOLVER = GroupNormBwd()
