"""dwsep_conv_fwd problems: the --problem spelling, its defaults and keys, one-line errors naming the field,
the cells that have kernels, and the public suite's cases."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from factory import api
from factory.bench.model import BenchError
from factory.bench.suite import expand, load_suite
from factory.ops import solver_for
from factory.ops.dwsep_conv_fwd import SOLVER, Activation, DwsepProblem, parse_dwsep_problem
from factory.problem import (
    DType, InvalidProblem, KernelFactoryError, Layout, Op, ProblemSyntaxError, UnsupportedProblem,
)
from factory.selector import problem_from_key

SPEC = "N=64,C=64,K=128,input=112x112,filter=3x3,stride=1,pad=1,dilation=1"
CANONICAL = "N=64,C=64,K=128,input=112x112,filter=3x3,stride=1x1,pad=1x1,dilation=1x1"
SUPPORTED = ("supported: ngchw/bf16: 1D,2D,3D; ngchw/fp16: 1D,2D,3D; ngchw/fp32: 1D,2D,3D; "
             "nhwgc/bf16: 1D,2D,3D; nhwgc/fp16: 1D,2D,3D; nhwgc/fp32: 1D,2D,3D")


def parse(spec: str, layout: Layout = Layout.NHWGC, dtype: DType = DType.FP16) -> DwsepProblem:
    return parse_dwsep_problem(spec, layout, dtype)


def test_the_op_module_parses_its_problems():
    assert solver_for(Op.DWSEP_CONV_FWD) is SOLVER
    assert SOLVER.parse_problem(SPEC, Layout.NGCHW, DType.BF16) == parse(SPEC, Layout.NGCHW, DType.BF16)


def test_spec_and_key_round_trip():
    p = parse(SPEC)
    assert (p.N, p.C, p.K, p.input, p.filter, p.output, p.ndim) == (64, 64, 128, (112, 112), (3, 3), (112, 112), 2)
    assert p.spec() == CANONICAL
    assert p.key == f"dwsep_conv_fwd:nhwgc:fp16:2d:{CANONICAL}"
    again = parse(p.spec())
    assert again == p and again.key == p.key and hash(again) == hash(p)
    assert problem_from_key(p.key) == p  # how the tuning DB reads a stored key back


@pytest.mark.parametrize("extra, suffix", [
    ("bias_dw=1,bias_pw=1", ",bias_dw=1,bias_pw=1"),
    ("act_pw=relu,bias_pw=1,act_dw=relu6", ",bias_pw=1,act_dw=relu6,act_pw=relu"),  # canonical order
    ("act_dw=RELU6", ",act_dw=relu6"),
    ("bias_dw=0,bias_pw=0,act_dw=none,act_pw=none", ""),  # the defaults spell nothing: the same key
])
def test_biases_and_activations_in_the_key(extra, suffix):
    p = parse(f"{SPEC},{extra}", Layout.NGCHW, DType.FP32)
    assert p.spec() == CANONICAL + suffix and p.key == f"dwsep_conv_fwd:ngchw:fp32:2d:{CANONICAL}{suffix}"
    assert parse(p.spec(), Layout.NGCHW, DType.FP32) == p and problem_from_key(p.key) == p
    assert (p == parse(SPEC, Layout.NGCHW, DType.FP32)) == (suffix == "")


def test_defaults_and_one_number_for_every_dim():
    p = parse("N=2,C=8,K=4,input=9x10x11,filter=3")
    assert p.filter == (3, 3, 3) and p.stride == (1, 1, 1) and p.pad == (0, 0, 0) and p.dilation == (1, 1, 1)
    assert (p.bias_dw, p.bias_pw, p.act_dw, p.act_pw) == (False, False, Activation.NONE, Activation.NONE)
    assert (p.layout, p.dtype) == (Layout.NHWGC, DType.FP16) and p.output == (7, 8, 9)
    q = parse("N=2,C=8,K=4,input=9x10,filter=3x5,stride=2,pad=1x2,dilation=2x1")
    assert q.stride == (2, 2) and q.pad == (1, 2) and q.dilation == (2, 1) and q.output == (4, 5)
    one = parse("N=1,C=3,K=5,input=100,filter=31,pad=15")
    assert one.ndim == 1 and one.output == (100,) and one.key.startswith("dwsep_conv_fwd:nhwgc:fp16:1d:")
    built = DwsepProblem(N=2, C=8, K=4, input=(9, 10), filter=(3, 5), stride=(2, 2), pad=(1, 2), dilation=(2, 1))
    assert built == q


def test_shapes_and_sizes():
    p = parse("N=2,C=8,K=4,input=9x10,filter=3x3,pad=1,stride=2", Layout.NHWGC)
    assert p.activation("C") == ((2, 9, 10, 8), "NHWC") and p.activation("K") == ((2, 5, 5, 4), "NHWK")
    q = parse("N=2,C=8,K=4,input=6x9x10,filter=3,pad=1", Layout.NGCHW)
    assert q.activation("C") == ((2, 8, 6, 9, 10), "NCDHW") and q.depthwise_weight() == ((8, 3, 3, 3), "CZYX")
    assert p.positions == 2 * 25 and p.macs == 2 * 25 * 8 * 4 and p.depthwise_macs == 2 * 25 * 8 * 9


@pytest.mark.parametrize("spec, error, field, says", [
    (SPEC + ",act_dw=gelu", ProblemSyntaxError, None, "bad token act_dw='gelu' in problem: choose one of none, relu, relu6"),
    (SPEC + ",act_pw=", ProblemSyntaxError, None, "act_pw=''"),
    (SPEC + ",bias_dw=2", InvalidProblem, "bias_dw", "invalid bias_dw: must be 0 or 1, got 2"),
    (SPEC + ",bias_pw=-1", InvalidProblem, "bias_pw", "invalid bias_pw: must be 0 or 1"),
    (SPEC + ",bias_dw=yes", ProblemSyntaxError, None, "bias_dw='yes'"),
    ("N=2,C=8,K=4,input=2x2,filter=5x5,pad=1", InvalidProblem, "filter", "extent 5 exceeds padded input 4"),
    ("N=2,C=8,K=4,input=5x5,filter=3x3,dilation=3", InvalidProblem, "filter", "extent 7 exceeds padded input 5"),
    ("N=2,C=8,input=9x9,filter=3x3", ProblemSyntaxError, None, "missing K"),
    ("N=2,C=8,K=4,filter=3x3", ProblemSyntaxError, None, "missing input"),
    ("N=0,C=8,K=4,input=9x9,filter=3x3", InvalidProblem, "N", "invalid N"),
    ("N=2,C=8,K=0,input=9x9,filter=3x3", InvalidProblem, "K", "invalid K"),
    ("N=2,C=8,K=4,input=9x9,filter=3x3,stride=0", InvalidProblem, "stride", "invalid stride"),
    ("N=2,C=8,K=4,input=9x9,filter=3x3,pad=-1", InvalidProblem, "pad", "invalid pad"),
    ("N=2,C=8,K=4,input=9x9,filter=3x3x3", InvalidProblem, "filter", "needs 2 entries"),
    ("N=2,C=8,K=4,input=9x9x9x9,filter=3", InvalidProblem, "input", "1, 2 or 3 spatial sizes"),
    (SPEC + ",G=1", ProblemSyntaxError, None, "unknown field 'G'"),
    (SPEC + ",alpha=2", ProblemSyntaxError, None, "unknown field 'alpha'"),  # no output epilogue
    (SPEC + ",N=3", ProblemSyntaxError, None, "given twice"),
])
def test_bad_problems_are_one_line_errors_naming_the_field(spec, error, field, says):
    with pytest.raises(error) as info:
        parse(spec)
    assert isinstance(info.value, KernelFactoryError)
    message = str(info.value)
    assert says in message and "\n" not in message
    if field is not None:
        assert info.value.field == field and message.startswith(f"invalid {field}:")


@pytest.mark.parametrize("name, value", [
    ("bias_dw", 1), ("act_pw", "relu"), ("input", [8, 8]), ("filter", (0, 3)), ("C", True), ("layout", "nhwgc"),
])
def test_direct_construction_validates(name, value):
    fields = dict(N=1, C=2, K=3, input=(8, 8), filter=(3, 3), stride=(1, 1), pad=(1, 1), dilation=(1, 1))
    with pytest.raises(InvalidProblem) as info:
        DwsepProblem(**(fields | {name: value}))
    assert info.value.field == name


@pytest.mark.parametrize("layout, dtype", [
    (Layout.GNHWC, DType.FP16), (Layout.NGCHW_GKYXC, DType.BF16), (Layout.NHWGC, DType.INT8),
    (Layout.NGCHW, DType.BF16_FP32W),
])
def test_cells_without_kernels_list_the_supported_ones(layout, dtype):
    p = parse(SPEC, layout, dtype)  # a valid problem, in a cell no family covers
    with pytest.raises(UnsupportedProblem) as info:
        api.lookup(p)
    message = str(info.value)
    assert message == f"dwsep_conv_fwd has no kernels for {layout.value}/{dtype.value}/2D; {SUPPORTED}"


@pytest.mark.parametrize("layout", [Layout.NHWGC, Layout.NGCHW])
@pytest.mark.parametrize("dtype", [DType.FP16, DType.BF16, DType.FP32])
@pytest.mark.parametrize("spec", [SPEC, "N=8,C=96,K=96,input=4096,filter=31,pad=15,act_pw=relu",
                                  "N=2,C=24,K=48,input=8x28x28,filter=3x3x3,stride=1x2x2,pad=1,bias_dw=1"])
def test_every_supported_cell_has_instances(layout, dtype, spec):
    p = parse(spec, layout, dtype)
    assert api.lookup(p) and all(i.op is Op.DWSEP_CONV_FWD and i.cell_matches(p) for i in api.lookup(p))


def test_public_suite_cases_parse():
    suite = load_suite()
    cases = [c for c in suite.cases if c.op is Op.DWSEP_CONV_FWD]
    assert cases, "the public suite has dwsep_conv_fwd cases"
    items = expand(suite, [Op.DWSEP_CONV_FWD])
    assert len(items) == sum(len(c.dtypes) * len(c.layouts) for c in cases)
    for item in items:
        problem = SOLVER.parse_problem(item.case.spec(), item.layout, item.dtype)
        assert isinstance(problem, DwsepProblem) and item.problem == problem
        assert api.lookup(problem), problem.key
    assert {i.case.name for i in items} >= {"mnv1_b64", "mnv1_b1024"}


def test_suite_refuses_a_layout_without_kernels(tmp_path):
    path = tmp_path / "suite.toml"
    path.write_text('dwsep_conv_fwd = [ { name = "x", N = 1, C = 4, K = 8, input = [8, 8], filter = [3, 3], '
                    'layouts = ["GNHWC"] } ]\n')
    with pytest.raises(BenchError, match="dwsep_conv_fwd is benchmarked in NHWGC, NGCHW only"):
        load_suite(path)


# --- the prior ---------------------------------------------------------------------------------------
from factory.device import target_for_device  # noqa: E402
from factory.ops.dwsep_conv_fwd.fused import Fused, FusedMfma, FusedParams  # noqa: E402
from factory.ops.dwsep_conv_fwd.twopass import preferred_strip  # noqa: E402
from factory.catalog import specialized_instances, unspecialized_families  # noqa: E402
from factory.selector import cell_instances, heuristic_pick, lookup  # noqa: E402


def fused_pick(problem: DwsepProblem):
    """The prior's first `fused` point (the terms below are that family's own)."""
    return heuristic_pick(problem, [i for i in lookup(problem, target=H100) if i.family == "fused"], target=H100)

H100 = target_for_device("sm_90", 132)


@pytest.mark.parametrize(("layout", "dtype", "spec", "best_chain"), [
    # Measured on the H100: the prior picked b128x32x32_w4x1 tiles here (32 and 4 depthwise outputs a
    # thread each step), 4.6x and 2.9x the best; the best tiles compute 8 and 2.
    (Layout.NGCHW, DType.BF16, "N=2,C=184,K=24,input=84x84,filter=3x3,pad=2,dilation=2,bias_pw=1,act_dw=relu", 8),
    (Layout.NHWGC, DType.BF16, "N=4,C=888,K=144,input=7x7,filter=3x3,pad=1,act_dw=relu6,act_pw=relu6", 2),
])
def test_the_prior_keeps_each_thread_s_depthwise_chain_short(layout, dtype, spec, best_chain):
    problem = SOLVER.parse_problem(spec, layout, dtype)
    pick = fused_pick(problem)
    assert pick.params.work(layout is Layout.NHWGC, dtype.tensor.nbytes)[2] <= best_chain


def test_the_depthwise_chain_costs_nothing_up_to_two_outputs_a_thread_and_more_per_doubling_after():
    problem = SOLVER.parse_problem("N=2,C=64,K=64,input=16x16,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    fused = Fused()

    def cost(block_m: int, block_k: int, vector: int, warps_n: int = 2, item_bytes: int = 0) -> float:
        params = FusedParams(block_m, 64, block_k, 4, warps_n, vector, "k3x3s1x1d1x1", item_bytes)
        return fused.depthwise_chain(params, problem)

    # Channels-last: block_k / (channels a thread sums of a position) threads share a position, and a
    # thread takes block_m / (threads / that).
    assert cost(64, 64, 8) == 0.0  # 256 threads, 8 a position: 2 outputs a thread
    assert cost(128, 64, 8) == pytest.approx(0.3)  # 4 outputs
    assert cost(128, 32, 2) == pytest.approx(0.6)  # 16 a position: 8 outputs
    assert cost(128, 32, 8, warps_n=1) == pytest.approx(0.3)  # 128 threads: 4 outputs
    assert cost(128, 64, 1) == pytest.approx(1.2)  # one-channel items: 64 a position, 32 outputs
    # 16-byte items over narrower loads count as their narrow twin (item_width weighs them on their own).
    assert cost(128, 64, 1, item_bytes=16) == cost(128, 64, 1)
    assert FusedMfma().depthwise_chain(FusedParams(128, 64, 32, 4, 2, 2, "k3x3s1x1d1x1"), problem) == 0.0


@pytest.mark.parametrize(("layout", "dtype", "spec", "block_n"), [
    # Measured on the H100 (bench/NOTES.md §35): wide K on a full grid is won by wide channel tiles (the
    # linear fill picked b64x64 here, 1.6x the best b64x256) ...
    (Layout.NHWGC, DType.FP16, "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1", 256),
    # ... but a grid of 256 positions needs narrow ones to fill the SMs (b64x256 ran 2.1x the best b64x64).
    (Layout.NGCHW, DType.FP16, "N=16,C=72,K=1048,input=7x7,filter=3x3,stride=2,pad=1,bias_dw=1,bias_pw=1", 64),
])
def test_the_prior_weighs_channel_tiles_against_a_full_wave(layout, dtype, spec, block_n):
    problem = SOLVER.parse_problem(spec, layout, dtype)
    assert fused_pick(problem).params.block_n == block_n


def test_the_wave_fill_grows_on_a_log_scale_to_two_blocks_an_sm_and_amd_keeps_the_linear_fill():
    fused, wave = Fused(), 2 * H100.processors
    assert fused.fill(1, H100) == 0.0 and fused.fill(wave, H100) == pytest.approx(2.0) == fused.fill(10 * wave, H100)
    assert fused.fill(wave // 2, H100) == pytest.approx(2.0 * (1 - 1 / math.log2(wave)))
    assert FusedMfma().fill(4 * H100.processors, H100) == pytest.approx(1.0)


@pytest.mark.parametrize(("dtype", "spec", "wide"), [
    # Measured on the H100 (bench/NOTES.md §37): a 7x7 filter (49 taps: four mask registers a window)
    # ran 1.7-3.3x faster with 16-byte items, fp32 mostly faster; 16-bit with up to 29 taps slower.
    (DType.BF16, "N=8,C=429,K=109,input=14x14,filter=7x7,pad=3", True),
    (DType.FP32, "N=8,C=27,K=71,input=40x40,filter=3x3,pad=1", True),
    (DType.FP16, "N=8,C=159,K=35,input=63x63,filter=3x3,stride=2,pad=1", False),
    (DType.BF16, "N=32,C=207,K=111,input=214,filter=23,stride=2,pad=11", False),
])
def test_the_prior_takes_16_byte_items_where_they_paid(dtype, spec, wide):
    problem = SOLVER.parse_problem(spec, Layout.NHWGC, dtype)
    pick = fused_pick(problem)
    assert pick.params.vector * dtype.tensor.nbytes < 16  # odd C: narrow loads only
    assert bool(pick.params.item_bytes) is wide


def test_16_byte_items_are_left_out_where_they_change_nothing():
    fused = Fused()
    narrow = FusedParams(64, 64, 32, 4, 2, 8, "k3x3s1x1d1x1", item_bytes=16)
    assert not fused.cell_allows(narrow, Layout.NHWGC, DType.FP16, 2)  # 8 x 2 bytes: one load already
    assert fused.cell_allows(dataclasses.replace(narrow, vector=4), Layout.NHWGC, DType.FP16, 2)
    assert not fused.cell_allows(dataclasses.replace(narrow, vector=4), Layout.NHWGC, DType.FP32, 2)
    assert not fused.cell_allows(dataclasses.replace(narrow, vector=1), Layout.NGCHW, DType.FP16, 2)
    with pytest.raises(ValueError):
        FusedParams(64, 64, 32, 4, 2, 1, "k3x3s1x1d1x1", item_bytes=8)
    assert fused.parse_suffix(dataclasses.replace(narrow, vector=1).suffix()) == dataclasses.replace(narrow, vector=1)
    assert fused.parse_suffix("b64x64x32_w4x2_v1_k3x3s1x1d1x1").item_bytes == 0


def test_channel_tiles_cost_more_with_more_taps_and_less_in_fp32():
    fused = Fused()

    def weight(dtype: DType, spec: str) -> float:
        return fused.recompute(SOLVER.parse_problem(spec, Layout.NHWGC, dtype))

    base = weight(DType.FP16, "N=1,C=8,K=8,input=9x9,filter=3x3,pad=1")
    assert base == pytest.approx(Fused.recompute_weight)
    assert weight(DType.FP16, "N=1,C=8,K=8,input=9,filter=3,pad=1") == base  # up to 9 taps: the same
    assert weight(DType.BF16, "N=1,C=8,K=8,input=9x9,filter=7x7,pad=3") == pytest.approx(base * 7 / 3)
    assert weight(DType.FP32, "N=1,C=8,K=8,input=9x9,filter=3x3,pad=1") == pytest.approx(base / 2)
    assert FusedMfma().recompute(SOLVER.parse_problem("N=1,C=8,K=8,input=9x9,filter=7x7,pad=3", Layout.NHWGC,
                                                      DType.FP32)) == FusedMfma.recompute_weight


@pytest.mark.parametrize(("layout", "dtype", "spec", "family"), [
    # Measured on the H200 (bench/NOTES.md §87): twopass 2.7x fused on mnv1_b1024 (C = K = 1024), 1.30x at
    # C = 952, K = 208, 2.46x at C = K = 352 under 7x7; fused 1.01x at C = 144, K = 192 and 1.5x at C = 16;
    # twopass 1.33-4.51x on NCHW-style layers.
    (Layout.NHWGC, DType.FP16, "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1", "twopass"),
    (Layout.NHWGC, DType.BF16, "N=16,C=352,K=352,input=22x41,filter=7x7,pad=3", "twopass"),
    (Layout.NHWGC, DType.FP16, "N=8,C=952,K=208,input=94x94,filter=3x3,stride=2,pad=1", "twopass"),
    # Since rowtile (§94): 80.4 us against fused's 81.9 (twopass's staged stores 77.6); two channel tiles over
    # 1250 recomputed C x taps leave rowtile below the others since §107.
    (Layout.NHWGC, DType.FP16, "N=64,C=144,K=192,input=32x32,filter=3x3,pad=2,dilation=2", "fused"),
    (Layout.NHWGC, DType.BF16, "N=8,C=16,K=272,input=23x20,filter=3x3,pad=1", "fused"),
    (Layout.NGCHW, DType.BF16, "N=4,C=312,K=312,input=12x12,filter=7x7,pad=3", "twopass"),
    # §89: NCHW-style, fused 1.59x twopass at C = 29, K = 21; twopass won at C = 80, K = 32, 1x3x3.
    (Layout.NGCHW, DType.BF16, "N=32,C=29,K=21,input=13x31,filter=3x3,pad=1", "fused"),
    (Layout.NGCHW, DType.FP16, "N=256,C=80,K=32,input=15x10x10,filter=1x3x3,pad=0x1x1", "twopass"),
    (Layout.NHWGC, DType.FP32, "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1", "fused"),  # twopass: 16-bit only
    # §105: channels-last with C % 8 != 0, twopass (reading a whole-chunk copy) won below WIDE_WORK too.
    (Layout.NHWGC, DType.BF16, "N=32,C=29,K=27,input=34x34,filter=3x3,pad=1", "twopass"),
    (Layout.NHWGC, DType.BF16, "N=32,C=32,K=27,input=34x34,filter=3x3,pad=1", "rowtile"),  # whole chunks: as before
    # §112: where `_mx` pays, below WIDE_WORK too: 38.5 us (`_mx`) against 62.8 for fused's first at C = 80, K = 184.
    (Layout.NHWGC, DType.FP16, "N=64,C=80,K=184,input=27x27,filter=5x5,pad=2,act_dw=relu,act_pw=relu", "twopass"),
    (Layout.NHWGC, DType.FP16, "N=64,C=80,K=184,input=27x27,filter=3x3,pad=1,act_dw=relu,act_pw=relu", "fused"),
])
def test_the_prior_takes_twopass_for_wide_channels_and_nchw_style_layers(layout, dtype, spec, family):
    assert heuristic_pick(SOLVER.parse_problem(spec, layout, dtype), target=H100).family == family


@pytest.mark.parametrize(("layout", "spec", "strip"), [
    (Layout.NGCHW, "N=16,C=520,K=144,input=40x40,filter=7x7,pad=3", 4),  # 7 taps along W: 4 positions a thread
    # Strip 8 never beat 4 on the H200 (1.40x slower on a 27-tap layer, §105): 15 taps take the longest, 4.
    (Layout.NHWGC, "N=64,C=160,K=384,input=156,filter=15,pad=7", 4),
    (Layout.NHWGC, "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1", 2),
    (Layout.NHWGC, "N=8,C=952,K=208,input=94x94,filter=3x3,stride=2,pad=1", 1),  # stride 2: one column shared
    (Layout.NHWGC, "N=8,C=16,K=272,input=23x20,filter=3x3,pad=1", 1),  # 3680 threads at strip 2: too few
    (Layout.NGCHW, "N=4,C=312,K=312,input=12x12,filter=7x7,pad=3", 2),  # 5616 threads at strip 4
    # NCHW-style under 32 k threads at strip 4: 2 (§105: 1.34x faster at C = 191, 11x11), and never below 2
    # (1.0-1.19x faster than one position on four small layers, stride 2 among them).
    (Layout.NGCHW, "N=16,C=191,K=109,input=11x11,filter=7x7,pad=3", 2),
    (Layout.NGCHW, "N=4,C=72,K=32,input=9x9,filter=3x3,stride=2,pad=1", 2),
    (Layout.NGCHW, "N=4,C=72,K=104,input=14x14,filter=3x3,pad=1", 2),
])
def test_the_prior_prefers_longer_depthwise_strips_for_wider_filters(layout, spec, strip):
    problem = SOLVER.parse_problem(spec, layout, DType.FP16)
    assert preferred_strip(problem) == strip
    firsts = [i for i in lookup(problem, target=H100) if i.family == "twopass"]
    best = max(firsts, key=lambda i: SOLVER.families["twopass"].heuristic_score(i.params, problem, H100))
    assert best.params.strip == strip


def test_strips_that_half_would_cover_are_refused():
    """Wo = 3: a strip of 4 is one strip a row and 8 is the same strip with more registers."""
    problem = SOLVER.parse_problem("N=64,C=64,K=64,input=5x5,filter=3x3,stride=2,pad=1", Layout.NHWGC, DType.FP16)
    assert problem.output[-1] == 3
    strips = {i.params.strip for i in lookup(problem, target=H100) if i.family == "twopass"}
    assert strips == {1, 2, 4}
    eight = next(i for i in cell_instances(problem) if i.family == "twopass" and i.params.strip == 8)
    assert "fit one strip of 4" in eight.why_not(problem, H100)


def test_twopass_compiles_in_whether_c_fills_whole_chunks():
    """C not a multiple of 8: `_cpadded` instances (zero channels pad the workspace's and the pointwise
    weights' rows), the others refused; names parse back; the prior still takes twopass NCHW-style."""
    odd = SOLVER.parse_problem("N=4,C=563,K=563,input=14x10,filter=7x7,pad=3", Layout.NGCHW, DType.FP16)
    even = SOLVER.parse_problem("N=4,C=560,K=563,input=14x10,filter=7x7,pad=3", Layout.NGCHW, DType.FP16)
    family = SOLVER.families["twopass"]
    padded = [i for i in lookup(odd, target=H100) if i.family == "twopass"]
    whole = [i for i in lookup(even, target=H100) if i.family == "twopass"]
    # 48 with element stores, 12 staged, 12 staged with bulk copies; NCHW-style 30 with tiled depthwise passes
    assert len(padded) == len(whole) == 102
    assert all(i.name.endswith("_k7x7s1x1d1x1_cpadded") for i in padded)
    assert all(i.name.endswith("_k7x7s1x1d1x1") for i in whole)
    assert family.parse_suffix(padded[0].params.suffix()) == padded[0].params
    assert family.parse_suffix(whole[0].params.suffix()) == whole[0].params
    assert "not a multiple of 8, problem has C=560" in family.why_not(padded[0].params, even, H100)
    assert "a multiple of 8, problem has C=563" in family.why_not(whole[0].params, odd, H100)
    assert heuristic_pick(odd, target=H100).family == "twopass"


def test_tiled_depthwise_passes_are_nchw_style_only_and_their_tiles_fit():
    """`_tl` names parse back; channels-last problems get none; a tile's threads fit a block, its windows
    TILE_WINDOW_BYTES, its blocks cover every strip, and chunks are grouped only while two waves remain."""
    from factory.ops.dwsep_conv_fwd.twopass_depthwise import (DEPTHWISE_THREADS, TILE_WAVES, TILE_WINDOW_BYTES,
                                                               DepthwisePass, DepthwiseTile)
    family = SOLVER.families["twopass"]
    channels_last = SOLVER.parse_problem("N=4,C=64,K=8,input=9x9,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    assert not [i for i in lookup(channels_last, target=H100) if i.family == "twopass" and "_tl_" in i.name]
    for spec in ("N=32,C=415,K=59,input=68x68,filter=5x5,stride=2,pad=2", "N=1,C=4227,K=8,input=2x2,filter=3x3,pad=1",
                 "N=64,C=64,K=80,input=1568,filter=5,pad=2", "N=2,C=24,K=8,input=40x300,filter=9x9,pad=8,dilation=2",
                 "N=4,C=131,K=278,input=10x9x16,filter=3x3x3,stride=1x1x2,pad=4x2x0,dilation=2x1x1"):
        problem = SOLVER.parse_problem(spec, Layout.NGCHW, DType.BF16)
        tiled = [i for i in lookup(problem, target=H100)
                 if i.family == "twopass" and i.params.depthwise is DepthwisePass.TILED]
        assert tiled, spec
        for instance in tiled:
            p = instance.params
            assert "_tl_" in instance.name and family.parse_suffix(p.suffix()) == p
            tile = DepthwiseTile.of(p, problem, H100)
            assert tile.chunks * tile.rows * tile.strips <= DEPTHWISE_THREADS
            assert tile.shared_bytes(p) <= max(TILE_WINDOW_BYTES, DepthwiseTile(1, 1, 1).shared_bytes(p))
            strips = -(-problem.output[-1] // p.strip)
            chunk_count = -(-problem.C // 8)
            assert tile.blocks(p, problem) * tile.chunks * tile.rows * tile.strips >= (
                problem.N * chunk_count * math.prod(problem.output[:-1]) * strips)
            if tile.chunks > 1:
                assert tile.blocks(p, problem) >= TILE_WAVES * H100.processors


# Measured on the H200 (bench/NOTES.md 106): the best `_tl` point beat the best direct one on 20 of 21 NCHW-style
# layers with output rows and lost or tied on 4 of 5 1-D ones (a long row's loads already coalesce); 3x1x1 filters
# (nothing shared in a plane) lost 2 of 3.
@pytest.mark.parametrize(("spec", "tiled_first"), [
    ("N=32,C=224,K=208,input=34x47,filter=7x7,pad=3", True),  # 176.4 -> 121.5 us
    ("N=4,C=131,K=278,input=10x9x16,filter=3x3x3,stride=1x1x2,pad=4x2x0,dilation=2x1x1", True),  # 25.7 -> 22.3
    ("N=64,C=64,K=80,input=1568,filter=5,pad=2", False),  # 34.1 against 47.7
    ("N=32,C=88,K=160,input=3233,filter=9,pad=4", False),  # 94.2 against 104.3
    ("N=128,C=232,K=176,input=10x17x17,filter=3x1x1,stride=1x2x2,pad=1x0x0", False),  # 152.8 against 339.7
])
def test_the_prior_ranks_tiled_depthwise_points_first_where_the_output_has_rows(spec, tiled_first):
    from factory.ops.dwsep_conv_fwd.twopass_depthwise import DepthwisePass
    problem = SOLVER.parse_problem(spec, Layout.NGCHW, DType.BF16)
    ranked = [c for c in api.rank_candidates(problem, lookup(problem, target=H100), H100) if c.family == "twopass"]
    first = ranked[0].params
    assert (first.depthwise is DepthwisePass.TILED) == tiled_first
    twin = [c for c in ranked if c.params == dataclasses.replace(first, depthwise=(
        DepthwisePass.DIRECT if tiled_first else DepthwisePass.TILED))]
    assert twin and ranked.index(twin[0]) > 0


@pytest.mark.parametrize("spec, matrix_first", [  # measured on the H200, best `_mx` against best other
    ("N=64,C=288,K=224,input=33x33,filter=7x7,pad=3", True),  # 181.8 -> 148.9 us
    ("N=32,C=192,K=192,input=28x28,filter=5x5,pad=2", True),  # 40.8 -> 36.7
    ("N=64,C=384,K=384,input=14x14,filter=7x7,pad=3", True),  # 60.1 -> 49.8
    ("N=64,C=768,K=768,input=7x7,filter=7x7,pad=3", False),  # 60.3 against 39.9
    ("N=64,C=64,K=128,input=112x112,filter=3x3,pad=1", False),  # 269.0 against 210.6
    ("N=32,C=128,K=128,input=56x56,filter=3x3,pad=2,dilation=2", False),  # 65.1 against 52.9
])
def test_the_prior_ranks_matrix_depthwise_points_first_where_the_filter_has_many_taps(spec, matrix_first):
    """`_mx` points rank above their direct twins at the preferred strip (and first) where the filter has 25 taps
    or more and a block's band of outputs is not mostly past the plane, below those twins elsewhere."""
    from factory.ops.dwsep_conv_fwd.twopass import preferred_strip
    from factory.ops.dwsep_conv_fwd.twopass_depthwise import DepthwisePass
    problem = SOLVER.parse_problem(spec, Layout.NHWGC, DType.BF16)
    ranked = [c for c in api.rank_candidates(problem, lookup(problem, target=H100), H100) if c.family == "twopass"]
    assert (ranked[0].params.depthwise is DepthwisePass.MATRIX) == matrix_first
    matrix = [c for c in ranked if c.params.depthwise is DepthwisePass.MATRIX]
    assert matrix
    for point in matrix:
        direct = dataclasses.replace(point.params, depthwise=DepthwisePass.DIRECT, strip=preferred_strip(problem))
        twin = [c for c in ranked if c.params == direct]
        assert twin and (ranked.index(twin[0]) > ranked.index(point)) == matrix_first


def test_matrix_depthwise_passes_serve_channels_last_2d_with_stride_1_along_w():
    """`_mx` names parse back; only channels-last 2-D problems get them; stride 2 along W and a filter row
    whose 8 outputs reach past 16 input columns are refused with the reason; a band's planes fit shared
    memory, and the blocks cover every (sample, chunk, band of 16 rows by 64 columns)."""
    from factory.ops.dwsep_conv_fwd.twopass_depthwise import DepthwisePass, matrix_blocks, matrix_shared_bytes
    family = SOLVER.families["twopass"]

    def matrix(problem):
        return [i for i in lookup(problem, target=H100)
                if i.family == "twopass" and i.params.depthwise is DepthwisePass.MATRIX]

    problem = SOLVER.parse_problem("N=3,C=288,K=224,input=33x70,filter=7x7,pad=3", Layout.NHWGC, DType.BF16)
    served = matrix(problem)
    assert served and all("_mx_" in i.name and family.parse_suffix(i.params.suffix()) == i.params for i in served)
    assert all(matrix_shared_bytes(i.params) <= H100.shared_optin for i in served)
    assert matrix_blocks(problem) == 3 * 36 * 3 * 2  # samples x chunks x bands of rows x bands of columns
    assert not matrix(SOLVER.parse_problem("N=3,C=288,K=224,input=33x70,filter=7x7,pad=3", Layout.NGCHW, DType.BF16))
    assert not matrix(SOLVER.parse_problem("N=3,C=64,K=24,input=9x9x9,filter=3x3x3,pad=1", Layout.NHWGC, DType.BF16))
    assert not matrix(SOLVER.parse_problem("N=3,C=64,K=24,input=300,filter=9,pad=4", Layout.NHWGC, DType.BF16))
    strided = SOLVER.parse_problem("N=3,C=64,K=24,input=33x33,filter=3x3,stride=2,pad=1", Layout.NHWGC, DType.FP16)
    wide = SOLVER.parse_problem("N=3,C=64,K=24,input=33x33,filter=5x5,dilation=3,pad=6", Layout.NHWGC, DType.FP16)
    for refused in (strided, wide):
        points = [i for i in specialized_instances(refused) if i.family == "twopass" and "_mx_" in i.name]
        assert points and all("stride 1 along W" in i.why_not(refused, H100) for i in points)


def test_rowtile_compiles_in_c():
    """C = 24 is compiled in (`_c24`, a reduction of 32), names parse back; another C, odd C, short rows and
    NCHW-style layers are refused with the reason."""
    problem = SOLVER.parse_problem("N=2,C=24,K=40,input=5x37,filter=3x3,stride=2,pad=1", Layout.NHWGC, DType.FP16)
    family = SOLVER.families["rowtile"]
    points = [i for i in lookup(problem, target=H100) if i.family == "rowtile"]
    # block_m 128 refused (Wo = 19 fills under a quarter of its tile): 64x64 and 64x128 at strips 2 and 4 asking for
    # two or three blocks an SM, and at strip 2 four
    assert len(points) == 10
    assert all(i.name.endswith("_c24_k3x3s2x2d1x1") for i in points)
    assert family.parse_suffix(points[0].params.suffix()) == points[0].params
    other = SOLVER.parse_problem("N=2,C=40,K=40,input=5x37,filter=3x3,stride=2,pad=1", Layout.NHWGC, DType.FP16)
    assert "compiled for C=24, problem has C=40" in family.why_not(points[0].params, other, H100)
    odd = SOLVER.parse_problem("N=2,C=20,K=40,input=5x37,filter=3x3,stride=2,pad=1", Layout.NHWGC, DType.FP16)
    assert "C=20 is not a multiple of 8" in family.why_not(points[0].params, odd, H100)
    assert "C=20 is not a multiple of 8: rowtile reads" in unspecialized_families(odd)["rowtile"]
    short = SOLVER.parse_problem("N=2,C=24,K=40,input=5x31,filter=3x3,stride=2,pad=1", Layout.NHWGC, DType.FP16)
    assert "rows are 16 positions long" in family.why_not(points[0].params, short, H100)
    nchw = SOLVER.parse_problem("N=2,C=24,K=40,input=5x37,filter=3x3,stride=2,pad=1", Layout.NGCHW, DType.FP16)
    assert not [i for i in lookup(nchw, target=H100) if i.family == "rowtile"]


@pytest.mark.parametrize(("dtype", "spec", "family", "point"), [
    # Measured on the H200 (bench/NOTES.md 94, every candidate timed); rowtile's best against the best other:
    (DType.FP16, "N=64,C=64,K=128,input=112x112,filter=3x3,pad=1", "rowtile", "b128x128_w2x4_r4"),  # 1.63x
    (DType.FP16, "N=64,C=80,K=96,input=3320,filter=21,pad=10", "rowtile", "b128x128_w2x4_r4"),  # 2.19x
    (DType.FP16, "N=4,C=128,K=128,input=22x22,filter=7x7,pad=3", "rowtile", "b64x128_w2x4_r2"),  # 1.72x
    (DType.FP16, "N=64,C=200,K=16,input=61x61,filter=3x3,pad=1", "rowtile", "b64x64_w2x4_r4"),  # 1.36x
    (DType.FP16, "N=64,C=80,K=40,input=106x106,filter=3x3,pad=1", "rowtile", "b128x64_w2x4_r4"),  # 1.45x
    (DType.BF16, "N=16,C=352,K=352,input=22x41,filter=7x7,pad=3", "twopass", None),  # 0.68x: 3 channel tiles
    (DType.FP16, "N=16,C=432,K=552,input=39x39,filter=3x3,stride=2,pad=1", "twopass", None),  # 0.21x
    (DType.FP16, "N=128,C=24,K=40,input=6x17x17,filter=1x3x3,pad=0x1x1", "fused", None),  # 0.40x: C = 24, Wo = 17
    (DType.FP16, "N=16,C=24,K=104,input=66x66,filter=5x5,pad=2", "rowtile", "b128x128_w2x4_r2"),  # 1.20x: Wo = 66
    (DType.BF16, "N=16,C=168,K=224,input=18x18,filter=3x3,pad=1", None, None),  # 0.81x: rows of 18, 2 tiles
    # NOTES 107: two channel tiles recomputing 14112 C x taps a position (0.41x), unless the positions are few.
    (DType.BF16, "N=64,C=288,K=224,input=33x33,filter=7x7,pad=3", "twopass", None),
    (DType.BF16, "N=1,C=184,K=184,input=48x48,filter=7x7,pad=3", "rowtile", None),  # 1.18x at 2304 positions
])
def test_the_prior_takes_rowtile_where_it_won_on_the_h200(dtype, spec, family, point):
    problem = SOLVER.parse_problem(spec, Layout.NHWGC, dtype)
    pick = heuristic_pick(problem, target=H100)
    if family is None:
        assert pick.family != "rowtile"
    else:
        assert pick.family == family
    if point is not None:
        assert re.search(rf"_rowtile_{point}(_o[34])?_c{problem.C}_", pick.name)  # the tile; blocks an SM: NOTES 96


def test_rowtile_blocks_per_sm_points_parse_back_fit_shared_memory_and_rank_by_filter_length():
    """`_o3` / `_o4` points ask their launch bounds for three or four blocks an SM (their wave is that many
    blocks an SM too); a point whose shared memory cannot host them is refused; three ranks just above its
    two-block twin on a 3x3 filter, just below on a long one (NOTES 96)."""
    from factory.sources import source_of
    family = SOLVER.families["rowtile"]
    short = SOLVER.parse_problem("N=64,C=32,K=64,input=112x112,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    points = {i.params: i for i in lookup(short, target=H100) if i.family == "rowtile"}
    three = next(p for p in points if p.blocks_per_sm == 3 and p.block_m == 128 and p.warps_m == 2 and p.strip == 2)
    twin = dataclasses.replace(three, blocks_per_sm=2)
    name = points[three].name
    assert "_r2_o3_c32_" in name and family.parse_suffix(three.suffix()) == three and "_o2" not in points[twin].name
    assert "__launch_bounds__(256, 3)" in source_of(points[three]).text
    assert "__launch_bounds__(256, 2)" in source_of(points[twin]).text
    grid = lambda p, problem: family.launch_plan(p, problem, H100).steps[0].grid[0]  # noqa: E731
    assert grid(three, short) == 3 * H100.processors and grid(twin, short) == 2 * H100.processors
    score = lambda p, problem: family.heuristic_score(p, problem, H100)  # noqa: E731
    assert score(three, short) > score(twin, short)
    assert "_o3_" in heuristic_pick(short, target=H100).name
    assert not any(p.blocks_per_sm == 4 and p.strip == 4 for p in points)
    assert not any(p.blocks_per_sm > 2 and p.block_m == p.block_n == 128 for p in points)
    assert {(p.warps_m, p.warps_n) for p in points} == {(2, 4), (4, 2)} and len(points) == 24
    long = SOLVER.parse_problem("N=64,C=80,K=96,input=3320,filter=21,pad=10", Layout.NHWGC, DType.FP16)
    three_long = dataclasses.replace(three, channels=80, shape="k21s1d1")
    assert score(three_long, long) < score(dataclasses.replace(three_long, blocks_per_sm=2), long)
    wide = SOLVER.parse_problem("N=4,C=216,K=152,input=3853,filter=25,pad=12", Layout.NHWGC, DType.FP16)
    refused = [i for i in cell_instances(wide) if i.family == "rowtile" and i.params.blocks_per_sm == 3
               and i.params.block_m == 64 and i.params.block_n == 64]
    assert refused and all("blocks of" in i.why_not(wide, H100) and "do not fit an SM" in i.why_not(wide, H100)
                           for i in refused)
    with pytest.raises(ValueError, match="blocks_per_sm=5"):
        dataclasses.replace(three, blocks_per_sm=5)


def test_twopass_staged_points_parse_back_and_rank_over_their_element_twins():
    """`_st` points (kf_main's tile through shared memory; 1.02x their element-store twins on the H200, NOTES 94)
    each rank just above the same point with element stores."""
    problem = SOLVER.parse_problem("N=16,C=96,K=144,input=45x45,filter=3x3,pad=1", Layout.NGCHW, DType.FP16)
    family = SOLVER.families["twopass"]
    points = [i for i in lookup(problem, target=H100) if i.family == "twopass"]
    staged = [i for i in points if i.name.endswith("_st_k3x3s1x1d1x1")]
    assert len(staged) == 12
    by_name = {i.name: i for i in points}
    for inst in staged:
        assert family.parse_suffix(inst.params.suffix()) == inst.params
        twin = by_name[inst.name.replace("_st_", "_")]
        assert family.heuristic_score(inst.params, problem, H100) > family.heuristic_score(twin.params, problem, H100)
