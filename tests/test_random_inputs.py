"""Random inputs (numerics.random_tensor): a large tensor is drawn in fixed chunks on threads, so one
seed still gives one tensor, its chunks are independent streams, and every type keeps its range."""

from __future__ import annotations

import numpy as np
import pytest

from factory import numerics
from factory.numerics import PARALLEL_DRAW_CHUNK
from factory.problem import Scalar

LARGE = (3, PARALLEL_DRAW_CHUNK // 2 + 17)  # one and a half chunks and a ragged tail


@pytest.mark.parametrize("scalar", [Scalar.F16, Scalar.BF16, Scalar.F32, Scalar.I8, Scalar.I32])
def test_a_large_tensor_is_one_seed_one_tensor_in_range_and_its_chunks_differ(scalar):
    a = numerics.random_tensor(np.random.default_rng(7), LARGE, scalar)
    b = numerics.random_tensor(np.random.default_rng(7), LARGE, scalar)
    assert a.shape == LARGE and a.dtype == numerics.STORAGE[scalar]
    assert np.array_equal(a, b)
    assert not np.array_equal(a, numerics.random_tensor(np.random.default_rng(8), LARGE, scalar))
    flat = numerics.exact_values(a, scalar).reshape(-1)
    first, second = flat[:1000], flat[PARALLEL_DRAW_CHUNK:PARALLEL_DRAW_CHUNK + 1000]
    assert not np.array_equal(first, second)  # each chunk has its own generator
    low, high = (-1.0, 1.0) if scalar.is_float else ((-4, 4) if scalar is Scalar.I8 else (-1000, 1000))
    assert flat.min() >= low and flat.max() <= high and abs(flat.mean()) < 0.01 * (high - low)
    tail = flat[-1000:]
    assert np.count_nonzero(tail) > 800  # the ragged last chunk is written, not left empty (fresh memory is 0)


def test_a_small_tensor_is_drawn_from_the_generator_itself():
    rng = np.random.default_rng(5)
    expected = np.random.default_rng(5).random(12, dtype=np.float32) * 2.0 - 1.0
    got = numerics.random_tensor(rng, (3, 4), Scalar.F32)
    assert np.array_equal(got.reshape(-1), expected)
