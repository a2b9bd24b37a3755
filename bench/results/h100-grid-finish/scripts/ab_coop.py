"""Suite rows: every coop point of the served winner's family timed once (20 calls, L2 flushed, median), then
the fastest coop point, the served two-stage winner and PyTorch in 6 interleaved rounds (median of medians);
each output checked against PyTorch's (relative L2 error). stdin: layout|dtype|spec|winner-instance."""
import statistics, sys, torch
from factory.api import SelectMode, select
from factory.backends import BackendKind
from factory.compile_cache import CompileJob, compile_many
from factory.ops import solver_for
from factory.ops.conv_bwd_weight.common import Reduction
from factory.problem import DType, Layout, Op
from factory.selector import instance_by_name, lookup
from factory.sources import source_of
T = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
solver = solver_for(Op("conv_bwd_weight"))
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
torch.backends.cudnn.benchmark = True
def timed(fn, reps=20):
    out = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); out.append(a.elapsed_time(b) * 1000)
    return statistics.median(out)
def main():
    for line in sys.stdin:
        if not line.strip(): continue
        layout, dtype, spec, winner = line.strip().split("|")
        problem = solver.parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
        specs = solver.tensors(problem)
        ts = {s.name: torch.empty(s.shape, dtype=T[s.scalar.numpy_name], device="cuda").uniform_(-1, 1) for s in specs}
        base = solver.torch_baseline(problem, {s.name: ts[s.name] for s in specs if s.role.value == "input"})
        base.run(); torch.cuda.synchronize(); ref = base.outputs()["grad_weight"].float()
        family = instance_by_name(winner).family
        coop = [c for c in lookup(problem) if c.family == family and c.params.reduction is Reduction.COOP]
        compile_many(BackendKind.CUDA, [CompileJob(c.name, source_of(c).text, c.compile_arch("sm_90a")) for c in coop])
        def err(k):
            ts["grad_weight"].fill_(float("nan")); k.run(**ts); torch.cuda.synchronize()
            return ((ts["grad_weight"].float() - ref).norm() / ref.norm()).item()
        once = []
        for c in coop:
            k = select(problem, mode=SelectMode.FORCE, instance=c.name)
            for _ in range(3): k.run(**ts)
            once.append((timed(lambda: k.run(**ts)), c.name))
        once.sort()
        print(f"{layout} {dtype} {spec}: {len(coop)} coop points of {family}; fastest once {once[0][0]:.2f} us "
              f"{once[0][1]}, slowest {once[-1][0]:.2f}", flush=True)
        names = [winner, once[0][1]]
        ks = [select(problem, mode=SelectMode.FORCE, instance=n) for n in names]
        errs = [err(k) for k in ks]
        runs = [lambda k=k: k.run(**ts) for k in ks] + [base.run]
        for run in runs:
            for _ in range(5): run()
        rounds = {i: [] for i in range(len(runs))}
        for r in range(6):
            for i in (range(len(runs)) if r % 2 == 0 else reversed(range(len(runs)))):
                rounds[i].append(timed(runs[i]))
        med = [statistics.median(rounds[i]) for i in range(len(runs))]
        print(f"  two-stage {med[0]:.2f} us (err {errs[0]:.1e}), coop {med[1]:.2f} us (err {errs[1]:.1e}) = "
              f"{med[1] / med[0]:.3f}x; PyTorch {med[2]:.2f} us: {med[2] / med[0]:.2f}x -> {med[2] / med[1]:.2f}x", flush=True)
if __name__ == "__main__":
    main()
