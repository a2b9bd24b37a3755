"""factory.torch.tune(model, example_inputs): tune every problem a model's training step meets.

One forward and backward pass over the example inputs records the problems our ops describe (the
model is left as found: no gradients accumulated, buffers such as BatchNorm's running statistics
restored). Each distinct problem is then tuned on this GPU into the tuning DB, with a progress bar;
or, given a fleet DB, queued there as jobs for `kfactory worker`s. Only modules that run our ops
(factory.torch's modules, or a model after `patch`) meet problems. Run it under the autocast of
the training step (`with torch.autocast("cuda", torch.bfloat16): tune(...)`) so the problems
carry the dtypes the step will.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import Tensor

from ..api import Budget, tune_problem
from ..backends import Backend, BackendError
from ..problem import KernelFactoryError, UnsupportedProblem
from ..progress_bars import progress_bar, tune_hooks
from ..tuner import TuneSettings, keep_measuring_worker
from .ops import PyTorchChosen, clear_kernel_choices, recording
from .versus import Race, race, race_timer


@dataclass(frozen=True)
class TunedProblem:
    key: str
    winner: str | None  # the instance that won; None when no candidate verified
    median_us: float | None
    measured: int  # candidates measured by this tune
    reused: int  # candidates whose earlier measurement on this device counted


@dataclass(frozen=True)
class QueuedJobs:
    """What queuing a model's problems in a fleet DB added, per device."""

    db: str
    added: int
    present: int  # already queued (by this model or anything else)
    devices: tuple[str, ...]


@dataclass(frozen=True)
class ModelTuneReport:
    problems: tuple[str, ...]  # the distinct problems the step met, first met first
    tuned: tuple[TunedProblem, ...] = ()  # tuned on this GPU (empty when queued)
    queued: QueuedJobs | None = None
    unservable: tuple[tuple[str, str], ...] = ()  # (problem, why): no instance computes it

    def summary(self) -> str:
        if not self.problems:
            return ("the step met no problem of ours: only factory.torch's modules run our ops "
                    "(patch(model) swaps them in)")
        head = f"{len(self.problems)} problems met"
        left_out = f"; {len(self.unservable)} left out (no instance computes them)" if self.unservable else ""
        if self.queued is not None:
            q = self.queued
            return (f"{head}: {q.added} jobs added to {q.db} for {', '.join(q.devices)}, {q.present} already "
                    f"queued{left_out}; run them: kfactory worker --db URL --gpus all")
        won = sum(t.winner is not None for t in self.tuned)
        return f"{head}: {len(self.tuned)} tuned, {won} with a verified winner{left_out}"


def _tensors(value: Any) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _sum_of_outputs(output: Any) -> Tensor:
    """The loss a step without a loss function backpropagates: every floating output, summed."""
    parts = [t.float().sum() for t in _tensors(output) if t.is_floating_point() and t.requires_grad]
    if not parts:
        raise KernelFactoryError("the model's output has no floating-point tensor that needs a gradient; "
                                 "pass loss_fn= to say what the step backpropagates")
    return torch.stack(parts).sum()


