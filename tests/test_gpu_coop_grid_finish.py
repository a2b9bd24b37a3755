"""On a GPU: the coop reduction of `wgmma` and `gwl` backward-weight, which finish their split sums in the same
cooperative launch (kf_splitk_finish_in_grid: every block stores its partials, the launch's blocks meet at one
counter, then share out the sums through the epilogue).

Every coop instance of the two families on problems that reach each path of the finish (several splits and
tiles, ragged K and C tiles, a chunk of groups past G whose blocks store nothing but still meet, the output
epilogue, fp32 and bf16 -> fp32 weights, the transposing pass's copies beside the partials, 1-D, 2-D, 3-D)
against the numpy reference with the output poisoned; then seeded random problems, each with the coop point
of each family the heuristic ranks first, through Kernel.run against PyTorch. The host emulator cannot run a
cooperative launch (one block at a time), so this is where the kernels are checked."""

import numpy as np
import pytest

from factory.device import target_for
from factory.ops.conv_bwd_weight import SOLVER
from factory.ops.conv_bwd_weight.common import Reduction
from factory.problem import DType, KernelFactoryError, Layout
from factory.selector import lookup
from gpu_against_torch import check_every_instance, run_against_pytorch

pytestmark = pytest.mark.gpu

L, D = Layout, DType
PROBLEMS = [
    ("wgmma", L.NHWGC, D.FP16, "N=4,G=1,C=64,K=64,input=16x28x28,filter=3x1x1,pad=1x0x0"),  # R(2+1)D's temporal layer
    ("wgmma", L.GNHWC, D.BF16, "N=2,G=2,C=40,K=72,input=5x13x11,filter=3x1x1,pad=1x0x0"),  # K past a 64-row tile
    ("wgmma", L.NHWGC, D.BF16_FP32W, "N=3,G=1,C=24,K=16,input=17x19,filter=3x3,pad=1,alpha=0.5,beta=-1.5"),
    ("wgmma", L.NGCHW, D.FP16, "N=4,G=1,C=32,K=48,input=33x35,filter=3x3,stride=2,pad=1"),  # transposing pass
    ("wgmma", L.NHWGC, D.FP16, "N=4,G=1,C=16,K=8,input=301,filter=5,dilation=2"),
    ("gwl", L.NHWGC, D.BF16, "N=32,G=32,C=16,K=16,input=28x28,filter=3x3,pad=1"),  # ResNeXt's stage 2
    ("gwl", L.GNHWC, D.FP16, "N=3,G=3,C=24,K=8,input=9x23,filter=3x3,pad=1"),  # chunks of 2 or 4 groups past G=3
    ("gwl", L.NGCHW, D.BF16, "N=4,G=4,C=8,K=16,input=41x44,filter=3x3,stride=2,pad=1"),
    ("gwl", L.NHWGC, D.FP32, "N=4,G=2,C=8,K=24,input=11x12,filter=3x3,pad=1,alpha=2,beta=0.5"),
    ("gwl", L.NHWGC, D.FP16, "N=2,G=6,C=16,K=32,input=101,filter=9,pad=4"),
]
SEED = 2811
COUNT = 40


def is_coop(instance) -> bool:
    return instance.params.reduction is Reduction.COOP


@pytest.mark.parametrize(("family", "layout", "dtype", "spec"), PROBLEMS, ids=lambda v: getattr(v, "value", v))
def test_every_coop_instance_matches_reference(family, layout, dtype, spec, gpu_backend):
    check_every_instance(family, SOLVER.parse_problem(spec, layout, dtype), gpu_backend, keep=is_coop)


def random_problem(rng: np.random.Generator):
    """A grouped or dense layer of 1-3 dims, channels per group multiples of 8, small enough planes that a few
    splits keep the grid resident."""
    ndim = int(rng.choice([1, 2, 2, 3]))
    layout = rng.choice([L.NHWGC, L.GNHWC, L.NGCHW, L.NGCHW_GKYXC])
    dtype = rng.choice([D.FP16, D.BF16, D.BF16_FP32W, D.FP32])
    G = int(rng.choice([1, 2, 3, 8, 32]))
    C, K = (int(8 * rng.integers(1, 9)) for _ in range(2))
    size = [int(rng.integers(5, 40)) for _ in range(ndim)]
    taps = [int(rng.choice([1, 3, 5])) for _ in range(ndim)]
    stride = [int(rng.choice([1, 1, 2])) for _ in range(ndim)]
    dims = lambda v: "x".join(map(str, v))  # noqa: E731
    spec = (f"N={int(rng.integers(1, 9))},G={G},C={C},K={K},input={dims(size)},filter={dims(taps)},"
            f"stride={dims(stride)},pad={dims([t // 2 for t in taps])}")
    return SOLVER.parse_problem(spec, layout, dtype)


def test_coop_points_on_random_problems_match_pytorch(gpu_backend):
    target = target_for(gpu_backend.device_info())
    rng = np.random.default_rng(SEED)
    runs, shapes = [], 0
    while shapes < COUNT:
        try:
            problem = random_problem(rng)
        except KernelFactoryError:
            continue
        coop = [c for c in lookup(problem, target=target) if c.family in ("wgmma", "gwl") and is_coop(c)]
        if not coop:
            continue
        shapes += 1
        for family in sorted({c.family for c in coop}):
            mine = [c for c in coop if c.family == family]
            runs.append((problem, max(mine, key=lambda c: SOLVER.heuristic_score(c.family, c.params, problem, target))))
    ran, failures = run_against_pytorch(runs, gpu_backend, SEED)
    print(f"coop: {ran} runs on {shapes} random shapes, {len(failures)} failed")
    assert ran >= COUNT and not failures, "\n".join(failures)
