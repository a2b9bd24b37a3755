"""Verify a candidate's outputs on the device, so a tune reads back 12 bytes per output, not the output.

The reference and the tolerance of each output (verify.py's element-wise bound: rtol x the terms' scale +
atol x |reference| + the output type's rounding floor) are uploaded once per tune; after a candidate runs,
one small kernel per output (templates/common/check_outputs.hip.j2) finds the largest |got - ref| /
allowed and counts the elements that are not finite. A candidate that passes is verified without a copy
to the host; one that fails has its outputs read back and judged by verify.py, which words the message
(and stays the judge of record: a disagreement goes its way).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .backends import Backend
from .codegen import render_common
from .compile_cache import CompileJob, compile_cached
from .executor import LoadedBinary, PreparedPlan
from .ops.base import Buf, I32, Launch, LaunchPlan, Memset, OpModule, Role, TensorSpec
from .ops.conv import cpp_type
from .problem import Scalar
from .verify import allowed_error

THREADS = 256
CHUNK = 1 << 30  # elements per launch: the kernel's count is an int
BLOCKS_PER_PROCESSOR = 8
RESULT_BYTES = 16  # the largest ratio's bits (u64), the count of elements not finite (u32), padding
ENTRY = "kf_check"
# Beyond this many output elements the references (12 bytes an element on the device, more on the host
# while they are made) would crowd the tensors themselves: such tunes read their outputs back.
MAX_CHECKED_ELEMENTS = 1 << 28


def check_source(scalar: Scalar) -> str:
    """The check kernel for outputs of `scalar`, headers inlined (one source per output type)."""
    return render_common("check_outputs.hip.j2", out_t=cpp_type(scalar), is_float=scalar.is_float)


def bounds(solver: OpModule, problem: Any, spec: TensorSpec, ref: np.ndarray,
           abs_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(reference as float64, allowed error as float32) of one output, in memory order. The allowed
    error is verify.py's, rounded up to float32 so the device is never stricter than the host;
    integer outputs must equal the reference (allowed 0)."""
    want = np.ascontiguousarray(ref, dtype=np.float64).reshape(-1)
    if not spec.scalar.is_float:
        return want, np.zeros(want.size, dtype=np.float32)
    allowed = allowed_error(solver.tolerance(problem.dtype), np.asarray(abs_ref).reshape(-1), want, spec.scalar)
    single = allowed.astype(np.float32)
    low = single.astype(np.float64) < allowed
    single[low] = np.nextafter(single[low], np.float32(np.inf))
    return want, single


def check_plan(output: TensorSpec, processors: int) -> LaunchPlan:
    """The launches that check `output` against buffers `<name>.ref` and `<name>.allowed`, results in
    `check.result` (cleared first)."""
    steps: list[Any] = [Memset("check.result", RESULT_BYTES)]
    for start in range(0, output.numel, CHUNK):
        count = min(CHUNK, output.numel - start)
        blocks = max(1, min(math.ceil(count / THREADS), processors * BLOCKS_PER_PROCESSOR))
        args = (Buf(output.name, start * output.scalar.nbytes), Buf(f"{output.name}.ref", start * 8),
                Buf(f"{output.name}.allowed", start * 4), I32(count), Buf("check.result", 0), Buf("check.result", 8))
        steps.append(Launch(ENTRY, (blocks, 1, 1), (THREADS, 1, 1), args))
    return LaunchPlan(tuple(steps))


@dataclass(frozen=True)
class DeviceVerdict:
    ok: bool
    worst_ratio: float  # largest |got - ref| / allowed over the outputs
    nonfinite: int  # elements that are NaN or infinite
    output: str | None = None  # the first output that failed


def read_result(raw: bytes) -> tuple[float, int]:
    bits, nonfinite = struct.unpack_from("<QI", raw)
    return struct.unpack("<d", struct.pack("<Q", bits))[0], nonfinite


class DeviceCheck:
    """A tune's references on the device and the prepared check of each output (see the module)."""

    def __init__(self, backend: Backend, solver: OpModule, problem: Any, specs: Mapping[str, TensorSpec],
                 ref: Mapping[str, np.ndarray], abs_ref: Mapping[str, np.ndarray], processors: int) -> None:
        self.backend = backend
        self.outputs = [s for s in specs.values() if s.role is Role.OUTPUT]
        self.pointers: dict[str, int] = {}
        self._owned: list[int] = []
        self.plans: dict[str, PreparedPlan] = {}
        try:
            self.pointers["check.result"] = self._upload(bytes(RESULT_BYTES))
            info = backend.device_info()
            for spec in self.outputs:
                want, allowed = bounds(solver, problem, spec, ref[spec.name], abs_ref[spec.name])
                self.pointers[f"{spec.name}.ref"] = self._upload(want.tobytes())
                self.pointers[f"{spec.name}.allowed"] = self._upload(allowed.tobytes())
                compiled = compile_cached(info.backend, CompileJob(f"check_outputs_{spec.scalar.name.lower()}",
                                                                   check_source(spec.scalar), info.arch))
                if compiled.binary is None:
                    raise RuntimeError(f"the output check kernel did not compile: {compiled.error}")
                self.plans[spec.name] = PreparedPlan(LoadedBinary(backend, compiled.binary, {}),
                                                     check_plan(spec, processors))
        except BaseException:
            self.free()  # a check that cannot be set up leaves no device memory behind
            raise

    def _upload(self, data: bytes) -> int:
        ptr = self.backend.alloc(max(len(data), 1))
        self._owned.append(ptr)
        self.backend.copy_to_device(ptr, data)
        return ptr

    def verdict(self, tensors: Mapping[str, int]) -> DeviceVerdict:
        """Check every output at the pointers `tensors` names (after the candidate's run was enqueued)."""
        worst = 0.0
        for spec in self.outputs:
            plan = self.plans[spec.name]
            plan.bind({**self.pointers, spec.name: tensors[spec.name]})
            plan.enqueue()
            ratio, nonfinite = read_result(self.backend.copy_from_device(self.pointers["check.result"], RESULT_BYTES))
            worst = max(worst, ratio)
            if nonfinite or not ratio <= 1.0:
                return DeviceVerdict(False, ratio, nonfinite, spec.name)
        return DeviceVerdict(True, worst, 0)

    def free(self) -> None:
        for ptr in self._owned:
            self.backend.free(ptr)
        self._owned.clear()
