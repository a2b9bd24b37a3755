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
