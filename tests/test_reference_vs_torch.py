"""The numpy references agree with PyTorch CPU's convolution_backward in float64."""

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from factory.ops.conv import explicit_padding
from factory.ops.conv import layouts as cl
from factory.ops.conv_bwd_weight import SOLVER
from factory.problem import ConvProblem, DType, Layout, Op


def random_problems(count: int, seed: int):
    rng = np.random.default_rng(seed)
    problems = []
    for i in range(count):
        ndim = 1 + i % 3
        layout = list(Layout)[i % 4]
        kind = ("dense", "grouped", "depthwise")[(i // 4) % 3]
        G = {"dense": 1, "grouped": int(rng.integers(2, 5)), "depthwise": int(rng.integers(2, 9))}[kind]
        C = 1 if kind == "depthwise" else int(rng.integers(1, 6))
        K = 1 if kind == "depthwise" else int(rng.integers(1, 6))
        size = tuple(int(rng.integers(3, 10 if ndim < 3 else 7)) for _ in range(ndim))
        filt = tuple(int(rng.integers(1, min(4, s) + 1)) for s in size)
        stride = tuple(int(rng.integers(1, 3)) for _ in range(ndim))
        dil = tuple(int(rng.integers(1, 3)) if s >= 2 * f + 1 else 1 for s, f in zip(size, filt))
        pad = tuple(int(rng.integers(0, f)) for f in filt)
        # Every third problem pads its two sides differently (TensorFlow's "SAME" style).
        pad_right = tuple(int(rng.integers(0, f)) for f in filt) if i % 3 == 2 else pad
        problems.append(ConvProblem(N=int(rng.integers(1, 4)), G=G, C=C, K=K, input=size, filter=filt,
                                    stride=stride, pad=pad, dilation=dil, layout=layout, dtype=DType.FP32,
                                    pad_right=pad_right))
    return problems


@pytest.mark.parametrize("problem", random_problems(36, seed=7), ids=lambda p: p.key)
def test_reference_matches_torch(problem):
    rng = np.random.default_rng(0)
    x_log = rng.standard_normal(problem.input_shape_logical)
    dy_log = rng.standard_normal(problem.output_shape_logical)
    inputs = {
        "input": cl.activation(problem, "C").from_logical(x_log),
        "grad_output": cl.activation(problem, "K").from_logical(dy_log),
    }
    ours_physical = SOLVER.reference(problem, inputs)["grad_weight"]
    ours = cl.weight(problem).to_logical(ours_physical)

    G, C, K, N = problem.G, problem.C, problem.K, problem.N
    x_t = torch.from_numpy(x_log.reshape(N, G * C, *problem.input))
    x_t, padding = explicit_padding(x_t, problem)
    dy_t = torch.from_numpy(dy_log.reshape(N, G * K, *problem.output))
    w_t = torch.zeros((G * K, C, *problem.filter), dtype=torch.float64)
    _, dw_t, _ = torch.ops.aten.convolution_backward(
        dy_t, x_t, w_t, None, list(problem.stride), padding, list(problem.dilation),
        False, [0] * problem.ndim, G, [False, True, False],
    )
    np.testing.assert_allclose(ours.reshape(dw_t.shape), dw_t.numpy(), rtol=1e-10, atol=1e-10)


def test_random_problems_include_asymmetric_padding():
    assert sum(not p.symmetric for p in random_problems(36, seed=7)) >= 6


def test_int8_reference_is_exact_integer():
    p = ConvProblem(N=2, G=2, C=3, K=2, input=(5, 5), filter=(3, 3), stride=(1, 1), pad=(1, 1),
                    dilation=(1, 1), layout=Layout.NHWGC, dtype=DType.INT8)
    rng = np.random.default_rng(1)
    x = rng.integers(-4, 5, size=cl.activation(p, "C").shape).astype(np.int64)
    dy = rng.integers(-4, 5, size=cl.activation(p, "K").shape).astype(np.int64)
    dw = SOLVER.reference(p, {"input": x, "grad_output": dy})["grad_weight"]
    assert dw.dtype == np.int64
    # One element by hand: g=0, k=0, c=0, tap (1,1) is the centre tap: sum over every position.
    xl = cl.activation(p, "C").to_logical(x)
    dyl = cl.activation(p, "K").to_logical(dy)
    by_hand = int(np.sum(xl[:, 0, 0] * dyl[:, 0, 0]))
    assert cl.weight(p).to_logical(dw)[0, 0, 0, 1, 1] == by_hand


# --- conv_bwd_data ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", random_problems(36, seed=8), ids=lambda p: p.key)
def test_bwd_data_reference_matches_torch(problem):
    """dIn from dOut and W, every layout and rank, strides and dilations, asymmetric padding (cropped
    from PyTorch's explicitly padded input as the bench baseline does)."""
    from factory.ops.conv_bwd_data import SOLVER as DATA

    problem = dataclasses.replace(problem, op=Op.CONV_BWD_DATA)
    rng = np.random.default_rng(1)
    dy_log = rng.standard_normal(problem.output_shape_logical)
    w_log = rng.standard_normal(problem.weight_shape_logical)
    inputs = {"grad_output": cl.activation(problem, "K").from_logical(dy_log), "weight": cl.weight(problem).from_logical(w_log)}
    ours = cl.activation(problem, "C").to_logical(DATA.reference(problem, inputs)["grad_input"])

    G, C, K, N = problem.G, problem.C, problem.K, problem.N
    x_t, padding = explicit_padding(torch.zeros((N, G * C, *problem.input), dtype=torch.float64), problem)
    dx_t = torch.ops.aten.convolution_backward(
        torch.from_numpy(dy_log.reshape(N, G * K, *problem.output)), x_t,
        torch.from_numpy(w_log.reshape(G * K, C, *problem.filter)), None, list(problem.stride), padding,
        list(problem.dilation), False, [0] * problem.ndim, G, [True, False, False],
    )[0]
    crop = (slice(None), slice(None)) + tuple(slice(l - c, l - c + n) for l, c, n in zip(problem.pad, padding, problem.input))
    np.testing.assert_allclose(ours.reshape(N, G * C, *problem.input), dx_t[crop].numpy(), rtol=1e-10, atol=1e-10)


def test_bwd_data_int8_reference_is_exact_integer():
    from factory.ops.conv_bwd_data import SOLVER as DATA

    p = ConvProblem(N=1, G=1, C=2, K=3, input=(4, 4), filter=(3, 3), stride=(1, 1), pad=(1, 1),
                    dilation=(1, 1), layout=Layout.NHWGC, dtype=DType.INT8, op=Op.CONV_BWD_DATA)
    rng = np.random.default_rng(2)
    dy = rng.integers(-4, 5, size=cl.activation(p, "K").shape).astype(np.int64)
    w = rng.integers(-4, 5, size=cl.weight(p).shape).astype(np.int64)
    dx = DATA.reference(p, {"grad_output": dy, "weight": w})["grad_input"]
    assert dx.dtype == np.int64
    # Input (1, 1) of channel 0 is reached by every tap: tap (y, x) from output (2 - y, 2 - x).
    dyl, wl = cl.activation(p, "K").to_logical(dy), cl.weight(p).to_logical(w)
    by_hand = sum(int(dyl[0, 0, k, 2 - y, 2 - x] * wl[0, k, 0, y, x]) for k in range(3) for y in range(3) for x in range(3))
    assert cl.activation(p, "C").to_logical(dx)[0, 0, 0, 1, 1] == by_hand
