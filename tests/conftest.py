import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# Set (as .ci/run does) to fail, rather than skip, the PostgreSQL tests when no server can start.
REQUIRE_POSTGRES_ENV = "KFACTORY_REQUIRE_POSTGRES"


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL server for the whole session (tests/pg_server.py), stopped at the end; the tests
    that take it skip, saying why, where none can start."""
    import pg_server as pg

    try:
        server = pg.start()
    except pg.Unavailable as exc:
        if os.environ.get(REQUIRE_POSTGRES_ENV):
            pytest.fail(f"PostgreSQL is required here ({REQUIRE_POSTGRES_ENV} is set) but cannot start: {exc}")
        pytest.skip(f"PostgreSQL tests skipped: {exc}")
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server):
    """The URL of a new, empty PostgreSQL database of this test's own."""
    return pg_server.create_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """The same test on an SQLite file and on a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tuning.db'}"
    return request.getfixturevalue("pg_url")


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
