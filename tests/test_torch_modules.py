"""factory.torch's drop-in modules and patch(model) on the CPU (where our ops run PyTorch's kernels):
the same constructor, state_dict, outputs and gradients as PyTorch's modules, a patched model's
training steps equal to the stock model's, the report of what was swapped and why not, and a patched
model under torch.compile(fullgraph=True)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from factory.torch import Conv1d, Conv2d, Conv3d, DepthwiseSeparableConv2d, GroupNorm, patch  # noqa: E402
from factory.torch.modules import two_convolutions  # noqa: E402

nn = torch.nn
pytestmark = pytest.mark.filterwarnings("ignore::factory.torch.KernelFactoryFallback")


def grads_of(module, x):
    module.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    out = module(x)
    out.backward(torch.linspace(-1, 1, out.numel()).reshape(out.shape))
    return out, x.grad, {n: p.grad.clone() for n, p in module.named_parameters()}


@pytest.mark.parametrize(("theirs", "ours", "args", "shape"), [
    (nn.Conv1d, Conv1d, (6, 8, 5), (2, 6, 19)),
    (nn.Conv2d, Conv2d, (8, 12, 3), (2, 8, 9, 10)),
    (nn.Conv3d, Conv3d, (4, 4, 3), (1, 4, 5, 6, 7)),
])
@pytest.mark.parametrize("kwargs", [{}, {"stride": 2, "padding": 1, "dilation": 1, "groups": 2, "bias": False}])
def test_drop_in_convolutions_are_pytorch_s_in_every_way_but_the_backward_s_kernels(theirs, ours, args, shape, kwargs):
    torch.manual_seed(0)
    stock = theirs(*args, **kwargs)
    mine = ours(*args, **kwargs)
    mine.load_state_dict(stock.state_dict())
    assert list(mine.state_dict()) == list(stock.state_dict()) and isinstance(mine, theirs)
    x = torch.randn(shape)
    (out, dx, params), (out_s, dx_s, params_s) = grads_of(mine, x), grads_of(stock, x)
    torch.testing.assert_close(out, out_s)
    torch.testing.assert_close(dx, dx_s, rtol=1e-5, atol=1e-5)
    assert params.keys() == params_s.keys()
    for name in params:
        torch.testing.assert_close(params[name], params_s[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("affine", [True, False])
def test_drop_in_groupnorm_matches_pytorch_s(affine):
    stock, mine = nn.GroupNorm(4, 12, affine=affine), GroupNorm(4, 12, affine=affine)
    if affine:
        with torch.no_grad():
            stock.weight.normal_(), stock.bias.normal_()
    mine.load_state_dict(stock.state_dict())
    x = torch.randn(3, 12, 7, 5).to(memory_format=torch.channels_last)
    (out, dx, params), (out_s, dx_s, params_s) = grads_of(mine, x), grads_of(stock, x)
    torch.testing.assert_close(out, out_s)
    torch.testing.assert_close(dx, dx_s, rtol=1e-5, atol=1e-5)
    assert params.keys() == params_s.keys()
    for name in params:
        torch.testing.assert_close(params[name], params_s[name], rtol=1e-5, atol=1e-5)


def test_depthwise_separable_conv_is_two_convolutions_forward_and_backward():
    torch.manual_seed(1)
    block = DepthwiseSeparableConv2d(6, 10, 3, stride=2, padding=1, activation_dw="relu6", activation_pw="relu")
    assert set(block.state_dict()) == {"depthwise.weight", "depthwise.bias", "pointwise.weight", "pointwise.bias"}
    x = torch.randn(2, 6, 11, 9)
    out, dx, params = grads_of(block, x)
    reference = copy.deepcopy(block)
    xr = x.detach().clone().requires_grad_()
    d, p = reference.depthwise, reference.pointwise
    want = two_convolutions(xr, d.weight, p.weight, d.bias, p.bias, [2, 2], [1, 1], [1, 1], "relu6", "relu")
    want.backward(torch.linspace(-1, 1, want.numel()).reshape(want.shape))
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dx, xr.grad, rtol=1e-5, atol=1e-5)
    for name, param in reference.named_parameters():
        torch.testing.assert_close(params[name], param.grad, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="activation_pw 'gelu'"):
        DepthwiseSeparableConv2d(6, 10, 3, activation_pw="gelu")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.norm = nn.GroupNorm(4, 16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.pw = nn.Conv2d(16, 24, 1)
        self.reflect = nn.Conv2d(24, 24, 3, padding=1, padding_mode="reflect")
        self.same = nn.Conv1d(24, 8, 3, padding="same")
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        x = torch.relu(self.norm(self.stem(x)))
        x = self.reflect(self.pw(torch.relu(self.dw(x))))
        x = self.same(x.mean(dim=3))
        return self.head(x.mean(dim=2))


def test_patch_swaps_in_place_and_reports_what_it_kept_and_why():
    model = Net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = patch(model)
    assert [s.name for s in report.swapped] == ["stem", "norm", "dw", "pw"]
    assert {s.name: s.reason for s in report.kept} == {
        "reflect": "padding_mode 'reflect' (ours: zeros)", "same": "padding 'same' (ours: explicit sizes)"}
    assert type(model.stem) is Conv2d and type(model.norm) is GroupNorm and type(model.reflect) is nn.Conv2d
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    assert "4 of 6 modules swapped" in str(report) and "reflect: Conv2d kept: padding_mode" in str(report)
    assert [s.reason for s in patch(model).modules if s.name in ("stem", "norm")] == ["already patched"] * 2
    with pytest.raises(ValueError, match="unknown ops"):
        patch(model, ops=["conv_fwd"])


def test_patch_for_one_conv_op_leaves_the_other_to_pytorch():
    model = Net()
    report = patch(model, ops=["conv_bwd_weight"])
    assert model.dw.kfactory_ops == frozenset({"conv_bwd_weight"})
    assert {s.name for s in report.kept} >= {"norm"}  # groupnorm_bwd not asked for


def training_losses(model, steps: int = 4):
    torch.manual_seed(2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        x, target = torch.randn(4, 3, 16, 16), torch.randint(0, 5, (4,))
        loss = nn.functional.cross_entropy(model(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_a_patched_model_trains_as_the_stock_one_does():
    torch.manual_seed(3)
    stock = Net()
    patched = copy.deepcopy(stock)
    patch(patched)
    assert training_losses(patched) == pytest.approx(training_losses(stock), rel=1e-5)


def test_a_patched_model_compiles_without_graph_breaks():
    torch.manual_seed(4)
    model = Net()
    patch(model)
    x = torch.randn(2, 3, 16, 16)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    out = compiled(x)
    out.sum().backward()
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    assert model.stem.weight.grad is not None


def test_under_autocast_a_patched_model_computes_and_learns_as_the_stock_one_does():
    """Autocast's casts happen outside our autograd Functions: the same dtypes, values and gradients
    (back in the parameters' fp32) as the stock model's, for the convolutions and the fused block."""
    torch.manual_seed(5)
    stock = nn.Sequential(Net(), nn.Unflatten(1, (5, 1, 1)), nn.Conv2d(5, 6, 1))
    block = DepthwiseSeparableConv2d(6, 4, 1, activation_dw="relu")
    patched = copy.deepcopy(stock)
    patch(patched)
    x = torch.randn(2, 3, 16, 16)
    outputs, grads = [], []
    for model in (stock, patched):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        out.float().square().sum().backward()
        outputs.append(out)
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert outputs[1].dtype == outputs[0].dtype == torch.bfloat16
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=0)
    for name, grad in grads[0].items():
        assert grads[1][name].dtype == grad.dtype == torch.float32, name
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-2, atol=1e-3)
    x = torch.randn(2, 6, 5, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused, want = block(x), block.pointwise(torch.relu(block.depthwise(x)))
    assert fused.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(fused, want, rtol=2e-2, atol=2e-2)
