"""Run chosen instances on PyTorch tensors and compare them with PyTorch's own op, as `kfactory bench` does."""

from typing import Any, Callable, Sequence

import pytest

from factory.api import SelectMode, select
from factory.backends import BackendKind
from factory.compile_cache import CompileJob, compile_many
from factory.device import DeviceTarget, target_for
from factory.bench.check import agreement_floor, compare_outputs, matches_reference
from factory.bench.runner import make_tensors, poison
from factory.ops import solver_for
from factory.ops.base import Role
from factory.problem import UnsupportedProblem
from factory.sources import source_of


def cuda_target(backend: Any, cudnn_tf32: bool = True) -> DeviceTarget:
    """The GPU's device target; skips the test where PyTorch, the baseline it compares with, has no CUDA.
    cudnn_tf32=False: cuDNN's fp32 convolutions without TF32, for tests whose fp32 baseline must be exact."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    if not cudnn_tf32:
        torch.backends.cudnn.allow_tf32 = False
    return target_for(backend.device_info())


def assert_agree_with_pytorch(runs: Sequence[tuple[Any, Any]], backend: Any, seed: int, what: str) -> int:
    """run_against_pytorch, its count and failures printed (`N runs of <what> against PyTorch`); fails on any
    disagreement. Returns how many ran."""
    ran, failures = run_against_pytorch(runs, backend, seed)
    print(f"{ran} runs of {what} against PyTorch, {len(failures)} failed")
    assert not failures, "\n".join(failures)
    return ran


def run_against_pytorch(runs: Sequence[tuple[Any, Any]], backend: Any, seed: int) -> tuple[int, list[str]]:
    """Each (problem, instance) through Kernel.run on fresh random CUDA tensors (outputs poisoned first),
    then checked against the op's PyTorch baseline on the same inputs. Where the two disagree beyond the
    agreement bound, the float64 reference decides: ours must match it within the op's verification
    tolerance. Returns how many ran and one line per failure; a problem PyTorch cannot compute is left
    out."""
    import torch

    # Compile in worker processes first (the compile cache then serves select()).
    arch = backend.device_info().arch
    chosen = {inst.name: inst for _, inst in runs}
    compile_many(BackendKind.CUDA, [CompileJob(n, source_of(c).text, c.compile_arch(arch)) for n, c in chosen.items()])
    ran, failures = 0, []
    for i, (problem, inst) in enumerate(runs):
        solver = solver_for(problem.op)
        kernel = select(problem, mode=SelectMode.FORCE, instance=inst.name, backend=backend)
        specs = list(solver.tensors(problem))
        tensors = make_tensors(specs, torch.device("cuda"), seed + i)
        try:
            baseline = solver.torch_baseline(problem, {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT})
        except UnsupportedProblem:
            continue
        poison(specs, tensors)
        kernel.run(**tensors)
        baseline.run()
        torch.cuda.synchronize()
        agreement = compare_outputs(specs, tensors, baseline.outputs(), agreement_floor(problem.dtype))
        ran += 1
        if agreement.ok:
            continue
        verdict = matches_reference(solver, problem, specs, tensors)
        if verdict.ok:
            print(f"{inst.name} on {problem.key}: PyTorch differs ({agreement.message}); ours matches "
                  f"the float64 reference ({verdict.worst_ratio:.2f}x of the tolerance)")
        else:
            failures.append(f"{inst.name} on {problem.key}: {agreement.message}; against the reference: {verdict.message}")
    return ran, failures


def check_every_instance(family: str, problem: Any, backend: Any, keep: Callable[[Any], bool] = lambda i: True) -> None:
    """Every applicable instance of `family` on `problem` (those `keep` takes) through the tuner (outputs
    poisoned, every element checked against the numpy reference); skips when the family has none for it."""
    import pytest

    from factory.device import target_for
    from factory.selector import lookup
    from factory.tuner import TuneSettings, tune

    everything = lookup(problem, target=target_for(backend.device_info()))
    assert everything, "no instance applies"
    candidates = [i for i in everything if i.family == family and keep(i)]
    if not candidates:
        pytest.skip(f"no {family} instance applies")
    measurements = tune(problem, candidates, backend, TuneSettings(reps=3, warmup=1))
    failed = [f"{m.instance}: {m.error}" for m in measurements if not m.verified]
    print(f"{family} {problem.key}: {len(measurements) - len(failed)}/{len(measurements)} verified")
    assert not failed, "\n".join(failed)


def heuristic_picks(family: str, problems: Sequence[Any], target: Any) -> tuple[list[tuple[Any, Any]], list[str]]:
    """(problem, the family's instance the heuristic ranks first) for each problem, and one line per
    problem the family has no instance for."""
    from factory.selector import lookup

    picks, missing = [], []
    for problem in problems:
        solver = solver_for(problem.op)
        mine = [c for c in lookup(problem, target=target) if c.family == family]
        if not mine:
            missing.append(f"{problem.key}: no {family} instance applies")
            continue
        picks.append((problem, max(mine, key=lambda c: solver.heuristic_score(c.family, c.params, problem, target))))
    return picks, missing


def stage_picks_on_random_shapes(family: str, draw: Callable[[Any], Any], count: int, seed: int, target: Any,
                                 fewest: Callable[[Any], int] = lambda params: params.split_k,
                                 kind: Callable[[Any], Any] = lambda params: params.stages,
                                 only: Callable[[Any], bool] = lambda params: True,
                                 ) -> tuple[list[tuple[Any, Any]], int]:
    """(problem, instance) runs for `count` problems `draw(rng)` makes (numpy Generator seeded with `seed`)
    that `family`'s points with `only(params)` serve: per problem the instance the heuristic ranks first, the
    one with the fewest blocks along the reduction (`fewest` of its params: splits by default), and the
    best-ranked of each `kind` of point (its stage count by default). Returns the runs and the shapes."""
    import numpy as np

    from factory.catalog import specialized_instances

    rng = np.random.default_rng(seed)
    runs: list[tuple[Any, Any]] = []
    shapes = 0
    while shapes < count:
        problem = draw(rng)
        own = [c for c in specialized_instances(problem)
               if c.family == family and only(c.params) and c.why_not(problem, target) is None]
        if not own:
            continue
        shapes += 1
        solver = solver_for(problem.op)
        score = lambda c: solver.heuristic_score(c.family, c.params, problem, target)  # noqa: E731
        picks = [max(own, key=score), min(own, key=lambda c: (fewest(c.params), c.name))]
        picks += [max((c for c in own if kind(c.params) == k), key=score)
                  for k in sorted({kind(c.params) for c in own})]
        runs += [(problem, c) for c in dict.fromkeys(picks)]
    return runs, shapes
