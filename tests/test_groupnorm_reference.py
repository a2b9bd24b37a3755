"""The groupnorm_bwd numpy reference agrees with PyTorch CPU's native_group_norm_backward in float64."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from factory.ops import groupnorm_bwd as gn
from factory.ops.groupnorm_bwd import SOLVER, GroupNormProblem
from factory.ops.base import Role
from factory.problem import DType, Layout


def random_problems(count: int, seed: int) -> list[GroupNormProblem]:
    rng = np.random.default_rng(seed)
    problems = []
    for i in range(count):
        ndim = 1 + i % 3
        layout = (Layout.NGCHW, Layout.NHWGC)[(i // 3) % 2]
        G = int(rng.integers(1, 5))
        per_group = (1, int(rng.integers(2, 5)))[(i // 6) % 2]  # C/G = 1 in half the cases
        if i % 5 == 4:
            size = (1,) * ndim  # HxW = 1
        else:
            size = tuple(int(rng.integers(1, 9 if ndim < 3 else 5)) for _ in range(ndim))
        problems.append(GroupNormProblem(N=int(rng.integers(1, 4)), C=G * per_group, G=G, input=size,
                                         layout=layout, dtype=DType.FP32, affine=i % 7 != 6))
    return problems


def torch_backward(problem: GroupNormProblem, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ncs = {k: gn.to_ncs(problem, inputs[k]).reshape(problem.N, problem.C, *problem.input) for k in ("x", "dy")}
    x, dy = (torch.from_numpy(np.ascontiguousarray(ncs[k])) for k in ("x", "dy"))
    gamma = torch.from_numpy(inputs["gamma"].reshape(problem.C)) if problem.affine else None
    dx, dgamma, dbeta = torch.ops.aten.native_group_norm_backward(
        dy, x, torch.from_numpy(inputs["mean"]), torch.from_numpy(inputs["rstd"]), gamma,
        problem.N, problem.C, problem.spatial, problem.G, [True, problem.affine, problem.affine],
    )
    out = {"dx": gn.from_ncs(problem, dx.numpy().reshape(problem.N, problem.C, -1))}
    if problem.affine:
        out |= {"dgamma": dgamma.numpy().reshape(problem.G, -1), "dbeta": dbeta.numpy().reshape(problem.G, -1)}
    return out


@pytest.mark.parametrize("problem", random_problems(36, seed=11), ids=lambda p: p.key)
def test_reference_matches_torch(problem):
    rng = np.random.default_rng(3)
    specs = SOLVER.tensors(problem)
    inputs = {s.name: rng.standard_normal(s.shape) for s in specs if s.role is Role.INPUT}
    inputs["rstd"] = np.abs(inputs["rstd"]) + 0.5
    ours = SOLVER.reference(problem, inputs)
    theirs = torch_backward(problem, inputs)
    assert set(ours) == set(theirs) == {s.name for s in specs if s.role is Role.OUTPUT}
    for name in ours:
        assert ours[name].shape == next(s.shape for s in specs if s.name == name)
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-10, atol=1e-10, err_msg=name)


@pytest.mark.parametrize("layout", [Layout.NGCHW, Layout.NHWGC])
def test_reference_matches_torch_on_consistent_statistics(layout):
    """With mean/rstd of x itself (random_inputs), dx sums to zero over each group, as it must: up to the
    float32 rounding of the stored mean and rstd (2^-24 relative), so within 2^-20 of the sum of |dx|."""
    problem = GroupNormProblem(N=2, C=12, G=3, input=(5, 6), layout=layout, dtype=DType.FP32)
    inputs = {k: v.astype(np.float64) for k, v in SOLVER.random_inputs(problem, np.random.default_rng(5)).items()}
    ours = SOLVER.reference(problem, inputs)
    theirs = torch_backward(problem, inputs)
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-10, atol=1e-10, err_msg=name)
    dx = gn.to_ncs(problem, ours["dx"]).reshape(problem.N, problem.G, -1)
    assert np.all(np.abs(dx.sum(-1)) <= 2.0**-20 * np.abs(dx).sum(-1))


@pytest.mark.parametrize("layout", [Layout.NGCHW, Layout.NHWGC])
@pytest.mark.parametrize("dtype", [DType.FP32, DType.FP16, DType.BF16])
def test_torch_baseline_outputs_match_the_reference(layout, dtype):
    """The benchmark's PyTorch side (run on CPU tensors here) hands back physical-layout outputs."""
    from factory import numerics

    problem = GroupNormProblem(N=2, C=12, G=3, input=(4, 5), layout=layout, dtype=dtype)
    specs = {s.name: s for s in SOLVER.tensors(problem)}
    host = SOLVER.random_inputs(problem, np.random.default_rng(2))
    values = {k: numerics.exact_values(v, specs[k].scalar) for k, v in host.items()}
    tdtype = {DType.FP32: torch.float32, DType.FP16: torch.float16, DType.BF16: torch.bfloat16}[dtype]
    inputs = {k: torch.from_numpy(values[k]).to(tdtype if specs[k].scalar is not specs["mean"].scalar else torch.float32)
              for k in values}
    baseline = SOLVER.torch_baseline(problem, inputs)
    baseline.run()
    got = baseline.outputs()
    ref = SOLVER.reference(problem, values)
    assert set(got) == set(ref)
    for name, want in ref.items():
        assert tuple(got[name].shape) == specs[name].shape and got[name].dtype == tdtype
        err = np.abs(got[name].double().numpy() - want).max() / np.abs(want).max()
        assert err < {DType.FP32: 1e-5, DType.FP16: 1e-2, DType.BF16: 1.6e-2}[dtype], name  # the bench's bounds
