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
    ("NGCHW", "fp16", "N=4,C=563,K=563,input=14x10,filter=7x7,pad=3"),
    ("NGCHW", "fp16", "N=16,C=283,K=147,input=18x17,filter=3x3,pad=1"),
    ("NGCHW", "bf16", "N=32,C=29,K=21,input=13x31,filter=3x3,pad=1"),
    ("NHWGC", "fp16", "N=32,C=27,K=37,input=9x9,filter=3x3,pad=1,act_dw=relu6"),
    ("NHWGC", "bf16", "N=16,C=300,K=300,input=28x28,filter=7x7,pad=3"),
    ("NHWGC", "fp16", "N=32,C=500,K=500,input=14x14,filter=3x3,pad=1"),
    ("NGCHW", "bf16", "N=8,C=405,K=240,input=30x30,filter=5x5,pad=2"),
]

def main():
    print("factory from", factory.__file__)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    torch.backends.cudnn.benchmark = True
    for layout, dtype, spec in PROBLEMS:
        solver = solver_for(Op.DWSEP_CONV_FWD)
        problem = solver.parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
        target = target_for(select(problem, mode=SelectMode.HEURISTIC).backend.device_info())
        cands = [c for c in lookup(problem, target=target) if c.family in ("twopass", "fused")]
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
            if c.family not in best or us < best[c.family][0]:
                best[c.family] = (us, c.name)
        top = min(best.values())
        print(f"{problem.key}\n  torch {theirs:8.1f} us; best {top[0]:8.1f} us ({theirs / top[0]:.2f}x) {top[1]}")
        for family in sorted(best):
            print(f"    {family}: {best[family][0]:8.1f} us ({theirs / best[family][0]:.2f}x) {best[family][1]}")
        sys.stdout.flush()

if __name__ == "__main__":
    main()
