"""Drop-in modules: PyTorch's Conv1d/2d/3d and GroupNorm whose backward runs our ops, and a fused
DepthwiseSeparableConv2d.

Conv and GroupNorm are subclasses of PyTorch's with no state of their own: the constructor, parameters,
`state_dict` and `forward` results are PyTorch's, and `patch` can turn an existing module into one in
place. Their forward is PyTorch's (cuDNN is fast there); their backward is `kfactory::conv_bwd_data` +
`conv_bwd_weight`, or `kfactory::groupnorm_bwd`, which run our tuned kernels on CUDA tensors and
PyTorch's own elsewhere (ops.py). A module whose configuration our ops do not take (a padding mode
other than zeros, string padding) runs PyTorch's autograd, and `unsupported_reason` says why.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, Optional

import torch
from torch import Tensor, nn

from . import ops  # registers torch.ops.kfactory

F = nn.functional


def _memory_format_of(t: Tensor) -> torch.memory_format:
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous():
        return torch.channels_last
    if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d) and not t.is_contiguous():
        return torch.channels_last_3d
    return torch.contiguous_format


# Devices whose autocast runs group_norm in fp32 (PyTorch's autocast op lists; CPU's leaves it alone).
_GROUPNORM_FP32_AUTOCAST = frozenset({"cuda", "xpu"})


_PLANNED_AUTOCAST: contextvars.ContextVar[Optional[torch.dtype]] = contextvars.ContextVar(
    "kfactory_planned_autocast", default=None)


@contextlib.contextmanager
def planned_autocast(dtype: Optional[torch.dtype]) -> Iterator[None]:
    """On the meta device, where a GPU's step is planned without one (factory.bench.training), cast as
    CUDA autocast to `dtype` would: convolutions to it, GroupNorm to fp32 (None: no autocast)."""
    token = _PLANNED_AUTOCAST.set(dtype)
    try:
        yield
    finally:
        _PLANNED_AUTOCAST.reset(token)


def _autocast_dtype(t: Tensor, lower: bool) -> Optional[torch.dtype]:
    """The dtype autocast would run an op on `t` in (`lower`: a convolution's lower precision; else
    GroupNorm's float32 where that device's autocast asks for it), or None when it leaves it alone.

    Our autograd Functions call aten ops autocast does not rewrite (and would save the uncast
    tensors), so the modules cast as autocast would before calling them, with autocast off inside."""
    kind = t.device.type
    if kind == "meta":  # a planned GPU step: CUDA autocast's rules, as planned_autocast says
        planned = _PLANNED_AUTOCAST.get()
        return None if planned is None else (planned if lower else torch.float32)
    if not torch.is_autocast_enabled(kind):
        return None
    if lower:
        return torch.get_autocast_dtype(kind)
    return torch.float32 if kind in _GROUPNORM_FP32_AUTOCAST else None


def _autocast_apply(function: Any, dtype: Optional[torch.dtype], device_type: str, *args: Any) -> Tensor:
    """function.apply(*args), its floating tensors first cast to `dtype` and autocast off (a
    differentiable cast: gradients come back in each parameter's own dtype), as autocast runs an op."""
    if dtype is None:
        return function.apply(*args)
    cast = [a.to(dtype) if isinstance(a, Tensor) and a.is_floating_point() else a for a in args]
    off = contextlib.nullcontext() if device_type == "meta" else torch.autocast(device_type, enabled=False)
    with off:
        return function.apply(*cast)


def _like(t: Tensor, model: Tensor) -> Tensor:
    """`t` in `model`'s memory format: a gradient may arrive in another one than its activation."""
    return t.contiguous(memory_format=_memory_format_of(model))


class _ConvFunction(torch.autograd.Function):
    """PyTorch's convolution forward; dIn and dW from kfactory::conv_bwd_data / conv_bwd_weight."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Optional[Tensor], stride: list[int], padding: list[int],
                dilation: list[int], groups: int, ours: frozenset[str]) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.conv = (stride, padding, dilation, groups)
        ctx.has_bias = bias is not None
        ctx.ours = ours
        out = torch.ops.aten.convolution(x, weight, bias, stride, padding, dilation, False, [0] * (x.dim() - 2), groups)
        if x.device.type == "meta":
            # A planned GPU step (planned_problems): the meta device's convolution gives contiguous outputs
            # whatever its input, where CUDA's keeps a channels-last input's format; without this every layer
            # past the first of a channels-last network would be planned in NGCHW.
            out = out.contiguous(memory_format=_memory_format_of(x))
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Optional[Tensor], ...]:
        x, weight = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.conv
        grad = _like(grad, x)
        data, weights = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx = dw = db = None
        if data and CONV_BWD_DATA in ctx.ours:
            w = _like(weight, x)
            if ops.conv_served(CONV_BWD_DATA, grad, w, x.shape, stride, padding, dilation, groups):
                dx = ops.call(CONV_BWD_DATA, grad, w, list(x.shape), stride, padding, dilation, groups)
        if weights and CONV_BWD_WEIGHT in ctx.ours:
            if ops.conv_served(CONV_BWD_WEIGHT, grad, x, weight.shape, stride, padding, dilation, groups):
                dw = ops.call(CONV_BWD_WEIGHT, grad, x, list(weight.shape), stride, padding, dilation, groups)
        if (data and dx is None) or (weights and dw is None):  # the op(s) not asked for: PyTorch's
            theirs = torch.ops.aten.convolution_backward(grad, x, weight, None, stride, padding, dilation, False,
                                                         [0] * (x.dim() - 2), groups, [data and dx is None,
                                                                                       weights and dw is None, False])
            dx = theirs[0] if dx is None else dx
            dw = theirs[1] if dw is None else dw
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = grad.sum(dim=[0, *range(2, grad.dim())])
        return dx, dw, db, None, None, None, None, None


CONV_BWD_DATA, CONV_BWD_WEIGHT = "conv_bwd_data", "conv_bwd_weight"
CONV_OPS = frozenset({CONV_BWD_DATA, CONV_BWD_WEIGHT})


class _ConvMixin:
    """The backward of nn.ConvNd through our ops; forward results are PyTorch's. `kfactory_ops` names
    the backward ops ours compute (default both; `patch(ops=...)` may leave one to PyTorch)."""

    kfactory_ops: frozenset[str] = CONV_OPS

    @property
    def unsupported_reason(self) -> str | None:
        """Why this configuration runs PyTorch's autograd instead of our ops; None when ours run."""
        if self.padding_mode != "zeros":  # type: ignore[attr-defined]
            return f"padding_mode {self.padding_mode!r} (ours: zeros)"  # type: ignore[attr-defined]
        if isinstance(self.padding, str):  # type: ignore[attr-defined]
            return f"padding {self.padding!r} (ours: explicit sizes)"  # type: ignore[attr-defined]
        return None

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
        if self.unsupported_reason is not None:
            return super()._conv_forward(input, weight, bias)  # type: ignore[misc]
        return _autocast_apply(_ConvFunction, _autocast_dtype(input, lower=True), input.device.type, input, weight, bias,
                               list(self.stride), list(self.padding), list(self.dilation),  # type: ignore[attr-defined]
                               self.groups, self.kfactory_ops)  # type: ignore[attr-defined]


class Conv1d(_ConvMixin, nn.Conv1d):
    """nn.Conv1d with its backward on our kernels."""


class Conv2d(_ConvMixin, nn.Conv2d):
    """nn.Conv2d with its backward on our kernels."""


class Conv3d(_ConvMixin, nn.Conv3d):
    """nn.Conv3d with its backward on our kernels."""


class _GroupNormFunction(torch.autograd.Function):
    """PyTorch's GroupNorm forward (it returns the mean and rstd the backward needs);
    (dx, dgamma, dbeta) from kfactory::groupnorm_bwd."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, groups: int, weight: Optional[Tensor], bias: Optional[Tensor], eps: float) -> Tensor:
        n, c = x.shape[0], x.shape[1]
        if x.device.type != "cpu":  # PyTorch's GPU forward takes NCHW only; F.group_norm makes the same copy
            x = x.contiguous()
        out, mean, rstd = torch.ops.aten.native_group_norm(x, weight, bias, n, c, x[0, 0].numel(), groups, eps)
        ctx.save_for_backward(x, mean, rstd, weight)
        ctx.groups = groups
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Optional[Tensor], ...]:
        x, mean, rstd, weight = ctx.saved_tensors
        dx, dgamma, dbeta = ops.call("groupnorm_bwd", _like(grad, x), x, mean, rstd, weight, ctx.groups)
        affine = weight is not None
        return (dx if ctx.needs_input_grad[0] else None, None, dgamma if affine else None,
                dbeta if affine else None, None)


class GroupNorm(nn.GroupNorm):
    """nn.GroupNorm with its backward on our kernels."""

    unsupported_reason: str | None = None

    def forward(self, input: Tensor) -> Tensor:
        return _autocast_apply(_GroupNormFunction, _autocast_dtype(input, lower=False), input.device.type, input,
                               self.num_groups, self.weight, self.bias, self.eps)


class _DwsepFunction(torch.autograd.Function):
    """The fused forward (kfactory::dwsep_conv_fwd); the backward recomputes the depthwise stage with
    PyTorch's ops and differentiates the two convolutions through PyTorch's autograd."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, w_dw: Tensor, w_pw: Tensor, b_dw: Optional[Tensor], b_pw: Optional[Tensor],
                stride: list[int], padding: list[int], dilation: list[int], act_dw: str, act_pw: str) -> Tensor:
        ctx.save_for_backward(x, w_dw, w_pw, b_dw, b_pw)
        ctx.conf = (stride, padding, dilation, act_dw, act_pw)
        return ops.call("dwsep_conv_fwd", x, w_dw, w_pw, b_dw, b_pw, stride, padding, dilation, act_dw, act_pw)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Optional[Tensor], ...]:
        saved = ctx.saved_tensors
        stride, padding, dilation, act_dw, act_pw = ctx.conf
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(need) if t is not None else None
                      for t, need in zip(saved, ctx.needs_input_grad)]
            out = two_convolutions(*leaves, stride, padding, dilation, act_dw, act_pw)
            wanted = [t for t in leaves if t is not None and t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, grad))
        return (*(next(grads) if t is not None and t.requires_grad else None for t in leaves), None, None, None, None, None)


