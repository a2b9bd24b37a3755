"""The CLI against hostile inputs: every path argument, environment variable and file kfactory reads.

Properties, as a new user would check them:
- exit 0, or 2 with exactly one line on stderr naming the culprit; never a traceback;
- nothing lost: the tuning DB, the output directory and any file a command was pointed at are
  byte-identical afterwards, or (where the command writes them) valid and whole;
- nothing wrong stored: an import adds only rows `tune` could have written (times > 0, known ops, ...);
- Ctrl-C at any moment of generate / tune / import / export (a KeyboardInterrupt raised at the N-th
  line our code executes, N drawn by hypothesis; and one real SIGINT) exits 130 and leaves every
  file whole.

Runs on the CPU in-process through factory.cli.main, with tests/fake_gpu.py's FakeGPU where a GPU is
needed. Examples are derandomized and bounded (see test_fuzz_inputs.py for the deeper profile).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import factory.backends
from factory import cli, codegen
from factory.backends import BackendError, BackendKind
from factory.catalog import select_instances
from factory.problem import DType, Layout, Op, parse_conv_problem
from factory.selector import lookup
from fake_gpu import FAKE_TARGET, DEVICE, FakeGPU, install_fake_compiler
from tuning_db import Measurement, TuningDB

THOROUGH = os.environ.get("HYPOTHESIS_PROFILE", "") == "thorough"
REPO = Path(__file__).resolve().parents[1]
SPEC = "N=2,G=8,C=1,K=1,input=9x9,filter=3x3,pad=1"
CELL = ["--layout", "NHWGC", "--dtype", "fp16"]
PROBLEM = parse_conv_problem(SPEC, Layout.NHWGC, DType.FP16)
NAMES = sorted(c.name for c in lookup(PROBLEM, target=FAKE_TARGET))
# A small generate: a handful of instances.
GEN_ARGS = ["--layout", "GNHWC", "--dtype", "fp16", "--ndim", "1", "--family", "dw"]
GEN_NAMES = sorted(i.name for i in select_instances(Op.CONV_BWD_WEIGHT, Layout.GNHWC, DType.FP16, 1, "dw"))
OURS = (str(REPO / "factory"), str(REPO / "tuning_db"))

pytestmark = pytest.mark.filterwarnings("ignore:.*cannot be rebuilt in a worker process:RuntimeWarning")


def fuzz(examples: int) -> settings:
    return settings(max_examples=examples * (20 if THOROUGH else 1), deadline=None, derandomize=not THOROUGH,
                    database=None, suppress_health_check=list(HealthCheck))


# --- harness ---------------------------------------------------------------------------------------
@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private DB and cache and a machine without a GPU."""

    def construct(kind: BackendKind, device: int) -> Any:
        raise BackendError(f"{kind.value} runtime found no device")

    monkeypatch.setenv("KFACTORY_DB", str(tmp_path / "tuning.db"))
    monkeypatch.setenv("KFACTORY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KFACTORY_BACKEND", raising=False)
    monkeypatch.setattr(factory.backends, "_ACTIVE", {})
    monkeypatch.setattr(factory.backends, "_construct", construct)
    return tmp_path


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeGPU]:
    """Call fake_gpu(**kw) to make get_backend() return a FakeGPU for PROBLEM; compiles are fake."""
    install_fake_compiler(monkeypatch.setattr)

    def install(**kw: Any) -> FakeGPU:
        gpu = FakeGPU(PROBLEM, **kw)
        monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: gpu)
        return gpu

    return install


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def assert_clean(code: int, out: str, err: str, allowed: tuple[int, ...] = (0, 2)) -> None:
    """Exit in `allowed`; 2 is exactly one line on stderr starting with kfactory; never a traceback."""
    assert "Traceback" not in err and "Traceback" not in out, err
    assert code in allowed, (code, err)
    if code == 2:
        lines = [line for line in err.splitlines() if not line.startswith("kfactory: warning:")]
        assert len(lines) == 1 and lines[0].startswith("kfactory"), err


def tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under `root` (not following links): file bytes, or what the entry is."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = f"link -> {os.readlink(path)}"
        elif path.is_file():
            found[rel] = path.read_bytes()
        elif path.is_dir():
            found[rel] = "dir"
    return found


