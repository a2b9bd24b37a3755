"""AMD backend: hiprtc for compilation, the HIP module API for loading and launching.

Both come from hip-python (``from hip import hip, hiprtc``), imported only when first needed so
that this module imports on machines without ROCm or hip-python. hip-python reports a missing
shared library as RuntimeError when a function is first called; that and every non-success
status become BackendError here.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Sequence

from factory.backends.base import (
    BackendError,
    BackendKind,
    CompiledBinary,
    CompileError,
    DeviceInfo,
    KernelArg,
)

# Placed before caller options so that callers can override them.
DEFAULT_OPTIONS: tuple[str, ...] = (
    "-O3",
    "-std=c++17",
    "-Wno-pragma-once-outside-header",  # the prelude is inlined into the main file
)
PROGRAM_NAME = b"kernel.hip"
_ARG_TYPES = (ctypes.c_uint64, ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.Structure)


# Errors after which the device context is unusable for the rest of the process.
STICKY_ERRORS = frozenset({
    "hipErrorIllegalAddress",
    "hipErrorLaunchFailure",
    "hipErrorLaunchTimeOut",
    "hipErrorAssert",
    "hipErrorECCNotCorrectable",
})

_NO_HIP_PYTHON = "hip-python is not installed (pip install 'kernel-factory[hip]')"


def _runtime() -> ModuleType:
    try:
        from hip import hip
    except ImportError as exc:
        raise BackendError(f"{_NO_HIP_PYTHON}: {exc}") from exc
    return hip


def _rtc() -> ModuleType:
    try:
        from hip import hiprtc
    except ImportError as exc:
        raise BackendError(f"{_NO_HIP_PYTHON}: {exc}") from exc
    return hiprtc


def _status_text(status: Any) -> str:
    """'hipErrorNoDevice: no ROCm-capable device is detected', best effort."""
    name = getattr(status, "name", str(status))
    try:
        if name.startswith("HIPRTC"):
            (text,) = _rtc().hiprtcGetErrorString(status)
        else:
            _, text = _runtime().hipGetErrorString(status)
        text = str(text) if text is not None else ""
    except Exception:  # the message is a courtesy; the name is what matters
        text = ""
    return f"{name}: {text}" if text and text != name else name


def _call(what: str, fn: Callable[..., tuple], *args: Any) -> Any:
    """Run one hip-python call; return its outputs, raise BackendError on any failure."""
    try:
        status, *outputs = fn(*args)
    except BackendError:
        raise
    except RuntimeError as exc:  # hip-python could not open the library or find the symbol
        raise BackendError(f"{what}: {exc}") from exc
    if int(status) != 0:  # hipSuccess and HIPRTC_SUCCESS are both 0
        sticky = getattr(status, "name", "") in STICKY_ERRORS
        raise BackendError(f"{what} failed: {_status_text(status)}", sticky=sticky)
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def hiprtc_version() -> str:
    """The runtime compiler's version, part of every tuning key."""
    major, minor = _call("hiprtcVersion", _rtc().hiprtcVersion)
    return f"hiprtc {major}.{minor}"


def _program_log(hiprtc: ModuleType, prog: Any) -> str:
    size = _call("hiprtcGetProgramLogSize", hiprtc.hiprtcGetProgramLogSize, prog)
    if not size:
        return ""
    log = bytearray(size)
    _call("hiprtcGetProgramLog", hiprtc.hiprtcGetProgramLog, prog, log)
    return log.decode(errors="replace").rstrip("\x00")


def compile_hip(source: str, arch: str, options: tuple[str, ...] = ()) -> CompiledBinary:
    """Compile HIP source to a code object with hiprtc; needs no device, so workers can call it."""
    hiprtc = _rtc()
    version = hiprtc_version()
    prog = _call(
        "hiprtcCreateProgram", hiprtc.hiprtcCreateProgram, source.encode(), PROGRAM_NAME, 0, [], []
    )
    try:
        flags = [f"--offload-arch={arch}", *DEFAULT_OPTIONS, *options]
        encoded = [f.encode() for f in flags]
        (status,) = hiprtc.hiprtcCompileProgram(prog, len(encoded), encoded)
        log = _program_log(hiprtc, prog)
        if int(status) != 0:
            raise CompileError(f"hiprtc compile for {arch} failed: {_status_text(status)}", log)
        size = _call("hiprtcGetCodeSize", hiprtc.hiprtcGetCodeSize, prog)
        code = bytearray(size)
        _call("hiprtcGetCode", hiprtc.hiprtcGetCode, prog, code)
    finally:
        hiprtc.hiprtcDestroyProgram(prog.createRef())
    if not code:
        raise CompileError(f"hiprtc compile for {arch} produced no code object", log)
    return CompiledBinary(binary=bytes(code), arch=arch, compiler_version=version, log=log)


