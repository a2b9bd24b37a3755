"""On a GPU: Kernel.run on PyTorch tensors — the quick check path (exact shapes and strides) and the full
one (a size-1 dim with an unusual stride) both launch correctly, on the caller's current stream, and
match PyTorch's convolution_backward; wrong tensors are still refused."""

import pytest

from factory.api import SelectMode, TensorMismatch, select
from factory.problem import DType, Layout, parse_conv_problem

pytestmark = pytest.mark.gpu


def test_conv_kernel_run_on_a_side_stream_and_odd_strides(gpu_backend):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    problem = parse_conv_problem("N=1,G=24,C=1,K=1,input=17x19,filter=3x3,stride=2,pad=1", Layout.NHWGC, DType.FP16)
    kernel = select(problem, mode=SelectMode.HEURISTIC, backend=gpu_backend)
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(1, 24, 17, 19, device="cuda", generator=gen).half().to(memory_format=torch.channels_last)
    dy = torch.randn(1, 24, 9, 10, device="cuda", generator=gen).half().to(memory_format=torch.channels_last)
    # The same values as a view whose size-1 batch dim has an unusual stride: only the full check accepts it.
    odd_x = x.as_strided(x.shape, (7, *x.stride()[1:]))
    ref = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), torch.zeros(24, 1, 3, 3, device="cuda", dtype=torch.float64), None,
        [2, 2], [1, 1], [1, 1], False, [0, 0], 24, [False, True, False])[1]
    side = torch.cuda.Stream()
    for given_x in (x, odd_x):
        dw = torch.empty(24, 1, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            # A launch on any other stream would run before this poison lands and be overwritten by it.
            torch.cuda._sleep(1_000_000)
            dw.fill_(float("nan"))
            kernel.run(input=given_x, grad_output=dy, grad_weight=dw)
        side.synchronize()
        err = (dw.double() - ref).abs().max() / ref.abs().max()
        assert float(err) < 1e-2
    with pytest.raises(TensorMismatch, match="^grad_weight: dtype float32"):
        kernel.run(input=x, grad_output=dy, grad_weight=dw.float())
    with pytest.raises(TensorMismatch, match="^input: shape"):
        kernel.run(input=x.contiguous(), grad_output=dy, grad_weight=dw)


def test_bilinear_kernel_run_accumulates_into_the_gradient_it_is_given(gpu_backend):
    """d passed by name, as the grad_weight tensor itself: grad_weight = alpha * dW + beta * grad_weight."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    problem = parse_conv_problem("N=2,G=24,C=1,K=1,input=17x19,filter=3x3,stride=2,pad=1,alpha=0.5,beta=2",
                                 Layout.NHWGC, DType.FP32)
    kernel = select(problem, mode=SelectMode.HEURISTIC, backend=gpu_backend)
    assert kernel.tensor_names == ["input", "grad_output", "d", "grad_weight"]
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(2, 24, 17, 19, device="cuda", generator=gen).to(memory_format=torch.channels_last)
    dy = torch.randn(2, 24, 9, 10, device="cuda", generator=gen).to(memory_format=torch.channels_last)
    old = torch.randn(24, 1, 3, 3, device="cuda", generator=gen).to(memory_format=torch.channels_last)
    dw = torch.ops.aten.convolution_backward(
        dy.double(), x.double(), torch.zeros(24, 1, 3, 3, device="cuda", dtype=torch.float64), None,
        [2, 2], [1, 1], [1, 1], False, [0, 0], 24, [False, True, False])[1]
    want = 0.5 * dw + 2.0 * old.double()
    grad = old.clone()
    kernel.run(input=x, grad_output=dy, d=grad, grad_weight=grad)
    torch.cuda.synchronize()
    assert float((grad.double() - want).abs().max() / want.abs().max()) < 1e-5
    separate = torch.empty_like(old)
    kernel.run(input=x, grad_output=dy, d=old, grad_weight=separate)
    torch.cuda.synchronize()
    assert float((separate.double() - want).abs().max() / want.abs().max()) < 1e-5
