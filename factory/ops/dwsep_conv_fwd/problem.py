"""The fused depthwise-separable forward problem, its --problem parser and its tensors' layouts.

Out = act_pw(PW(act_dw(DW(In) + bias_dw)) + bias_pw): a depthwise convolution (one filter per channel,
groups = C) followed by a 1x1 convolution from C to K channels; the form networks use once batch-norm
is folded into the weights and biases. C is the channel count of the input (and of the depthwise
output), K that of the output; unlike the grouped conv ops, there is no G.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from ...problem import (
    DType,
    InvalidProblem,
    Layout,
    Op,
    ProblemSyntaxError,
    parse_dims,
    parse_fields,
    parse_int,
)

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}
_FILTER = {1: "X", 2: "YX", 3: "ZYX"}
_FIELDS = ("N", "C", "K", "input", "filter", "stride", "pad", "dilation", "bias_dw", "bias_pw", "act_dw", "act_pw")


class Activation(enum.Enum):
    """What follows a stage (after its bias): nothing, max(x, 0), or min(max(x, 0), 6)."""

    NONE = "none"
    RELU = "relu"
    RELU6 = "relu6"

    @classmethod
    def parse(cls, text: str, name: str) -> "Activation":
        key = text.strip().lower()
        for member in cls:
            if member.value == key:
                return member
        choices = ", ".join(m.value for m in cls)
        raise ProblemSyntaxError(f"bad token {name}={text!r} in problem: choose one of {choices}")


@dataclass(frozen=True)
class DwsepProblem:
    """Depthwise k x k (stride, symmetric pad, dilation) then pointwise 1x1 forward, 1-3 spatial dims.

    Layouts: NHWGC means channels-last activations (N, *S, C) / (N, *S, K); NGCHW means (N, C, *S) /
    (N, K, *S). The weights are PyTorch's in both: the depthwise (C, *filter), the pointwise (K, C).
    """

    N: int
    C: int
    K: int
    input: tuple[int, ...]
    filter: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    dilation: tuple[int, ...]
    layout: Layout = Layout.NHWGC
    dtype: DType = DType.FP16
    bias_dw: bool = False
    bias_pw: bool = False
    act_dw: Activation = Activation.NONE
    act_pw: Activation = Activation.NONE
    op: Op = field(default=Op.DWSEP_CONV_FWD)

    def __post_init__(self) -> None:
        if self.op is not Op.DWSEP_CONV_FWD:
            raise InvalidProblem("op", f"a DwsepProblem is for {Op.DWSEP_CONV_FWD.value}, got {self.op!r}")
        for name in ("N", "C", "K"):
            if not _positive_int(getattr(self, name)):
                raise InvalidProblem(name, f"must be a positive integer, got {getattr(self, name)!r}")
        for name in ("input", "filter", "stride", "pad", "dilation"):
            if not isinstance(getattr(self, name), tuple):
                raise InvalidProblem(name, f"must be a tuple of integers, got {getattr(self, name)!r}")
        ndim = len(self.input)
        if ndim not in (1, 2, 3):
            raise InvalidProblem("input", f"needs 1, 2 or 3 spatial sizes, got {ndim}")
        for name, minimum in (("input", 1), ("filter", 1), ("stride", 1), ("pad", 0), ("dilation", 1)):
            values = getattr(self, name)
            if len(values) != ndim:
                raise InvalidProblem(name, f"needs {ndim} entries to match input, got {len(values)}")
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in values):
                raise InvalidProblem(name, f"entries must be integers >= {minimum}, got {values}")
        for d in range(ndim):
            span = self.dilation[d] * (self.filter[d] - 1) + 1
            if span > self.input[d] + 2 * self.pad[d]:
                raise InvalidProblem("filter", f"dilated filter extent {span} exceeds padded input "
                                     f"{self.input[d] + 2 * self.pad[d]} in dim {d}")
        if not isinstance(self.layout, Layout):
            raise InvalidProblem("layout", f"must be a Layout, got {self.layout!r}")
        if not isinstance(self.dtype, DType):
            raise InvalidProblem("dtype", f"must be a DType, got {self.dtype!r}")
        for name in ("bias_dw", "bias_pw"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidProblem(name, f"must be True or False, got {getattr(self, name)!r}")
        for name in ("act_dw", "act_pw"):
            if not isinstance(getattr(self, name), Activation):
                raise InvalidProblem(name, f"must be an Activation, got {getattr(self, name)!r}")

    # --- sizes -----------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.input)

    @property
    def output(self) -> tuple[int, ...]:
        return tuple((self.input[d] + 2 * self.pad[d] - self.dilation[d] * (self.filter[d] - 1) - 1) // self.stride[d] + 1
                     for d in range(self.ndim))

    @property
    def filter_volume(self) -> int:
        return math.prod(self.filter)

    @property
    def has_rows(self) -> bool:
        """Whether the output has more than one row (not 1-D, nor an output one row high)."""
        return math.prod(self.output[:-1]) > 1

    @property
    def positions(self) -> int:
        """Output positions, N times the output's spatial volume: the pointwise GEMM's M."""
        return self.N * math.prod(self.output)

    @property
    def channels_last(self) -> bool:
        return self.layout is Layout.NHWGC

    @property
    def macs(self) -> int:
        """The pointwise GEMM's multiply-adds (what matrix instructions do)."""
        return self.positions * self.C * self.K

    @property
    def depthwise_macs(self) -> int:
        return self.positions * self.C * self.filter_volume

    # --- tensors ---------------------------------------------------------------------------------
    def activation(self, channels: str) -> tuple[tuple[int, ...], str]:
        """Physical shape and dims of the input ("C") or the output ("K")."""
        spatial = _SPATIAL[self.ndim]
        size = self.C if channels == "C" else self.K
        sizes = self.input if channels == "C" else self.output
        if self.channels_last:
            return (self.N, *sizes, size), "N" + spatial + channels
        return (self.N, size, *sizes), "N" + channels + spatial

    def depthwise_weight(self) -> tuple[tuple[int, ...], str]:
        return (self.C, *self.filter), "C" + _FILTER[self.ndim]

    # --- keys ------------------------------------------------------------------------------------
    @property
    def key(self) -> str:
        """Canonical, order-stable text key (the tuning DB's problem key)."""
        return f"{self.op.value}:{self.layout.value}:{self.dtype.value}:{self.ndim}d:{self.spec()}"

    def spec(self) -> str:
        """The --problem string that parses back to this problem; biases and activations only when set."""
        def dims(v: tuple[int, ...]) -> str:
            return "x".join(str(x) for x in v)

        text = (f"N={self.N},C={self.C},K={self.K},input={dims(self.input)},filter={dims(self.filter)},"
                f"stride={dims(self.stride)},pad={dims(self.pad)},dilation={dims(self.dilation)}")
        for name in ("bias_dw", "bias_pw"):
            if getattr(self, name):
                text += f",{name}=1"
        for name in ("act_dw", "act_pw"):
            if getattr(self, name) is not Activation.NONE:
                text += f",{name}={getattr(self, name).value}"
        return text


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def parse_dwsep_problem(spec: str, layout: Layout, dtype: DType) -> DwsepProblem:
    """Parse 'N=64,C=64,K=128,input=112x112,filter=3x3,stride=1,pad=1,dilation=1'.

    stride/pad/dilation may be one number for all dims (defaults 1/0/1); `bias_dw=1` / `bias_pw=1` add a
    per-channel bias after a stage, `act_dw=` / `act_pw=` (none, relu, relu6) an activation after it.
    """
    values = parse_fields(spec, _FIELDS, required=("N", "C", "K", "input", "filter"))
    spatial = parse_dims(values["input"], "input")

    def per_dim(name: str, default: int) -> tuple[int, ...]:
        if name not in values:
            return (default,) * len(spatial)
        dims = parse_dims(values[name], name)
        return dims * len(spatial) if len(dims) == 1 and len(spatial) > 1 else dims

    def flag(name: str) -> bool:
        value = parse_int(values.get(name, "0"), name)
        if value not in (0, 1):
            raise InvalidProblem(name, f"must be 0 or 1, got {value}")
        return bool(value)

    return DwsepProblem(
        N=parse_int(values["N"], "N"),
        C=parse_int(values["C"], "C"),
        K=parse_int(values["K"], "K"),
        input=spatial,
        filter=per_dim("filter", 1),
        stride=per_dim("stride", 1),
        pad=per_dim("pad", 0),
        dilation=per_dim("dilation", 1),
        layout=layout,
        dtype=dtype,
        bias_dw=flag("bias_dw"),
        bias_pw=flag("bias_pw"),
        act_dw=Activation.parse(values.get("act_dw", "none"), "act_dw"),
        act_pw=Activation.parse(values.get("act_pw", "none"), "act_pw"),
    )
