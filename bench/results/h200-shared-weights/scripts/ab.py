"""A/B of twopass's kf_depthwise: every twopass candidate of each problem timed (no verification), the best
per strip and overall, PyTorch's two calls in the same run. Which tree runs is PYTHONPATH's business."""
import sys, statistics, collections
import torch
import factory
from factory.api import SelectMode, select
from factory.compile_cache import CompileJob, compile_many
from factory.backends import BackendKind
from factory.device import target_for
from factory.ops import solver_for
from factory.ops.base import Role
from factory.problem import DType, Layout, Op
from factory.selector import lookup
from factory.sources import source_of
from time_instances import TORCH_DTYPES


def timed(fn, flush, reps=20):
    """Median of device-event times, L2 flushed and the host's enqueue hidden behind a sleep kernel."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_()
        torch.cuda._sleep(1_000_000)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)

PROBLEMS = [
    ("NHWGC", "fp16", "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1"),
    ("NHWGC", "bf16", "N=32,C=272,K=112,input=22x22,filter=7x7,pad=3"),
    ("NHWGC", "bf16", "N=16,C=352,K=352,input=22x41,filter=7x7,pad=3,bias_dw=1,bias_pw=1"),
    ("NHWGC", "fp16", "N=8,C=952,K=208,input=94x94,filter=3x3,stride=2,pad=1,act_dw=relu6,act_pw=relu6"),
    ("NHWGC", "fp16", "N=128,C=360,K=208,input=354,filter=7,pad=3,bias_dw=1,bias_pw=1,act_pw=relu"),
    ("NHWGC", "bf16", "N=64,C=160,K=384,input=156,filter=15,pad=7,bias_dw=1,act_pw=relu"),
    ("NHWGC", "fp16", "N=32,C=240,K=240,input=28x28,filter=5x5,pad=2"),
    ("NHWGC", "fp16", "N=64,C=64,K=128,input=112x112,filter=3x3,pad=1"),
    ("NHWGC", "bf16", "N=32,C=512,K=512,input=14x14,filter=7x7,pad=3"),
]

def main():
    print("factory from", factory.__file__)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    torch.backends.cudnn.benchmark = True
    for layout, dtype, spec in PROBLEMS:
        solver = solver_for(Op.DWSEP_CONV_FWD)
        problem = solver.parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
        target = target_for(select(problem, mode=SelectMode.HEURISTIC).backend.device_info())
        cands = [c for c in lookup(problem, target=target) if c.family == "twopass"]
        arch = select(problem, mode=SelectMode.FORCE, instance=cands[0].name).backend.device_info().arch
        compile_many(BackendKind.CUDA, [CompileJob(c.name, source_of(c).text, c.compile_arch(arch)) for c in cands])
        specs = list(solver.tensors(problem))
        tensors = {}
        for s in specs:
            t = torch.empty(s.shape, dtype=TORCH_DTYPES[s.scalar.numpy_name], device="cuda")
            t.uniform_(-1, 1)
            tensors[s.name] = t
        base = solver.torch_baseline(problem, {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT})
        theirs = timed(base.run, flush)
        best = {}
        for c in cands:
            k = select(problem, mode=SelectMode.FORCE, instance=c.name)
            us = timed(lambda: k.run(**tensors), flush)
            if c.params.strip not in best or us < best[c.params.strip][0]:
                best[c.params.strip] = (us, c.name)
        top = min(best.values())
        print(f"{problem.key}\n  torch {theirs:8.1f} us; best {top[0]:8.1f} us ({theirs / top[0]:.2f}x) {top[1]}")
        for strip in sorted(best):
            print(f"    strip {strip}: {best[strip][0]:8.1f} us")
        sys.stdout.flush()

if __name__ == "__main__":
    main()
