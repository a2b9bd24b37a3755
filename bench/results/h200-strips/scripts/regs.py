"""Registers and spills of twopass's kf_depthwise, per strip, on a few layers (NVRTC, sm_90a)."""
import sys, time
from factory.ops import solver_for
from factory.problem import Layout, DType, Op
from factory.selector import lookup
from factory.device import TARGETS
from factory.compile_cache import CompileJob, compile_many
from factory.backends import BackendKind
from factory.sources import source_of
from factory.kernel_resources import from_ptxas_log
if __name__ == "__main__":
    jobs = {}
    s = solver_for(Op.DWSEP_CONV_FWD)
    specs = [(Layout.NHWGC, DType.FP16, "N=64,C=1024,K=1024,input=7x7,filter=3x3,pad=1"),
             (Layout.NHWGC, DType.BF16, "N=8,C=64,K=64,input=56x56,filter=5x5,pad=2"),
             (Layout.NHWGC, DType.FP16, "N=8,C=96,K=96,input=56x56,filter=7x7,pad=3"),
             (Layout.NGCHW, DType.FP16, "N=8,C=96,K=96,input=56x56,filter=3x3,pad=1"),
             (Layout.NGCHW, DType.BF16, "N=8,C=96,K=96,input=56x56,filter=7x7,pad=3,stride=2")]
    for lay, dt, spec in specs:
        p = s.parse_problem(spec, lay, dt)
        for i in [i for i in lookup(p, target=TARGETS["sm_90a"]) if i.family == "twopass" and i.params.block_m == 64 and i.params.block_n == 64 and i.params.stages == 3]:
            jobs[i.name] = CompileJob(i.name, source_of(i).text, i.compile_arch("sm_90"))
    from concurrent.futures import ProcessPoolExecutor
    from factory.backends.cuda import compile_cuda
    names = sorted(jobs)
    with ProcessPoolExecutor(16) as ex:
        outs = list(ex.map(compile_cuda, [jobs[n].source for n in names], [jobs[n].arch for n in names]))
    for n, o in zip(names, outs):
        r = from_ptxas_log(o.log).get("kf_depthwise")
        print(n, "regs", r.registers, "spill", r.spill_bytes, "stack", r.stack_bytes)
