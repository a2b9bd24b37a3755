"""What every convolution op shares: the problem parser, its tensors in each layout, PyTorch views of
them, and the geometry arguments every conv kernel takes.

A conv op (backward-weight, backward-data, the fused forward) names its three tensors and which
convolution tensor each is (`ConvTensor`); shapes, strides, framework views and kernel arguments then
follow from the problem's layout in one place.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Mapping, Sequence

from ...problem import ConvProblem, DType, Layout, Scalar, parse_conv_problem
from ..base import F32, I32, Buf, OpModule, Role, Struct, TensorSpec
from . import layouts as cl
from .fold import lower_rank

INT32_LIMIT = 2**31 - 1


class ConvTensor(enum.Enum):
    """The three tensors of a convolution, whatever an op calls them."""

    ACTIVATION_IN = "C"  # (N, G, C, *input)
    ACTIVATION_OUT = "K"  # (N, G, K, *output)
    WEIGHT = "W"  # (G, K, C, *filter)


def physical(problem: ConvProblem, which: ConvTensor) -> cl.PhysicalTensor:
    if which is ConvTensor.WEIGHT:
        return cl.weight(problem)
    return cl.activation(problem, which.value)


class ConvOp(OpModule[ConvProblem]):
    """The conv part of an op module; a subclass says what its tensors are called and which is written.

    `tensor_names` maps each of the op's tensor names to the convolution tensor it is, in kernel
    argument order; `output_name` is the one the op writes. `extra_tensors` names tensors outside the
    convolution that are laid out like one of its tensors (an epilogue's D, shaped like the written
    one): they share its shapes, strides and PyTorch views, and a subclass says when they exist.
    """

    tensor_names: Mapping[str, ConvTensor]
    output_name: str
    extra_tensors: Mapping[str, ConvTensor] = {}

    def conv_tensor(self, name: str) -> ConvTensor | None:
        """Which convolution tensor `name` is, or is laid out like; None for a name the op lacks."""
        return self.tensor_names.get(name) or self.extra_tensors.get(name)

    def parse_problem(self, spec: str, layout: Layout, dtype: DType) -> ConvProblem:
        return parse_conv_problem(spec, layout, dtype, self.op)

    def lower_rank_view(self, problem: ConvProblem) -> ConvProblem | None:
        """A 3-D problem that is a 2-D one on the same tensors (factory.ops.conv.fold)."""
        return lower_rank(problem) if problem.ndim == 3 else None  # asked once per instance a lookup weighs

    def scalar_of(self, problem: ConvProblem, name: str) -> Scalar:
        """Storage type of a tensor: inputs in the tensor dtype, the written tensor in the weight dtype."""
        return problem.dtype.weight if name == self.output_name else problem.dtype.tensor

    def tensors(self, problem: ConvProblem) -> list[TensorSpec]:
        specs = []
        for name, which in self.tensor_names.items():
            t = physical(problem, which)
            role = Role.OUTPUT if name == self.output_name else Role.INPUT
            specs.append(TensorSpec(name, t.shape, self.scalar_of(problem, name), role, t.dims))
        return specs

    def traffic(self, problem: ConvProblem) -> tuple[int, int]:
        return problem.min_bytes, problem.macs

    def framework_view(self, problem: ConvProblem, name: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """PyTorch's conv shape of a tensor ((N, G*C, *S) / (G*K, C, *F)) with this layout's strides.

        None when the layout has no such view (groups and channels not adjacent, as in GNHWC).
        """
        which = self.conv_tensor(name)
        if which is None:
            return None
        t = physical(problem, which)
        if which is ConvTensor.WEIGHT:
            outer, inner, rest = "G", "K", "C" + "ZYX"[3 - problem.ndim :]
        else:
            outer, inner, rest = "G", which.value, "DHW"[3 - problem.ndim :]
        s = t.strides()
        if s[outer] != t.sizes[inner] * s[inner]:
            return None
        if which is ConvTensor.WEIGHT:
            return (problem.G * problem.K, *(t.sizes[d] for d in rest)), (s["K"], *(s[d] for d in rest))
        return ((problem.N, problem.G * t.sizes[inner], *(t.sizes[d] for d in rest)),
                (s["N"], s[inner], *(s[d] for d in rest)))

    # --- PyTorch -----------------------------------------------------------------------------------
    def torch_problem(self, problem: ConvProblem) -> tuple[ConvProblem, str]:
        """The problem PyTorch runs (ours, or an NHWGC copy where our layout has no PyTorch view) and a note."""
        native = all(self.framework_view(problem, n) is not None for n in self.tensor_names)
        if native:
            return problem, ""
        return (dataclasses.replace(problem, layout=Layout.NHWGC),
                f"PyTorch timed on an NHWGC copy ({problem.layout.name} has no PyTorch layout)")

    def as_framework(self, physical_tensor: Any, problem: ConvProblem, torch_problem: ConvProblem, name: str) -> Any:
        """Our physical torch tensor, re-laid in torch_problem's layout, viewed in PyTorch's conv shape."""
        which = self.conv_tensor(name)
        ours, theirs = physical(problem, which), physical(torch_problem, which)
        if torch_problem is problem:
            moved = physical_tensor
        else:
            logical = physical_tensor.permute([ours.dims.index(d) for d in ours.logical])
            moved = logical.permute([theirs.logical.index(d) for d in theirs.dims]).contiguous()
        shape, strides = self.framework_view(torch_problem, name)
        return moved.as_strided(shape, strides)

    def from_framework(self, result: Any, problem: ConvProblem, name: str) -> Any:
        """A PyTorch result in conv shape, as a contiguous tensor in our physical layout."""
        which = self.conv_tensor(name)
        t = physical(problem, which)
        if which is ConvTensor.WEIGHT:
            logical = result.reshape(problem.G, problem.K, problem.C, *problem.filter)
        else:
            channels = problem.C if which is ConvTensor.ACTIVATION_IN else problem.K
            spatial = problem.input if which is ConvTensor.ACTIVATION_IN else problem.output
            logical = result.reshape(problem.N, problem.G, channels, *spatial)
        return logical.permute([t.logical.index(d) for d in t.dims]).contiguous()


# The conv argument struct (templates/common/args.h, kf_conv_args): pointers first (natural alignment
# without padding), then the geometry in the order geometry_ints gives it.
CONV_ARGS = "kf_conv_args"
POINTER_FIELDS = {ConvTensor.ACTIVATION_IN: "in", ConvTensor.ACTIVATION_OUT: "out", ConvTensor.WEIGHT: "wei"}
GEOMETRY_FIELDS = (
    "N", "G", "C", "K",
    "Di", "Hi", "Wi", "Do", "Ho", "Wo", "Z", "Y", "X",
    "sd", "sh", "sw", "pd", "ph", "pw", "dd", "dh", "dw",
    "in_n", "in_g", "in_c", "in_d", "in_h", "in_w",
    "out_n", "out_g", "out_k", "out_d", "out_h", "out_w",
    "wei_g", "wei_k", "wei_c", "wei_z", "wei_y", "wei_x",
)


def kernel_args(tensor_names: Mapping[str, ConvTensor], problem: ConvProblem,
                buffers: Mapping[str, str] | None = None) -> Struct:
    """Every conv kernel's argument struct: its three tensors' pointers, then the geometry.

    The pointers are named by the convolution tensor they are (`in`, `out`, `wei`), whatever the op
    calls it; `buffers` redirects a tensor to another buffer (the written tensor to a workspace, say).
    Geometry: N, G, C, K; input, output and filter sizes, stride, pad and dilation as (D, H, W);
    element strides of the input activation (N, G, C, D, H, W), of the output activation
    (N, G, K, D, H, W) and of the weight (G, K, C, Z, Y, X). A kernel's own extra arguments follow
    the struct as plain parameters.
    """
    buffers = buffers or {}
    by_tensor = {which: name for name, which in tensor_names.items()}
    if set(by_tensor) != set(ConvTensor):
        raise ValueError(f"a conv op names all three conv tensors, got {dict(tensor_names)}")
    pointers = tuple((POINTER_FIELDS[w], Buf(buffers.get(by_tensor[w], by_tensor[w]))) for w in ConvTensor)
    ints = geometry_ints(problem)
    return Struct(CONV_ARGS, pointers + tuple((f, I32(v)) for f, v in zip(GEOMETRY_FIELDS, ints, strict=True)))


# The output epilogue's argument struct (templates/common/args.h, kf_epilogue).
EPILOGUE_ARGS = "kf_epilogue"


def epilogue_args(problem: ConvProblem, d: str, unread: str) -> Struct:
    """The output epilogue a conv kernel applies to what it writes: alpha * computed + beta * D.

    `d` names D's buffer; when beta is 0 D does not exist and the pointer is `unread`'s (a buffer the
    plan has anyway), which the kernel never reads. alpha and beta travel as fp32.
    """
    return Struct(EPILOGUE_ARGS, (("d", Buf(d if problem.has_d else unread)),
                                  ("alpha", F32(problem.alpha)), ("beta", F32(problem.beta))))


def explicit_padding(x: Any, problem: ConvProblem) -> tuple[Any, list[int]]:
    """PyTorch's convolutions pad both sides alike: for an asymmetric problem, pad the (N, C, *S) input
    by the difference first and let the convolution pad the common part. Returns (input, padding)."""
    common = [min(l, r) for l, r in zip(problem.pad, problem.pad_right)]
    if problem.symmetric:
        return x, common
    import torch.nn.functional as F

    extra: list[int] = []
    for l, r, c in reversed(list(zip(problem.pad, problem.pad_right, common))):  # F.pad: last dim first
        extra += [l - c, r - c]
    return F.pad(x, extra), common


def geometry_ints(problem: ConvProblem) -> list[int]:
    """The geometry part of the conv kernel arguments (see kernel_args)."""
    act_in = cl.activation(problem, "C")
    act_out = cl.activation(problem, "K")
    wei = cl.weight(problem)
    spatial = "DHW"
    ints = [problem.N, problem.G, problem.C, problem.K]
    ints += cl.pad_to_3d(problem.input, 1) + cl.pad_to_3d(problem.output, 1) + cl.pad_to_3d(problem.filter, 1)
    ints += cl.pad_to_3d(problem.stride, 1) + cl.pad_to_3d(problem.pad, 0) + cl.pad_to_3d(problem.dilation, 1)
    ints += cl.strides_3d(act_in, "NGC" + spatial)
    ints += cl.strides_3d(act_out, "NGK" + spatial)
    ints += cl.strides_3d(wei, "GKCZYX")
    return ints


def cpp_type(scalar: Scalar) -> str:
    """The templates' spelling of a storage type."""
    return {Scalar.F16: "f16_t", Scalar.BF16: "bf16_t", Scalar.F32: "float", Scalar.I8: "int8_t", Scalar.I32: "int"}[scalar]


def too_large(problem: ConvProblem) -> str | None:
    """Why 32-bit indexing kernels cannot take the problem, or None."""
    if problem.element_count_max() > INT32_LIMIT:
        return "a tensor has 2**31 elements or more; kernels index with 32-bit integers"
    return None


__all__: Sequence[str] = ("CONV_ARGS", "EPILOGUE_ARGS", "ConvOp", "ConvTensor", "GEOMETRY_FIELDS", "POINTER_FIELDS", "cl", "cpp_type", "epilogue_args", "geometry_ints", "kernel_args", "physical", "too_large")