@dataclass(frozen=True)
class HipKernel:
    """A kernel resolved in a loaded module; the module handle keeps it alive."""

    name: str
    module: Any = field(repr=False)
    function: Any = field(repr=False)


def _check_args(args: Sequence[KernelArg]) -> tuple[KernelArg, ...]:
    # A bare Python int would be packed as a pointer, silently wrong for 32-bit parameters.
    for i, arg in enumerate(args):
        if not isinstance(arg, _ARG_TYPES):
            kind = type(arg).__name__
            raise TypeError(f"kernel argument {i} is {kind}, expected a ctypes scalar or Structure")
    return tuple(args)


@dataclass(frozen=True)
class PreparedArgs:
    """The kernel's parameter block: a ctypes.Structure with one field per argument, so each sits at
    its C offset (natural alignment, as the kernarg segment lays parameters out); `copies` refresh it
    from the argument values, whose pointers may be rebound between launches."""

    values: tuple[KernelArg, ...]
    frame: ctypes.Structure
    copies: tuple[tuple[int, int, int], ...]  # (frame address, value address, bytes)

    def refresh(self) -> None:
        for dst, src, size in self.copies:
            ctypes.memmove(dst, src, size)


def pack_frame(args: Sequence[KernelArg]) -> PreparedArgs:
    """The parameter block for `args` (hip-python's own packing aligns a struct by its size, capped at
    8 bytes, not by its alignment; one Structure at offset 0 is copied byte for byte)."""
    values = _check_args(args)
    frame_type = type("kf_params", (ctypes.Structure,),
                      {"_fields_": [(f"p{i}", type(v)) for i, v in enumerate(values)]})
    frame = frame_type()
    base = ctypes.addressof(frame)
    copies = tuple((base + getattr(frame_type, f"p{i}").offset, ctypes.addressof(v), ctypes.sizeof(v))
                   for i, v in enumerate(values))
    prepared = PreparedArgs(values, frame, copies)
    prepared.refresh()
    return prepared


def device_count() -> int:
    """HIP devices this process sees (after HIP_VISIBLE_DEVICES)."""
    hip = _runtime()
    return int(_call("hipGetDeviceCount", hip.hipGetDeviceCount))


