import pytest

from factory.problem import (
    ConvProblem, DType, InvalidProblem, Layout, ProblemSyntaxError, parse_conv_problem,
)

SPEC = "N=32,G=32,C=4,K=4,input=56x56,filter=3x3,stride=1,pad=1,dilation=1"


def test_parse_full_spec_and_key_round_trip():
    p = parse_conv_problem(SPEC, Layout.NHWGC, DType.FP16)
    assert (p.N, p.G, p.C, p.K, p.input, p.filter, p.output) == (32, 32, 4, 4, (56, 56), (3, 3), (56, 56))
    again = parse_conv_problem(p.spec(), Layout.NHWGC, DType.FP16)
    assert again == p and again.key == p.key


def test_scalar_stride_broadcasts_and_defaults():
    p = parse_conv_problem("N=1,G=1,C=1,K=1,input=8x9x10,filter=3x3x3,stride=2", Layout.GNHWC, DType.FP32)
    assert p.stride == (2, 2, 2) and p.pad == (0, 0, 0) and p.dilation == (1, 1, 1)
    assert p.output == (3, 4, 4)


@pytest.mark.parametrize("spec, token", [
    ("N=32,G=2,C=4,K=4,input=56x5a,filter=3x3", "input='56x5a'"),
    ("N=32,G=2,C=4,K=4,input=56x56,filter=3x3,bogus=1", "bogus"),
    ("N=32,G=2,C=4,K=4,input=56x56,filter", "'filter'"),
    ("N=32,G=2,C=4,K=4,input=56x56,filter=3x3,N=3", "given twice"),
    ("G=2,C=4,K=4,input=56x56,filter=3x3", "missing N"),
])
def test_malformed_spec_names_the_bad_token(spec, token):
    with pytest.raises(ProblemSyntaxError, match=token):
        parse_conv_problem(spec, Layout.NHWGC, DType.FP16)


@pytest.mark.parametrize("spec, field", [
    ("N=0,G=2,C=4,K=4,input=8x8,filter=3x3", "N"),
    ("N=1,G=-2,C=4,K=4,input=8x8,filter=3x3", "G"),
    ("N=1,G=2,C=4,K=4,input=8x0,filter=3x3", "input"),
    ("N=1,G=2,C=4,K=4,input=8x8,filter=3x3,stride=0", "stride"),
    ("N=1,G=2,C=4,K=4,input=8x8,filter=3x3,dilation=0", "dilation"),
    ("N=1,G=2,C=4,K=4,input=8x8,filter=3x3,pad=-1", "pad"),
    ("N=1,G=2,C=4,K=4,input=2x2,filter=3x3", "filter"),
    ("N=1,G=2,C=4,K=4,input=5x5,filter=3x3,dilation=3", "filter"),
    ("N=1,G=2,C=4,K=4,input=8x8,filter=3x3x3", "filter"),
    ("N=1,G=2,C=4,K=4,input=8x8x8x8,filter=3x3x3x3", "input"),
])
def test_invalid_sizes_name_the_field(spec, field):
    with pytest.raises(InvalidProblem) as info:
        parse_conv_problem(spec, Layout.NHWGC, DType.FP16)
    assert info.value.field == field


def test_direct_construction_validates_too():
    with pytest.raises(InvalidProblem, match="K"):
        ConvProblem(N=1, G=1, C=1, K=0, input=(4,), filter=(1,), stride=(1,), pad=(0,), dilation=(1,))


@pytest.mark.parametrize("text, layout", [
    ("NHWGC", Layout.NHWGC), ("nwgc", Layout.NHWGC), ("NDHWGC", Layout.NHWGC),
    ("NGCHW", Layout.NGCHW), ("NGCHW/GKCYX/NGKHW", Layout.NGCHW),
    ("NGCHW_GKYXC", Layout.NGCHW_GKYXC), ("NGCHW/GKYXC/NGKHW", Layout.NGCHW_GKYXC),
    ("GNHWC", Layout.GNHWC), ("GNDHWC", Layout.GNHWC),
])
def test_layout_spellings(text, layout):
    assert Layout.parse(text) is layout


def test_unknown_layout_and_dtype_list_choices():
    with pytest.raises(ProblemSyntaxError, match="nhwgc"):
        Layout.parse("NCHW")
    with pytest.raises(ProblemSyntaxError, match="bf16_fp32w"):
        DType.parse("fp64")


