"""Upper bound of folding the split-K finish into the main launch: the served plan timed cold as is, without
its kf_finalize step, and without it but with a 64-byte memset first (a counter's reset)."""
import sys, statistics, dataclasses, torch
from factory.api import KERNELS, SelectMode, select
from factory.ops import solver_for
from factory.ops.base import Launch, LaunchPlan, Memset
from factory.ops.conv_bwd_weight.common import BwdWeightFamily
from factory.problem import DType, Layout, Op
T = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
orig = BwdWeightFamily.launch_plan
MODE = {"v": "full"}
def patched(self, params, problem, target):
    plan = orig(self, params, problem, target)
    if MODE["v"] == "full":
        return plan
    steps = [s for s in plan.steps if not (isinstance(s, Launch) and s.entry == "kf_finalize")]
    if MODE["v"] == "memset":
        steps.insert(0, Memset("workspace", 64))
    return LaunchPlan(tuple(steps), max(plan.workspace_bytes, 64))
BwdWeightFamily.launch_plan = patched
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
def cold(fn):
    for _ in range(5): fn()
    out = []
    for _ in range(40):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); out.append(a.elapsed_time(b) * 1000)
    return statistics.median(out)
solver = solver_for(Op("conv_bwd_weight"))
for line in sys.stdin:
    layout, dtype, spec = line.strip().split("|")
    problem = solver.parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
    ts = {s.name: torch.empty(s.shape, dtype=T[s.scalar.numpy_name], device="cuda").uniform_(-1, 1) for s in solver.tensors(problem)}
    res = {}
    name = None
    for mode in ("full", "nofinal", "memset", "full"):
        MODE["v"] = mode
        KERNELS.clear()
        k = select(problem, mode=SelectMode.AUTO)
        name = k.name
        res[mode] = cold(lambda: k.run(**ts))
    print(f"{layout} {dtype} {spec}\n  {name}\n  " + ", ".join(f"{m} {v:.1f} us" for m, v in res.items()), flush=True)
