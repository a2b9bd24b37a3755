"""Large arrays handed to a worker process as files in shared memory instead of through its pipe.

A tune sends its measuring worker the inputs and the reference: 0.4 GB for a large depthwise problem,
1.3 GB for a large GroupNorm (its float64 reference and error scale). Pickled through the pipe they are
copied into a buffer, through the pipe and out again, and the child decodes them before it can start;
written once to a file in /dev/shm and mapped by the child they cost one copy, and a restarted worker maps
them again for nothing. Where /dev/shm is missing or too small the arrays go through the pipe as before.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Mapping, Union

import numpy as np

HANDOFF_MIN_BYTES = 16 << 20  # smaller arrays pickle in milliseconds: not worth a file
SHARED_MEMORY = Path("/dev/shm")
HEADROOM = 1.25  # leave a quarter of what the arrays need free beside them


@dataclass(frozen=True)
class MappedArray:
    """An array left in a file by ArrayHandoff.share; the receiving process maps it read-only."""

    path: str

    def load(self) -> np.ndarray:
        return np.load(self.path, mmap_mode="r")


Handed = Union[np.ndarray, MappedArray]


class ArrayHandoff:
    """A scratch folder in shared memory for one tune's large arrays, removed when the block ends."""

    def __init__(self, root: Path = SHARED_MEMORY) -> None:
        self._root = root
        self._folder: Path | None = None
        self._count = 0

    def share(self, arrays: Mapping[str, np.ndarray]) -> dict[str, Handed]:
        """`arrays` with each large one written to a file and replaced by its MappedArray; all of them
        unchanged where the files cannot be written (no shared memory, not enough of it)."""
        large = {k: a for k, a in arrays.items() if a.nbytes >= HANDOFF_MIN_BYTES}
        if not large or not self._room_for(sum(a.nbytes for a in large.values())):
            return dict(arrays)
        shared: dict[str, Handed] = dict(arrays)
        try:
            folder = self._scratch()
            for name, array in large.items():
                self._count += 1
                path = folder / f"{self._count}.npy"
                np.save(path, np.ascontiguousarray(array), allow_pickle=False)
                shared[name] = MappedArray(str(path))
        except OSError:
            return dict(arrays)  # shared memory filled up meanwhile: the pipe still works
        return shared

    def _room_for(self, nbytes: int) -> bool:
        try:
            return self._root.is_dir() and shutil.disk_usage(self._root).free >= HEADROOM * nbytes
        except OSError:
            return False

    def _scratch(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="kfactory-tune-", dir=self._root))
        return self._folder

    def __enter__(self) -> ArrayHandoff:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def received(arrays: Mapping[str, Handed]) -> dict[str, np.ndarray]:
    """The arrays as the receiving process uses them: mapped files opened, the rest as they came."""
    return {k: a.load() if isinstance(a, MappedArray) else a for k, a in arrays.items()}
