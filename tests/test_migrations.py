"""Schema changes through Alembic on SQLite and PostgreSQL: a fresh database is created at the head
revision, the revisions build exactly the models' tables, databases written before Alembic (committed
files of schema 1 and 2, made by that code: tests/data/make_old_db.py) upgrade in place with their
rows, `kfactory db upgrade` says what it did, a newer database is refused in one line, and a failed
upgrade leaves the database as it was."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from factory import cli
from factory.backends.base import BackendKind, DeviceInfo
from tuning_db import SCHEMA_VERSION, Measurement, NewerSchemaError, TuningDB, TuningDBError
from tuning_db.models import Base
from tuning_db.paths import read_only_url, sqlite_url
from tuning_db.schema import HEAD_REVISION, alembic_config, revision_of

DATA = Path(__file__).with_name("data")
H100 = DeviceInfo(BackendKind.CUDA, "sm_90", "NVIDIA H100 80GB HBM3", 132, "550.54.15", "12.4.131")
MI250X = DeviceInfo(BackendKind.HIP, "gfx90a", "AMD Instinct MI250X", 110, "6.0.32830", "6.0.32830")
CONV = "conv_bwd_weight:NHWGC:fp16:2d:N=2,G=8,C=1,K=1,input=9x9,filter=3x3,stride=1x1,pad=1x1,dilation=1x1"
NORM = "groupnorm_bwd:NGCHW:fp32:2d:N=4,C=64,G=32,input=8x8,affine=1"


def migrate(url: str, target: str) -> None:
    """Run the shipped revisions on an empty database up to `target`."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), target)
    finally:
        engine.dispose()


def differences(url: str) -> list[Any]:
    """What Alembic's autogenerate finds between the database and the models (empty: the same)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        engine.dispose()


def revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def shape(url: str) -> dict[str, Any]:
    """Tables as an inspector sees them: columns (name, type, nullable), indexes, unique and foreign keys."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            seen = inspect(conn)
            return {
                table: {
                    "columns": sorted((c["name"], str(c["type"]), c["nullable"]) for c in seen.get_columns(table)),
                    "indexes": sorted((i["name"], tuple(i["column_names"])) for i in seen.get_indexes(table)),
                    "unique": sorted((u["name"], tuple(u["column_names"])) for u in seen.get_unique_constraints(table)),
                    "foreign": sorted((tuple(f["constrained_columns"]), f["referred_table"]) for f in seen.get_foreign_keys(table)),
                }
                for table in sorted(seen.get_table_names())
                if table != "alembic_version"
            }
    finally:
        engine.dispose()


def old_file(tmp_path: Path, version: int) -> Path:
    path = tmp_path / f"schema{version}.sqlite"
    shutil.copyfile(DATA / f"tuning_schema{version}.sqlite", path)
    return path


# --- fresh databases and the revisions ------------------------------------------------------------
def test_the_script_head_is_the_current_schema_version() -> None:
    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == HEAD_REVISION == revision_of(SCHEMA_VERSION)


def test_a_fresh_database_is_created_at_the_head_revision(db_url: str) -> None:
    with TuningDB(db_url) as db:
        assert db.opened.found is None and db.schema_version == SCHEMA_VERSION
    assert revision(db_url) == HEAD_REVISION
    assert differences(db_url) == []
    with TuningDB(db_url) as again:
        assert again.opened.found == SCHEMA_VERSION and not again.opened.upgraded


def test_the_revisions_build_exactly_the_models_tables(db_url: str) -> None:
    migrate(db_url, "head")
    assert differences(db_url) == []
    assert revision(db_url) == HEAD_REVISION
    with TuningDB(db_url) as db:  # and the database they built opens as current
        assert db.opened.found == SCHEMA_VERSION
        db.record(CONV, "conv_bwd_weight", H100, [Measurement("a", 1.0, 0.1, 25, True, source_hash="c" * 64)])


@pytest.mark.parametrize("version", [1, 2])
def test_the_early_revisions_rebuild_the_schema_that_code_wrote(tmp_path: Path, version: int) -> None:
    """Revisions 0001 and 0002 are the tables the pre-Alembic code created (column order aside)."""
    built = sqlite_url(tmp_path / "built.sqlite")
    migrate(built, revision_of(version))
    assert shape(built) == shape(sqlite_url(old_file(tmp_path, version)))


