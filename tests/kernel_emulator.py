"""Execute an instance's LaunchPlan on the host (see kernel_emulator.h), for tests without a GPU.

The rendered source is compiled with g++ against a small host model of the device language; each
Launch runs every block in turn with one fiber per GPU thread, with Launch.shared_bytes of dynamic
shared memory; Memset steps fill host buffers. The tuner's protocol is kept: outputs poisoned,
workspace filled with 0xFF, every element checked. Buffers are laid out as device allocations
(256-byte aligned) with a guard band either side, so a kernel that writes out of bounds fails.

The op API is used in three places only: `_plan` (launch plan), `_tensors` (tensor specs and inputs)
and `_judge` (reference and verification).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from factory import abi, numerics
from factory.catalog import Instance
from factory.codegen import render
from factory.ops import solver_for
from factory.ops.base import Launch, LaunchPlan, Memset, Role, TensorMap, TensorSpec
from factory.verify import Verdict, reference_outputs, verify

HEADER = Path(__file__).with_name("kernel_emulator.h")
_BUILD = Path(tempfile.gettempdir()) / "kf-emulator"
ALIGN = 256  # what cudaMalloc / hipMalloc guarantee
GUARD = 4096  # bytes either side of every buffer
GUARD_BYTE = 0xFE  # not the 0xFF poison, so a poisoned value written out of bounds is seen too

# g++ flags: hidden visibility so each library keeps its own statics and inline functions; alignment
# checks whose failures kernel_emulator.h turns into a failed launch; no _FORTIFY_SOURCE, whose longjmp
# check rejects switching between fiber stacks. Compiled and linked in two steps so that the link does
# not pull libubsan (and its signal handlers) into the test process: the header defines its one handler.
_CXXFLAGS = ["-std=c++20", "-O1", "-fPIC", "-w", "-fvisibility=hidden", "-fno-gnu-unique",
             "-fsanitize=alignment", "-fno-sanitize-recover=alignment", "-U_FORTIFY_SOURCE"]
_LDFLAGS = ["-shared", "-fPIC"]

_STATUS = {1: "deadlock", 2: "misaligned access", 3: "dynamic shared memory overrun"}

# `extern __shared__ T name[];` -> a pointer to the launch's dynamic shared buffer (kernel_emulator.h).
_ALIGN_SPEC = r"(?:(?:__align__|alignas)\s*\(\s*\d+\s*\)\s+)?"
_DYNAMIC_SHARED = re.compile(
    r"extern\s+__shared__\s+" + _ALIGN_SPEC + r"(?P<type>[A-Za-z_][\w:]*(?:\s+[A-Za-z_][\w:]*)*?)\s+"
    + _ALIGN_SPEC + r"(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;"
)


class EmulatorError(RuntimeError):
    """The emulator itself could not run an instance (a source it cannot compile or model)."""


class KernelFault(RuntimeError):
    """A launch did what would fault or hang on a GPU, or wrote outside its buffers."""


def available() -> bool:
    return shutil.which("g++") is not None


# --- op API call sites (the only ones) -----------------------------------------------------------------
def _plan(instance: Instance, problem: Any) -> LaunchPlan:
    return solver_for(problem.op).launch_plan(instance.family, instance.params, problem)


def _tensors(problem: Any, rng: np.random.Generator) -> tuple[Sequence[TensorSpec], dict[str, np.ndarray]]:
    """The problem's tensors and fresh random inputs for it."""
    solver = solver_for(problem.op)
    specs = solver.tensors(problem)
    host = solver.random_inputs(problem, rng)  # None: the op takes uniform inputs
    if host is None:
        host = {s.name: numerics.random_tensor(rng, s.shape, s.scalar) for s in specs if s.role is Role.INPUT}
    return specs, host


def _judge(problem: Any, specs: Sequence[TensorSpec], host: Mapping[str, np.ndarray],
           buffers: Mapping[str, np.ndarray]) -> Verdict:
    solver = solver_for(problem.op)
    values = {s.name: numerics.exact_values(host[s.name], s.scalar) for s in specs if s.role is Role.INPUT}
    ref, scale = reference_outputs(solver, problem, values)
    got = {s.name: numerics.exact_values(buffers[s.name], s.scalar) for s in specs if s.role is Role.OUTPUT}
    return verify(solver, problem, got, ref, scale)


# --- building -----------------------------------------------------------------------------------------
def emulator_source(source: str) -> str:
    """A rendered source as the emulator compiles it: dynamic shared arrays become pointers to the
    launch's buffer (a block-scope `extern` cannot be declared static shared storage in C++)."""
    out = _DYNAMIC_SHARED.sub(
        lambda m: f"{m['type']}* const {m['name']} = reinterpret_cast<{m['type']}*>(kfemu::dynamic_shared);",
        source,
    )
    if re.search(r"extern\s+__shared__", out):
        raise EmulatorError("an `extern __shared__` declaration the emulator does not model")
    return out


