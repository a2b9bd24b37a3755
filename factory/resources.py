"""Where the shipped templates and catalogs live (a source checkout, or the installed package)."""

from __future__ import annotations

import importlib.util
from importlib import resources
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent


def _data_dir(name: str) -> Path:
    checkout = _REPO_ROOT / name
    if checkout.is_dir():
        return checkout
    # Installed: factory.data.<name> is a namespace package (a data folder without __init__.py), whose
    # resources.files() is a MultiplexedPath, not a path string; its search location is the folder.
    spec = importlib.util.find_spec(f"factory.data.{name}")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(str(resources.files(f"factory.data.{name}")))


def templates_dir() -> Path:
    return _data_dir("templates")


def instances_dir() -> Path:
    return _data_dir("instances")


def bench_dir() -> Path:
    """The benchmark suites (bench/*.toml)."""
    return _data_dir("bench")


def shipped_dir() -> Path:
    """The shipped winners (shipped/*.json; factory.shipped); a path that may hold no file."""
    try:
        return _data_dir("shipped")
    except ModuleNotFoundError:
        return _REPO_ROOT / "shipped"
