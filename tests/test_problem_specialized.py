"""Problem-specialized instances: a catalog point whose field says "problem" is completed by lookup()
with what the family takes from the problem (dwr: filter, uniform stride and dilation), so a filter the
catalog never lists (a 31-tap 1-D, a 9x9, an 11x11 stride 2) gets compiled-in kernels. Their names
parse back, they compute the right answer (kernel_emulator), `generate --problem` writes them, a tune
measures them and the DB serves a winner of one by name."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

import kernel_emulator
from factory import api, cli
from factory.api import select
from factory.catalog import (
    CatalogError,
    _specialized,
    _specialized_all,
    _specialized_by_name,
    all_instances,
    instance_by_name,
    instances_of_cell,
    read_catalog_file,
    specialized_instances,
)
from factory.device import TARGETS
from factory.ops.conv_bwd_weight import SOLVER
from factory.problem import DType, Layout, Op, parse_conv_problem
from factory.resources import instances_dir
from factory.selector import explain, lookup, stored_choice, with_specialized
from fake_gpu import DEVICE, SETTINGS, FakeGPU, code_of, isolate
from tuning_db import Measurement, TuningDB

pytestmark = pytest.mark.filterwarnings("ignore:.*cannot be rebuilt in a worker process:RuntimeWarning")

# (id, spec, layout, dtype, the compiled-in filter/stride/dilation the names must spell)
NEW_FILTERS = [
    ("1d-31", "N=4,G=8,C=1,K=1,input=2100,filter=31,pad=15", Layout.NHWGC, DType.FP16, "_k1x31s1d1_"),
    ("2d-9x9", "N=2,G=2,C=1,K=1,input=40x40,filter=9x9,pad=4", Layout.NGCHW, DType.FP32, "_k9x9s1d1_"),
    ("2d-11x11-s2", "N=2,G=16,C=1,K=1,input=90x90,filter=11x11,stride=2,pad=5", Layout.NHWGC, DType.BF16,
     "_k11x11s2d1_"),
]
IDS = [case[0] for case in NEW_FILTERS]


def problem_of(case: tuple) -> object:
    _, spec, layout, dtype, _ = case
    return parse_conv_problem(spec, layout, dtype)


def dwr_of(problem) -> list:
    return [i for i in lookup(problem) if i.family == "dwr"]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)


# --- lookup and names ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", NEW_FILTERS, ids=IDS)
def test_a_filter_the_catalog_does_not_list_gets_dwr_instances_whose_names_parse_back(case):
    problem = problem_of(case)
    listed = {i.name for i in all_instances()}
    found = dwr_of(problem)
    assert found, "no dwr instance specialized for the problem"
    for inst in found:
        assert case[4] in inst.name and inst.name not in listed
        assert inst.why_not(problem) is None
        assert instance_by_name(inst.name) == inst
    assert len({i.name for i in found}) == len(found)


def test_the_listed_points_come_first_and_specializations_repeat_no_name():
    problem = parse_conv_problem("N=2,G=16,C=1,K=1,input=90x90,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    found = [i.name for i in lookup(problem)]
    listed = {i.name for i in all_instances()}
    assert len(found) == len(set(found))
    first_special = next(n for n, name in enumerate(found) if name not in listed)
    assert all(name not in listed for name in found[first_special:])
    assert all(name in listed for name in found[:first_special])


def test_a_non_uniform_stride_gets_no_specialized_instance_of_one_stride_families():
    """dwr and dwh compile one stride for every axis; dwl compiles each axis's own (k9x9s1x2...)."""
    problem = parse_conv_problem("N=2,G=16,C=1,K=1,input=90x90,filter=9x9,stride=1x2,pad=4", Layout.NHWGC, DType.FP16)
    assert {i.family for i in specialized_instances(problem)} == {"dwl"}
    assert all("_k9x9s1x2d1x1_" in i.name for i in specialized_instances(problem))
    assert not dwr_of(problem) and lookup(problem)  # the generic families still serve it
    assert not any("_k9x9" in r.instance.name for r in explain(problem) if r.instance.family != "dwl")


CELL = (Op.CONV_BWD_WEIGHT, Layout.NHWGC, DType.FP16, 2)


