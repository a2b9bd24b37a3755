"""On a GPU: conv_bwd_data's families against the numpy reference and against PyTorch (cuDNN).

1. Every applicable instance of every family on each of PROBLEMS (all layouts, dtypes and ranks; odd
   C and K, stride 2 and 3, dilation 2, pad 0, asymmetric padding, N=1, depthwise, 1x1 in every layout), through the
   tuner: outputs poisoned, every element checked. One test per (family, problem): `-k mma`.
2. 100 seeded random problems per family through Kernel.run on PyTorch tensors, each with the instance
   the heuristic ranks first, against aten.convolution_backward (output mask [True, False, False]);
   `wgmma` draws fp16 and bf16 problems with C*K >= 256 only.
   The depthwise-only families (`dwr`; `dws` and `dwp` in their W-contiguous 1-D/2-D cells) draw depthwise problems: 1-D filters up to 64 taps, 2-D up to
   13x13, 3-D, strides 1-3, dilation 1-2, asymmetric padding, every layout, fp16/bf16/fp32; `dwm` the 2-D
   16-bit ones of those layouts that it serves; `dwc` the channels-last 1-D/2-D ones it serves."""


import numpy as np
import pytest

from factory.ops.conv_bwd_data import SOLVER
from factory.ops.conv_bwd_data.wgmma import MIN_PRODUCTS as WGMMA_MIN_PRODUCTS
from factory.problem import DType, InvalidProblem, Layout, Op, parse_conv_problem
from factory.selector import lookup
from gpu_against_torch import check_every_instance, cuda_target, heuristic_picks, run_against_pytorch
from test_gpu_mma_random import draw

pytestmark = pytest.mark.gpu

L, D = Layout, DType
PROBLEMS = [
    (L.NHWGC, D.FP16, "N=2,G=1,C=64,K=48,input=15x13,filter=3x3,pad=1"),
    (L.NHWGC, D.BF16, "N=2,G=2,C=24,K=40,input=16x17,filter=3x3,stride=2,pad=1"),
    (L.NGCHW, D.FP16, "N=1,G=1,C=37,K=29,input=20x24,filter=3x3,pad=0,dilation=2"),
    (L.NGCHW_GKYXC, D.FP32, "N=3,G=2,C=8,K=16,input=5x6x7,filter=3x3x3,pad=1"),
    (L.GNHWC, D.INT8, "N=2,G=2,C=32,K=48,input=13x11,filter=3x3,pad=1"),
    (L.NHWGC, D.FP32, "N=2,G=4,C=3,K=5,input=17x17,filter=3x3,stride=2,pad=1"),
    (L.NGCHW, D.BF16, "N=2,G=2,C=16,K=8,input=25x19,filter=5x5,stride=3,pad=2"),
    (L.NHWGC, D.INT8, "N=1,G=1,C=32,K=64,input=9x9x9,filter=3x3x3,stride=2,pad=1"),
    (L.GNHWC, D.FP16, "N=3,G=2,C=6,K=5,input=33,filter=3,stride=2,pad=0"),
    (L.NGCHW_GKYXC, D.BF16, "N=5,G=1,C=32,K=16,input=64,filter=5,pad=2,dilation=2"),
    (L.NHWGC, D.FP16, "N=2,G=1,C=256,K=128,input=14x14,filter=1x1"),
    (L.NGCHW, D.FP32, "N=2,G=1,C=16,K=32,input=14x14,filter=1x1,stride=2"),
    (L.NGCHW, D.FP16, "N=3,G=2,C=48,K=40,input=10x12,filter=1x1"),  # pointwise NGKHW: chunks along positions
    (L.NGCHW_GKYXC, D.BF16, "N=2,G=1,C=64,K=32,input=100,filter=1"),
    (L.NHWGC, D.BF16, "N=8,G=14,C=24,K=24,input=28x28,filter=3x3,pad=1"),
    # gwl: grouped layers with C, K up to 64 (GNHWC with K = 8; NGCHW through the transposing pass, 1-D).
    (L.GNHWC, D.FP16, "N=3,G=5,C=16,K=8,input=19x13,filter=3x3,pad=1,dilation=2"),
    (L.NGCHW, D.FP32, "N=2,G=3,C=24,K=16,input=77,filter=5,pad_left=1,pad_right=3"),
    (L.NGCHW, D.INT8, "N=2,G=4,C=2,K=2,input=5x6x7,filter=3x1x1,pad=1x0x0"),
    (L.NHWGC, D.FP16, "N=2,G=1,C=8,K=8,input=9x9,filter=3x3,stride=2,pad_left=0,pad_right=1"),
    (L.NGCHW_GKYXC, D.FP16, "N=1,G=3,C=5,K=7,input=5x6x7,filter=2x2x2,stride=2,pad=0"),
    (L.NHWGC, D.INT8_SAT, "N=2,G=2,C=32,K=64,input=13x11,filter=3x3,stride=2,pad=1"),  # sums past +-127
    # Small groups side by side in a tile (groups_per_tile): G not a multiple of them, GNHWC's groups apart.
    (L.NGCHW, D.FP16, "N=2,G=5,C=16,K=16,input=12x10,filter=3x3,stride=2,pad=1"),
    (L.GNHWC, D.BF16, "N=2,G=7,C=8,K=16,input=5x9x7,filter=3x3x3,pad=1"),
    # Depthwise: the direct family's vectors along groups (NHWGC), long and large filters, 3-D.
    (L.NHWGC, D.FP16, "N=4,G=64,C=1,K=1,input=28x28,filter=3x3,pad=1"),
    (L.NGCHW, D.BF16, "N=2,G=24,C=1,K=1,input=17x17,filter=5x5,stride=2,pad=2"),
    (L.NHWGC, D.FP32, "N=2,G=8,C=1,K=1,input=301,filter=31,pad=15"),
    (L.GNHWC, D.FP16, "N=2,G=16,C=1,K=1,input=4x9x9,filter=3x3x3,pad=1"),
    (L.NHWGC, D.BF16, "N=3,G=32,C=1,K=1,input=30x30,filter=9x9,stride=2,pad=4"),
    (L.NGCHW, D.INT8_SAT, "N=2,G=8,C=1,K=1,input=200,filter=63,pad=31"),
    # Small planes: dws and dwp take several whole planes a block (G not a multiple of them).
    (L.NGCHW, D.FP16, "N=2,G=7,C=1,K=1,input=7x6,filter=3x3,pad=1"),
    (L.GNHWC, D.BF16, "N=3,G=5,C=1,K=1,input=9x11,filter=5x5,stride=2,pad_left=2x1,pad_right=1x2"),
    (L.NGCHW, D.FP32, "N=3,G=37,C=1,K=1,input=14x14,filter=3x3,pad=1"),
    (L.NGCHW_GKYXC, D.INT8, "N=5,G=9,C=1,K=1,input=13x7,filter=7x7,pad=3"),
    # dwm: warps of several planes (N not a multiple of them), tiles both ways, stride 2 along H only, dilation.
    (L.NGCHW, D.FP16, "N=9,G=3,C=1,K=1,input=14x14,filter=7x7,pad=3"),
    (L.NGCHW_GKYXC, D.BF16, "N=5,G=4,C=1,K=1,input=27x23,filter=3x3,stride=2x1,pad=2,dilation=2"),
]


