"""groupnorm_bwd without a GPU: problems, catalog, launch plans, verification bounds, the CLI, the API's
tensor checks, compiles (NVRTC sm_90 and hiprtc gfx90a per family/layout/dtype; `-m slow`: NVRTC and
hipcc of every instance) and the kernels run on the host (kernel_emulator; `-m slow`: every instance)."""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernel_emulator
from factory import abi, numerics
from factory.catalog import parse_instance_name, select_instances
from factory.cli import main as cli_main
from factory.codegen import render
from factory.ops.base import I32, Launch, Memset, Role
from factory.ops.groupnorm_bwd import (
    CELLS, SOLVER, Finish, GroupNormProblem, Span, geometry, group_segments, parse_groupnorm_problem,
)
from factory.problem import DType, InvalidProblem, Layout, Op, ProblemSyntaxError, UnsupportedProblem
from factory.device import DEFAULT_TARGET
from factory.selector import check_supported, explain, heuristic_pick, lookup
from factory.verify import reference_outputs, verify
from groupnorm_problems import problems as gpu_problems

REPO = Path(__file__).resolve().parents[1]
OP = Op.GROUPNORM_BWD


def instances():
    return select_instances(OP)


def representatives():
    """One instance per (family, finish, layout, dtype), the rank taken in turn."""
    groups: dict[tuple, list] = collections.defaultdict(list)
    for inst in instances():
        groups[(inst.family, str(getattr(inst.params, "finish", "")), inst.layout.value, inst.dtype.value)].append(inst)
    return [min((i for i in groups[key] if i.ndim == 1 + index % 3), key=lambda i: i.name)
            for index, key in enumerate(sorted(groups))]


# --- problems --------------------------------------------------------------------------------------
def test_parse_and_key_round_trip():
    p = parse_groupnorm_problem("N=2,C=64,G=32,input=7x9", Layout.NGCHW, DType.FP16)
    assert (p.N, p.C, p.G, p.input, p.ndim, p.per_group, p.spatial) == (2, 64, 32, (7, 9), 2, 2, 63)
    assert p.op is OP and p.affine
    assert p.key == "groupnorm_bwd:ngchw:fp16:2d:N=2,C=64,G=32,input=7x9"
    assert parse_groupnorm_problem(p.spec(), Layout.NGCHW, DType.FP16) == p
    q = parse_groupnorm_problem("n=1, g=4, c=8, input=3x4x5, affine=0", Layout.NHWGC, DType.BF16)
    assert q.key == "groupnorm_bwd:nhwgc:bf16:3d:N=1,C=8,G=4,input=3x4x5,affine=0"
    assert parse_groupnorm_problem(q.spec(), Layout.NHWGC, DType.BF16) == q
    assert hash(p) != hash(q)


@pytest.mark.parametrize("spec, token", [
    ("N=2,C=64,G=32,input=7x9a", "input='7x9a'"),
    ("N=2,C=64,G=32,input=7x9,K=3", "unknown field 'K'"),
    ("N=2,C=64,G=32,input", "'input'"),
    ("N=2,C=64,G=32,input=7,N=3", "given twice"),
    ("C=64,G=32,input=7x9", "missing N"),
    ("N=two,C=64,G=32,input=7", "N='two'"),
    ("N=2,C=64,G=32,input=7,affine=yes", "affine='yes'"),
])
def test_malformed_spec_names_the_bad_token(spec, token):
    with pytest.raises(ProblemSyntaxError, match=token):
        parse_groupnorm_problem(spec, Layout.NGCHW, DType.FP16)


@pytest.mark.parametrize("spec, field", [
    ("N=2,C=10,G=4,input=7", "C"),
    ("N=0,C=8,G=4,input=7", "N"),
    ("N=1,C=0,G=4,input=7", "C"),
    ("N=1,C=8,G=0,input=7", "G"),
    ("N=1,C=8,G=4,input=7x0", "input"),
    ("N=1,C=8,G=4,input=2x2x2x2", "input"),
    ("N=1,C=8,G=4,input=7,affine=2", "affine"),
])
def test_invalid_sizes_name_the_field(spec, field):
    with pytest.raises(InvalidProblem) as info:
        parse_groupnorm_problem(spec, Layout.NGCHW, DType.FP16)
    assert info.value.field == field


def test_direct_construction_validates():
    with pytest.raises(InvalidProblem, match="not divisible"):
        GroupNormProblem(N=1, C=6, G=4, input=(3,))
    with pytest.raises(InvalidProblem) as info:
        GroupNormProblem(N=1, C=8, G=4, input=[3, 3])  # type: ignore[arg-type]
    assert info.value.field == "input"
    with pytest.raises(InvalidProblem) as info:
        GroupNormProblem(N=True, C=8, G=4, input=(3,))  # type: ignore[arg-type]
    assert info.value.field == "N"


def test_unsupported_cells_name_the_supported_ones():
    p = GroupNormProblem(N=1, C=8, G=4, input=(3,), layout=Layout.GNHWC, dtype=DType.FP16)
    with pytest.raises(UnsupportedProblem, match="ngchw/fp16"):
        check_supported(p)
    with pytest.raises(UnsupportedProblem):
        lookup(dataclasses.replace(p, layout=Layout.NGCHW, dtype=DType.INT8))


