"""The tuning database: location, SQLite settings, winner rule, device matching, schema checks,
export/import, stats, many concurrent processes and a writer killed mid-transaction."""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import random
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from factory.backends.base import BackendKind, DeviceInfo
from tuning_db import (
    DEFAULT_DB_ENV,
    SCHEMA_VERSION,
    DatabaseFileError,
    Measurement,
    NewerSchemaError,
    NotADatabaseError,
    TuningDB,
    TuningDBError,
    default_db_url,
)
from tuning_db.engine import BUSY_TIMEOUT_S, create_db_engine

DEVICE = DeviceInfo(
    backend=BackendKind.CUDA,
    arch="sm_90",
    name="NVIDIA H100 80GB HBM3",
    sm_count=132,
    driver_version="550.54.15",
    compiler_version="12.4.131",
)
OP = "conv_bwd_weight"
PROBLEM = "conv_bwd_weight:NHWGC:fp16:N=32,G=32,C=4,K=4,input=56x56,filter=3x3"

SPAWN = multiprocessing.get_context("spawn")


def ok(instance: str, us: float) -> Measurement:
    return Measurement(instance, us, us * 0.02, 25, True, gbps=100.0, tflops=1.0)


def wrong(instance: str, us: float) -> Measurement:
    return Measurement(instance, us, us * 0.02, 25, False, "verify: max error 3.1 > 0.01")


def failed(instance: str) -> Measurement:
    return Measurement(instance, None, None, 0, False, "compile: error: expected ';'")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "tuning.db"


@pytest.fixture
def db(db_path: Path) -> Iterator[TuningDB]:
    with TuningDB(str(db_path)) as opened:
        yield opened