# --- databases written before Alembic ---------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 2])
def test_a_file_written_before_alembic_upgrades_in_place(tmp_path: Path, capsys, version: int) -> None:
    path = old_file(tmp_path, version)
    assert cli.main(["db", "upgrade", "--db", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"upgraded from schema version {version} to {SCHEMA_VERSION} (revision {HEAD_REVISION})" in out
    assert revision(sqlite_url(path)) == HEAD_REVISION
    assert differences(sqlite_url(path)) == []  # the jobs table included
    with TuningDB(str(path)) as db:
        assert db.opened.found == SCHEMA_VERSION
        conv = db.measurements(CONV, H100)
        assert [(m.instance, m.median_us, m.verified) for m, _, _ in conv] == [
            ("conv_bwd_weight_2d_nhwgc_fp16_dw_a", 4.5, True),
            ("conv_bwd_weight_2d_nhwgc_fp16_dw_b", 3.5, True),
            ("conv_bwd_weight_2d_nhwgc_fp16_dl_c", None, False),
        ]
        # Schema 1 stored no source hash: those rows are of unknown code; schema 2's keep theirs.
        assert {m.source_hash for m, _, _ in conv} == ({None} if version == 1 else {"ab" * 32})
        assert db.best(CONV, H100).instance == "conv_bwd_weight_2d_nhwgc_fp16_dw_b"
        assert db.best(NORM, MI250X).median_us == 7.25
        assert db.stats().devices == 2
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [(str(SCHEMA_VERSION),)]
    assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    raw.close()

    assert cli.main(["db", "upgrade", "--db", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["found"] == data["version"] == SCHEMA_VERSION and not data["upgraded"]


def test_opening_an_older_file_upgrades_it_as_before(tmp_path: Path) -> None:
    path = old_file(tmp_path, 2)
    with TuningDB(str(path)) as db:
        assert db.opened.found == 2 and db.opened.upgraded and db.schema_version == SCHEMA_VERSION
    assert revision(sqlite_url(path)) == HEAD_REVISION


def test_read_only_commands_read_a_schema_2_file_without_changing_it(tmp_path: Path, capsys) -> None:
    path = old_file(tmp_path, 2)
    before = path.read_bytes()
    with TuningDB(read_only_url(sqlite_url(path))) as db:
        assert db.schema_version == 2
        assert db.best(CONV, H100).instance == "conv_bwd_weight_2d_nhwgc_fp16_dw_b"
    assert cli.main(["db", "stats", "--db", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["winners"] == 2
    assert path.read_bytes() == before


def test_a_read_only_open_of_a_schema_1_file_says_to_upgrade(tmp_path: Path, capsys) -> None:
    path = old_file(tmp_path, 1)
    before = path.read_bytes()
    assert cli.main(["db", "stats", "--db", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "schema version 1 must be upgraded" in err and "kfactory db upgrade" in err
    assert path.read_bytes() == before


def test_a_database_of_the_previous_code_on_postgresql_upgrades_in_place(pg_url: str) -> None:
    """Revision 0002 without Alembic's stamp is what the pre-Alembic code created on a server."""
    migrate(pg_url, revision_of(2))
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))
        conn.execute(text("INSERT INTO devices (id, backend, arch, name, sm_count, driver_version, compiler_version) "
                          "VALUES (1, 'cuda', 'sm_90', 'NVIDIA H100 80GB HBM3', 132, '550.54.15', '12.4.131')"))
        conn.execute(text("INSERT INTO measurements (id, problem_key, op, device_id, instance, source_hash, median_us, "
                          "spread_us, reps, verified, recorded_at) VALUES (1, :key, 'conv_bwd_weight', 1, 'k', NULL, "
                          "2.5, 0.1, 25, true, '2024-01-01 00:00:00')"), {"key": CONV})
        conn.execute(text("INSERT INTO winners (problem_key, op, device_id, measurement_id, decided_at) "
                          "VALUES (:key, 'conv_bwd_weight', 1, 1, '2024-01-01 00:00:00')"), {"key": CONV})
    engine.dispose()
    assert revision(pg_url) is None
    with TuningDB(pg_url) as db:
        assert db.opened.found == 2 and db.schema_version == SCHEMA_VERSION
        assert db.best(CONV, H100).median_us == 2.5
    assert revision(pg_url) == HEAD_REVISION
    assert differences(pg_url) == []


# --- refusals ---------------------------------------------------------------------------------------
def test_a_newer_revision_is_refused_in_one_line(db_url: str) -> None:
    TuningDB(db_url).close()
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(NewerSchemaError) as caught:
        TuningDB(db_url)
    message = str(caught.value)
    assert "\n" not in message and "revision 0099" in message and "upgrade kernel-factory" in message


def test_a_failed_upgrade_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    path = old_file(tmp_path, 2)
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY)")  # revision 0003 cannot create its table
    raw.commit()
    raw.close()
    with pytest.raises(TuningDBError) as caught:
        TuningDB(str(path))
    assert "jobs" in str(caught.value) and "\n" not in str(caught.value)
    raw = sqlite3.connect(path)
    tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "alembic_version" not in tables  # the stamp rolled back with the revision
    assert raw.execute("SELECT value FROM meta").fetchall() == [("2",)]
    raw.close()
