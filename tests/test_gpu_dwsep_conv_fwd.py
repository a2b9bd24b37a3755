"""On a GPU: dwsep_conv_fwd's families against the numpy reference and against PyTorch's two convolutions.

1. Every applicable instance of every family on each of PROBLEMS (both layouts, every dtype and rank; odd
   C and K, stride 2, N=1, 7x7, dilation, biases, each activation), through the tuner: outputs poisoned,
   every element checked. One test per (family, problem).
2. 100 seeded random problems per family (those it serves, for a family that serves only some) through
   Kernel.run on PyTorch tensors, each with the instance the heuristic ranks first, against PyTorch's
   depthwise and pointwise convolutions with the same biases and activations."""

import numpy as np
import pytest

from factory.ops.dwsep_conv_fwd import SOLVER
from factory.problem import DType, InvalidProblem, Layout
from factory.selector import lookup
from gpu_against_torch import check_every_instance, cuda_target, heuristic_picks, run_against_pytorch

pytestmark = pytest.mark.gpu

L, D = Layout, DType
PROBLEMS = [
    (L.NHWGC, D.FP16, "N=2,C=64,K=128,input=15x13,filter=3x3,pad=1"),
    (L.NHWGC, D.BF16, "N=1,C=40,K=24,input=17x16,filter=3x3,stride=2,pad=1,bias_dw=1,act_dw=relu6"),
    (L.NGCHW, D.FP16, "N=2,C=37,K=29,input=20x24,filter=3x3,pad=2,dilation=2,bias_pw=1,act_pw=relu"),
    (L.NHWGC, D.FP32, "N=3,C=24,K=40,input=9x9,filter=7x7,pad=3,bias_dw=1,bias_pw=1,act_dw=relu,act_pw=relu6"),
    (L.NGCHW, D.BF16, "N=2,C=32,K=48,input=14x14,filter=7x7,stride=2,pad=3"),
    (L.NHWGC, D.FP16, "N=2,C=96,K=33,input=101,filter=9,pad=4,act_dw=relu"),
    (L.NGCHW, D.FP32, "N=1,C=13,K=7,input=50,filter=5,stride=2,pad=0"),
    (L.NHWGC, D.BF16, "N=2,C=16,K=32,input=5x6x7,filter=3x3x3,pad=1,bias_pw=1"),
    (L.NGCHW, D.FP16, "N=1,C=24,K=20,input=4x9x9,filter=1x3x3,pad=0x1x1,act_pw=relu6"),
    (L.NHWGC, D.FP16, "N=4,C=1024,K=1024,input=7x7,filter=3x3,pad=1"),
    (L.NHWGC, D.FP16, "N=1,C=8,K=8,input=3x3,filter=3x3,pad=1"),
    (L.NGCHW, D.BF16, "N=3,C=72,K=200,input=11x9,filter=5x5,stride=2,pad=2,bias_dw=1,act_dw=relu6,bias_pw=1"),
    (L.NHWGC, D.FP32, "N=2,C=17,K=130,input=13x10,filter=3x3,stride=2,pad=1"),
    (L.NHWGC, D.FP16, "N=3,C=56,K=8,input=3x8x8,filter=3x1x1,pad=1x0x0,act_dw=relu"),
    # Channels-last items of 16 bytes in narrower loads, some past C: odd C under a 7x7 filter (one-element
    # loads), C = 12 (4-channel loads, the second past C).
    (L.NHWGC, D.BF16, "N=2,C=21,K=19,input=10x9,filter=7x7,pad=3,act_pw=relu"),
    (L.NHWGC, D.FP16, "N=2,C=12,K=20,input=8x8,filter=3x3,pad=1,bias_dw=1"),
    # Rows long enough for `rowtile`'s tiles along them: C under the instruction's depth and over a few of
    # them, a row's second and third tiles, odd K, stride 2, 3-D.
    (L.NHWGC, D.BF16, "N=2,C=48,K=72,input=9x45,filter=5x5,stride=2,pad=2,bias_dw=1,bias_pw=1,act_dw=relu,act_pw=relu6"),
    (L.NHWGC, D.FP16, "N=1,C=200,K=40,input=6x130,filter=3x3,pad=1,act_dw=relu6"),
    (L.NHWGC, D.FP16, "N=3,C=8,K=13,input=4x3x70,filter=3x3x3,pad=1"),
]


