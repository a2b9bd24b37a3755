"""Is a cooperative launch itself slower? The served two-stage plan timed (interleaved rounds, L2 flushed, cold):
as is; without kf_finalize; without kf_finalize with the main kernel launched cooperatively (same kernel)."""
import sys, statistics, dataclasses, torch
from factory.api import KERNELS, SelectMode, select
from factory.ops import solver_for
from factory.ops.base import Launch, LaunchPlan
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
    if MODE["v"] == "nofinal_coop":
        steps = [dataclasses.replace(s, cooperative=True) if isinstance(s, Launch) and s.entry == "kf_main" else s for s in steps]
    return LaunchPlan(tuple(steps), plan.workspace_bytes)
BwdWeightFamily.launch_plan = patched
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
def timed(fn, reps=20):
    out = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); out.append(a.elapsed_time(b) * 1000)
    return statistics.median(out)
solver = solver_for(Op("conv_bwd_weight"))
for line in sys.stdin:
    layout, dtype, spec, inst = line.strip().split("|")
    problem = solver.parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
    ts = {s.name: torch.empty(s.shape, dtype=T[s.scalar.numpy_name], device="cuda").uniform_(-1, 1) for s in solver.tensors(problem)}
    ks = {}
    for mode in ("full", "nofinal", "nofinal_coop"):
        MODE["v"] = mode; KERNELS.clear()
        ks[mode] = select(problem, mode=SelectMode.FORCE, instance=inst)
        for _ in range(5): ks[mode].run(**ts)
    res = {m: [] for m in ks}
    for r in range(6):
        for m in (list(ks) if r % 2 == 0 else list(reversed(list(ks)))):
            res[m].append(timed(lambda: ks[m].run(**ts)))
    print(f"{layout} {dtype} {spec} {inst.split('_pw_')[-1]}: " + ", ".join(f"{m} {statistics.median(v):.2f} us" for m, v in res.items()), flush=True)
