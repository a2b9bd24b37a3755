"""2-D kernels run on 3-D problems through their 2-D view (factory.ops.conv.fold), on the host
(kernel_emulator), against the 3-D problem's numpy reference: the tensors are the 3-D problem's, poisoned
outputs included, and only the launch plan is the view's.

One case a family without 3-D kernels, both folds (H and W into one axis; D into the batch), odd sizes,
strides, dilation and asymmetric padding on the kept axes. The instance is picked among those `lookup`
finds for the 3-D problem, as in the other emulator tests.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import pytest

import kernel_emulator
from factory.catalog import Instance
from factory.ops import solver_for
from factory.problem import ConvProblem, DType, Layout, Op
from factory.selector import lookup

pytestmark = pytest.mark.skipif(not kernel_emulator.available(), reason="g++ is not on PATH")

L, D = Layout, DType
W, B = Op.CONV_BWD_WEIGHT, Op.CONV_BWD_DATA


@dataclass(frozen=True)
class Case:
    id: str
    op: Op
    family: str
    layout: Layout
    dtype: DType
    spec: str

    @property
    def problem(self) -> ConvProblem:
        return solver_for(self.op).parse_problem(self.spec, self.layout, self.dtype)


CASES = [
    Case("w-dwl-nhwgc-fp16-depth-in-batch", W, "dwl", L.NHWGC, D.FP16, "N=2,G=32,C=1,K=1,input=3x13x17,filter=1x3x3,pad=0x1x1"),
    Case("w-dwl-nhwgc-bf16-hw-s2", W, "dwl", L.NHWGC, D.BF16, "N=8,G=24,C=1,K=1,input=33x3x5,filter=3x1x1,stride=2x1x1,pad=1x0x0"),
    Case("w-dwh-ngchw-fp16-hw", W, "dwh", L.NGCHW, D.FP16, "N=2,G=8,C=1,K=1,input=5x4x6,filter=3x1x1,pad=1x0x0"),
    Case("w-dwr-nhwgc-fp32-depth-in-batch-d2", W, "dwr", L.NHWGC, D.FP32,
         "N=2,G=8,C=1,K=1,input=2x9x8,filter=1x3x3,pad=0x2x2,dilation=1x2x2"),
    Case("w-dwt-nhwgc-bf16-hw-asym", W, "dwt", L.NHWGC, D.BF16,
         "N=4,G=8,C=1,K=1,input=19x3x5,filter=4x1x1,pad_left=1x0x0,pad_right=2x0x0"),
    Case("w-gwl-ngchw-fp16-hw", W, "gwl", L.NGCHW, D.FP16, "N=4,G=2,C=8,K=16,input=12x5x7,filter=3x1x1,pad=1x0x0"),
    Case("w-gwl-gnhwc-fp32-depth-in-batch", W, "gwl", L.GNHWC, D.FP32, "N=2,G=2,C=8,K=8,input=2x12x15,filter=1x3x3,pad=0x1x1"),
    Case("d-dwc-nhwgc-fp16-depth-in-batch", B, "dwc", L.NHWGC, D.FP16, "N=2,G=16,C=1,K=1,input=2x17x19,filter=1x3x3,pad=0x1x1"),
    Case("d-gwl-nhwgc-bf16-hw-s2", B, "gwl", L.NHWGC, D.BF16, "N=2,G=3,C=16,K=8,input=7x3x4,filter=3x1x1,stride=2x1x1,pad=1x0x0"),
    Case("d-dwp-ngchw-fp16-hw", B, "dwp", L.NGCHW, D.FP16, "N=2,G=8,C=1,K=1,input=6x5x3,filter=3x1x1,pad=1x0x0"),
    Case("d-dws-ngchw-bf16-hw-d2", B, "dws", L.NGCHW, D.BF16, "N=2,G=8,C=1,K=1,input=7x2x5,filter=3x1x1,pad=2x0x0,dilation=2x1x1"),
    Case("d-dwm-ngchw-fp16-hw", B, "dwm", L.NGCHW, D.FP16, "N=2,G=4,C=1,K=1,input=9x3x5,filter=3x1x1,pad=1x0x0"),
]


def pick_instance(case: Case) -> Instance:
    return kernel_emulator.pick_for_case(
        case.id, (i for i in lookup(case.problem)
                  if i.family == case.family and kernel_emulator.can_emulate(i, case.problem)),
        f"{case.family} instance computes {case.spec}")


@pytest.fixture(scope="module")
def picked() -> dict[str, Instance]:
    return kernel_emulator.pick_and_prebuild(CASES, pick_instance)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_2d_kernel_computes_the_3d_problem_through_its_view(case: Case, picked: dict[str, Instance]) -> None:
    inst = picked[case.id]
    assert (inst.ndim, case.problem.ndim) == (2, 3)
    verdict = kernel_emulator.check_instance(inst, case.problem, seed=zlib.crc32(case.id.encode()))
    assert verdict.ok, f"{inst.name} on {case.spec}: {verdict.message}"
