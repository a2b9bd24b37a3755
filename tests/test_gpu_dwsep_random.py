"""On a GPU: dwsep_conv_fwd's `rowtile` points, twopass's staged-store points, its points with bulk tensor
copies (`_tma`), its NCHW-style tiled depthwise passes (`_tl`) and its channels-last ones on matrix
instructions (`_mx`) against PyTorch's two convolutions on 50 seeded random shapes each that they serve.

Shapes: 1-3 D, filters of 1-9 taps a side, stride 1-2, dilation 1-2, N 1-8, sizes that are multiples of
nothing, fp16 and bf16, biases and activations mixed; C a multiple of 8 up to 256 (rowtile's channels in one
block) or any C (twopass), K any count up to 300; rowtile's draws are channels-last with rows of 20-150
positions. Per shape the point the heuristic ranks first within the kind of point, the one with the smallest
tile, and the best-ranked of each strip (rowtile: of each strip and blocks an SM; `_tma`, `_tl`: of each strip
and store) run through Kernel.run on
PyTorch tensors (outputs poisoned first) and must agree with PyTorch as `kfactory bench` requires."""

import numpy as np
import pytest

from factory.ops.dwsep_conv_fwd import SOLVER
from factory.problem import DType, InvalidProblem, Layout
from gpu_against_torch import assert_agree_with_pytorch, cuda_target, stage_picks_on_random_shapes

pytestmark = pytest.mark.gpu

SEED = 9292
COUNT = 50
ACTS = ("none", "relu", "relu6")


def draw(rng: np.random.Generator, channels_last_rows: bool) -> tuple[str, Layout]:
    """One depthwise-separable layer; with `channels_last_rows`, channels-last with C a multiple of 8 and long rows."""
    ndim = int(rng.choice([1, 2, 2, 2, 3]))
    k = int(rng.choice([1, 3, 3, 5, 7, 9]))
    filt = {1: (k,), 2: (k, k), 3: ((3, 3, 3), (1, 3, 3), (3, 1, 1))[int(rng.integers(3))]}[ndim]
    stride = tuple(int(rng.choice([1, 1, 2])) for _ in range(ndim))
    dilation = tuple(int(rng.choice([1, 1, 1, 2])) for _ in range(ndim))
    lead = tuple(int(rng.integers(max(filt[d], 3), {1: 3, 2: 40, 3: 10}[ndim] + 3)) for d in range(ndim - 1))
    width = int(rng.integers(20, 151)) * stride[-1] if channels_last_rows else int(rng.integers(max(filt[-1], 3), 120))
    size = lead + (width,)
    pad = tuple(int(rng.integers(0, (f - 1) * d + 1)) for f, d in zip(filt, dilation))
    c = 8 * int(rng.integers(1, 33)) if channels_last_rows or rng.random() < 0.6 else int(rng.integers(1, 200))
    dims = lambda v: "x".join(map(str, v))  # noqa: E731
    spec = (f"N={int(rng.integers(1, 9))},C={c},K={int(rng.integers(1, 301))},input={dims(size)},filter={dims(filt)},"
            f"stride={dims(stride)},pad={dims(pad)},dilation={dims(dilation)},bias_dw={int(rng.integers(2))},"
            f"bias_pw={int(rng.integers(2))},act_dw={ACTS[int(rng.integers(3))]},act_pw={ACTS[int(rng.integers(3))]}")
    layout = Layout.NHWGC if channels_last_rows else (Layout.NHWGC, Layout.NGCHW)[int(rng.integers(2))]
    return spec, layout


def problem_drawer(channels_last_rows: bool):
    def draw_problem(rng: np.random.Generator):
        while True:
            spec, layout = draw(rng, channels_last_rows)
            dtype = (DType.FP16, DType.BF16)[int(rng.integers(2))]
            try:
                return SOLVER.parse_problem(spec, layout, dtype)
            except InvalidProblem:
                continue  # a dilated filter past the padded input: draw again
    return draw_problem


def run_family(family: str, draw_problem, gpu_backend, kind=lambda p: p.strip, only=lambda p: True) -> None:
    target = cuda_target(gpu_backend, cudnn_tf32=False)
    runs, shapes = stage_picks_on_random_shapes(family, draw_problem, COUNT, SEED, target, fewest=lambda p: p.block_m,
                                                kind=kind, only=only)
    assert assert_agree_with_pytorch(runs, gpu_backend, SEED, f"{family} points on {shapes} random shapes") >= COUNT


def test_rowtile_matches_pytorch_on_random_shapes(gpu_backend):
    """The best-ranked point of each strip and blocks an SM (`_o3`, `_o4`: fewer registers a thread)."""
    run_family("rowtile", problem_drawer(True), gpu_backend, kind=lambda p: (p.strip, p.blocks_per_sm))


def test_twopass_staged_stores_match_pytorch_on_random_shapes(gpu_backend):
    run_family("twopass", problem_drawer(False), gpu_backend, only=lambda p: p.store.value == "staged")


def test_twopass_bulk_copies_match_pytorch_on_random_shapes(gpu_backend):
    """The GEMM's operands by bulk tensor copies from a producer warp: the best-ranked point of each strip and store."""
    run_family("twopass", problem_drawer(False), gpu_backend, kind=lambda p: (p.strip, p.store.value), only=lambda p: p.tma)


def test_twopass_matrix_depthwise_matches_pytorch_on_random_shapes(gpu_backend):
    """Channels-last depthwise passes on matrix instructions (`_mx`, 2-D, stride 1 along W): the best-ranked point
    of each store."""
    run_family("twopass", problem_drawer(True), gpu_backend, kind=lambda p: p.store.value,
               only=lambda p: p.depthwise.value == "matrix")


def test_twopass_tiled_depthwise_matches_pytorch_on_random_shapes(gpu_backend):
    """NCHW-style depthwise passes through shared-memory windows (`_tl`): the best-ranked point of each strip and store."""
    run_family("twopass", problem_drawer(False), gpu_backend, kind=lambda p: (p.strip, p.store.value),
               only=lambda p: p.depthwise.value == "tiled")
