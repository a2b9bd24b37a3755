"""The dwsep_conv_fwd numpy reference agrees with PyTorch CPU's two convolutions in float64."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from factory.ops.dwsep_conv_fwd import SOLVER, Activation, DwsepProblem  # noqa: E402
from factory.problem import DType, Layout  # noqa: E402

ACTIVATIONS = tuple(Activation)
BIASES = ((False, False), (True, False), (False, True), (True, True))


def random_problems(count: int, seed: int) -> list[DwsepProblem]:
    """Small problems of every rank and both layouts; the activations and biases cycle with periods
    coprime to the rank's, so every combination of them meets every rank."""
    rng = np.random.default_rng(seed)
    problems = []
    for i in range(count):
        ndim = 1 + i % 3
        size = tuple(int(rng.integers(3, 11 if ndim < 3 else 7)) for _ in range(ndim))
        filt = tuple(int(rng.integers(1, min(5, s) + 1)) for s in size)
        dil = tuple(int(rng.integers(1, 3)) if 2 * (f - 1) + 1 <= s else 1 for s, f in zip(size, filt))
        pad = tuple(int(rng.integers(0, d * (f - 1) + 1)) for f, d in zip(filt, dil))  # up to "full" padding
        bias_dw, bias_pw = BIASES[i % 4]
        problems.append(DwsepProblem(
            N=int(rng.integers(1, 4)), C=int(rng.integers(1, 7)), K=int(rng.integers(1, 7)), input=size, filter=filt,
            stride=tuple(int(rng.integers(1, 4)) for _ in range(ndim)), pad=pad, dilation=dil,
            layout=(Layout.NHWGC, Layout.NGCHW)[(i // 2) % 2], dtype=DType.FP32, bias_dw=bias_dw, bias_pw=bias_pw,
            act_dw=ACTIVATIONS[i % 3 if i % 2 else (i // 3) % 3], act_pw=ACTIVATIONS[(i // 5) % 3]))
    return problems


PROBLEMS = random_problems(30, seed=5)


def _physical(problem: DwsepProblem, logical: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(logical, 1, -1)) if problem.channels_last else logical


def _torch_activation(t: "torch.Tensor", act: Activation) -> "torch.Tensor":
    return {Activation.NONE: t, Activation.RELU: F.relu(t), Activation.RELU6: F.relu6(t)}[act]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.key)
def test_reference_matches_torch(problem: DwsepProblem) -> None:
    rng = np.random.default_rng(1)
    # Scaled so that sums cross 0 and 6 and every activation has something to clip.
    x = 3 * rng.standard_normal((problem.N, problem.C, *problem.input))
    w_dw = 2 * rng.standard_normal((problem.C, *problem.filter))
    w_pw = rng.standard_normal((problem.K, problem.C))
    b_dw, b_pw = rng.standard_normal(problem.C), rng.standard_normal(problem.K)
    inputs = {"input": _physical(problem, x), "weight_dw": w_dw, "weight_pw": w_pw}
    if problem.bias_dw:
        inputs["bias_dw"] = b_dw
    if problem.bias_pw:
        inputs["bias_pw"] = b_pw
    assert [s.name for s in SOLVER.tensors(problem)][:-1] == list(inputs)  # every input, in argument order
    ours = SOLVER.reference(problem, inputs)["output"]
    assert ours.shape == problem.activation("K")[0]

    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[problem.ndim]
    mid = conv(torch.from_numpy(x), torch.from_numpy(w_dw).unsqueeze(1),
               torch.from_numpy(b_dw) if problem.bias_dw else None,
               list(problem.stride), list(problem.pad), list(problem.dilation), problem.C)
    mid = _torch_activation(mid, problem.act_dw)
    out = conv(mid, torch.from_numpy(w_pw).reshape(problem.K, problem.C, *(1,) * problem.ndim),
               torch.from_numpy(b_pw) if problem.bias_pw else None)
    expected = _torch_activation(out, problem.act_pw).numpy()
    assert expected.shape[2:] == problem.output
    np.testing.assert_allclose(ours, _physical(problem, expected), rtol=1e-10, atol=1e-10)


def test_problems_cover_every_feature() -> None:
    """What the comparison above has to meet: every rank in both layouts, strides, dilations, padding
    (none and more than half the filter), each bias combination and each activation at both stages."""
    assert len(PROBLEMS) >= 24
    assert {(p.ndim, p.layout) for p in PROBLEMS} == {(n, l) for n in (1, 2, 3) for l in (Layout.NHWGC, Layout.NGCHW)}
    assert {(p.bias_dw, p.bias_pw) for p in PROBLEMS} == set(BIASES)
    assert {p.act_dw for p in PROBLEMS} == {p.act_pw for p in PROBLEMS} == set(Activation)
    assert {(p.act_dw, p.act_pw) for p in PROBLEMS} == {(a, b) for a in Activation for b in Activation}
    assert any(max(p.stride) > 1 for p in PROBLEMS) and any(max(p.dilation) > 1 for p in PROBLEMS)
    assert any(max(p.pad) == 0 for p in PROBLEMS)
    assert any(2 * pd > d * (f - 1) for p in PROBLEMS for pd, f, d in zip(p.pad, p.filter, p.dilation))
    assert any(p.C != p.K for p in PROBLEMS) and any(max(p.filter) > 1 for p in PROBLEMS)


def test_relu6_clips_at_six() -> None:
    """One output by hand: a 1x1 depthwise of weight 4 on an input of 2 is 8 before relu6, 6 after; the
    pointwise stage then sums two such channels (12) and its relu6 clips again."""
    p = DwsepProblem(N=1, C=2, K=1, input=(3,), filter=(1,), stride=(1,), pad=(0,), dilation=(1,),
                     layout=Layout.NGCHW, dtype=DType.FP32, act_dw=Activation.RELU6, act_pw=Activation.RELU6)
    x = np.array([[[2.0, -1.0, 1.0], [2.0, 3.0, 0.25]]])
    inputs = {"input": x, "weight_dw": np.full((2, 1), 4.0), "weight_pw": np.ones((1, 2))}
    np.testing.assert_array_equal(SOLVER.reference(p, inputs)["output"], [[[6.0, 6.0, 5.0]]])
