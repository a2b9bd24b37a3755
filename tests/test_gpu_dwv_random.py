"""On a GPU: `dwv` (channels-last 1-D depthwise backward-weight, input columns sliding through registers)
against PyTorch (cuDNN) on 50 seeded random channels-last 1-D depthwise shapes it serves.

Shapes: filters of 3-64 taps, stride 1-3, dilation 1-2, N 1-48, G any count from 1 to 512 (a multiple of
8 in most draws), lengths that are multiples of nothing, fp16, bf16, bf16 with an fp32 weight gradient,
fp32. For each, the instance the heuristic ranks first, the one with the fewest splits, and the
best-ranked of each vector width run through Kernel.run on PyTorch tensors (outputs poisoned first) and
must agree with aten.convolution_backward as `kfactory bench` requires."""

import numpy as np
import pytest

from factory.problem import DType, Layout, parse_conv_problem
from gpu_against_torch import assert_agree_with_pytorch, cuda_target, stage_picks_on_random_shapes

pytestmark = pytest.mark.gpu

SEED = 6161
COUNT = 50
DTYPES = (DType.FP16, DType.BF16, DType.BF16_FP32W, DType.FP32)


def draw(rng: np.random.Generator) -> str:
    """One channels-last 1-D depthwise problem."""
    g = 8 * int(rng.integers(1, 65)) if rng.random() < 0.7 else int(rng.integers(1, 513))
    n = int(rng.integers(1, 49))
    stride = int(rng.choice([1, 1, 2, 3]))
    dilation = int(rng.choice([1, 1, 2])) if stride == 1 else 1
    taps = int(rng.integers(3, 65))
    length = int(rng.integers(max(taps * dilation, 40), 1500))
    pad = dilation * (taps - 1) // 2
    return f"N={n},G={g},C=1,K=1,input={length},filter={taps},stride={stride},pad={pad},dilation={dilation}"


def test_dwv_matches_pytorch_on_random_shapes(gpu_backend):
    target = cuda_target(gpu_backend)

    def draw_problem(rng: np.random.Generator):
        dtype = DTYPES[int(rng.integers(len(DTYPES)))]
        return parse_conv_problem(draw(rng), Layout.NHWGC, dtype)

    runs, shapes = stage_picks_on_random_shapes("dwv", draw_problem, COUNT, SEED, target,
                                                kind=lambda p: p.vector)
    assert assert_agree_with_pytorch(runs, gpu_backend, SEED, f"dwv instances on {shapes} random channels-last 1-D shapes") >= COUNT