def test_padding_per_side():
    """pad= pads both sides; pad_left=/pad_right= each side; symmetric problems keep their keys."""
    sym = parse_conv_problem("N=1,G=1,C=1,K=1,input=8x8,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    assert sym.pad == sym.pad_right == (1, 1) and sym.symmetric and "pad=1x1," in sym.key and "pad_left" not in sym.key
    per_dim = parse_conv_problem("N=1,G=1,C=1,K=1,input=8x8,filter=3x3,pad=1x2", Layout.NHWGC, DType.FP16)
    assert per_dim.pad == per_dim.pad_right == (1, 2) and per_dim.output == (8, 10)
    same = parse_conv_problem("N=1,G=1,C=1,K=1,input=8x8,filter=4x4,stride=2,pad_left=1,pad_right=2",
                              Layout.NHWGC, DType.FP16)
    assert same.pad == (1, 1) and same.pad_right == (2, 2) and not same.symmetric
    assert same.output == (4, 4)  # TensorFlow's SAME: ceil(8 / 2)
    assert "pad_left=1x1,pad_right=2x2" in same.key
    again = parse_conv_problem(same.spec(), Layout.NHWGC, DType.FP16)
    assert again == same and again.key == same.key
    only_right = parse_conv_problem("N=1,G=1,C=1,K=1,input=8,filter=3,pad_right=2", Layout.NHWGC, DType.FP16)
    assert only_right.pad == (0,) and only_right.pad_right == (2,) and only_right.output == (8,)
    with pytest.raises(ProblemSyntaxError, match="not both"):
        parse_conv_problem("N=1,G=1,C=1,K=1,input=8,filter=3,pad=1,pad_left=1", Layout.NHWGC, DType.FP16)
    with pytest.raises(InvalidProblem, match="pad_right"):
        ConvProblem(N=1, G=1, C=1, K=1, input=(8,), filter=(3,), stride=(1,), pad=(1,), dilation=(1,), pad_right=(-1,))
    # Python callers that name only pad get symmetric padding, as before.
    p = ConvProblem(N=1, G=1, C=1, K=1, input=(8,), filter=(3,), stride=(1,), pad=(1,), dilation=(1,))
    assert p.pad_right == (1,) and p.output == (8,)


# --- the output epilogue: alpha and beta -----------------------------------------------------------
BASE = "N=1,G=2,C=3,K=4,input=8x8,filter=3x3,pad=1"


def test_default_epilogue_keeps_the_plain_key():
    """alpha=1, beta=0 (given or not) spell nothing: tuning DB keys of existing problems do not change."""
    plain = parse_conv_problem(BASE, Layout.NHWGC, DType.FP16)
    assert plain.key == "conv_bwd_weight:nhwgc:fp16:2d:N=1,G=2,C=3,K=4,input=8x8,filter=3x3,stride=1x1,pad=1x1,dilation=1x1"
    assert (plain.alpha, plain.beta) == (1.0, 0.0) and not plain.has_epilogue and not plain.has_d
    for spelled in ("alpha=1,beta=0", "alpha=1.0", "beta=-0", "beta=0.0e5,alpha=+1"):
        same = parse_conv_problem(f"{BASE},{spelled}", Layout.NHWGC, DType.FP16)
        assert same == plain and same.key == plain.key, spelled


@pytest.mark.parametrize("spelled, alpha, beta, suffix", [
    ("alpha=0.5,beta=2", 0.5, 2.0, ",alpha=0.5,beta=2"),
    ("beta=2,alpha=0.5", 0.5, 2.0, ",alpha=0.5,beta=2"),  # canonical order
    ("alpha=-0.25", -0.25, 0.0, ",alpha=-0.25"),
    ("beta=1", 1.0, 1.0, ",beta=1"),
    ("alpha=0", 0.0, 0.0, ",alpha=0"),
    ("alpha=.1,beta=1e-5", 0.1, 1e-5, ",alpha=0.1,beta=1e-05"),
    ("alpha=3E2,beta=-7.", 300.0, -7.0, ",alpha=300,beta=-7"),
    ("alpha=1e20", 1e20, 0.0, ",alpha=1e+20"),
])
def test_epilogue_is_part_of_the_key_and_round_trips(spelled, alpha, beta, suffix):
    p = parse_conv_problem(f"{BASE},{spelled}", Layout.NGCHW, DType.FP32)
    assert (p.alpha, p.beta) == (alpha, beta)
    assert p.key.endswith("dilation=1x1" + suffix) and p.spec().endswith(suffix)
    again = parse_conv_problem(p.spec(), Layout.NGCHW, DType.FP32)
    assert again == p and again.key == p.key
    from factory.selector import problem_from_key

    assert problem_from_key(p.key) == p
    assert p.has_d == (beta != 0.0) and p.has_epilogue


def test_epilogue_changes_the_problem():
    plain = parse_conv_problem(BASE, Layout.NHWGC, DType.FP16)
    scaled = parse_conv_problem(f"{BASE},alpha=2", Layout.NHWGC, DType.FP16)
    assert scaled != plain and scaled.key != plain.key and hash(scaled) != hash(plain)
    built = ConvProblem(N=1, G=2, C=3, K=4, input=(8, 8), filter=(3, 3), stride=(1, 1), pad=(1, 1),
                        dilation=(1, 1), alpha=2, beta=-0.0)
    assert built == scaled and isinstance(built.alpha, float) and str(built.beta) == "0.0"
    # D is read once more: the roofline's minimum bytes count it.
    bilinear = parse_conv_problem(f"{BASE},beta=1", Layout.NHWGC, DType.FP16)
    assert bilinear.min_bytes - plain.min_bytes == 2 * 3 * 4 * 9 * 2


@pytest.mark.parametrize("spelled, error, says", [
    ("alpha=nan", ProblemSyntaxError, "alpha='nan'"),
    ("beta=inf", ProblemSyntaxError, "beta='inf'"),
    ("alpha=0x10", ProblemSyntaxError, "not a decimal number"),
    ("alpha=1_0", ProblemSyntaxError, "not a decimal number"),
    ("alpha=", ProblemSyntaxError, "alpha=''"),
    ("beta=1/2", ProblemSyntaxError, "beta='1/2'"),
    ("beta=1e999", InvalidProblem, "invalid beta: must be finite"),
    ("alpha=1e39", InvalidProblem, "invalid alpha: must be finite and within fp32 range"),
    ("alpha=2,alpha=3", ProblemSyntaxError, "given twice"),
])
def test_bad_epilogue_values_are_one_line_errors(spelled, error, says):
    with pytest.raises(error, match=says) as info:
        parse_conv_problem(f"{BASE},{spelled}", Layout.NHWGC, DType.FP16)
    assert "\n" not in str(info.value)


def test_int8_epilogue_takes_integers_only():
    """int8 problems scale in exact int32 arithmetic; alpha and beta travel as fp32, exact up to 2**24."""
    p = parse_conv_problem(f"{BASE},alpha=-3,beta=2.0", Layout.NHWGC, DType.INT8)
    assert (p.alpha, p.beta) == (-3.0, 2.0) and p.key.endswith(",alpha=-3,beta=2")
    for spelled, field in (("alpha=0.5", "alpha"), ("beta=1e-3", "beta"), ("beta=16777217", "beta")):
        with pytest.raises(InvalidProblem, match="integer") as info:
            parse_conv_problem(f"{BASE},{spelled}", Layout.NHWGC, DType.INT8)
        assert info.value.field == field
    assert parse_conv_problem(f"{BASE},beta=16777216", Layout.NHWGC, DType.INT8).beta == 2.0**24


def test_epilogue_only_for_the_op_that_has_one():
    from factory.problem import Op

    for spelled, field in (("beta=1", "beta"), ("alpha=2", "alpha")):
        with pytest.raises(InvalidProblem, match="conv_bwd_data takes no alpha/beta") as info:
            parse_conv_problem(f"{BASE},{spelled}", Layout.NHWGC, DType.FP16, Op.CONV_BWD_DATA)
        assert info.value.field == field
    assert parse_conv_problem(f"{BASE},alpha=1,beta=0", Layout.NHWGC, DType.FP16, Op.CONV_BWD_DATA).alpha == 1.0


@pytest.mark.parametrize("value", ["2", None, True, (1.0,), float("nan"), float("-inf"), 10**400, 1e300])
def test_direct_construction_validates_the_epilogue(value):
    for name in ("alpha", "beta"):
        with pytest.raises(InvalidProblem) as info:
            ConvProblem(N=1, G=1, C=1, K=1, input=(4,), filter=(1,), stride=(1,), pad=(0,), dilation=(1,),
                        **{name: value})
        assert info.value.field == name