_ACTIVATIONS = {"none": lambda t: t, "relu": torch.relu, "relu6": lambda t: torch.clamp(t, 0.0, 6.0)}


def two_convolutions(x: Tensor, w_dw: Tensor, w_pw: Tensor, b_dw: Optional[Tensor], b_pw: Optional[Tensor],
                     stride: list[int], padding: list[int], dilation: list[int], act_dw: str, act_pw: str) -> Tensor:
    """What the fused op computes, as PyTorch's two convolutions."""
    mid = _ACTIVATIONS[act_dw](F.conv2d(x, w_dw, b_dw, stride, padding, dilation, groups=x.shape[1]))
    return _ACTIVATIONS[act_pw](F.conv2d(mid, w_pw, b_pw))


class DepthwiseSeparableConv2d(nn.Module):
    """A depthwise k x k convolution (+ bias, activation) then a pointwise 1 x 1 one (+ bias, activation),
    forward in one kernel whose intermediate never leaves the chip.

    Parameters and state_dict are those of two nn.Conv2d: `depthwise` (in_channels -> in_channels,
    groups = in_channels) and `pointwise` (in_channels -> out_channels, 1 x 1). Activations: "none",
    "relu", "relu6".
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] = 1,
                 padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, bias: bool = True,
                 activation_dw: str = "none", activation_pw: str = "none", device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        for name, act in (("activation_dw", activation_dw), ("activation_pw", activation_pw)):
            if act not in _ACTIVATIONS:
                raise ValueError(f"{name} {act!r} is not one of {', '.join(_ACTIVATIONS)}")
        kw = {"device": device, "dtype": dtype}
        self.depthwise = nn.Conv2d(in_channels, in_channels, kernel_size, stride, padding, dilation,
                                   groups=in_channels, bias=bias, **kw)
        self.pointwise = nn.Conv2d(in_channels, out_channels, 1, bias=bias, **kw)
        self.activation_dw, self.activation_pw = activation_dw, activation_pw

    def forward(self, x: Tensor) -> Tensor:
        d = self.depthwise
        return _autocast_apply(_DwsepFunction, _autocast_dtype(x, lower=True), x.device.type, x, d.weight,
                               self.pointwise.weight, d.bias, self.pointwise.bias, list(d.stride), list(d.padding),
                               list(d.dilation), self.activation_dw, self.activation_pw)

    def extra_repr(self) -> str:
        return f"activation_dw={self.activation_dw!r}, activation_pw={self.activation_pw!r}"
