"""conv_bwd_weight kernels run on the host (kernel_emulator) against the numpy reference, without a GPU.

A table of small problems, each naming a family, a split-K reduction and sometimes a shape of block
(lanes along groups, wide vectors), together reach every family, every reduction of it, the four
layouts, the five dtypes and the ranks each family supports, with odd sizes (C=3, 7x5, stride 2,
dilation 2, pad 0, N=1). The instance of a case is picked deterministically among those `lookup`
finds for its problem: a hash of the case's name indexes the sorted candidates, so the cases spread
over the catalog's tuning points rather than all taking the first. The libraries are compiled in
parallel before the first case runs. Further tests show that the checks can fail: a broken launch
plan, and kernels that misuse shared memory, barriers, shuffles or alignment.
"""

from __future__ import annotations

import ctypes
import dataclasses
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import kernel_emulator
from factory.catalog import Instance
from factory.ops.base import Launch, Memset
from factory.ops.conv_bwd_weight import SOLVER, Reduction
from factory.problem import ConvProblem, DType, Layout
from factory.selector import lookup

pytestmark = pytest.mark.skipif(not kernel_emulator.available(), reason="g++ is not on PATH")

L, D = Layout, DType
Pick = Callable[[Any], bool]


def wide(p: Any) -> bool:
    """Threads along adjacent groups (channels-last depthwise blocks) with vector loads."""
    return p.threads_lane > 1 and p.vector > 1


def one_lane(p: Any) -> bool:
    return p.threads_lane == 1


def vectorized(p: Any) -> bool:
    return p.vector > 1


@dataclass(frozen=True)
class Case:
    id: str
    family: str
    layout: Layout
    dtype: DType
    spec: str
    reduction: Reduction
    pick: Pick | None = None  # a property the picked tuning point must have

    @property
    def problem(self) -> ConvProblem:
        return SOLVER.parse_problem(self.spec, self.layout, self.dtype)


R = Reduction
CASES = [
    # dl: portable implicit GEMM, every layout, dtype and rank.
    Case("dl-nhwgc-fp16-2d-vec", "dl", L.NHWGC, D.FP16, "N=2,G=2,C=4,K=8,input=9x7,filter=3x3,pad=1", R.TWOSTAGE, vectorized),
    Case("dl-ngchw-bf16-2d-c3-s2-p0", "dl", L.NGCHW, D.BF16, "N=1,G=2,C=3,K=5,input=15x11,filter=3x3,stride=2,pad=0", R.DIRECT),
    Case("dl-gkyxc-fp32-3d", "dl", L.NGCHW_GKYXC, D.FP32, "N=2,G=1,C=3,K=4,input=5x6x7,filter=3x3x3,pad=1", R.ATOMIC),
    Case("dl-gnhwc-int8-1d-d2-vec", "dl", L.GNHWC, D.INT8, "N=2,G=3,C=8,K=4,input=75,filter=5,pad=2,dilation=2", R.ATOMIC, vectorized),
    Case("dl-nhwgc-bf16w-3d-s2", "dl", L.NHWGC, D.BF16_FP32W, "N=1,G=2,C=2,K=6,input=8x7x9,filter=2x3x3,stride=2x1x2,pad=0x1x1", R.TWOSTAGE),
    Case("dl-ngchw-fp16-1d", "dl", L.NGCHW, D.FP16, "N=3,G=2,C=5,K=3,input=50,filter=3,pad=1", R.ATOMIC),
    Case("dl-gnhwc-fp32-2d-c3-d2-n1", "dl", L.GNHWC, D.FP32, "N=1,G=3,C=3,K=3,input=9x8,filter=3x3,pad=2,dilation=2", R.DIRECT),
    # dw: few channels per group; lanes along groups (NHWGC) or threads along positions (any layout).
    Case("dw-nhwgc-fp16-2d-wide", "dw", L.NHWGC, D.FP16, "N=2,G=64,C=1,K=1,input=16x16,filter=3x3,pad=1", R.TWOSTAGE, wide),
    Case("dw-ngchw-bf16-2d-7x5", "dw", L.NGCHW, D.BF16, "N=1,G=2,C=2,K=3,input=7x5,filter=3x3,pad=1", R.DIRECT),
    Case("dw-gkyxc-int8-3d", "dw", L.NGCHW_GKYXC, D.INT8, "N=1,G=2,C=1,K=2,input=12x12x14,filter=3x3x3,pad=1", R.TWOSTAGE),
    Case("dw-gnhwc-fp32-1d-c2", "dw", L.GNHWC, D.FP32, "N=2,G=3,C=2,K=2,input=999,filter=5,pad=2", R.ATOMIC),
    Case("dw-nhwgc-bf16w-3d-n1", "dw", L.NHWGC, D.BF16_FP32W, "N=1,G=32,C=1,K=1,input=8x8x9,filter=3x3x3,pad=1", R.ATOMIC, wide),
    # dwt: depthwise, input windows staged in dynamic shared memory.
    Case("dwt-nhwgc-fp16-2d-wide", "dwt", L.NHWGC, D.FP16, "N=4,G=32,C=1,K=1,input=56x56,filter=3x3,pad=1", R.TWOSTAGE, wide),
    Case("dwt-ngchw-bf16-2d-s2-p0", "dwt", L.NGCHW, D.BF16, "N=2,G=3,C=1,K=1,input=37x23,filter=3x3,stride=2,pad=0", R.TWOSTAGE),
    Case("dwt-gkyxc-int8-1d-d2", "dwt", L.NGCHW_GKYXC, D.INT8, "N=2,G=2,C=1,K=1,input=1031,filter=7,pad=3,dilation=2", R.ATOMIC),
    Case("dwt-gnhwc-fp32-2d-5x5-n1", "dwt", L.GNHWC, D.FP32, "N=1,G=2,C=1,K=1,input=33x40,filter=5x5,pad=2", R.ATOMIC),
    Case("dwt-nhwgc-bf16w-1d-wide", "dwt", L.NHWGC, D.BF16_FP32W, "N=8,G=32,C=1,K=1,input=2048,filter=9,pad=4", R.ATOMIC, wide),
    # dwr: depthwise, filter/stride/dilation compiled in, register blocks.
    Case("dwr-nhwgc-fp16-2d-wide", "dwr", L.NHWGC, D.FP16, "N=4,G=64,C=1,K=1,input=64x64,filter=3x3,pad=1", R.TWOSTAGE, wide),
    Case("dwr-ngchw-fp32-2d-5x5-s2", "dwr", L.NGCHW, D.FP32, "N=2,G=2,C=1,K=1,input=39x79,filter=5x5,stride=2,pad=2", R.TWOSTAGE),
    Case("dwr-gkyxc-bf16-1d-f15", "dwr", L.NGCHW_GKYXC, D.BF16, "N=4,G=3,C=1,K=1,input=1540,filter=15,pad=7", R.ATOMIC),
    Case("dwr-gnhwc-int8-2d-d2", "dwr", L.GNHWC, D.INT8, "N=2,G=1,C=1,K=1,input=62x248,filter=3x3,pad=2,dilation=2", R.ATOMIC),
    Case("dwr-nhwgc-bf16w-1d-wide", "dwr", L.NHWGC, D.BF16_FP32W, "N=2,G=64,C=1,K=1,input=2024,filter=3,pad=1", R.ATOMIC, wide),
]


