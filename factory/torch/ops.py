"""The product's ops as PyTorch custom ops: kfactory::conv_bwd_weight, conv_bwd_data, dwsep_conv_fwd and
groupnorm_bwd (`torch.ops.kfactory.<name>`, or the functions of this module).

Each has a fake (meta) implementation, so it traces under torch.compile without a graph break, and a
real one. On CUDA tensors whose problem one of our kernels computes, `select(mode=AUTO)` chooses the
kernel once per problem (the tuned winner on this device, else a shipped one, else the nearest tuned
problem's, else the heuristic's pick) and it runs on the current stream, with no host synchronisation
and its scratch memory from PyTorch's allocator: after one warm-up call per problem a step can be
captured in a CUDA graph. Anything else (CPU tensors, a dtype or
layout we do not compute, a problem no kernel applies to, no GPU runtime) runs PyTorch's own kernel,
and a KernelFactoryFallback warning says so once per op and reason.

Layouts follow the tensors' memory formats: channels-last activations (and weights) are our NHWGC,
contiguous ones NGCHW; every tensor of a call must agree. Outputs come in the same memory format, on
both paths, so the fake and the real implementations always return the same strides.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import torch
from torch import Tensor

from ..ops.dwsep_conv_fwd.problem import Activation, DwsepProblem
from ..ops.groupnorm_bwd.problem import GroupNormProblem
from ..problem import ConvProblem, DType, KernelFactoryError, Layout, Op

try:  # the dispatch mode in force (FakeTensorMode, a proxy tracer...), if any
    from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_dispatch_mode
except ImportError:  # pragma: no cover - older PyTorch: always go through the dispatcher
    def _current_dispatch_mode() -> Any:
        return True


class KernelFactoryFallback(UserWarning):
    """A kfactory op ran PyTorch's own kernel instead of ours (said once per op and reason)."""


DTYPES = {torch.float16: DType.FP16, torch.bfloat16: DType.BF16, torch.float32: DType.FP32}

_noted: set[tuple[str, str]] = set()
_choices: dict[Any, Any] = {}  # problem -> its Kernel, or why none serves it (str)
# A convolution call's arguments (shapes, strides, dtypes, device, geometry) -> its Kernel or None: the
# step's hot path is then one dict lookup per call. Cleared with _choices; bypassed while recording.
_conv_calls: dict[tuple[Any, ...], Any] = {}
_lock = threading.Lock()
_recorders: list[list[Any]] = []  # one per open recording()


def clear_kernel_choices() -> None:
    """Forget the kernel chosen per problem (after tuning in this process, say) and the notes given."""
    with _lock:
        _choices.clear()
        _noted.clear()
        _conv_calls.clear()


def _note_once(op: str, reason: str) -> None:
    with _lock:
        if (op, reason) in _noted:
            return
        _noted.add((op, reason))
    warnings.warn(f"kfactory::{op} ran PyTorch's own kernel: {reason}", KernelFactoryFallback, stacklevel=4)


@contextlib.contextmanager
def recording() -> Iterator[list[Any]]:
    """Collect, in the order first met, every distinct problem our ops describe while the block runs.

    Meanwhile PyTorch's kernels compute them, with no note: a recorded step is looked at, not timed,
    and needs no compile (CPU tensors record too, so a step can be planned on any machine). It is
    process-wide, not per thread: autograd runs a CUDA backward on threads of its own."""
    seen: list[Any] = []
    with _lock:
        _recorders.append(seen)
    try:
        yield seen
    finally:
        with _lock:  # by identity: two recordings' lists may be equal
            del _recorders[next(i for i, r in enumerate(_recorders) if r is seen)]


def _record(problem: Any) -> bool:
    """Add `problem` to every open recording; whether there was one."""
    with _lock:
        for seen in _recorders:
            if problem not in seen:
                seen.append(problem)
        return bool(_recorders)


@dataclass(frozen=True)
class PyTorchChosen:
    """A problem PyTorch's kernel runs by choice (it was timed faster here): no fallback note."""

    reason: str