def db_rows(path: Path) -> tuple[list[tuple], list[tuple]]:
    """(measurements, winners) of an SQLite DB, after an integrity check."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        measurements = conn.execute(
            "SELECT problem_key, op, instance, median_us, verified FROM measurements ORDER BY id").fetchall()
        winners = conn.execute(
            "SELECT w.problem_key, m.instance, m.median_us FROM winners w JOIN measurements m ON m.id = w.measurement_id"
            " ORDER BY w.id").fetchall()
    finally:
        conn.close()
    return measurements, winners


def seeded_db(path: Path) -> None:
    """A DB holding two problems' measurements and winners, as tunes on DEVICE leave them."""
    with TuningDB(str(path)) as db:
        db.record(PROBLEM.key, "conv_bwd_weight", DEVICE,
                  [Measurement(NAMES[0], 5.0, 0.1, 25, True, None, 10.0, 1.0),
                   Measurement(NAMES[1], None, None, 0, False, "compile: error: expected ';'")])
        db.record("conv_bwd_weight:other", "conv_bwd_weight", DEVICE, [Measurement(NAMES[2], 7.5, 0.2, 25, True)])


def db_files(path: Path) -> dict[str, bytes]:
    """The DB file's bytes (its -wal/-shm side files are SQLite's own business)."""
    return {path.name: path.read_bytes()} if path.exists() else {}


# --- path arguments and environment variables --------------------------------------------------------
# Kinds of things a path argument may name; each built fresh in a scratch directory.
PATH_KINDS = ("new", "new_in_missing_dir", "under_a_file", "existing_file", "empty_file", "directory",
              "nonempty_directory", "symlink_to_file", "dangling_symlink", "read_only_file", "dev_null",
              "the_db", "the_db_wal", "empty_string", "dot", "long_name", "odd_characters", "earlier_export")


def make_path(kind: str, scratch: Path, db: Path) -> str:
    victim = scratch / "precious.txt"
    victim.write_text("keep me\n")
    if kind == "new":
        return str(scratch / "fresh.json")
    if kind == "new_in_missing_dir":
        return str(scratch / "missing" / "deeper" / "x.json")
    if kind == "under_a_file":
        return str(victim / "x.json")
    if kind == "existing_file":
        return str(victim)
    if kind == "empty_file":
        (scratch / "empty").write_bytes(b"")
        return str(scratch / "empty")
    if kind == "directory":
        (scratch / "d").mkdir()
        return str(scratch / "d")
    if kind == "nonempty_directory":
        (scratch / "full").mkdir()
        (scratch / "full" / "notes.txt").write_text("mine\n")
        return str(scratch / "full")
    if kind == "symlink_to_file":
        (scratch / "link").symlink_to(victim)
        return str(scratch / "link")
    if kind == "dangling_symlink":
        (scratch / "dangling").symlink_to(scratch / "nowhere")
        return str(scratch / "dangling")
    if kind == "read_only_file":
        ro = scratch / "ro.json"
        ro.write_text('{"format": "kernel-factory-tuning"}\n')
        ro.chmod(0o444)
        return str(ro)
    if kind == "dev_null":
        return os.devnull
    if kind == "the_db":
        return str(db)
    if kind == "the_db_wal":
        return f"{db}-wal"
    if kind == "empty_string":
        return ""
    if kind == "dot":
        return "."
    if kind == "long_name":
        return str(scratch / ("n" * 300))
    if kind == "odd_characters":
        return str(scratch / "a\nb ü\t;$(x).json")
    if kind == "earlier_export":
        # Closed here, before the test snapshots the folder: a DB left to the garbage collector checkpoints
        # its write-ahead log into other.db whenever it is collected, changing the file under the test.
        with TuningDB(str(scratch / "other.db")) as other:
            other.export_json(scratch / "old.json")
        return str(scratch / "old.json")
    raise AssertionError(kind)


def path_commands(path: str) -> list[list[str]]:
    return [
        ["db", "export", path],
        ["db", "import", path],
        ["db", "stats", "--db", path],
        ["query", *CELL, "--problem", SPEC, "--db", path],
        ["generate", *GEN_ARGS, "--out", path],
        ["list", "--op", "conv_bwd_weight", "--problem", path, *CELL],
    ]


