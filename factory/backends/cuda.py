"""NVIDIA backend: NVRTC compiles the HIP-spelled source (through the prelude's CUDA branch) to a
cubin for the device's exact arch; the driver API loads and launches it on the caller's stream.

Cubin, not PTX: a driver older than the compiler cannot JIT newer PTX, but loads its cubin.
cuda-python is imported lazily so the package imports on machines without it.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from .base import BackendError, BackendKind, CompiledBinary, CompileError, DeviceInfo, KernelArg

if TYPE_CHECKING:
    from ..ops.base import TensorMap


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise BackendError("the cuda backend needs cuda-python: pip install 'kernel-factory[cuda]'") from exc
    return nvrtc


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError as exc:  # pragma: no cover
        raise BackendError("the cuda backend needs cuda-python: pip install 'kernel-factory[cuda]'") from exc
    return driver


# Errors after which the context is unusable ("the process must terminate and relaunch", as the CUDA
# documentation puts it): every later call in this process returns the same error.
STICKY_ERRORS = frozenset({
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_ECC_UNCORRECTABLE",
})


def _check(result: Any, what: str) -> Any:
    """cuda-python returns (status, *values); raise on a non-success status, else return the values."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        sticky = getattr(status, "name", "") in STICKY_ERRORS
        raise BackendError(f"{what} failed: {_error_text(status)}", sticky=sticky)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _error_text(status: Any) -> str:
    name = getattr(status, "name", str(status))
    try:
        driver = _driver()
        if isinstance(status, driver.CUresult):
            err, text = driver.cuGetErrorString(status)
            if int(err) == 0 and text:
                return f"{name} ({text.decode()})"
    except Exception:  # noqa: BLE001 - best-effort decoration of an error already being raised
        pass
    return name


@lru_cache(maxsize=1)
def cuda_include_dir() -> str | None:
    """Where cuda_fp16.h lives: $KFACTORY_CUDA_INCLUDE, the cudart wheel's headers, or the toolkit's."""
    env = os.environ.get("KFACTORY_CUDA_INCLUDE")
    if env:
        return env
    try:
        from cuda import pathfinder

        found = pathfinder.find_nvidia_header_directory("cudart")
        if found:
            return str(found)
    except Exception:  # noqa: BLE001 - fall through to the toolkit locations
        pass
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and os.path.isfile(os.path.join(candidate, "include", "cuda_fp16.h")):
            return os.path.join(candidate, "include")
    return None


def nvrtc_version() -> str:
    major, minor = _check(_nvrtc().nvrtcVersion(), "nvrtcVersion")
    return f"nvrtc {major}.{minor}"