class HipBackend:
    """The Backend protocol on one AMD GPU through hip-python."""

    kind = BackendKind.HIP
    device_checks = True  # runs the tuner's own check kernels (factory/device_check.py)

    def __init__(self, device: int = 0) -> None:
        hip = _runtime()
        count = _call("hipGetDeviceCount", hip.hipGetDeviceCount)
        if device >= count:
            raise BackendError(f"HIP device {device} requested but {count} present")
        _call("hipSetDevice", hip.hipSetDevice, device)
        self._hip = hip
        self.device = device
        # One module per binary: a binary's entry points share it.
        self._modules: dict[bytes, Any] = {}

    def worker_factory(self) -> Callable[[], "HipBackend"]:
        """Rebuilds this backend on the same device in a worker process."""
        return functools.partial(HipBackend, self.device)

    # Compilation -------------------------------------------------------------------------------
    def compile(self, source: str, arch: str, options: Sequence[str] = ()) -> CompiledBinary:
        return compile_hip(source, arch, tuple(options))

    def compiler_version(self) -> str:
        return hiprtc_version()

    def device_info(self) -> DeviceInfo:
        hip = self._hip
        props = hip.hipDeviceProp_t()
        _call("hipGetDeviceProperties", hip.hipGetDeviceProperties, props, self.device)
        # gcnArchName carries target features ("gfx90a:sramecc+:xnack-"); code built for the
        # bare name runs in every feature mode, so the bare name is the arch.
        arch = _text(props.gcnArchName).split(":")[0]
        driver = _call("hipDriverGetVersion", hip.hipDriverGetVersion)
        return DeviceInfo(
            backend=self.kind,
            arch=arch,
            name=_text(props.name),
            sm_count=int(props.multiProcessorCount),
            driver_version=str(driver),
            compiler_version=self.compiler_version(),
        )

    # Modules and launches ----------------------------------------------------------------------
    def load(self, binary: bytes, kernel_name: str) -> HipKernel:
        hip = self._hip
        module = self._modules.get(binary)
        loaded_now = module is None
        if module is None:
            module = _call("hipModuleLoadData", hip.hipModuleLoadData, binary)
        try:
            what = f"hipModuleGetFunction({kernel_name})"
            function = _call(what, hip.hipModuleGetFunction, module, kernel_name.encode())
        except BackendError:
            if loaded_now:
                hip.hipModuleUnload(module)
            raise
        self._modules[binary] = module
        return HipKernel(name=kernel_name, module=module, function=function)

    def unload(self, kernel: HipKernel) -> None:
        """Release a kernel's module (and with it every kernel of that binary); tuning loads many candidates."""
        for binary, module in list(self._modules.items()):
            if module is kernel.module:
                del self._modules[binary]
        _call("hipModuleUnload", self._hip.hipModuleUnload, kernel.module)

    def launch(
        self,
        kernel: HipKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[KernelArg],
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None:
        self.launch_prepared(kernel, grid, block, self.prepare_args(args), shared_bytes, stream)

    def prepare_args(self, args: Sequence[KernelArg]) -> PreparedArgs:
        return pack_frame(args)

    def launch_prepared(
        self,
        kernel: HipKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        prepared: PreparedArgs,
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None:
        # A tuple holding one ctypes.Structure as `extra` makes hip-python copy its bytes into the
        # argument buffer passed with HIP_LAUNCH_PARAM_BUFFER_POINTER.
        prepared.refresh()
        _call(
            f"hipModuleLaunchKernel({kernel.name})",
            self._hip.hipModuleLaunchKernel,
            kernel.function,
            *grid,
            *block,
            shared_bytes,
            stream or None,
            None,
            (prepared.frame,),
        )

    def launch_early(
        self,
        kernel: HipKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        prepared: PreparedArgs,
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None:
        """No programmatic dependent launch here: a plain launch (the kernel's wait compiles to nothing)."""
        self.launch_prepared(kernel, grid, block, prepared, shared_bytes, stream)

    def launch_cooperative(
        self,
        kernel: HipKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        prepared: PreparedArgs,
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None:
        # hipModuleLaunchCooperativeKernel takes kernelParams, not the packed frame this backend passes.
        raise BackendError(f"{kernel.name}: the HIP backend does not issue cooperative launches")

    # Memory ------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        return int(_call("hipMalloc", self._hip.hipMalloc, nbytes))

    def free(self, ptr: int) -> None:
        _call("hipFree", self._hip.hipFree, ptr)

    def memset_async(self, ptr: int, byte: int, nbytes: int, stream: int = 0) -> None:
        _call("hipMemsetAsync", self._hip.hipMemsetAsync, ptr, byte, nbytes, stream or None)

    def encode_tensor_map(self, at: int, tmap: Any, address: int) -> None:
        raise BackendError("bulk tensor copies (tensor maps) are an NVIDIA sm_90 feature; no HIP kernel takes one")

    def copy_to_device(self, ptr: int, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        kind = self._hip.hipMemcpyKind.hipMemcpyHostToDevice
        _call("hipMemcpy(host to device)", self._hip.hipMemcpy, ptr, view, view.nbytes, kind)

    def copy_from_device(self, ptr: int, nbytes: int) -> bytes:
        out = bytearray(nbytes)
        kind = self._hip.hipMemcpyKind.hipMemcpyDeviceToHost
        _call("hipMemcpy(device to host)", self._hip.hipMemcpy, out, ptr, nbytes, kind)
        return bytes(out)

    # Timing and ordering -----------------------------------------------------------------------
    def event_create(self) -> int:
        return int(_call("hipEventCreate", self._hip.hipEventCreate))

    def event_record(self, event: int, stream: int = 0) -> None:
        _call("hipEventRecord", self._hip.hipEventRecord, event, stream or None)

    def event_elapsed_ms(self, start: int, end: int) -> float:
        return float(_call("hipEventElapsedTime", self._hip.hipEventElapsedTime, start, end))

    def event_destroy(self, event: int) -> None:
        _call("hipEventDestroy", self._hip.hipEventDestroy, event)

    def synchronize(self, stream: int = 0) -> None:
        if stream:
            _call("hipStreamSynchronize", self._hip.hipStreamSynchronize, stream)
        else:
            _call("hipDeviceSynchronize", self._hip.hipDeviceSynchronize)


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace").rstrip("\x00") if isinstance(value, bytes) else str(value)
