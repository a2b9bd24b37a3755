"""Problems the GPU tests run every applicable instance on: all layouts, dtypes and ranks, with odd
sizes (C=3, H=17, stride 2, dilation 2, pad 0, N=1), asymmetric padding, depthwise and grouped cases,
and output epilogues (alpha, beta: Scale and Bilinear with a D input)."""

from factory.problem import DType, Layout, parse_conv_problem

CASES = [
    (Layout.NHWGC, DType.FP16, "N=2,G=4,C=3,K=5,input=17x17,filter=3x3,stride=2,pad=1"),
    (Layout.NGCHW, DType.FP32, "N=1,G=2,C=8,K=4,input=9x11,filter=3x3,stride=1,pad=0,dilation=2"),
    (Layout.NGCHW_GKYXC, DType.BF16, "N=3,G=3,C=4,K=4,input=13x7,filter=2x3,stride=2,pad=1"),
    (Layout.GNHWC, DType.BF16_FP32W, "N=2,G=2,C=16,K=8,input=10x10,filter=3x3,pad=1"),
    (Layout.NHWGC, DType.INT8, "N=2,G=8,C=4,K=4,input=12x12,filter=3x3,pad=1"),
    (Layout.NHWGC, DType.FP16, "N=4,G=64,C=1,K=1,input=28x28,filter=3x3,pad=1"),
    (Layout.NGCHW, DType.BF16, "N=2,G=24,C=1,K=1,input=17x17,filter=5x5,stride=2,pad=2"),
    (Layout.NHWGC, DType.FP32, "N=2,G=8,C=1,K=1,input=101,filter=15,pad=7"),
    (Layout.GNHWC, DType.FP16, "N=3,G=2,C=6,K=5,input=33,filter=3,stride=2,pad=0"),
    (Layout.NHWGC, DType.BF16, "N=1,G=2,C=8,K=8,input=6x7x5,filter=3x3x3,pad=1"),
    (Layout.NGCHW, DType.INT8, "N=2,G=4,C=2,K=2,input=5x6x7,filter=3x1x1,pad=1x0x0"),
    (Layout.GNHWC, DType.FP32, "N=2,G=16,C=1,K=1,input=4x9x9,filter=3x3x3,pad=1"),
    (Layout.NGCHW_GKYXC, DType.FP16, "N=5,G=1,C=32,K=16,input=64,filter=5,pad=2,dilation=2"),
    (Layout.NHWGC, DType.BF16_FP32W, "N=2,G=1,C=64,K=32,input=14x14,filter=1x1"),
    (Layout.NGCHW, DType.FP16, "N=2,G=32,C=4,K=4,input=15x15,filter=3x3,pad=1"),
    (Layout.NHWGC, DType.INT8, "N=3,G=32,C=1,K=1,input=9x9,filter=3x3,pad=1"),
    (Layout.NGCHW_GKYXC, DType.FP32, "N=1,G=3,C=5,K=7,input=5x6x7,filter=2x2x2,stride=2,pad=0"),
    (Layout.GNHWC, DType.INT8, "N=1,G=4,C=8,K=8,input=19x5,filter=3x3,dilation=2,pad=2"),
    (Layout.NHWGC, DType.FP16, "N=2,G=16,C=2,K=2,input=11x11,filter=3x3,stride=2,pad=1"),
    (Layout.NGCHW_GKYXC, DType.BF16_FP32W, "N=2,G=4,C=1,K=1,input=7x9,filter=3x3,pad=1"),
    (Layout.NHWGC, DType.BF16, "N=3,G=24,C=1,K=1,input=17x19,filter=3x3,stride=2,pad=2,dilation=2"),
    (Layout.NGCHW_GKYXC, DType.FP32, "N=2,G=5,C=1,K=1,input=301,filter=7,stride=2,pad=3"),
    (Layout.GNHWC, DType.INT8, "N=2,G=16,C=1,K=1,input=13x11,filter=5x5,pad=2"),
    (Layout.NHWGC, DType.FP32, "N=1,G=40,C=1,K=1,input=1x1,filter=1x1"),
    (Layout.NHWGC, DType.FP16, "N=3,G=40,C=1,K=1,input=15x13,filter=3x3,stride=2,pad=1"),
    (Layout.NGCHW, DType.FP32, "N=2,G=6,C=1,K=1,input=20x23,filter=7x7,pad=3"),
    # Asymmetric padding (TensorFlow's "SAME" with an even filter or stride 2).
    (Layout.NHWGC, DType.FP16, "N=2,G=16,C=1,K=1,input=14x14,filter=4x4,stride=2,pad_left=1,pad_right=2"),
    (Layout.NHWGC, DType.FP32, "N=4,G=8,C=1,K=1,input=500,filter=15,pad_left=8,pad_right=6"),
    (Layout.NHWGC, DType.BF16, "N=4,G=32,C=1,K=1,input=56x56,filter=3x3,stride=2,pad_left=0,pad_right=1"),
    (Layout.GNHWC, DType.BF16, "N=2,G=2,C=6,K=4,input=21,filter=3,stride=2,pad_left=0,pad_right=2"),
    (Layout.NGCHW, DType.FP32, "N=1,G=2,C=3,K=4,input=5x6x7,filter=3x3x3,pad_left=1x0x1,pad_right=0x1x2"),
    (Layout.NHWGC, DType.FP16, "N=2,G=1,C=8,K=8,input=9x9,filter=3x3,stride=2,pad_left=0,pad_right=1"),
    # Filters no catalog lists: dwr and dwh instances specialized for the problem (filter, stride, dilation).
    (Layout.NHWGC, DType.FP16, "N=4,G=64,C=1,K=1,input=500,filter=31,pad=15"),
    (Layout.NGCHW, DType.BF16, "N=2,G=32,C=1,K=1,input=30x30,filter=9x9,pad=4"),
    (Layout.NHWGC, DType.FP16, "N=4,G=64,C=1,K=1,input=57x57,filter=11x11,stride=2,pad=5"),
    # Dense and grouped problems for the matrix-instruction family: C and K not multiples of 8, NGCHW
    # chunks along output rows, N=1, stride 2, dilation 2, pad 0, 1-D and 3-D.
    (Layout.NHWGC, DType.FP16, "N=4,G=1,C=64,K=48,input=15x13,filter=3x3,pad=1"),
    (Layout.NGCHW, DType.BF16, "N=2,G=2,C=24,K=40,input=16x16,filter=3x3,stride=2,pad=1"),
    (Layout.NGCHW_GKYXC, DType.FP16, "N=1,G=1,C=37,K=29,input=20x24,filter=3x3,pad=0,dilation=2"),
    (Layout.GNHWC, DType.BF16_FP32W, "N=3,G=2,C=32,K=16,input=7x9x11,filter=3x3x3,pad=1"),
    (Layout.NHWGC, DType.BF16, "N=8,G=14,C=24,K=24,input=28x28,filter=3x3,pad=1"),
    (Layout.NHWGC, DType.FP16, "N=2,G=1,C=256,K=128,input=14x14,filter=1x1"),
    (Layout.NGCHW, DType.FP16, "N=1,G=1,C=20,K=12,input=130,filter=7,pad=3"),
    (Layout.NHWGC, DType.BF16, "N=1,G=4,C=16,K=16,input=9x9x9,filter=3x3x3,stride=2,pad=1"),
    # int8 on s8 instructions (16-byte chunks of 16 elements), int8 saturated to an int8 result (alpha
    # large enough to saturate), and fp16 computed as fp8 (e5m2 x e4m3).
    (Layout.NHWGC, DType.INT8, "N=2,G=2,C=32,K=48,input=13x11,filter=3x3,pad=1"),
    (Layout.NGCHW, DType.INT8, "N=2,G=1,C=24,K=20,input=16x32,filter=3x3,pad=1"),
    (Layout.GNHWC, DType.INT8, "N=1,G=2,C=16,K=16,input=6x7x8,filter=3x3x3,pad=1,alpha=2,beta=-1"),
    (Layout.NHWGC, DType.INT8_SAT, "N=2,G=2,C=32,K=16,input=13x11,filter=3x3,pad=1,alpha=3"),
    (Layout.NGCHW, DType.INT8_SAT, "N=2,G=4,C=4,K=8,input=12x12,filter=3x3,pad=1,alpha=-2,beta=5"),
    (Layout.NHWGC, DType.FP16_COMP_BF8_FP8, "N=4,G=1,C=64,K=48,input=15x13,filter=3x3,pad=1"),
    (Layout.NGCHW, DType.FP16_COMP_BF8_FP8, "N=2,G=2,C=24,K=40,input=16x16,filter=3x3,stride=2,pad=1"),
    (Layout.GNHWC, DType.FP16_COMP_BF8_FP8, "N=1,G=1,C=37,K=29,input=20x24,filter=3x3,pad=0,dilation=2,alpha=0.5,beta=1"),
    (Layout.NGCHW_GKYXC, DType.FP16_COMP_BF8_FP8, "N=3,G=2,C=8,K=16,input=5x6x7,filter=3x3x3,pad=1"),
    # NGCHW grouped, large enough for the transposing pass's split-K points, with several groups per tile
    # after it (channels and positions multiples of 8: the pass's 16-byte path; 13x13: its element path).
    (Layout.NGCHW, DType.FP16, "N=4,G=4,C=8,K=16,input=16x16,filter=3x3,pad=1"),
    (Layout.NGCHW_GKYXC, DType.BF16, "N=6,G=4,C=8,K=8,input=13x13,filter=3x3,pad=1"),
    # Output epilogues: Bilinear on a grouped fp16 problem; Bilinear on depthwise fp32 weights (atomic
    # split-K then goes through a workspace and the finishing kernel); int8 in exact integers.
    (Layout.NHWGC, DType.FP16, "N=2,G=4,C=3,K=5,input=17x17,filter=3x3,stride=2,pad=1,alpha=0.5,beta=-1"),
    (Layout.NHWGC, DType.BF16_FP32W, "N=4,G=64,C=1,K=1,input=20x20,filter=3x3,pad=1,alpha=0.25,beta=1"),
    (Layout.GNHWC, DType.INT8, "N=2,G=8,C=4,K=4,input=12x12,filter=3x3,pad=1,alpha=-3,beta=2"),
    (Layout.NHWGC, DType.BF16, "N=4,G=1,C=32,K=16,input=12x12,filter=3x3,pad=1,alpha=2,beta=0.5"),
]


def problems():
    return [parse_conv_problem(spec, layout, dtype) for layout, dtype, spec in CASES]
