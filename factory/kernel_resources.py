"""What the compiler says a kernel uses per thread and block: registers, spills, stack, static shared memory.

NVRTC reports it when asked (`--ptxas-options=-v`, which compile_cuda always passes): per entry function,

    ptxas info    : Compiling entry function 'kf_main' for 'sm_90'
    ptxas         .     256 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
    ptxas info    : Used 32 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem

An AMD code object carries the same in its metadata note (msgpack: `amdhsa.kernels`, each with
`.vgpr_count`, `.vgpr_spill_count`, `.private_segment_fixed_size`, `.group_segment_fixed_size`), which
hiprtc's log does not repeat.

The compile cache keeps the figures beside each binary, so a tune can show them for every candidate
(a spilling candidate is the first suspect of a slow one) without compiling again.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import asdict, dataclass
from typing import Any

MAIN_ENTRY = "kf_main"  # every template's kernel; other entries (split-K finishing passes) are smaller

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclass(frozen=True)
class KernelResources:
    registers: int  # per thread
    spill_store_bytes: int  # per thread
    spill_load_bytes: int
    stack_bytes: int  # per thread: local arrays and spills
    shared_bytes: int  # static shared memory per block (dynamic shared memory comes on top)

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "KernelResources | None":
        """The figures a cache entry stored; None for anything else (a damaged or foreign file)."""
        try:
            fields = json.loads(text)
            resources = cls(**{k: int(fields[k]) for k in cls.__dataclass_fields__})
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return resources


def from_ptxas_log(log: str) -> dict[str, KernelResources]:
    """Each entry function's figures in a `ptxas -v` log (empty when the log has none)."""
    found: dict[str, KernelResources] = {}
    entry: str | None = None
    frame: tuple[int, int, int] | None = None
    for line in log.splitlines():
        started = _ENTRY.search(line)
        if started:
            entry, frame = started.group(1), None
            continue
        framed = _FRAME.search(line)
        if framed and entry is not None:
            frame = (int(framed.group(1)), int(framed.group(2)), int(framed.group(3)))
            continue
        used = _USED.search(line)
        if used and entry is not None:
            smem = _SMEM.search(line)
            stack, stores, loads = frame or (0, 0, 0)
            found[entry] = KernelResources(int(used.group(1)), stores, loads, stack, int(smem.group(1)) if smem else 0)
            entry = None
    return found


def main_resources(log: str) -> KernelResources | None:
    """The main kernel's figures (`kf_main`, else the only entry), or None when the log has none."""
    return _main(from_ptxas_log(log))


def from_compile(binary: bytes, log: str) -> KernelResources | None:
    """The main kernel's figures from whichever report the compiler left: ptxas's log, else an AMD
    code object's metadata."""
    return main_resources(log) or _main(from_amdgpu_code_object(binary))


def _main(found: dict[str, KernelResources]) -> KernelResources | None:
    if MAIN_ENTRY in found:
        return found[MAIN_ENTRY]
    return next(iter(found.values())) if len(found) == 1 else None


# --- AMD code objects ----------------------------------------------------------------------------
_SHT_NOTE = 7
_NT_AMDGPU_METADATA = 32
_VGPR_BYTES = 4  # a spilled VGPR is one 32-bit word per lane


def from_amdgpu_code_object(binary: bytes) -> dict[str, KernelResources]:
    """Each kernel's figures in an AMDGPU ELF code object (empty for anything else)."""
    try:
        for note in _elf_notes(binary):
            if note[0] == b"AMDGPU" and note[1] == _NT_AMDGPU_METADATA:
                metadata = _MsgPack(note[2]).value()
                return {k[".name"]: _amd_kernel(k) for k in metadata.get("amdhsa.kernels", [])}
    except (struct.error, ValueError, KeyError, TypeError, AttributeError, IndexError):
        pass
    return {}


def _amd_kernel(k: dict[str, Any]) -> KernelResources:
    """Registers: VGPRs plus AGPRs per lane. AMD reports how many VGPRs spilled, not the accesses: they
    count as stored bytes, none as loaded."""
    spilled = int(k.get(".vgpr_spill_count", 0)) * _VGPR_BYTES
    return KernelResources(int(k[".vgpr_count"]) + int(k.get(".agpr_count", 0)), spilled, 0,
                           int(k.get(".private_segment_fixed_size", 0)), int(k.get(".group_segment_fixed_size", 0)))


def _elf_notes(binary: bytes) -> list[tuple[bytes, int, bytes]]:
    """(name, type, descriptor) of every note in a little-endian ELF64's note sections."""
    if binary[:4] != b"\x7fELF" or binary[4] != 2 or binary[5] != 1:
        return []
    (shoff,) = struct.unpack_from("<Q", binary, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", binary, 0x3A)
    notes = []
    for i in range(shnum):
        _, kind, _, _, offset, size = struct.unpack_from("<IIQQQQ", binary, shoff + i * shentsize)
        if kind != _SHT_NOTE:
            continue
        at, end = offset, offset + size
        while at + 12 <= end:
            namesz, descsz, note_type = struct.unpack_from("<III", binary, at)
            desc = at + 12 + ((namesz + 3) & ~3)
            notes.append((binary[at + 12:at + 12 + namesz].rstrip(b"\0"), note_type, binary[desc:desc + descsz]))
            at = desc + ((descsz + 3) & ~3)
    return notes


class _MsgPack:
    """The msgpack subset code object metadata uses: maps, arrays, strings, integers, booleans, nil."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def _take(self, n: int) -> bytes:
        chunk = self.data[self.at:self.at + n]
        if len(chunk) != n:
            raise ValueError("truncated msgpack")
        self.at += n
        return chunk

    def _unpack(self, form: str) -> Any:
        return struct.unpack(">" + form, self._take(struct.calcsize(">" + form)))[0]

    def value(self) -> Any:
        tag = self._take(1)[0]
        if tag <= 0x7F:
            return tag
        if tag >= 0xE0:
            return tag - 0x100
        if 0x80 <= tag <= 0x8F:
            return self._map(tag & 0x0F)
        if 0x90 <= tag <= 0x9F:
            return [self.value() for _ in range(tag & 0x0F)]
        if 0xA0 <= tag <= 0xBF:
            return self._take(tag & 0x1F).decode()
        fixed = {0xC0: None, 0xC2: False, 0xC3: True}
        if tag in fixed:
            return fixed[tag]
        numbers = {0xCA: "f", 0xCB: "d", 0xCC: "B", 0xCD: "H", 0xCE: "I", 0xCF: "Q",
                   0xD0: "b", 0xD1: "h", 0xD2: "i", 0xD3: "q"}
        if tag in numbers:
            return self._unpack(numbers[tag])
        lengths = {0xC4: "B", 0xC5: "H", 0xC6: "I", 0xD9: "B", 0xDA: "H", 0xDB: "I"}
        if tag in lengths:
            raw = self._take(self._unpack(lengths[tag]))
            return raw if tag <= 0xC6 else raw.decode()
        if tag in (0xDC, 0xDD):
            return [self.value() for _ in range(self._unpack("H" if tag == 0xDC else "I"))]
        if tag in (0xDE, 0xDF):
            return self._map(self._unpack("H" if tag == 0xDE else "I"))
        raise ValueError(f"msgpack tag {tag:#x} not in code object metadata")

    def _map(self, n: int) -> dict[Any, Any]:
        return {self.value(): self.value() for _ in range(n)}
