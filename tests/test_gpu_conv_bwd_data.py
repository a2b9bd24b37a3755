"""On a GPU: conv_bwd_data's families against the numpy reference and against PyTorch (cuDNN).

1. Every applicable instance of every family on each of PROBLEMS (all layouts, dtypes and ranks; odd
   C and K, stride 2 and 3, dilation 2, pad 0, asymmetric padding, N=1, depthwise, 1x1), through the
   tuner: outputs poisoned, every element checked. One test per (family, problem): `-k mma`.
2. 100 seeded random problems per family through Kernel.run on PyTorch tensors, each with the instance
   the heuristic ranks first, against aten.convolution_backward (output mask [True, False, False])."""


import numpy as np
import pytest

from factory.device import target_for
from factory.ops.conv_bwd_data import SOLVER
from factory.problem import DType, Layout, Op, parse_conv_problem
from gpu_against_torch import check_every_instance, heuristic_picks, run_against_pytorch
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
    (L.NHWGC, D.BF16, "N=8,G=14,C=24,K=24,input=28x28,filter=3x3,pad=1"),
    (L.NGCHW, D.INT8, "N=2,G=4,C=2,K=2,input=5x6x7,filter=3x1x1,pad=1x0x0"),
    (L.NHWGC, D.FP16, "N=2,G=1,C=8,K=8,input=9x9,filter=3x3,stride=2,pad_left=0,pad_right=1"),
    (L.NGCHW_GKYXC, D.FP16, "N=1,G=3,C=5,K=7,input=5x6x7,filter=2x2x2,stride=2,pad=0"),
    # Depthwise: the direct family's vectors along groups (NHWGC), long and large filters, 3-D.
    (L.NHWGC, D.FP16, "N=4,G=64,C=1,K=1,input=28x28,filter=3x3,pad=1"),
    (L.NGCHW, D.BF16, "N=2,G=24,C=1,K=1,input=17x17,filter=5x5,stride=2,pad=2"),
    (L.NHWGC, D.FP32, "N=2,G=8,C=1,K=1,input=301,filter=31,pad=15"),
    (L.GNHWC, D.FP16, "N=2,G=16,C=1,K=1,input=4x9x9,filter=3x3x3,pad=1"),
    (L.NHWGC, D.BF16, "N=3,G=32,C=1,K=1,input=30x30,filter=9x9,stride=2,pad=4"),
]


def problems() -> list:
    return [parse_conv_problem(spec, layout, dtype, Op.CONV_BWD_DATA) for layout, dtype, spec in PROBLEMS]


CASES = [(family, problem) for problem in problems() for family in sorted(SOLVER.families)]


@pytest.mark.parametrize(("family", "problem"), CASES, ids=lambda v: v if isinstance(v, str) else v.key)
def test_every_applicable_instance_matches_reference(family, problem, gpu_backend):
    check_every_instance(family, problem, gpu_backend)

SEED = 2027
COUNT = 100


def random_problems() -> list:
    rng = np.random.default_rng(SEED)
    drawn = (draw(rng, tuple(Layout), (D.FP16, D.BF16, D.FP32)) for _ in range(COUNT))
    return [parse_conv_problem(spec, layout, dtype, Op.CONV_BWD_DATA) for layout, dtype, spec in drawn]


@pytest.mark.parametrize("family", sorted(SOLVER.families))
def test_families_match_pytorch_on_random_problems(family, gpu_backend):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    torch.backends.cudnn.allow_tf32 = False
    target = target_for(gpu_backend.device_info())
    picks, failures = heuristic_picks(family, random_problems(), target)
    ran, disagreements = run_against_pytorch(picks, gpu_backend, SEED)
    failures += disagreements
    print(f"{family}: {ran} random problems run against PyTorch, {len(failures)} failed")
    assert not failures, "\n".join(failures)
    assert ran == COUNT