# --- catalog -----------------------------------------------------------------------------------------
def test_every_cell_has_its_families_and_names_parse_back():
    counts = collections.Counter((i.layout, i.dtype, i.ndim, i.family) for i in instances())
    for family in SOLVER.families:
        cells = SOLVER.supported_cells(family)
        assert cells <= CELLS and {layout for layout, _, _ in cells} >= {Layout.NGCHW}
        for layout, dtype, ndim in CELLS:
            expected = (layout, dtype, ndim) in cells
            assert (counts[(layout, dtype, ndim, family)] > 0) == expected, (layout, dtype, ndim, family)
    names = [i.name for i in instances()]
    assert len(names) == len(set(names))
    for inst in instances():
        parsed = parse_instance_name(inst.name)
        assert (parsed["op"], parsed["layout"], parsed["dtype"], parsed["ndim"], parsed["family"]) == (
            OP, inst.layout, inst.dtype, inst.ndim, inst.family)
        assert parsed["suffix"] == inst.params.suffix()
        assert inst.params.vector * inst.dtype.tensor.nbytes <= 16


def test_vector_width_follows_the_contiguous_dimension():
    odd_spatial = parse_groupnorm_problem("N=2,C=64,G=32,input=7x9", Layout.NGCHW, DType.FP16)
    assert {i.params.vector for i in lookup(odd_spatial)} == {1}
    reasons = {r.reason for r in explain(odd_spatial) if r.instance.cell_matches(odd_spatial)}
    assert any("spatial size divisible" in r for r in reasons)
    odd_channels = parse_groupnorm_problem("N=2,C=6,G=3,input=8x8", Layout.NHWGC, DType.FP16)
    assert {i.params.vector for i in lookup(odd_channels)} == {1, 2}
    wide = parse_groupnorm_problem("N=2,C=64,G=32,input=8x8", Layout.NHWGC, DType.FP16)
    assert {i.params.vector for i in lookup(wide)} == {1, 2, 4, 8}


def test_every_rank_renders_the_same_kernels():
    """Spatial dims are flattened, so an instance's source differs between ranks only in its name."""
    by_point: dict[tuple, set[str]] = collections.defaultdict(set)
    for inst in instances():
        body = render(inst).split("\n", 1)[1]
        by_point[(inst.family, inst.layout, inst.dtype, inst.params)].add(body)
    assert by_point and all(len(bodies) == 1 for bodies in by_point.values())


def test_heuristic_picks_the_measured_winners_family_with_wide_loads():
    """H100 suite (resnet_gn_256, fp16): group per_sample t512 v8 u4 won in 78 us, the best fused took 96: a
    block re-reads its own rows from L2 where fused reads x and dy twice. Channels-last has no group family."""
    p = parse_groupnorm_problem("N=32,C=256,G=32,input=56x56", Layout.NGCHW, DType.FP16)
    pick = heuristic_pick(p)
    assert pick.family == "group" and pick.params.span is Span.PER_SAMPLE and pick.params.vector == 8
    pick = heuristic_pick(dataclasses.replace(p, layout=Layout.NHWGC))
    assert pick.family == "fused" and pick.params.vector == 8


# --- launch plans ------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, layout, big", [
    ("N=32,C=256,G=32,input=56x56", Layout.NGCHW, True),
    ("N=1,C=128,G=32,input=512x512", Layout.NGCHW, True),
    ("N=32,C=256,G=32,input=56x56", Layout.NHWGC, True),
    ("N=1,C=128,G=32,input=512x512", Layout.NHWGC, True),
    ("N=4,C=320,G=32,input=32x32", Layout.NGCHW, False),
    ("N=3,C=40,G=8,input=7x7", Layout.NHWGC, False),
])
def test_tiles_cover_every_element_and_big_problems_fill_the_gpu(spec, layout, big):
    from factory.ops.groupnorm_bwd.window import window_geometry

    p = parse_groupnorm_problem(spec, layout, DType.FP16)
    for inst in lookup(p):
        if inst.family == "group":  # one block per group or per (n, g), whatever the sizes
            launch = SOLVER.launch_plan(inst.family, inst.params, p).steps[0]
            blocks = p.G * (p.N if inst.params.span is Span.PER_SAMPLE else 1)
            assert launch.grid == (blocks, 1, 1) and launch.block == (inst.params.threads, 1, 1)
            continue
        if inst.family == "resident":  # a persistent grid in rounds: test_resident_rounds_cover_every_unit
            continue
        window = inst.family == "window"  # fused tiles of a fixed length, walked by a persistent grid
        geo = window_geometry(inst.params, p, DEFAULT_TARGET) if window else geometry(inst.params, p)
        threads = geo.lanes * geo.rows
        assert threads <= inst.params.threads, inst.name
        if big and not window:  # at least a quarter of an H100's resident threads, N*C small or not
            assert geo.blocks * threads >= 132 * 512, inst.name
        if layout is Layout.NGCHW:
            assert geo.lanes % 32 == 0
            assert geo.chunk * geo.splits >= p.spatial and geo.tiles * geo.rows >= p.N * p.C
        else:
            assert geo.tiles * geo.lanes * inst.params.vector >= p.C
            assert geo.chunk * geo.splits >= p.spatial
        assert (geo.splits - 1) * geo.chunk < p.spatial  # no empty split


