"""GroupNorm backward problems every applicable instance must get right: both layouts, every dtype and
rank, HxW=1, 7x9, one channel per group, odd N, spatial sizes split across blocks, C wider than one
block's lanes, and GroupNorm without gamma/beta."""

from factory.ops.groupnorm_bwd import GroupNormProblem, parse_groupnorm_problem
from factory.problem import DType, Layout

CASES = [
    (Layout.NGCHW, DType.FP16, "N=2,C=64,G=32,input=7x9"),
    (Layout.NHWGC, DType.FP16, "N=3,C=64,G=32,input=7x9"),
    (Layout.NGCHW, DType.BF16, "N=3,C=32,G=32,input=1x1"),
    (Layout.NHWGC, DType.FP32, "N=1,C=40,G=8,input=1x1"),
    (Layout.NGCHW, DType.FP32, "N=3,C=24,G=24,input=10x12"),
    (Layout.NHWGC, DType.BF16, "N=2,C=48,G=48,input=6x7"),
    (Layout.NGCHW, DType.FP16, "N=1,C=4,G=2,input=21000"),
    (Layout.NHWGC, DType.BF16, "N=5,C=48,G=6,input=37"),
    (Layout.NGCHW, DType.BF16, "N=1,C=16,G=4,input=6x10x12"),
    (Layout.NHWGC, DType.FP16, "N=2,C=32,G=8,input=5x7x9"),
    (Layout.NHWGC, DType.FP16, "N=1,C=4096,G=32,input=3x5"),
    (Layout.NGCHW, DType.FP32, "N=2,C=8,G=2,input=96x96"),
    (Layout.NHWGC, DType.FP32, "N=2,C=8,G=4,input=64x64"),
    (Layout.NGCHW, DType.FP16, "N=2,C=32,G=8,input=9x9,affine=0"),
    (Layout.NHWGC, DType.BF16, "N=3,C=24,G=3,input=11,affine=0"),
    (Layout.NGCHW, DType.FP16, "N=4,C=320,G=32,input=32x32"),
]


def problems() -> list[GroupNormProblem]:
    return [parse_groupnorm_problem(spec, layout, dtype) for layout, dtype, spec in CASES]
