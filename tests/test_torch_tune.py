"""factory.torch.tune(model, example_inputs) on the CPU: the problems a patched model's training step
meets are recorded (and the model left as found), tuned one by one into the DB (on tests/fake_gpu.py's
FakeGPU), or queued as fleet jobs in a DB file."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from factory import api  # noqa: E402
from factory.ops.groupnorm_bwd.problem import GroupNormProblem  # noqa: E402
from factory.problem import ConvProblem, DType, KernelFactoryError, Layout, Op, UnsupportedProblem  # noqa: E402
from factory.torch import Conv2d, GroupNorm, patch, step_problems, tune  # noqa: E402
from factory.torch.ops import recording  # noqa: E402
from fake_gpu import DEVICE, SETTINGS, FakeGPU, isolate  # noqa: E402
from tuning_db import TuningDB  # noqa: E402

nn = torch.nn
pytestmark = pytest.mark.filterwarnings("ignore::factory.torch.KernelFactoryFallback")


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(8, 16, 3, padding=1, groups=2, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16), nn.GroupNorm(4, 16),
                         nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16))


def conv(N, G, C, K, size, stride, op) -> ConvProblem:
    return ConvProblem(N=N, G=G, C=C, K=K, input=(size, size), filter=(3, 3), stride=(stride, stride), pad=(1, 1),
                       dilation=(1, 1), layout=Layout.NGCHW, dtype=DType.FP32, op=op)


def test_a_step_records_each_distinct_problem_once_in_the_order_met():
    model = small_model()
    patch(model)
    x = torch.randn(2, 8, 11, 11)
    problems = step_problems(model, x)
    # Backward runs last layer first; the first conv's input needs no gradient, so no backward-data there.
    assert problems == [
        conv(2, 16, 1, 1, 6, 2, Op.CONV_BWD_DATA), conv(2, 16, 1, 1, 6, 2, Op.CONV_BWD_WEIGHT),
        GroupNormProblem(N=2, C=16, G=4, input=(6, 6), layout=Layout.NGCHW, dtype=DType.FP32, affine=True),
        conv(2, 16, 1, 1, 11, 2, Op.CONV_BWD_DATA), conv(2, 16, 1, 1, 11, 2, Op.CONV_BWD_WEIGHT),
        conv(2, 2, 4, 8, 11, 1, Op.CONV_BWD_WEIGHT),
    ]
    layers = nn.Sequential(*[Conv2d(16, 16, 3, padding=1, groups=16) for _ in range(3)])
    assert len(step_problems(layers, torch.randn(2, 16, 9, 9))) == 2  # one problem pair, met thrice


def test_recording_leaves_the_model_as_it_found_it():
    model = small_model()
    patch(model)
    state = copy.deepcopy(model.state_dict())
    step_problems(model, [torch.randn(4, 8, 7, 7)])
    assert all(p.grad is None for p in model.parameters())
    for name, value in model.state_dict().items():
        assert torch.equal(value, state[name]), name  # BatchNorm's running statistics included


def test_recording_follows_the_memory_format_and_a_loss_function():
    model = small_model()
    patch(model)
    x = torch.randn(2, 8, 11, 11).to(memory_format=torch.channels_last)
    model = model.to(memory_format=torch.channels_last)
    problems = step_problems(model, x, loss_fn=lambda out: out[:, :4].square().mean())
    assert {p.layout for p in problems} == {Layout.NHWGC}


def test_nested_recordings_each_see_everything_met_inside():
    model = nn.Sequential(GroupNorm(2, 4))
    x = torch.randn(1, 4, 5, requires_grad=True)
    with recording() as outer:
        with recording() as inner:
            model(x).sum().backward()
        model(torch.randn(3, 4, 5, requires_grad=True)).sum().backward()
    assert len(inner) == 1 and len(outer) == 2 and outer[0] == inner[0]


def test_a_stock_model_meets_no_problem_and_the_report_says_to_patch_it():
    report = tune(small_model(), torch.randn(2, 8, 11, 11), progress=False)
    assert report.problems == () and "patch(model)" in report.summary()


def test_an_output_without_a_gradient_needs_a_loss_function():
    model = small_model()
    patch(model)
    with pytest.raises(KernelFactoryError, match="loss_fn"):
        step_problems(model.requires_grad_(False), torch.randn(2, 8, 11, 11))


@pytest.mark.filterwarnings("ignore:FakeGPU cannot be rebuilt")
def test_tune_tunes_each_problem_into_the_db_and_serves_the_winner_next(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    model = nn.Sequential(GroupNorm(3, 6))
    x = torch.randn(2, 6, 5, 7)
    (problem,) = step_problems(model, x)
    db = TuningDB(str(tmp_path / "tune.sqlite"))
    gpu = FakeGPU(problem)
    report = tune(model, x, db=db, backend=gpu, settings=SETTINGS, progress=False)
    (tuned,) = report.tuned
    assert report.problems == (problem.key,) and tuned.key == problem.key and tuned.measured > 0
    assert api.select(problem, mode="db", backend=gpu, db=db).name == tuned.winner
    again = tune(model, x, db=db, backend=gpu, settings=SETTINGS, progress=False).tuned[0]
    assert again.measured == 0 and again.reused == tuned.measured and again.winner == tuned.winner
    assert "1 tuned, 1 with a verified winner" in report.summary()


def test_tune_goes_problem_by_problem_and_reports_the_ones_no_instance_computes(monkeypatch):
    model = small_model()
    patch(model)
    x = torch.randn(2, 8, 11, 11)
    met = step_problems(model, x)
    seen = []

    def fake_tune(problem, backend, db, settings, progress, on_resume, budget):
        seen.append((problem, budget))
        if problem.op is Op.CONV_BWD_DATA:
            raise UnsupportedProblem("no instance computes it")
        return api.TuneOutcome([], None)

    monkeypatch.setattr("factory.torch.tuning.tune_problem", fake_tune)
    report = tune(model, x, budget=3, progress=True)
    assert seen == [(p, 3) for p in met]
    assert [t.key for t in report.tuned] == [p.key for p in met if p.op is not Op.CONV_BWD_DATA]
    assert [key for key, _ in report.unservable] == [p.key for p in met if p.op is Op.CONV_BWD_DATA]
    assert "2 left out" in report.summary()


def test_with_a_fleet_db_the_problems_become_jobs_once(tmp_path):
    model = small_model()
    patch(model)
    x = torch.randn(2, 8, 11, 11)
    path = tmp_path / "fleet.sqlite"
    db = TuningDB(str(path))
    db.jobs.register(DEVICE)
    db.close()
    first = tune(model, x, fleet_db=str(path), devices="all")
    assert first.tuned == () and first.queued.added + len(first.unservable) == len(first.problems) == 6
    assert first.queued.devices == (f"#1 {DEVICE.name} ({DEVICE.arch})",)
    second = tune(model, x, fleet_db=str(path), devices="1")
    assert second.queued.added == 0 and second.queued.present == first.queued.added
    assert "jobs added" in second.summary()
    with pytest.raises(KernelFactoryError, match="no device #5"):
        tune(model, x, fleet_db=str(path), devices="5")


def test_queuing_for_the_local_gpu_without_one_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KFACTORY_BACKEND", "cuda")
    model = nn.Sequential(GroupNorm(2, 4))
    with pytest.raises(KernelFactoryError, match="needs a GPU on this machine"):
        tune(model, torch.randn(1, 4, 5, requires_grad=True), fleet_db=str(tmp_path / "f.sqlite"))


def test_under_autocast_the_problems_carry_the_step_s_dtype():
    model = small_model()
    patch(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        problems = step_problems(model, torch.randn(2, 8, 11, 11))
    convs = [p for p in problems if isinstance(p, ConvProblem)]
    assert convs and {p.dtype for p in convs} == {DType.BF16}


def test_a_step_on_the_meta_device_plans_what_the_gpu_would_meet():
    """No GPU, no weights, no arithmetic: the fake implementations record, and CUDA autocast's casts are
    planned (convolutions in its dtype, GroupNorm in fp32)."""
    from factory.torch.modules import planned_autocast

    cpu = small_model()
    patch(cpu)
    x = torch.randn(2, 8, 11, 11)
    with torch.device("meta"):
        meta = small_model()
    patch(meta)
    assert step_problems(meta, x.to("meta")) == step_problems(cpu, x)
    with planned_autocast(torch.bfloat16):
        planned = step_problems(meta, x.to("meta"))
    assert {p.dtype for p in planned if isinstance(p, ConvProblem)} == {DType.BF16}
    assert [p.dtype for p in planned if isinstance(p, GroupNormProblem)] == [DType.FP32]
    assert len(planned) == 6


@pytest.mark.filterwarnings("ignore:FakeGPU cannot be rebuilt")
def test_prepare_compiles_what_the_step_will_run_before_the_step_does(monkeypatch, tmp_path):
    from factory.torch import prepare
    from factory.torch import ops as kf_ops

    isolate(monkeypatch, tmp_path)
    kf_ops.clear_kernel_choices()
    model = nn.Sequential(GroupNorm(3, 6))
    x = torch.randn(2, 6, 5, 7)
    (problem,) = step_problems(model, x)
    gpu = FakeGPU(problem)
    db = TuningDB(str(tmp_path / "p.sqlite"))
    ready = prepare(model, x, backend=gpu, db=db, workers=1, progress=False)
    expected = api.untuned_choice(problem, db, gpu).instance.name
    assert ready.kernels == ((problem.key, expected),) and ready.compiled == 1 and ready.fallbacks == ()
    assert kf_ops._choices[problem].instance.name == expected  # the op's first call finds it chosen and loaded
    assert prepare(model, x, backend=gpu, db=db, workers=1, progress=False).compiled == 0  # cached now
    assert "1 problems ready (0 kernels compiled now)" in prepare(model, x, backend=gpu, db=db, progress=False).summary()
    kf_ops.clear_kernel_choices()


def test_prepare_serves_pytorch_where_it_times_faster_and_races_nothing_off_cuda(monkeypatch):
    """The race's decision (factory.torch.versus): the slower of ours and PyTorch's op is not used; a
    problem PyTorch runs already (a reason) is not raced."""
    import collections
    import contextlib
    import types

    from factory.torch import tuning
    from factory.torch.ops import PyTorchChosen
    from factory.torch.versus import Race

    Problem = collections.namedtuple("Problem", "key")
    medians = {"ours-faster": (5.0, 9.0), "pytorch-faster": (9.0, 5.0)}
    raced: list[str] = []

    def fake_race(problem, kernel, timer, device):
        raced.append(problem.key)
        return Race(problem.key, kernel.instance.name, *medians[problem.key])

    monkeypatch.setattr(tuning, "race", fake_race)
    monkeypatch.setattr(tuning, "race_timer", lambda device: object())
    monkeypatch.setattr(tuning.torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(tuning.torch.cuda, "empty_cache", lambda: None)
    kernel = types.SimpleNamespace(instance=types.SimpleNamespace(name="inst"))
    chosen = {Problem("ours-faster"): kernel, Problem("pytorch-faster"): kernel, Problem("no-kernel"): "no kernel: why"}
    assert tuning._race_pytorch(dict(chosen), torch.device("cpu"), progress=False) == ()
    races = tuning._race_pytorch(chosen, torch.device("cuda"), progress=False)
    assert sorted(raced) == ["ours-faster", "pytorch-faster"] and len(races) == 2
    assert chosen[Problem("ours-faster")] is kernel and chosen[Problem("no-kernel")] == "no kernel: why"
    lost = chosen[Problem("pytorch-faster")]
    assert isinstance(lost, PyTorchChosen) and "PyTorch's kernel is faster on this GPU (5.0 µs vs 9.0 µs" in lost.reason
    summary = tuning.Prepared((("ours-faster", "inst"),), (("pytorch-faster", lost.reason),), 0, races).summary()
    assert "1 run PyTorch's kernels (1 of them timed faster than ours here)" in summary
