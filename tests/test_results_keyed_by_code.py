"""Results are keyed by the code that produced them: a measurement carries its instance's source hash,
and resume, winners, select() and `kfactory query` use it only while the catalog renders that source.
Also: the in-place upgrade of an older database, the DB change token behind select()'s memo, and
`db verify` naming a renamed family. Runs on tests/fake_gpu.py's FakeGPU."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

import factory.backends
import factory.sources
import factory.tuner
from factory import api, cli
from factory.api import NotTuned, select
from factory.catalog import all_instances, instance_by_name
from factory.problem import DType, Layout, parse_conv_problem
from factory.recheck import Action, Trigger, as_record, recheck_winners
from factory.selector import SERVED, Refused, heuristic_pick, lookup, stored_choice
from factory.sources import hash_of
from fake_gpu import FAKE_TARGET, DEVICE, SETTINGS, FakeGPU, code_of, fake_us, isolate
from tuning_db import SCHEMA_VERSION, Measurement, TuningDB

pytestmark = pytest.mark.filterwarnings("ignore:.*cannot be rebuilt in a worker process:RuntimeWarning")

SPEC = "N=2,G=8,C=1,K=1,input=9x9,filter=3x3,pad=1"
PROBLEM = parse_conv_problem(SPEC, Layout.NHWGC, DType.FP16)
NAMES = [c.name for c in lookup(PROBLEM, target=FAKE_TARGET)]
TUNED = next(n for n in NAMES if n != heuristic_pick(PROBLEM).name)
OLD_CODE = "0" * 64


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)


def ok(instance: str, us: float, code: str | None) -> Measurement:
    return Measurement(instance, us, 0.1, 25, True, source_hash=code)


def query_json(capsys, monkeypatch, db: TuningDB) -> dict:
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: FakeGPU(PROBLEM))
    code = cli.main(["query", "--layout", "NHWGC", "--dtype", "fp16", "--problem", SPEC, "--db", db.location, "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    return json.loads(out)


def make_schema_1(path: Path) -> None:
    """Turn a fresh database into what kernel-factory wrote before measurements carried a hash
    (and before jobs and Alembic's revision stamp)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("DROP TABLE jobs")
        conn.execute("DROP TABLE alembic_version")
        conn.execute("ALTER TABLE measurements DROP COLUMN source_hash")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        conn.commit()
    finally:
        conn.close()


# --- the source hash ------------------------------------------------------------------------------
def test_the_hash_is_the_rendered_sources_and_is_rendered_once(monkeypatch):
    from factory.codegen import render, source_hash

    inst = instance_by_name(TUNED)
    factory.sources.forget()
    renders = []
    monkeypatch.setattr(factory.sources, "render", lambda i: renders.append(i.name) or render(i))
    assert hash_of(inst) == source_hash(render(inst)) == hash_of(inst)
    assert renders == [TUNED]
    factory.sources.forget()


# --- schema upgrade ---------------------------------------------------------------------------------
def test_an_older_database_is_upgraded_in_place_and_its_rows_count_as_unknown_code(tmp_path):
    path = tmp_path / "old.sqlite"
    TuningDB(str(path)).close()
    make_schema_1(path)
    conn = sqlite3.connect(path)
    device_id = 1
    conn.execute("INSERT INTO devices (id, backend, arch, name, sm_count, driver_version, compiler_version) "
                 "VALUES (1, ?, ?, ?, ?, ?, ?)", (DEVICE.backend.value, DEVICE.arch, DEVICE.name, DEVICE.sm_count,
                                                  DEVICE.driver_version, DEVICE.compiler_version))
    conn.execute("INSERT INTO measurements (id, problem_key, op, device_id, instance, median_us, spread_us, reps, "
                 "verified, error, gbps, tflops, recorded_at) VALUES (1, ?, ?, ?, ?, 2.0, 0.1, 25, 1, NULL, NULL, "
                 "NULL, '2024-01-01 00:00:00')", (PROBLEM.key, PROBLEM.op.value, device_id, TUNED))
    conn.execute("INSERT INTO winners (problem_key, op, device_id, measurement_id, decided_at) "
                 "VALUES (?, ?, 1, 1, '2024-01-01 00:00:00')", (PROBLEM.key, PROBLEM.op.value))
    conn.commit()
    conn.close()

    with TuningDB(str(path)) as db:
        assert db.schema_version == SCHEMA_VERSION
        [(m, _, _)] = db.measurements(PROBLEM.key)
        assert m.instance == TUNED and m.source_hash is None
        winner = db.best(PROBLEM.key, DEVICE)
        assert winner is not None and winner.source_hash is None
        choice = stored_choice(PROBLEM, db.lookup(PROBLEM.key, DEVICE))
        assert choice.instance is None
        [refusal] = choice.refusals
        assert refusal.kind is Refused.UNKNOWN_CODE and "measured on unknown code" in refusal.message
        with pytest.raises(NotTuned, match="measured on unknown code"):
            select(PROBLEM, mode="db", backend=FakeGPU(PROBLEM), db=db)
        # A resumed tune measures it again, and the new measurement of the current code wins.
        gpu = FakeGPU(PROBLEM)
        outcome = api.tune_problem(PROBLEM, gpu, db, SETTINGS)
        assert outcome.reused == 0 and TUNED in gpu.timed
        assert outcome.winner.source_hash == code_of(outcome.winner.instance)
        assert select(PROBLEM, mode="db", backend=gpu, db=db).name == outcome.winner.instance
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [(str(SCHEMA_VERSION),)]
    raw.close()


def test_the_upgrade_runs_once_for_two_openers(tmp_path):
    path = tmp_path / "old.sqlite"
    TuningDB(str(path)).close()
    make_schema_1(path)
    first, second = TuningDB(str(path)), TuningDB(str(path))
    assert first.schema_version == second.schema_version == SCHEMA_VERSION
    first.close()
    second.close()


# --- winners, resume, select and query ------------------------------------------------------------
def test_a_winner_measured_on_older_code_is_not_served_and_query_says_so(capsys, monkeypatch, tmp_path):
    db = TuningDB(str(tmp_path / "t.sqlite"))
    db.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [ok(TUNED, 2.5, OLD_CODE)])
    gpu = FakeGPU(PROBLEM)
    with pytest.raises(NotTuned, match=f"stored winner {TUNED} \\(2.50 µs\\) is not served: measured on older code"):
        select(PROBLEM, mode="db", backend=gpu, db=db)
    assert select(PROBLEM, mode="auto", backend=gpu, db=db).name == heuristic_pick(PROBLEM).name
    data = query_json(capsys, monkeypatch, db)
    assert data["tuned"] is False
    [refusal] = data["not_served"]
    assert refusal["kind"] == "older_code" and refusal["instance"] == TUNED
    assert (refusal["recorded"], refusal["current"]) == (OLD_CODE, code_of(TUNED))