def compile_cuda(source: str, arch: str, options: Sequence[str] = ()) -> CompiledBinary:
    """Compile to a cubin for `arch` (e.g. "sm_90"); needs no GPU, so it runs in worker processes."""
    nvrtc = _nvrtc()
    include = cuda_include_dir()
    if include is None:
        raise CompileError(
            "cannot find the CUDA headers (cuda_fp16.h): install nvidia-cuda-runtime headers, "
            "or set KFACTORY_CUDA_INCLUDE to a CUDA include directory"
        )
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], []), "nvrtcCreateProgram")
    try:
        # ptxas -v: the log reports registers, spills and shared memory per kernel (factory.kernel_resources).
        opts = [f"--gpu-architecture={arch}", "-std=c++17", f"-I{include}", "-default-device", "--ptxas-options=-v",
                *options]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = _program_log(nvrtc, prog)
        if int(status) != 0:
            raise CompileError(f"NVRTC failed for {arch}: {status.name}", log)
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        buf = bytearray(size)  # NVRTC writes here: never into a bytes object (see _program_log)
        _check(nvrtc.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
        return CompiledBinary(bytes(buf), arch, nvrtc_version(), log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _program_log(nvrtc: Any, prog: Any) -> str:
    size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    # A fresh, writable buffer: an empty log has size 1, and `b" " * 1` is CPython's shared one-byte
    # object, which NVRTC's terminating NUL would overwrite for the whole process.
    buf = bytearray(size)
    _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return bytes(buf).rstrip(b"\x00 ").decode(errors="replace")


@dataclass(frozen=True)
class PreparedArgs:
    """Kernel arguments packed for cuLaunchKernel: the ctypes values, the array of their addresses and
    that array's own address (what cuLaunchKernel takes)."""

    values: list
    addresses: np.ndarray
    pointer: int


@dataclass(frozen=True)
class CudaKernel:
    name: str
    module: Any
    function: Any
    handle: int  # the CUfunction as an integer, for the direct libcuda calls


@dataclass(frozen=True)
class _HotPath:
    """cuLaunchKernel, cuLaunchCooperativeKernel, cuLaunchKernelEx and cuMemsetD8Async called straight from libcuda
    through ctypes: about a microsecond each from Python, a fraction of the generic bindings' cost, and Kernel.run
    sits on the caller's hot path. Errors still go through the bindings' error classification."""

    launch: Any
    memset: Any
    launch_cooperative: Any
    launch_ex: Any  # None in a driver without cuLaunchKernelEx (before CUDA 12)


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute (cuda.h): the attribute's id, padding to 8 bytes, a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h), what cuLaunchKernelEx takes."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("count", ctypes.c_uint)]


_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: value 1 allows it
_EARLY_START = _LaunchAttribute(_PROGRAMMATIC_STREAM_SERIALIZATION, b"", (ctypes.c_int * 16)(1))


@lru_cache(maxsize=256)
def _early_config(grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int,
                  stream: int) -> "ctypes._Pointer[_LaunchConfig]":
    """An early-start launch's CUlaunchConfig, made once per geometry and stream (Kernel.run's hot path)."""
    config = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared_bytes, stream or None,
                           ctypes.pointer(_EARLY_START), 1)
    return ctypes.pointer(config)


@lru_cache(maxsize=1)
def _libcuda() -> ctypes.CDLL | None:
    """The driver library opened by name for direct calls, or None where it cannot be."""
    try:
        return ctypes.CDLL("nvcuda.dll" if os.name == "nt" else "libcuda.so.1")
    except OSError:
        return None


@lru_cache(maxsize=1)
def _hot_path() -> _HotPath | None:
    """None where libcuda cannot be opened by name (the bindings' calls are used instead)."""
    lib = _libcuda()
    try:
        launch, memset, cooperative = lib.cuLaunchKernel, lib.cuMemsetD8Async, lib.cuLaunchCooperativeKernel
    except AttributeError:  # no library (None), or one without these entry points
        return None
    u32, ptr = ctypes.c_uint, ctypes.c_void_p
    launch.argtypes = [ptr, u32, u32, u32, u32, u32, u32, u32, ptr, ptr, ptr]
    launch.restype = ctypes.c_int
    memset.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t, ptr]
    memset.restype = ctypes.c_int
    cooperative.argtypes = [ptr, u32, u32, u32, u32, u32, u32, u32, ptr, ptr]
    cooperative.restype = ctypes.c_int
    launch_ex = getattr(lib, "cuLaunchKernelEx", None)
    if launch_ex is not None:
        launch_ex.argtypes = [ctypes.POINTER(_LaunchConfig), ptr, ptr, ptr]
        launch_ex.restype = ctypes.c_int
    return _HotPath(launch, memset, cooperative, launch_ex)


# cuTensorMapEncodeTiled's enums (cuda.h): an unsigned type of the element's width (the copy moves bits),
# 128-byte swizzle, L2 promotion of 256 bytes, zeros past the tensor's edge.
_MAP_DATA_TYPE = {1: 0, 2: 1, 4: 2, 8: 4}
_MAP_SWIZZLE_128B, _MAP_L2_PROMOTION_256B, _MAP_INTERLEAVE_NONE, _MAP_OOB_ZEROS = 3, 3, 0, 0


