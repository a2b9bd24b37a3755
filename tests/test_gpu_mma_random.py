"""On a GPU: the matrix-instruction families against PyTorch (cuDNN) on 100 seeded random problems each.

Problems are drawn over every layout, dtype the family takes (fp32 as 3xTF32) and rank, with channel counts that are and are not
multiples of 8, groups, strides, dilations and paddings; each runs the `mma` instance the heuristic ranks
(or `wgmma`, over the cells it takes) first among those that apply, through Kernel.run on PyTorch tensors (outputs poisoned first), and must
agree with aten.convolution_backward as `kfactory bench` requires."""

import numpy as np
import pytest

from factory.problem import DType, Layout, parse_conv_problem
from gpu_against_torch import cuda_target, heuristic_picks, run_against_pytorch

pytestmark = pytest.mark.gpu

SEED = 2026
COUNT = 100
DTYPES = (DType.FP16, DType.BF16, DType.BF16_FP32W, DType.FP32)
# What each family's problems are drawn over: its layouts and dtypes.
DRAWS = {
    "mma": (tuple(Layout), DTYPES + (DType.FP16_COMP_BF8_FP8,)),
    "wgmma": ((Layout.NHWGC, Layout.GNHWC), (DType.FP16, DType.BF16, DType.BF16_FP32W)),
}


def draw(rng: np.random.Generator, layouts: tuple[Layout, ...] = tuple(Layout),
         dtypes: tuple[DType, ...] = DTYPES) -> tuple[Layout, DType, str]:
    """One random backward-weight problem (its spec string), small enough to run in milliseconds."""
    while True:
        ndim = int(rng.choice([1, 2, 3], p=[0.25, 0.55, 0.2]))
        layout = layouts[int(rng.integers(len(layouts)))]
        dtype = dtypes[int(rng.integers(len(dtypes)))]
        g = int(rng.choice([1, 1, 2, 3, 4, 8, 14, 32]))
        c, k = (int(rng.choice([8, 16, 24, 32, 64])) if rng.random() < 0.6 else int(rng.integers(1, 48)) for _ in range(2))
        n = int(rng.integers(1, 9))
        size_range = {1: (8, 400), 2: (5, 40), 3: (3, 12)}[ndim]
        sizes = [int(rng.integers(*size_range)) for _ in range(ndim)]
        filt = [int(rng.choice([1, 2, 3, 3, 5])) for _ in range(ndim)]
        stride = int(rng.choice([1, 1, 2]))
        dilation = int(rng.choice([1, 1, 2]))
        pad = [int(rng.integers(0, (f - 1) * dilation // 2 + 2)) for f in filt]
        if any(s + 2 * p < (f - 1) * dilation + 1 for s, p, f in zip(sizes, pad, filt)):
            continue
        x = "x".join
        spec = (f"N={n},G={g},C={c},K={k},input={x(map(str, sizes))},filter={x(map(str, filt))},"
                f"stride={stride},pad={x(map(str, pad))},dilation={dilation}")
        return layout, dtype, spec


def problems(family: str = "mma") -> list:
    rng = np.random.default_rng(SEED)
    layouts, dtypes = DRAWS[family]
    return [parse_conv_problem(spec, layout, dtype)
            for layout, dtype, spec in (draw(rng, layouts, dtypes) for _ in range(COUNT))]


@pytest.mark.parametrize("family", sorted(DRAWS))
def test_matrix_families_match_pytorch_on_random_problems(family, gpu_backend):
    target = cuda_target(gpu_backend, cudnn_tf32=False)
    picks, failures = heuristic_picks(family, problems(family), target)
    ran, disagreements = run_against_pytorch(picks, gpu_backend, SEED)
    failures += disagreements
    print(f"{ran} random problems run against PyTorch, {len(failures)} failed")
    assert not failures, "\n".join(failures)
    assert ran == COUNT
