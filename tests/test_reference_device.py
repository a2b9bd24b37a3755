"""The convolution references' PyTorch path (used on the GPU inside a tune, factory.reference_device)
computes what the numpy path computes; it is chosen only inside a tune, for large problems, with CUDA."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from factory.ops.conv_bwd_data import reference as bwd_data  # noqa: E402
from factory.ops.conv_bwd_weight import reference as bwd_weight  # noqa: E402
from factory.problem import ConvProblem, DType, Layout, Op, parse_conv_problem  # noqa: E402
from factory import reference_device  # noqa: E402

CASES = [
    "N=2,G=3,C=2,K=4,input=9x7,filter=3x2,stride=2x1,pad=1x0,dilation=1x2",
    "N=1,G=4,C=1,K=1,input=11,filter=5,stride=3,pad=2",
    "N=1,G=2,C=3,K=2,input=5x6x4,filter=3x3x2,stride=1x2x1,pad=1x1x0",
    "N=3,G=1,C=5,K=3,input=8x8,filter=1x1,stride=2,pad=0",
]


def problems():
    for spec in CASES:
        p = parse_conv_problem(spec, Layout.NGCHW, DType.FP32)
        yield p
    yield ConvProblem(N=2, G=2, C=3, K=2, input=(7, 6), filter=(3, 3), stride=(2, 2), pad=(0, 1), pad_right=(2, 0),
                      dilation=(1, 1), layout=Layout.NGCHW, dtype=DType.FP32, op=Op.CONV_BWD_WEIGHT)


@pytest.mark.parametrize("problem", list(problems()), ids=lambda p: p.key)
def test_the_torch_path_computes_what_numpy_computes(problem):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(problem.input_shape_logical)
    dy = rng.standard_normal(problem.output_shape_logical)
    w = rng.standard_normal(problem.weight_shape_logical)
    on_host = bwd_weight.reference_logical(problem, x, dy), bwd_data.reference_logical(problem, dy, w)
    cpu = torch.device("cpu")  # the same code as on the GPU, called directly: no fallback can hide an error
    on_torch = bwd_weight._on_torch(problem, x, dy, cpu), bwd_data._on_torch(problem, dy, w, cpu)
    for host, other in zip(on_host, on_torch):
        assert host.shape == other.shape
        np.testing.assert_allclose(other, host, rtol=1e-12, atol=1e-12)
        assert np.abs(host).max() > 0


def test_the_device_is_used_only_inside_a_tune_for_large_problems_with_cuda(monkeypatch):
    big = reference_device.MIN_DEVICE_MACS
    assert reference_device.reference_device(big) is None  # outside device_references
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with reference_device.device_references(1):
        assert reference_device.reference_device(big) == torch.device("cuda", 1)
        assert reference_device.reference_device(big - 1) is None  # numpy is quick enough
    with reference_device.device_references(2):
        assert reference_device.reference_device(big) is None  # no such device here
    with reference_device.device_references(None):
        assert reference_device.reference_device(big) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with reference_device.device_references(0):
        assert reference_device.reference_device(big) is None


def test_a_torch_failure_falls_back_to_numpy(monkeypatch):
    problem = parse_conv_problem(CASES[0], Layout.NGCHW, DType.FP32)
    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal(problem.input_shape_logical), rng.standard_normal(problem.output_shape_logical)
    expected = bwd_weight.reference_logical(problem, x, dy)
    monkeypatch.setattr(reference_device, "reference_device", lambda macs: torch.device("cpu"))

    def out_of_memory(*args):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(bwd_weight, "_on_torch", out_of_memory)
    np.testing.assert_array_equal(bwd_weight.reference_logical(problem, x, dy), expected)


@pytest.mark.parametrize("module", [bwd_weight, bwd_data], ids=["bwd_weight", "bwd_data"])
def test_a_reference_device_sends_float64_references_to_the_torch_path(module, monkeypatch):
    problem = parse_conv_problem(CASES[0], Layout.NGCHW, DType.FP32)
    monkeypatch.setattr(reference_device, "reference_device", lambda macs: torch.device("cpu"))
    monkeypatch.setattr(module, "_on_torch", lambda *args: "from torch")
    a, b = np.zeros(problem.input_shape_logical), np.zeros(problem.output_shape_logical)
    args = (a, b) if module is bwd_weight else (b, np.zeros(problem.weight_shape_logical))
    assert module.reference_logical(problem, *args) == "from torch"
    ints = tuple(t.astype(np.int64) for t in args)  # integer references stay exact in numpy
    assert isinstance(module.reference_logical(problem, *ints), np.ndarray)


def test_the_torch_path_takes_transposed_views_as_they_are_laid_out():
    """A channels-last input seen in logical order is a transposed view: it goes to the device as it is
    laid out (reference_device.to_device) and must give what its contiguous copy gives."""
    problem = parse_conv_problem(CASES[0], Layout.NGCHW, DType.FP32)
    rng = np.random.default_rng(3)
    n, g, c, h, w_ = problem.input_shape_logical
    x_view = rng.standard_normal((n, h, w_, g, c)).transpose(0, 3, 4, 1, 2)  # NHWGC buffer, NGCHW order
    dy = rng.standard_normal(problem.output_shape_logical)[..., ::-1].copy()[..., ::-1]  # negative strides
    assert not x_view.flags.c_contiguous and any(s < 0 for s in dy.strides)
    cpu = torch.device("cpu")
    np.testing.assert_allclose(bwd_weight._on_torch(problem, x_view, dy, cpu),
                               bwd_weight.reference_logical(problem, np.ascontiguousarray(x_view), np.ascontiguousarray(dy)),
                               rtol=1e-12, atol=1e-12)
    moved = reference_device.to_device(x_view, cpu)
    assert moved.stride() != torch.from_numpy(np.ascontiguousarray(x_view)).stride()  # no host transposition


def test_torch_is_imported_ahead_only_for_a_reference_that_will_run_on_a_device(monkeypatch):
    import threading

    calls: list[int] = []
    monkeypatch.setattr(reference_device, "_import_torch", lambda: calls.append(1))
    reference_device.prefetch(None, 10**12)  # no device: numpy computes
    reference_device.prefetch(0, reference_device.MIN_DEVICE_MACS - 1)  # small: numpy computes
    reference_device.prefetch(0, reference_device.MIN_DEVICE_MACS)
    for thread in threading.enumerate():
        if thread.name == "kfactory-torch-import":
            thread.join()
    assert calls == [1]


@pytest.mark.parametrize("layout", [Layout.NGCHW, Layout.NHWGC])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("magnitude", [False, True])
def test_groupnorm_s_torch_path_computes_what_numpy_computes(layout, affine, magnitude, monkeypatch):
    """GroupNorm's reference and error scale through PyTorch (forced on the CPU device) against numpy."""
    from factory.ops import solver_for
    from factory.ops.groupnorm_bwd import reference as gn_reference
    from factory.ops.groupnorm_bwd.problem import GroupNormProblem

    problem = GroupNormProblem(N=3, C=12, G=4, input=(5, 7), layout=layout, dtype=DType.FP32, affine=affine)
    inputs = {k: v.astype(np.float64) for k, v in
              solver_for(problem.op).random_inputs(problem, np.random.default_rng(11)).items()}
    on_host = gn_reference.backward(problem, inputs, magnitude)
    monkeypatch.setattr(gn_reference, "computed_on_device",
                        lambda macs, dtype, compute: compute(torch.device("cpu")))  # no fallback can hide an error
    on_torch = gn_reference.backward(problem, inputs, magnitude)
    assert on_torch.keys() == on_host.keys() == ({"dx", "dgamma", "dbeta"} if affine else {"dx"})
    for name, want in on_host.items():
        assert on_torch[name].shape == want.shape
        np.testing.assert_allclose(on_torch[name], want, rtol=1e-12, atol=1e-12)
        assert np.abs(want).max() > 0


def test_a_reference_device_sends_groupnorm_s_reference_to_the_torch_path(monkeypatch):
    from factory.ops import solver_for
    from factory.ops.groupnorm_bwd import reference as gn_reference
    from factory.ops.groupnorm_bwd.problem import GroupNormProblem

    problem = GroupNormProblem(N=2, C=8, G=2, input=(4, 4), layout=Layout.NHWGC, dtype=DType.FP32)
    inputs = {k: v.astype(np.float64) for k, v in
              solver_for(problem.op).random_inputs(problem, np.random.default_rng(1)).items()}
    sent: list[bool] = []
    real = gn_reference._on_torch

    def on_torch(problem_: Any, operands: Any, magnitude: bool, device: Any) -> Any:
        sent.append(magnitude)
        return real(problem_, operands, magnitude, device)

    monkeypatch.setattr(reference_device, "reference_device", lambda macs: torch.device("cpu"))
    monkeypatch.setattr(gn_reference, "_on_torch", on_torch)
    solver = solver_for(problem.op)
    solver.reference(problem, inputs), solver.error_scale(problem, inputs)
    assert sent == [False, True]