@lru_cache(maxsize=1)
def _tensor_map_encoder() -> Any:
    """cuTensorMapEncodeTiled from libcuda: a host-side call, made whenever a tensor map's buffer is bound."""
    try:
        encode = _libcuda().cuTensorMapEncodeTiled
    except AttributeError:  # no library (None), or a driver older than CUDA 12
        raise BackendError("cuTensorMapEncodeTiled is not in this driver (CUDA 12 or newer, sm_90)") from None
    u32, ptr = ctypes.c_uint32, ctypes.c_void_p
    encode.argtypes = [ptr, ctypes.c_int, u32, ptr, ptr, ptr, ptr, ptr, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int]
    encode.restype = ctypes.c_int
    return encode


def _map_shape(tmap: "TensorMap") -> tuple[int, int]:
    """cuTensorMapEncodeTiled's data type and rank of `tmap`."""
    if tmap.element_bytes not in _MAP_DATA_TYPE:
        raise BackendError(f"a tensor map of {tmap.element_bytes}-byte elements")
    return _MAP_DATA_TYPE[tmap.element_bytes], len(tmap.dims)


@lru_cache(maxsize=256)
def _map_geometry(tmap: "TensorMap") -> tuple[Any, Any, Any, Any]:
    """cuTensorMapEncodeTiled's dims, strides, box and element steps of `tmap`, as the ctypes arrays it reads."""
    rank = len(tmap.dims)
    return ((ctypes.c_uint64 * rank)(*tmap.dims), (ctypes.c_uint64 * max(1, rank - 1))(*tmap.strides),
            (ctypes.c_uint32 * rank)(*tmap.box), (ctypes.c_uint32 * rank)(*[1] * rank))


def device_count() -> int:
    """CUDA devices this process sees (after CUDA_VISIBLE_DEVICES); creates no context."""
    return _initialised_count(_driver())


def _initialised_count(driver: Any) -> int:
    """cuInit, then the number of devices: a one-line BackendError when the driver is missing."""
    try:
        _check(driver.cuInit(0), "cuInit")
    except BackendError:
        raise
    except RuntimeError as exc:  # cuda-python raises its own error when libcuda is not installed
        raise BackendError(f"cuInit failed: {exc}") from None
    return int(_check(driver.cuDeviceGetCount(), "cuDeviceGetCount"))