def test_a_template_edit_re_tunes_what_it_changed(monkeypatch, tmp_path):
    from factory.codegen import render

    db = TuningDB(str(tmp_path / "t.sqlite"))
    first = api.tune_problem(PROBLEM, FakeGPU(PROBLEM), db, SETTINGS)
    assert first.winner.source_hash == code_of(first.winner.instance)
    assert select(PROBLEM, mode="db", backend=FakeGPU(PROBLEM), db=db).name == first.winner.instance

    # Edit one family's template: its instances render new sources, the others do not.
    edited = instance_by_name(first.winner.instance).family

    def render_edited(i):
        return render(i) + ("// edited\n" if i.family == edited else "")

    def edited_gpu() -> FakeGPU:
        gpu = FakeGPU(PROBLEM)
        gpu._by_digest.update({hashlib.sha256(render_edited(c).encode()).digest(): c for c in lookup(PROBLEM, target=FAKE_TARGET)})
        return gpu

    factory.sources.forget()
    monkeypatch.setattr(factory.sources, "render", render_edited)
    try:
        with pytest.raises(NotTuned, match="measured on older code"):
            select(PROBLEM, mode="db", backend=edited_gpu(), db=db)
        gpu = edited_gpu()
        again = api.tune_problem(PROBLEM, gpu, db, SETTINGS)
        changed = {n for n in NAMES if instance_by_name(n).family == edited}
        assert set(gpu.timed) == changed and again.reused == len(NAMES) - len(changed)
        assert again.winner.instance == first.winner.instance  # same times on the fake GPU, new code
        assert again.winner.source_hash == hash_of(instance_by_name(again.winner.instance))
        assert select(PROBLEM, mode="db", backend=gpu, db=db).name == again.winner.instance
    finally:
        factory.sources.forget()


