"""conv_bwd_data `mma`'s staged store (TileStore.STAGED) and transposing pass: where they apply, their
shared memory and workspace, their names.

The kernels themselves are checked on the host emulator (tests/test_emulated_bwd_data.py, the `staged`
and `transposed` cases) and on the GPU (tests/test_gpu_conv_bwd_data.py)."""

from __future__ import annotations

import dataclasses

from factory.catalog import instance_by_name
from factory.device import TARGETS
from factory.ops.conv_bwd_data import SOLVER
from factory.ops.base import Buf, Launch
from factory.ops.conv.tile_store import TileStore
from factory.ops.conv_bwd_data.mma import ACC_BYTES, MmaParams, PhaseLaunch
from factory.problem import DType, Layout
from factory.selector import lookup

H100 = TARGETS["sm_90a"]
SPEC = "N=2,G=2,C={C},K=16,input=9x7,filter=3x3,stride=2,pad=1"


def _mma(layout: Layout, dtype: DType, channels: int) -> list:
    problem = SOLVER.parse_problem(SPEC.format(C=channels), layout, dtype)
    return [i for i in lookup(problem, target=H100) if i.family == "mma"]


def _staged(instances: list) -> list:
    return [i for i in instances if i.params.store is TileStore.STAGED]


def test_staged_points_serve_channels_last_grad_inputs_whose_c_takes_whole_vectors() -> None:
    assert _staged(_mma(Layout.NHWGC, DType.FP16, 16))  # 8 fp16 a store
    assert _staged(_mma(Layout.GNHWC, DType.FP32, 12))  # 4 fp32
    assert _staged(_mma(Layout.NHWGC, DType.INT8, 4))  # int32 sums: 4 a store
    assert not _staged(_mma(Layout.NHWGC, DType.FP16, 12))
    assert not _staged(_mma(Layout.NHWGC, DType.INT8_SAT, 8))  # int8 results: 16 a store
    assert all(i.params.transpose for i in _staged(_mma(Layout.NGCHW, DType.FP16, 16)))  # only on the copies
    assert _mma(Layout.NHWGC, DType.FP16, 12)  # the element stores still serve it


def test_why_not_here_says_what_a_staged_store_needs() -> None:
    params = MmaParams(128, 64, 32, 4, 2, 3, 4, 4, PhaseLaunch.MERGED, TileStore.STAGED)
    family = SOLVER.family("mma")
    odd = SOLVER.parse_problem(SPEC.format(C=12), Layout.NHWGC, DType.FP16)  # 4-element loads, 8-element stores
    assert "C=12 must divide by 8" in family.why_not_here(params, odd, H100)
    planar = SOLVER.parse_problem(SPEC.format(C=16), Layout.NGCHW, DType.FP16)
    assert "channels-last" in family.why_not_here(dataclasses.replace(params, vector_a=1, vector_b=1), planar, H100)


def test_a_staged_tile_fits_the_shared_memory_it_is_given() -> None:
    element = MmaParams(128, 128, 32, 4, 2, 3, 8, 8)
    staged = dataclasses.replace(element, store=TileStore.STAGED)
    pipeline = element.shared_bytes(Layout.NHWGC, DType.FP16)
    assert pipeline < 128 * (128 + 4) * ACC_BYTES == staged.shared_bytes(Layout.NHWGC, DType.FP16)
    deep = dataclasses.replace(element, stages=6)
    assert dataclasses.replace(deep, store=TileStore.STAGED).shared_bytes(Layout.NHWGC, DType.FP16) == \
        deep.shared_bytes(Layout.NHWGC, DType.FP16)


def test_staged_instances_are_named_apart_and_parse_back() -> None:
    staged = _staged(_mma(Layout.NHWGC, DType.FP16, 16))
    for inst in staged:
        assert "st" in inst.name.split("_mma_")[1].split("_")  # the staged store, groups per tile or not
        assert instance_by_name(inst.name).params == inst.params


def test_the_prior_ranks_a_staged_point_above_the_same_point_storing_elements() -> None:
    problem = SOLVER.parse_problem(SPEC.format(C=64), Layout.NHWGC, DType.BF16)
    family = SOLVER.family("mma")
    element = MmaParams(128, 64, 32, 4, 2, 4, 8, 8)
    staged = dataclasses.replace(element, store=TileStore.STAGED)
    assert family.heuristic_score(staged, problem, H100) > family.heuristic_score(element, problem, H100)


def _transposed(instances: list) -> list:
    return [i for i in instances if i.params.transpose]


def test_transposing_points_serve_ngchw_float_problems_only() -> None:
    assert _transposed(_mma(Layout.NGCHW, DType.FP16, 16))
    assert _transposed(_mma(Layout.NGCHW_GKYXC, DType.FP32, 8))
    assert not _transposed(_mma(Layout.NHWGC, DType.FP16, 16))
    assert not _transposed(_mma(Layout.NGCHW, DType.INT8, 16))
    family = SOLVER.family("mma")
    params = MmaParams(128, 64, 32, 4, 2, 3, 8, 8, PhaseLaunch.MERGED, TileStore.STAGED, transpose=True)
    nhwgc = SOLVER.parse_problem(SPEC.format(C=16), Layout.NHWGC, DType.FP16)
    assert "channels-last already" in family.why_not_here(params, nhwgc, H100)
    per_phase = dataclasses.replace(params, phases=PhaseLaunch.PER_PHASE)
    planar = SOLVER.parse_problem(SPEC.format(C=16), Layout.NGCHW, DType.FP16)
    assert "merged launch" in family.why_not_here(per_phase, planar, H100)
    odd = SOLVER.parse_problem(SPEC.format(C=12), Layout.NGCHW, DType.FP16)  # the copies' chunks need C % 8
    assert "C=12" in family.why_not_here(params, odd, H100)


