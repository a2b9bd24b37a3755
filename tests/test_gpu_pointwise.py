"""On a GPU: the `pw` families (pointwise layers' backward-weight and backward-data as plain GEMMs on wgmma).

Every `pw` instance on pointwise problems of odd sizes (reduction rows that end inside a stage, channels
past a tile's edge and not multiples of 8, several groups, 1-D and 3-D, N=1; channels-last rows and NGCHW
runs of positions that take 8-, 4-, 2- and 1-element chunks) against the numpy reference; then 60 seeded
random pointwise problems in every layout, each run with the `pw` instance the heuristic ranks first and
with the one of each other tile shape and chunk width (with the threads' copies and with bulk tensor copies,
`_tma`), through Kernel.run against PyTorch (cuDNN). The same
for backward-data's `pw`: every instance on problems of both layout kinds (K past a stage, positions and
channels past a tile, element-wise chunks, 1-D and 3-D, groups, strided layers), then 60 random problems
against PyTorch, about half of them strided. NGCHW problems run on transposing points too (channels-last
copies): 7x7 planes, which the pass reads as whole runs of planes, and strided layers."""

import numpy as np
import pytest

from factory.ops.conv_bwd_data import SOLVER as BWD_DATA
from factory.ops.conv_bwd_data.wgmma import MIN_PRODUCTS
from factory.ops.conv_bwd_weight import SOLVER
from factory.ops.conv_bwd_weight.common import Reduction
from factory.problem import DType, Layout
from factory.selector import lookup
from gpu_against_torch import check_every_instance, cuda_target, run_against_pytorch

pytestmark = pytest.mark.gpu

L, D = Layout, DType
PROBLEMS = [
    (L.NHWGC, D.FP16, "N=3,G=1,C=72,K=40,input=23x29,filter=1x1"),
    (L.NHWGC, D.BF16, "N=1,G=1,C=520,K=136,input=9x7,filter=1x1"),
    (L.NHWGC, D.BF16_FP32W, "N=4,G=3,C=24,K=16,input=31x17,filter=1x1"),
    (L.GNHWC, D.FP16, "N=2,G=2,C=64,K=200,input=401,filter=1"),
    (L.GNHWC, D.BF16, "N=2,G=1,C=40,K=48,input=5x9x11,filter=1x1x1"),
    (L.NHWGC, D.FP16, "N=64,G=1,C=96,K=24,input=56x56,filter=1x1"),
    (L.NHWGC, D.FP16, "N=2,G=2,C=6,K=10,input=47x45,filter=1x1"),
    (L.NHWGC, D.BF16, "N=8,G=1,C=320,K=1280,input=7x7,filter=1x1"),
    (L.NGCHW, D.FP16, "N=32,G=1,C=512,K=128,input=28x28,filter=1x1"),
    (L.NGCHW, D.BF16, "N=3,G=2,C=40,K=72,input=13x14,filter=1x1"),
    (L.NGCHW_GKYXC, D.FP16, "N=5,G=1,C=24,K=136,input=300,filter=1"),
    (L.NGCHW, D.BF16_FP32W, "N=2,G=1,C=7,K=9,input=5x7x9,filter=1x1x1"),
    (L.NGCHW, D.FP16, "N=1,G=1,C=200,K=88,input=7x7,filter=1x1"),
    (L.NGCHW_GKYXC, D.BF16, "N=16,G=3,C=16,K=24,input=14x14,filter=1x1"),
    (L.NHWGC, D.BF16, "N=4,G=2,C=64,K=48,input=9x11,filter=1x1,alpha=0.5,beta=-1.5"),  # epilogue in coop's finish
    (L.NGCHW, D.BF16_FP32W, "N=3,G=1,C=40,K=72,input=13x14,filter=1x1"),  # fp32 weights from coop's finish
    (L.NGCHW, D.FP16, "N=2,G=1,C=7,K=12,input=8x6,filter=1x1"),  # odd C: coop sums a column at a time
]
SEED = 2611
COUNT = 60
BWD_DATA_PROBLEMS = [
    (L.NHWGC, D.FP16, "N=3,G=1,C=72,K=40,input=23x29,filter=1x1"),
    (L.NHWGC, D.BF16, "N=64,G=1,C=960,K=160,input=7x7,filter=1x1"),
    (L.GNHWC, D.FP16, "N=2,G=2,C=200,K=64,input=401,filter=1"),
    (L.NHWGC, D.BF16, "N=2,G=3,C=6,K=10,input=5x9x11,filter=1x1x1"),
    (L.NGCHW, D.FP16, "N=32,G=1,C=128,K=512,input=28x28,filter=1x1"),
    (L.NGCHW, D.BF16, "N=3,G=2,C=40,K=72,input=13x14,filter=1x1"),
    (L.NGCHW_GKYXC, D.FP16, "N=5,G=1,C=136,K=24,input=300,filter=1"),
    (L.NGCHW, D.FP16, "N=2,G=1,C=9,K=88,input=7x7,filter=1x1"),
    (L.NHWGC, D.FP16, "N=8,G=1,C=256,K=128,input=28x28,filter=1x1,stride=2"),
    (L.GNHWC, D.BF16, "N=3,G=2,C=72,K=40,input=13x9,filter=1x1,stride=2"),
    (L.NHWGC, D.BF16, "N=2,G=1,C=64,K=48,input=5x7x9,filter=1x1x1,stride=2x1x3"),
    (L.NGCHW, D.BF16, "N=4,G=2,C=48,K=40,input=7x7,filter=1x1"),
    (L.NGCHW, D.FP16, "N=3,G=1,C=64,K=40,input=13x15,filter=1x1,stride=2"),
]
BWD_DATA_SEED = 2612
EVERY_INSTANCE = [(SOLVER, *p) for p in PROBLEMS] + [(BWD_DATA, *p) for p in BWD_DATA_PROBLEMS]


