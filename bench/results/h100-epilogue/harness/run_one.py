"""Run one instance, optionally a patched variant, a few times: the process ncu_one.sh and ncu_time.sh profile."""
import dataclasses, sys
import torch
sys.argv += [] 
src = open(__file__.replace("run_one.py", "gemm_variants.py")).read().replace("\nmain()\n", "\n")
exec(src)
spec, name, variant = sys.argv[1], sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "stock")
kw = dict(x.split("=") for x in sys.argv[4:]) if len(sys.argv) > 4 else {}
backend = get_backend()
base = instance_by_name(name)
if kw:
    base = dataclasses.replace(base, params=dataclasses.replace(base.params, **{k: int(v) for k, v in kw.items()}))
problem = solver_for(Op.CONV_BWD_WEIGHT).parse_problem(spec, Layout.NHWGC, DType.FP16)
sources.render = lambda inst: patch(stock_render(inst), variant)
specs = list(solver_for(problem.op).tensors(problem))
tensors = make_tensors(specs, torch.device("cuda"), 7)
k = api.kernel_for(base, problem, backend)
for _ in range(4):
    k.run(**tensors)
torch.cuda.synchronize()
print("ran", base.name)
