"""AMD backend without an AMD GPU: offline builds of the prelude, hiprtc in a child process, and
clean failures where hip-python, ROCm or a device is missing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from factory.backends.base import BackendError, CompileError
from factory.backends.hip_offline import (
    compile_with_hipcc,
    find_hiprtc_library,
    hipcc_available,
    hiprtc_env,
)

REPO = Path(__file__).resolve().parents[1]
PRELUDE = REPO / "templates" / "common" / "prelude.h"

# Exercises what the templates lean on: both 16-bit types, conversions, vector loads, shared
# memory, barriers and float atomics.
KERNEL = r"""
extern "C" __global__ void kf_probe(const f16_t* __restrict__ x, const bf16_t* __restrict__ w,
                                    bf16_t* __restrict__ y, float* __restrict__ total, int n) {
  __shared__ float partial[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  if (4 * i + 3 < n) {
    kf_vec<f16_t, 4> v = *reinterpret_cast<const kf_vec<f16_t, 4>*>(x + 4 * i);
    for (int k = 0; k < 4; ++k) acc += kf_to_float(v.v[k]) * kf_to_float(w[4 * i + k]);
    y[i] = kf_from_float<bf16_t>(acc);
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (unsigned k = 0; k < blockDim.x; ++k) s += partial[k];
    atomicAdd(total, s);
  }
}
"""
BROKEN = 'extern "C" __global__ void broken(float* x) { x[0] = 1.0f }\n'
SYNTAX_ERROR = "expected ';'"

# hipcc pulls in <stdint.h>, whose int64_t is `long`; the prelude's own typedefs must step aside.
STDINT_ANCHOR = "  #include <hip/hip_fp16.h>\n"
STDINT_FIX = STDINT_ANCHOR + "  #define KF_HAVE_STDINT 1\n"
STDINT_CLASH = "typedef redefinition with different types"

ELF_MAGIC = b"\x7fELF"
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"

needs_hipcc = pytest.mark.skipif(not hipcc_available(), reason="hipcc is not on PATH")
needs_hip_python = pytest.mark.skipif(
    importlib.util.find_spec("hip") is None, reason="hip-python is not installed"
)


def kernel_source(prelude: str | None = None) -> str:
    """What the renderer emits: the prelude inlined, then the kernel."""
    return (PRELUDE.read_text() if prelude is None else prelude) + KERNEL


def is_code_object(blob: bytes) -> bool:
    return blob.startswith(ELF_MAGIC) or blob.startswith(BUNDLE_MAGIC)


# --- hipcc, offline -------------------------------------------------------------------------------


@needs_hipcc
def test_hipcc_compiles_prelude_and_kernel(tmp_path: Path) -> None:
    try:
        blob = compile_with_hipcc(kernel_source(), "gfx90a", tmp_path)
    except CompileError as exc:
        if STDINT_CLASH in exc.log and "int64_t" in exc.log:
            pytest.xfail("prelude.h redefines int64_t under hipcc; needs KF_HAVE_STDINT there")
        raise
    assert blob and is_code_object(blob)


@needs_hipcc
def test_hipcc_compiles_with_stdint_fix(tmp_path: Path) -> None:
    prelude = PRELUDE.read_text()
    if STDINT_FIX in prelude:
        pytest.skip("prelude.h already carries the fix; covered by the test above")
    if STDINT_ANCHOR not in prelude:
        pytest.skip("prelude.h changed shape; the local fix no longer applies")
    patched = tmp_path / "prelude.h"
    patched.write_text(prelude.replace(STDINT_ANCHOR, STDINT_FIX, 1))
    blob = compile_with_hipcc(kernel_source(patched.read_text()), "gfx90a", tmp_path / "build")
    assert blob.startswith(ELF_MAGIC)


@needs_hipcc
def test_hipcc_syntax_error_is_compile_error(tmp_path: Path) -> None:
    with pytest.raises(CompileError) as info:
        compile_with_hipcc(BROKEN, "gfx90a", tmp_path)
    assert SYNTAX_ERROR in info.value.log


# --- hiprtc, in a child process whose loader can find libhiprtc.so ---------------------------------

RTC_SCRIPT = r"""
import json, sys
from factory.backends.base import CompileError
from factory.backends.hip import HipBackend, compile_hip

source, arch = open(sys.argv[1]).read(), sys.argv[2]
# compile needs no device context: a backend that never touched a device must compile too.
bare = HipBackend.__new__(HipBackend)
try:
    direct = compile_hip(source, arch)
    via_backend = bare.compile(source, arch)
except CompileError as exc:
    print(json.dumps({"error": type(exc).__name__, "log": exc.log, "message": str(exc)}))
    sys.exit(0)
print(json.dumps({
    "sizes": [len(direct.binary), len(via_backend.binary)],
    "magic": [direct.binary[:24].hex(), via_backend.binary[:24].hex()],
    "arch": direct.arch,
    "compiler_version": bare.compiler_version(),
    "binary_version": direct.compiler_version,
}))
"""


def run_hiprtc(tmp_path: Path, source: str, arch: str) -> dict:
    if find_hiprtc_library() is None:
        pytest.skip("no libhiprtc or libamdhip64 providing hiprtc is installed")
    env = hiprtc_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    src = tmp_path / "kernel.hip"
    src.write_text(source)
    proc = subprocess.run(
        [sys.executable, "-c", RTC_SCRIPT, str(src), arch],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_hip_python
@pytest.mark.parametrize("arch", ["gfx90a", "gfx908"])
def test_hiprtc_compiles_prelude_and_kernel(tmp_path: Path, arch: str) -> None:
    result = run_hiprtc(tmp_path, kernel_source(), arch)
    assert "error" not in result, result.get("message")
    assert all(size > 0 for size in result["sizes"])
    assert all(is_code_object(bytes.fromhex(m)) for m in result["magic"])
    assert result["arch"] == arch
    assert result["compiler_version"].startswith("hiprtc ")
    assert result["binary_version"] == result["compiler_version"]


@needs_hip_python
def test_hiprtc_syntax_error_is_compile_error(tmp_path: Path) -> None:
    result = run_hiprtc(tmp_path, BROKEN, "gfx90a")
    assert result.get("error") == "CompileError"
    assert SYNTAX_ERROR in result["log"]
    assert "HIPRTC_ERROR_COMPILATION" in result["message"]


def test_hiprtc_env_links_the_provider(tmp_path: Path) -> None:
    target = find_hiprtc_library()
    if target is None:
        pytest.skip("no libhiprtc or libamdhip64 providing hiprtc is installed")
    env = hiprtc_env(tmp_path, base={"LD_LIBRARY_PATH": "/elsewhere"})
    libdir = tmp_path / "hiprtc-lib"
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [str(libdir), "/elsewhere"]
    assert (libdir / "libhiprtc.so").resolve() == target


# --- missing pieces fail as BackendError ----------------------------------------------------------

WITHOUT_HIP_PYTHON = r"""
import sys
sys.modules["hip"] = None  # as if hip-python were not installed
import factory.backends.hip as backend
from factory.backends.base import BackendError
for attempt in (backend.HipBackend, lambda: backend.compile_hip("", "gfx90a")):
    try:
        attempt()
    except BackendError as exc:
        print("BackendError:", str(exc).splitlines()[0])
"""


def test_module_imports_and_fails_cleanly_without_hip_python() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_HIP_PYTHON],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    assert all("hip-python is not installed" in line for line in lines)


def test_module_import_loads_no_runtime() -> None:
    code = "import sys, factory.backends.hip; print('hip' in sys.modules)"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


@needs_hip_python
def test_backend_without_device_raises_backend_error() -> None:
    from factory.backends.hip import HipBackend

    try:
        HipBackend()
    except BackendError as exc:
        assert "hip" in str(exc).lower()
    else:
        pytest.skip("a HIP device is present")


# --- argument packing (no device): the parameter block hipModuleLaunchKernel gets ---------------------


def test_hip_parameter_block_lays_out_structs_and_scalars_as_the_kernel_reads_them() -> None:
    """A struct then two ints, as `kf_main(const kf_conv_args a, int split_stride, int rows)` takes them:
    each at its C offset (the struct 8-aligned at 0, the ints right after it), pointers rebound in the
    packed values reach the block at the next refresh."""
    import ctypes

    from factory import abi
    from factory.backends.hip import pack_frame
    from factory.ops.base import I32, Buf, Struct

    args = (Struct("kf_probe_args", (("p", Buf("x")), ("n", I32(7)), ("m", I32(9)), ("q", I32(11)))), I32(5), I32(6))
    packed = abi.pack(args)
    prepared = pack_frame(packed.values)
    raw = lambda: bytes(ctypes.string_at(ctypes.addressof(prepared.frame), ctypes.sizeof(prepared.frame)))
    assert ctypes.sizeof(prepared.frame) == 32  # the struct: 8 + 3*4 bytes padded to 24; the ints at 24 and 28
    expected = (0).to_bytes(8, "little") + b"".join(v.to_bytes(4, "little") for v in (7, 9, 11)) + bytes(4)
    expected += (5).to_bytes(4, "little") + (6).to_bytes(4, "little")
    assert raw() == expected
    packed.bind({"x": 0x1234_5678_9ABC})
    prepared.refresh()
    assert raw()[:8] == (0x1234_5678_9ABC).to_bytes(8, "little")
