"""Time the device reference (DeviceCheck set-up) on the tune-timing problems, twice each."""
import time, sys
import numpy as np
from factory.backends import get_backend
from factory.device import target_for
from factory.device_check import DeviceCheck
from factory.ops import solver_for
from factory.selector import problem_from_key
from factory.tuner import DeviceTensors, problem_inputs
from factory.problem import Op, Layout, DType
be = get_backend()
proc = target_for(be.device_info()).processors
for op, layout, dtype, spec in [(Op.CONV_BWD_WEIGHT, Layout.NHWGC, DType.FP16, "N=64,G=512,C=1,K=1,input=56x56,filter=3x3,stride=1,pad=1"),
                                (Op.CONV_BWD_DATA, Layout.NHWGC, DType.BF16, "N=64,G=1,C=256,K=256,input=28x28,filter=3x3,stride=1,pad=1"),
                                (Op.CONV_BWD_WEIGHT, Layout.NHWGC, DType.BF16, "N=64,G=1,C=256,K=256,input=28x28,filter=3x3,stride=1,pad=1"),
                                (Op.CONV_BWD_WEIGHT, Layout.NGCHW, DType.FP16, "N=256,G=32,C=1,K=1,input=112x112,filter=3x3,stride=1,pad=1")]:
    s = solver_for(op); p = s.parse_problem(spec, layout, dtype); specs = s.tensors(p)
    host = problem_inputs(s, p, specs, np.random.default_rng(0))
    t = DeviceTensors(be, specs, host)
    for i in range(2):
        be.synchronize(); t0 = time.perf_counter()
        c = DeviceCheck(be, s, p, {x.name: x for x in specs}, None, None, proc, s.device_reference(p), t.pointers)
        be.synchronize(); dt = time.perf_counter() - t0
        print(f"{op.value} {layout.value} {dtype.value} {spec}: device reference {dt*1e3:.1f} ms (run {i})", flush=True)
        c.free()
    t.free()
