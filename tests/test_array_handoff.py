"""Large arrays go to a tune's worker as files in shared memory (factory.array_handoff): the worker maps
the same values; small ones, and all of them where there is no room, go through the pipe as before."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
from factory import array_handoff
from factory.array_handoff import ArrayHandoff, MappedArray, received


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {"big": rng.standard_normal((64, 33)).T, "small": np.arange(5, dtype=np.int8)}  # big: a transposed view


def test_large_arrays_travel_as_files_and_arrive_equal(tmp_path, monkeypatch):
    monkeypatch.setattr(array_handoff, "HANDOFF_MIN_BYTES", 100)
    original = arrays()
    with ArrayHandoff(tmp_path) as handoff:
        shared = handoff.share(original)
        assert isinstance(shared["big"], MappedArray) and shared["small"] is original["small"]
        sent = pickle.loads(pickle.dumps(shared))
        assert len(pickle.dumps(shared)) < 1000  # a path, not the values
        got = received(sent)
        np.testing.assert_array_equal(got["big"], original["big"])
        assert got["big"].dtype == original["big"].dtype and not got["big"].flags.writeable
        assert list(tmp_path.iterdir())
    assert not list(tmp_path.iterdir())  # removed with the block


def test_without_room_every_array_goes_through_the_pipe(tmp_path, monkeypatch):
    monkeypatch.setattr(array_handoff, "HANDOFF_MIN_BYTES", 100)
    original = arrays()
    monkeypatch.setattr(array_handoff, "HEADROOM", 1e30)  # no folder has that much free
    assert ArrayHandoff(tmp_path).share(original) == original
    assert ArrayHandoff(tmp_path / "missing").share(original) == original


def test_a_write_that_fails_midway_falls_back_to_the_pipe(tmp_path, monkeypatch):
    monkeypatch.setattr(array_handoff, "HANDOFF_MIN_BYTES", 100)

    def full(*_: Any, **__: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(array_handoff.np, "save", full)
    original = arrays()
    with ArrayHandoff(tmp_path) as handoff:
        assert handoff.share(original) == original