def remember_choices(chosen: Mapping[Any, Any]) -> None:
    """Set the kernel (or the reason PyTorch's runs: a str, noted once, or a PyTorchChosen) each problem's
    calls use, as their first call would have chosen it (factory.torch.prepare chooses them ahead)."""
    with _lock:
        _choices.update(chosen)
        _conv_calls.clear()


def _record_planned(tensors: Sequence[Tensor], layout: Layout | None, make_problem: Callable[[], Any]) -> None:
    """What a fake implementation adds to an open recording: the problem its arguments describe, so a
    step run on the meta device (a GPU's step planned without one) records what the GPU would meet."""
    if not _recorders or layout is None or tensors[0].dtype not in DTYPES:
        return
    if any(t.dtype != tensors[0].dtype for t in tensors):
        return
    try:
        _record(make_problem())
    except KernelFactoryError:
        pass


def _kernel(op: str, tensors: Sequence[Tensor], layout: Layout | None, make_problem: Callable[[], Any]) -> Any | None:
    """Our kernel for the problem `make_problem()` describes, or None (noted once) when PyTorch runs it."""
    if layout is None:
        _note_once(op, "its tensors are neither all channels-last nor all contiguous")
        return None
    if tensors[0].dtype not in DTYPES or any(t.dtype != tensors[0].dtype for t in tensors):
        _note_once(op, f"dtype {tensors[0].dtype} (ours: {', '.join(str(d) for d in DTYPES)}, all tensors alike)")
        return None
    try:
        problem = make_problem()
    except KernelFactoryError as exc:
        _note_once(op, str(exc))
        return None
    if _recorders and _record(problem):  # no lock on the hot path unless a recording is open
        return None
    if not all(t.is_cuda for t in tensors):
        _note_once(op, "its tensors are not all on a CUDA device")
        return None
    found = _choices.get(problem)
    if found is None:
        from ..api import SelectMode, select
        from ..backends import BackendError

        try:
            found = select(problem, mode=SelectMode.AUTO)
        except (KernelFactoryError, BackendError) as exc:
            found = f"{problem.key}: {exc}"
        with _lock:
            _choices[problem] = found
    if isinstance(found, str):
        _note_once(op, found)
        return None
    if isinstance(found, PyTorchChosen):
        return None
    return found


def _workspace(kernel: Any, like: Tensor) -> Tensor | None:
    """The kernel's scratch from PyTorch's allocator: stream-ordered, and inside a CUDA-graph capture
    taken from the graph's pool, so even a first run during a capture allocates nothing of its own."""
    nbytes = kernel.workspace_bytes
    return like.new_empty((nbytes,), dtype=torch.uint8) if nbytes else None


# --- registration and eager calls -----------------------------------------------------------------
_IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {}  # op name -> its real implementation


def _custom_op(name: str) -> Callable[[Callable[..., Any]], Any]:
    """Register `kfactory::<name>` with torch.library and keep the implementation for `call`."""
    def register(implementation: Callable[..., Any]) -> Any:
        _IMPLEMENTATIONS[name] = implementation
        return torch.library.custom_op(f"kfactory::{name}", mutates_args=())(implementation)
    return register


def _eager(tensor: Tensor) -> bool:
    """A plain CUDA tensor outside any tracing, fake mode or dispatch mode, with autograd off (as inside
    an autograd Function; a double backward must meet the op and its missing derivative): the real
    implementation may run directly."""
    if type(tensor) is not Tensor or not tensor.is_cuda or torch.is_grad_enabled() or torch.compiler.is_compiling():
        return False
    return _current_dispatch_mode() is None


def call(name: str, *args: Any) -> Any:
    """torch.ops.kfactory.<name>(*args); on plain CUDA tensors in eager mode its implementation directly,
    without PyTorch's dispatcher (tens of microseconds of host time per call, which a training step of
    small layers feels). Under torch.compile, fake tensors or any dispatch mode, through the dispatcher."""
    if _eager(args[0]):
        return _IMPLEMENTATIONS[name](*args)
    return getattr(torch.ops.kfactory, name)(*args)


