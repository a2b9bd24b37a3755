"""On a GPU: `gwl` (grouped backward-weight on matrix instructions, windows in shared memory) against
PyTorch (cuDNN) on 50 seeded random grouped shapes it serves.

Shapes: C and K per group drawn from 8-64 (multiples of 8, K not always a multiple of 16), G 1-40, 1-D
filters of 2-31 taps and 2-D k x l up to 7 x 7, stride 1-2, dilation 1-2, N 1-12, spatial sizes that are
multiples of nothing, NHWGC, GNHWC, and NGCHW and NGCHW_GKYXC (through the transposing pass), fp16, bf16,
bf16 with an fp32 weight gradient, fp32. For each, the instance the heuristic ranks first, the one with the
fewest splits, and the best-ranked of each stage count run through Kernel.run on PyTorch tensors (outputs
poisoned first) and must agree with aten.convolution_backward as `kfactory bench` requires."""

import numpy as np
import pytest

from factory.problem import DType, Layout, parse_conv_problem
from gpu_against_torch import assert_agree_with_pytorch, cuda_target, stage_picks_on_random_shapes

pytestmark = pytest.mark.gpu

SEED = 5050
COUNT = 50
DTYPES = (DType.FP16, DType.BF16, DType.BF16_FP32W, DType.FP32)
LAYOUTS = (Layout.NHWGC, Layout.GNHWC, Layout.NGCHW, Layout.NGCHW_GKYXC)
CHANNELS = (8, 16, 24, 32, 48, 64)


def draw_filter_and_sizes(rng: np.random.Generator, dilation: int) -> tuple[list[int], list[int]]:
    """A 1-D filter of 2-31 taps over 40-699 positions (30 %), or a 2-D k x l up to 7 x 7 over 5-49 a side."""
    if rng.random() < 0.3:
        filt = [int(rng.integers(2, 32))]
        return filt, [int(rng.integers(max(filt[0] * dilation, 40), 700))]
    f = int(rng.integers(1, 8))
    filt = [f, f if rng.random() < 0.7 else int(rng.integers(1, 8))]
    return filt, [int(rng.integers(max(v * dilation, 5), 50)) for v in filt]


def draw(rng: np.random.Generator) -> str:
    """One grouped problem: 1-D (30 %) or 2-D (70 %)."""
    c, k = (int(rng.choice(CHANNELS)) for _ in range(2))
    g = int(rng.integers(1, 41))
    n = int(rng.integers(1, 13))
    stride = int(rng.choice([1, 1, 2]))
    dilation = int(rng.choice([1, 1, 2])) if stride == 1 else 1
    filt, sizes = draw_filter_and_sizes(rng, dilation)
    pad = [dilation * (v - 1) // 2 for v in filt]
    x = "x".join
    return (f"N={n},G={g},C={c},K={k},input={x(map(str, sizes))},filter={x(map(str, filt))},"
            f"stride={stride},pad={x(map(str, pad))},dilation={dilation}")


def draw_problem(rng: np.random.Generator):
    layout = LAYOUTS[int(rng.integers(len(LAYOUTS)))]
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    return parse_conv_problem(draw(rng), layout, dtype)


def test_gwl_matches_pytorch_on_random_shapes(gpu_backend):
    target = cuda_target(gpu_backend)
    runs, shapes = stage_picks_on_random_shapes("gwl", draw_problem, COUNT, SEED, target)
    assert assert_agree_with_pytorch(runs, gpu_backend, SEED, f"gwl instances on {shapes} random grouped shapes") >= COUNT
