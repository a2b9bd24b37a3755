"""The kernel ABI on the host: a Launch's arguments as ctypes values, packed in one place.

Every runtime path that hands arguments to a kernel (the executor on a GPU, the test suite's fake GPU
and host emulator) packs them here, so a struct's layout is decided once. A `Struct` becomes a
ctypes.Structure of the same fields in the same order; ctypes lays it out with the platform C rules
(natural alignment), which are the device compilers' rules for these field types (64-bit pointers,
32-bit ints and floats), so its bytes are what the kernel reads. Pointer fields are written in place
when buffers are (re)bound, without repacking. A TensorMap becomes 128 bytes aligned to 64 (what the
driver's encoder and the kernel's `kf_tensor_map` need), encoded by the caller's encoder at binding, since
the encoding holds the buffer's address.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

from .ops.base import F32, I32, Buf, LaunchArg, Struct, TensorMap

_FIELD_CTYPES: dict[type, Any] = {Buf: ctypes.c_uint64, I32: ctypes.c_int32, F32: ctypes.c_float}


@lru_cache(maxsize=None)
def struct_type(ctype: str, layout: tuple[tuple[str, type], ...]) -> type[ctypes.Structure]:
    """The ctypes.Structure for a C struct whose fields are (name, Buf | I32 | F32) in order."""
    return type(ctype, (ctypes.Structure,), {"_fields_": [(name, _FIELD_CTYPES[kind]) for name, kind in layout]})


def ctype_of(arg: Struct) -> type[ctypes.Structure]:
    return struct_type(arg.ctype, tuple((name, type(value)) for name, value in arg.fields))


def _scalar(value: Buf | I32 | F32) -> int | float:
    return 0 if isinstance(value, Buf) else value.value


TENSOR_MAP_BYTES, TENSOR_MAP_ALIGN = 128, 64
TensorMapBytes = ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8)
# (where the 128 bytes go, the map, the buffer's address): writes the map's encoding there.
TensorMapEncoder = Callable[[int, TensorMap, int], None]


def aligned_map_bytes() -> TensorMapBytes:
    """128 zero bytes at a 64-byte aligned address, carved from a larger array (which from_buffer keeps alive)."""
    backing = (ctypes.c_uint8 * (TENSOR_MAP_BYTES + TENSOR_MAP_ALIGN))()
    return TensorMapBytes.from_buffer(backing, -ctypes.addressof(backing) % TENSOR_MAP_ALIGN)


@dataclass
class PackedArgs:
    """One launch's arguments as ctypes values, in kernel-parameter order, and where its pointers go.

    `slots` are (ctypes object, attribute, buffer): a scalar pointer argument is written through its
    `value`, a pointer inside a struct through the struct's field; the buffer's offset is added. `maps`
    are (128 bytes, tensor map): encoded at binding by the encoder given, left zero without one.
    """

    values: list[Any]
    slots: list[tuple[Any, str, Buf]] = field(default_factory=list)
    maps: list[tuple[Any, TensorMap]] = field(default_factory=list)

    def bind(self, pointers: Mapping[str, int], encode: TensorMapEncoder | None = None) -> None:
        for obj, attr, buf in self.slots:
            setattr(obj, attr, pointers[buf.name] + buf.offset)
        if encode is not None:
            for obj, tmap in self.maps:
                encode(ctypes.addressof(obj), tmap, pointers[tmap.buffer.name] + tmap.buffer.offset)

    def bound(self) -> dict[str, int]:
        """The pointer now bound to each buffer name the arguments use (its start, offsets taken away)."""
        return {buf.name: getattr(obj, attr) - buf.offset for obj, attr, buf in self.slots}


def pack(args: Sequence[LaunchArg]) -> PackedArgs:
    """ctypes values for `args` (pointers 0 until bound)."""
    packed = PackedArgs([])
    for arg in args:
        if isinstance(arg, Struct):
            value = ctype_of(arg)(*(_scalar(v) for _, v in arg.fields))
            packed.slots += [(value, name, v) for name, v in arg.fields if isinstance(v, Buf)]
        elif isinstance(arg, (Buf, I32, F32)):
            value = _FIELD_CTYPES[type(arg)](_scalar(arg))
            if isinstance(arg, Buf):
                packed.slots.append((value, "value", arg))
        elif isinstance(arg, TensorMap):
            value = aligned_map_bytes()
            packed.maps.append((value, arg))
        else:
            raise TypeError(f"unknown launch argument {arg!r}")
        packed.values.append(value)
    return packed


def bound_pointers(args: Sequence[LaunchArg], values: Sequence[Any]) -> dict[str, int]:
    """Buffer name -> pointer, read back from values that `pack(args)` made (and bind filled)."""
    out: dict[str, int] = {}
    for arg, value in zip(args, values, strict=True):
        if isinstance(arg, Struct):
            out.update({v.name: getattr(value, name) - v.offset for name, v in arg.fields if isinstance(v, Buf)})
        elif isinstance(arg, Buf):
            out[arg.name] = value.value - arg.offset
    return out


def flatten_args(args: Sequence[LaunchArg]) -> tuple[Buf | I32 | F32 | TensorMap, ...]:
    """The scalars of `args` in memory order, struct fields expanded (what `flatten` reads back); a tensor
    map stays whole."""
    return tuple(v for a in args for v in ((x for _, x in a.fields) if isinstance(a, Struct) else (a,)))


def flatten(values: Sequence[Any]) -> tuple[int | float | bytes, ...]:
    """Python numbers of packed values in memory order, struct fields expanded, a tensor map as its bytes
    (for test doubles that record what a launch was given)."""
    out: list[int | float | bytes] = []
    for value in values:
        if isinstance(value, ctypes.Structure):
            out += [getattr(value, name) for name, _ in value._fields_]
        elif isinstance(value, TensorMapBytes):
            out.append(bytes(value))  # type: ignore[arg-type]
        else:
            out.append(value.value)
    return tuple(out)