class CudaBackend:
    """One device (ordinal `device`), its primary context (the one PyTorch and CuPy use)."""

    kind = BackendKind.CUDA
    device_checks = True  # runs the tuner's own check kernels (factory/device_check.py)

    def __init__(self, device: int = 0) -> None:
        driver = _driver()
        count = _initialised_count(driver)
        if device >= count:
            raise BackendError(f"CUDA device {device} requested, {count} present")
        self._driver = driver
        self._ordinal = device
        self._device = _check(driver.cuDeviceGet(device), "cuDeviceGet")
        self._context = _check(driver.cuDevicePrimaryCtxRetain(self._device), "cuDevicePrimaryCtxRetain")
        self._make_current()
        self._info: DeviceInfo | None = None
        self._optin_shared: int | None = None  # the device's per-block shared-memory limit once raised
        # One module per binary in this context: a binary's entry points share it.
        self._modules: dict[bytes, Any] = {}

    @property
    def ordinal(self) -> int:
        """This device's number in this process, as PyTorch's `cuda:N` numbers it too."""
        return self._ordinal

    def _make_current(self) -> None:
        _check(self._driver.cuCtxSetCurrent(self._context), "cuCtxSetCurrent")

    def _attr(self, attribute: Any) -> int:
        return int(_check(self._driver.cuDeviceGetAttribute(attribute, self._device), "cuDeviceGetAttribute"))

    def device_info(self) -> DeviceInfo:
        if self._info is None:
            d = self._driver
            attrs = d.CUdevice_attribute
            major = self._attr(attrs.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            minor = self._attr(attrs.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
            sms = self._attr(attrs.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            name = _check(d.cuDeviceGetName(256, self._device), "cuDeviceGetName")
            driver_version = int(_check(d.cuDriverGetVersion(), "cuDriverGetVersion"))
            self._info = DeviceInfo(
                backend=BackendKind.CUDA,
                arch=f"sm_{major}{minor}",
                name=name.split(b"\x00")[0].decode(),
                sm_count=sms,
                driver_version=f"{driver_version // 1000}.{(driver_version % 1000) // 10}",
                compiler_version=self.compiler_version(),
            )
        return self._info

    def worker_factory(self) -> Callable[[], "CudaBackend"]:
        """Rebuilds this backend on the same device ordinal in a worker process."""
        return functools.partial(CudaBackend, self._ordinal)

    def compiler_version(self) -> str:
        return nvrtc_version()

    def compile(self, source: str, arch: str, options: Sequence[str] = ()) -> CompiledBinary:
        return compile_cuda(source, arch, options)

    def load(self, binary: bytes, kernel_name: str) -> CudaKernel:
        self._make_current()
        module = self._modules.get(binary)
        if module is None:
            module = self._modules[binary] = _check(self._driver.cuModuleLoadData(binary), "cuModuleLoadData")
        function = _check(self._driver.cuModuleGetFunction(module, kernel_name.encode()), "cuModuleGetFunction")
        self._allow_optin_shared(function)
        return CudaKernel(kernel_name, module, function, int(function))

    def _allow_optin_shared(self, function: Any) -> None:
        """Raise the kernel's dynamic shared-memory cap from the 48 KiB default to what the device allows
        a block (227 KiB on Hopper) less the kernel's static shared memory; launches still ask per call."""
        d = self._driver
        if self._optin_shared is None:
            self._optin_shared = self._attr(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        attrs = d.CUfunction_attribute
        static = int(_check(d.cuFuncGetAttribute(attrs.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function), "cuFuncGetAttribute"))
        room = self._optin_shared - static
        if room > 0:
            _check(d.cuFuncSetAttribute(function, attrs.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, room),
                   "cuFuncSetAttribute")

    def launch(
        self,
        kernel: CudaKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[KernelArg],
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None:
        self.launch_prepared(kernel, grid, block, self.prepare_args(args), shared_bytes, stream)

    def prepare_args(self, args: Sequence[KernelArg]) -> "PreparedArgs":
        """cuLaunchKernel reads each parameter, a by-value struct included, from the address given for it."""
        values = list(args)
        addresses = np.array([ctypes.addressof(a) for a in values], dtype=np.uint64)
        return PreparedArgs(values, addresses, addresses.ctypes.data)

    def launch_prepared(
        self,
        kernel: CudaKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        prepared: "PreparedArgs",
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None:
        self._launch(kernel, grid, block, prepared, shared_bytes, stream, cooperative=False)

    def launch_cooperative(
        self,
        kernel: CudaKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        prepared: "PreparedArgs",
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None:
        self._launch(kernel, grid, block, prepared, shared_bytes, stream, cooperative=True)

    def launch_early(
        self,
        kernel: CudaKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        prepared: "PreparedArgs",
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None:
        """cuLaunchKernelEx with programmatic stream serialisation allowed: the blocks may be placed once every
        block of the previous launch has started (and called griddepcontrol.launch_dependents) and wait for it
        themselves (templates/common/pdl.h). A plain launch where libcuda's entry point is not at hand."""
        hot = _hot_path()
        if hot is None or hot.launch_ex is None:
            self._launch(kernel, grid, block, prepared, shared_bytes, stream, cooperative=False)
            return
        status = hot.launch_ex(_early_config(grid, block, shared_bytes, stream), kernel.handle, prepared.pointer, None)
        if status != 0:
            _check((self._driver.CUresult(status),), f"cuLaunchKernelEx({kernel.name})")

    def _launch(self, kernel: CudaKernel, grid: tuple[int, int, int], block: tuple[int, int, int],
                prepared: "PreparedArgs", shared_bytes: int, stream: int, cooperative: bool) -> None:
        """cuLaunchKernel, or cuLaunchCooperativeKernel (which takes no `extra`), from libcuda where it opens."""
        call = "cuLaunchCooperativeKernel" if cooperative else "cuLaunchKernel"
        hot = _hot_path()
        if hot is not None:
            args = (kernel.handle, *grid, *block, shared_bytes, stream or None, prepared.pointer)
            status = hot.launch_cooperative(*args) if cooperative else hot.launch(*args, None)
            if status != 0:
                _check((self._driver.CUresult(status),), f"{call}({kernel.name})")
            return
        extra = () if cooperative else (0,)
        status = getattr(self._driver, call)(kernel.function, *grid, *block, shared_bytes, stream, prepared.pointer,
                                             *extra)
        if int(status[0]) != 0:
            _check(status, f"{call}({kernel.name})")

    def alloc(self, nbytes: int) -> int:
        self._make_current()
        return int(_check(self._driver.cuMemAlloc(max(nbytes, 1)), "cuMemAlloc"))

    def free(self, ptr: int) -> None:
        _check(self._driver.cuMemFree(ptr), "cuMemFree")

    def memset_async(self, ptr: int, byte: int, nbytes: int, stream: int = 0) -> None:
        hot = _hot_path()
        if hot is not None:
            status = hot.memset(ptr, byte, nbytes, stream or None)
            if status != 0:
                _check((self._driver.CUresult(status),), "cuMemsetD8Async")
            return
        _check(self._driver.cuMemsetD8Async(ptr, byte, nbytes, stream), "cuMemsetD8Async")

    def encode_tensor_map(self, at: int, tmap: "TensorMap", address: int) -> None:
        """The CUtensorMap of `tmap` over the buffer at `address`, written to the 64-byte aligned `at` (on the
        caller's path whenever a plan is bound to new buffers: the shape's arrays are made once)."""
        status = _tensor_map_encoder()(at, *_map_shape(tmap), address, *_map_geometry(tmap), _MAP_INTERLEAVE_NONE,
                                       _MAP_SWIZZLE_128B, _MAP_L2_PROMOTION_256B, _MAP_OOB_ZEROS)
        if status != 0:
            _check((self._driver.CUresult(status),), f"cuTensorMapEncodeTiled({tmap})")

    def copy_to_device(self, ptr: int, data: bytes | memoryview) -> None:
        data = bytes(data)
        _check(self._driver.cuMemcpyHtoD(ptr, data, len(data)), "cuMemcpyHtoD")

    def copy_from_device(self, ptr: int, nbytes: int) -> bytes:
        out = bytearray(nbytes)
        host = (ctypes.c_char * nbytes).from_buffer(out)
        _check(self._driver.cuMemcpyDtoH(host, ptr, nbytes), "cuMemcpyDtoH")
        return bytes(out)

    def event_create(self) -> int:
        return _check(self._driver.cuEventCreate(0), "cuEventCreate")

    def event_record(self, event: Any, stream: int = 0) -> None:
        _check(self._driver.cuEventRecord(event, stream), "cuEventRecord")

    def event_elapsed_ms(self, start: Any, end: Any) -> float:
        _check(self._driver.cuEventSynchronize(end), "cuEventSynchronize")
        return float(_check(self._driver.cuEventElapsedTime(start, end), "cuEventElapsedTime"))

    def event_destroy(self, event: Any) -> None:
        _check(self._driver.cuEventDestroy(event), "cuEventDestroy")

    def synchronize(self, stream: int = 0) -> None:
        if stream:
            _check(self._driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
        else:
            _check(self._driver.cuCtxSynchronize(), "cuCtxSynchronize")
