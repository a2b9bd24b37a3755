"""Run one named instance on one problem a few times (for profilers): python scripts/profile_one.py LAYOUT DTYPE SPEC NAME."""

import sys

import torch

from factory.api import select
from factory.problem import DType, Layout, parse_conv_problem
from factory.numerics import STORAGE

layout, dtype, spec, name = sys.argv[1:5]
problem = parse_conv_problem(spec, Layout.parse(layout), DType.parse(dtype))
kernel = select(problem, mode="force", instance=name)
torch_dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "int8": torch.int8, "int32": torch.int32}
tensors = {}
for s in kernel.specs.values():
    t = torch.empty(s.shape, dtype=torch_dtype[s.scalar.numpy_name], device="cuda")
    if t.is_floating_point():
        t.uniform_(-1, 1)
    tensors[s.name] = t
for _ in range(3):
    kernel.run(**tensors)
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(20):
    kernel.run(**tensors)
end.record()
torch.cuda.synchronize()
print(f"{name}: {start.elapsed_time(end) / 20 * 1000:.1f} us per run (back to back, L2 warm)")
import time

torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(200):
    kernel.run(**tensors)
t1 = time.perf_counter()
torch.cuda.synchronize()
print(f"host time per run() call: {(t1 - t0) / 200 * 1e6:.1f} us")
import cProfile, pstats
prof = cProfile.Profile()
prof.enable()
for _ in range(50):
    kernel.run(**tensors)
prof.disable()
pstats.Stats(prof).sort_stats("cumulative").print_stats(12)
