"""The kernel ABI on the host: a Launch's arguments as ctypes values, packed in one place.

Every runtime path that hands arguments to a kernel (the executor on a GPU, the test suite's fake GPU
and host emulator) packs them here, so a struct's layout is decided once. A `Struct` becomes a
ctypes.Structure of the same fields in the same order; ctypes lays it out with the platform C rules
(natural alignment), which are the device compilers' rules for these field types (64-bit pointers,
32-bit ints and floats), so its bytes are what the kernel reads. Pointer fields are written in place
when buffers are (re)bound, without repacking.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

from .ops.base import F32, I32, Buf, LaunchArg, Struct

_FIELD_CTYPES: dict[type, Any] = {Buf: ctypes.c_uint64, I32: ctypes.c_int32, F32: ctypes.c_float}


@lru_cache(maxsize=None)
def struct_type(ctype: str, layout: tuple[tuple[str, type], ...]) -> type[ctypes.Structure]:
    """The ctypes.Structure for a C struct whose fields are (name, Buf | I32 | F32) in order."""
    return type(ctype, (ctypes.Structure,), {"_fields_": [(name, _FIELD_CTYPES[kind]) for name, kind in layout]})


def ctype_of(arg: Struct) -> type[ctypes.Structure]:
    return struct_type(arg.ctype, tuple((name, type(value)) for name, value in arg.fields))


def _scalar(value: Buf | I32 | F32) -> int | float:
    return 0 if isinstance(value, Buf) else value.value


@dataclass
class PackedArgs:
    """One launch's arguments as ctypes values, in kernel-parameter order, and where its pointers go.

    `slots` are (ctypes object, attribute, buffer): a scalar pointer argument is written through its
    `value`, a pointer inside a struct through the struct's field; the buffer's offset is added.
    """

    values: list[Any]
    slots: list[tuple[Any, str, Buf]] = field(default_factory=list)

    def bind(self, pointers: Mapping[str, int]) -> None:
        for obj, attr, buf in self.slots:
            setattr(obj, attr, pointers[buf.name] + buf.offset)

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


def flatten_args(args: Sequence[LaunchArg]) -> tuple[Buf | I32 | F32, ...]:
    """The scalars of `args` in memory order, struct fields expanded (what `flatten` reads back)."""
    return tuple(v for a in args for v in ((x for _, x in a.fields) if isinstance(a, Struct) else (a,)))


def flatten(values: Sequence[Any]) -> tuple[int | float, ...]:
    """Python numbers of packed values in memory order, struct fields expanded (for test doubles that
    record what a launch was given)."""
    out: list[int | float] = []
    for value in values:
        if isinstance(value, ctypes.Structure):
            out += [getattr(value, name) for name, _ in value._fields_]
        else:
            out.append(value.value)
    return tuple(out)
