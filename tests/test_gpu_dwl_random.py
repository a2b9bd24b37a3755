"""On a GPU: `dwl` (channels-last depthwise backward-weight, windows in shared memory) against PyTorch
(cuDNN) on 50 seeded random channels-last depthwise shapes it serves.

Shapes: 1-D filters of 3-40 taps and 2-D k x l up to 9 x 9, stride 1-2, dilation 1-2, N 2-48, G a
multiple of 8 (dwl copies 16 bytes of groups), spatial sizes that are multiples of nothing, fp16, bf16,
bf16 with an fp32 weight gradient, fp32. For each, the instance the heuristic ranks first, the one with
the fewest splits, and the best-ranked of each stage count run through Kernel.run on PyTorch tensors
(outputs poisoned first) and must agree with aten.convolution_backward as `kfactory bench` requires."""

import numpy as np
import pytest

from factory.problem import DType, Layout, parse_conv_problem
from gpu_against_torch import assert_agree_with_pytorch, cuda_target, stage_picks_on_random_shapes

pytestmark = pytest.mark.gpu

SEED = 4949
COUNT = 50
DTYPES = (DType.FP16, DType.BF16, DType.BF16_FP32W, DType.FP32)


def draw(rng: np.random.Generator) -> str:
    """One channels-last depthwise problem: 1-D (30 %) or 2-D (70 %)."""
    g = 8 * int(rng.integers(1, 65))
    n = int(rng.integers(2, 49))
    stride = int(rng.choice([1, 1, 2]))
    dilation = int(rng.choice([1, 1, 2])) if stride == 1 else 1
    if rng.random() < 0.3:
        filt = [int(rng.integers(3, 41))]
        sizes = [int(rng.integers(max(filt[0] * dilation, 40), 1500))]
    else:
        k = int(rng.integers(2, 10))
        filt = [k, k if rng.random() < 0.7 else int(rng.integers(1, 10))]
        sizes = [int(rng.integers(max(f * dilation, 9), 60)) for f in filt]
    pad = [dilation * (f - 1) // 2 for f in filt]
    x = "x".join
    return (f"N={n},G={g},C=1,K=1,input={x(map(str, sizes))},filter={x(map(str, filt))},"
            f"stride={stride},pad={x(map(str, pad))},dilation={dilation}")


def test_dwl_matches_pytorch_on_random_shapes(gpu_backend):
    target = cuda_target(gpu_backend)

    def draw_problem(rng: np.random.Generator):
        dtype = DTYPES[int(rng.integers(len(DTYPES)))]
        return parse_conv_problem(draw(rng), Layout.NHWGC, dtype)

    runs, shapes = stage_picks_on_random_shapes("dwl", draw_problem, COUNT, SEED, target)
    assert assert_agree_with_pytorch(runs, gpu_backend, SEED, f"dwl instances on {shapes} random channels-last shapes") >= COUNT