@fuzz(60)
@given(kind=st.sampled_from(PATH_KINDS), command=st.integers(0, 5))
def test_every_path_argument_is_handled_and_loses_nothing(home: Path, kind: str, command: int) -> None:
    scratch = Path(tempfile.mkdtemp(dir=home, prefix=f"s-{kind}-{command}-"))
    db = home / "tuning.db"
    if not db.exists():
        seeded_db(db)
    path = make_path(kind, scratch, db)
    argv = path_commands(path)[command]
    before_tree, before_db = tree(scratch), db_files(db)
    rows_before = db_rows(db)

    code, out, err = run_cli(*argv)
    assert_clean(code, out, err)
    after = tree(scratch)
    # What was there is still there, byte for byte (an export may replace an empty file or an earlier
    # export, a new export or DB file may be added beside it) ...
    replaced = Path(path).name if code == 0 and argv[:2] == ["db", "export"] else None
    assert {k: after.get(k) for k in before_tree if k != replaced} == {k: v for k, v in before_tree.items() if k != replaced}
    if code == 2:  # ... and a refused command added no file
        assert {k for k, v in after.items() if v != "dir"} == {k for k, v in before_tree.items() if v != "dir"}
    if argv[:2] != ["db", "import"]:
        assert db_files(db) == before_db or db_rows(db) == rows_before
    else:
        assert db_rows(db)[1] == rows_before[1] or code == 0
    if code == 0 and argv[:2] == ["db", "export"]:
        exported = Path(path)
        assert not exported.is_symlink() and exported.is_file()
        json.loads(exported.read_text())  # strict JSON
        assert {k: v for k, v in after.items() if k != exported.name} == {
            k: v for k, v in before_tree.items() if k != exported.name}


# No one-character values: CPython shares one bytes object per byte value, and os.environ encodes through
# it; a test elsewhere in the suite that writes into such a buffer (through ctypes) would show up here.
ENV_VALUES = (["", "  ", "//", "/dev/null", "relative/x.db", "~/x.db", "no_such_dir/deeper/x.db",
                              "postgresql://u:p@localhost/db", "mysql://h/d", "foo://x", "sqlite://",
                              "sqlite:///:memory:", "http://example.com", "a\nb", "ü.db", "cuda", "hip", "CUDA",
                              "x" * 300])


@fuzz(40)
@given(variable=st.sampled_from(["KFACTORY_DB", "KFACTORY_CACHE_DIR", "KFACTORY_BACKEND"]),
       index=st.integers(0, len(ENV_VALUES) - 1), command=st.sampled_from(["stats", "query", "tune"]))
def test_every_environment_variable_is_handled(home: Path, variable: str, index: int, command: str) -> None:
    value = ENV_VALUES[index]
    scratch = home / "cwd"
    scratch.mkdir(exist_ok=True)
    argv = {"stats": ["db", "stats"], "query": ["query", *CELL, "--problem", SPEC],
            "tune": ["tune", *CELL, "--problem", SPEC, "--reps", "2"]}[command]
    existed = (home / "tuning.db").exists()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(scratch)
        mp.setenv(variable, value)
        code, out, err = run_cli(*argv)
    # tune has no GPU here: exit 1 (a GPU runtime error) is its honest answer to valid input
    assert_clean(code, out, err, allowed=(0, 1, 2) if command == "tune" else (0, 2))
    if command == "tune":
        assert (home / "tuning.db").exists() == existed  # failed before the GPU: no DB file left behind


def test_a_file_as_cache_dir_compiles_in_memory_and_warns_once(home: Path, fake_gpu: Any) -> None:
    blocker = home / "cache-file"
    blocker.write_text("not a directory\n")
    fake_gpu()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KFACTORY_CACHE_DIR", str(blocker))
        code, out, err = run_cli("tune", *CELL, "--problem", SPEC, "--reps", "2")
    assert code == 0, err
    assert sum("compile cache" in line for line in err.splitlines()) == 1, err
    measurements, winners = db_rows(home / "tuning.db")
    assert len(measurements) == len(NAMES) and all(verified for *_, verified in measurements)
    assert blocker.read_text() == "not a directory\n"


