"""Run one item: our kernel and PyTorch's op on the same fresh random inputs; check, then time both.

The GPU specifics (device, timer, how our kernel is obtained, synchronisation) come in through an
Env, so the row logic is the same on a GPU and in the CPU tests.
"""

from __future__ import annotations

import dataclasses
import time

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from ..backends import BackendError
from ..ops import solver_for
from ..ops.base import Role, TensorSpec
from ..problem import KernelFactoryError, Scalar, UnsupportedProblem
from .check import agreement_floor, compare_outputs, matches_reference
from .model import BenchItem, Row, Status, Timing


class OurKernel(Protocol):
    """What the runner needs of factory.api.Kernel. A kernel served without tuning also has `served`
    (where it came from), which the row's note starts with."""

    name: str

    def run(self, stream: int | None = None, **tensors: Any) -> None: ...


@dataclass(frozen=True)
class Env:
    device: Any  # torch.device
    timer: Callable[[Callable[[], Any]], Timing]
    kernel_for: Callable[[Any], OurKernel]  # problem -> ready kernel (tuned first when untuned)
    synchronize: Callable[[], None]
    seed: int = 0


def bench_item(item: BenchItem, env: Env) -> Row:
    """The row of one item; every failure becomes a row with a status and a note, never an exception."""
    op, case = item.case.op, item.case
    base = dict(op=op, case=case.name, dtype=item.dtype, layout=item.layout)
    if item.problem is None:
        return Row(**base, status=Status.NOT_IMPLEMENTED, problem=case.spec())
    problem = item.problem
    solver = solver_for(op)
    min_bytes, macs = solver.traffic(problem)
    base |= dict(problem=problem.key, min_bytes=min_bytes, macs=macs)
    started = time.monotonic()
    try:
        kernel = env.kernel_for(problem)
    except KernelFactoryError as exc:
        return Row(**base, status=Status.NO_KERNEL, note=_one_line(exc), tune_s=time.monotonic() - started)
    except BackendError as exc:
        return Row(**base, status=Status.FAILED, note=f"GPU runtime: {_one_line(exc)}")
    base |= dict(instance=kernel.name, tune_s=time.monotonic() - started)
    try:
        row = _measure(item, env, solver, kernel, base)
    except (BackendError, KernelFactoryError, RuntimeError) as exc:
        row = Row(**base, status=Status.FAILED, note=_one_line(exc))
    served = getattr(kernel, "served", None)  # a kernel chosen without tuning says where it came from
    return dataclasses.replace(row, note="; ".join(n for n in (served, row.note) if n)) if served else row


def _measure(item: BenchItem, env: Env, solver: Any, kernel: OurKernel, base: dict[str, Any]) -> Row:
    problem = item.problem
    specs = list(solver.tensors(problem))
    tensors = make_tensors(specs, env.device, env.seed)
    inputs = {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT}

    def ours() -> None:
        kernel.run(**tensors)

    try:
        baseline = solver.torch_baseline(problem, inputs)
    except UnsupportedProblem as exc:
        timing = env.timer(ours)
        note = f"no PyTorch baseline: {_one_line(exc)}"
        return Row(**base, status=Status.NO_BASELINE, ours=timing, note="; ".join([note, *_exposed("ours", timing)]))
    if baseline is None:
        timing = env.timer(ours)
        note = "no PyTorch baseline (ours verified against the numpy reference when tuned)"
        return Row(**base, status=Status.NO_BASELINE, ours=timing, note="; ".join([note, *_exposed("ours", timing)]))

    poison(specs, tensors)
    ours()
    baseline.run()
    env.synchronize()
    agreement = compare_outputs(specs, {s.name: tensors[s.name] for s in specs}, baseline.outputs(),
                                agreement_floor(problem.dtype))
    notes = [n for n in (baseline.note,) if n]
    if not agreement.ok:
        verdict = matches_reference(solver, problem, specs, tensors)
        if not verdict.ok:
            theirs = env.timer(baseline.run)
            return Row(**base, status=Status.WRONG, torch=theirs, max_rel_err=agreement.max_rel_err,
                       tolerance=agreement.tolerance,
                       note="; ".join([f"wrong: {agreement.message}; against the float64 reference: {verdict.message}", *notes]))
        notes.insert(0, f"PyTorch differs ({agreement.message}); ours matches the float64 reference "
                        f"({verdict.worst_ratio:.2f}x of its tolerance)")
    theirs = env.timer(baseline.run)
    timing = env.timer(ours)
    notes += _exposed("ours", timing) + _exposed("PyTorch", theirs)
    return Row(**base, status=Status.OK, ours=timing, torch=theirs, max_rel_err=agreement.max_rel_err,
               tolerance=agreement.tolerance, note="; ".join(notes))


def _exposed(who: str, timing: Timing) -> list[str]:
    if not timing.launch_exposed:
        return []
    return [f"{who}: host enqueue {timing.host_us:.0f} µs outlasts the {timing.flush_us:.0f} µs flush; "
            "the time may include launch overhead"]


def torch_dtype(scalar: Scalar) -> Any:
    import torch

    return getattr(torch, scalar.numpy_name)  # float16, bfloat16, float32, int8, int32


def make_tensors(specs: Sequence[TensorSpec], device: Any, seed: int) -> dict[str, Any]:
    """Contiguous physical-layout tensors: inputs fresh random (floats in [-1, 1), never all zeros), outputs empty."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    result: dict[str, Any] = {}
    for spec in specs:
        dtype = torch_dtype(spec.scalar)
        if spec.role is not Role.INPUT:
            result[spec.name] = torch.empty(spec.shape, dtype=dtype, device=device)
        elif spec.scalar.is_float:
            uniform = torch.rand(spec.shape, generator=generator, device=device, dtype=torch.float32)
            result[spec.name] = (uniform * 2 - 1).to(dtype)
        else:
            bound = 4 if spec.scalar is Scalar.I8 else 1000
            result[spec.name] = torch.randint(-bound, bound + 1, spec.shape, generator=generator, device=device, dtype=dtype)
    return result


def poison(specs: Sequence[TensorSpec], tensors: Mapping[str, Any]) -> None:
    """Fill outputs with values no kernel computes (NaN, or an extreme integer), so unwritten elements show."""
    for spec in specs:
        if spec.role is Role.OUTPUT:
            tensors[spec.name].fill_(float("nan") if spec.scalar.is_float else -(2 ** (8 * spec.scalar.nbytes - 1)) + 1)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
