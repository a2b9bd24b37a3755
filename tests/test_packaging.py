"""The distribution lists every Python package of the source tree, so a non-editable install has them all."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _source_packages() -> set[str]:
    found = set()
    for top in ("factory", "tuning_db"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(ROOT).parts))
    return found


def test_every_source_package_is_in_the_distribution() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    missing = _source_packages() - listed
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {sorted(missing)}"
