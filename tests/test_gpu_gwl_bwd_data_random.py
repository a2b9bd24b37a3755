"""On a GPU: backward-data `gwl` (grouped, weights and windows in shared memory, stride phases) against
PyTorch (cuDNN) on 60 seeded random grouped shapes it serves.

Shapes: C and K per group drawn from 8-64 (multiples of 8, K not always a multiple of 16), G 1-40, 1-D
filters of 2-31 taps and 2-D k x l up to 7 x 7, stride 1 or 2 (2 or 3 along one axis now and then),
dilation 1-2 at stride 1, symmetric and asymmetric padding, N 1-12,
spatial sizes that are multiples of nothing, NHWGC, GNHWC, and NGCHW and NGCHW_GKYXC (through the
transposing pass), fp16, bf16, fp32. For each, the instance the heuristic ranks first, the one with the
fewest walkers, and the best-ranked of each stage count run through Kernel.run on PyTorch tensors (outputs
poisoned first) and must agree with aten.convolution_backward as `kfactory bench` requires."""

import numpy as np
import pytest

from factory.problem import DType, InvalidProblem, Layout, Op, parse_conv_problem
from gpu_against_torch import assert_agree_with_pytorch, cuda_target, stage_picks_on_random_shapes
from test_gpu_gwl_random import draw_filter_and_sizes

pytestmark = pytest.mark.gpu

SEED = 6060
COUNT = 60
DTYPES = (DType.FP16, DType.BF16, DType.FP32)
LAYOUTS = (Layout.NHWGC, Layout.GNHWC, Layout.NGCHW, Layout.NGCHW_GKYXC)
CHANNELS = (8, 16, 24, 32, 48, 64)


def draw(rng: np.random.Generator) -> str:
    """One grouped problem: 1-D (30 %) or 2-D (70 %); a third strided, a fifth with asymmetric padding."""
    c, k = (int(rng.choice(CHANNELS)) for _ in range(2))
    g, n = int(rng.integers(1, 41)), int(rng.integers(1, 13))
    strided = rng.random() < 0.35
    dilation = 1 if strided else int(rng.choice([1, 1, 2]))
    filt, sizes = draw_filter_and_sizes(rng, dilation)
    x = lambda values: "x".join(map(str, values))  # noqa: E731
    if rng.random() < 0.2:
        left = [int(rng.integers(0, dilation * (v - 1) + 1)) for v in filt]
        right = [int(rng.integers(0, dilation * (v - 1) + 1)) for v in filt]
        pad = f"pad_left={x(left)},pad_right={x(right)}"
    else:
        pad = f"pad={x(dilation * (v - 1) // 2 for v in filt)}"
    stride = [int(rng.choice([2, 2, 2, 3])) if strided else 1 for _ in filt]
    return f"N={n},G={g},C={c},K={k},input={x(sizes)},filter={x(filt)},stride={x(stride)},{pad},dilation={dilation}"


def draw_problem(rng: np.random.Generator):
    layout = LAYOUTS[int(rng.integers(len(LAYOUTS)))]
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    spec = draw(rng)
    try:
        return parse_conv_problem(spec, layout, dtype, Op.CONV_BWD_DATA)
    except InvalidProblem:
        return draw_problem(rng)  # a dilated filter past the padded input: draw again


def test_gwl_bwd_data_matches_pytorch_on_random_shapes(gpu_backend):
    target = cuda_target(gpu_backend, cudnn_tf32=False)
    runs, shapes = stage_picks_on_random_shapes("gwl", draw_problem, COUNT, SEED, target,
                                                fewest=lambda params: params.walkers)
    what = f"backward-data gwl instances on {shapes} random grouped shapes"
    assert assert_agree_with_pytorch(runs, gpu_backend, SEED, what) >= COUNT