def problems() -> list:
    return [SOLVER.parse_problem(spec, layout, dtype) for layout, dtype, spec in PROBLEMS]


CASES = [(family, problem) for problem in problems() for family in sorted(SOLVER.families)]


@pytest.mark.parametrize(("family", "problem"), CASES, ids=lambda v: v if isinstance(v, str) else v.key)
def test_every_applicable_instance_matches_reference(family, problem, gpu_backend):
    check_every_instance(family, problem, gpu_backend)


SEED = 2031
COUNT = 100
# Families that serve only some layers (twopass: fp16 and bf16; rowtile: channels-last 16-bit, C a multiple
# of 8, rows longer than a quarter tile), each with the fewest of the
# COUNT draws it must run.
PARTIAL = {"twopass": 25, "rowtile": 11}


def random_problems() -> list:
    """Depthwise-separable blocks as networks have them, and odd ones: 1-D to 3-D, filters up to 9 taps
    a side, strides 1-2, dilation 1-2, odd channel counts, biases and activations mixed."""
    rng = np.random.default_rng(SEED)
    acts = ("none", "relu", "relu6")
    drawn: list = []
    while len(drawn) < COUNT:
        ndim = int(rng.choice([1, 2, 2, 2, 3]))
        k = int(rng.choice([3, 3, 3, 5, 7, 9]))
        filt = {1: (k,), 2: (k, k), 3: tuple(int(v) for v in [(3, 3, 3), (1, 3, 3), (3, 1, 1)][int(rng.integers(3))])}[ndim]
        top = {1: 600, 2: 40, 3: 12}[ndim]
        size = tuple(int(rng.integers(max(filt), top)) for _ in range(ndim))
        stride = tuple(int(rng.choice([1, 1, 2])) for _ in range(ndim))
        dilation = tuple(int(rng.choice([1, 1, 1, 2])) for _ in range(ndim))
        pad = tuple(int(rng.integers(0, (f - 1) * d + 1)) for f, d in zip(filt, dilation))
        c = int(rng.choice([8, 16, 24, 32, 64, 96, 128, 256])) if rng.random() < 0.7 else int(rng.integers(1, 200))
        kk = int(rng.choice([8, 16, 32, 64, 128, 256])) if rng.random() < 0.7 else int(rng.integers(1, 300))
        dims = lambda v: "x".join(map(str, v))  # noqa: E731
        spec = (f"N={int(rng.integers(1, 9))},C={c},K={kk},input={dims(size)},filter={dims(filt)},"
                f"stride={dims(stride)},pad={dims(pad)},dilation={dims(dilation)},"
                f"bias_dw={int(rng.integers(2))},bias_pw={int(rng.integers(2))},"
                f"act_dw={acts[int(rng.integers(3))]},act_pw={acts[int(rng.integers(3))]}")
        layout = (L.NHWGC, L.NGCHW)[int(rng.integers(2))]
        dtype = (D.FP16, D.BF16, D.FP32)[int(rng.integers(3))]
        try:
            drawn.append(SOLVER.parse_problem(spec, layout, dtype))
        except InvalidProblem:
            continue  # a dilated filter past the padded input: draw again
    return drawn


@pytest.mark.parametrize("family", sorted(SOLVER.families))
def test_families_match_pytorch_on_random_problems(family, gpu_backend):
    target = cuda_target(gpu_backend, cudnn_tf32=False)
    drawn = random_problems()
    if family in PARTIAL:
        drawn = [p for p in drawn if any(c.family == family for c in lookup(p, target=target))]
    picks, failures = heuristic_picks(family, drawn, target)
    if not picks:
        pytest.skip(f"no {family} instance runs on {target.arch}")
    ran, disagreements = run_against_pytorch(picks, gpu_backend, SEED)
    failures += disagreements
    print(f"{family}: {ran} random problems run against PyTorch, {len(failures)} failed")
    assert not failures, "\n".join(failures)
    assert ran == len(drawn) and ran >= PARTIAL.get(family, COUNT)
