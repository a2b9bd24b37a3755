"""A/B of the transposing pass: on NGCHW rows, the transposing candidates (heuristic's first TOP of each
family, no verification) timed end to end, PyTorch in the same run; then the best one's kernels timed
one by one with the torch profiler. Which tree runs is PYTHONPATH's business."""
import collections
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import factory
from factory.api import SelectMode, select
from factory.backends import BackendKind
from factory.compile_cache import CompileJob, compile_many
from factory.device import target_for
from factory.ops import solver_for
from factory.ops.base import Launch, Role
from factory.problem import DType, Layout, Op
from factory.selector import lookup
from factory.sources import source_of
from time_instances import TORCH_DTYPES

sys.path.insert(0, "bench/results/h200-shared-weights/scripts")  # run from build/s59: the same ab.py
from ab import timed  # noqa: E402  (flush, sleep kernel hiding the host's enqueue, median)

TOP = 8 if "--back" in sys.argv else 4 if "--s8" in sys.argv or "--all" in sys.argv else 12
PROBLEMS_BACK = [  # grad_input's 14x14 planes copied back (channels in 8-byte runs)
    ("conv_bwd_data", "NGCHW", "bf16", "N=32,G=32,C=32,K=32,input=14x14,filter=3x3,pad=1"),  # resnext101_s3
    ("conv_bwd_data", "NGCHW", "bf16", "N=64,G=32,C=32,K=32,input=14x14,filter=3x3,stride=2,pad=1"),
    ("conv_bwd_data", "NGCHW", "bf16", "N=64,G=1,C=1024,K=2048,input=14x14,filter=1x1,stride=2"),
]
PROBLEMS_S8 = [  # positions in 8-byte runs only
    ("conv_bwd_weight", "NGCHW_GKYXC", "bf16", "N=32,G=53,C=8,K=8,input=62x62,filter=3x3,pad=1"),
    ("conv_bwd_data", "NGCHW", "bf16", "N=32,G=32,C=32,K=32,input=14x14,filter=3x3,pad=1"),
    ("conv_bwd_weight", "NGCHW", "fp16", "N=16,G=1,C=128,K=128,input=30x30,filter=3x3,pad=1"),
    ("conv_bwd_weight", "NGCHW", "fp16", "N=8,G=1,C=64,K=64,input=110x110,filter=3x3,pad=1"),
]
PROBLEMS = [
    ("conv_bwd_weight", "NGCHW", "fp16", "N=32,G=32,C=16,K=16,input=28x28,filter=3x3,pad=1"),  # resnext101_s2
    ("conv_bwd_weight", "NGCHW", "fp16", "N=32,G=14,C=24,K=24,input=28x28,filter=3x3,pad=1"),  # regnety_gw24
    ("conv_bwd_weight", "NGCHW", "fp32", "N=32,G=14,C=24,K=24,input=28x28,filter=3x3,pad=1"),
    ("conv_bwd_weight", "NGCHW", "bf16", "N=32,G=1,C=512,K=128,input=28x28,filter=1x1"),  # resnet_1x1
    ("conv_bwd_data", "NGCHW", "fp16", "N=32,G=1,C=256,K=256,input=28x28,filter=3x3,stride=2,pad=1"),  # resnet_s3_s2
    ("conv_bwd_data", "NGCHW", "fp32", "N=32,G=1,C=256,K=256,input=28x28,filter=3x3,stride=2,pad=1"),
    ("conv_bwd_data", "NGCHW", "bf16", "N=32,G=32,C=32,K=32,input=14x14,filter=3x3,pad=1"),  # resnext101_s3
]


def transposes(solver, c, problem, target) -> bool:
    plan = solver.launch_plan(c.family, c.params, problem, target)
    return any(isinstance(s, Launch) and s.entry.startswith("kf_to_channels_last") for s in plan.steps)


def main() -> None:
    print("factory from", factory.__file__)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    torch.backends.cudnn.benchmark = True
    chosen = PROBLEMS + PROBLEMS_S8 + PROBLEMS_BACK[1:] if "--all" in sys.argv else (
        PROBLEMS_BACK if "--back" in sys.argv else PROBLEMS_S8 if "--s8" in sys.argv else PROBLEMS)
    for op, layout, dtype, spec in chosen:
        solver = solver_for(Op.parse(op))
        problem = solver.parse_problem(spec, Layout.parse(layout), DType.parse(dtype))
        target = target_for(select(problem, mode=SelectMode.HEURISTIC).backend.device_info())
        by_family = collections.defaultdict(list)
        for c in lookup(problem, target=target):
            if transposes(solver, c, problem, target):
                by_family[c.family].append(c)
        cands = []
        for fam, cs in by_family.items():
            cands += sorted(cs, key=lambda c: -solver.heuristic_score(c.family, c.params, problem, target))[:TOP]
        arch = select(problem, mode=SelectMode.FORCE, instance=cands[0].name).backend.device_info().arch
        compile_many(BackendKind.CUDA, [CompileJob(c.name, source_of(c).text, c.compile_arch(arch)) for c in cands])
        specs = list(solver.tensors(problem))
        tensors = {}
        for s in specs:
            t = torch.empty(s.shape, dtype=TORCH_DTYPES[s.scalar.numpy_name], device="cuda")
            t.uniform_(-1, 1) if t.is_floating_point() else t.random_(-4, 5)
            tensors[s.name] = t
        base = solver.torch_baseline(problem, {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT})
        theirs = timed(base.run, flush)
        rows = []
        for c in cands:
            k = select(problem, mode=SelectMode.FORCE, instance=c.name)
            rows.append((timed(lambda: k.run(**tensors), flush), c.name, k, c.family))
        rows.sort(key=lambda r: r[0])
        best = rows[0]
        print(f"{problem.key}\n  torch {theirs:8.1f} us; best {best[0]:8.1f} us ({theirs / best[0]:.2f}x) {best[1]}"
              f"  [{len(cands)} transposing candidates]")
        seen = set()
        for us, name, _, fam in rows:
            if fam not in seen:
                seen.add(fam)
                print(f"    best {fam}: {us:8.1f} us {name}")
        k = best[2]
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                flush.zero_()
                k.run(**tensors)
            torch.cuda.synchronize()
        launches = [st for st in k.plan.steps if isinstance(st, Launch)]
        ours = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "kf_" in e.name),
                      key=lambda e: e.time_range.start)
        for i, st in enumerate(launches):
            ts = sorted(e.device_time for e in ours[i::len(launches)])
            grid = "x".join(map(str, st.grid))
            print(f"    launch {i} {st.entry} grid {grid}: median {ts[len(ts) // 2]:8.1f} us over {len(ts)}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
