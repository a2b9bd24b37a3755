"""Host-side element types: random inputs in a storage dtype, and their exact values for references.

numpy has no bfloat16, so bf16 tensors live on the host as uint16 bit patterns.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .problem import Scalar

STORAGE = {
    Scalar.F16: np.float16,
    Scalar.BF16: np.uint16,
    Scalar.F32: np.float32,
    Scalar.I8: np.int8,
    Scalar.I32: np.int32,
}


def float_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bf16 bit patterns (as the device converts)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_bits_to_float(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


# A tensor this large is drawn in chunks of this many elements, each from its own generator spawned
# from the caller's, on threads (numpy draws and converts without the GIL): a tune's 100 M-element
# inputs took 1.2 s each on one core. The chunking is fixed, so a seed draws the same values on any
# machine; a smaller tensor is drawn from the caller's generator directly.
PARALLEL_DRAW_CHUNK = 1 << 22


def random_tensor(rng: np.random.Generator, shape: tuple[int, ...], scalar: Scalar) -> np.ndarray:
    """Fresh random values, never zeros-only: floats in [-1, 1), integers in [-4, 4]."""
    size = int(np.prod(shape, dtype=np.int64))
    if size <= PARALLEL_DRAW_CHUNK:
        return _draw(rng, size, scalar).reshape(shape)
    out = np.empty(size, dtype=STORAGE[scalar])
    starts = range(0, size, PARALLEL_DRAW_CHUNK)

    def fill(start: int, child: np.random.Generator) -> None:
        out[start:start + PARALLEL_DRAW_CHUNK] = _draw(child, min(PARALLEL_DRAW_CHUNK, size - start), scalar)

    with ThreadPoolExecutor(max_workers=min(len(starts), os.cpu_count() or 1)) as pool:
        list(pool.map(fill, starts, rng.spawn(len(starts))))
    return out.reshape(shape)


def _draw(rng: np.random.Generator, size: int, scalar: Scalar) -> np.ndarray:
    """`size` random values of `scalar` in its storage type, flat (see random_tensor)."""
    if scalar is Scalar.I8:
        return rng.integers(-4, 5, size=size, dtype=np.int8)
    if scalar is Scalar.I32:
        return rng.integers(-1000, 1001, size=size, dtype=np.int32)
    values = rng.random(size, dtype=np.float32)  # drawn in float32: 4x faster than float64
    values *= 2.0
    values -= 1.0
    if scalar is Scalar.BF16:
        return float_to_bf16_bits(values)
    return values.astype(STORAGE[scalar])


def to_storage(values: np.ndarray, scalar: Scalar) -> np.ndarray:
    """Float values rounded to a floating storage type (round-to-nearest-even, as the device converts)."""
    if scalar is Scalar.BF16:
        return float_to_bf16_bits(np.asarray(values, dtype=np.float32))
    if not scalar.is_float:
        raise ValueError(f"to_storage takes a floating storage type, not {scalar.name}")
    return np.asarray(values, dtype=np.float32).astype(STORAGE[scalar])


def exact_values(array: np.ndarray, scalar: Scalar) -> np.ndarray:
    """float64 (or int64) values of a storage array, for references."""
    if scalar is Scalar.BF16:
        return bf16_bits_to_float(array).astype(np.float64)
    if scalar in (Scalar.I8, Scalar.I32):
        return array.astype(np.int64)
    return array.astype(np.float64)


def from_bytes(blob: bytes, shape: tuple[int, ...], scalar: Scalar) -> np.ndarray:
    return np.frombuffer(blob, dtype=STORAGE[scalar]).reshape(shape)


def poison_byte(scalar: Scalar) -> int:
    """0xFF makes every float element NaN; integers get a pattern no small sum produces."""
    return 0xFF if scalar.is_float else 0xA5
