"""Where the shipped templates and catalogs live (a source checkout, or the installed package)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent


def _data_dir(name: str) -> Path:
    checkout = _REPO_ROOT / name
    if checkout.is_dir():
        return checkout
    return Path(str(resources.files(f"factory.data.{name}")))


def templates_dir() -> Path:
    return _data_dir("templates")


def instances_dir() -> Path:
    return _data_dir("instances")
