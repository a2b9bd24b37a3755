"""Interleaved A/B (with --torch, PyTorch's op too, in the same rounds): each round times every named instance (20 calls, L2 flushed, median); rounds alternate the
order; prints each instance's median over rounds and the ratios to the first. stdin: layout|dtype|spec|inst,inst..."""
import sys, statistics, torch
from factory.api import SelectMode, select
from factory.ops import solver_for
from factory.problem import DType, Layout, Op
T = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
solver = solver_for(Op("conv_bwd_weight"))
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
def timed(fn, reps=20):
    out = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); out.append(a.elapsed_time(b) * 1000)
    return statistics.median(out)
for line in sys.stdin:
    if not line.strip(): continue
    layout, dtype, spec, names = line.strip().split("|")
    problem = solver.parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
    ts = {s.name: torch.empty(s.shape, dtype=T[s.scalar.numpy_name], device="cuda").uniform_(-1, 1) for s in solver.tensors(problem)}
    prefix = f"conv_bwd_weight_{problem.ndim}d_{layout}_{dtype}_pw_"
    ks = [select(problem, mode=SelectMode.FORCE, instance=prefix + n) for n in names.split(",")]
    runs = [lambda k=k: k.run(**ts) for k in ks]
    if "--torch" in sys.argv:
        torch.backends.cudnn.benchmark = True
        baseline = solver.torch_baseline(problem, {s.name: ts[s.name] for s in solver.tensors(problem) if s.role.value == "input"})
        names += ",pytorch"
        runs.append(baseline.run)
    for run in runs:
        for _ in range(5): run()
    rounds = {i: [] for i in range(len(runs))}
    for r in range(6):
        order = list(range(len(runs))) if r % 2 == 0 else list(reversed(range(len(runs))))
        for i in order:
            rounds[i].append(timed(runs[i]))
    med = [statistics.median(rounds[i]) for i in range(len(runs))]
    print(f"{layout} {dtype} {spec}: " + ", ".join(f"{n} {m:.2f} us ({m / med[0]:.3f})" for n, m in zip(names.split(","), med)), flush=True)
