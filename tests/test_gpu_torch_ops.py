"""factory.torch's custom ops on the GPU: CUDA tensors run our kernels (a fallback to PyTorch is an error
here), results agree with PyTorch's autograd, a step of them is captured in a CUDA graph and replayed on
new inputs, and torch.compile (inductor) traces them without a graph break."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from factory.torch import KernelFactoryFallback, clear_kernel_choices  # noqa: E402

pytestmark = pytest.mark.gpu
F = torch.nn.functional
BOUND = {torch.float16: 1e-2, torch.bfloat16: 1.6e-2, torch.float32: 1e-4}  # as factory.bench.check


@pytest.fixture(autouse=True)
def cuda_only():
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    torch.backends.cudnn.allow_tf32 = False
    clear_kernel_choices()
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelFactoryFallback)  # every call below must run our kernel
        yield


def close(got, want, dtype) -> None:
    scale = float(want.abs().max()) or 1.0
    assert float((got.float() - want.float()).abs().max()) / scale <= BOUND[dtype]


def memory_format(layout: str):
    return torch.channels_last if layout == "channels_last" else torch.contiguous_format


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("groups", "c", "k", "stride"), [(1, 64, 96, 1), (8, 16, 16, 2), (32, 1, 1, 1)])
def test_conv_backward_runs_ours_and_agrees_with_autograd(layout, dtype, groups, c, k, stride):
    x = torch.randn(4, groups * c, 28, 27, device="cuda", dtype=dtype).to(memory_format=memory_format(layout))
    w = torch.randn(groups * k, c, 3, 3, device="cuda", dtype=dtype).to(memory_format=memory_format(layout))
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = F.conv2d(xg, wg, stride=stride, padding=1, groups=groups)
    dy = torch.randn_like(y)
    y.backward(dy)
    args = ([stride] * 2, [1, 1], [1, 1], groups)
    close(torch.ops.kfactory.conv_bwd_weight(dy, x, list(w.shape), *args), wg.grad, dtype)
    close(torch.ops.kfactory.conv_bwd_data(dy, w, list(x.shape), *args), xg.grad, dtype)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_groupnorm_bwd_runs_ours_and_agrees_with_autograd(layout, dtype):
    x = torch.randn(8, 64, 30, 31, device="cuda", dtype=dtype).to(memory_format=memory_format(layout))
    gamma, beta = torch.randn(64, device="cuda", dtype=dtype), torch.randn(64, device="cuda", dtype=dtype)
    # PyTorch's GPU forward takes NCHW only; the statistics do not depend on the layout
    _, mean, rstd = torch.ops.aten.native_group_norm(x.contiguous(), gamma, beta, 8, 64, 30 * 31, 32, 1e-5)
    xg, gg, bg = (t.clone().requires_grad_() for t in (x, gamma, beta))
    y = F.group_norm(xg, 32, gg, bg, eps=1e-5)
    dy = torch.randn_like(y).to(memory_format=memory_format(layout))  # y is NCHW on the GPU; ours wants x's layout
    y.backward(dy)
    dx, dgamma, dbeta = torch.ops.kfactory.groupnorm_bwd(dy, x, mean, rstd, gamma, 32)
    close(dx, xg.grad, dtype), close(dgamma, gg.grad, dtype), close(dbeta, bg.grad, dtype)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_dwsep_conv_fwd_runs_ours_and_agrees_with_two_convolutions(layout):
    x = torch.randn(8, 96, 28, 28, device="cuda", dtype=torch.float16).to(memory_format=memory_format(layout))
    w_dw = torch.randn(96, 1, 3, 3, device="cuda", dtype=torch.float16)
    w_pw = torch.randn(64, 96, 1, 1, device="cuda", dtype=torch.float16) / 10
    b_dw, b_pw = torch.randn(96, device="cuda", dtype=torch.float16), torch.randn(64, device="cuda", dtype=torch.float16)
    got = torch.ops.kfactory.dwsep_conv_fwd(x, w_dw, w_pw, b_dw, b_pw, [1, 1], [1, 1], [1, 1], "relu6", "none")
    want = F.conv2d(torch.clamp(F.conv2d(x, w_dw, b_dw, 1, 1, 1, 96), 0, 6), w_pw, b_pw)
    close(got, want, torch.float16)


def test_a_warmed_up_step_is_captured_in_a_cuda_graph_and_replays_on_new_inputs():
    x = torch.randn(4, 64, 28, 28, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 8, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    dy = torch.randn(4, 64, 28, 28, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    args = ([1, 1], [1, 1], [1, 1], 8)

    def step():
        return (torch.ops.kfactory.conv_bwd_weight(dy, x, list(w.shape), *args),
                torch.ops.kfactory.conv_bwd_data(dy, w, list(x.shape), *args))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up: kernels chosen, loaded and their workspaces allocated before the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step()
    for t in (x, w, dy):
        t.copy_(torch.randn_like(t))
    graph.replay()
    torch.cuda.synchronize()
    want = step()
    close(outputs[0], want[0], torch.float16)
    close(outputs[1], want[1], torch.float16)


def test_inductor_compiles_a_step_of_our_ops_without_a_graph_break():
    x = torch.randn(4, 32, 20, 20, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(32, 4, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    dy = torch.randn(4, 32, 20, 20, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)

    def step(dy, x, w):
        return torch.ops.kfactory.conv_bwd_weight(dy, x, list(w.shape), [1, 1], [1, 1], [1, 1], 8).float().sum()

    compiled = torch.compile(step, fullgraph=True)
    close(compiled(dy, x, w), step(dy, x, w), torch.float16)


def test_a_patched_model_trains_as_the_stock_one_on_the_gpu():
    import copy

    from factory.torch import patch

    nn = torch.nn
    torch.manual_seed(0)
    stock = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.GroupNorm(8, 32), nn.ReLU(),
                          nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.Conv2d(32, 64, 1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).cuda()
    stock = stock.to(memory_format=torch.channels_last)
    patched = copy.deepcopy(stock)
    report = patch(patched)
    assert len(report.swapped) == 4 and not report.kept

    def losses(model):
        torch.manual_seed(1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
        seen = []
        for _ in range(20):
            x = torch.randn(16, 3, 32, 32, device="cuda").to(memory_format=torch.channels_last)
            target = torch.randint(0, 10, (16,), device="cuda")
            loss = F.cross_entropy(model(x), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen.append(loss.item())
        return seen

    assert losses(patched) == pytest.approx(losses(stock), rel=2e-3)


@pytest.mark.parametrize("autocast", ["bf16", "none"])
def test_a_patched_training_step_is_captured_whole_in_a_cuda_graph(autocast):
    """`kfactory bench --model --cuda-graph`'s path on a small network: both steps captured after three
    eager steps; the patched replays learn as the stock replays do."""
    from factory.bench.training import StepConfig, run_model

    nn = torch.nn

    def network(config):
        return nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.GroupNorm(8, 32), nn.ReLU(),
                             nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.BatchNorm2d(32), nn.Conv2d(32, 64, 1),
                             nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, config.classes))

    config = StepConfig("mobilenet_v2", batch=16, size=32, autocast=autocast, classes=10, cuda_graph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelFactoryFallback)  # run_model records the fallbacks itself
        result = run_model(config, "cuda", steps=8, reps=5, warmup=2, build=network, profile=False)
    assert result.fallbacks == () and result.problems >= 6
    assert result.losses_agree, (result.losses_patched, result.losses_stock)
