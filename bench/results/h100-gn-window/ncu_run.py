"""Run one instance once on random inputs after an L2 flush (for ncu)."""
import sys
import torch
from factory.api import SelectMode, select
from factory.ops import solver_for
from factory.problem import DType, Layout, Op

TD = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "int32": torch.int32}
layout, dtype, spec, inst = sys.argv[1:5]
problem = solver_for(Op("groupnorm_bwd")).parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
k = select(problem, mode=SelectMode.FORCE, instance=inst)
ts = {}
for s in k.specs.values():
    t = torch.empty(s.shape, dtype=TD[s.scalar.numpy_name], device="cuda")
    if t.is_floating_point():
        t.uniform_(0.5, 1.5) if s.name == "rstd" else t.uniform_(-1, 1)
    ts[s.name] = t
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
for _ in range(2):
    flush.zero_()
    k.run(**ts)
torch.cuda.synchronize()
