"""Problem vocabulary: enums for op / layout / dtype and one frozen dataclass per op problem.

Strings from users are parsed here, once, at the edge; everything below works on these types.
C and K are channels *per group* (CK's convention).
"""

from __future__ import annotations

import enum
import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence


class KernelFactoryError(Exception):
    """Base of every error the library raises on purpose."""


class InvalidProblem(KernelFactoryError, ValueError):
    """A problem field holds a value no problem of its op can have."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"invalid {field_name}: {message}")
        self.field = field_name


class UnsupportedProblem(KernelFactoryError):
    """A valid problem that no kernel family of this op covers."""


class ProblemSyntaxError(KernelFactoryError, ValueError):
    """A problem string that does not parse; names the bad token."""


class Op(enum.Enum):
    """The product's ops. An op has kernels once its solver is registered in `factory.ops`."""

    CONV_BWD_WEIGHT = "conv_bwd_weight"
    CONV_BWD_DATA = "conv_bwd_data"
    DWSEP_CONV_FWD = "dwsep_conv_fwd"  # depthwise k x k then 1x1, intermediate kept on chip
    GROUPNORM_BWD = "groupnorm_bwd"

    @classmethod
    def parse(cls, text: str) -> "Op":
        return _parse_enum(cls, text, "op")


class Layout(enum.Enum):
    """Memory orders of (input, weight, output), outermost first, spelled for 2-D.

    1-D and 3-D drop or add spatial letters (NWGC, NDHWGC, ...); the enum is rank-free.
    """

    NHWGC = "nhwgc"  # NHWGC / GKYXC / NHWGK  (PyTorch channels_last)
    NGCHW = "ngchw"  # NGCHW / GKCYX / NGKHW  (PyTorch default)
    NGCHW_GKYXC = "ngchw_gkyxc"  # NGCHW / GKYXC / NGKHW
    GNHWC = "gnhwc"  # GNHWC / GKYXC / GNHWK

    @property
    def input_order(self) -> str:
        """Order of the activation tensor with 'S' standing for all spatial dims."""
        return {"nhwgc": "NSGC", "ngchw": "NGCS", "ngchw_gkyxc": "NGCS", "gnhwc": "GNSC"}[self.value]

    @property
    def weight_order(self) -> str:
        return {"nhwgc": "GKSC", "ngchw": "GKCS", "ngchw_gkyxc": "GKSC", "gnhwc": "GKSC"}[self.value]

    @property
    def output_order(self) -> str:
        return self.input_order.replace("C", "K")

    def spelled(self, ndim: int) -> str:
        """Human spelling of the triple for a rank, e.g. NDHWGC/GKZYXC/NDHWGK."""
        act = {1: "W", 2: "HW", 3: "DHW"}[ndim]
        wei = {1: "X", 2: "YX", 3: "ZYX"}[ndim]
        parts = (self.input_order, self.weight_order, self.output_order)
        return "/".join(p.replace("S", wei if i == 1 else act) for i, p in enumerate(parts))

    @classmethod
    def parse(cls, text: str) -> "Layout":
        key = text.strip().lower().replace("-", "_").replace("/", "_")
        for rank_free, spellings in _LAYOUT_ALIASES.items():
            if key in spellings:
                return rank_free
        return _parse_enum(cls, text, "layout")


def _layout_aliases() -> dict[Layout, set[str]]:
    aliases: dict[Layout, set[str]] = {}
    for layout in Layout:
        names = {layout.value}
        for ndim in (1, 2, 3):
            triple = layout.spelled(ndim).lower()
            names.add(triple.replace("/", "_"))
            if layout is not Layout.NGCHW_GKYXC:
                names.add(triple.split("/")[0])
        aliases[layout] = names
    return aliases