@contextlib.contextmanager
def _buffers_restored(model: torch.nn.Module) -> Iterator[None]:
    saved = {name: b.detach().clone() for name, b in model.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                if name in saved:
                    buffer.copy_(saved[name])


def step_problems(model: torch.nn.Module, example_inputs: Any,
                  loss_fn: Callable[[Any], Tensor] | None = None) -> list[Any]:
    """The distinct problems one forward and backward pass of `model` on `example_inputs` meets,
    first met first (PyTorch's kernels compute the pass). `loss_fn(output)` makes the loss;
    without it, the sum of the outputs."""
    inputs = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    with _buffers_restored(model), recording() as seen:
        loss = (loss_fn or _sum_of_outputs)(model(*inputs))
        wrt = [p for p in model.parameters() if p.requires_grad]
        wrt += [t for t in _tensors(inputs) if t.requires_grad]
        if wrt and loss.requires_grad:
            torch.autograd.grad(loss, wrt, allow_unused=True)  # not .backward(): no .grad accumulates
    return list(seen)


@dataclass(frozen=True)
class Prepared:
    """What prepare() readied: per problem, the instance its calls will run, or why PyTorch's runs it."""

    kernels: tuple[tuple[str, str], ...]  # (problem, instance)
    fallbacks: tuple[tuple[str, str], ...]  # (problem, why)
    compiled: int  # binaries compiled now (the rest were in the compile cache)
    races: tuple[Race, ...] = ()  # ours vs PyTorch's per problem (versus_pytorch); the losers of ours are fallbacks

    def summary(self) -> str:
        faster = sum(r.pytorch_wins for r in self.races)
        return (f"{len(self.kernels)} problems ready ({self.compiled} kernels compiled now)"
                + (f"; {len(self.fallbacks)} run PyTorch's kernels" if self.fallbacks else "")
                + (f" ({faster} of them timed faster than ours here)" if faster else ""))


def prepare(
    model: torch.nn.Module,
    example_inputs: Any,
    *,
    loss_fn: Callable[[Any], Tensor] | None = None,
    backend: Backend | None = None,
    db: Any = None,
    workers: int | None = None,
    versus_pytorch: bool = True,
    progress: bool = True,
) -> Prepared:
    """Ready the kernels a training step will run before the first step does: record the step's
    problems, compile the kernel each would be served (select mode AUTO) in parallel processes, and
    load them. Without it the first step compiles them one after another, in-process, mid-step; after
    it, that step (or a CUDA-graph capture's warm-up) only launches.

    `versus_pytorch` (on a CUDA device): each served kernel is then timed against PyTorch's own op on
    the same problem (factory.torch.versus), and where PyTorch's is faster its kernel runs the problem
    instead, with no fallback note: patching never makes a layer slower than it was."""
    from ..api import default_db, kernel_for, untuned_choice
    from ..backends import get_backend
    from ..compile_cache import CompileJob, compile_many
    from ..sources import source_of
    from .ops import remember_choices

    problems = step_problems(model, example_inputs, loss_fn)
    backend = backend or get_backend()
    db = db or default_db()
    arch = backend.device_info().arch
    chosen: dict[Any, Any] = {}  # problem -> Kernel, or why PyTorch's kernel runs it
    served: dict[Any, Any] = {}  # problem -> the instance select(mode=AUTO) serves
    for problem in problems:
        try:
            served[problem] = untuned_choice(problem, db, backend).instance
        except (KernelFactoryError, BackendError) as exc:
            chosen[problem] = f"{problem.key}: {exc}"
    jobs = {i.name: CompileJob(i.name, source_of(i).text, i.compile_arch(arch)) for i in served.values()}
    compiled = 0
    with progress_bar(disable=not progress) as bar:
        task = bar.add_task("compile  ", total=len(jobs))

        def done(outcome: Any) -> None:
            nonlocal compiled
            compiled += not outcome.cached
            bar.advance(task)

        compile_many(backend.kind, list(jobs.values()), workers, on_done=done)
    for problem, instance in served.items():  # each binary now comes from the compile cache
        try:
            chosen[problem] = kernel_for(instance, problem, backend)
        except (KernelFactoryError, BackendError) as exc:
            chosen[problem] = f"{problem.key}: {exc}"
    races = _race_pytorch(chosen, _device_of(example_inputs), progress) if versus_pytorch else ()
    remember_choices(chosen)
    kernels = tuple((p.key, k.instance.name) for p, k in chosen.items() if not isinstance(k, (str, PyTorchChosen)))
    fallbacks = tuple((p.key, k if isinstance(k, str) else k.reason) for p, k in chosen.items()
                      if isinstance(k, (str, PyTorchChosen)))
    return Prepared(kernels, fallbacks, compiled, races)


def _device_of(example_inputs: Any) -> torch.device | None:
    first = next(_tensors(example_inputs), None)
    return first.device if first is not None else None


def _race_pytorch(chosen: dict[Any, Any], device: torch.device | None, progress: bool) -> tuple[Race, ...]:
    """Race every chosen kernel against PyTorch's op (factory.torch.versus); PyTorch's winners replace ours
    in `chosen`. Nothing is raced off CUDA."""
    if device is None or device.type != "cuda":
        return ()
    contenders = [(p, k) for p, k in chosen.items() if not isinstance(k, (str, PyTorchChosen))]
    if not contenders:
        return ()
    races: list[Race] = []
    with torch.cuda.device(device), progress_bar(disable=not progress) as bar:
        task = bar.add_task("vs PyTorch", total=len(contenders))
        timer = race_timer(device)
        for problem, kernel in contenders:
            result = race(problem, kernel, timer, device)
            if result is not None:
                races.append(result)
                if result.pytorch_wins:
                    chosen[problem] = PyTorchChosen(result.reason())
            bar.advance(task)
        del timer
        torch.cuda.empty_cache()  # the race's inputs and flush buffer, back before the step allocates
    return tuple(races)


def tune(
    model: torch.nn.Module,
    example_inputs: Any,
    *,
    loss_fn: Callable[[Any], Tensor] | None = None,
    budget: int | Budget | None = None,
    settings: TuneSettings = TuneSettings(),
    db: Any = None,
    backend: Backend | None = None,
    fleet_db: str | None = None,
    devices: str = "local",
    max_attempts: int = 3,
    progress: bool = True,
) -> ModelTuneReport:
    """Tune every problem a training step of `model` meets (see the module's docstring).

    Here: each problem as `kfactory tune` would (`budget` candidates or seconds each, `db` or the
    default DB, `backend` or this machine's GPU); the kernels ops choose are forgotten afterwards,
    so the next step serves the new winners. With `fleet_db` (a DB URL or file): jobs queued there
    instead, for `devices` (`local`, `all` the DB knows, or ids like `1,3`), nothing tuned here.
    """
    problems = step_problems(model, example_inputs, loss_fn)
    keys = tuple(p.key for p in problems)
    if fleet_db is not None:
        queued, unservable = _enqueue(problems, fleet_db, devices, max_attempts)
        return ModelTuneReport(keys, queued=queued, unservable=unservable)
    tuned: list[TunedProblem] = []
    unservable: list[tuple[str, str]] = []
    with progress_bar(disable=not progress) as bar, keep_measuring_worker():  # one measuring process for all
        overall = bar.add_task("problems ", total=len(problems))
        for problem in problems:
            if progress:
                bar.console.print(f"tuning {problem.key}", markup=False, highlight=False, soft_wrap=True)
            before = set(bar.task_ids)
            try:
                outcome = tune_problem(problem, backend, db, settings, **tune_hooks(bar), budget=budget)
            except UnsupportedProblem as exc:
                unservable.append((problem.key, str(exc)))
            else:
                winner = outcome.winner
                tuned.append(TunedProblem(problem.key, winner.instance if winner else None,
                                          winner.median_us if winner else None, outcome.measured, outcome.reused))
            for task in set(bar.task_ids) - before:
                bar.remove_task(task)
            bar.advance(overall)
    clear_kernel_choices()
    return ModelTuneReport(keys, tuple(tuned), None, tuple(unservable))


def _enqueue(problems: Sequence[Any], url: str, devices: str,
             max_attempts: int) -> tuple[QueuedJobs, tuple[tuple[str, str], ...]]:
    from tuning_db import TuningDB
    from tuning_db.paths import as_db_url

    from ..fleet.gpus import gpu_source
    from ..fleet.problems import plan, target_devices

    local = None
    if devices.strip().lower() == "local":
        try:
            local = gpu_source().device()
        except BackendError as exc:
            raise KernelFactoryError(f"devices='local' needs a GPU on this machine ({exc}); queue for devices "
                                     "the workers registered with devices='all' or ids like '1,3'") from None
    db = TuningDB(as_db_url(url))
    try:
        added = present = 0
        names: list[str] = []
        unservable: list[tuple[str, str]] = []
        for device_id, device in target_devices(db, devices, local):
            jobs = plan(problems, device)
            report = db.jobs.enqueue(jobs.specs, max_attempts)
            added, present = added + report.added, present + report.present
            names.append(f"#{device_id} {device.name} ({device.arch})")
            unservable += [u for u in jobs.unservable if u not in unservable]
        return QueuedJobs(db.location, added, present, tuple(names)), tuple(unservable)
    finally:
        db.close()