def test_specializations_are_cached_per_filter_not_per_problem():
    """Problems that differ only in what no family compiles in (N, the plane, padding) share one tuple of
    specialized instances; dwh's column stride (G in NHWGC) makes another G a new specialization."""
    one = parse_conv_problem("N=2,G=16,C=1,K=1,input=90x90,filter=9x9,pad=4", Layout.NHWGC, DType.FP16)
    other = parse_conv_problem("N=8,G=16,C=1,K=1,input=64x50,filter=9x9,pad=0", Layout.NHWGC, DType.FP16)
    first, second = specialized_instances(one), specialized_instances(other)
    assert first and second is first  # one tuple per (cell, values): lookup memoizes its merge on it
    assert lookup(other) and with_specialized(instances_of_cell(*CELL), one) is with_specialized(instances_of_cell(*CELL), other)
    wider = parse_conv_problem("N=8,G=32,C=1,K=1,input=64x50,filter=9x9,pad=0", Layout.NHWGC, DType.FP16)
    strides = {i.params.w_stride for i in specialized_instances(wider) if i.family == "dwh"}
    assert strides == {32} and specialized_instances(wider) is not first


@pytest.mark.parametrize("name, why", [
    # vector 2 is no template's value for a 9x9 (the vector-2 points are the listed 3x3 ones)
    ("conv_bwd_weight_2d_nhwgc_fp16_dwr_l32x8_v2_b2x2_k9x9s1d1_o1_sk256_atomic", "no template"),
    ("conv_bwd_weight_2d_nhwgc_fp16_dwr_l32x8_v1_b2x2_k9x9s1d1_o1_sk256", "no reduction"),
    ("conv_bwd_weight_2d_nhwgc_fp16_dwr_l32x8_v1_b2x2_k1x9s1d1_o1_sk256_atomic", "1-D filter in a 2-D cell"),
    ("conv_bwd_weight_2d_nhwgc_fp16_dwr_l32x8_v1_b2x2_k09x9s1d1_o1_sk256_atomic", "not how the suffix spells 9"),
])
def test_a_name_that_fills_no_template_is_no_instance(name, why):
    with pytest.raises(CatalogError, match="no instance named"):
        instance_by_name(name)


def test_a_spelled_specialization_parses_without_its_problem():
    name = "conv_bwd_weight_2d_nhwgc_fp16_dwr_l32x8_v1_b2x2_k9x9s1d1_o1_sk256_atomic"
    inst = instance_by_name(name)
    assert inst.name == name and (inst.params.filter_h, inst.params.filter_w) == (9, 9)


@pytest.mark.parametrize("layout, stride", [(Layout.NHWGC, 40), (Layout.NGCHW, 1), (Layout.NGCHW_GKYXC, 1), (Layout.GNHWC, 1)])
def test_dwh_compiles_the_problems_column_stride_in_and_refuses_another(layout, stride):
    """dwh's specialized instances carry the elements between adjacent columns (G in NHWGC, 1 in the
    W-contiguous layouts); their names spell it and parse back, and one compiled for another stride is
    refused with the reason rather than run with wrong offsets."""
    problem = parse_conv_problem("N=4,G=40,C=1,K=1,input=37x29,filter=5x5,pad=2", layout, DType.BF16)
    found = [i for i in specialized_instances(problem) if i.family == "dwh"]
    assert found and {i.params.w_stride for i in found} == {stride}
    assert all(instance_by_name(i.name) == i and re.search(f"_w{stride}(_a[12])?$", i.name) for i in found)
    other = parse_conv_problem("N=4,G=48,C=1,K=1,input=37x29,filter=5x5,pad=2", layout, DType.BF16)
    reasons = {i.why_not(other) for i in found}
    if layout is Layout.NHWGC:
        assert all(r and "column stride of 40 elements, problem has 48" in r for r in reasons)
    else:
        assert None in reasons  # the stride is 1 whatever G is


# --- the kernels compute the right answer ---------------------------------------------------------
@pytest.mark.skipif(not kernel_emulator.available(), reason="g++ is not on PATH")
@pytest.mark.parametrize("case", NEW_FILTERS, ids=IDS)
def test_specialized_instances_match_the_reference(case):
    problem = problem_of(case)
    inst = min(dwr_of(problem), key=lambda i: (i.params.split_k, i.name))
    verdict = kernel_emulator.check_instance(inst, problem)
    assert verdict.ok, f"{inst.name}: {verdict}"


# Shapes no dwr kernel was compiled for before templates: 1-D stride and dilation, even and non-square
# filters, asymmetric padding, stride with dilation; every layout and dtype among them.
ODD_SHAPES = [
    (Layout.NGCHW_GKYXC, DType.FP32, "N=2,G=3,C=1,K=1,input=3001,filter=9,stride=2,pad=4", False),
    (Layout.NHWGC, DType.FP16, "N=2,G=8,C=1,K=1,input=2500,filter=5,dilation=3,pad=6", True),
    (Layout.NHWGC, DType.INT8, "N=2,G=8,C=1,K=1,input=2500,filter=4,stride=3,pad_left=1,pad_right=2", False),
    (Layout.GNHWC, DType.BF16_FP32W, "N=2,G=2,C=1,K=1,input=60x50,filter=4x4,stride=2,pad_left=1,pad_right=2", False),
    (Layout.NHWGC, DType.BF16, "N=2,G=16,C=1,K=1,input=70x66,filter=5x3,stride=2,dilation=2,pad=3", False),
]