# --- memory formats -------------------------------------------------------------------------------
def channels_last_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Strides of an (N, C, *S) tensor stored (N, *S, C), as channels_last / channels_last_3d store it."""
    n, c, spatial = shape[0], shape[1], list(shape[2:])
    inner = [math.prod(spatial[d + 1:]) * c for d in range(len(spatial))]
    return (c * math.prod(spatial), 1, *inner)


def _has_strides(t: Tensor, strides: Sequence[int]) -> bool:
    return all(size == 1 or have == want for size, have, want in zip(t.shape, t.stride(), strides))


def _channels_last(t: Tensor) -> bool:
    """Stored (N, *S, C); PyTorch's own test where it has the memory format (the same rule: a size-1
    dim's stride is free), ours for 1-D convolutions' (N, C, W)."""
    if t.dim() == 4:
        return t.is_contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.is_contiguous(memory_format=torch.channels_last_3d)
    return _has_strides(t, channels_last_strides(t.shape))


def layout_of(*tensors: Tensor) -> Layout | None:
    """NHWGC when every tensor is channels-last, NGCHW when every one is contiguous (channels-last
    first where both hold), None for a mix."""
    if all(_channels_last(t) for t in tensors):
        return Layout.NHWGC
    if all(t.is_contiguous() for t in tensors):
        return Layout.NGCHW
    return None


def empty_in(layout: Layout | None, shape: Sequence[int], like: Tensor) -> Tensor:
    """An output of `shape` in the memory format of `layout` (contiguous without one)."""
    shape = tuple(int(s) for s in shape)
    if layout is Layout.NHWGC:
        return like.new_empty_strided(shape, channels_last_strides(shape))
    return like.new_empty(shape)


# --- convolution backward ------------------------------------------------------------------------
def _conv_problem(op: Op, layout: Layout, dtype: torch.dtype, input_size: Sequence[int], output_size: Sequence[int],
                  weight_size: Sequence[int], stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                  groups: int) -> ConvProblem:
    return _conv_problem_of(op, layout, dtype, tuple(input_size), tuple(output_size), tuple(weight_size),
                            tuple(stride), tuple(padding), tuple(dilation), int(groups))


@functools.lru_cache(maxsize=4096)  # a step meets the same few dozen problems every time: build each once
def _conv_problem_of(op: Op, layout: Layout, dtype: torch.dtype, input_size: tuple[int, ...],
                     output_size: tuple[int, ...], weight_size: tuple[int, ...], stride: tuple[int, ...],
                     padding: tuple[int, ...], dilation: tuple[int, ...], groups: int) -> ConvProblem:
    problem = ConvProblem(
        N=int(input_size[0]), G=groups, C=int(input_size[1]) // groups, K=int(output_size[1]) // groups,
        input=tuple(int(s) for s in input_size[2:]), filter=tuple(int(s) for s in weight_size[2:]),
        stride=tuple(stride), pad=tuple(padding), dilation=tuple(dilation), layout=layout, dtype=DTYPES[dtype], op=op)
    if tuple(problem.output) != tuple(int(s) for s in output_size[2:]):
        raise KernelFactoryError(f"grad_output's spatial size {tuple(output_size[2:])} is not the convolution's "
                                 f"{tuple(problem.output)}")
    return problem


def _conv_backward(grad_output: Tensor, input: Tensor, weight: Tensor, stride: Sequence[int], padding: Sequence[int],
                   dilation: Sequence[int], groups: int, mask: list[bool]) -> tuple[Any, ...]:
    nd = input.dim() - 2
    return torch.ops.aten.convolution_backward(grad_output, input, weight, None, list(stride), list(padding),
                                               list(dilation), False, [0] * nd, groups, mask)


@_custom_op("conv_bwd_weight")
def conv_bwd_weight(grad_output: Tensor, input: Tensor, weight_size: list[int], stride: list[int],
                    padding: list[int], dilation: list[int], groups: int) -> Tensor:
    """dW of a grouped convolution (PyTorch's shapes: input (N, G*C, *S), weight (G*K, C, *F))."""
    layout = layout_of(grad_output, input)
    out = empty_in(layout, weight_size, input)
    kernel = _conv_kernel("conv_bwd_weight", grad_output, input, layout, weight_size, stride, padding, dilation,
                          groups)
    if kernel is None:  # convolution_backward reads the stub weight's shape and memory format only
        stub = empty_in(layout, weight_size, input)
        out.copy_(_conv_backward(grad_output, input, stub, stride, padding, dilation, groups, [False, True, False])[1])
    else:
        kernel.run(input=input, grad_output=grad_output, grad_weight=out, workspace=_workspace(kernel, out))
    return out


@conv_bwd_weight.register_fake
def _(grad_output: Tensor, input: Tensor, weight_size: list[int], stride: list[int], padding: list[int],
      dilation: list[int], groups: int) -> Tensor:
    layout = layout_of(grad_output, input)
    _record_planned((grad_output, input), layout, lambda: _conv_problem(
        Op.CONV_BWD_WEIGHT, layout, input.dtype, input.shape, grad_output.shape, weight_size, stride, padding,
        dilation, groups))
    return empty_in(layout, weight_size, input)


@_custom_op("conv_bwd_data")
def conv_bwd_data(grad_output: Tensor, weight: Tensor, input_size: list[int], stride: list[int],
                  padding: list[int], dilation: list[int], groups: int) -> Tensor:
    """dIn of a grouped convolution (PyTorch's shapes: input (N, G*C, *S), weight (G*K, C, *F))."""
    layout = layout_of(grad_output, weight)
    out = empty_in(layout, input_size, grad_output)
    kernel = _conv_kernel("conv_bwd_data", grad_output, weight, layout, input_size, stride, padding, dilation,
                          groups)
    if kernel is None:  # convolution_backward reads the stub input's shape and memory format only: in `out`'s
        stub = empty_in(layout, input_size, grad_output)  # format, its result is copied without a transpose
        out.copy_(_conv_backward(grad_output, stub, weight, stride, padding, dilation, groups, [True, False, False])[0])
    else:
        kernel.run(grad_output=grad_output, weight=weight, grad_input=out, workspace=_workspace(kernel, out))
    return out


@conv_bwd_data.register_fake
def _(grad_output: Tensor, weight: Tensor, input_size: list[int], stride: list[int], padding: list[int],
      dilation: list[int], groups: int) -> Tensor:
    layout = layout_of(grad_output, weight)
    _record_planned((grad_output, weight), layout, lambda: _conv_problem(
        Op.CONV_BWD_DATA, layout, grad_output.dtype, input_size, grad_output.shape, weight.shape, stride, padding,
        dilation, groups))
    return empty_in(layout, input_size, grad_output)


def _conv_kernel(op: str, grad_output: Tensor, other: Tensor, layout: Layout | None, size: Sequence[int],
                 stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], groups: int) -> Any | None:
    """`_kernel` for a convolution backward call (`other`: the input for conv_bwd_weight, the weight for
    conv_bwd_data; `size`: the other gradient's shape), remembered per call signature."""
    key = (op, grad_output.shape, grad_output.stride(), grad_output.dtype, grad_output.device, other.shape,
           other.stride(), other.dtype, tuple(size), tuple(stride), tuple(padding), tuple(dilation), groups)
    if not _recorders:
        found = _conv_calls.get(key, _conv_calls)
        if found is not _conv_calls:
            return found
    if op == "conv_bwd_weight":
        make = lambda: _conv_problem(Op.CONV_BWD_WEIGHT, layout, other.dtype, other.shape, grad_output.shape,  # noqa: E731
                                     size, stride, padding, dilation, groups)
    else:
        make = lambda: _conv_problem(Op.CONV_BWD_DATA, layout, grad_output.dtype, size, grad_output.shape,  # noqa: E731
                                     other.shape, stride, padding, dilation, groups)
    kernel = _kernel(op, (grad_output, other), layout, make)
    if not _recorders:
        with _lock:
            _conv_calls[key] = kernel
    return kernel