def test_decide_counts_only_measurements_of_current_code(tmp_path):
    a, b = NAMES[0], NAMES[1]
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        db.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [ok(a, 1.0, OLD_CODE), ok(b, 5.0, code_of(b))])
        assert db.best(PROBLEM.key, DEVICE).instance == a  # the plain winner rule knows no catalog
        winner = db.decide(PROBLEM.key, DEVICE, {a: code_of(a), b: code_of(b)})
        assert winner.instance == b and winner.source_hash == code_of(b)


def test_export_and_import_carry_the_source_hash(tmp_path):
    with TuningDB(str(tmp_path / "a.sqlite")) as db, TuningDB(str(tmp_path / "b.sqlite")) as copy:
        db.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [ok(TUNED, 2.0, code_of(TUNED)), ok(NAMES[0], 3.0, None)])
        db.export_json(tmp_path / "x.json")
        document = json.loads((tmp_path / "x.json").read_text())
        assert [m["source_hash"] for m in document["measurements"]] == [code_of(TUNED), None]
        copy.import_json(tmp_path / "x.json")
        assert copy.measurements(PROBLEM.key) == db.measurements(PROBLEM.key)
        assert copy.best(PROBLEM.key, DEVICE).source_hash == code_of(TUNED)


# --- the change token and select()'s memo -----------------------------------------------------------
def test_the_change_token_moves_with_every_commit_from_any_connection(tmp_path):
    path = tmp_path / "t.sqlite"
    with TuningDB(str(path)) as db, TuningDB(str(path)) as other:
        token = db.change_token()
        assert token is not None and db.change_token() == token
        db.lookup(PROBLEM.key, DEVICE)  # reads change nothing
        assert db.change_token() == token
        db.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [ok(TUNED, 2.0, None)])  # this object's own write
        after_own = db.change_token()
        assert after_own != token
        other.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [ok(TUNED, 1.0, None)])  # another connection
        assert db.change_token() != after_own
        assert other.change_token() != db.change_token()  # two connections' tokens never compare equal
    raw_writer = sqlite3.connect(path)
    with TuningDB(str(path)) as db:
        token = db.change_token()
        raw_writer.execute("INSERT INTO devices (backend, arch, name, sm_count, driver_version, compiler_version) "
                           "VALUES ('cuda', 'sm_80', 'another process', 108, '1', '1')")
        raw_writer.commit()
        assert db.change_token() != token
    raw_writer.close()


def test_an_in_memory_database_gives_no_token():
    assert TuningDB("sqlite://").change_token() is None


def test_select_reads_the_db_once_until_it_changes_and_sees_other_writers(tmp_path, monkeypatch):
    path = str(tmp_path / "t.sqlite")
    db, writer = TuningDB(path), TuningDB(path)
    gpu = FakeGPU(PROBLEM)
    reads = []
    real = db.lookup
    monkeypatch.setattr(db, "lookup", lambda *a: reads.append(a) or real(*a))
    SERVED.clear()

    with pytest.raises(NotTuned):
        select(PROBLEM, mode="db", backend=gpu, db=db)
    with pytest.raises(NotTuned):
        select(PROBLEM, mode="db", backend=gpu, db=db)
    assert len(reads) == 1

    writer.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [ok(TUNED, 2.0, code_of(TUNED))])
    kernel = select(PROBLEM, mode="db", backend=gpu, db=db)
    assert kernel.name == TUNED and len(reads) == 2
    assert select(PROBLEM, mode="db", backend=gpu, db=db) is kernel and len(reads) == 2

    faster = next(n for n in NAMES if n != TUNED)
    writer.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [ok(faster, 1.0, code_of(faster))])
    assert select(PROBLEM, mode="db", backend=gpu, db=db).name == faster and len(reads) == 3
    # Another device is another memo entry.
    other = FakeGPU(PROBLEM, dataclasses.replace(DEVICE, driver_version="1"))
    assert select(PROBLEM, mode="auto", backend=other, db=db).name == heuristic_pick(PROBLEM).name
    assert len(reads) == 4


