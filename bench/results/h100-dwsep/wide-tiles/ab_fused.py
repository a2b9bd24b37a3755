"""Interleaved A/B of named fused instances and PyTorch's two calls, same rounds (6 rounds x 20 calls, L2
flushed, median of medians); each instance's output checked against PyTorch's (relative L2 norm error).
stdin: layout|dtype|spec|suffix,suffix (suffix after `_fused_`)."""
import statistics, sys, torch
from factory.api import SelectMode, select
from factory.ops import solver_for
from factory.problem import DType, Layout, Op
T = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
solver = solver_for(Op("dwsep_conv_fwd"))
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
torch.backends.cudnn.benchmark = True
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
    specs = solver.tensors(problem)
    ts = {s.name: torch.empty(s.shape, dtype=T[s.scalar.numpy_name], device="cuda").uniform_(-1, 1) for s in specs}
    inputs = {s.name: ts[s.name] for s in specs if s.role.value == "input"}
    base = solver.torch_baseline(problem, inputs)
    base.run(); torch.cuda.synchronize(); ref = base.outputs()["output"].float()
    prefix = f"dwsep_conv_fwd_{problem.ndim}d_{layout}_{dtype}_fused_"
    names = names.split(",")
    ks, errs, good = [], [], []
    for n in names:
        try:
            k = select(problem, mode=SelectMode.FORCE, instance=prefix + n)
        except Exception as e:
            print(f"  {n}: refused: {e}"); continue
        ts["output"].fill_(float("nan")); k.run(**ts); torch.cuda.synchronize()
        errs.append(((ts["output"].float() - ref).norm() / ref.norm()).item()); ks.append(k); good.append(n)
    runs = [lambda k=k: k.run(**ts) for k in ks] + [base.run]
    labels = good + ["pytorch"]
    for run in runs:
        for _ in range(5): run()
    rounds = {i: [] for i in range(len(runs))}
    for r in range(6):
        for i in (range(len(runs)) if r % 2 == 0 else reversed(range(len(runs)))):
            rounds[i].append(timed(runs[i]))
    med = [statistics.median(rounds[i]) for i in range(len(runs))]
    print(f"{layout} {dtype} {spec}: pytorch {med[-1]:.2f} us", flush=True)
    for n, m, e in sorted(zip(labels, med, errs + [0.0]), key=lambda x: x[1]):
        print(f"  {m:8.2f} us  {med[-1] / m:5.2f}x PyTorch  err {e:.1e}  {n}", flush=True)
