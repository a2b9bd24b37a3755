"""Execute an instance's LaunchPlan on the host (see kernel_emulator.h), for tests without a GPU.

The rendered source is compiled with g++ against a small host model of the device language; each
Launch runs every block in turn with one fiber per GPU thread; Memset steps fill host buffers. The
tuner's protocol is kept: outputs poisoned, workspace filled with 0xFF, every element checked.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from factory import numerics
from factory.catalog import Instance
from factory.codegen import render
from factory.ops import solver_for
from factory.ops.base import F32, I32, Buf, Launch, LaunchPlan, Memset, Role
from factory.verify import Verdict, reference_outputs, verify

HEADER = Path(__file__).with_name("kernel_emulator.h")
_BUILD = Path(tempfile.gettempdir()) / "kf-emulator"


def available() -> bool:
    return shutil.which("g++") is not None


def _wrappers(entries: list[str]) -> str:
    return "".join(
        f'\nextern "C" __attribute__((visibility("default"))) int emu_{e}(const unsigned* grid, const unsigned* block, void** argv) '
        f"{{ return kfemu::launch({e}, grid, block, argv); }}\n"
        for e in entries
    )


def build(instance: Instance, entries: list[str]) -> ctypes.CDLL:
    """The instance's kernels as a host library (cached by source)."""
    source = render(instance) + _wrappers(sorted(set(entries)))
    digest = hashlib.sha256((source + HEADER.read_text()).encode()).hexdigest()[:24]
    _BUILD.mkdir(parents=True, exist_ok=True)
    lib = _BUILD / f"{digest}.so"
    if not lib.exists():
        src = _BUILD / f"{digest}.cpp"
        src.write_text(source)
        tmp = _BUILD / f"{digest}.tmp.so"
        # Hidden visibility: each library keeps its own statics and inline functions.
        cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-w", "-fvisibility=hidden", "-fno-gnu-unique",
               "-include", str(HEADER), "-o", str(tmp), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"g++ failed for {instance.name}:\n{proc.stderr[:4000]}")
        tmp.replace(lib)
    return ctypes.CDLL(str(lib))


def run_plan(lib: ctypes.CDLL, plan: LaunchPlan, buffers: Mapping[str, np.ndarray]) -> None:
    for step in plan.steps:
        if isinstance(step, Memset):
            buffers[step.buffer].view(np.uint8)[: step.nbytes] = step.byte
            continue
        assert isinstance(step, Launch)
        values = [_ctype(a, buffers) for a in step.args]
        argv = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        grid = (ctypes.c_uint * 3)(*step.grid)
        block = (ctypes.c_uint * 3)(*step.block)
        assert step.shared_bytes == 0, "dynamic shared memory is not emulated"
        if getattr(lib, f"emu_{step.entry}")(grid, block, argv) != 0:
            raise RuntimeError(f"{step.entry}: emulated launch deadlocked")


def _ctype(arg: Any, buffers: Mapping[str, np.ndarray]) -> Any:
    if isinstance(arg, Buf):
        return ctypes.c_uint64(buffers[arg.name].ctypes.data)
    if isinstance(arg, I32):
        return ctypes.c_int32(arg.value)
    if isinstance(arg, F32):
        return ctypes.c_float(arg.value)
    raise TypeError(arg)


def check_instance(instance: Instance, problem: Any, seed: int = 0) -> Verdict:
    """Run one instance on `problem` as the tuner's verification run does, and judge the outputs."""
    solver = solver_for(problem.op)
    specs = solver.tensors(problem)
    rng = np.random.default_rng(seed)
    custom = getattr(solver, "random_inputs", None)
    host = custom(problem, rng) if custom else {
        s.name: numerics.random_tensor(rng, s.shape, s.scalar) for s in specs if s.role is Role.INPUT
    }
    plan = solver.launch_plan(instance.family, instance.params, problem)
    buffers: dict[str, np.ndarray] = {}
    for s in specs:
        if s.role is Role.INPUT:
            buffers[s.name] = np.ascontiguousarray(host[s.name])
        else:
            raw = np.full(s.nbytes, numerics.poison_byte(s.scalar), dtype=np.uint8)
            buffers[s.name] = raw.view(numerics.STORAGE[s.scalar]).reshape(s.shape)
    buffers["workspace"] = np.full(max(plan.workspace_bytes, 4), 0xFF, dtype=np.uint8)
    lib = build(instance, [st.entry for st in plan.steps if isinstance(st, Launch)])
    run_plan(lib, plan, buffers)
    values = {s.name: numerics.exact_values(host[s.name], s.scalar) for s in specs if s.role is Role.INPUT}
    ref, scale = reference_outputs(solver, problem, values)
    got = {s.name: numerics.exact_values(buffers[s.name], s.scalar) for s in specs if s.role is Role.OUTPUT}
    return verify(solver, problem, got, ref, scale)