@pytest.mark.parametrize(("op_solver", "layout", "dtype", "spec"), EVERY_INSTANCE,
                         ids=lambda v: v if isinstance(v, str) else getattr(v, "op", v).value)
def test_every_pw_instance_matches_reference(op_solver, layout, dtype, spec, gpu_backend):
    check_every_instance("pw", op_solver.parse_problem(spec, layout, dtype), gpu_backend)


def random_problems(seed: int = SEED, op_solver=SOLVER, dtypes: tuple = (D.FP16, D.BF16, D.BF16_FP32W),
                    keep=lambda problem: True, strided: bool = False) -> list:
    """COUNT pointwise problems of `op_solver`'s op drawn from `seed`, those `keep` refuses drawn again;
    `strided`: strided 2 or 3 along each axis seven times in ten."""
    rng = np.random.default_rng(seed)
    found = []
    while len(found) < COUNT:
        ndim = int(rng.choice([1, 2, 3], p=[0.2, 0.65, 0.15]))
        layout = (L.NHWGC, L.GNHWC, L.NGCHW, L.NGCHW_GKYXC)[int(rng.integers(4))]
        dtype = dtypes[int(rng.integers(len(dtypes)))]
        g = int(rng.choice([1, 1, 1, 2, 4]))
        c, k = (int(rng.choice([8, 16, 24, 40, 64, 96, 144, 320])) if rng.random() < 0.8 else int(rng.integers(1, 70))
                for _ in range(2))
        size_range = {1: (8, 3000), 2: (3, 60), 3: (2, 16)}[ndim]
        sizes = "x".join(str(int(rng.integers(*size_range))) for _ in range(ndim))
        spec = f"N={int(rng.integers(1, 33))},G={g},C={c},K={k},input={sizes},filter={'x'.join(['1'] * ndim)}"
        if strided and rng.random() < 0.7:
            spec += f",stride={'x'.join(str(int(rng.integers(2, 4))) for _ in range(ndim))}"
        problem = op_solver.parse_problem(spec, layout, dtype)
        if keep(problem):
            found.append(problem)
    return found


def test_pw_matches_pytorch_on_random_pointwise_problems(gpu_backend):
    check_random_against_pytorch(SOLVER, SEED, gpu_backend)


def check_random_against_pytorch(op_solver, seed: int, gpu_backend, dtypes: tuple = (D.FP16, D.BF16, D.BF16_FP32W),
                                 keep=lambda problem: True, strided: bool = False) -> None:
    target = cuda_target(gpu_backend)
    runs, missing = [], []
    for problem in random_problems(seed, op_solver, dtypes, keep, strided):
        mine = [c for c in lookup(problem, target=target) if c.family == "pw"]
        if not mine:
            missing.append(f"{problem.key}: no pw instance applies")
            continue
        ranked = sorted(mine, key=lambda c: -op_solver.heuristic_score(c.family, c.params, problem, target))
        by_tile = {}
        for c in ranked:  # the best-ranked point of each tile shape and chunk width, in place and on copies,
            # with the threads' copies and with bulk tensor copies, split tiles finished in the kernel or not
            by_tile.setdefault((c.params.block_m, c.params.block_n, c.params.vector_a, c.params.transpose,
                                getattr(c.params, "tma", False), getattr(c.params, "reduction", None) is Reduction.COOP), c)
        runs += [(problem, c) for c in by_tile.values()]
    ran, failures = run_against_pytorch(runs, gpu_backend, seed)
    failures = missing + failures
    print(f"{ran} runs on {COUNT} random pointwise {op_solver.op.value} problems against PyTorch, {len(failures)} failed")
    assert not failures, "\n".join(failures)
    assert ran == len(runs)




def test_bwd_data_pw_matches_pytorch_on_random_pointwise_problems(gpu_backend):
    check_random_against_pytorch(BWD_DATA, BWD_DATA_SEED, gpu_backend, (D.FP16, D.BF16), served_by_bwd_data_pw, strided=True)


def served_by_bwd_data_pw(problem) -> bool:
    """Groups with C*K under MIN_PRODUCTS are refused (left to `direct` and `mma`), and strided layers need the
    staged store's 16-byte chunks (C and K multiples of 8)."""
    strided = max(problem.stride) > 1
    return problem.C * problem.K >= MIN_PRODUCTS and not (strided and (problem.C % 8 or problem.K % 8))
