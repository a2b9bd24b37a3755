"""A non-editable install ships every package: each directory of factory/ and tuning_db/ with an
__init__.py is listed in pyproject's packages (the Alembic revisions included), and the data the
code reads at run time is package data."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_python_package_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("factory", "tuning_db")
        for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found - listed == set(), "packages missing from pyproject's [tool.setuptools] packages"
    assert {"tuning_db.migrations", "tuning_db.migrations.versions", "factory.fleet"} <= listed
    assert "script.py.mako" in config["package-data"]["tuning_db.migrations"]


def test_every_revision_is_a_module_of_the_versions_package() -> None:
    versions = sorted(p.name for p in (ROOT / "tuning_db" / "migrations" / "versions").glob("0*.py"))
    assert versions and all(name[:4].isdigit() for name in versions)