@pytest.mark.skipif(not kernel_emulator.available(), reason="g++ is not on PATH")
@pytest.mark.parametrize("layout, dtype, spec, lanes", ODD_SHAPES, ids=[s[2] for s in ODD_SHAPES])
def test_odd_specialized_shapes_match_the_reference(layout, dtype, spec, lanes):
    """`lanes`: the channels-last block with the most rows (threads along groups); else the fewest splits."""
    problem = parse_conv_problem(spec, layout, dtype)
    found = [i for i in dwr_of(problem) if (i.params.threads_lane > 1) == lanes]
    inst = max(found, key=lambda i: (i.params.rows, i.name)) if lanes else min(found, key=lambda i: (i.params.split_k, i.name))
    verdict = kernel_emulator.check_instance(inst, problem)
    assert verdict.ok, f"{inst.name}: {verdict}"


@pytest.mark.skipif(not kernel_emulator.available(), reason="g++ is not on PATH")
def test_a_kernel_specialized_for_another_dilation_fails_the_check():
    """The check above can fail: the 9x9 kernel with dilation 2 compiled in, run on the dilation-1 problem."""
    problem = problem_of(NEW_FILTERS[1])
    inst = min(dwr_of(problem), key=lambda i: (i.params.split_k, i.name))
    wrong = dataclasses.replace(inst, params=dataclasses.replace(inst.params, dilation=2))
    assert not kernel_emulator.check_instance(wrong, problem).ok


# --- catalogs ----------------------------------------------------------------------------------------
def write_catalog(tmp_path: Path, family: str, point: str) -> Path:
    path = tmp_path / f"conv_bwd_weight_{family}.toml"
    path.write_text(f'op = "conv_bwd_weight"\nfamily = "{family}"\nlayouts = ["nhwgc"]\ndtypes = ["fp16"]\n'
                    f"ndims = [2]\n\n[[point]]\n{point}\n")
    return path


DWR_POINT = ('threads_lane = 32\nthreads_pos = 8\nvector = 1\nsegment = 2\nrows = 2\nfilter_h = "problem"\n'
             'filter_w = "problem"\nstride = "problem"\ndilation = "problem"\nsplit_k = 256\nreduction = "atomic"')


def test_template_points_stay_out_of_the_expansion(tmp_path):
    catalog = read_catalog_file(write_catalog(tmp_path, "dwr", DWR_POINT))
    assert catalog.expand() == [] and len(catalog.templates) == 1
    problem = parse_conv_problem("N=2,G=64,C=1,K=1,input=60x60,filter=7x5,stride=2,dilation=2,pad=6",
                                 Layout.NHWGC, DType.FP16)
    [inst] = catalog.specialize((Layout.NHWGC, DType.FP16, 2), problem)
    assert inst.name == "conv_bwd_weight_2d_nhwgc_fp16_dwr_l32x8_v1_b2x2_k7x5s2d2_o1_sk256_atomic"
    assert catalog.specializes(inst.params)


@pytest.mark.parametrize("family, point, message", [
    ("dw", 'threads_lane = 1\nthreads_pos = 256\nvector = 1\ntaps_max = "problem"\nsplit_k = 4\nreduction = "atomic"',
     "family 'dw' takes no values from problems"),
    ("dwr", DWR_POINT + "\ntaps = 3", "unknown field"),
    ("dwr", DWR_POINT.replace('"atomic"', '"sometimes"'), "reduction = 'sometimes'; choose one of"),
])
def test_a_bad_template_point_is_a_catalog_error(tmp_path, family, point, message):
    with pytest.raises(CatalogError, match=message):
        read_catalog_file(write_catalog(tmp_path, family, point))


def test_the_shipped_dwr_catalog_keeps_its_listed_cells_and_has_templates():
    catalog = read_catalog_file(instances_dir() / "conv_bwd_weight_dwr.toml")
    assert catalog.templates and catalog.points
    assert {(i.layout, i.dtype, i.ndim) for i in catalog.expand()} == set(catalog.cells)


