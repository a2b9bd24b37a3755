"""`kfactory bench --model`'s harness on the CPU, with a small network standing in for torchvision's
(the timing, the loss comparison, the profile breakdown and the files), and its one-line errors."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from factory.bench import training  # noqa: E402
from factory.bench.command import main as bench_main  # noqa: E402
from factory.bench.model import BenchError  # noqa: E402
from factory.bench.training import StepConfig, kernel_kind, relative_difference, run_model  # noqa: E402

nn = torch.nn
pytestmark = pytest.mark.filterwarnings("ignore::factory.torch.KernelFactoryFallback")


def small_network(config: StepConfig) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.GroupNorm(4, 16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16), nn.ReLU6(),
        nn.Conv2d(16, 32, 1, groups=4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.3),
        nn.Linear(32, config.classes))  # dropout: the runs compare only from the same random state


def test_a_patched_step_is_timed_compared_and_broken_down_beside_the_stock_one():
    config = StepConfig("mobilenet_v2", batch=2, size=32, autocast="none", memory_format="channels_last", classes=10)
    result = run_model(config, "cpu", steps=3, reps=2, warmup=1, build=small_network)
    assert result.stock_ms > 0 and result.patched_ms > 0 and math.isfinite(result.speedup)
    assert len(result.losses_stock) == len(result.losses_patched) == 3
    assert result.losses_agree and result.loss_diff <= 1e-5  # on the CPU both run PyTorch's kernels
    assert result.losses_stock[0] != result.losses_stock[2]  # the steps do learn
    assert result.swapped == 4 and result.problems == 6  # GroupNorm, the stem's dW, 2 x (dW, dIn)
    assert result.breakdown_patched.total_us > 0 and result.breakdown_patched.top
    assert any("not all on a CUDA device" in f for f in result.fallbacks)
    json.dumps(result.record(), default=str)


def test_losses_are_compared_step_by_step():
    assert relative_difference([1.0, 2.0], [1.0, 2.2]) == pytest.approx(0.2 / 2.2)
    assert relative_difference([1.0, math.nan], [1.0, 1.0]) == math.inf
    with pytest.raises(ValueError):
        relative_difference([1.0], [1.0, 2.0])


@pytest.mark.parametrize(("name", "kind"), [
    ("kf_main", "ours"), ("sm90_xmma_fprop_implicit_gemm_bf16", "convolution"),
    ("void at::native::(anonymous namespace)::batch_norm_collect_statistics_kernel", "normalization"),
    ("void at::native::multi_tensor_apply_kernel<SGD>", "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, relu>", "elementwise"), ("something_else", "other"),
])
def test_kernels_are_sorted_into_kinds(name, kind):
    assert kernel_kind(name) == kind


def test_the_command_writes_json_and_markdown_and_fails_when_losses_differ(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(training, "build_architecture", small_network)
    args = ["--model", "mobilenet_v2", "--device", "cpu", "--batch", "2", "--size", "32", "--autocast", "none,bf16",
            "--reps", "2", "--warmup", "0", "--steps", "2", "--out", str(tmp_path)]
    assert bench_main(args) == 0
    saved = json.loads((tmp_path / "models.json").read_text())
    assert [r["config"]["autocast"] for r in saved["results"]] == ["none", "bf16"]
    assert all(r["losses_agree"] for r in saved["results"])
    text = (tmp_path / "models.md").read_text()
    assert "mobilenet_v2 b2 32² bf16 channels_last" in text and "CPU leaf ops" in text
    monkeypatch.setitem(training.LOSS_RTOL, "none", -1.0)  # nothing agrees with a negative tolerance
    assert bench_main(args[:9] + ["none"] + args[10:]) == 1
    assert "LOSSES DIFFER" in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "message"), [
    (["--model", "vgg16"], "--model 'vgg16': one of mobilenet_v2"),
    (["--model", "resnext50", "--autocast", "fp8"], "--autocast 'fp8'"),
    (["--model", "resnext50", "--memory-format", "nchw"], "--memory-format 'nchw'"),
    (["--model", "resnext50", "--random", "3", "--seed", "1"], "takes no --random"),
    (["--model", "resnext50", "--steps", "0"], "--steps must be >= 1"),
    (["--model", ","], "--model needs at least one"),
    (["--model", "resnext50", "--cuda-graph"], "--cuda-graph needs --device cuda"),
    (["--model", "resnext50", "--tune-budget", "4"], "--tune-budget limits --tune: give both"),
    (["--model", "resnext50", "--cuda-graph", "--autocast", "fp16"], "GradScaler's step reads its overflow flag"),
])
def test_bad_model_options_are_one_line_errors(extra, message, capsys, tmp_path):
    assert bench_main([*extra, "--device", "cpu", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_without_torchvision_the_error_says_to_install_it(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "torchvision", None)  # as if not installed
    with pytest.raises(BenchError, match="needs torchvision"):
        training.build_architecture(StepConfig("resnext50"))


def test_under_torch_compile_the_patched_network_compiles_whole_and_learns_the_same(tmp_path, monkeypatch):
    monkeypatch.setattr(training, "build_architecture", small_network)
    args = ["--model", "resnext50", "--device", "cpu", "--batch", "2", "--size", "32", "--autocast", "none",
            "--reps", "1", "--warmup", "0", "--steps", "2", "--compile", "aot_eager", "--out", str(tmp_path)]
    assert bench_main(args) == 0  # fullgraph: a graph break would have been an error
    (result,) = json.loads((tmp_path / "models.json").read_text())["results"]
    assert result["config"]["compile"] == "aot_eager" and result["losses_agree"] and result["loss_diff"] <= 1e-5


def test_an_unknown_compile_backend_is_a_one_line_error(capsys, tmp_path):
    assert bench_main(["--model", "resnext50", "--device", "cpu", "--compile", "nope", "--out", str(tmp_path)]) == 2
    assert "--compile 'nope': one of" in capsys.readouterr().err


def test_an_interrupted_run_keeps_the_configurations_it_measured(tmp_path, monkeypatch):
    real = training.run_model
    calls = []

    def second_is_interrupted(config, *args, **kwargs):
        calls.append(config)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(config, *args, **kwargs)

    monkeypatch.setattr(training, "build_architecture", small_network)
    monkeypatch.setattr("factory.bench.training_report.run_model", second_is_interrupted)
    args = ["--model", "mobilenet_v2,resnext50", "--device", "cpu", "--batch", "2", "--size", "32", "--autocast", "none",
            "--reps", "1", "--warmup", "0", "--steps", "2", "--out", str(tmp_path)]
    assert bench_main(args) == 130
    saved = json.loads((tmp_path / "models.json").read_text())
    assert saved["meta"]["complete"] is False
    assert [r["config"]["architecture"] for r in saved["results"]] == ["mobilenet_v2"]


def test_a_captured_step_outlives_everything_but_its_replay():
    """The graph reads and writes the model, optimizer state and batch in place: the replay holds them."""
    import gc
    import weakref

    class Step:
        pass

    step, replays = Step(), []
    replay = training._Replay(type("Graph", (), {"replay": lambda self: replays.append(1)})(), torch.ones(()), step)
    alive = weakref.ref(step)
    del step
    gc.collect()
    assert alive() is not None
    assert float(replay()) == 1.0 and replays == [1]


def test_the_races_table_says_what_serves_each_problem_and_the_sums():
    from factory.bench.training_report import races_table
    from factory.torch.versus import Race

    lines = races_table([Race("a", "i", 100.0, 300.0), Race("b", "i", 200.0, 50.0)])
    assert "0.35 ms PyTorch alone, 0.15 ms served (1 of 2 problems ours)" in lines[0]
    assert lines[-3:-1] == ["| `a` | 100.0 | 300.0 | ours |", "| `b` | 200.0 | 50.0 | PyTorch |"]


def test_a_bad_tune_budget_is_refused_by_the_parser_in_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as exited:
        bench_main(["--model", "resnext50", "--tune", "--tune-budget", "x", "--device", "cpu", "--out", str(tmp_path)])
    assert exited.value.code == 2
    assert "--tune-budget: budget 'x' is neither a whole number of candidates nor seconds" in capsys.readouterr().err
