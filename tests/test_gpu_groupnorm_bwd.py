"""On a GPU: every groupnorm_bwd instance that applies to each problem matches the numpy reference on
fresh inputs (statistics those of x), outputs and workspace poisoned first; and a Kernel run on
PyTorch-shaped tensors agrees with PyTorch's own GroupNorm backward."""

import numpy as np
import pytest

from factory.ops.groupnorm_bwd import SOLVER, parse_groupnorm_problem
from factory.problem import DType, Layout
from factory.selector import lookup
from factory.tuner import TuneSettings, tune
from groupnorm_problems import problems

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("problem", problems(), ids=lambda p: p.key)
def test_every_applicable_instance_matches_reference(problem, gpu_backend):
    candidates = lookup(problem)
    assert candidates, "no instance applies"
    cell = (problem.layout, problem.dtype, problem.ndim)
    expected = {f for f in SOLVER.families if cell in SOLVER.supported_cells(f)}
    # resident refuses problems whose units one round cannot hold; every other family applies
    assert expected - {"resident"} <= {c.family for c in candidates} <= expected
    measurements = tune(problem, candidates, gpu_backend, TuneSettings(reps=3, warmup=1, seed=7))
    failed = [f"{m.instance}: {m.error}" for m in measurements if not m.verified]
    print(f"{problem.key}: {len(measurements) - len(failed)}/{len(measurements)} verified")
    assert len(measurements) == len(candidates)
    assert not failed, "\n".join(failed)


# Problems past one round of the resident family's grid (its shared memory holds about 13 MB of each of
# x and dy): a group spread over many blocks, samples split between blocks, samples larger than a round
# (taken a block of whole groups' channels at a time), odd sizes, no gamma.
RESIDENT_ROUNDS = [
    (Layout.NGCHW, DType.FP16, "N=1,C=32,G=8,input=700x701"),
    (Layout.NHWGC, DType.FP32, "N=6,C=96,G=12,input=111x113"),
    (Layout.NGCHW, DType.BF16, "N=3,C=40,G=5,input=333x335"),
    (Layout.NHWGC, DType.BF16, "N=5,C=36,G=6,input=301x299"),
    (Layout.NGCHW, DType.FP32, "N=40,C=24,G=3,input=100x99,affine=0"),
    (Layout.NHWGC, DType.FP32, "N=1,C=288,G=8,input=204x204"),  # a sample in blocks of whole groups
    (Layout.NHWGC, DType.FP16, "N=2,C=192,G=24,input=300x211"),  # the same, 8 channels a group
]


@pytest.mark.parametrize("layout, dtype, spec", RESIDENT_ROUNDS, ids=lambda v: getattr(v, "value", v))
def test_resident_family_over_several_rounds_matches_reference(layout, dtype, spec, gpu_backend):
    from factory.ops.groupnorm_bwd.resident import rounds
    from factory.device import target_for

    problem = parse_groupnorm_problem(spec, layout, dtype)
    target = target_for(gpu_backend.device_info())
    _every_instance_of_family_verified(problem, "resident", gpu_backend, seed=3,
                                       several=lambda i: rounds(i.params, problem, target).count > 1)


def _every_instance_of_family_verified(problem, family, backend, seed, several):
    """Tune every `family` instance of `problem` (at least one of them walking it in several rounds or
    windows, as `several` says) and require each to match the reference."""
    candidates = [i for i in lookup(problem) if i.family == family]
    assert candidates, f"no {family} instance applies"
    assert any(several(i) for i in candidates)
    measurements = tune(problem, candidates, backend, TuneSettings(reps=1, warmup=0, seed=seed))
    failed = [f"{m.instance}: {m.error}" for m in measurements if not m.verified]
    assert len(measurements) == len(candidates)
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("layout", [Layout.NGCHW, Layout.NHWGC])
@pytest.mark.parametrize("dtype", [DType.FP16, DType.FP32])
def test_kernel_run_on_torch_tensors_agrees_with_pytorch(layout, dtype, gpu_backend):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    from factory.api import SelectMode, TensorMismatch, select

    problem = parse_groupnorm_problem("N=3,C=64,G=8,input=14x14", layout, dtype)
    tdtype = {DType.FP16: torch.float16, DType.FP32: torch.float32}[dtype]
    fmt = torch.channels_last if layout is Layout.NHWGC else torch.contiguous_format
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(3, 64, 14, 14, device="cuda", generator=gen).to(tdtype).to(memory_format=fmt)
    dy = torch.randn(3, 64, 14, 14, device="cuda", generator=gen).to(tdtype).to(memory_format=fmt)
    gamma = torch.randn(64, device="cuda", generator=gen).to(tdtype)
    groups = x.float().reshape(3, 8, -1)
    mean = groups.mean(-1)
    rstd = (groups.var(-1, unbiased=False) + 1e-5).rsqrt()
    dx = torch.empty_like(x)
    dgamma, dbeta = torch.empty_like(gamma), torch.empty_like(gamma)
    kernel = select(problem, mode=SelectMode.HEURISTIC, backend=gpu_backend)
    kernel.run(x=x, dy=dy, mean=mean, rstd=rstd, gamma=gamma, dx=dx, dgamma=dgamma, dbeta=dbeta)
    torch.cuda.synchronize()
    ref = torch.ops.aten.native_group_norm_backward(
        dy.double().contiguous(), x.double().contiguous(), mean.double(), rstd.double(), gamma.double(),
        3, 64, 196, 8, [True, True, True])
    for got, want in zip((dx, dgamma, dbeta), ref):
        err = (got.double() - want).abs().max() / want.abs().max()
        assert float(err) < (1e-2 if dtype is DType.FP16 else 1e-5)
    with pytest.raises(TensorMismatch, match="mean"):
        kernel.run(x=x, dy=dy, mean=mean.half(), rstd=rstd, gamma=gamma, dx=dx, dgamma=dgamma, dbeta=dbeta)
    with pytest.raises(TensorMismatch, match="dy"):
        kernel.run(x=x, dy=dy[:, :, :, :13], mean=mean, rstd=rstd, gamma=gamma, dx=dx, dgamma=dgamma, dbeta=dbeta)
    assert np.isfinite(dx.float().cpu().numpy()).all()


