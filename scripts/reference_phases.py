"""Where a host-computed reference of a large tune goes, part by part, on this machine's GPU: imports,
PyTorch's import and CUDA start, the input draw, the float64 copies, the reference and its error scale
(each computed as such a tune computes them, on the GPU where factory.reference_device sends them).
Tunes compute the reference on the device now (OpModule.device_reference, bench/NOTES.md 46); the host
path this measures is `tune --host-verify`'s, and any problem whose op has no device reference.

    python3 scripts/reference_phases.py [PROBLEM_KEY]

The default problem is the 257-candidate depthwise backward-weight case of scripts/tune_timings.py.
Needs PyTorch with CUDA; bench/results/h100-tune-timings/device_log.txt holds an H100 run.
"""

from __future__ import annotations

import sys
import time

DEFAULT = "conv_bwd_weight:nhwgc:fp16:2d:N=64,G=512,C=1,K=1,input=56x56,filter=3x3,stride=1x1,pad=1x1,dilation=1x1"


def main() -> int:
    started = time.perf_counter()
    import numpy as np

    from factory import numerics
    from factory.ops import solver_for
    from factory.problem import KernelFactoryError
    from factory.reference_device import device_references
    from factory.selector import problem_from_key
    from factory.tuner import problem_inputs

    def lap(label: str, since: float) -> float:
        now = time.perf_counter()
        print(f"{label} {now - since:.2f}", flush=True)
        return now

    t = lap("imports", started)
    try:
        problem = problem_from_key(sys.argv[1] if len(sys.argv) > 1 else DEFAULT)
    except KernelFactoryError as exc:
        print(f"reference_phases.py: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("reference_phases.py: needs PyTorch with a CUDA GPU", file=sys.stderr)
        return 2
    torch.cuda.init()
    t = lap("torch import+init", t)
    solver = solver_for(problem.op)
    specs = solver.tensors(problem)
    host = problem_inputs(solver, problem, specs, np.random.default_rng(1))
    t = lap("draw", t)
    values = {n: numerics.exact_values(a, next(s.scalar for s in specs if s.name == n)) for n, a in host.items()}
    t = lap("exact_values", t)
    with device_references(0):
        solver.reference(problem, values)
        torch.cuda.synchronize()
        t = lap("reference", t)
        solver.error_scale(problem, values)
        t = lap("error_scale", t)
        solver.reference(problem, values)
        lap("reference again", t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