def conv_served(op: str, grad_output: Tensor, other: Tensor, size: Sequence[int], stride: Sequence[int],
                padding: Sequence[int], dilation: Sequence[int], groups: int) -> bool:
    """Whether `call(op, grad_output, other, size, ...)` would run our kernel. In eager mode the caller can
    then let one convolution_backward compute what PyTorch serves (both gradients at once, in their own
    memory format); while tracing the op itself decides at run time, so True."""
    if not _eager(grad_output):
        return True
    layout = layout_of(grad_output, other)
    return _conv_kernel(op, grad_output, other, layout, size, stride, padding, dilation, groups) is not None


# --- GroupNorm backward ---------------------------------------------------------------------------
def _groupnorm_problem(x: Tensor, groups: int, layout: Layout, affine: bool) -> GroupNormProblem:
    return GroupNormProblem(N=int(x.shape[0]), C=int(x.shape[1]), G=groups, input=tuple(int(s) for s in x.shape[2:]),
                            layout=layout, dtype=DTYPES[x.dtype], affine=affine)


@_custom_op("groupnorm_bwd")
def groupnorm_bwd(dy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, gamma: Optional[Tensor],
                  groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dgamma, dbeta) of GroupNorm over x (N, C, *S) with PyTorch's saved mean and rstd (N, G);
    dgamma and dbeta are empty (0 elements) without gamma."""
    layout = layout_of(dy, x)
    dx = empty_in(layout, x.shape, x)
    affine = gamma is not None
    dgamma = x.new_empty((x.shape[1],) if affine else (0,))
    dbeta = x.new_empty((x.shape[1],) if affine else (0,))
    kernel = _kernel("groupnorm_bwd", (dy, x) + ((gamma,) if affine else ()), layout,
                     lambda: _groupnorm_problem(x, groups, layout, affine))
    if kernel is None:
        spatial = math.prod(x.shape[2:])
        if x.device.type != "cpu":  # PyTorch's GPU GroupNorm takes NCHW only
            dy, x = dy.contiguous(), x.contiguous()
        got = torch.ops.aten.native_group_norm_backward(dy, x, mean, rstd, gamma, x.shape[0], x.shape[1], spatial,
                                                        groups, [True, affine, affine])
        dx.copy_(got[0])
        if affine:
            dgamma.copy_(got[1])
            dbeta.copy_(got[2])
        return dx, dgamma, dbeta
    stats = {"mean": mean.float().contiguous(), "rstd": rstd.float().contiguous()}  # ours: fp32 (N, G)
    outputs = {"dx": dx, "dgamma": dgamma, "dbeta": dbeta} if affine else {"dx": dx}
    kernel.run(x=x, dy=dy, **stats, **({"gamma": gamma} if affine else {}), **outputs, workspace=_workspace(kernel, dx))
    return dx, dgamma, dbeta


@groupnorm_bwd.register_fake
def _(dy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, gamma: Optional[Tensor],
      groups: int) -> tuple[Tensor, Tensor, Tensor]:
    affine = gamma is not None
    layout = layout_of(dy, x)
    _record_planned((dy, x) + ((gamma,) if affine else ()), layout, lambda: _groupnorm_problem(x, groups, layout, affine))
    channels = (x.shape[1],) if affine else (0,)
    return empty_in(layout, x.shape, x), x.new_empty(channels), x.new_empty(channels)


# --- fused depthwise-separable forward -------------------------------------------------------------
def _activate(t: Tensor, act: Activation) -> Tensor:
    if act is Activation.RELU:
        return torch.relu(t)
    if act is Activation.RELU6:
        return torch.clamp(t, 0.0, 6.0)
    return t


def _activation(name: str) -> Activation:
    try:
        return Activation(name)
    except ValueError:
        raise ValueError(f"activation {name!r} is not one of {', '.join(a.value for a in Activation)}") from None


_CONV = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}


def _dwsep_output_size(input: Tensor, weight_dw: Tensor, weight_pw: Tensor, stride: Sequence[int],
                       padding: Sequence[int], dilation: Sequence[int]) -> tuple[int, ...]:
    spatial = [(i + 2 * p - d * (f - 1) - 1) // s + 1
               for i, f, s, p, d in zip(input.shape[2:], weight_dw.shape[2:], stride, padding, dilation)]
    return (int(input.shape[0]), int(weight_pw.shape[0]), *spatial)


def _dwsep_problem(input: Tensor, weight_dw: Tensor, weight_pw: Tensor, bias_dw: Optional[Tensor],
                   bias_pw: Optional[Tensor], stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                   acts: tuple[Activation, Activation], layout: Layout) -> DwsepProblem:
    return DwsepProblem(
        N=int(input.shape[0]), C=int(input.shape[1]), K=int(weight_pw.shape[0]),
        input=tuple(int(s) for s in input.shape[2:]), filter=tuple(int(s) for s in weight_dw.shape[2:]),
        stride=tuple(stride), pad=tuple(padding), dilation=tuple(dilation), layout=layout,
        dtype=DTYPES[input.dtype], bias_dw=bias_dw is not None, bias_pw=bias_pw is not None,
        act_dw=acts[0], act_pw=acts[1])


@_custom_op("dwsep_conv_fwd")
def dwsep_conv_fwd(input: Tensor, weight_dw: Tensor, weight_pw: Tensor, bias_dw: Optional[Tensor],
                   bias_pw: Optional[Tensor], stride: list[int], padding: list[int], dilation: list[int],
                   act_dw: str, act_pw: str) -> Tensor:
    """act_pw(conv1x1(act_dw(depthwise(input) + bias_dw), weight_pw) + bias_pw) in one kernel: input
    (N, C, *S), weight_dw (C, 1, *F), weight_pw (K, C, 1, ...); activations "none", "relu", "relu6"."""
    acts = _activation(act_dw), _activation(act_pw)
    layout = layout_of(input)
    out = empty_in(layout, _dwsep_output_size(input, weight_dw, weight_pw, stride, padding, dilation), input)
    biases = tuple(b for b in (bias_dw, bias_pw) if b is not None)
    # Ours takes the pointwise weight as (K, C): contiguous, whatever the activations' layout.
    kernel = _kernel("dwsep_conv_fwd", (input, weight_dw, weight_pw, *biases), layout, lambda: _dwsep_problem(
        input, weight_dw, weight_pw, bias_dw, bias_pw, stride, padding, dilation, acts, layout))
    if kernel is None:
        conv = _CONV[input.dim() - 2]
        mid = _activate(conv(input, weight_dw, bias_dw, stride, padding, dilation, groups=input.shape[1]), acts[0])
        return out.copy_(_activate(conv(mid, weight_pw, bias_pw), acts[1]))
    tensors = {"input": input, "weight_dw": weight_dw.contiguous(), "weight_pw": weight_pw.contiguous(), "output": out}
    if bias_dw is not None:
        tensors["bias_dw"] = bias_dw.contiguous()
    if bias_pw is not None:
        tensors["bias_pw"] = bias_pw.contiguous()
    kernel.run(**tensors, workspace=_workspace(kernel, out))
    return out


@dwsep_conv_fwd.register_fake
def _(input: Tensor, weight_dw: Tensor, weight_pw: Tensor, bias_dw: Optional[Tensor], bias_pw: Optional[Tensor],
      stride: list[int], padding: list[int], dilation: list[int], act_dw: str, act_pw: str) -> Tensor:
    layout = layout_of(input)
    acts = _activation(act_dw), _activation(act_pw)
    biases = tuple(b for b in (bias_dw, bias_pw) if b is not None)
    _record_planned((input, weight_dw, weight_pw, *biases), layout, lambda: _dwsep_problem(
        input, weight_dw, weight_pw, bias_dw, bias_pw, stride, padding, dilation, acts, layout))
    return empty_in(layout, _dwsep_output_size(input, weight_dw, weight_pw, stride, padding, dilation), input)