class DType(enum.Enum):
    """Element types of (input, output-gradient) and of the weight-gradient, with the accumulator."""

    FP16 = "fp16"
    BF16 = "bf16"
    BF16_FP32W = "bf16_fp32w"  # bf16 tensors, fp32 weight-gradient
    FP32 = "fp32"
    INT8 = "int8"  # int8 tensors, int32 accumulation and int32 weight-gradient
    INT8_SAT = "int8_sat"  # int8 tensors, int32 accumulation, int8 weight-gradient (saturated to -128..127)
    # fp16 tensors multiplied as fp8: the input rounded to e4m3, the output-gradient to e5m2 (bf8) inside
    # the kernel; fp32 accumulation, fp16 weight-gradient. Accuracy is that of fp8 operands.
    FP16_COMP_BF8_FP8 = "fp16_comp_bf8_fp8"

    @property
    def tensor(self) -> "Scalar":
        return {
            "fp16": Scalar.F16,
            "bf16": Scalar.BF16,
            "bf16_fp32w": Scalar.BF16,
            "fp32": Scalar.F32,
            "int8": Scalar.I8,
            "int8_sat": Scalar.I8,
            "fp16_comp_bf8_fp8": Scalar.F16,
        }[self.value]

    @property
    def weight(self) -> "Scalar":
        return {
            "fp16": Scalar.F16,
            "bf16": Scalar.BF16,
            "bf16_fp32w": Scalar.F32,
            "fp32": Scalar.F32,
            "int8": Scalar.I32,
            "int8_sat": Scalar.I8,
            "fp16_comp_bf8_fp8": Scalar.F16,
        }[self.value]

    @property
    def accumulator(self) -> "Scalar":
        return Scalar.I32 if self.is_integer else Scalar.F32

    @property
    def is_integer(self) -> bool:
        """int8 tensors: exact int32 arithmetic, integer alpha and beta."""
        return self in (DType.INT8, DType.INT8_SAT)

    @classmethod
    def parse(cls, text: str) -> "DType":
        return _parse_enum(cls, text, "dtype")


class Scalar(enum.Enum):
    """A storage element type: its C++ spelling, numpy name and size."""

    F16 = ("half", "float16", 2)
    BF16 = ("bf16_t", "bfloat16", 2)
    F32 = ("float", "float32", 4)
    I8 = ("int8_t", "int8", 1)
    I32 = ("int32_t", "int32", 4)

    @property
    def cpp(self) -> str:
        return self.value[0]

    @property
    def numpy_name(self) -> str:
        return self.value[1]

    @property
    def nbytes(self) -> int:
        return self.value[2]

    @property
    def is_float(self) -> bool:
        return self in (Scalar.F16, Scalar.BF16, Scalar.F32)

    @property
    def rounding_floor(self) -> float:
        """Half the spacing of the type's subnormals: the rounding error a value near zero may carry
        however accurate its sum (0 for integers)."""
        return {Scalar.F16: 2.0**-25, Scalar.BF16: 2.0**-134, Scalar.F32: 2.0**-150}.get(self, 0.0)


def _parse_enum(cls: type[enum.Enum], text: str, what: str):
    key = text.strip().lower()
    for member in cls:
        if member.value == key:
            return member
    choices = ", ".join(m.value for m in cls)
    raise ProblemSyntaxError(f"unknown {what} {text!r}; choose one of: {choices}")


_LAYOUT_ALIASES = _layout_aliases()


# The ops whose problems are convolutions described by a ConvProblem.
_CONV_OPS = (Op.CONV_BWD_WEIGHT, Op.CONV_BWD_DATA)


# The ops whose kernels take an output epilogue (alpha, beta); the others take the defaults only.
_EPILOGUE_OPS = (Op.CONV_BWD_WEIGHT,)
# alpha and beta reach the kernels as fp32: a finite double beyond this becomes infinite there.
FLOAT32_MAX = 3.4028234663852886e38
# int8 problems scale in exact int32 arithmetic; alpha and beta travel as fp32, exact up to 2**24.
INT_EPILOGUE_MAX = 2**24


def conv_out_size(size: int, filt: int, stride: int, pad_left: int, pad_right: int, dilation: int) -> int:
    """A convolution's output size along one dim."""
    return (size + pad_left + pad_right - dilation * (filt - 1) - 1) // stride + 1


