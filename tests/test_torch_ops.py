"""factory.torch's custom ops on the CPU: PyTorch's own kernels run them there (said once), so these
check the parts that hold on every device: schemas and fake implementations (torch.library.opcheck),
results equal to PyTorch's autograd, outputs in the inputs' memory format, and tracing under
torch.compile(fullgraph=True) without a graph break. tests/test_gpu_torch_ops.py runs our kernels."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from factory.torch import KernelFactoryFallback, clear_kernel_choices  # noqa: E402
from factory.torch.ops import channels_last_strides  # noqa: E402

F = torch.nn.functional
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
pytestmark = pytest.mark.filterwarnings("ignore::factory.torch.KernelFactoryFallback")

# (N, groups, C per group, K per group, spatial, filter, stride, padding, dilation)
CONVS = [
    (2, 4, 2, 3, (9, 7), (3, 3), (1, 1), (1, 1), (1, 1)),
    (1, 1, 5, 6, (11,), (5,), (2,), (2,), (1,)),
    (2, 3, 1, 1, (5, 6, 4), (3, 3, 3), (1, 2, 1), (1, 1, 0), (1, 1, 1)),
    (3, 2, 4, 2, (13, 10), (3, 3), (2, 2), (0, 2), (2, 1)),
]


def channels_last(t):
    """`t` with channels-last strides, for any rank (1-D included)."""
    out = torch.empty_strided(t.shape, channels_last_strides(t.shape), dtype=t.dtype)
    return out.copy_(t)


def conv_case(case, layout: str):
    n, g, c, k, spatial, filt, stride, pad, dil = case
    x = torch.randn(n, g * c, *spatial, dtype=torch.float64).float()
    w = torch.randn(g * k, c, *filt)
    y = CONV[len(spatial)](x, w, stride=stride, padding=pad, dilation=dil, groups=g)
    dy = torch.randn_like(y)
    if layout == "channels_last":
        x, w, dy = channels_last(x), channels_last(w), channels_last(dy)
    return x, w, dy, (list(stride), list(pad), list(dil), g)


def autograd_grads(x, w, dy, stride, pad, dil, g):
    xg, wg = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    CONV[x.dim() - 2](xg, wg, stride=stride, padding=pad, dilation=dil, groups=g).backward(dy)
    return xg.grad, wg.grad


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{len(c[4])}d_g{c[1]}")
def test_conv_backward_ops_match_autograd_and_keep_the_memory_format(case, layout):
    x, w, dy, (stride, pad, dil, g) = conv_case(case, layout)
    dx_want, dw_want = autograd_grads(x, w, dy, stride, pad, dil, g)
    dw = torch.ops.kfactory.conv_bwd_weight(dy, x, list(w.shape), stride, pad, dil, g)
    dx = torch.ops.kfactory.conv_bwd_data(dy, w, list(x.shape), stride, pad, dil, g)
    torch.testing.assert_close(dw, dw_want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dx, dx_want, rtol=1e-4, atol=1e-4)
    if layout == "channels_last":
        assert dw.stride() == channels_last_strides(dw.shape) and dx.stride() == channels_last_strides(dx.shape)
    else:
        assert dw.is_contiguous() and dx.is_contiguous()


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_conv_ops_pass_opcheck(layout):
    x, w, dy, (stride, pad, dil, g) = conv_case(CONVS[0], layout)
    torch.library.opcheck(torch.ops.kfactory.conv_bwd_weight.default, (dy, x, list(w.shape), stride, pad, dil, g))
    torch.library.opcheck(torch.ops.kfactory.conv_bwd_data.default, (dy, w, list(x.shape), stride, pad, dil, g))


def groupnorm_case(affine: bool, layout: str, spatial=(5, 6)):
    n, c, groups = 3, 12, 4
    x = torch.randn(n, c, *spatial)
    gamma = torch.randn(c) if affine else None
    _, mean, rstd = torch.ops.aten.native_group_norm(x, gamma, None, n, c, x[0, 0].numel(), groups, 1e-5)
    dy = torch.randn_like(x)
    if layout == "channels_last":
        x, dy = channels_last(x), channels_last(dy)
    return dy, x, mean, rstd, gamma, groups


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("affine", [True, False])
def test_groupnorm_bwd_matches_autograd(affine, layout):
    dy, x, mean, rstd, gamma, groups = groupnorm_case(affine, layout)
    dx, dgamma, dbeta = torch.ops.kfactory.groupnorm_bwd(dy, x, mean, rstd, gamma, groups)
    xg = x.detach().clone().requires_grad_()
    params = [torch.nn.Parameter(gamma.clone()), torch.nn.Parameter(torch.zeros_like(gamma))] if affine else [None, None]
    F.group_norm(xg, groups, *params, eps=1e-5).backward(dy)
    torch.testing.assert_close(dx, xg.grad, rtol=1e-4, atol=1e-4)
    if affine:
        torch.testing.assert_close(dgamma, params[0].grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(dbeta, params[1].grad, rtol=1e-4, atol=1e-4)
    else:
        assert dgamma.numel() == 0 and dbeta.numel() == 0
    torch.library.opcheck(torch.ops.kfactory.groupnorm_bwd.default, (dy, x, mean, rstd, gamma, groups))


def dwsep_case(layout: str, ndim: int = 2, biases: bool = True):
    n, c, k = 2, 6, 10
    spatial, filt = {1: ((17,), (5,)), 2: ((9, 8), (3, 3)), 3: ((4, 5, 6), (3, 3, 3))}[ndim]
    x = torch.randn(n, c, *spatial)
    w_dw, w_pw = torch.randn(c, 1, *filt), torch.randn(k, c, *(1,) * ndim)
    b_dw, b_pw = (torch.randn(c), torch.randn(k)) if biases else (None, None)
    if layout == "channels_last":
        x = channels_last(x)
    return x, w_dw, w_pw, b_dw, b_pw


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize(("ndim", "biases", "acts"), [(2, True, ("relu6", "none")), (1, False, ("none", "relu")),
                                                      (3, True, ("relu", "relu6"))])
def test_dwsep_conv_fwd_matches_two_convolutions(layout, ndim, biases, acts):
    x, w_dw, w_pw, b_dw, b_pw = dwsep_case(layout, ndim, biases)
    stride, pad, dil = [2] + [1] * (ndim - 1), [1] * ndim, [1] * ndim
    got = torch.ops.kfactory.dwsep_conv_fwd(x, w_dw, w_pw, b_dw, b_pw, stride, pad, dil, *acts)
    act = {"none": lambda t: t, "relu": torch.relu, "relu6": lambda t: torch.clamp(t, 0, 6)}
    mid = act[acts[0]](CONV[ndim](x, w_dw, b_dw, stride, pad, dil, groups=x.shape[1]))
    torch.testing.assert_close(got, act[acts[1]](CONV[ndim](mid, w_pw, b_pw)), rtol=1e-4, atol=1e-4)
    assert (got.stride() == channels_last_strides(got.shape)) == (layout == "channels_last") or got.shape[1] == 1
    torch.library.opcheck(torch.ops.kfactory.dwsep_conv_fwd.default, (x, w_dw, w_pw, b_dw, b_pw, stride, pad, dil, *acts))


def test_a_bad_activation_is_a_clear_error():
    x, w_dw, w_pw, _, _ = dwsep_case("contiguous")
    with pytest.raises(ValueError, match="activation 'gelu' is not one of none, relu, relu6"):
        torch.ops.kfactory.dwsep_conv_fwd(x, w_dw, w_pw, None, None, [1, 1], [1, 1], [1, 1], "gelu", "none")


def test_every_op_traces_under_torch_compile_without_a_graph_break():
    x, w, dy, (stride, pad, dil, g) = conv_case(CONVS[0], "channels_last")
    gdy, gx, mean, rstd, gamma, groups = groupnorm_case(True, "contiguous")
    dx_in, w_dw, w_pw, b_dw, b_pw = dwsep_case("channels_last")

    def step(dy, x, w, gdy, gx, mean, rstd, gamma, dx_in, w_dw, w_pw, b_dw, b_pw):
        dw = torch.ops.kfactory.conv_bwd_weight(dy, x, list(w.shape), stride, pad, dil, g)
        dxc = torch.ops.kfactory.conv_bwd_data(dy, w, list(x.shape), stride, pad, dil, g)
        gn = torch.ops.kfactory.groupnorm_bwd(gdy, gx, mean, rstd, gamma, groups)
        out = torch.ops.kfactory.dwsep_conv_fwd(dx_in, w_dw, w_pw, b_dw, b_pw, [1, 1], [1, 1], [1, 1], "relu", "none")
        return dw.sum() + dxc.sum() + gn[0].sum() + gn[1].sum() + out.sum()

    args = (dy, x, w, gdy, gx, mean, rstd, gamma, dx_in, w_dw, w_pw, b_dw, b_pw)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")  # fullgraph: a graph break is an error
    torch.testing.assert_close(compiled(*args), step(*args), rtol=1e-4, atol=1e-3)


def test_the_fallback_is_said_once_per_op_and_reason():
    clear_kernel_choices()
    x, w, dy, (stride, pad, dil, g) = conv_case(CONVS[0], "contiguous")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.ops.kfactory.conv_bwd_weight(dy, x, list(w.shape), stride, pad, dil, g)
    notes = [str(w.message) for w in caught if issubclass(w.category, KernelFactoryFallback)]
    assert notes == ["kfactory::conv_bwd_weight ran PyTorch's own kernel: its tensors are not all on a CUDA device"]


# --- the eager hot path ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 8, 5, 7), (1, 1, 4, 4), (3, 6, 1, 1), (2, 4, 3, 5, 6), (1, 3, 1, 2, 1),
                                   (2, 8, 9), (4, 1, 1)])
def test_layout_of_follows_the_stride_rule_in_every_memory_format(shape):
    """PyTorch's channels-last test (used for 4-D and 5-D) and ours (1-D convolutions) agree on the rule
    that a size-1 dim's stride is free; contiguous tensors of such shapes may be both."""
    from factory.problem import Layout
    from factory.torch.ops import _has_strides, layout_of

    dense = torch.zeros(shape)
    stored_last = torch.zeros((shape[0], *shape[2:], shape[1])).movedim(-1, 1)
    for t in (dense, stored_last, dense.transpose(-1, -2)):
        expect_last = _has_strides(t, channels_last_strides(t.shape))
        got = layout_of(t)
        if expect_last:
            assert got is Layout.NHWGC
        else:
            assert got is (Layout.NGCHW if t.is_contiguous() else None)
    assert layout_of(stored_last) is Layout.NHWGC