def pick_instance(case: Case) -> Instance:
    """The case's instance: among lookup's candidates of its family, reduction and property, the one a
    hash of the case name indexes (stable across runs and machines)."""
    candidates = sorted(
        (i for i in lookup(case.problem)
         if i.family == case.family and i.params.reduction is case.reduction
         and (case.pick is None or case.pick(i.params))),
        key=lambda i: i.name,
    )
    assert candidates, f"{case.id}: no {case.family}/{case.reduction.value} instance computes {case.spec}"
    return candidates[zlib.crc32(case.id.encode()) % len(candidates)]


@pytest.fixture(scope="module")
def picked() -> dict[str, Instance]:
    """Every case's instance, their libraries compiled in parallel up front."""
    chosen = {case.id: pick_instance(case) for case in CASES}
    kernel_emulator.prebuild([(chosen[c.id], c.problem) for c in CASES])
    return chosen


def test_cases_reach_every_family_reduction_layout_dtype_and_rank(picked: dict[str, Instance]) -> None:
    """The table is the coverage claim; this keeps it true when cases or catalogs change."""
    seen = {(case.family, picked[case.id].params.reduction) for case in CASES}
    families = SOLVER.families
    for family in families:
        for reduction in Reduction:
            exists = any(i.family == family and i.params.reduction is reduction for i in _catalog())
            assert not exists or (family, reduction) in seen, f"no case runs {family} with {reduction.value}"
        cells = {(picked[c.id].layout, picked[c.id].dtype, picked[c.id].ndim) for c in CASES if c.family == family}
        ranks = {n for (_, _, n) in SOLVER.supported_cells(family)}
        assert {l for l, _, _ in cells} == set(Layout), family
        assert {d for _, d, _ in cells} == set(DType), family
        assert {n for _, _, n in cells} == ranks, family
    # Dynamic shared memory, lanes along groups with vector loads, and both reductions' extra passes ran.
    assert any(_has_dynamic_shared(picked[c.id], c.problem) for c in CASES)
    assert sum(1 for c in CASES if c.pick is wide) >= 4


def _catalog() -> list[Instance]:
    from factory.catalog import select_instances

    return select_instances(SOLVER.op)


def _has_dynamic_shared(inst: Instance, problem: ConvProblem) -> bool:
    plan = SOLVER.launch_plan(inst.family, inst.params, problem)
    return any(isinstance(s, Launch) and s.shared_bytes > 0 for s in plan.steps)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_emulated_conv_matches_reference(case: Case, picked: dict[str, Instance]) -> None:
    inst = picked[case.id]
    verdict = kernel_emulator.check_instance(inst, case.problem, seed=zlib.crc32(case.id.encode()))
    assert verdict.ok, f"{inst.name} on {case.spec}: {verdict.message}"
