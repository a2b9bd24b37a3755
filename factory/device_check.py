"""Verify a candidate's outputs on the device, so a tune reads back 12 bytes per output, not the output.

The reference and the tolerance of each output (verify.py's element-wise bound: rtol x the terms' scale +
atol x |reference| + the output type's rounding floor) are uploaded once per tune, or, where the op
provides its reference as a device kernel (OpModule.device_reference), computed on the device from the
tensors there, with the bound computed beside them in the same order of operations; after a candidate runs,
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
from .ops.base import REFERENCE_WORKSPACE, Buf, DeviceReference, I32, Launch, LaunchPlan, Memset, OpModule, Role, TensorSpec
from .ops.conv import cpp_type
from .problem import Scalar
from .verify import allowed_error

THREADS = 256
CHUNK = 1 << 30  # elements per launch: the kernel's count is an int
BLOCKS_PER_PROCESSOR = 8
RESULT_BYTES = 16  # the largest ratio's bits (u64), the count of elements not finite (u32), padding
ENTRY = "kf_check"
# Beyond this many output elements the references (12 bytes an element on the device, 20 where the device
# computes them and keeps their scale, more on the host while they are made) would crowd the tensors
# themselves: such tunes read their outputs back.
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


def _chunks(count_all: int, processors: int) -> list[tuple[int, int, int]]:
    """(first element, elements, blocks) of each grid-stride launch over `count_all` elements."""
    chunks = []
    for start in range(0, count_all, CHUNK):
        count = min(CHUNK, count_all - start)
        chunks.append((start, count, max(1, min(math.ceil(count / THREADS), processors * BLOCKS_PER_PROCESSOR))))
    return chunks


def check_plan(output: TensorSpec, processors: int) -> LaunchPlan:
    """The launches that check `output` against buffers `<name>.ref` and `<name>.allowed`, results in
    `check.result` (cleared first)."""
    steps: list[Any] = [Memset("check.result", RESULT_BYTES)]
    for start, count, blocks in _chunks(output.numel, processors):
        args = (Buf(output.name, start * output.scalar.nbytes), Buf(f"{output.name}.ref", start * 8),
                Buf(f"{output.name}.allowed", start * 4), I32(count), Buf("check.result", 0), Buf("check.result", 8))
        steps.append(Launch(ENTRY, (blocks, 1, 1), (THREADS, 1, 1), args))
    return LaunchPlan(tuple(steps))


def reference_plan(reference: DeviceReference, outputs: list[TensorSpec], processors: int) -> LaunchPlan:
    """The op's reference launches, then each output's bound: `<name>.allowed` from `<name>.ref` and
    `<name>.scale` (entry kf_bounds<i> for the i-th output)."""
    steps: list[Any] = list(reference.plan.steps)
    for i, output in enumerate(outputs):
        for start, count, blocks in _chunks(output.numel, processors):
            args = (Buf(f"{output.name}.ref", start * 8), Buf(f"{output.name}.scale", start * 8),
                    Buf(f"{output.name}.allowed", start * 4), I32(count))
            steps.append(Launch(f"kf_bounds{i}", (blocks, 1, 1), (THREADS, 1, 1), args))
    return LaunchPlan(tuple(steps))


def reference_source(reference: DeviceReference, solver: OpModule, problem: Any, outputs: list[TensorSpec]) -> str:
    """The reference kernel with each output's bound kernel: the tolerance and rounding floor as C
    double literals (repr round-trips a float), so the bound is verify.py's to the last bit; integer
    outputs must equal their reference."""
    tol = solver.tolerance(problem.dtype)
    bounds = [(repr(float(tol.rtol)), repr(float(tol.atol)), repr(float(o.scalar.rounding_floor)), not o.scalar.is_float)
              for o in outputs]
    return render_common(reference.template, **dict(reference.values), bounds=bounds)


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
    """A tune's references on the device and the prepared check of each output (see the module).

    The references come from the host (`ref`, `abs_ref`), or, when those are None, from the op's
    `reference` kernel run once here on the tensors at `tensors` (then `host_reference` reads them back
    for a failing candidate's message)."""

    def __init__(self, backend: Backend, solver: OpModule, problem: Any, specs: Mapping[str, TensorSpec],
                 ref: Mapping[str, np.ndarray] | None, abs_ref: Mapping[str, np.ndarray] | None, processors: int,
                 reference: DeviceReference | None = None, tensors: Mapping[str, int] | None = None) -> None:
        self.backend = backend
        self.outputs = [s for s in specs.values() if s.role is Role.OUTPUT]
        self.pointers: dict[str, int] = {}
        self._owned: list[int] = []
        self.plans: dict[str, PreparedPlan] = {}
        self.computed_here = ref is None
        try:
            self.pointers["check.result"] = self._upload(bytes(RESULT_BYTES))
            info = backend.device_info()
            if ref is None or abs_ref is None:
                if reference is None or tensors is None:
                    raise ValueError("a device check needs the host's references or the op's reference kernel")
                self._compute_references(solver, problem, reference, tensors, processors)
            else:
                for spec in self.outputs:
                    want, allowed = bounds(solver, problem, spec, ref[spec.name], abs_ref[spec.name])
                    self.pointers[f"{spec.name}.ref"] = self._upload(want.tobytes())
                    self.pointers[f"{spec.name}.allowed"] = self._upload(allowed.tobytes())
            for spec in self.outputs:
                binary = self._compiled(f"check_outputs_{spec.scalar.name.lower()}", check_source(spec.scalar))
                self.plans[spec.name] = PreparedPlan(LoadedBinary(backend, binary, {}), check_plan(spec, processors))
        except BaseException:
            self.free()  # a check that cannot be set up leaves no device memory behind
            raise

    def _compiled(self, label: str, source: str) -> bytes:
        info = self.backend.device_info()
        compiled = compile_cached(info.backend, CompileJob(label, source, info.arch))
        if compiled.binary is None:
            raise RuntimeError(f"the {label} kernel did not compile: {compiled.error}")
        return compiled.binary

    def _compute_references(self, solver: OpModule, problem: Any, reference: DeviceReference,
                            tensors: Mapping[str, int], processors: int) -> None:
        """Each output's `.ref`, `.scale` and `.allowed` buffers, filled by the op's reference kernel."""
        for spec in self.outputs:
            for part, width in ((".ref", 8), (".scale", 8), (".allowed", 4)):
                self.pointers[spec.name + part] = self._alloc(spec.numel * width)
        if reference.plan.workspace_bytes:
            self.pointers[REFERENCE_WORKSPACE] = self._alloc(reference.plan.workspace_bytes)
        binary = self._compiled("device_reference", reference_source(reference, solver, problem, self.outputs))
        plan = PreparedPlan(LoadedBinary(self.backend, binary, {}), reference_plan(reference, self.outputs, processors))
        plan.bind({**tensors, **self.pointers})
        plan.enqueue()
        self.backend.synchronize()

    def host_reference(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(reference, error scale) of every output as computed here, read back in the outputs' shapes."""
        def read(spec: TensorSpec, part: str) -> np.ndarray:
            raw = self.backend.copy_from_device(self.pointers[spec.name + part], spec.numel * 8)
            return np.frombuffer(raw, dtype=np.float64).reshape(spec.shape)

        return ({s.name: read(s, ".ref") for s in self.outputs}, {s.name: read(s, ".scale") for s in self.outputs})

    def _alloc(self, nbytes: int) -> int:
        ptr = self.backend.alloc(max(nbytes, 1))
        self._owned.append(ptr)
        return ptr

    def _upload(self, data: bytes) -> int:
        ptr = self._alloc(len(data))
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
