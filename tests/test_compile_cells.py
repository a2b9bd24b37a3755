"""Compile catalog instances without a GPU: NVRTC to sm_90 cubins, hipcc and hiprtc to gfx90a code objects.

By default one instance per (op, family, layout, dtype, rank) cell is compiled, which reaches every
template branch a cell selects (types, layout strides, ranks); `-m slow` NVRTC-compiles every instance.
Each test compiles in parallel worker processes and reports every failing cell in one message.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

import pytest

from factory import codegen
from factory.backends import BackendKind
from factory.backends.base import BackendError
from factory.backends.hip_offline import compile_with_hipcc, find_hiprtc_library, hipcc_available, hiprtc_env
from factory.catalog import Instance, all_instances, specialized_instances
from factory.compile_cache import CompileJob, compile_many
from factory.device import target_named
from factory.ops import solver_for
from factory.ops.conv_bwd_data.common import DTYPES as BWD_DATA_DTYPES
from factory.problem import Layout, Op, parse_conv_problem

REPO = Path(__file__).resolve().parents[1]
CUDA_ARCH = "sm_90"
HIP_ARCH = "gfx90a"
WORKERS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
EM_AMDGPU = 224
EF_AMDGPU_MACH = {"gfx908": 0x30, "gfx90a": 0x3F, "gfx940": 0x40}  # e_flags & 0xff of an AMDGPU code object

_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(')


def _nvrtc_missing() -> str | None:
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
        return "cuda-python (cuda-bindings) is not installed"
    from factory.backends.cuda import cuda_include_dir

    if cuda_include_dir() is None:
        return "no CUDA headers for NVRTC (install nvidia-cuda-runtime or set KFACTORY_CUDA_INCLUDE)"
    return None


needs_nvrtc = pytest.mark.skipif(_nvrtc_missing() is not None, reason=str(_nvrtc_missing()))
needs_hipcc = pytest.mark.skipif(not hipcc_available(), reason="hipcc is not on PATH")
needs_hip_python = pytest.mark.skipif(importlib.util.find_spec("hip") is None, reason="hip-python is not installed")


# --- which instances -------------------------------------------------------------------------------

Cell = tuple[str, str, str, str, int]  # op, family, layout, dtype, ndim


def cell_of(inst: Instance) -> Cell:
    return (inst.op.value, inst.family, inst.layout.value, inst.dtype.value, inst.ndim)


def cell_text(cell: Cell) -> str:
    op, family, layout, dtype, ndim = cell
    return f"{op}/{family}/{layout}/{dtype}/{ndim}d"


def cell_representatives(instances: Iterable[Instance]) -> dict[Cell, Instance]:
    """One instance per cell, chosen deterministically.

    Cells are visited in sorted order; each takes, by name, the first instance whose tuning values
    (template parameters) its family has not compiled yet, else the first by name. The same number of
    compiles thus covers a family's split-K reductions, vector widths and block shapes, not one point.
    """
    by_cell: dict[Cell, list[Instance]] = defaultdict(list)
    for inst in instances:
        by_cell[cell_of(inst)].append(inst)
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    chosen: dict[Cell, Instance] = {}
    for cell in sorted(by_cell):
        candidates = sorted(by_cell[cell], key=lambda i: i.name)
        family_seen = seen[cell[:2]]
        fresh = [i for i in candidates if _tuning_key(i) not in family_seen]
        pick = (fresh or candidates)[0]
        family_seen.add(_tuning_key(pick))
        chosen[cell] = pick
    return chosen


# Families whose points all take the problem's filter (conv_bwd_data's dwr) have no catalog-wide
# instances; they are compiled as specialized for these depthwise problems, in every cell.
SPECIALIZED_SAMPLES = {1: "N=2,G=16,C=1,K=1,input=40,filter=7,stride=2,pad=3",
                       2: "N=2,G=16,C=1,K=1,input=9x11,filter=3x3,pad=1",
                       3: "N=1,G=8,C=1,K=1,input=5x6x7,filter=3x3x3,stride=2,pad=1"}


def compilable_instances() -> tuple[Instance, ...]:
    """Every catalog instance, and the problem-specialized instances of SPECIALIZED_SAMPLES."""
    specialized = [inst
                   for ndim, spec in SPECIALIZED_SAMPLES.items() for layout in Layout for dtype in BWD_DATA_DTYPES
                   for inst in specialized_instances(parse_conv_problem(spec, layout, dtype, Op.CONV_BWD_DATA))]
    return all_instances() + tuple(dict.fromkeys(specialized))


def _tuning_key(inst: Instance) -> str:
    return json.dumps(inst.params.template_values(), sort_keys=True, default=str)


def hiprtc_sample(representatives: dict[Cell, Instance]) -> list[Instance]:
    """Per op and family, one representative per dtype, with layout and rank varying between dtypes."""
    groups: dict[tuple[str, str, str], list[Cell]] = defaultdict(list)
    for cell in sorted(representatives):
        groups[(cell[0], cell[1], cell[3])].append(cell)
    sample = []
    for index, key in enumerate(sorted(groups)):
        cells = groups[key]
        sample.append(representatives[cells[index % len(cells)]])
    return sample


# --- what a good binary looks like ------------------------------------------------------------------


def declared_kernels(source: str) -> tuple[set[str], set[str]]:
    """(every extern "C" kernel the source spells, those outside any #if block, which must be built)."""
    every, unconditional = set(), set()
    depth = 0
    for line in source.splitlines():
        directive = re.match(r"\s*#\s*(\w+)", line)
        if directive and directive[1] in ("if", "ifdef", "ifndef"):
            depth += 1
        elif directive and directive[1] == "endif":
            depth -= 1
        for name in _KERNEL.findall(line):
            every.add(name)
            if depth == 0:
                unconditional.add(name)
    return every, unconditional


def kernel_symbols(blob: bytes, machine: int) -> set[str]:
    """Kernel entry points in an ELF code object's symbol table (what the module loader looks up by name).

    A cubin marks entries as functions with STO_CUDA_ENTRY; an AMDGPU object gives each kernel a
    `<name>.kd` descriptor.
    """
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", blob, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    kernels = set()
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != 2:  # SHT_SYMTAB
            continue
        strtab = sections[link][4]
        for sym in range(offset, offset + size, entsize or 24):
            st_name, st_info, st_other = struct.unpack_from("<IBB", blob, sym)
            name = blob[strtab + st_name : blob.index(b"\0", strtab + st_name)].decode()
            if machine == EM_CUDA and st_info & 0xF == 2 and st_other & 0x10:
                kernels.add(name)
            elif machine == EM_AMDGPU and st_info & 0xF == 1 and name.endswith(".kd"):
                kernels.add(name[: -len(".kd")])
    return kernels


def binary_problems(blob: bytes | None, source: str, machine: int, arch: str) -> list[str]:
    """Why `blob` is not an ELF code object for `arch` whose kernels are the ones `source` defines."""
    if not blob:
        return ["empty binary"]
    if not blob.startswith(ELF_MAGIC) or len(blob) < 64:
        return [f"not an ELF file (starts {blob[:8].hex()})"]
    e_machine = struct.unpack_from("<H", blob, 18)[0]
    e_flags = struct.unpack_from("<I", blob, 48)[0]
    if e_machine != machine:
        return [f"ELF machine {e_machine}, expected {machine}"]
    problems = []
    if machine == EM_CUDA:
        sm = (e_flags >> 8) & 0xFF if blob[8] >= 8 else e_flags & 0xFF  # EI_ABIVERSION 8 moved the SM field
        if f"sm_{sm}" != arch:
            problems.append(f"cubin is for sm_{sm}, expected {arch}")
    elif (e_flags & 0xFF) != EF_AMDGPU_MACH[arch]:
        problems.append(f"code object mach {e_flags & 0xFF:#x}, expected {arch} ({EF_AMDGPU_MACH[arch]:#x})")
    try:
        built = kernel_symbols(blob, machine)
    except (struct.error, ValueError, IndexError) as exc:
        return problems + [f"unreadable ELF symbol table: {exc}"]
    every, required = declared_kernels(source)
    if not built:
        problems.append("no kernel entry points in the binary")
    if built - every:
        problems.append(f"kernels not declared extern \"C\" in the source (mangled?): {sorted(built - every)}")
    if required - built:
        problems.append(f"kernels missing from the binary: {sorted(required - built)}")
    return problems


def first_lines(text: str, limit: int = 12) -> str:
    """The compiler's first error lines, which name the template line that broke."""
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()] or lines
    return "\n    ".join(errors[:limit])