def raw(path: Path, sql: str) -> list[tuple[Any, ...]]:
    """Read the file with the plain sqlite3 module, bypassing the package under test."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


# -- location and connection settings ----------------------------------------------------------


def test_default_is_tuning_db_in_the_user_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DEFAULT_DB_ENV, raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = tmp_path / ".local" / "share" / "kernel-factory" / "tuning.db"
    assert default_db_url() == f"sqlite:///{expected}"
    with TuningDB() as db:
        assert db.location == str(expected)
        db.record(PROBLEM, OP, DEVICE, [ok("a", 5.0)])
    assert raw(expected, "SELECT instance FROM measurements") == [("a",)]


def test_env_var_takes_a_path_or_a_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    as_path = tmp_path / "nested" / "by_path.db"
    monkeypatch.setenv(DEFAULT_DB_ENV, str(as_path))
    with TuningDB() as db:
        assert db.location == str(as_path)
    assert as_path.is_file()

    as_url = tmp_path / "by_url.db"
    monkeypatch.setenv(DEFAULT_DB_ENV, f"sqlite:///{as_url}")
    with TuningDB() as db:
        assert db.url == f"sqlite:///{as_url}"
    assert as_url.is_file()


def test_explicit_db_beats_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DEFAULT_DB_ENV, str(tmp_path / "from_env.db"))
    with TuningDB(f"sqlite:///{tmp_path / 'explicit.db'}") as db:
        assert db.location == str(tmp_path / "explicit.db")
    assert not (tmp_path / "from_env.db").exists()


def test_sqlite_file_is_wal_and_connections_wait_when_busy(db: TuningDB, db_path: Path) -> None:
    # WAL is stored in the file itself: a plain sqlite3 connection must see it.
    assert raw(db_path, "PRAGMA journal_mode") == [("wal",)]
    engine = create_db_engine(db.url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            busy_ms = conn.execute(text("PRAGMA busy_timeout")).scalar()
    finally:
        engine.dispose()
    assert busy_ms == int(BUSY_TIMEOUT_S * 1000) and busy_ms >= 5000


def test_writes_take_the_write_lock_up_front(db: TuningDB) -> None:
    statements: list[str] = []
    engine = db._handle.writer()
    event.listen(engine, "before_cursor_execute", lambda conn, cur, stmt, *rest: statements.append(stmt))
    db.record(PROBLEM, OP, DEVICE, [ok("a", 5.0)])
    assert statements[0] == "BEGIN IMMEDIATE"


# -- what a row holds --------------------------------------------------------------------------


def test_rows_carry_device_problem_instance_and_measurement(db: TuningDB, db_path: Path) -> None:
    stored = [ok("fast", 4.25), wrong("wrong", 1.5), failed("broken")]
    db.record(PROBLEM, OP, DEVICE, stored)

    got = db.measurements(PROBLEM)
    assert [m for m, _, _ in got] == stored
    assert all(device == DEVICE for _, device, _ in got)
    assert db.measurements(PROBLEM, DEVICE) == got
    assert db.measurements(PROBLEM, dataclasses.replace(DEVICE, sm_count=114)) == []

    rows = raw(
        db_path,
        "SELECT m.problem_key, m.instance, m.median_us, m.spread_us, m.reps, m.verified, m.error,"
        " d.arch, d.name, d.sm_count, d.driver_version, d.compiler_version"
        " FROM measurements m JOIN devices d ON d.id = m.device_id ORDER BY m.id",
    )
    device_columns = ("sm_90", "NVIDIA H100 80GB HBM3", 132, "550.54.15", "12.4.131")
    assert rows == [
        (PROBLEM, "fast", 4.25, 4.25 * 0.02, 25, 1, None, *device_columns),
        (PROBLEM, "wrong", 1.5, 1.5 * 0.02, 25, 0, "verify: max error 3.1 > 0.01", *device_columns),
        (PROBLEM, "broken", None, None, 0, 0, "compile: error: expected ';'", *device_columns),
    ]


# -- the winner rule ---------------------------------------------------------------------------


def test_only_verified_measurements_win(db: TuningDB) -> None:
    winner = db.record(PROBLEM, OP, DEVICE, [wrong("wrong", 1.0), ok("slow", 9.0), failed("broken")])
    assert winner is not None and winner.instance == "slow" and winner.median_us == 9.0
    # A later, faster but unverified result must not displace it.
    assert db.record(PROBLEM, OP, DEVICE, [wrong("wrong2", 0.5)]).instance == "slow"
    assert db.best(PROBLEM, DEVICE).instance == "slow"


def test_no_verified_measurement_means_no_winner(db: TuningDB) -> None:
    assert db.record(PROBLEM, OP, DEVICE, [wrong("wrong", 1.0), failed("broken")]) is None
    assert db.best(PROBLEM, DEVICE) is None
    assert db.stats().winners == 0


@pytest.mark.parametrize("median", [math.nan, math.inf, -1.0])
def test_a_verified_but_meaningless_time_never_wins(db: TuningDB, median: float) -> None:
    assert db.record(PROBLEM, OP, DEVICE, [Measurement("odd", median, 0.0, 25, True)]) is None
    assert db.record(PROBLEM, OP, DEVICE, [ok("real", 7.0)]).instance == "real"


def test_only_a_strictly_faster_measurement_replaces_the_winner(db: TuningDB) -> None:
    assert db.record(PROBLEM, OP, DEVICE, [ok("a", 5.0), ok("b", 6.0)]).instance == "a"
    assert db.record(PROBLEM, OP, DEVICE, [ok("c", 5.0), ok("d", 8.0)]).instance == "a"
    assert db.record(PROBLEM, OP, DEVICE, [ok("e", 4.0)]).instance == "e"
    assert db.stats().winners == 1


def test_record_is_one_transaction(db: TuningDB) -> None:
    db.record(PROBLEM, OP, DEVICE, [ok("old", 5.0)])
    broken = Measurement(None, 9.0, 0.1, 25, True)  # type: ignore[arg-type]  # NOT NULL violation
    with pytest.raises(IntegrityError):
        db.record(PROBLEM, OP, DEVICE, [ok("new", 1.0), broken])
    assert [m.instance for m, _, _ in db.measurements(PROBLEM)] == ["old"]
    assert db.best(PROBLEM, DEVICE).instance == "old"


# -- serving only to the device that was tuned -------------------------------------------------


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        ({"compiler_version": "12.6.77"}, "compiler 12.4.131"),
        ({"driver_version": "560.28.03"}, "driver 550.54.15"),
        ({"arch": "sm_80"}, "recorded on sm_90"),
        ({"sm_count": 114}, "132 SMs"),
        ({"name": "NVIDIA H100 PCIe"}, "recorded on NVIDIA H100 80GB HBM3"),
        ({"backend": BackendKind.HIP}, "cuda backend"),
    ],
)
def test_a_winner_from_another_device_is_not_served_and_lookup_says_why(
    db: TuningDB, change: dict[str, Any], phrase: str
) -> None:
    db.record(PROBLEM, OP, DEVICE, [ok("a", 5.0)])
    elsewhere = dataclasses.replace(DEVICE, **change)

    found = db.lookup(PROBLEM, elsewhere)
    assert found.winner is None and not found.found
    assert db.best(PROBLEM, elsewhere) is None
    [(refused, reason)] = found.not_served
    assert refused.instance == "a" and refused.device == DEVICE
    assert phrase in reason
    assert found.reasons() == [f"a (5.000 us): {reason}"]

    here = db.lookup(PROBLEM, DEVICE)
    assert here.winner is not None and here.winner.instance == "a" and here.not_served == ()


def test_each_device_keeps_its_own_winner(db: TuningDB) -> None:
    upgraded = dataclasses.replace(DEVICE, compiler_version="12.6.77")
    db.record(PROBLEM, OP, DEVICE, [ok("old_compiler", 3.0)])
    db.record(PROBLEM, OP, upgraded, [ok("new_compiler", 4.0)])
    assert db.best(PROBLEM, DEVICE).instance == "old_compiler"
    found = db.lookup(PROBLEM, upgraded)
    assert found.winner.instance == "new_compiler"
    assert [w.instance for w, _ in found.not_served] == ["old_compiler"]
    assert db.stats().winners == 2


def test_an_unknown_problem_is_untuned(db: TuningDB) -> None:
    found = db.lookup("conv_bwd_weight:unknown", DEVICE)
    assert found.winner is None and found.not_served == ()


# -- schema version and foreign files ----------------------------------------------------------


def test_schema_version_is_stored(db: TuningDB, db_path: Path) -> None:
    assert raw(db_path, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert db.schema_version == SCHEMA_VERSION == db.stats().schema_version


def test_a_newer_schema_is_refused_with_one_line_naming_the_file(db_path: Path) -> None:
    TuningDB(str(db_path)).close()
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    with pytest.raises(NewerSchemaError) as caught:
        TuningDB(str(db_path))
    message = str(caught.value)
    assert "\n" not in message
    assert str(db_path) in message
    assert "upgrade kernel-factory" in message and "--db" in message


@pytest.mark.parametrize(
    "content",
    [b"", b"name,us\nconv,3.0\n" * 40, b"x", os.urandom(4096)],
    ids=["empty-is-fine", "csv", "one-byte", "random"],
)
def test_a_file_that_is_not_a_database_is_refused_naming_it(db_path: Path, content: bytes) -> None:
    db_path.write_bytes(content)
    if not content:
        TuningDB(str(db_path)).close()  # an empty file is an empty SQLite database
        return
    with pytest.raises(NotADatabaseError) as caught:
        TuningDB(str(db_path))
    assert str(db_path) in str(caught.value) and "\n" not in str(caught.value)
    assert db_path.read_bytes() == content


@pytest.mark.parametrize(
    "schema",
    ["CREATE TABLE notes (body TEXT)", "CREATE TABLE meta (a, b)"],
    ids=["other-tables", "other-meta"],
)
def test_another_applications_sqlite_file_is_refused_and_left_alone(db_path: Path, schema: str) -> None:
    conn = sqlite3.connect(db_path)
    conn.execute(schema)
    conn.commit()
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(NotADatabaseError) as caught:
        TuningDB(str(db_path))
    assert str(db_path) in str(caught.value) and "\n" not in str(caught.value)
    assert db_path.read_bytes() == before


def test_an_unopenable_location_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(TuningDBError) as caught:
        TuningDB(f"sqlite:///{tmp_path / 'missing_dir' / 'tuning.db'}")
    assert "missing_dir" in str(caught.value) and "\n" not in str(caught.value)


# -- stats -------------------------------------------------------------------------------------


def test_stats_count_problems_winners_measurements_and_devices(db: TuningDB) -> None:
    other = dataclasses.replace(DEVICE, driver_version="560.28.03")
    db.record("p1", OP, DEVICE, [ok("a", 5.0), failed("b")])
    db.record("p1", OP, other, [ok("a", 5.5)])
    db.record("p2", OP, DEVICE, [wrong("c", 1.0)])
    db.record("p3", "conv_fwd", DEVICE, [ok("d", 2.0), ok("e", 3.0)])
    stats = db.stats()
    assert (stats.problems, stats.winners, stats.measurements, stats.devices) == (3, 3, 6, 2)
    assert stats.failed_measurements == 1
    assert stats.winners_by_op == {OP: 2, "conv_fwd": 1}


# -- export / import ---------------------------------------------------------------------------


def _counts(db: TuningDB) -> tuple[int, int, int, int]:
    s = db.stats()
    return s.problems, s.winners, s.measurements, s.devices


def test_export_then_import_into_an_empty_database_reproduces_it(db: TuningDB, tmp_path: Path) -> None:
    other = dataclasses.replace(DEVICE, arch="sm_80", name="NVIDIA A100", sm_count=108)
    db.record("p1", OP, DEVICE, [ok("a", 5.0), wrong("b", 1.0), failed("c")])
    db.record("p1", OP, other, [ok("a", 9.0)])
    db.record("p2", OP, DEVICE, [ok("d", 2.0)])
    export = tmp_path / "export.json"
    assert db.export_json(export) == 2 + 5 + 3
    assert json.loads(export.read_text())["schema_version"] == SCHEMA_VERSION

    with TuningDB(str(tmp_path / "copy.db")) as copy:
        report = copy.import_json(export)
        assert (report.measurements_added, report.devices_added, report.winners_added) == (5, 2, 3)
        assert _counts(copy) == _counts(db)
        for problem, device in [("p1", DEVICE), ("p1", other), ("p2", DEVICE)]:
            assert copy.best(problem, device) == db.best(problem, device)
            assert copy.measurements(problem, device) == db.measurements(problem, device)


def test_import_keeps_the_faster_verified_winner(tmp_path: Path) -> None:
    with TuningDB(str(tmp_path / "here.db")) as here, TuningDB(str(tmp_path / "there.db")) as there:
        here.record("p1", OP, DEVICE, [ok("here_p1", 5.0)])
        here.record("p2", OP, DEVICE, [ok("here_p2", 2.0)])
        there.record("p1", OP, DEVICE, [ok("there_p1", 3.0), wrong("there_wrong", 0.1)])
        there.record("p2", OP, DEVICE, [ok("there_p2", 4.0)])
        there.record("p3", OP, DEVICE, [ok("there_p3", 7.0)])
        export = tmp_path / "there.json"
        there.export_json(export)

        report = here.import_json(export)
        assert (report.winners_added, report.winners_replaced, report.winners_kept) == (1, 1, 1)
        assert here.best("p1", DEVICE).instance == "there_p1"
        assert here.best("p2", DEVICE).instance == "here_p2"
        assert here.best("p3", DEVICE).instance == "there_p3"
        assert _counts(here) == (3, 3, 6, 1)


def test_importing_twice_adds_nothing(db: TuningDB, tmp_path: Path) -> None:
    with TuningDB(str(tmp_path / "source.db")) as source:
        source.record("p1", OP, DEVICE, [ok("a", 5.0), failed("b"), failed("b")])
        source.record("p2", OP, DEVICE, [ok("c", 3.0)])
        export = tmp_path / "source.json"
        source.export_json(export)
    db.record("p1", OP, DEVICE, [ok("mine", 4.0)])

    first = db.import_json(export)
    after_first = _counts(db)
    rows_after_first = db.measurements("p1")
    second = db.import_json(export)

    assert first.measurements_added == 4 and first.measurements_present == 0
    assert second.measurements_added == 0 and second.measurements_present == 4
    assert second.devices_added == 0 and second.winners_added == second.winners_replaced == 0
    assert _counts(db) == after_first == (2, 2, 5, 1)
    assert db.measurements("p1") == rows_after_first
    assert db.best("p1", DEVICE).instance == "mine"


def test_importing_its_own_export_changes_nothing(db: TuningDB, tmp_path: Path) -> None:
    db.record("p1", OP, DEVICE, [ok("a", 5.0), failed("b")])
    export = tmp_path / "self.json"
    db.export_json(export)
    before = _counts(db)
    report = db.import_json(export)
    assert report.measurements_added == 0 and report.winners_kept == 1
    assert _counts(db) == before


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        '{"format": "something-else"}',
        json.dumps({"format": "kernel-factory-tuning", "schema_version": SCHEMA_VERSION + 1,
                    "devices": [], "measurements": [], "winners": []}),
    ],
    ids=["not-json", "wrong-format", "newer-schema"],
)
def test_a_bad_export_is_refused_naming_the_file(db: TuningDB, tmp_path: Path, content: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(DatabaseFileError) as caught:
        db.import_json(bad)
    assert str(bad) in str(caught.value) and "\n" not in str(caught.value)
    assert _counts(db) == (0, 0, 0, 0)


# -- eight processes on one file ---------------------------------------------------------------

WORKERS = 8
ROUNDS = 25
BATCH = 6
SHARED_PROBLEMS = [f"{OP}:shared{i}" for i in range(10)]


class FakeTimer:
    """Deterministic stand-in for GPU timing: medians drawn from a per-process seed."""

    def __init__(self, worker: int) -> None:
        self._rng = random.Random(7919 * (worker + 1))

    def problem(self) -> str:
        return self._rng.choice(SHARED_PROBLEMS)

    def measure(self, instance: str) -> Measurement:
        roll = self._rng.random()
        if roll < 0.15:
            return failed(instance)
        if roll < 0.35:
            # Faster than any verified time: it would win if verification were ignored.
            return wrong(instance, self._rng.uniform(0.05, 0.9))
        return ok(instance, self._rng.uniform(1.0, 100.0))


def tuning_plan(worker: int) -> list[tuple[str, list[Measurement]]]:
    """Every (problem, measurements) a worker records, reproducible in the parent for checking."""
    timer = FakeTimer(worker)
    plan = []
    for round_ in range(ROUNDS):
        problem = timer.problem()
        plan.append((problem, [timer.measure(f"w{worker}_r{round_}_i{j}") for j in range(BATCH)]))
    return plan


def concurrent_worker(url: str, worker: int, start: Any, results: Any) -> None:
    errors: list[str] = []
    recorded = 0
    try:
        start.wait()
        with TuningDB(url) as db:
            for problem, batch in tuning_plan(worker):
                winner = db.record(problem, OP, DEVICE, batch)
                recorded += len(batch)
                own_best = min((m.median_us for m in batch if m.verified), default=None)
                if own_best is not None and (winner is None or winner.median_us > own_best):
                    errors.append(f"{problem}: record returned {winner} after storing {own_best}")
                # Query while the others write.
                found = db.lookup(problem, DEVICE)
                if found.winner is None and own_best is not None:
                    errors.append(f"{problem}: no winner visible after recording one")
                db.measurements(random.choice(SHARED_PROBLEMS), DEVICE)
                db.stats()
    except BaseException as exc:  # reported to the parent, which fails the test
        errors.append(f"{type(exc).__name__}: {exc}")
    results.put((worker, recorded, errors))


def test_eight_processes_record_and_query_one_file_concurrently(tmp_path: Path) -> None:
    db_path = tmp_path / "shared.db"  # created by the workers themselves, racing
    url = f"sqlite:///{db_path}"
    began = time.perf_counter()
    start = SPAWN.Barrier(WORKERS, timeout=60)
    results = SPAWN.Queue()
    workers = [SPAWN.Process(target=concurrent_worker, args=(url, w, start, results)) for w in range(WORKERS)]
    for p in workers:
        p.start()
    reports = [results.get(timeout=60) for _ in workers]
    for p in workers:
        p.join(timeout=30)
        assert p.exitcode == 0
    elapsed = time.perf_counter() - began
    print(f"\n8-process concurrency test: {elapsed:.2f} s")

    errors = [e for _, _, errs in reports for e in errs]
    assert not [e for e in errors if "locked" in e], errors
    assert errors == []

    expected: dict[str, list[Measurement]] = {}
    for w in range(WORKERS):
        for problem, batch in tuning_plan(w):
            expected.setdefault(problem, []).extend(batch)
    total = sum(len(batch) for batch in expected.values())
    assert sum(recorded for _, recorded, _ in reports) == total

    with TuningDB(url) as db:
        assert db.check_integrity()
        stats = db.stats()
        assert stats.measurements == total
        assert stats.devices == 1
        per_problem = dict(raw(db_path, "SELECT problem_key, COUNT(*) FROM winners GROUP BY problem_key"))
        for problem, batch in expected.items():
            assert sorted(m.instance for m, _, _ in db.measurements(problem)) == sorted(m.instance for m in batch)
            fastest = min((m for m in batch if m.verified), key=lambda m: m.median_us)
            assert per_problem[problem] == 1
            winner = db.best(problem, DEVICE)
            assert (winner.instance, winner.median_us) == (fastest.instance, fastest.median_us)
        assert stats.winners == len(expected)
    assert elapsed < 30, f"concurrency test took {elapsed:.1f} s"


# -- a writer killed mid-transaction -----------------------------------------------------------

KILL_BATCH = 200


def killed_batch(index: int) -> list[Measurement]:
    """Batch `index` holds a new fastest verified time, so every committed batch moves the winner."""
    rng = random.Random(index)
    batch = [ok(f"b{index}_i{j}", rng.uniform(20.0, 50.0)) for j in range(KILL_BATCH - 2)]
    batch.append(wrong(f"b{index}_wrong", 0.01))
    batch.append(ok(f"b{index}_best", 10.0 - index * 0.001))
    return batch


def hang_before_commit(url: str, marker: str) -> None:
    """Write one large batch and stop inside the transaction, after every row and the winner."""

    wal = Path(url.removeprefix("sqlite:///") + "-wal")

    def hang(session: Session) -> None:
        # Report how much uncommitted data already reached the file, then wait to be killed.
        staged = Path(marker + ".tmp")
        staged.write_text(str(wal.stat().st_size))
        staged.replace(marker)
        time.sleep(120)

    event.listen(Session, "before_commit", hang)
    with TuningDB(url) as db:
        db.record(PROBLEM, OP, DEVICE, [ok(f"huge{i}", 1.0 + i) for i in range(20_000)])


def record_batches_forever(url: str, marker: str, first: int) -> None:
    with TuningDB(url) as db:
        for index in range(first, first + 10_000):
            db.record(PROBLEM, OP, DEVICE, killed_batch(index))
            Path(marker).touch()


def _kill_while(target: Any, db_path: Path, delay: float, *args: Any) -> None:
    marker = db_path.with_suffix(".marker")
    marker.unlink(missing_ok=True)
    child = SPAWN.Process(target=target, args=(f"sqlite:///{db_path}", str(marker), *args))
    child.start()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert child.is_alive() and time.monotonic() < deadline, "writer never got going"
        time.sleep(0.01)
    time.sleep(delay)
    assert child.is_alive()
    child.kill()  # SIGKILL: no cleanup, no rollback
    child.join(timeout=30)
    assert child.exitcode == -9


def _assert_consistent(db_path: Path) -> TuningDB:
    assert raw(db_path, "PRAGMA integrity_check") == [("ok",)]
    db = TuningDB(str(db_path))
    assert db.check_integrity()
    stored = [m for m, _, _ in db.measurements(PROBLEM, DEVICE)]
    fastest = min((m for m in stored if m.verified), key=lambda m: m.median_us)
    winner = db.best(PROBLEM, DEVICE)
    assert (winner.instance, winner.median_us) == (fastest.instance, fastest.median_us)
    assert raw(db_path, "SELECT COUNT(*) FROM winners") == [(1,)]
    return db


def test_a_writer_killed_inside_its_transaction_leaves_the_old_winner(db_path: Path) -> None:
    with TuningDB(str(db_path)) as db:
        db.record(PROBLEM, OP, DEVICE, [ok("old", 50.0), failed("broken")])
    _kill_while(hang_before_commit, db_path, delay=0.0)
    # The rows spilled from SQLite's page cache into the WAL before the kill.
    assert int(db_path.with_suffix(".marker").read_text()) > 1_000_000
    with _assert_consistent(db_path) as db:
        assert db.best(PROBLEM, DEVICE).instance == "old"
        assert [m.instance for m, _, _ in db.measurements(PROBLEM)] == ["old", "broken"]
        # Still writable: no lock was left behind.
        assert db.record(PROBLEM, OP, DEVICE, [ok("new", 40.0)]).instance == "new"


def test_writers_killed_at_random_moments_leave_whole_batches(db_path: Path) -> None:
    with TuningDB(str(db_path)) as db:
        db.record(PROBLEM, OP, DEVICE, [ok("old", 50.0)])
    rng = random.Random()
    committed: list[int] = []
    for _ in range(3):
        _kill_while(record_batches_forever, db_path, rng.uniform(0.05, 0.4), len(committed))
        with _assert_consistent(db_path) as db:
            instances = [m.instance for m, _, _ in db.measurements(PROBLEM)]
            assert instances[0] == "old"
            batches: dict[int, list[str]] = {}
            for name in instances[1:]:
                batches.setdefault(int(name[1:].split("_")[0]), []).append(name)
            committed = sorted(batches)
            assert committed == list(range(len(committed))) and committed, "batches commit in order"
            for index in committed:
                assert sorted(batches[index]) == sorted(m.instance for m in killed_batch(index))
            assert db.best(PROBLEM, DEVICE).instance == f"b{committed[-1]}_best"
