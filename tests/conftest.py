import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def gpu_backend():
    """The real backend of this machine's GPU (tests that take it are marked `gpu`)."""
    from factory.backends import get_backend

    return get_backend()


@pytest.fixture
def host_tensors_as_device(monkeypatch):
    """Host torch tensors described as tensors on GPU 0 with no current stream, so Kernel.run's
    shape / stride / dtype checks and launches run on a machine without a GPU."""
    from factory import api

    real = api._describe

    def describe(value):
        shape, strides, dtype, _device, ptr = real(value)
        return shape, strides, dtype, 0, ptr

    monkeypatch.setattr(api, "_describe", describe)
    monkeypatch.setattr(api, "_current_stream", lambda value: None)
