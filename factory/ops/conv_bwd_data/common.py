"""What the backward-data families share: the op's tensors and cells, and the plan around a main kernel."""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any

from ...device import DeviceTarget
from ...problem import ConvProblem, DType, Layout, Scalar
from ..base import Launch, LaunchPlan, Struct
from ..conv import ConvTensor, cpp_type, kernel_args
from ..conv.family import ConvFamily

GRID_Y_LIMIT = 65535
VECTOR_PAYS = 4  # the widest vector of channels per thread that measured faster than a narrower one
# fp16, bf16 and fp32 write a gradient of their own type; int8 multiplies exactly and writes int32,
# int8_sat the same sums saturated to int8 (-128..127).
DTYPES = (DType.FP16, DType.BF16, DType.FP32, DType.INT8, DType.INT8_SAT)
ALL_CELLS = frozenset((l, d, n) for l in Layout for d in DTYPES for n in (1, 2, 3))

# The op's tensors in kernel-argument order, and the one it writes.
TENSORS = {"grad_output": ConvTensor.ACTIVATION_OUT, "weight": ConvTensor.WEIGHT, "grad_input": ConvTensor.ACTIVATION_IN}
OUTPUT = "grad_input"


def result_scalar(dtype: DType) -> Scalar:
    """The written gradient's storage type: the tensors' own, int32 for int8 (exact int32 sums), int8 for
    int8_sat (the int32 sums saturated)."""
    return dtype.weight  # fp16, bf16, fp32 as given; int8 -> int32


def vector_score(vector: int) -> float:
    """The prior's gain for `vector` consecutive channels (or groups) per thread in the memory-bound
    families (direct, dwr): 0.2 a doubling up to 4, and none at 8. H100 suite+seed21, same other params:
    direct 2 0.75x the time of 1, 4 0.98x of 2, 8 1.28x of 4 (54 pairs each); dwr 4 0.73x of 1 (38 pairs),
    8 1.37x of 4 (54 pairs, 52 slower): at 8 the sums a thread keeps double again and the launch has half
    the threads, which costs what the wider loads gain."""
    return 0.0 if vector > VECTOR_PAYS else 0.2 * math.log2(vector)


def reduction_rows(problem: ConvProblem) -> int:
    """Products summed into one grad_input element: K output channels times the taps that reach it (the
    filter over the stride, at least one)."""
    return problem.K * max(1, problem.filter_volume // math.prod(problem.stride))


def input_positions(problem: ConvProblem) -> int:
    """Elements of one channel of the gradient: N times the input positions."""
    return problem.N * math.prod(problem.input)


class BwdDataFamily(ConvFamily):
    """A backward-data family: the op-wide checks and template values, and a plan of one main kernel
    `kf_main(const kf_conv_args a, <the family's own parameters>)` (no workspace, no epilogue: every
    element of grad_input is written once by the block that computes it)."""

    def supported_cells(self) -> frozenset[tuple[Layout, DType, int]]:
        return ALL_CELLS

    def template_values(self, params: Any, layout: Layout, dtype: DType, ndim: int) -> dict[str, Any]:
        values = dict(params.template_values()) | self.operand_types(dtype) | {"tout": cpp_type(result_scalar(dtype))}
        return values | self.layout_values(params, layout)

    def layout_values(self, params: Any, layout: Layout) -> dict[str, Any]:
        """Template values that depend on the layout (none unless a family says so)."""
        return {}

    @abstractmethod
    def main_launch(self, params: Any, problem: ConvProblem, target: DeviceTarget, args: Struct) -> Launch:
        """The family's kernel, `args` (the conv argument struct) first."""

    def launch_plan(self, params: Any, problem: ConvProblem, target: DeviceTarget) -> LaunchPlan:
        return LaunchPlan((self.main_launch(params, problem, target, kernel_args(TENSORS, problem)),))