def test_a_transposing_plan_copies_in_and_back_around_the_main_kernel() -> None:
    family = SOLVER.family("mma")
    params = MmaParams(128, 64, 32, 4, 2, 3, 8, 8, PhaseLaunch.MERGED, TileStore.STAGED, transpose=True)
    for layout, copies_weight in ((Layout.NGCHW, True), (Layout.NGCHW_GKYXC, False)):
        problem = SOLVER.parse_problem(SPEC.format(C=16), layout, DType.FP16)
        plan = family.launch_plan(params, problem, H100)
        entries = [s.entry for s in plan.steps if isinstance(s, Launch)]
        # grad_output's 32 rows of 20 positions in registers (16 and 8 bytes); the weight's 9 taps and
        # grad_input's 63 positions through the shared tile
        assert entries == (["kf_to_channels_last_c16s8"] + ["kf_to_channels_last"] * copies_weight
                           + ["kf_main", "kf_to_channels_last"])
        # grad_output (2*2*16*5*4 halves), grad_input (2*2*16*9*7), the weight (2*16*9*16) in 256-byte steps
        sizes = [2 * 2 * 16 * 20 * 2, 2 * 2 * 16 * 63 * 2] + ([2 * 16 * 9 * 16 * 2] if copies_weight else [])
        assert plan.workspace_bytes == sum(-(-b // 256) * 256 for b in sizes)
        back = plan.steps[-1]
        assert back.args[1].name == "grad_input" and back.grid[2] == problem.N
    # A 1x1 GKCYX weight is GKYXC already: no copy (on the H100 the identity copy of a 1024 x 2048 weight, 32768
    # blocks of 64 elements, took longer than the main kernel).
    pointwise = SOLVER.parse_problem("N=2,G=1,C=16,K=24,input=7x7,filter=1x1", Layout.NGCHW, DType.FP16)
    plan = family.launch_plan(params, pointwise, H100)
    assert [s.entry for s in plan.steps if isinstance(s, Launch)] == ["kf_to_channels_last", "kf_main", "kf_to_channels_last"]
    assert plan.steps[1].args[0].fields[2] == ("wei", Buf("weight"))


def test_the_prior_weighs_the_transposing_pass_by_what_the_in_place_reads_lack_and_the_size() -> None:
    from factory.ops.conv_bwd_data.mma import transposed_gain

    def gain(spec: str, dtype: DType = DType.FP16, layout: Layout = Layout.NGCHW) -> float:
        return transposed_gain(SOLVER.parse_problem(spec, layout, dtype))

    large = "N=32,G=1,C=256,K=256,input=28x28,filter=3x3,stride=2,pad=1"  # element-wise in place, 16 MB
    assert gain(large) == 0.9 and gain(large, DType.FP32) == 0.2
    assert gain("N=8,G=5,C=16,K=16,input=10x16,filter=3x3,stride=2,pad=1") == -1.0  # 0.3 MB: the launches weigh
    assert gain("N=128,G=1,C=368,K=104,input=40x40,filter=1x1") == -0.5  # pointwise: chunked in place already


def test_the_copy_back_refuses_inputs_past_its_grid() -> None:
    family = SOLVER.family("mma")
    params = MmaParams(128, 64, 32, 4, 2, 3, 8, 8, PhaseLaunch.MERGED, TileStore.STAGED, transpose=True)
    odd = SOLVER.parse_problem("N=1,G=1,C=8,K=8,input=4200001,filter=3,pad=1", Layout.NGCHW, DType.FP16)
    assert "copying grad_input back through the shared tile" in family.why_not_here(params, odd, H100)
    fits = SOLVER.parse_problem("N=1,G=1,C=8,K=8,input=4194239,filter=3,pad=1", Layout.NGCHW, DType.FP16)
    assert family.why_not_here(params, fits, H100) is None
    # Whole 16-byte runs of positions go back through the register copy, whose grid has no such row limit.
    whole = SOLVER.parse_problem("N=1,G=1,C=8,K=8,input=4200000,filter=3,pad=1", Layout.NGCHW, DType.FP16)
    assert family.why_not_here(params, whole, H100) is None


def test_depthwise_problems_are_left_to_the_depthwise_families():
    """C = K = 1: no matrix-engine candidate (their best took 1.9-500x the best time on the H100), while
    the portable depthwise families still serve every target, AMD included."""
    for target in (H100, TARGETS["gfx90a"]):
        for layout in Layout:
            problem = SOLVER.parse_problem("N=2,G=8,C=1,K=1,input=9x7,filter=3x3,pad=1", layout, DType.FP16)
            families = {i.family for i in lookup(problem, target=target)}
            assert not families & {"mma", "wgmma", "mfma"}, (target.arch, layout, families)
            assert {"direct", "dwr"} <= families, (target.arch, layout, families)
    dense = SOLVER.parse_problem("N=2,G=8,C=2,K=1,input=9x7,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    assert "mma" in {i.family for i in lookup(dense, target=H100)}
