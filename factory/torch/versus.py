"""Ours or PyTorch's, per problem, on this GPU: a drop-in must not make a layer slower than the library it
replaces. When a model is prepared (factory.torch.prepare), each problem's served kernel and PyTorch's own
op are timed on the same random inputs, as `kfactory bench` times a row (L2 flushed, median), and the
slower one is not used. It is timed once per process, not stored: PyTorch's speed depends on its build,
cuDNN and flags, which the tuning DB does not describe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ops import solver_for
from ..ops.base import Role
from ..problem import UnsupportedProblem

RACE_REPS = 10
RACE_WARMUP = 3


@dataclass(frozen=True)
class Race:
    """One problem's two medians, in microseconds of GPU time."""

    problem: str
    instance: str
    ours_us: float
    pytorch_us: float

    @property
    def pytorch_wins(self) -> bool:
        return self.pytorch_us < self.ours_us

    def reason(self) -> str:
        return (f"{self.problem}: PyTorch's kernel is faster on this GPU ({self.pytorch_us:.1f} µs vs "
                f"{self.ours_us:.1f} µs for {self.instance})")


def race_timer(device: Any) -> Any:
    """The timer every race of one prepare() shares (it holds the L2-flush buffer)."""
    from ..bench.timing import CudaTimer, TimingSettings

    return CudaTimer(TimingSettings(reps=RACE_REPS, warmup=RACE_WARMUP), device)


def race(problem: Any, kernel: Any, timer: Any, device: Any) -> Race | None:
    """Time `kernel` and PyTorch's op on `problem`; None when PyTorch has no such op to compare with."""
    from ..bench.runner import make_tensors

    solver = solver_for(problem.op)
    specs = list(solver.tensors(problem))
    tensors = make_tensors(specs, device, seed=0)
    inputs = {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT}
    try:
        baseline = solver.torch_baseline(problem, inputs)
    except UnsupportedProblem:
        return None
    if baseline is None:
        return None
    ours = timer(lambda: kernel.run(**tensors)).median_us
    theirs = timer(baseline.run).median_us
    return Race(problem.key, kernel.instance.name, ours, theirs)