def problems() -> list:
    return [parse_conv_problem(spec, layout, dtype, Op.CONV_BWD_DATA) for layout, dtype, spec in PROBLEMS]


CASES = [(family, problem) for problem in problems() for family in sorted(SOLVER.families)]


@pytest.mark.parametrize(("family", "problem"), CASES, ids=lambda v: v if isinstance(v, str) else v.key)
def test_every_applicable_instance_matches_reference(family, problem, gpu_backend):
    check_every_instance(family, problem, gpu_backend)

SEED = 2027
COUNT = 100


def random_problems(dtypes: tuple = (D.FP16, D.BF16, D.FP32), min_products: int = 0) -> list:
    """COUNT drawn problems; those with C*K under min_products are drawn again."""
    rng = np.random.default_rng(SEED)
    drawn: list = []
    while len(drawn) < COUNT:
        layout, dtype, spec = draw(rng, tuple(Layout), dtypes)
        problem = parse_conv_problem(spec, layout, dtype, Op.CONV_BWD_DATA)
        if problem.C * problem.K >= min_products:
            drawn.append(problem)
    return drawn


DEPTHWISE_ONLY = ("dwr", "dws", "dwp")
DWP_MIN_PLANES = 4  # the fewest planes a dwp point takes (instances/conv_bwd_data_dwp.toml)


def _axis_pads(rng: np.random.Generator, span: int) -> tuple[int, int]:
    return int(rng.integers(0, span)), int(rng.integers(0, span))