# --- generate / list ---------------------------------------------------------------------------------
def test_generate_problem_writes_the_specialized_instances(tmp_path, capsys):
    case = NEW_FILTERS[1]
    problem = problem_of(case)
    out = tmp_path / "gen"
    code = cli.main(["generate", "--layout", "NGCHW", "--dtype", "fp32", "--family", "dwr",
                     "--problem", case[1], "--out", str(out)])
    capsys.readouterr()
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    names = [r["name"] for r in manifest["instances"]]
    assert names == [i.name for i in dwr_of(problem)] and all(case[4] in n for n in names)
    assert all((out / f"{n}.hip").is_file() for n in names)
    assert manifest["selection"]["problem"] == problem.key
    # A later generate of another problem into the same directory is refused, not mixed in.
    code = cli.main(["generate", "--layout", "NGCHW", "--dtype", "fp32", "--family", "dwr",
                     "--problem", case[1].replace("9x9", "11x11").replace("pad=4", "pad=5"), "--out", str(out)])
    _, err = capsys.readouterr()
    assert code == 2 and "holds the output of" in err


@pytest.mark.parametrize("extra, message", [
    ([], "--problem needs --layout and --dtype"),
    (["--layout", "NHWGC", "--dtype", "fp16", "--ndim", "2"], "--ndim 2 contradicts the 1-D --problem"),
])
def test_generate_problem_refuses_contradicting_filters(tmp_path, capsys, extra, message):
    code = cli.main(["generate", "--problem", NEW_FILTERS[0][1], "--out", str(tmp_path / "gen"), *extra])
    _, err = capsys.readouterr()
    assert code == 2 and message in err and not (tmp_path / "gen").exists()


def test_list_problem_shows_the_specialized_instances(capsys):
    case = NEW_FILTERS[0]
    code = cli.main(["list", "--layout", "NHWGC", "--dtype", "fp16", "--problem", case[1], "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    names = [r["name"] for r in json.loads(out)["applicable"]]
    assert [n for n in names if "_dwr_" in n] == [i.name for i in dwr_of(problem_of(case))]


# --- tune and serve ----------------------------------------------------------------------------------
def test_a_specialized_winner_is_tuned_stored_and_served_by_name(tmp_path):
    problem = problem_of(NEW_FILTERS[1])
    special = dwr_of(problem)[0].name
    gpu = FakeGPU(problem, us={special: 0.5})
    db = TuningDB(str(tmp_path / "t.sqlite"))
    outcome = api.tune_problem(problem, gpu, db, SETTINGS)
    assert special in gpu.timed and outcome.winner.instance == special
    assert outcome.winner.source_hash == code_of(special)
    # Served through its name alone (no candidate list), as select() does on a DB hit.
    choice = stored_choice(problem, db.lookup(problem.key, DEVICE))
    assert choice.instance is not None and choice.instance.name == special and not choice.refusals
    assert select(problem, mode="db", backend=gpu, db=db).name == special


def test_a_stored_specialized_winner_is_served_by_a_fresh_process_view(tmp_path):
    problem = problem_of(NEW_FILTERS[2])
    special = dwr_of(problem)[-1].name
    db = TuningDB(str(tmp_path / "t.sqlite"))
    db.record(problem.key, problem.op.value, DEVICE, [Measurement(special, 1.5, 0.1, 25, True, source_hash=code_of(special))])
    for cache in (_specialized_all, _specialized, _specialized_by_name):  # as in a process that never looked it up
        cache.cache_clear()
    assert select(problem, mode="db", backend=FakeGPU(problem), db=db).name == special


def test_dwh_ahead_points_spell_it_and_the_prior_ranks_only_the_safe_one_above_its_twin():
    """`ahead` shows in a name only when it is not 0 (every older name stays valid), parses back, and an
    `_a0` spelling is refused; the prior puts ahead 1 on a 3x3 filter just above the same point at 0, and
    ahead 2, a register cap or a 7x7 filter below it."""
    base = "conv_bwd_weight_2d_nhwgc_bf16_dwh_l32x8_v1_b8x8_k{k}s1d1_o{o}_sk64_atomic_w144"
    for ahead in (1, 2):
        name = base.format(k="3x3", o=1) + f"_a{ahead}"
        assert instance_by_name(name).params.ahead == ahead
    assert instance_by_name(base.format(k="3x3", o=1)).params.ahead == 0
    with pytest.raises(CatalogError):
        instance_by_name(base.format(k="3x3", o=1) + "_a0")

    def score(k: str, o: int, suffix: str) -> float:
        inst = instance_by_name(base.format(k=k, o=o) + suffix)
        problem = parse_conv_problem(f"N=64,G=144,C=1,K=1,input=56x56,filter={k},pad=1", Layout.NHWGC, DType.BF16)
        return SOLVER.heuristic_score(inst.family, inst.params, problem, TARGETS["sm_90"])

    twin = score("3x3", 1, "")
    assert twin < score("3x3", 1, "_a1") < twin + 0.1
    assert score("3x3", 1, "_a2") < twin and score("3x3", 2, "_a1") < twin
    assert score("7x7", 1, "_a1") < score("7x7", 1, "")