def test_launch_plans_per_family():
    p = parse_groupnorm_problem("N=2,C=64,G=32,input=8x8", Layout.NHWGC, DType.FP16)
    entries = collections.defaultdict(set)
    for inst in lookup(p):
        plan = SOLVER.launch_plan(inst.family, inst.params, p)
        launches = [s.entry for s in plan.steps if isinstance(s, Launch)]
        memsets = [s for s in plan.steps if isinstance(s, Memset)]
        entries[(inst.family, getattr(inst.params, "finish", None))].add(tuple(launches))
        accumulators = 4 * (2 * p.N * p.G + 2 * p.C)
        if inst.family == "resident":  # per-(n, c) sums and the grid barrier's counter
            accumulators = 4 * (2 * p.N * p.C + 1)
        if inst.family == "window":  # fused's, then the ticket and done counters and one a window
            from factory.ops.groupnorm_bwd.window import window_geometry, windows
            count = windows(inst.params, p, window_geometry(inst.params, p, DEFAULT_TARGET)).count
            accumulators += 4 * (2 + count)
        if memsets:
            assert memsets[0].buffer == "workspace" and memsets[0].nbytes == accumulators
        assert plan.workspace_bytes >= accumulators
        for step in plan.steps:
            if isinstance(step, Launch):
                assert all(0 < g < 2**31 for g in step.grid) and math.prod(step.block) <= 1024
    assert entries[("threepass", None)] == {("kf_channel", "kf_group", "kf_dx")}
    assert entries[("fused", Finish.ATOMIC)] == {("kf_stats", "kf_dx")}
    assert entries[("fused", Finish.TWOSTAGE)] == {("kf_stats", "kf_finish", "kf_dx")}
    small = dataclasses.replace(p, layout=Layout.NGCHW)
    for inst in (i for i in lookup(small) if i.family == "group"):
        plan = SOLVER.launch_plan(inst.family, inst.params, small)
        entries[("group", inst.params.span)].add(tuple(s.entry for s in plan.steps))
        per_sample = inst.params.span is Span.PER_SAMPLE
        assert plan.workspace_bytes == (4 * 2 * small.N * small.C if per_sample else 0)
        assert plan.steps[0].grid == ((small.N if per_sample else 1) * small.G, 1, 1)
        segs, seg_len = group_segments(inst.params, small)
        rows = small.per_group * (1 if per_sample else small.N)
        assert segs * seg_len >= small.spatial > (segs - 1) * seg_len and seg_len % (32 * inst.params.vector) == 0
        assert rows * segs <= max(rows, inst.params.threads // 32)  # the block's segment sums fit
    assert entries[("resident", None)] == {("kf_resident", "kf_resident_finish")}
    assert entries[("window", None)] == {("kf_window",)}
    assert entries[("group", Span.PER_GROUP)] == {("kf_group",)}
    assert entries[("group", Span.PER_SAMPLE)] == {("kf_group", "kf_group_finish")}
    plain = dataclasses.replace(p, affine=False)
    inst = next(i for i in lookup(plain) if i.family == "threepass")
    assert [s.entry for s in SOLVER.launch_plan(inst.family, inst.params, plain).steps if isinstance(s, Launch)] == [
        "kf_group", "kf_dx"]


@pytest.mark.parametrize("spec, layout, dtype", [
    ("N=32,C=256,G=32,input=56x56", Layout.NGCHW, DType.FP16),  # 4 rounds of whole groups
    ("N=1,C=128,G=32,input=512x512", Layout.NGCHW, DType.BF16),  # a group over dozens of blocks
    ("N=5,C=36,G=6,input=301x299", Layout.NHWGC, DType.BF16),  # samples split between blocks
    ("N=1,C=288,G=8,input=204x204", Layout.NHWGC, DType.FP32),  # a sample in blocks of whole groups
    ("N=64,C=320,G=32,input=11x11", Layout.NGCHW, DType.FP32),  # one round, many small groups a block
])
def test_resident_rounds_cover_every_unit(spec, layout, dtype):
    """Every unit lies in one round; a round's shares fit a block's shared memory and tile the round
    (a multiple of a warp's load, or of a pixel); the grid is every SM's resident blocks, launched
    cooperatively; the row sums a share touches fit the block's table."""
    from factory.ops.groupnorm_bwd.resident import ROWS_CAP, rounds, rows_per_block

    p = parse_groupnorm_problem(spec, layout, dtype)
    found = [i for i in lookup(p) if i.family == "resident"]
    assert found
    for inst in found:
        plan = rounds(inst.params, p, DEFAULT_TARGET)
        assert plan.round_units >= 1 and plan.count == math.ceil(plan.units / plan.round_units)
        assert plan.share <= plan.cap and plan.share % plan.gran == 0
        assert plan.share * plan.blocks >= plan.round_units * plan.unit_vecs  # the shares cover the round
        assert plan.unit_vecs * plan.units * inst.params.vector == p.numel
        if layout is Layout.NHWGC:  # a unit is a sample's block of whole groups' channels, a pixel a share's grain
            assert plan.gran * inst.params.vector * (plan.units // p.N) == p.C
        assert plan.shared_bytes <= DEFAULT_TARGET.shared_optin
        assert max(rows_per_block(inst.params, p, plan)) <= ROWS_CAP
        launch = next(s for s in SOLVER.launch_plan(inst.family, inst.params, p).steps if isinstance(s, Launch))
        assert launch.cooperative and launch.grid == (132 * inst.params.blocks_per_sm, 1, 1)
        assert launch.shared_bytes == plan.shared_bytes


def test_cooperative_launches_go_through_the_backends_cooperative_call():
    """The executor hands a cooperative Launch to backend.launch_cooperative, the others as before."""
    from factory.executor import PreparedPlan

    p = parse_groupnorm_problem("N=2,C=64,G=8,input=16x16", Layout.NGCHW, DType.FP16)
    inst = next(i for i in lookup(p) if i.family == "resident")
    calls = []

    class Backend:
        def prepare_args(self, values):
            return values

        def launch_prepared(self, kernel, grid, block, prepared, shared_bytes=0, stream=0):
            calls.append(("plain", kernel))

        def launch_cooperative(self, kernel, grid, block, prepared, shared_bytes=0, stream=0):
            calls.append(("cooperative", kernel))

        def memset_async(self, ptr, byte, nbytes, stream=0):
            calls.append(("memset", nbytes))

    class Loaded:
        backend = Backend()

        def kernel(self, entry):
            return entry

    plan = SOLVER.launch_plan(inst.family, inst.params, p)
    prepared = PreparedPlan(Loaded(), plan)
    prepared.bind({s.name: 4096 for s in SOLVER.tensors(p)} | {"workspace": 8192})
    prepared.enqueue()
    assert calls == [("memset", 4 * (2 * p.N * p.C + 1)), ("cooperative", "kf_resident"),
                     ("plain", "kf_resident_finish")]


def test_resident_refuses_what_it_cannot_hold_and_other_vendors():
    from factory.device import target_for_device
    from factory.ops.groupnorm_bwd.resident import rounds

    group = parse_groupnorm_problem("N=1,C=32,G=8,input=1500x1501", Layout.NGCHW, DType.FP16)  # 18 MB a group
    reasons = {r.reason for r in explain(group) if r.instance.family == "resident" and r.instance.cell_matches(group)
               and group.spatial % r.instance.params.vector == 0}
    assert reasons and all("exceed the grid's shared memory" in r for r in reasons)
    # NHWGC: a sample larger than a round, or wider than a block, is taken a block of whole groups at a time
    for spec in ("N=1,C=512,G=32,input=491x491", "N=1,C=4096,G=32,input=3x5"):
        p = parse_groupnorm_problem(spec, Layout.NHWGC, DType.FP16)
        found = [i for i in lookup(p) if i.family == "resident"]
        assert found
        for inst in found:
            plan = rounds(inst.params, p, DEFAULT_TARGET)
            channels = plan.gran * inst.params.vector
            assert channels < p.C and p.C % channels == 0 and channels % p.per_group == 0
            assert channels * 2 >= 32 and plan.units == p.N * p.C // channels
    thin = parse_groupnorm_problem("N=1,C=32,G=2,input=2000x2000", Layout.NHWGC, DType.FP16)  # 32-byte rows
    assert not [i for i in lookup(thin) if i.family == "resident"]
    p = parse_groupnorm_problem("N=4,C=64,G=8,input=32x32", Layout.NGCHW, DType.FP16)
    assert [i for i in lookup(p) if i.family == "resident"]
    amd = target_for_device("gfx90a", 104)
    assert not [i for i in lookup(p, target=amd) if i.family == "resident"]
    assert all(i.params.vector <= 2 for i in instances() if i.family == "resident" and i.layout is Layout.NHWGC)


def test_tensors_and_framework_views():
    p = parse_groupnorm_problem("N=2,C=6,G=3,input=4x5", Layout.NHWGC, DType.BF16)
    specs = {s.name: s for s in SOLVER.tensors(p)}
    assert specs["x"].shape == (2, 4, 5, 3, 2) and specs["x"].dims == "NHWGC"
    assert specs["mean"].shape == (2, 3) and specs["mean"].scalar.name == "F32"
    assert specs["gamma"].shape == (3, 2) and specs["dgamma"].role is Role.OUTPUT
    assert SOLVER.framework_view(p, "x") == ((2, 6, 4, 5), (120, 1, 30, 6))  # channels_last
    assert SOLVER.framework_view(p, "dgamma") == ((6,), (1,))
    assert SOLVER.framework_view(p, "rstd") is None
    q = dataclasses.replace(p, layout=Layout.NGCHW, input=(3, 4, 5), affine=False)
    assert {s.name for s in SOLVER.tensors(q)} == {"x", "dy", "mean", "rstd", "dx"}
    assert SOLVER.framework_view(q, "dy") == ((2, 6, 3, 4, 5), (360, 60, 20, 5, 1))


def test_traffic_counts_each_tensor_once():
    p = parse_groupnorm_problem("N=32,C=256,G=32,input=56x56", Layout.NGCHW, DType.FP16)
    bytes_, macs = SOLVER.traffic(p)
    assert bytes_ == 3 * p.numel * 2 + 2 * 32 * 32 * 4 + 3 * 256 * 2
    assert macs == 4 * p.numel


# --- verification bounds -----------------------------------------------------------------------------
def _verdicts(problem, mutate):
    rng = np.random.default_rng(1)
    host = SOLVER.random_inputs(problem, rng)
    specs = {s.name: s for s in SOLVER.tensors(problem)}
    values = {k: numerics.exact_values(v, specs[k].scalar) for k, v in host.items()}
    ref, scale = reference_outputs(SOLVER, problem, values)
    got = {}
    for name, want in ref.items():
        stored = numerics.to_storage(want, specs[name].scalar)
        got[name] = numerics.exact_values(stored, specs[name].scalar)
    mutate(got)
    return verify(SOLVER, problem, got, ref, scale)


@pytest.mark.parametrize("dtype", [DType.FP16, DType.BF16, DType.FP32])
@pytest.mark.parametrize("spec", ["N=2,C=12,G=3,input=5x6", "N=3,C=4,G=4,input=1x1", "N=1,C=8,G=2,input=300"])
def test_rounded_reference_passes_and_wrong_outputs_fail(dtype, spec):
    p = parse_groupnorm_problem(spec, Layout.NHWGC, dtype)
    assert _verdicts(p, lambda got: None).ok

    def nan(got):
        got["dx"].flat[-1] = np.nan

    def dx_off(got):  # every third dx element off by 0.05 (dx is O(1); it cancels to ~0 when C/G = S = 1)
        got["dx"].reshape(-1)[::3] += 0.05

    def dbeta_off(got):
        got["dbeta"].flat[0] += 0.01 * max(1.0, abs(got["dbeta"].flat[0]))

    for mutate in (nan, dx_off, dbeta_off):
        assert not _verdicts(p, mutate).ok, mutate.__name__


def test_random_inputs_hold_the_statistics_of_x():
    p = parse_groupnorm_problem("N=3,C=8,G=2,input=5x7", Layout.NHWGC, DType.BF16)
    host = SOLVER.random_inputs(p, np.random.default_rng(0))
    specs = {s.name: s for s in SOLVER.tensors(p)}
    assert {k: v.dtype for k, v in host.items()} == {
        "x": np.uint16, "dy": np.uint16, "mean": np.float32, "rstd": np.float32, "gamma": np.uint16}
    assert all(host[k].shape == specs[k].shape for k in host)
    x = numerics.exact_values(host["x"], specs["x"].scalar)
    groups = x.reshape(3, 35, 2, 4).transpose(0, 2, 1, 3).reshape(3, 2, -1)
    np.testing.assert_allclose(host["mean"], groups.mean(-1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(host["rstd"], 1 / np.sqrt(groups.var(-1) + 1e-5), rtol=1e-6)
    assert np.ptp(host["mean"]) > 0.1 and np.all(host["rstd"] > 0)


# --- command line and API ------------------------------------------------------------------------------
def test_cli_list_generate_and_query(tmp_path, capsys):
    spec = "N=2,C=64,G=32,input=7x9"
    assert cli_main(["list", "--op", "groupnorm_bwd", "--layout", "NGCHW", "--dtype", "fp16", "--problem", spec,
                     "--why", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["problem"] == "groupnorm_bwd:ngchw:fp16:2d:" + spec
    assert listed["applicable"] and all(r["params"]["vector"] == 1 for r in listed["applicable"])
    assert any("spatial size" in r["reason"] for r in listed["rejected"])
    out = tmp_path / "gen"
    assert cli_main(["generate", "--op", "groupnorm_bwd", "--layout", "NHWGC", "--dtype", "bf16", "--ndim", "3",
                     "--out", str(out)]) == 0
    capsys.readouterr()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["op"] == "groupnorm_bwd" and len(manifest["instances"]) == len(
        select_instances(OP, Layout.NHWGC, DType.BF16, 3))
    assert cli_main(["query", "--op", "groupnorm_bwd", "--layout", "NGCHW", "--dtype", "fp16", "--problem", spec,
                     "--db", str(tmp_path / "t.db"), "--json"]) == 0
    query = json.loads(capsys.readouterr().out)
    assert query["tuned"] is False and query["heuristic"].startswith("groupnorm_bwd_2d_ngchw_fp16_")
    assert cli_main(["list", "--op", "groupnorm_bwd", "--layout", "NGCHW", "--dtype", "fp16",
                     "--problem", "N=2,C=10,G=4,input=7"]) == 2
    assert "invalid C" in capsys.readouterr().err


class RecordingBackend:
    """A device-free backend: Kernel compiles for real (NVRTC, sm_90) and every launch is recorded."""

    def __init__(self) -> None:
        from factory.backends import BackendKind, DeviceInfo

        self.kind = BackendKind.CUDA
        self.info = DeviceInfo(BackendKind.CUDA, "sm_90", "no device", 132, "0", "nvrtc")
        self.launches: list[tuple[str, tuple]] = []
        self.memsets: list[tuple[int, int]] = []

    def device_info(self):
        return self.info

    def load(self, binary: bytes, kernel_name: str) -> str:
        return kernel_name

    def prepare_args(self, args):
        return args

    def launch_prepared(self, kernel, grid, block, prepared, shared_bytes=0, stream=0) -> None:
        self.launches.append((kernel, abi.flatten(prepared)))

    def memset_async(self, ptr: int, byte: int, nbytes: int, stream: int = 0) -> None:
        self.memsets.append((ptr, nbytes))

    def alloc(self, nbytes: int) -> int:
        return 0x7000_0000


@pytest.fixture
def host_tensors_as_device(host_tensors_as_device, monkeypatch, tmp_path):
    """conftest's host-tensors-as-device, with NVRTC (kernels compile for real) and a private cache."""
    pytest.importorskip("cuda.bindings")
    monkeypatch.setenv("KFACTORY_CACHE_DIR", str(tmp_path / "binaries"))


@pytest.mark.parametrize("layout", [Layout.NGCHW, Layout.NHWGC])
def test_api_takes_pytorch_shaped_tensors_and_refuses_wrong_ones(layout, host_tensors_as_device):
    torch = pytest.importorskip("torch")
    from factory.api import SelectMode, TensorMismatch, select

    p = parse_groupnorm_problem("N=2,C=6,G=3,input=4x5", layout, DType.FP16)
    backend = RecordingBackend()
    kernel = select(p, mode=SelectMode.HEURISTIC, backend=backend)
    fmt = torch.channels_last if layout is Layout.NHWGC else torch.contiguous_format

    def tensors(**overrides):
        act = {k: torch.zeros(2, 6, 4, 5, dtype=torch.float16).to(memory_format=fmt) for k in ("x", "dy", "dx")}
        small = {k: torch.zeros(6, dtype=torch.float16) for k in ("gamma", "dgamma", "dbeta")}
        stats = {k: torch.zeros(2, 3) for k in ("mean", "rstd")}
        return act | small | stats | overrides

    good = tensors()
    kernel.run(**good)
    assert [k for k, _ in backend.launches] == [s.entry for s in kernel.plan.steps if isinstance(s, Launch)]
    sent = {ptr for _, args in backend.launches for ptr in args}
    assert {good[k].data_ptr() for k in ("x", "dy", "mean", "rstd", "dx")} <= sent
    physical = {n: torch.zeros(s.shape, dtype=torch.float32 if n in ("mean", "rstd") else torch.float16)
                for n, s in kernel.specs.items()}
    kernel.run(**physical)  # contiguous physical layouts are accepted too
    other = torch.contiguous_format if layout is Layout.NHWGC else torch.channels_last
    bad = {
        "x": torch.zeros(2, 6, 4, 5, dtype=torch.float16).to(memory_format=other),
        "dy": torch.zeros(2, 6, 5, 4, dtype=torch.float16),
        "mean": torch.zeros(2, 3, dtype=torch.float16),
        "rstd": torch.zeros(2, 6),
        "gamma": torch.zeros(6),
        "dgamma": torch.zeros(3, dtype=torch.float16),
    }
    for name, tensor in bad.items():
        with pytest.raises(TensorMismatch, match=name):
            kernel.run(**tensors(**{name: tensor}))
    with pytest.raises(TensorMismatch, match="missing"):
        kernel.run(**{k: v for k, v in good.items() if k != "rstd"})


# --- compiles -------------------------------------------------------------------------------------------
def _compile_nvrtc(inst):
    pytest.importorskip("cuda.bindings")
    from factory.backends.cuda import compile_cuda, cuda_include_dir

    if cuda_include_dir() is None:
        pytest.skip("no CUDA headers for NVRTC")
    return compile_cuda(render(inst), "sm_90")


@pytest.mark.parametrize("inst", representatives(), ids=lambda i: i.name)
def test_nvrtc_compiles_each_cell(inst):
    binary = _compile_nvrtc(inst)
    assert binary.binary[:4] == b"\x7fELF"


@pytest.mark.slow
@pytest.mark.parametrize("inst", [i for i in instances() if i.ndim == 2], ids=lambda i: i.name)
def test_nvrtc_compiles_every_instance(inst):
    """Every rank renders the same kernels (test above), so rank 2 stands for all three."""
    assert _compile_nvrtc(inst).binary[:4] == b"\x7fELF"


def _hipcc(inst, tmp_path):
    from factory.backends.hip_offline import compile_with_hipcc, hipcc_available

    if not hipcc_available():
        pytest.skip("hipcc is not on PATH")
    return compile_with_hipcc(render(inst), "gfx90a", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("inst", [i for i in instances() if i.ndim == 2], ids=lambda i: i.name)
def test_hipcc_compiles_every_instance(inst, tmp_path):
    """One instance per cell is built with hipcc by tests/test_compile_cells.py; here, all of them."""
    assert _hipcc(inst, tmp_path)[:4] == b"\x7fELF"


HIPRTC_SCRIPT = r"""
import json, sys
from factory.backends.hip import compile_hip
from factory.catalog import instance_by_name
from factory.codegen import render
failed = {}
for name in sys.argv[1:]:
    try:
        compile_hip(render(instance_by_name(name)), "gfx90a")
    except Exception as exc:
        failed[name] = str(exc)[:2000]
print(json.dumps(failed))
"""


def test_hiprtc_compiles_each_cell(tmp_path):
    pytest.importorskip("hip")
    from factory.backends.hip_offline import find_hiprtc_library, hiprtc_env

    if find_hiprtc_library() is None:
        pytest.skip("no library providing hiprtc is installed")
    env = hiprtc_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    names = [i.name for i in representatives()]
    proc = subprocess.run([sys.executable, "-c", HIPRTC_SCRIPT, *names], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {}


# --- host-emulated runs ----------------------------------------------------------------------------------
needs_gxx = pytest.mark.skipif(not kernel_emulator.available(), reason="g++ is not on PATH")
EMULATED = gpu_problems()[:-1]  # all but the largest


def _emulated_pairs():
    """Each representative family/finish/layout/dtype on one problem of its cell (or its layout/dtype)."""
    pairs = []
    for inst in representatives():
        fits = [p for p in EMULATED if (p.layout, p.dtype) == (inst.layout, inst.dtype)]
        for p in fits:
            candidates = [i for i in lookup(p) if i.family == inst.family
                          and getattr(i.params, "finish", None) == getattr(inst.params, "finish", None)
                          and kernel_emulator.can_emulate(i, p)]
            if candidates:
                pairs.append((max(candidates, key=lambda i: (i.params.vector, i.name)), p))
                break
    return pairs


@needs_gxx
@pytest.mark.parametrize("inst, problem", _emulated_pairs(), ids=lambda v: getattr(v, "name", None) or v.key)
def test_emulated_instance_matches_reference(inst, problem):
    verdict = kernel_emulator.check_instance(inst, problem)
    assert verdict.ok, verdict.message


@needs_gxx
@pytest.mark.slow
@pytest.mark.parametrize("problem", EMULATED, ids=lambda p: p.key)
def test_emulated_every_applicable_instance_matches_reference(problem):
    failed = [f"{i.name}: {v.message}" for i in lookup(problem) if kernel_emulator.can_emulate(i, problem)
              and not (v := kernel_emulator.check_instance(i, problem)).ok]
    assert not failed, "\n".join(failed)


@needs_gxx
def test_emulator_catches_a_wrong_kernel(monkeypatch):
    """The same instance, told the wrong group count in its sums kernel, must fail verification."""
    p = parse_groupnorm_problem("N=2,C=8,G=4,input=6x6", Layout.NGCHW, DType.FP32)
    inst = max((i for i in lookup(p) if i.family == "fused"), key=lambda i: i.name)
    original = SOLVER.launch_plan
    assert kernel_emulator.check_instance(inst, p).ok

    def wrong_groups(family, params, problem):
        plan = original(family, params, problem)
        stats = next(s for s in plan.steps if isinstance(s, Launch) and s.entry == "kf_stats")
        common, *rest = stats.args
        assert common["G"].value == problem.G
        args = (common.replace(G=I32(problem.G // 2)), *rest)
        steps = tuple(dataclasses.replace(s, args=args) if s is stats else s for s in plan.steps)
        return dataclasses.replace(plan, steps=steps)

    monkeypatch.setattr(SOLVER, "launch_plan", wrong_groups)
    assert not kernel_emulator.check_instance(inst, p).ok


# `group` with `hold`: x and dy of the block's rows kept in shared memory between the sums and dx.
HOLD_PROBLEMS = [
    (Layout.NGCHW, DType.FP16, "N=3,C=32,G=8,input=12x10"),  # per (n, g): 4 rows of 120
    (Layout.NGCHW, DType.FP32, "N=2,C=8,G=2,input=16x12"),  # per group: both samples' rows
    (Layout.NGCHW, DType.BF16, "N=2,C=12,G=3,input=5x8,affine=0"),
    (Layout.NGCHW, DType.FP16, "N=1,C=16,G=4,input=4x6x8"),
]


def _held(spec: tuple) -> tuple[GroupNormProblem, list]:
    layout, dtype, text = spec
    p = parse_groupnorm_problem(text, layout, dtype)
    held = sorted((i for i in lookup(p) if i.family == "group" and i.params.hold), key=lambda i: i.name)
    return p, held


@needs_gxx
@pytest.mark.parametrize("spec", HOLD_PROBLEMS, ids=lambda s: s[2])
def test_emulated_group_hold_matches_reference(spec):
    """Both spans, every dtype, a rank of 3, no affine: the widest and the narrowest held instance."""
    p, held = _held(spec)
    assert held, f"no held group instance for {p.key}"
    for inst in {held[0], held[-1]}:
        verdict = kernel_emulator.check_instance(inst, p)
        assert verdict.ok, f"{inst.name}: {verdict.message}"


@needs_gxx
def test_emulator_catches_a_held_block_short_of_shared_memory(monkeypatch):
    """The held rows past half the dynamic shared memory overrun it: the emulator's guard must say so."""
    p, held = _held(HOLD_PROBLEMS[0])
    inst = held[-1]
    original = SOLVER.launch_plan
    assert kernel_emulator.check_instance(inst, p).ok

    def half_shared(family, params, problem):
        plan = original(family, params, problem)
        steps = tuple(dataclasses.replace(s, shared_bytes=s.shared_bytes // 2)
                      if isinstance(s, Launch) and s.shared_bytes else s for s in plan.steps)
        return dataclasses.replace(plan, steps=steps)

    monkeypatch.setattr(SOLVER, "launch_plan", half_shared)
    verdict = kernel_emulator.check_instance(inst, p)
    assert not verdict.ok and "dynamic shared memory overrun" in verdict.message, verdict.message


def test_hold_refused_where_the_rows_do_not_fit_shared_memory():
    """One (n, g) of 4 channels of 64x64 holds (64 KB of x and dy); the group's 4 samples (256 KB) do not."""
    p = parse_groupnorm_problem("N=4,C=64,G=16,input=64x64", Layout.NGCHW, DType.FP16)
    held = [i for i in select_instances(OP) if i.family == "group" and i.params.hold and i.dtype is DType.FP16
            and i.layout is Layout.NGCHW and i.ndim == 2]
    reasons = {i.params.span: SOLVER.why_not(i.family, i.params, p, DEFAULT_TARGET) for i in held}
    assert reasons[Span.PER_SAMPLE] is None
    assert "shared memory" in reasons[Span.PER_GROUP]


def _tile_groups(p, geo, b):
    """The (n, g) groups a fused tile touches, from its rows (NGCHW) or its sample (NHWGC)."""
    if p.layout is Layout.NHWGC:
        n = b // (geo.splits * geo.tiles)
        return {(n, g) for g in range(p.G)}
    tile = b // geo.splits
    rows = range(tile * geo.rows, min(p.N * p.C, (tile + 1) * geo.rows))
    return {(r // p.C, (r % p.C) // p.per_group) for r in rows}


@pytest.mark.parametrize("spec, layout", [
    ("N=16,C=1248,G=32,input=11x11", Layout.NGCHW),  # 39 channels a group across tiles of several rows
    ("N=3,C=24,G=6,input=5x7", Layout.NGCHW),  # several groups a tile
    ("N=1,C=64,G=4,input=700x701", Layout.NGCHW),  # rows split across many tiles
    ("N=5,C=36,G=6,input=31x29", Layout.NHWGC),
    ("N=2,C=512,G=32,input=300x211", Layout.NHWGC),  # samples larger than a window
])
def test_window_dx_tiles_wait_only_for_sums_handed_out_before_them(spec, layout):
    """Brute force over tiles: the windows a dx tile waits for (needed_windows, the kernel's
    gn_needed_windows) are exactly those holding a sums tile of one of its groups, and the ticket order
    hands all of them out before the dx tile, so no block waits for a tile nobody holds."""
    from factory.ops.groupnorm_bwd.window import needed_windows, window_geometry, windows

    p = parse_groupnorm_problem(spec, layout, DType.FP16)
    found = [i for i in lookup(p) if i.family == "window"]
    assert found
    for inst in found:
        for window_mb in (1, inst.params.window_mb):  # 1 MiB: many windows
            params = dataclasses.replace(inst.params, window_mb=window_mb)
            geo = window_geometry(params, p, DEFAULT_TARGET)
            plan = windows(params, p, geo)
            lo, hi = needed_windows(p, geo, plan.size)
            owners: dict = collections.defaultdict(set)
            for b in range(geo.blocks):
                for group in _tile_groups(p, geo, b):
                    owners[group].add(b // plan.size)
            for b in range(0, geo.blocks, max(1, geo.blocks // 200)):
                wanted = set().union(*(owners[g] for g in _tile_groups(p, geo, b)))
                assert (lo[b], hi[b]) == (min(wanted), max(wanted))
                # dx of window w comes after the sums of window w + lag (or of every window)
                assert hi[b] <= min(plan.count - 1, b // plan.size + plan.lag)
            assert plan.count == math.ceil(geo.blocks / plan.size) and 1 <= plan.lag <= plan.count


@needs_gxx
def test_emulated_window_over_many_windows_matches_reference(monkeypatch):
    """Windows of a few KiB: every tile's sums and dx handed out once over dozens of windows, on the host.
    The emulator runs one block at a time (that block takes every ticket), so the waits between blocks
    are checked by the formula test above and on the GPU (test_gpu_groupnorm_bwd.py)."""
    from factory.ops.groupnorm_bwd import window

    monkeypatch.setattr(window, "MIB", 4096)
    for spec, layout in (("N=3,C=48,G=6,input=61x64", Layout.NGCHW), ("N=10,C=16,G=4,input=21x23", Layout.NHWGC)):
        p = parse_groupnorm_problem(spec, layout, DType.FP16)
        inst = next(i for i in lookup(p) if i.family == "window")
        plan = window.windows(inst.params, p, window.window_geometry(inst.params, p, DEFAULT_TARGET))
        assert plan.count > 3
        verdict = kernel_emulator.check_instance(inst, p)
        assert verdict.ok, verdict.message