@dataclass(frozen=True)
class ConvProblem:
    """A grouped N-D convolution as seen by its backward passes.

    `input` and `filter` are spatial sizes outermost first (D, H, W); stride, pad and dilation have
    one entry per spatial dim. `pad` is the padding before the first element of each dim and `pad_right`
    the padding after the last (TensorFlow's "SAME" padding puts the odd one there); `pad_right` left as
    None means the same as `pad`, and is stored so.

    `alpha` and `beta` are the output epilogue (conv_bwd_weight only): the op writes
    alpha * computed + beta * D, where D is an extra input shaped like the written tensor (present only
    when beta != 0). The defaults (1, 0) are the plain op. They are stored as floats (-0.0 as 0.0);
    they must be finite and fit fp32, and for int8 problems (exact int32 arithmetic) be integers of
    magnitude at most 2**24.
    """

    N: int
    G: int
    C: int
    K: int
    input: tuple[int, ...]
    filter: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    dilation: tuple[int, ...]
    layout: Layout = Layout.NHWGC
    dtype: DType = DType.FP16
    op: Op = field(default=Op.CONV_BWD_WEIGHT)
    pad_right: tuple[int, ...] | None = None
    alpha: float = 1.0
    beta: float = 0.0

    def __post_init__(self) -> None:
        if self.pad_right is None:
            object.__setattr__(self, "pad_right", self.pad)
        # Type checks come first so a wrong type is an InvalidProblem, not a TypeError from len() or
        # an unhashable (list-holding) frozen problem; the op decides which solver will read it.
        if not isinstance(self.op, Op) or self.op not in _CONV_OPS:
            choices = ", ".join(o.value for o in _CONV_OPS)
            raise InvalidProblem("op", f"a ConvProblem is for one of {choices}, got {self.op!r}")
        for name in ("N", "G", "C", "K"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidProblem(name, f"must be a positive integer, got {value!r}")
        for name in ("input", "filter", "stride", "pad", "pad_right", "dilation"):
            if not isinstance(getattr(self, name), tuple):
                raise InvalidProblem(name, f"must be a tuple of integers, got {getattr(self, name)!r}")
        ndim = len(self.input)
        if ndim not in (1, 2, 3):
            raise InvalidProblem("input", f"needs 1, 2 or 3 spatial sizes, got {len(self.input)}")
        for name in ("filter", "stride", "pad", "pad_right", "dilation"):
            seq = getattr(self, name)
            if len(seq) != ndim:
                raise InvalidProblem(name, f"needs {ndim} entries to match input, got {len(seq)}")
        for name, minimum in (("input", 1), ("filter", 1), ("stride", 1), ("dilation", 1), ("pad", 0), ("pad_right", 0)):
            for value in getattr(self, name):
                if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                    raise InvalidProblem(name, f"entries must be integers >= {minimum}, got {getattr(self, name)}")
        for d in range(ndim):
            span = self.dilation[d] * (self.filter[d] - 1) + 1
            padded = self.input[d] + self.pad[d] + self.pad_right[d]
            if span > padded:
                raise InvalidProblem("filter", f"dilated filter extent {span} exceeds padded input {padded} in dim {d}")
        if not isinstance(self.layout, Layout):
            raise InvalidProblem("layout", f"must be a Layout, got {self.layout!r}")
        if not isinstance(self.dtype, DType):
            raise InvalidProblem("dtype", f"must be a DType, got {self.dtype!r}")
        self._check_epilogue()

    def _check_epilogue(self) -> None:
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise InvalidProblem(name, f"must be a real number, got {value!r}")
            try:
                value = float(value)
            except OverflowError:  # an int past double range
                value = math.inf
            if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
                raise InvalidProblem(name, f"must be finite and within fp32 range, got {value!r}")
            object.__setattr__(self, name, value + 0.0)  # a float; -0.0 becomes 0.0 (one key per value)
        if self.has_epilogue and self.op not in _EPILOGUE_OPS:
            name = "alpha" if self.alpha != 1.0 else "beta"
            raise InvalidProblem(name, f"{self.op.value} takes no alpha/beta epilogue (only "
                                 f"{', '.join(o.value for o in _EPILOGUE_OPS)} does)")
        if self.dtype.is_integer:
            for name in ("alpha", "beta"):
                value = getattr(self, name)
                if not value.is_integer() or abs(value) > INT_EPILOGUE_MAX:
                    raise InvalidProblem(name, f"int8 problems scale in exact integer arithmetic: needs an integer "
                                         f"of magnitude at most {INT_EPILOGUE_MAX}, got {value!r}")

    @property
    def has_epilogue(self) -> bool:
        """Whether the output is not the plain result (alpha != 1 or beta != 0)."""
        return self.alpha != 1.0 or self.beta != 0.0

    @property
    def has_d(self) -> bool:
        """Whether the op reads the epilogue's D tensor (beta != 0)."""
        return self.beta != 0.0

    @property
    def ndim(self) -> int:
        return len(self.input)

    @property
    def pad_left(self) -> tuple[int, ...]:
        return self.pad

    @property
    def symmetric(self) -> bool:
        """Whether every dim is padded the same on both sides (what PyTorch's conv takes)."""
        return self.pad == self.pad_right

    @property
    def output(self) -> tuple[int, ...]:
        return tuple(
            conv_out_size(self.input[d], self.filter[d], self.stride[d], self.pad[d], self.pad_right[d], self.dilation[d])
            for d in range(self.ndim)
        )

    @property
    def filter_volume(self) -> int:
        return math.prod(self.filter)

    @property
    def input_shape_logical(self) -> tuple[int, ...]:
        """(N, G, C, *spatial): the order the references compute in."""
        return (self.N, self.G, self.C, *self.input)

    @property
    def output_shape_logical(self) -> tuple[int, ...]:
        return (self.N, self.G, self.K, *self.output)

    @property
    def weight_shape_logical(self) -> tuple[int, ...]:
        return (self.G, self.K, self.C, *self.filter)

    def element_count_max(self) -> int:
        return max(
            math.prod(self.input_shape_logical),
            math.prod(self.output_shape_logical),
            math.prod(self.weight_shape_logical),
        )

    @property
    def macs(self) -> int:
        return self.N * self.G * self.K * self.C * math.prod(self.output) * self.filter_volume

    @property
    def min_bytes(self) -> int:
        """Each input read once (the epilogue's D included), the weight-gradient written once."""
        t = self.dtype.tensor.nbytes
        weight = math.prod(self.weight_shape_logical) * self.dtype.weight.nbytes
        return (
            math.prod(self.input_shape_logical) * t
            + math.prod(self.output_shape_logical) * t
            + weight * (2 if self.has_d else 1)
        )

    @property
    def key(self) -> str:
        """Canonical, order-stable text key (the tuning DB's problem key)."""
        def dims(v: tuple[int, ...]) -> str:
            return "x".join(str(x) for x in v)

        pads = (f"pad={dims(self.pad)}" if self.symmetric
                else f"pad_left={dims(self.pad)},pad_right={dims(self.pad_right)}")
        # The epilogue is spelled only when it is not the default, so plain problems keep their keys.
        epilogue = (f",alpha={spell_real(self.alpha)}" if self.alpha != 1.0 else "") + (
            f",beta={spell_real(self.beta)}" if self.beta != 0.0 else "")
        return (
            f"{self.op.value}:{self.layout.value}:{self.dtype.value}:{self.ndim}d:"
            f"N={self.N},G={self.G},C={self.C},K={self.K},input={dims(self.input)},filter={dims(self.filter)},"
            f"stride={dims(self.stride)},{pads},dilation={dims(self.dilation)}{epilogue}"
        )

    def spec(self) -> str:
        """The --problem string that parses back to this problem's sizes."""
        return self.key.split(":", 4)[4]


_CONV_FIELDS = ("N", "G", "C", "K", "input", "filter", "stride", "pad", "pad_left", "pad_right", "dilation",
                "alpha", "beta")


def parse_conv_problem(spec: str, layout: Layout, dtype: DType, op: Op = Op.CONV_BWD_WEIGHT) -> ConvProblem:
    """Parse 'N=32,G=32,C=4,K=4,input=56x56,filter=3x3,stride=1,pad=1,dilation=1'.

    stride/pad/dilation may be one number for all dims; they default to 1/0/1. `pad` pads both sides;
    `pad_left=`/`pad_right=` (one number or one per dim, each defaulting to 0) pad each side on its own
    and exclude `pad`. `alpha=`/`beta=` (decimal numbers, default 1 / 0) set the output epilogue.
    """
    values = parse_fields(spec, _CONV_FIELDS, required=("N", "G", "C", "K", "input", "filter"))
    scalars = {name: parse_int(values[name], name) for name in ("N", "G", "C", "K")}
    spatial_in = parse_dims(values["input"], "input")
    ndim = len(spatial_in)

    def per_dim(name: str, default: int) -> tuple[int, ...]:
        if name not in values:
            return (default,) * ndim
        dims = parse_dims(values[name], name)
        return dims * ndim if len(dims) == 1 and ndim > 1 else dims

    if "pad" in values and ("pad_left" in values or "pad_right" in values):
        raise ProblemSyntaxError("give pad= (both sides) or pad_left=/pad_right=, not both")
    sided = "pad_left" in values or "pad_right" in values
    left = per_dim("pad_left", 0) if sided else per_dim("pad", 0)
    return ConvProblem(
        **scalars,
        input=spatial_in,
        filter=per_dim("filter", 1),
        stride=per_dim("stride", 1),
        pad=left,
        pad_right=per_dim("pad_right", 0) if sided else left,
        dilation=per_dim("dilation", 1),
        layout=layout,
        dtype=dtype,
        op=op,
        alpha=parse_real(values["alpha"], "alpha") if "alpha" in values else 1.0,
        beta=parse_real(values["beta"], "beta") if "beta" in values else 0.0,
    )


def parse_fields(spec: str, fields: Sequence[str], required: Sequence[str]) -> dict[str, str]:
    """Split 'name=value,...' into {canonical field name: value text}; any op's --problem string.

    Field names match case-insensitively; a malformed, unknown or repeated token is named in the error.
    """
    canonical = {f.lower(): f for f in fields}
    values: dict[str, str] = {}
    for token in (t.strip() for t in spec.split(",")):
        if not token:
            continue
        if "=" not in token:
            raise ProblemSyntaxError(f"bad token {token!r} in problem: expected name=value")
        name, _, value = (s.strip() for s in token.partition("="))
        canon = canonical.get(name.lower())
        if canon is None:
            raise ProblemSyntaxError(f"bad token {token!r} in problem: unknown field {name!r}; fields: {', '.join(fields)}")
        if canon in values:
            raise ProblemSyntaxError(f"bad token {token!r} in problem: {canon} given twice")
        values[canon] = value
    for name in required:
        if name not in values:
            raise ProblemSyntaxError(f"problem is missing {name}= (fields: {', '.join(fields)})")
    return values


# Plain ASCII decimal integers: int() alone would also take '1_000', ' ５ ' (full-width) or Arabic-Indic
# digits, which no problem string means.
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def _decimal(text: str) -> int | None:
    """The integer `text` spells in ASCII decimal, or None (also past Python's digit limit)."""
    text = text.strip()
    if not _DECIMAL.fullmatch(text):
        return None
    try:
        return int(text)
    except ValueError:  # more digits than int() converts
        return None


def parse_int(text: str, name: str) -> int:
    value = _decimal(text)
    if value is None:
        raise ProblemSyntaxError(f"bad token {name}={text!r} in problem: {text!r} is not an integer")
    return value


# Plain ASCII decimal numbers (an optional fraction and exponent): float() alone would also take 'nan',
# 'inf', '1_0' or full-width digits, which no problem string means.
_REAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_real(text: str, name: str) -> float:
    """A decimal number; non-finite values (1e999) are left for the problem to refuse by name."""
    text = text.strip()
    if not _REAL.fullmatch(text):
        raise ProblemSyntaxError(f"bad token {name}={text!r} in problem: {text!r} is not a decimal number")
    return float(text)


def spell_real(value: float) -> str:
    """The shortest text that parse_real reads back as exactly `value`: '2', '0.5', '1e-05'."""
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def parse_dims(text: str, name: str) -> tuple[int, ...]:
    values = tuple(_decimal(p) for p in text.lower().split("x"))
    if any(v is None for v in values):
        raise ProblemSyntaxError(
            f"bad token {name}={text!r} in problem: expected integers separated by 'x', e.g. 56x56"
        )
    return values  # type: ignore[return-value]


def supported_cells_text(cells: Iterable[tuple[Layout, DType, int]]) -> str:
    """A compact listing of supported (layout, dtype, ndim) cells for error messages."""
    grouped: dict[tuple[Layout, DType], list[int]] = {}
    for layout, dtype, ndim in sorted(cells, key=lambda c: (c[0].value, c[1].value, c[2])):
        grouped.setdefault((layout, dtype), []).append(ndim)
    return "; ".join(f"{l.value}/{d.value}: {','.join(f'{n}D' for n in nd)}" for (l, d), nd in grouped.items())
