"""The backward convolutions' float64 reference as a device kernel (templates/common/reference_conv.hip.j2).

A tune judges every candidate against the op's reference. Computed on the host, a large problem's
reference costs seconds of float64 copies, sums and uploads (bench/NOTES.md 28, 45); the same formula on
the device, from the tensors the candidates read anyway, takes milliseconds, and its result stays there
for the output check. int8 sums are exact 64-bit integers there too.
"""

from __future__ import annotations

import enum
import math
from typing import Mapping

from ...problem import ConvProblem, DType
from ..base import REFERENCE_THREADS, Buf, DeviceReference, Launch, LaunchPlan, reference_blocks
from . import ConvTensor, cpp_type, kernel_args, too_large

TEMPLATE = "reference_conv.hip.j2"
ENTRY = "kf_reference"


class ReferenceKind(enum.Enum):
    """Which formula the kernel computes (the template's `kind`)."""

    BWD_WEIGHT = "bwd_weight"  # a block per weight element, summing over (n, output position)
    BWD_DATA = "bwd_data"  # a thread per input element, summing over (k, taps)


def conv_device_reference(kind: ReferenceKind, problem: ConvProblem, tensor_names: Mapping[str, ConvTensor],
                          output: str, d_input: str | None = None) -> DeviceReference | None:
    """The device reference of a backward convolution whose written tensor is `output`; `d_input` names
    the epilogue's D when the problem has one (backward-weight's beta). None for tensors past 32-bit
    element offsets."""
    if too_large(problem) is not None:
        return None
    args = kernel_args(tensor_names, problem)
    refs = (Buf(f"{output}.ref"), Buf(f"{output}.scale"))
    d = Buf(d_input if d_input is not None and problem.has_d else output)
    if kind is ReferenceKind.BWD_WEIGHT:  # a block per weight element
        grid = (problem.G * problem.K * problem.C * math.prod(problem.filter), 1, 1)
    else:  # grid-stride over the input elements
        grid = reference_blocks(problem.N * problem.G * problem.C * math.prod(problem.input))
    launch = Launch(ENTRY, grid, (REFERENCE_THREADS, 1, 1), (args, d, *refs))
    has_d = kind is ReferenceKind.BWD_WEIGHT and problem.has_d
    values = (("kind", kind.value), ("tin", cpp_type(problem.dtype.tensor)),
              ("td", cpp_type(problem.dtype.weight)), ("has_d", has_d),
              ("alpha", repr(float(problem.alpha))), ("beta", repr(float(problem.beta))),
              # int8: exact sums, the int32 epilogue with integer alpha and beta (ConvProblem checks them)
              ("integer", problem.dtype.is_integer), ("saturate", problem.dtype is DType.INT8_SAT),
              ("alpha_int", int(problem.alpha)), ("beta_int", int(problem.beta)))
    return DeviceReference(TEMPLATE, values, LaunchPlan((launch,)))
