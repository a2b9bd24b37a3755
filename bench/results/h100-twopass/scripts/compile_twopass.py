import sys, time
from factory.ops import solver_for
from factory.problem import Layout, DType, Op
from factory.selector import lookup
from factory.device import TARGETS
from factory.compile_cache import CompileJob, compile_many
from factory.backends import BackendKind
from factory.sources import source_of
if __name__ == "__main__":
    jobs = {}
    s = solver_for(Op.DWSEP_CONV_FWD)
    for lay, dt, spec in [(Layout.NHWGC, DType.FP16, "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1"),
                          (Layout.NGCHW, DType.BF16, "N=3,C=24,K=40,input=5x9x7,filter=3x3x3,stride=2,pad=1"),
                          (Layout.NHWGC, DType.BF16, "N=3,C=16,K=8,input=77,filter=5,pad=2"), (Layout.NGCHW, DType.FP16, "N=3,C=16,K=8,input=17x19,filter=7x7,pad=3")]:
        p = s.parse_problem(spec, lay, dt)
        for i in [i for i in lookup(p, target=TARGETS["sm_90a"]) if i.family == "twopass"]:
            jobs[i.name] = CompileJob(i.name, source_of(i).text, i.compile_arch("sm_90"))
    t = time.time()
    res = compile_many(BackendKind.CUDA, list(jobs.values()))
    print(len(jobs), "compiled in", time.time() - t)
    for k, v in res.items():
        if getattr(v, "error", None):
            print(k, v.error[:3000]); break
    print(sum(1 for v in res.values() if getattr(v, "binary", None)), "binaries")