def _wrappers(entries: Iterable[str]) -> str:
    export = 'extern "C" __attribute__((visibility("default")))'
    text = f"\n{export} const char* emu_message() {{ return kfemu::message; }}\n"
    return text + "".join(
        f"{export} int emu_{e}(const unsigned* grid, const unsigned* block, unsigned shared_bytes, void** argv) "
        f"{{ return kfemu::launch({e}, grid, block, shared_bytes, argv); }}\n"
        for e in sorted(set(entries))
    )


def _library(instance: Instance, entries: Iterable[str]) -> Path:
    """The instance's kernels as a host library, compiled unless one of the same source exists."""
    return compile_source(render(instance), entries, instance.name)


def compile_source(source: str, entries: Iterable[str], label: str = "source") -> Path:
    """A rendered HIP source's `entries` as a host library (cached on disk by source, header and flags)."""
    source = emulator_source(source) + _wrappers(entries)
    digest = hashlib.sha256((source + HEADER.read_text() + " ".join(_CXXFLAGS)).encode()).hexdigest()[:24]
    _BUILD.mkdir(parents=True, exist_ok=True)
    lib = _BUILD / f"{digest}.so"
    if lib.exists():
        return lib
    fd, tmp_name = tempfile.mkstemp(dir=_BUILD, prefix=f"{digest}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    src, obj = tmp.with_suffix(".cpp"), tmp.with_suffix(".o")
    try:
        src.write_text(source)
        for cmd in (["g++", *_CXXFLAGS, "-include", str(HEADER), "-c", "-o", str(obj), str(src)],
                    ["g++", *_LDFLAGS, "-o", str(tmp), str(obj)]):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise EmulatorError(f"g++ failed for {label}:\n{proc.stderr[:4000]}")
        tmp.replace(lib)
    finally:
        for path in (tmp, src, obj):
            path.unlink(missing_ok=True)
    return lib


def _entries(plan: LaunchPlan) -> list[str]:
    return [st.entry for st in plan.steps if isinstance(st, Launch)]


def build(instance: Instance, entries: Iterable[str]) -> ctypes.CDLL:
    """The instance's kernels, loaded (cached on disk by source)."""
    return ctypes.CDLL(str(_library(instance, entries)))


def prebuild(pairs: Iterable[tuple[Instance, Any]], jobs: int | None = None) -> None:
    """Compile the libraries `check_instance` will need for these (instance, problem) pairs, in parallel."""
    work = {(i.name, tuple(sorted(set(_entries(_plan(i, p)))))): i for i, p in pairs}
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        list(pool.map(lambda item: _library(item[1], item[0][1]), work.items()))


# --- device memory ------------------------------------------------------------------------------------
@dataclass
class DeviceMemory:
    """Host buffers laid out as device allocations: aligned, a guard band either side of each."""

    raw: dict[str, np.ndarray]
    arrays: dict[str, np.ndarray]

    @classmethod
    def empty(cls) -> "DeviceMemory":
        return cls({}, {})

    def alloc(self, name: str, nbytes: int, fill: int) -> np.ndarray:
        """A uint8 array of nbytes, filled with `fill`, 256-byte aligned, guard bands around it."""
        block = np.full(nbytes + 2 * GUARD + ALIGN, GUARD_BYTE, dtype=np.uint8)
        start = (-(block.ctypes.data + GUARD)) % ALIGN + GUARD
        self.raw[name] = block[start - GUARD : start + nbytes + GUARD]
        inner = self.raw[name][GUARD : GUARD + nbytes]
        inner[:] = fill
        self.arrays[name] = inner
        return inner

    def clobbered(self) -> list[str]:
        """Buffers whose guard bands were written."""
        return [name for name, raw in self.raw.items()
                if np.any(raw[:GUARD] != GUARD_BYTE) or np.any(raw[-GUARD:] != GUARD_BYTE)]


# --- running ------------------------------------------------------------------------------------------
def run_plan(lib: ctypes.CDLL, plan: LaunchPlan, buffers: Mapping[str, np.ndarray]) -> None:
    """Execute the plan's steps in order on host buffers; raise KernelFault when a launch faults."""
    for step in plan.steps:
        if isinstance(step, Memset):
            target = buffers[step.buffer].view(np.uint8).reshape(-1)
            if step.offset + step.nbytes > target.size:
                raise KernelFault(f"memset of {step.nbytes} bytes from byte {step.offset} on {step.buffer!r}, "
                                  f"which has {target.size}")
            target[step.offset: step.offset + step.nbytes] = step.byte
            continue
        assert isinstance(step, Launch)
        if step.cooperative:
            raise EmulatorError(f"{step.entry}: a cooperative launch's blocks wait for each other, "
                                "which running one block at a time cannot do")
        packed = abi.pack(step.args)  # the executor's packing: structs laid out as the kernel reads them
        packed.bind({name: array.ctypes.data for name, array in buffers.items()}, encode_host_map)
        values = packed.values
        argv = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        grid = (ctypes.c_uint * 3)(*step.grid)
        block = (ctypes.c_uint * 3)(*step.block)
        status = getattr(lib, f"emu_{step.entry}")(grid, block, ctypes.c_uint(step.shared_bytes), argv)
        if status != 0:
            lib.emu_message.restype = ctypes.c_char_p
            detail = (lib.emu_message() or b"").decode()
            raise KernelFault(f"{step.entry}: {_STATUS.get(status, f'status {status}')}: {detail}")


class _HostMap(ctypes.Structure):
    """common/tma.h's kf_host_map: what the emulator's bulk copies read in place of the driver's encoding."""

    _fields_ = [("base", ctypes.c_uint64), ("dims", ctypes.c_uint64 * 3), ("strides", ctypes.c_uint64 * 2),
                ("box", ctypes.c_uint32 * 3), ("element_bytes", ctypes.c_uint32)]


def encode_host_map(at: int, tmap: TensorMap, address: int) -> None:
    """The emulator's tensor-map encoder (the executor's is the driver's): rank 3, as tma.h copies."""
    if len(tmap.dims) != 3:
        raise EmulatorError(f"the emulator's bulk copies take three-dimensional maps, not {tmap}")
    host = _HostMap(address, tmap.dims, tmap.strides, tmap.box, tmap.element_bytes)
    ctypes.memmove(at, ctypes.addressof(host), ctypes.sizeof(host))


def can_emulate(instance: Instance, problem: Any) -> bool:
    """Whether the instance's plan runs here: no cooperative launch (its blocks wait for each other)."""
    return not any(isinstance(s, Launch) and s.cooperative for s in _plan(instance, problem).steps)


def check_instance(instance: Instance, problem: Any, seed: int = 0) -> Verdict:
    """Run one instance on `problem` as the tuner's verification run does, and judge the outputs.

    A launch that faults (deadlock, misaligned access, shared-memory overrun) or writes outside a
    buffer gives a failing Verdict that says so.
    """
    rng = np.random.default_rng(seed)
    specs, host = _tensors(problem, rng)
    plan = _plan(instance, problem)
    memory = DeviceMemory.empty()
    buffers: dict[str, np.ndarray] = {}
    for s in specs:
        storage = numerics.STORAGE[s.scalar]
        if s.role is Role.INPUT:
            raw = memory.alloc(s.name, s.nbytes, 0)
            raw[:] = np.ascontiguousarray(host[s.name], dtype=storage).reshape(-1).view(np.uint8)
        else:
            raw = memory.alloc(s.name, s.nbytes, numerics.poison_byte(s.scalar))
        buffers[s.name] = raw.view(storage).reshape(s.shape)
    buffers["workspace"] = memory.alloc("workspace", plan.workspace_bytes, 0xFF)
    lib = build(instance, _entries(plan))
    try:
        run_plan(lib, plan, buffers)
    except KernelFault as fault:
        return Verdict(False, float("inf"), str(fault))
    clobbered = memory.clobbered()
    if clobbered:
        return Verdict(False, float("inf"), f"wrote outside its buffers: {', '.join(clobbered)}")
    return _judge(problem, specs, host, buffers)


def pick_for_case(case_id: str, candidates: Iterable[Instance], what: str) -> Instance:
    """Among `candidates`, the one a hash of the case id indexes: stable across runs and machines, and
    spread over the catalog as cases are added."""
    ordered = sorted(candidates, key=lambda i: i.name)
    assert ordered, f"{case_id}: no {what}"
    return ordered[zlib.crc32(case_id.encode()) % len(ordered)]


def pick_in_family(case: Any, amd_family: str, accept: Any = lambda params: True) -> Instance:
    """pick_for_case among the case's family's candidates that `accept` and the case's own `pick` (if any)
    take: the family `amd_family` (matrix cores) as compiled for gfx90a, every other for sm_90a."""
    from factory.device import TARGETS
    from factory.selector import lookup

    target = TARGETS["gfx90a"] if case.family == amd_family else TARGETS["sm_90a"]
    return pick_for_case(
        case.id, (i for i in lookup(case.problem, target=target)
                  if i.family == case.family and accept(i.params) and (case.pick is None or case.pick(i.params))),
        f"{case.family} instance computes {case.spec}")


def assert_case_matches_reference(case: Any, instance: Instance) -> None:
    """check_instance on the case's problem, seeded by its id."""
    verdict = check_instance(instance, case.problem, seed=zlib.crc32(case.id.encode()))
    assert verdict.ok, f"{instance.name} on {case.spec}: {verdict.message}"


def pick_and_prebuild(cases: Sequence[Any], pick: Any) -> dict[str, Instance]:
    """Every case's instance (`pick(case)`), their libraries compiled in parallel up front."""
    chosen = {case.id: pick(case) for case in cases}
    prebuild([(chosen[c.id], c.problem) for c in cases])
    return chosen


def assert_cases_cover_cells(solver: Any, cases: Sequence[Any], picked: Mapping[str, Instance]) -> None:
    """Every family's picked instances reach each layout, each dtype and each rank the family supports."""
    for family in solver.families:
        cells = {(picked[c.id].layout, picked[c.id].dtype, picked[c.id].ndim) for c in cases if c.family == family}
        supported = solver.supported_cells(family)
        for axis in range(3):
            assert {cell[axis] for cell in cells} == {cell[axis] for cell in supported}, (family, axis)
