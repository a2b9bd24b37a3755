"""The one small interface every GPU runtime implements.

The rest of the package never names cuda or hip: it asks `factory.backends.get_backend()` for a
Backend and talks to it through these methods. Compilation is a plain function of (source, arch,
options) so candidates can be compiled in worker processes and on machines without a GPU.
"""

from __future__ import annotations

import ctypes
import enum
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence


class BackendError(RuntimeError):
    """A runtime or compiler call failed; the message carries the runtime's own error text.

    `sticky` marks an error that leaves the device context unusable for the rest of the process (an
    illegal address, a trap, a failed launch): every later call fails too, so only a fresh process can
    use the GPU again. The backend that raises it classifies it from the runtime's error code.
    """

    def __init__(self, message: str = "", *, sticky: bool = False) -> None:
        super().__init__(message)
        self.sticky = sticky


class CompileError(BackendError):
    """The runtime compiler rejected a source; `log` holds the compiler output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message if not log else f"{message}\n{log}")
        self.log = log


class BackendKind(enum.Enum):
    CUDA = "cuda"
    HIP = "hip"


@dataclass(frozen=True)
class DeviceInfo:
    """What a tuning result depends on: a winner is served only to an identical DeviceInfo."""

    backend: BackendKind
    arch: str  # "sm_90", "gfx90a"
    name: str
    sm_count: int
    driver_version: str
    compiler_version: str


@dataclass(frozen=True)
class CompiledBinary:
    """A loadable code object (cubin / hsaco) and what produced it."""

    binary: bytes
    arch: str
    compiler_version: str
    log: str = ""


# Kernel arguments are ctypes values, in the kernel's parameter order: c_uint64 for device pointers,
# c_int32 / c_int64 / c_float for values, a ctypes.Structure for an argument struct passed by value
# (laid out as the C struct: see factory/abi.py).
KernelArg = ctypes.c_uint64 | ctypes.c_int32 | ctypes.c_int64 | ctypes.c_float | ctypes.Structure


class LoadedKernel(Protocol):
    """A kernel function resolved in a loaded module; launching is the backend's job."""

    name: str


class Backend(Protocol):
    kind: BackendKind
    # Optional: True where the tuner may compile and run its own check kernels on this backend
    # (factory/device_check.py); a backend without it (a test double) has outputs read back.

    def device_info(self) -> DeviceInfo: ...

    def worker_factory(self) -> Callable[[], "Backend"] | None:
        """A picklable callable that builds this backend (same device) in another process, or None.

        The tuner measures candidates in a child process so that a faulting or hanging kernel cannot
        take the caller's GPU context with it; the child rebuilds its backend with this. None: the
        backend cannot be rebuilt elsewhere, and candidates are measured in the calling process.
        """
        ...

    def compile(self, source: str, arch: str, options: Sequence[str] = ()) -> CompiledBinary: ...

    def compiler_version(self) -> str: ...

    def load(self, binary: bytes, kernel_name: str) -> LoadedKernel: ...

    def launch(
        self,
        kernel: LoadedKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[KernelArg],
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None: ...

    def prepare_args(self, args: Sequence[KernelArg]) -> object:
        """Pack arguments once; the ctypes values may be updated in place before each launch."""
        ...

    def launch_prepared(
        self,
        kernel: LoadedKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        prepared: object,
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None: ...

    def launch_cooperative(
        self,
        kernel: LoadedKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        prepared: object,
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None:
        """As launch_prepared, with every block resident at once (blocks may wait for each other); a grid
        the device cannot hold is an error, not a hang."""
        ...

    def launch_early(
        self,
        kernel: LoadedKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        prepared: object,
        shared_bytes: int = 0,
        stream: int = 0,
    ) -> None:
        """As launch_prepared, the blocks allowed to start before the previous launch on the stream ends (the
        kernel waits for it itself: templates/common/pdl.h); a backend without that launches plainly."""
        ...

    def encode_tensor_map(self, at: int, tmap: Any, address: int) -> None:
        """Write the device's encoding of `tmap` (factory/ops/base.py: TensorMap) over the buffer at `address`
        to the 128 bytes at host address `at` (64-byte aligned): a kernel parameter of bulk tensor copies."""
        ...

    # Memory: device pointers are plain ints.
    def alloc(self, nbytes: int) -> int: ...

    def free(self, ptr: int) -> None: ...

    def memset_async(self, ptr: int, byte: int, nbytes: int, stream: int = 0) -> None: ...

    def copy_to_device(self, ptr: int, data: bytes | memoryview) -> None: ...

    def copy_from_device(self, ptr: int, nbytes: int) -> bytes: ...

    # Timing and ordering.
    def event_create(self) -> int: ...

    def event_record(self, event: int, stream: int = 0) -> None: ...

    def event_elapsed_ms(self, start: int, end: int) -> float: ...

    def event_destroy(self, event: int) -> None: ...

    def synchronize(self, stream: int = 0) -> None: ...
