"""The op/family interface: families are objects with every hook declared, unknown names are errors, and
the device target decides applicability (a family built on an instruction a target lacks does not apply
there, and `list --why` says so)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import pytest

from factory import cli
from factory.catalog import CatalogError, Instance, all_instances, load_catalog_file
from factory.device import DEFAULT_TARGET, TARGETS, MatrixUnit, UnknownTarget, target_for_device, target_named
from factory.ops import SOLVERS
from factory.ops.base import Family, LaunchPlan, OpModule, UnknownFamily
from factory.ops.conv_bwd_weight import ConvBwdWeight
from factory.problem import DType, Layout, Op, parse_conv_problem
from factory.resources import templates_dir
from factory.selector import explain, lookup

PROBLEM = parse_conv_problem("N=2,G=4,C=8,K=8,input=9x9,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)


@dataclass(frozen=True)
class ProbeParams:
    tile: int

    def suffix(self) -> str:
        return f"m{self.tile}"

    def template_values(self) -> dict[str, Any]:
        return {"tile": self.tile}


class Probe(Family):
    """A test-only family built on warpgroup MMA: applicable only where the target has it."""

    name = "probe"
    template = "conv_bwd_weight/dl.hip.j2"
    params_type = ProbeParams
    description = "test-only: needs wgmma"

    def supported_cells(self) -> frozenset:
        return frozenset({(Layout.NHWGC, DType.FP16, 2)})

    def needs(self, params: ProbeParams) -> frozenset[MatrixUnit]:
        return frozenset({MatrixUnit.WGMMA})

    def why_not(self, params: ProbeParams, problem: Any, target: Any) -> str | None:
        return None if problem.K % params.tile == 0 else f"K={problem.K} is not a multiple of {params.tile}"

    def launch_plan(self, params: ProbeParams, problem: Any, target: Any) -> LaunchPlan:
        return LaunchPlan(())

    def template_values(self, params: ProbeParams, layout: Any, dtype: Any, ndim: int) -> dict[str, Any]:
        return params.template_values()

    def heuristic_score(self, params: ProbeParams, problem: Any, target: Any) -> float:
        return 100.0


class WithProbe(ConvBwdWeight):
    family_list = ConvBwdWeight.family_list + (Probe(),)


@pytest.fixture
def probe_op(monkeypatch: pytest.MonkeyPatch) -> OpModule:
    op = WithProbe()
    monkeypatch.setitem(SOLVERS, Op.CONV_BWD_WEIGHT, op)
    return op


def probe_instance(tile: int = 4) -> Instance:
    return Instance(Op.CONV_BWD_WEIGHT, "probe", Layout.NHWGC, DType.FP16, 2, ProbeParams(tile))


def test_every_family_declares_every_hook() -> None:
    for op in SOLVERS.values():
        assert not inspect.isabstract(type(op)), f"{op.op.value} leaves hooks abstract"
        names = [f.name for f in op.family_list]
        assert len(names) == len(set(names)), f"{op.op.value}: two families share a name"
        for family in op.family_list:
            assert not inspect.isabstract(type(family)), f"{family.name} leaves hooks abstract"
            assert family.description and (templates_dir() / family.template).is_file()
            assert family.supported_cells() <= op.supported_cells()


def test_an_unknown_family_is_an_error_not_a_fall_through() -> None:
    op = SOLVERS[Op.CONV_BWD_WEIGHT]
    inst = next(i for i in all_instances() if i.op is Op.CONV_BWD_WEIGHT and i.family == "dl")
    with pytest.raises(UnknownFamily, match="unknown family 'dlx'.*families: dl, dw, dwt, dwr"):
        op.why_not("dlx", inst.params, PROBLEM)
    with pytest.raises(UnknownFamily):
        op.launch_plan("nope", inst.params, PROBLEM)


def test_a_catalog_naming_an_unknown_family_is_refused(tmp_path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('op = "conv_bwd_weight"\nfamily = "dlx"\nlayouts = ["NHWGC"]\ndtypes = ["fp16"]\nndims = [2]\n'
                    "[[point]]\nblock_m = 64\n")
    with pytest.raises(CatalogError, match="bad.toml: unknown family 'dlx'"):
        load_catalog_file(path)


def test_a_family_loads_from_its_catalog_file(tmp_path, probe_op: OpModule) -> None:
    path = tmp_path / "conv_bwd_weight_probe.toml"
    path.write_text('op = "conv_bwd_weight"\nfamily = "probe"\nlayouts = ["NHWGC", "NGCHW"]\ndtypes = ["fp16"]\n'
                    "ndims = [2, 3]\n[[point]]\ntile = [4, 3]\n")
    names = sorted(i.name for i in load_catalog_file(path))
    # Only the family's one supported cell expands.
    assert names == ["conv_bwd_weight_2d_nhwgc_fp16_probe_m3", "conv_bwd_weight_2d_nhwgc_fp16_probe_m4"]


def test_a_matrix_instruction_the_target_lacks_makes_an_instance_inapplicable(probe_op: OpModule) -> None:
    inst = probe_instance()
    assert inst.why_not(PROBLEM, TARGETS["sm_90a"]) is None
    assert inst.why_not(PROBLEM, TARGETS["sm_80"]) == "needs wgmma, which target sm_80 lacks"
    assert inst.why_not(PROBLEM, TARGETS["gfx942"]) == "needs wgmma, which target gfx942 lacks"
    assert inst.why_not_on(TARGETS["sm_90"]) == (  # plain sm_90 code has no wgmma; the H100 in hand is sm_90a
        "needs wgmma, which target sm_90 lacks (its arch-specific ISA sm_90a has it, as a tune on the GPU itself "
        "uses: --target sm_90a)")
    found = lookup(PROBLEM, [inst], TARGETS["sm_90a"])
    assert found == [inst] and lookup(PROBLEM, [inst], TARGETS["sm_80"]) == []
    [rejection] = explain(PROBLEM, [inst], TARGETS["sm_80"])
    assert "wgmma" in rejection.reason
    # The family's own reason comes after the device's.
    assert probe_instance(3).why_not(PROBLEM, TARGETS["sm_90a"]) == "K=8 is not a multiple of 3"


def test_list_why_names_the_missing_instruction(probe_op: OpModule, monkeypatch, capsys) -> None:
    import factory.selector as selector

    real = tuple(i for i in all_instances() if (i.op, i.layout, i.dtype, i.ndim) == (Op.CONV_BWD_WEIGHT, Layout.NHWGC, DType.FP16, 2))
    monkeypatch.setattr(selector, "all_instances", lambda: real + (probe_instance(),))
    monkeypatch.setattr(selector, "instances_of_cell", lambda *cell: real + (probe_instance(),))
    argv = ["list", "--layout", "NHWGC", "--dtype", "fp16", "--problem", PROBLEM.spec(), "--why", "--json"]
    assert cli.main(argv + ["--target", "sm_80"]) == 0
    out = capsys.readouterr().out
    assert '"reason": "needs wgmma, which target sm_80 lacks"' in out
    assert cli.main(argv + ["--target", "sm_90a"]) == 0
    assert "conv_bwd_weight_2d_nhwgc_fp16_probe_m4" in capsys.readouterr().out.split('"rejected"')[0]


def test_targets_by_name_and_by_device() -> None:
    assert target_named("SM_90") is TARGETS["sm_90"] and DEFAULT_TARGET.processors == 132
    assert TARGETS["gfx90a"].wave_size == 64 and TARGETS["sm_90"].wave_size == 32
    with pytest.raises(UnknownTarget, match="unknown target 'sm_7'; choose one of: sm_80"):
        target_named("sm_7")
    h100_pcie = target_for_device("sm_90", 114)
    assert h100_pcie.processors == 114 and h100_pcie.shared_optin == TARGETS["sm_90"].shared_optin
    newer = target_for_device("sm_120", 170)  # a newer arch borrows the nearest older description
    assert newer.arch == "sm_120" and newer.wave_size == 32 and newer.processors == 170
    assert target_for_device("gfx950", 256).wave_size == 64


def test_launch_plans_follow_the_target_s_processor_count() -> None:
    """The streaming GroupNorm families size their grids for the device's resident threads."""
    from factory.ops.groupnorm_bwd import SOLVER as GN, parse_groupnorm_problem

    problem = parse_groupnorm_problem("N=2,C=64,G=8,input=128x128", Layout.NGCHW, DType.FP16)
    inst = next(i for i in all_instances() if i.op is Op.GROUPNORM_BWD and i.family == "fused"
                and i.layout is Layout.NGCHW and i.dtype is DType.FP16 and i.ndim == 2 and i.is_applicable(problem))
    big = GN.launch_plan(inst.family, inst.params, problem, target_for_device("sm_90", 132))
    small = GN.launch_plan(inst.family, inst.params, problem, target_for_device("sm_90", 16))
    assert big.steps[-1].grid[0] > small.steps[-1].grid[0]


def test_dynamic_shared_memory_up_to_the_target_s_opt_in_limit() -> None:
    """dwt's input window may use what a block can get once the backend raises its limit, not 48 KiB."""
    problem = parse_conv_problem("N=256,G=256,C=1,K=1,input=1000,filter=7", Layout.NHWGC, DType.FP32)
    dwt = [i for i in all_instances() if i.family == "dwt" and i.layout is Layout.NHWGC and i.dtype is DType.FP32
           and i.ndim == 1]
    wide = [i for i in dwt if 48 * 1024 < sum(i.params.shared_bytes(problem)) <= TARGETS["sm_90"].shared_optin]
    assert wide, "no 1-D dwt point needs more than 48 KiB here"
    assert wide[0].why_not(problem, TARGETS["sm_90"]) is None
    assert "shared memory" in wide[0].why_not(problem, TARGETS["gfx90a"])
