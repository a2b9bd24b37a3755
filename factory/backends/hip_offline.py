"""AMD compilation without a GPU: hipcc offline builds and an environment in which hiprtc loads.

hip-python opens hiprtc by the bare name ``libhiprtc.so``. Some installs (Debian's ROCm 5.2) ship
hiprtc inside ``libamdhip64`` and no such file, and the dynamic loader reads LD_LIBRARY_PATH only
when a process starts, so hiprtc users there must run in a child process started with
`hiprtc_env`.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from factory.backends.base import BackendError, CompileError

HIPCC_FLAGS: tuple[str, ...] = (
    "--cuda-device-only",  # no host object: only the GPU code matters
    "--no-gpu-bundle-output",  # a plain code object (hsaco), as hiprtc gives
    "-O3",
    "-std=c++17",
    "-Wno-pragma-once-outside-header",  # the prelude is inlined into the main file
)
HIPCC_TIMEOUT_S = 300

_LIBRARY_DIRS: tuple[str, ...] = (
    "/opt/rocm/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
)


def hipcc_available() -> bool:
    """Whether an offline HIP compiler is on PATH."""
    return shutil.which("hipcc") is not None


def compile_with_hipcc(
    source: str,
    arch: str = "gfx90a",
    workdir: str | os.PathLike[str] | None = None,
    options: Sequence[str] = (),
) -> bytes:
    """Build `source` into a device code object for `arch` with hipcc; no GPU needed.

    hipcc picks NVIDIA when it finds nvcc, so the AMD platform is forced.
    """
    hipcc = shutil.which("hipcc")
    if hipcc is None:
        raise BackendError("hipcc not found on PATH")
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="kf-hipcc-") as tmp:
            return compile_with_hipcc(source, arch, tmp, options)
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    src, out = work / "kernel.hip", work / "kernel.hsaco"
    src.write_text(source)
    cmd = [hipcc, f"--offload-arch={arch}", *HIPCC_FLAGS, *options, "-c", "-o", str(out), str(src)]
    env = {**os.environ, "HIP_PLATFORM": "amd"}
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HIPCC_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise CompileError(f"hipcc for {arch} timed out after {HIPCC_TIMEOUT_S} s") from exc
    if proc.returncode != 0 or not out.is_file():
        raise CompileError(f"hipcc for {arch} failed (exit {proc.returncode})", proc.stderr)
    return out.read_bytes()


def _exports_hiprtc(path: Path) -> bool:
    try:
        return hasattr(ctypes.CDLL(str(path)), "hiprtcCreateProgram")
    except OSError:
        return False


def find_hiprtc_library(search: Sequence[str] | None = None) -> Path | None:
    """The shared library that provides the hiprtc API: libhiprtc itself, else libamdhip64."""
    dirs = list(search) if search is not None else _default_search_dirs()
    for pattern in ("libhiprtc.so*", "libamdhip64.so*"):
        for d in dirs:
            for candidate in sorted(Path(d).glob(pattern)):
                if candidate.name.startswith("libhiprtc-builtins"):
                    continue
                if candidate.is_file() and _exports_hiprtc(candidate):
                    return candidate.resolve()
    return None


def _default_search_dirs() -> list[str]:
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    rocm = os.environ.get("ROCM_PATH")
    if rocm:
        dirs.append(os.path.join(rocm, "lib"))
    return dirs + list(_LIBRARY_DIRS)


def hiprtc_env(
    tmpdir: str | os.PathLike[str], base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """An environment for a child process in which hip-python's hiprtc loads.

    Links ``<tmpdir>/hiprtc-lib/libhiprtc.so`` to the library that provides hiprtc and puts
    that directory first on LD_LIBRARY_PATH.
    """
    target = find_hiprtc_library()
    if target is None:
        raise BackendError("no library providing hiprtc (libhiprtc or libamdhip64) was found")
    libdir = Path(tmpdir) / "hiprtc-lib"
    libdir.mkdir(parents=True, exist_ok=True)
    link = libdir / "libhiprtc.so"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)
    env = dict(os.environ if base is None else base)
    previous = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(libdir), previous) if p)
    return env
