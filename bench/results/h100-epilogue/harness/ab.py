"""A/B timing of template variants (gemm_variants.patch) on (problem key, instance) pairs, against PyTorch."""
import sys, statistics
import torch
exec(open(__file__.replace("ab.py", "gemm_variants.py")).read().replace("\nmain()\n", "\n"))  # its patches and timing
from factory.selector import problem_from_key
pairs = [l.split() for l in open(sys.argv[1]) if l.strip()]
variants = sys.argv[2].split(",")
backend = get_backend()
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
for key, name in pairs:
    problem = problem_from_key(key)
    solver = solver_for(problem.op)
    specs = list(solver.tensors(problem))
    tensors = make_tensors(specs, torch.device("cuda"), 3)
    baseline = solver.torch_baseline(problem, {s.name: tensors[s.name] for s in specs if s.role is Role.INPUT})
    line = []
    for variant in variants:
        sources.render = lambda inst, v=variant: patch(stock_render(inst), v)
        sources.forget(); api.KERNELS.clear()
        try:
            k = api.kernel_for(instance_by_name(name), problem, backend)
            poison(specs, tensors); k.run(**tensors); baseline.run(); torch.cuda.synchronize()
            agree = compare_outputs(specs, tensors, baseline.outputs(), agreement_floor(problem.dtype))
            t = gpu_us(lambda: k.run(**tensors), flush, reps=20)
            line.append(f"{variant}={t:.1f}{'' if agree.ok else '(WRONG)'}")
        except Exception as e:
            line.append(f"{variant}=fail:{str(e)[:80]}")
    print(key.split(':')[1], key.split(':')[2], key.split(':')[4][:60], name.split('_', 5)[-1], " ".join(line), flush=True)