def test_an_unwritable_cache_then_a_fixed_one_measures_everything_again(home: Path, fake_gpu: Any) -> None:
    """Failures stored by an older run whose cache could not be written are retried on resume."""
    with TuningDB(str(home / "tuning.db")) as db:
        db.record(PROBLEM.key, "conv_bwd_weight", DEVICE,
                  [Measurement(n, None, None, 0, False, f"compile: PermissionError: [Errno 13] Permission denied: '{home}'")
                   for n in NAMES[:-1]]
                  + [Measurement(NAMES[-1], None, None, 0, False, "timeout: exceeded 2 s")])
    fake_gpu()
    code, out, err = run_cli("tune", *CELL, "--problem", SPEC, "--reps", "2", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["reused"] == 0 and result["winner"] is not None
    assert all(m["verified"] for m in result["measurements"])


def test_fresh_tune_where_nothing_verifies_does_not_present_the_old_winner(home: Path, fake_gpu: Any) -> None:
    seeded_db(home / "tuning.db")
    fake_gpu(wrong=frozenset(NAMES))
    code, out, err = run_cli("tune", *CELL, "--problem", SPEC, "--reps", "2", "--fresh")
    assert code == 1 and "Traceback" not in err
    assert "winner:" not in out and "no candidate verified" in out
    code, out, err = run_cli("tune", *CELL, "--problem", SPEC, "--reps", "2", "--fresh", "--json")
    assert code == 1 and json.loads(out)["winner"] is None


@pytest.mark.parametrize("reps", ["0", "1", "-5", "1e9", "x", "100001"])
def test_tune_reps_are_checked_before_the_gpu(home: Path, reps: str) -> None:
    def no_gpu_please(*_: Any, **__: Any) -> Any:
        raise AssertionError("tune reached the GPU with bad --reps")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(factory.backends, "get_backend", no_gpu_please)
        code, out, err = run_cli("tune", *CELL, "--problem", SPEC, "--reps", reps)
    assert code == 2 and "--reps" in err
    assert_clean(code, out, err)
    assert not (home / "tuning.db").exists()


# --- generate into directories that hold other things -------------------------------------------------
def test_generate_refuses_a_directory_of_another_run_and_replaces_its_own(home: Path) -> None:
    out = home / "gen"
    assert run_cli("generate", *GEN_ARGS, "--out", str(out))[0] == 0
    first = tree(out)
    assert sorted(p[:-4] for p in first if p.endswith(".hip")) == GEN_NAMES
    code, o, err = run_cli("generate", "--layout", "GNHWC", "--dtype", "fp16", "--ndim", "1", "--family", "dl",
                           "--out", str(out))
    assert code == 2 and "--family dw" in err
    assert_clean(code, o, err)
    assert tree(out) == first
    assert run_cli("generate", *GEN_ARGS, "--out", str(out))[0] == 0  # the same run again: replaced
    assert tree(out) == first


def assert_generated_whole(out: Path) -> None:
    """Every .hip file is a complete rendering; a manifest, if any, lists exactly the files present."""
    if not out.exists():
        return
    by_name = {i.name: i for i in select_instances(Op.CONV_BWD_WEIGHT, Layout.GNHWC, DType.FP16, 1, "dw")}
    names = sorted(p.name for p in out.iterdir())
    assert not [n for n in names if n.startswith(".")], names  # no temporary files left
    for name in names:
        if name.endswith(".hip"):
            assert (out / name).read_text() == codegen.render(by_name[name[:-4]]), name
    if "manifest.json" in names:
        manifest = json.loads((out / "manifest.json").read_text())
        assert sorted(r["file"] for r in manifest["instances"]) == sorted(n for n in names if n.endswith(".hip"))


# --- imports: hostile documents -----------------------------------------------------------------------
def good_export(path: Path, scratch: Path) -> dict[str, Any]:
    source = scratch / "source.db"
    if not source.exists():
        seeded_db(source)
    TuningDB(str(source)).export_json(path)
    return json.loads(path.read_text())


HOSTILE_VALUES = st.sampled_from([0, -1, 0.0, -0.0, 1e-300, 2**70, -(2**70), 1e309, "NaN", "", " ", "x" * 5000,
                                  "a\nb", None, True, [], {}, "9999-99-99", "conv_fwd", "cuda", 3.5, [[[[]]]]])
FIELDS = st.sampled_from([
    ("schema_version",), ("format",), ("devices", 0, "sm_count"), ("devices", 0, "arch"), ("devices", 0, "backend"),
    ("devices", 0, "name"), ("measurements", 0, "median_us"), ("measurements", 0, "op"),
    ("measurements", 0, "instance"), ("measurements", 0, "recorded_at"), ("measurements", 0, "reps"),
    ("measurements", 0, "device"), ("measurements", 0, "problem_key"), ("measurements", 0, "verified"),
    ("measurements", 0, "spread_us"), ("measurements", 0, "gbps"), ("winners", 0, "measurement"),
    ("winners", 0, "op"), ("winners", 0, "device"), ("devices",), ("measurements",), ("winners",)])


@fuzz(40)
@given(field=FIELDS, value=HOSTILE_VALUES, delete=st.booleans())
def test_an_import_stores_nothing_wrong(home: Path, field: tuple, value: Any, delete: bool) -> None:
    db = home / "tuning.db"
    if not db.exists():
        seeded_db(db)
    doc = good_export(home / "good.json", home)
    target = doc
    for step in field[:-1]:
        target = target[step]
    if delete:
        target.pop(field[-1], None) if isinstance(target, dict) else None
    else:
        target[field[-1]] = copy.deepcopy(value)
    bad = home / "bad.json"
    bad.write_text(json.dumps(doc))  # float('inf') / nan leave as Infinity / NaN: Python's JSON, not JSON
    before = db_rows(db)

    code, out, err = run_cli("db", "import", str(bad))
    assert_clean(code, out, err)
    if code == 2:
        assert str(bad) in err and db_rows(db) == before
    measurements, winners = db_rows(db)
    assert all(us is not None and 0 < us < 1e12 for _, _, us in winners)
    assert {op for _, op, *_ in measurements} <= {o.value for o in Op}
    assert run_cli("db", "export", str(home / "again.json"))[0] == 0  # whatever was stored exports as JSON


def test_an_export_of_zero_times_cannot_poison_the_winners(home: Path) -> None:
    db = home / "tuning.db"
    seeded_db(db)
    doc = good_export(home / "good.json", home)
    for m in doc["measurements"]:
        if m["median_us"] is not None:
            m["median_us"] = 0.0
    (home / "zero.json").write_text(json.dumps(doc))
    before = db_rows(db)
    code, out, err = run_cli("db", "import", str(home / "zero.json"))
    assert code == 2 and "median_us" in err
    assert db_rows(db) == before


@pytest.mark.parametrize("content", ["[" * 100_000, "{" + '"a":' * 50_000, '{"format": "kernel-factory-tuning", '
                                     '"schema_version": 1, "devices": [], "measurements": [], "winners": []' + "]" * 3,
                                     "1" * 5000, "\udcff".encode("utf-8", "surrogatepass").decode("latin-1")])
def test_pathological_json_is_one_line(home: Path, content: str) -> None:
    (home / "deep.json").write_text(content, encoding="latin-1")
    assert_clean(*run_cli("db", "import", str(home / "deep.json")))
    assert run_cli("db", "import", str(home / "deep.json"))[0] == 2


# --- corrupt databases ---------------------------------------------------------------------------------
CORRUPTIONS = {
    "non_iso_recorded_at": "UPDATE measurements SET recorded_at = 'last tuesday'",
    "device_missing": "UPDATE measurements SET device_id = 99",
    "version_row_missing": "DELETE FROM meta",
    "version_zero": "UPDATE meta SET value = '0'",
    "unknown_backend": "UPDATE devices SET backend = 'opencl'",
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
@pytest.mark.parametrize("argv", [["db", "stats"], ["db", "export", "EXPORT"], ["query", *CELL, "--problem", SPEC],
                                  ["db", "import", "IMPORT"]], ids=["stats", "export", "query", "import"])
def test_a_corrupt_db_is_one_line_and_left_alone(home: Path, corruption: str, argv: list[str]) -> None:
    db = home / "tuning.db"
    seeded_db(db)
    good_export(home / "import.json", home)
    conn = sqlite3.connect(db)
    conn.execute(CORRUPTIONS[corruption])
    conn.commit()
    conn.close()
    before = db.read_bytes()
    argv = [str(home / "export.json") if a == "EXPORT" else str(home / "import.json") if a == "IMPORT" else a
            for a in argv]
    code, out, err = run_cli(*argv)
    assert_clean(code, out, err)
    if argv[:2] != ["db", "import"] or code == 2:
        assert db.read_bytes() == before
    if corruption in ("version_row_missing", "version_zero") or (
            corruption == "device_missing" and argv[0] == "db" and argv[1] != "stats"):
        assert code == 2
    if argv[:2] == ["db", "export"] and code == 2:
        assert not (home / "export.json").exists()


def test_a_read_only_db_can_be_queried(home: Path) -> None:
    db = home / "tuning.db"
    seeded_db(db)
    before = db.read_bytes()
    db.chmod(0o444)
    for argv in (["db", "stats", "--json"], ["query", *CELL, "--problem", SPEC], ["db", "export", str(home / "e.json")]):
        code, out, err = run_cli(*argv)
        assert code == 0, err
    assert db.read_bytes() == before


def test_export_follows_the_umask_and_refuses_its_own_db(home: Path) -> None:
    db = home / "tuning.db"
    seeded_db(db)
    old = os.umask(0o027)
    try:
        assert run_cli("db", "export", str(home / "e.json"))[0] == 0
    finally:
        os.umask(old)
    assert (home / "e.json").stat().st_mode & 0o777 == 0o640
    before = db.read_bytes()
    for target in (str(db), os.devnull):
        code, out, err = run_cli("db", "export", target)
        assert code == 2 and target in err
    assert db.read_bytes() == before and Path(os.devnull).is_char_device()


def test_a_large_import_lets_a_concurrent_writer_in(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Imports commit in batches: another writer waits for one batch, not for the whole file."""
    import tuning_db.merge as merge

    monkeypatch.setattr(merge, "BATCH_ROWS", 50)
    source = home / "big.db"
    with TuningDB(str(source)) as db:
        db.record("conv_bwd_weight:big", "conv_bwd_weight", DEVICE,
                  [Measurement(f"k{i}", 1.0 + i, 0.1, 25, True) for i in range(400)])
        db.export_json(home / "big.json")
    commits: list[int] = []
    real = TuningDB._write

    def counting(self: TuningDB, work: Any) -> Any:
        commits.append(1)
        return real(self, work)

    monkeypatch.setattr(TuningDB, "_write", counting)
    assert run_cli("db", "import", str(home / "big.json"))[0] == 0
    assert len(commits) >= 400 // 50
    assert len(db_rows(home / "tuning.db")[0]) == 400
    assert run_cli("db", "import", str(home / "big.json"))[0] == 0  # again: nothing added twice
    assert len(db_rows(home / "tuning.db")[0]) == 400


# --- Ctrl-C at any moment -------------------------------------------------------------------------------
class _Interrupter:
    """Raises KeyboardInterrupt at the `at`-th line executed in factory/ or tuning_db/ (as a SIGINT would).

    cli.main's own lines are not counted: the line of its `try` is the one place no Python handler covers.
    """

    def __init__(self, at: int) -> None:
        self.at = at
        self.count = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if not code.co_filename.startswith(OURS) or (code is cli.main.__code__):
            return None
        if event == "line":
            self.count += 1
            if self.count == self.at:
                raise KeyboardInterrupt
        return self


@contextlib.contextmanager
def interrupted_at(at: int) -> Iterator[_Interrupter]:
    tracer = _Interrupter(at)
    sys.settrace(tracer)
    try:
        yield tracer
    finally:
        sys.settrace(None)


def lines_of(action: Callable[[], Any]) -> int:
    with interrupted_at(-1) as tracer:
        action()
    return tracer.count


@fuzz(12)
@given(fraction=st.floats(0.0, 1.0))
def test_ctrl_c_during_generate_leaves_every_file_whole(home: Path, fraction: float) -> None:
    out = home / "gen"
    if not out.exists():
        assert run_cli("generate", *GEN_ARGS, "--out", str(out))[0] == 0  # an earlier run to regenerate over
    total = lines_of(lambda: run_cli("generate", *GEN_ARGS, "--out", str(home / "probe")))
    with interrupted_at(max(1, int(fraction * total))):
        code, o, err = run_cli("generate", *GEN_ARGS, "--out", str(out))
    assert code in (0, 130) and "Traceback" not in err
    assert_generated_whole(out)
    fresh = home / f"gen-fresh-{fraction}"
    with interrupted_at(max(1, int(fraction * total))):
        code, o, err = run_cli("generate", *GEN_ARGS, "--out", str(fresh))
    assert code in (0, 130) and "Traceback" not in err
    assert_generated_whole(fresh)


@fuzz(12)
@given(fraction=st.floats(0.0, 1.0), command=st.sampled_from(["export", "import"]))
def test_ctrl_c_during_export_or_import_leaves_every_file_whole(home: Path, fraction: float, command: str) -> None:
    db = home / "tuning.db"
    if not db.exists():
        seeded_db(db)
    doc = good_export(home / "incoming.json", home)
    target = home / "out.json"
    target.write_text(json.dumps(doc))
    argv = ["db", "export", str(target)] if command == "export" else ["db", "import", str(home / "incoming.json")]
    before_target, before_rows = target.read_bytes(), db_rows(db)
    reference = Path(tempfile.mkdtemp(dir=home)) / "reference.db"
    shutil.copyfile(db, reference)
    total = lines_of(lambda: run_cli(*argv))
    with interrupted_at(max(1, int(fraction * total))):
        code, o, err = run_cli(*argv)
    assert code in (0, 130) and "Traceback" not in err
    measurements, winners = db_rows(db)
    assert [n for n in os.listdir(home) if n.endswith(".tmp")] == []
    if command == "export":
        assert (measurements, winners) == before_rows
        assert target.read_bytes() == before_target or json.loads(target.read_text())["format"]
    else:
        assert measurements[:len(before_rows[0])] == before_rows[0]  # whole batches added, nothing changed
        assert run_cli(*argv)[0] == 0  # an interrupted import completes when run again ...
        assert run_cli(*argv, "--db", str(reference))[0] == 0
        assert sorted(db_rows(db)[0]) == sorted(db_rows(reference)[0])  # ... as if never interrupted


@fuzz(5)
@given(fraction=st.floats(0.0, 1.0))
def test_ctrl_c_during_tune_leaves_a_sound_db(home: Path, fake_gpu: Any, fraction: float) -> None:
    fake_gpu()
    argv = ["tune", *CELL, "--problem", SPEC, "--reps", "2"]
    probe = home / "probe.db"
    total = lines_of(lambda: run_cli(*argv, "--db", str(probe)))
    db = home / f"t-{fraction}.db"
    with interrupted_at(max(1, int(fraction * total))):
        code, o, err = run_cli(*argv, "--db", str(db))
    assert code in (0, 130) and "Traceback" not in err
    if db.exists():
        measurements, winners = db_rows(db)
        assert all(us is not None and us > 0 for _, _, us in winners)
    code, o, err = run_cli(*argv, "--db", str(db), "--json")  # resumes and finishes
    assert code == 0, err
    assert json.loads(o)["winner"] is not None


def swallowed_by_the_interpreter(err: str) -> bool:
    """Whether every traceback in `err` is CPython's report of a KeyboardInterrupt it dropped ("Exception
    ignored in: ..."): a SIGINT that lands while a weakref callback or finalizer runs is printed and lost, and
    the command goes on to finish (exit 0), so the run must then have left every file whole as well."""
    lines = err.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    def dropped(i: int) -> bool:
        after = next((line for line in lines[i + 1:] if not line.startswith(" ")), "")
        return i > 0 and lines[i - 1].startswith("Exception ignored") and after.startswith("KeyboardInterrupt")
    return bool(starts) and all(dropped(i) for i in starts)


def test_a_real_sigint_during_generate_leaves_every_file_whole(tmp_path: Path) -> None:
    env = os.environ | {"PYTHONPATH": str(REPO), "KFACTORY_DB": str(tmp_path / "t.db"),
                        "KFACTORY_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "gen"
    for delay in (0.8, 1.6):
        proc = subprocess.Popen([sys.executable, "-m", "factory.cli", "generate", "--layout", "NHWGC", "--out", str(out)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 130, -signal.SIGINT), err
        assert ("Traceback" not in err or "KeyboardInterrupt" in err.splitlines()[-1]
                or proc.returncode == 0 and swallowed_by_the_interpreter(err)), err
        if out.exists():
            hips = [p for p in out.iterdir() if p.suffix == ".hip"]
            assert all(p.stat().st_size > 0 for p in hips)
            assert not [p for p in out.iterdir() if p.name.startswith(".")]
            if (out / "manifest.json").exists():
                listed = {r["file"] for r in json.loads((out / "manifest.json").read_text())["instances"]}
                assert listed <= {p.name for p in hips}