# --- db verify ------------------------------------------------------------------------------------
def test_verify_names_a_renamed_family_and_times_a_winner_of_older_code_again(tmp_path):
    renamed = TUNED.replace(f"_{instance_by_name(TUNED).family}_", "_oldfamily_", 1)
    other = parse_conv_problem("N=1,G=4,C=1,K=1,input=8x8,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    stale = lookup(other, target=FAKE_TARGET)[0].name
    with TuningDB(str(tmp_path / "v.sqlite")) as db:
        db.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [ok(renamed, 1.0, OLD_CODE)])
        # Older code timed far faster than today's runs, yet within the threshold: the winner row must
        # still move to today's measurement (the winner rule alone keeps a faster incumbent).
        db.record(other.key, other.op.value, DEVICE, [ok(stale, 1e-6, OLD_CODE)])
        assert db.best(other.key, DEVICE).source_hash == OLD_CODE
        rows = {r.problem_key: r for r in recheck_winners(db, FakeGPU(other), threshold=1e12, settings=SETTINGS)}
        # The winner of older code was timed on today's code and is served again; the other stays out.
        served = db.best(other.key, DEVICE)
        assert served.instance == stale and served.source_hash == code_of(stale)
    gone, old = rows[PROBLEM.key], rows[other.key]
    assert gone.action is Action.NOT_SERVED
    assert old.action is Action.RETIMED and old.now is not None and old.now.verified
    assert as_record(old)["not_served"] == [] and as_record(old)["code_changed"] is True
    [why] = gone.refusals
    assert why.kind is Refused.NOT_IN_CATALOG
    assert why.message.startswith("its instance is no longer in the catalog: family 'oldfamily' is not one of "
                                  "conv_bwd_weight's (")
    assert why.message.endswith("renamed or removed)")
    [why] = old.refusals
    assert why.kind is Refused.OLDER_CODE and why.recorded == OLD_CODE


def test_verify_changed_only_re_times_the_winners_of_older_code_and_leaves_the_rest_alone(tmp_path):
    other = parse_conv_problem("N=1,G=4,C=1,K=1,input=8x8,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    stale = lookup(other, target=FAKE_TARGET)[0].name
    with TuningDB(str(tmp_path / "v.sqlite")) as db:
        db.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [ok(TUNED, 2.0, code_of(TUNED))])  # current
        db.record(other.key, other.op.value, DEVICE, [ok(stale, 1e-6, OLD_CODE)])
        counted: list[int] = []
        rows = recheck_winners(db, FakeGPU(other), threshold=1e12, settings=SETTINGS, changed_only=True,
                               on_count=counted.append)
        current = db.measurements(PROBLEM.key, DEVICE)
    assert counted == [1] and [(r.problem_key, r.action) for r in rows] == [(other.key, Action.RETIMED)]
    assert len(current) == 1  # the current winner was not timed again


def test_verify_retunes_a_winner_of_older_code_that_today_s_code_made_slower(tmp_path):
    """Older code recorded far faster than today's code runs: the winner is not served again on its
    old time; the problem is tuned afresh, as for a winner of current code that got slower."""
    other = parse_conv_problem("N=1,G=4,C=1,K=1,input=8x8,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    stale = lookup(other, target=FAKE_TARGET)[0].name
    with TuningDB(str(tmp_path / "v.sqlite")) as db:
        db.record(other.key, other.op.value, DEVICE, [ok(stale, 1e-6, OLD_CODE)])
        [row] = recheck_winners(db, FakeGPU(other), settings=SETTINGS)
        served = db.best(other.key, DEVICE)
    assert row.action is Action.RETUNED and row.trigger is Trigger.SLOWER
    assert as_record(row)["code_changed"] is True and row.new_winner is not None
    assert served.source_hash is not None and served.source_hash != OLD_CODE

def test_every_catalog_instance_renders_a_distinct_hash_per_name():
    sample = all_instances()[::500]
    hashes = {hash_of(i) for i in sample}
    assert len(hashes) == len(sample)


def test_a_large_tunes_candidates_are_rendered_once_each(monkeypatch):
    """A tune takes each candidate's hash (for the DB) and then its text (to compile): the second must
    come from the cache, not a second render, for a channels-last depthwise problem's 499 candidates."""
    from collections import Counter

    from factory import sources
    from factory.problem import DType, Layout, parse_conv_problem
    from factory.selector import lookup

    problem = parse_conv_problem("N=64,G=512,C=1,K=1,input=56x56,filter=3x3,stride=1,pad=1", Layout.NHWGC, DType.FP16)
    candidates = lookup(problem)
    assert len(candidates) > 200
    sources.forget()
    renders: Counter[str] = Counter()
    real = sources.render
    monkeypatch.setattr(sources, "render", lambda instance: renders.update([instance.name]) or real(instance))
    hashes = [sources.hash_of(c) for c in candidates]
    texts = [sources.source_of(c).text for c in candidates]
    assert len(set(hashes)) == len(texts) == len(candidates)
    assert set(renders.values()) == {1}
