"""Where one Kernel.run call spends its time, host and GPU, on a GPU machine.

    python scripts/profile_one.py OP LAYOUT DTYPE SPEC [INSTANCE]

Without INSTANCE the heuristic's pick runs. Prints the GPU time of one call with the host's enqueue
hidden behind a long sleep kernel (L2 flushed first), the host time of one run() call split into its
tensor checks and its enqueue, and a cProfile of run().
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import time

import torch

from factory.api import SelectMode, select
from factory.ops import solver_for
from factory.problem import DType, Layout, Op

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "int8": torch.int8, "int32": torch.int32}


def main(op: str, layout: str, dtype: str, spec: str, instance: str | None = None) -> None:
    problem = solver_for(Op(op)).parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
    kernel = (select(problem, mode=SelectMode.FORCE, instance=instance) if instance
              else select(problem, mode=SelectMode.HEURISTIC))
    tensors = {}
    for s in kernel.specs.values():
        t = torch.empty(s.shape, dtype=TORCH_DTYPES[s.scalar.numpy_name], device="cuda")
        if t.is_floating_point():
            t.uniform_(0.5, 1.5) if s.name == "rstd" else t.uniform_(-1, 1)
        tensors[s.name] = t
    for _ in range(5):
        kernel.run(**tensors)
    torch.cuda.synchronize()

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    gpu = []
    for _ in range(30):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_()
        torch.cuda._sleep(2_000_000)  # ~1 ms of GPU time: the host's enqueue stays out of the events
        start.record()
        kernel.run(**tensors)
        end.record()
        torch.cuda.synchronize()
        gpu.append(start.elapsed_time(end) * 1000.0)
    print(f"{kernel.name}: GPU time {statistics.median(gpu):.1f} us per call (L2 flushed, host hidden)")

    def host_us(fn, n: int = 300) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return (t1 - t0) / n * 1e6

    pointers = {name: t.data_ptr() for name, t in tensors.items()}
    stream = torch.cuda.current_stream().cuda_stream
    print(f"host: run() {host_us(lambda: kernel.run(**tensors)):.1f} us, "
          f"run_pointers() {host_us(lambda: kernel.run_pointers(pointers, stream)):.1f} us, "
          f"current_stream {host_us(lambda: torch.cuda.current_stream(t.device).cuda_stream):.1f} us")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        kernel.run(**tensors)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    main(*sys.argv[1:])