def failure_report(failures: dict[str, str], total: int, what: str) -> str:
    return f"{what}: {len(failures)} of {total} failed\n" + "\n".join(
        f"  {key}:\n    {why}" for key, why in sorted(failures.items())
    )


# --- NVRTC -------------------------------------------------------------------------------------------


def nvrtc_failures(instances: list[Instance], cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Compile through the compile cache's worker pool, the path `kfactory tune` takes, into an empty cache."""
    monkeypatch.setenv("KFACTORY_CACHE_DIR", str(cache))
    sources = {inst.name: codegen.render(inst) for inst in instances}
    # wgmma instances compile for sm_90a, whose cubins carry the sm_90 machine flags.
    jobs = [CompileJob(inst.name, sources[inst.name], inst.compile_arch(CUDA_ARCH)) for inst in instances]
    outcomes = compile_many(BackendKind.CUDA, jobs, workers=WORKERS)
    failures: dict[str, str] = {}
    for inst in instances:
        outcome = outcomes.get(inst.name)
        key = f"{cell_text(cell_of(inst))} {inst.name}"
        if outcome is None:
            failures[key] = "no outcome"
        elif outcome.error is not None:
            failures[key] = first_lines(outcome.error)
        else:
            problems = binary_problems(outcome.binary, sources[inst.name], EM_CUDA, CUDA_ARCH)
            if problems:
                failures[key] = "; ".join(problems)
    return failures


def nvidia_instances() -> list[Instance]:
    """What an H100 can run (AMD's matrix-core family is compiled by the hip tests below)."""
    return runs_on("sm_90a", compilable_instances())


@needs_nvrtc
def test_nvrtc_compiles_one_instance_per_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reps = cell_representatives(nvidia_instances())
    failures = nvrtc_failures(list(reps.values()), tmp_path / "cache", monkeypatch)
    assert not failures, failure_report(failures, len(reps), f"NVRTC {CUDA_ARCH}, one instance per cell")


@needs_nvrtc
@pytest.mark.slow
def test_nvrtc_compiles_every_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    instances = nvidia_instances()
    failures = nvrtc_failures(instances, tmp_path / "cache", monkeypatch)
    assert not failures, failure_report(failures, len(instances), f"NVRTC {CUDA_ARCH}, every instance")


@needs_nvrtc
def test_cuda_backend_compile_needs_no_device() -> None:
    """Backend.compile is the device-free compiler: a backend that never opened a device compiles too."""
    from factory.backends.cuda import CudaBackend, nvrtc_version

    inst = next(iter(cell_representatives(nvidia_instances()).values()))
    source = codegen.render(inst)
    bare = CudaBackend.__new__(CudaBackend)
    result = bare.compile(source, CUDA_ARCH)
    assert binary_problems(result.binary, source, EM_CUDA, CUDA_ARCH) == []
    assert result.arch == CUDA_ARCH and result.compiler_version == nvrtc_version()


@needs_nvrtc
def test_a_compile_with_an_empty_log_leaves_python_s_shared_bytes_alone() -> None:
    """NVRTC writes its log's terminating NUL into the buffer it is given; an empty log has size 1, and
    a one-byte bytes object is CPython's shared singleton. Writing there once turned every b" " (and
    text built from it, e.g. torch's operator schemas) into NUL for the rest of the process."""
    from factory.backends.cuda import _check, _nvrtc, _program_log

    nvrtc = _nvrtc()  # compiled without ptxas -v (compile_cuda always asks for it): an empty log
    source = b'extern "C" __global__ void k(float* p) { p[threadIdx.x] = 1.0f; }'
    prog = _check(nvrtc.nvrtcCreateProgram(source, b"k.cu", 0, [], []), "nvrtcCreateProgram")
    try:
        _check(nvrtc.nvrtcCompileProgram(prog, 1, [f"--gpu-architecture={CUDA_ARCH}".encode()]), "nvrtcCompileProgram")
        assert _program_log(nvrtc, prog) == ""
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    assert bytes([32])[0] == 32 and " ".encode()[0] == 32 and b" ".decode() == " "


@needs_nvrtc
def test_binary_check_rejects_wrong_binaries() -> None:
    """The binary checks can fail: another SM, another machine, a renamed kernel, nothing at all."""
    from factory.backends.cuda import compile_cuda

    source = codegen.render(next(iter(cell_representatives(nvidia_instances()).values())))
    blob = compile_cuda(source, CUDA_ARCH).binary
    assert binary_problems(blob, source, EM_CUDA, CUDA_ARCH) == []
    assert any("sm_90" in p for p in binary_problems(blob, source, EM_CUDA, "sm_80"))
    assert any("machine" in p for p in binary_problems(blob, source, EM_AMDGPU, HIP_ARCH))
    entry = sorted(declared_kernels(source)[1])[0]
    renamed = blob.replace(entry.encode() + b"\0", b"z" + entry[1:].encode() + b"\0")
    problems = binary_problems(renamed, source, EM_CUDA, CUDA_ARCH)
    assert any("missing" in p for p in problems) and any("not declared" in p for p in problems)
    assert binary_problems(b"", source, EM_CUDA, CUDA_ARCH) == ["empty binary"]


def test_declared_kernels_skips_conditional_ones() -> None:
    source = 'extern "C" __global__ void a(int n) {}\n#if REDUCE == 2\nextern "C" __global__ void b(int n) {}\n#endif\n'
    assert declared_kernels(source) == ({"a", "b"}, {"a"})


# --- hipcc, offline ----------------------------------------------------------------------------------


def runs_on(arch: str, instances: Iterable[Instance]) -> list[Instance]:
    """The instances a device of `arch` can run at all (a family built on another vendor's matrix
    instructions is not compiled for it)."""
    target = target_named(arch)
    return [i for i in instances if solver_for(i.op).families[i.family].why_not_on(i.params, target) is None]


@needs_hipcc
def test_hipcc_compiles_one_instance_per_cell(tmp_path: Path) -> None:
    """hipcc runs as a child process per compile, so a thread per worker keeps WORKERS compilers busy."""
    reps = cell_representatives(runs_on(HIP_ARCH, compilable_instances()))

    def build(item: tuple[Cell, Instance]) -> tuple[str, str | None]:
        cell, inst = item
        key = f"{cell_text(cell)} {inst.name}"
        source = codegen.render(inst)
        try:
            blob = compile_with_hipcc(source, HIP_ARCH, tmp_path / inst.name)
        except BackendError as exc:
            return key, first_lines(getattr(exc, "log", "") or str(exc))
        problems = binary_problems(blob, source, EM_AMDGPU, HIP_ARCH)
        return key, "; ".join(problems) if problems else None

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        results = list(pool.map(build, sorted(reps.items())))
    failures = {key: why for key, why in results if why is not None}
    assert not failures, failure_report(failures, len(reps), f"hipcc {HIP_ARCH}, one instance per cell")


MFMA_ARCHS = ("gfx90a", "gfx940")


def amdgpu_disassembler() -> str | None:
    """An llvm-objdump that knows the AMDGPU targets (Debian's hipcc brings one in its LLVM)."""
    found = sorted(Path("/usr/lib").glob("llvm-*/bin/llvm-objdump"), key=lambda p: int(p.parts[-3].split("-")[1]))
    return str(found[-1]) if found else shutil.which("llvm-objdump")


@needs_hipcc
@pytest.mark.parametrize("arch", MFMA_ARCHS)
def test_hipcc_builds_the_mfma_family_on_matrix_cores(arch: str, tmp_path: Path) -> None:
    """One `mfma` instance per dtype compiles for CDNA2 and CDNA3, and its code issues MFMA instructions
    (the 16x16 forms of templates/common/mfma.h), not a fallback."""
    reps = cell_representatives(i for i in runs_on(arch, all_instances()) if i.family == "mfma")
    sample = [i for i in hiprtc_sample(reps) if i.family == "mfma"]
    assert {i.dtype.value for i in sample} == {"fp16", "bf16", "bf16_fp32w", "fp32"}
    objdump = amdgpu_disassembler()
    failures: dict[str, str] = {}
    for inst in sample:
        source = codegen.render(inst)
        try:
            blob = compile_with_hipcc(source, arch, tmp_path / inst.name)
        except BackendError as exc:
            failures[inst.name] = first_lines(getattr(exc, "log", "") or str(exc))
            continue
        problems = binary_problems(blob, source, EM_AMDGPU, arch)
        if objdump and not problems:
            code = tmp_path / f"{inst.name}.hsaco"
            code.write_bytes(blob)
            listing = subprocess.run([objdump, "-d", f"--mcpu={arch}", str(code)],
                                     capture_output=True, text=True, check=True).stdout
            if not re.search(r"v_mfma_(f32|i32)_16x16x", listing):
                problems.append("no 16x16 v_mfma instruction in the disassembly")
        if problems:
            failures[inst.name] = "; ".join(problems)
    assert not failures, failure_report(failures, len(sample), f"hipcc {arch}, mfma family")


# --- hiprtc, in child processes whose loader finds libhiprtc.so ---------------------------------------

RTC_SCRIPT = r"""
import json, sys
from factory.backends.hip import compile_hip

jobs = json.load(open(sys.argv[1]))
results = {}
for name, (source, arch) in jobs.items():
    try:
        binary = compile_hip(source, arch).binary
        results[name] = {"binary": binary.hex()}
    except Exception as exc:
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "log": getattr(exc, "log", "")}
json.dump(results, open(sys.argv[2], "w"))
"""


@needs_hip_python
def test_hiprtc_compiles_a_sample_of_cells(tmp_path: Path) -> None:
    """hiprtc is what runs on AMD GPUs; one instance per family and dtype keeps it to a few dozen compiles."""
    if find_hiprtc_library() is None:
        pytest.skip("no libhiprtc or libamdhip64 providing hiprtc is installed")
    sample = hiprtc_sample(cell_representatives(runs_on(HIP_ARCH, compilable_instances())))
    sources = {inst.name: codegen.render(inst) for inst in sample}
    env = hiprtc_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    procs = []
    for worker in range(min(WORKERS, len(sample))):
        chunk = {i.name: (sources[i.name], HIP_ARCH) for i in sample[worker::WORKERS]}
        jobs, out = tmp_path / f"jobs{worker}.json", tmp_path / f"out{worker}.json"
        jobs.write_text(json.dumps(chunk))
        proc = subprocess.Popen([sys.executable, "-c", RTC_SCRIPT, str(jobs), str(out)], env=env, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append((proc, out))
    results: dict[str, dict] = {}
    for proc, out in procs:
        _, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr
        results.update(json.loads(out.read_text()))
    failures: dict[str, str] = {}
    for inst in sample:
        key = f"{cell_text(cell_of(inst))} {inst.name}"
        result = results.get(inst.name, {"error": "no result"})
        if "error" in result:
            failures[key] = first_lines(result.get("log") or result["error"])
        else:
            problems = binary_problems(bytes.fromhex(result["binary"]), sources[inst.name], EM_AMDGPU, HIP_ARCH)
            if problems:
                failures[key] = "; ".join(problems)
    assert not failures, failure_report(failures, len(sample), f"hiprtc {HIP_ARCH}, sample of cells")


# --- the runtime's own kernels: output checks and device references ----------------------------------


def runtime_sources() -> dict[str, str]:
    """Each output check, and the device reference of each op and float dtype (both GroupNorm layouts,
    backward-weight with the epilogue's D)."""
    from factory.device_check import check_source, reference_source
    from factory.ops.base import Role
    from factory.problem import DType, Scalar

    sources = {f"check_{scalar.name}": check_source(scalar) for scalar in Scalar if scalar in
               (Scalar.F16, Scalar.BF16, Scalar.F32, Scalar.I8, Scalar.I32)}
    conv = "N=2,G=2,C=3,K=4,input=5x6,filter=3x3,stride=2,pad=1"
    cases = [(Op.CONV_BWD_WEIGHT, Layout.NHWGC, d, conv + ",alpha=0.5,beta=2")
             for d in (DType.FP16, DType.BF16, DType.BF16_FP32W, DType.FP32)]
    cases += [(Op.CONV_BWD_WEIGHT, Layout.NHWGC, d, conv + ",alpha=3,beta=-2") for d in (DType.INT8, DType.INT8_SAT)]
    cases += [(Op.CONV_BWD_DATA, Layout.NGCHW, d, conv)
              for d in (DType.FP16, DType.BF16, DType.FP32, DType.INT8, DType.INT8_SAT)]
    cases += [(Op.GROUPNORM_BWD, layout, d, "N=2,C=8,G=4,input=5x5")
              for layout in (Layout.NHWGC, Layout.NGCHW) for d in (DType.FP16, DType.BF16, DType.FP32)]
    cases += [(Op.DWSEP_CONV_FWD, layout, d, "N=2,C=8,K=4,input=5x5,filter=3x3,stride=1,pad=1")
              for layout in (Layout.NHWGC, Layout.NGCHW) for d in (DType.FP16, DType.BF16, DType.FP32)]
    for op, layout, dtype, spec in cases:
        solver = solver_for(op)
        problem = solver.parse_problem(spec, layout, dtype)
        outputs = [t for t in solver.tensors(problem) if t.role is Role.OUTPUT]
        sources[f"reference_{op.value}_{layout.value}_{dtype.value}"] = reference_source(
            solver.device_reference(problem), solver, problem, outputs)
    return sources


@needs_nvrtc
def test_nvrtc_compiles_the_runtime_s_own_kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFACTORY_CACHE_DIR", str(tmp_path / "cache"))
    sources = runtime_sources()
    outcomes = compile_many(BackendKind.CUDA, [CompileJob(k, v, CUDA_ARCH) for k, v in sources.items()], workers=WORKERS)
    failures = {k: first_lines(o.error) if o.error else "; ".join(binary_problems(o.binary, sources[k], EM_CUDA, CUDA_ARCH))
                for k, o in outcomes.items()}
    failures = {k: why for k, why in failures.items() if why}
    assert len(outcomes) == len(sources) and not failures, failure_report(failures, len(sources), "NVRTC, runtime kernels")


@needs_hipcc
def test_hipcc_compiles_the_runtime_s_own_kernels(tmp_path: Path) -> None:
    sources = runtime_sources()

    def build(item: tuple[str, str]) -> tuple[str, str | None]:
        name, source = item
        try:
            blob = compile_with_hipcc(source, HIP_ARCH, tmp_path / name)
        except BackendError as exc:
            return name, first_lines(getattr(exc, "log", "") or str(exc))
        return name, "; ".join(binary_problems(blob, source, EM_AMDGPU, HIP_ARCH)) or None

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        failures = {name: why for name, why in pool.map(build, sorted(sources.items())) if why}
    assert not failures, failure_report(failures, len(sources), f"hipcc {HIP_ARCH}, runtime kernels")


# --- the selection itself ----------------------------------------------------------------------------


def test_representatives_cover_each_cell_once_and_spread_tuning_points() -> None:
    instances = all_instances()
    reps = cell_representatives(instances)
    assert set(reps) == {cell_of(i) for i in instances}
    assert all(cell_of(inst) == cell for cell, inst in reps.items())
    assert cell_representatives(reversed(instances)) == reps, "the choice depends on catalog order"
    per_family: dict[tuple[str, str], set[str]] = defaultdict(set)
    for cell, inst in reps.items():
        per_family[cell[:2]].add(_tuning_key(inst))
    available: dict[tuple[str, str], set[str]] = defaultdict(set)
    cells: dict[tuple[str, str], set[Cell]] = defaultdict(set)
    for inst in instances:
        available[cell_of(inst)[:2]].add(_tuning_key(inst))
        cells[cell_of(inst)[:2]].add(cell_of(inst))
    # Spreading must reach a good share of the tuning points a family has (or of its cells, if fewer).
    thin = {f"{op}/{family}": (len(per_family[(op, family)]), len(available[(op, family)]))
            for op, family in available
            if len(per_family[(op, family)]) < min(len(available[(op, family)]), len(cells[(op, family)])) // 2}
    assert not thin, f"families whose compiled sample covers few tuning points (covered, available): {thin}"
    sample = hiprtc_sample(reps)
    assert {(i.op, i.family, i.dtype) for i in sample} == {(i.op, i.family, i.dtype) for i in instances}
