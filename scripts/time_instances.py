"""Time instances of one problem against PyTorch's own op, without verification (a quick look at speed).

    python scripts/time_instances.py OP LAYOUT DTYPE SPEC [--family F] [--top K [--also REGEX]] [--show N] [--per-family]

Every applicable instance (or the heuristic's first K of family F, and with --also every one whose name
REGEX finds, wherever the heuristic ranks it) is compiled in worker processes,
then each runs 5 warm-up calls and 20 timed ones (device events, L2 flushed before each, median),
beside PyTorch's baseline timed the same way. Correctness is the tuner's and the GPU tests' job.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys

import torch

from factory.api import SelectMode, select
from factory.backends import BackendKind
from factory.compile_cache import CompileJob, compile_many
from factory.device import target_for
from factory.ops import solver_for
from factory.ops.base import Role
from factory.problem import DType, KernelFactoryError, Layout, Op
from factory.selector import lookup
from factory.sources import source_of
from regret_common import pattern

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "int8": torch.int8, "int32": torch.int32}


def timed(fn, flush: torch.Tensor, reps: int = 20) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def first_and_also(candidates: list, score, top: int, also: "re.Pattern[str] | None") -> list:
    """The `top` best-scored candidates, best first, then every other whose name `also` finds, in score order."""
    ranked = sorted(candidates, key=lambda c: -score(c))
    return ranked[:top] + [c for c in ranked[top:] if also is not None and also.search(c.name)]


def fail(message: str) -> None:
    print(f"time_instances: {message}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("op", "layout", "dtype", "spec"):
        parser.add_argument(name)
    parser.add_argument("--family")
    parser.add_argument("--top", type=int, default=0)
    parser.add_argument("--also", type=pattern, help="with --top: also every candidate whose name this finds")
    parser.add_argument("--show", type=int, default=12, help="print the fastest SHOW (default 12)")
    parser.add_argument("--per-family", action="store_true", help="then the fastest of each family")
    args = parser.parse_args()
    if args.top < 0 or args.show < 1:
        fail(f"--top takes 0 (every candidate) or more, --show 1 or more; got --top {args.top}, --show {args.show}")
    if args.also and not args.top:
        fail("--also adds to the heuristic's first --top K; give --top")
    try:
        solver = solver_for(Op.parse(args.op))
        problem = solver.parse_problem(args.spec, Layout.parse(args.layout), DType.parse(args.dtype))
    except KernelFactoryError as exc:
        fail(str(exc))
    torch.backends.cudnn.benchmark = True
    target = target_for(select(problem, mode=SelectMode.HEURISTIC).backend.device_info())  # this GPU's
    candidates = [c for c in lookup(problem, target=target) if args.family in (None, c.family)]
    if args.top:
        candidates = first_and_also(candidates, lambda c: solver.heuristic_score(c.family, c.params, problem, target),
                                    args.top, args.also)
    if not candidates:
        fail(f"no {args.family or 'instance'} applies to {problem.key}")
    kernel0 = select(problem, mode=SelectMode.FORCE, instance=candidates[0].name)
    arch = kernel0.backend.device_info().arch
    compile_many(BackendKind.CUDA, [CompileJob(c.name, source_of(c).text, c.compile_arch(arch)) for c in candidates])
    specs = list(solver.tensors(problem))
    tensors = {}
    for s in specs:
        t = torch.empty(s.shape, dtype=TORCH_DTYPES[s.scalar.numpy_name], device="cuda")
        t.uniform_(-1, 1) if t.is_floating_point() else t.random_(-4, 5)
        tensors[s.name] = t
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    nbytes, macs = solver.traffic(problem)
    floor = max(nbytes / 3.0e6, 2 * macs / 790e6)  # µs at 3.0 TB/s and 790 TFLOP/s
    baseline = solver.torch_baseline(problem, {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT})
    theirs = timed(baseline.run, flush)
    print(f"{problem.key}\nfloor {floor:.1f} us; PyTorch {theirs:.1f} us ({100 * floor / theirs:.0f} % of floor)")
    rows = []
    for c in candidates:
        kernel = select(problem, mode=SelectMode.FORCE, instance=c.name)
        ours = timed(lambda: kernel.run(**tensors), flush)
        rows.append((ours, c.name))
    for ours, name in sorted(rows)[:args.show]:
        print(f"  {ours:9.1f} us  {theirs / ours:5.2f}x  {100 * floor / ours:4.0f} %  {name}")
    if args.per_family:
        family_of = {c.name: c.family for c in candidates}
        best: dict[str, tuple[float, str]] = {}
        for ours, name in sorted(rows):
            best.setdefault(family_of[name], (ours, name))
        print("best of each family:")
        for ours, name in sorted(best.values()):
            print(f"  {ours:9.1f} us  {theirs / ours:5.2f}x  {100 * floor / ours:4.0f} %  {name}")


if __name__ == "__main__":
    main()