def test_resident_kernel_is_captured_in_a_cuda_graph_and_replays(gpu_backend):
    """A cooperative launch inside torch.cuda.graph capture: the replay on new inputs matches an eager run."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    from factory.api import SelectMode, select

    problem = parse_groupnorm_problem("N=2,C=304,G=8,input=121x121", Layout.NHWGC, DType.BF16)
    kernel = select(problem, mode=SelectMode.FORCE, instance="groupnorm_bwd_2d_nhwgc_bf16_resident_t512_v2_b1",
                    backend=gpu_backend)
    gen = torch.Generator(device="cuda").manual_seed(3)

    def fresh():
        x = torch.randn(2, 304, 121, 121, device="cuda", generator=gen).to(torch.bfloat16)
        return {"x": x.to(memory_format=torch.channels_last),
                "dy": torch.randn(2, 304, 121, 121, device="cuda", generator=gen).to(torch.bfloat16)
                .to(memory_format=torch.channels_last),
                "mean": torch.randn(2, 8, device="cuda", generator=gen),
                "rstd": torch.rand(2, 8, device="cuda", generator=gen) + 0.5,
                "gamma": torch.randn(304, device="cuda", generator=gen).to(torch.bfloat16)}

    inputs = fresh()
    outputs = {"dx": torch.empty_like(inputs["x"]), "dgamma": torch.empty_like(inputs["gamma"]),
               "dbeta": torch.empty_like(inputs["gamma"])}
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        kernel.run(**inputs, **outputs)  # warm-up: workspace and module ready before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        kernel.run(**inputs, **outputs)
    new = fresh()
    for name, value in new.items():
        inputs[name].copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    eager = {k: torch.full_like(v, float("nan")) for k, v in outputs.items()}
    kernel.run(**new, **eager)
    torch.cuda.synchronize()
    for name in outputs:
        assert torch.equal(outputs[name].isnan(), eager[name].isnan())
        assert torch.allclose(outputs[name].float(), eager[name].float(), rtol=1e-2, atol=1e-2), name


# Problems the window family walks in several windows: windows of whole groups (NGCHW, D a multiple of a
# tile's rows), of whole samples (NHWGC), of tiles that straddle groups (N=16 C=1248: 39 channels a group,
# a lag of two windows), samples larger than a window, odd sizes, no gamma.
WINDOW_PROBLEMS = [
    (Layout.NGCHW, DType.FP16, "N=1,C=128,G=32,input=512x512"),
    (Layout.NGCHW, DType.BF16, "N=16,C=1248,G=32,input=11x11"),
    (Layout.NHWGC, DType.FP16, "N=64,C=256,G=32,input=51x51"),
    (Layout.NHWGC, DType.FP32, "N=3,C=288,G=8,input=204x204"),
    (Layout.NGCHW, DType.FP32, "N=40,C=24,G=3,input=100x99,affine=0"),
    (Layout.NHWGC, DType.BF16, "N=5,C=36,G=6,input=301x299"),
]


@pytest.mark.parametrize("layout, dtype, spec", WINDOW_PROBLEMS, ids=lambda v: getattr(v, "value", v))
def test_window_family_over_several_windows_matches_reference(layout, dtype, spec, gpu_backend):
    from factory.device import target_for
    from factory.ops.groupnorm_bwd.window import window_geometry, windows

    problem = parse_groupnorm_problem(spec, layout, dtype)
    target = target_for(gpu_backend.device_info())
    _every_instance_of_family_verified(
        problem, "window", gpu_backend, seed=5,
        several=lambda i: windows(i.params, problem, window_geometry(i.params, problem, target)).count > 1)