def test_eager_calls_go_through_the_dispatcher_off_cuda_and_under_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from factory.torch import ops

    assert not ops._eager(torch.zeros(2))
    with FakeTensorMode():
        assert not ops._eager(torch.zeros(2))
    assert set(ops._IMPLEMENTATIONS) == {"conv_bwd_weight", "conv_bwd_data", "groupnorm_bwd", "dwsep_conv_fwd"}
    assert all(hasattr(torch.ops.kfactory, name) for name in ops._IMPLEMENTATIONS)


def test_a_convolution_call_chooses_its_kernel_once_and_forgets_it_when_told(monkeypatch):
    from factory.problem import Layout
    from factory.torch import ops

    asked: list[str] = []
    monkeypatch.setattr(ops, "_kernel", lambda op, tensors, layout, make: asked.append(make().key) or "K")
    clear_kernel_choices()
    dy, x = torch.zeros(2, 8, 6, 6), torch.zeros(2, 8, 6, 6)
    args = ("conv_bwd_weight", dy, x, Layout.NGCHW, [8, 1, 3, 3], [1, 1], [1, 1], [1, 1], 8)
    assert ops._conv_kernel(*args) == "K" and ops._conv_kernel(*args) == "K"
    assert len(asked) == 1
    ops._conv_kernel("conv_bwd_weight", torch.zeros(2, 8, 4, 4), x, Layout.NGCHW, [8, 1, 3, 3], [1, 1], [0, 0],
                     [1, 1], 8)  # no padding: another problem
    assert len(asked) == 2
    with ops.recording():  # a recording sees every call: nothing is answered from memory
        ops._conv_kernel(*args)
    assert len(asked) == 3
    clear_kernel_choices()
    ops._conv_kernel(*args)
    assert len(asked) == 4
    clear_kernel_choices()
