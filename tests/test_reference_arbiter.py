"""The arbiter where PyTorch and we disagree (factory.bench.check.matches_reference: `kfactory bench` and
the GPU tests against PyTorch use it), on the CPU:
PyTorch's own result passes it, and a result off by more than the tolerance does not."""

from __future__ import annotations

import pytest

from factory.bench.check import matches_reference
from factory.bench.runner import make_tensors
from factory.ops.base import Role
from factory.ops.dwsep_conv_fwd import SOLVER
from factory.problem import DType, Layout

torch = pytest.importorskip("torch")

SPEC = "N=2,C=12,K=10,input=9x7,filter=3x3,stride=2,pad=1,bias_dw=1,act_pw=relu6"


@pytest.mark.parametrize("layout", [Layout.NHWGC, Layout.NGCHW])
@pytest.mark.parametrize("dtype", [DType.FP32, DType.BF16])
def test_pytorch_result_passes_and_a_perturbed_one_fails(layout: Layout, dtype: DType) -> None:
    problem = SOLVER.parse_problem(SPEC, layout, dtype)
    specs = list(SOLVER.tensors(problem))
    tensors = make_tensors(specs, torch.device("cpu"), seed=3)
    inputs = {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT}
    baseline = SOLVER.torch_baseline(problem, inputs)
    baseline.run()
    tensors["output"] = baseline.outputs()["output"].contiguous()
    assert matches_reference(SOLVER, problem, specs, tensors).ok
    off = tensors["output"].clone()
    off.view(-1)[off.numel() // 2] += 0.25 * float(off.abs().max())
    tensors["output"] = off
    verdict = matches_reference(SOLVER, problem, specs, tensors)
    assert not verdict.ok and "output" in verdict.message
