"""On a GPU: 3-D layers that are 2-D ones in disguise (factory.ops.conv.fold), computed by 2-D kernels of
families without 3-D ones, against PyTorch (cuDNN's conv3d backward) on 60 seeded random shapes.

Shapes: R(2+1)D-like temporal filters (k x 1 x 1, k 2-7, stride and dilation 1-2 along D, any layout) and
spatial ones (1 x k x l up to 7 x 7, stride 1-2; NDHWGC and GNDHWC, whose batch and depth axes are adjacent),
depthwise (G 8-300) or grouped (C and K multiples of 8 up to 64), both backward ops, fp16, bf16, fp32 and
bf16 with an fp32 weight gradient; N 1-6, D 2-17, H and W 3-56 (multiples of nothing). For each, the
instance the heuristic ranks first among all that apply, and the best-ranked 2-D instance of each family
that serves the layer through its view, run through Kernel.run on the 3-D PyTorch tensors (outputs
poisoned first) and must agree with aten.convolution_backward as `kfactory bench` requires."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from factory.ops import solver_for
from factory.problem import DType, Layout, Op, parse_conv_problem
from factory.selector import lookup
from gpu_against_torch import assert_agree_with_pytorch, cuda_target

pytestmark = pytest.mark.gpu

SEED = 3131
COUNT = 60
DTYPES = (DType.FP16, DType.BF16, DType.FP32)
CHANNELS = (8, 16, 24, 32, 48, 64)


def draw_spec(rng: np.random.Generator, temporal: bool) -> str:
    depthwise = rng.random() < 0.6
    g, c, k = ((int(rng.integers(8, 301)), 1, 1) if depthwise
               else (int(rng.integers(1, 9)), int(rng.choice(CHANNELS)), int(rng.choice(CHANNELS))))
    n = int(rng.integers(1, 7))
    stride = int(rng.choice([1, 1, 2]))
    dilation = int(rng.choice([1, 1, 2])) if stride == 1 else 1
    if temporal:
        f = int(rng.integers(2, 8))
        filt, strides, dils = (f, 1, 1), (stride, 1, 1), (dilation, 1, 1)
        sizes = (int(rng.integers(max(f * dilation, 2), 18)), int(rng.integers(3, 57)), int(rng.integers(3, 57)))
    else:
        fh, fw = int(rng.integers(1, 8)), int(rng.integers(1, 8))
        filt, strides, dils = (1, fh, fw), (1, stride, stride), (1, dilation, dilation)
        sizes = (int(rng.integers(2, 18)), int(rng.integers(max(fh * dilation, 3), 57)),
                 int(rng.integers(max(fw * dilation, 3), 57)))
    pad = [d * (v - 1) // 2 for v, d in zip(filt, dils)]
    x = lambda values: "x".join(map(str, values))  # noqa: E731
    return (f"N={n},G={g},C={c},K={k},input={x(sizes)},filter={x(filt)},stride={x(strides)},"
            f"pad={x(pad)},dilation={x(dils)}")


def draw_problem(rng: np.random.Generator) -> Any:
    temporal = rng.random() < 0.5
    layouts = list(Layout) if temporal else [Layout.NHWGC, Layout.GNHWC]
    layout = layouts[int(rng.integers(len(layouts)))]
    op = (Op.CONV_BWD_WEIGHT, Op.CONV_BWD_DATA)[int(rng.integers(2))]
    dtypes = DTYPES + ((DType.BF16_FP32W,) if op is Op.CONV_BWD_WEIGHT else ())
    dtype = dtypes[int(rng.integers(len(dtypes)))]
    return parse_conv_problem(draw_spec(rng, temporal), layout, dtype, op)


def folded_picks(count: int, seed: int, target: Any) -> tuple[list[tuple[Any, Any]], int]:
    """Per drawn problem that some 2-D family serves: the heuristic's pick among all that apply, and the
    best-ranked 2-D instance of each such family."""
    rng = np.random.default_rng(seed)
    runs: list[tuple[Any, Any]] = []
    shapes = 0
    while shapes < count:
        problem = draw_problem(rng)
        found = lookup(problem, target=target)
        folded = [c for c in found if c.ndim == 2]
        if not folded:
            continue
        shapes += 1
        solver = solver_for(problem.op)
        score = lambda c: solver.heuristic_score(c.family, c.params, problem, target)  # noqa: E731
        picks = [max(found, key=score)]
        picks += [max((c for c in folded if c.family == f), key=score) for f in sorted({c.family for c in folded})]
        runs += [(problem, c) for c in dict.fromkeys(picks)]
    return runs, shapes


def test_2d_kernels_match_pytorch_on_random_3d_layers(gpu_backend):
    target = cuda_target(gpu_backend)
    runs, shapes = folded_picks(COUNT, SEED, target)
    families = sorted({inst.family for _, inst in runs if inst.ndim == 2})
    what = f"{shapes} random 3-D layers through their 2-D view ({', '.join(families)})"
    assert assert_agree_with_pytorch(runs, gpu_backend, SEED, what) >= COUNT