def random_depthwise_problems(layouts: tuple = tuple(Layout), ndims: tuple = (1, 2, 2, 3),
                              dtypes: tuple = (D.FP16, D.BF16, D.FP32)) -> list:
    """C = K = 1 problems as networks have them, and odd ones: long 1-D filters, 2-D up to 13x13, 3-D."""
    rng = np.random.default_rng(SEED + 1)
    drawn: list = []
    while len(drawn) < COUNT:
        ndim = int(rng.choice(ndims))
        if ndim == 1:
            filt = (int(rng.integers(2, 65)),)
            size = (int(rng.integers(filt[0], 700)),)
        elif ndim == 2:
            k = int(rng.choice([3, 3, 5, 7, 9, 11, 13]))
            filt = (k, k) if rng.random() < 0.8 else (int(rng.integers(1, 14)), int(rng.integers(1, 14)))
            size = tuple(int(rng.integers(max(filt), 60)) for _ in range(2))
        else:
            filt = tuple(int(v) for v in [(3, 3, 3), (1, 3, 3), (3, 1, 1)][int(rng.integers(3))])
            size = tuple(int(rng.integers(max(filt), 12)) for _ in range(3))
        stride = tuple(int(rng.choice([1, 1, 2, 3])) for _ in range(ndim))
        dilation = tuple(int(rng.choice([1, 1, 2])) for _ in range(ndim))
        pads = [_axis_pads(rng, (f - 1) * d + 1) for f, d in zip(filt, dilation)]
        groups = int(rng.choice([1, 3, 8, 16, 24, 40, 64]))
        dims = lambda v: "x".join(map(str, v))  # noqa: E731
        spec = (f"N={int(rng.integers(1, 9))},G={groups},C=1,K=1,input={dims(size)},filter={dims(filt)},"
                f"stride={dims(stride)},dilation={dims(dilation)},"
                f"pad_left={dims(p[0] for p in pads)},pad_right={dims(p[1] for p in pads)}")
        layout = layouts[int(rng.integers(len(layouts)))]
        dtype = dtypes[int(rng.integers(len(dtypes)))]  # PyTorch has no int8 backward-data
        try:
            drawn.append(parse_conv_problem(spec, layout, dtype, Op.CONV_BWD_DATA))
        except InvalidProblem:
            continue  # a dilated filter past the padded input: draw again
    return drawn


# `pw` serves pointwise layers only, `gwl` grouped ones with C, K up to 64: their random problems are
# tests/test_gpu_pointwise.py's and tests/test_gpu_gwl_bwd_data_random.py's.
@pytest.mark.parametrize("family", sorted(f for f in SOLVER.families if f not in ("pw", "gwl")))
def test_families_match_pytorch_on_random_problems(family, gpu_backend):
    target = cuda_target(gpu_backend, cudnn_tf32=False)
    if family in ("dws", "dwp"):  # W-contiguous layouts, 1-D and 2-D
        drawn = random_depthwise_problems((L.NGCHW, L.NGCHW_GKYXC, L.GNHWC), (1, 2))
    else:
        drawn = random_depthwise_problems() if family in DEPTHWISE_ONLY else random_problems()
    if family == "wgmma":  # 16-bit operands, groups of C*K >= 256; the problems it serves (K takes 2-element chunks)
        drawn = [p for p in random_problems((D.FP16, D.BF16), WGMMA_MIN_PRODUCTS)
                 if any(c.family == "wgmma" for c in lookup(p, target=target))]
        assert len(drawn) >= 40
    if family == "dwp":  # runs of at least four planes (N x G >= 4)
        drawn = [p for p in drawn if p.N * p.G >= DWP_MIN_PLANES]
        assert len(drawn) >= 90
    if family == "dwc":  # channels-last 1-D/2-D; the problems it serves (G a multiple of a vector, planes a block fits)
        drawn = [p for p in random_depthwise_problems((L.NHWGC,), (1, 2)) if any(c.family == "dwc" for c in lookup(p, target=target))]
        assert len(drawn) >= 40
    if family == "dwm":  # W-contiguous 2-D, 16-bit; the problems it serves (W stride <= 2, planes a warp holds)
        drawn = [p for p in random_depthwise_problems((L.NGCHW, L.NGCHW_GKYXC, L.GNHWC), (2,), (D.FP16, D.BF16))
                 if any(c.family == "dwm" for c in lookup(p, target=target))]
        assert len(drawn) >= 40
    picks, failures = heuristic_picks(family, drawn, target)
    ran, disagreements = run_against_pytorch(picks, gpu_backend, SEED)
    failures += disagreements
    print(f"{family}: {ran} random problems run against PyTorch, {len(failures)} failed")
    assert not failures, "\n".join(failures)
    assert ran == len(drawn)
