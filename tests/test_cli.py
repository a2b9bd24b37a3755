"""The kfactory command line, in-process through factory.cli.main and, where exit codes and the absence
of tracebacks matter, through the installed console script."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import factory.backends
from factory import cli, codegen
from factory.backends import BackendError, BackendKind, DeviceInfo
from factory.catalog import all_instances, select_instances, specialized_instances
from factory.ops import SOLVERS, solver_for
from factory.problem import DType, Layout, Op, parse_conv_problem
from factory.selector import explain, heuristic_pick, lookup
from fake_gpu import code_of
from tuning_db import Measurement, TuningDB

REPO = Path(__file__).resolve().parents[1]
KFACTORY = REPO / ".venv" / "bin" / "kfactory"

# Depthwise 2-D: every family has candidates, and the heuristic has a choice to make.
SPEC = "N=2,G=8,C=1,K=1,input=9x9,filter=3x3,pad=1"
CELL = ["--layout", "NHWGC", "--dtype", "fp16"]
PROBLEM = parse_conv_problem(SPEC, Layout.NHWGC, DType.FP16)

DEVICE = DeviceInfo(
    backend=BackendKind.CUDA, arch="sm_90", name="NVIDIA H100 80GB HBM3", sm_count=132,
    driver_version="13000", compiler_version="nvrtc 13.0",
)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """Keep the user's DB and cache out of reach and start without a cached backend."""
    monkeypatch.setenv("KFACTORY_DB", str(tmp_path / "default.sqlite"))
    monkeypatch.setenv("KFACTORY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KFACTORY_BACKEND", raising=False)
    monkeypatch.setattr(factory.backends, "_ACTIVE", {})


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine whose every runtime reports no device (get_backend's aggregation still runs)."""

    def construct(kind: BackendKind, device: int):
        raise BackendError(f"{kind.value} runtime found no device")

    monkeypatch.setattr(factory.backends, "_construct", construct)


class _FakeGPU:
    """Stands in for a backend on a GPU machine; query only asks it who it is."""

    kind = BackendKind.CUDA

    def __init__(self, info: DeviceInfo) -> None:
        self.info = info

    def device_info(self) -> DeviceInfo:
        return self.info


@pytest.fixture
def gpu(monkeypatch):
    """Call gpu(info) to make get_backend() return a backend that reports `info`."""

    def install(info: DeviceInfo) -> None:
        monkeypatch.setattr(factory.backends, "get_backend", lambda *args, **kwargs: _FakeGPU(info))

    return install


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one in-process kfactory call."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse errors exit through SystemExit
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def flat(text: str) -> str:
    """Whitespace-normalised text, so lines the console wrapped compare as written."""
    return " ".join(text.split())


def squash(text: str) -> str:
    """Text without any whitespace, for titles the console may fold inside a long word."""
    return "".join(text.split())


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    assert "Traceback" not in err
    return lines[0]


def script(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KFACTORY), *argv], capture_output=True, text=True, env=env, timeout=120, cwd=REPO)


@pytest.fixture
def script_env(tmp_path) -> dict[str, str]:
    """Environment for the console script: private DB and cache, and every GPU hidden."""
    env = {k: v for k, v in os.environ.items() if k not in ("KFACTORY_BACKEND", "COLUMNS")}
    env.update(
        KFACTORY_DB=str(tmp_path / "script.sqlite"),
        KFACTORY_CACHE_DIR=str(tmp_path / "cache"),
        CUDA_VISIBLE_DEVICES="-1",
        HIP_VISIBLE_DEVICES="-1",
        ROCR_VISIBLE_DEVICES="-1",
    )
    return env


def record_tuning(db_path: Path, device: DeviceInfo = DEVICE, winner_name: str | None = None) -> tuple[str, float]:
    """Store three measurements of PROBLEM (fast verified, slower verified, failed); return the winner."""
    candidates = lookup(PROBLEM)
    assert len(candidates) >= 2
    winner_name = winner_name or candidates[-1].name
    runner_up = next(c.name for c in candidates if c.name != winner_name)
    measurements = [
        Measurement(runner_up, 9.5, 0.2, 25, True, gbps=100.0, tflops=0.1, source_hash=code_of(runner_up)),
        Measurement(winner_name, 4.25, 0.1, 25, True, gbps=200.0, tflops=0.2, source_hash=code_of(winner_name)),
        Measurement(candidates[0].name, None, None, 0, False, error="launch failed"),
    ]
    with TuningDB(str(db_path)) as db:
        stored = db.record(PROBLEM.key, PROBLEM.op.value, device, measurements)
    assert stored is not None and stored.instance == winner_name
    return winner_name, 4.25


# --- generate ------------------------------------------------------------------------------------
def test_generate_writes_one_source_per_instance_and_a_manifest(capsys, tmp_path):
    out_dir = tmp_path / "out"
    code, out, _ = run(capsys, "generate", "--op", "conv_bwd_weight", "--layout", "GNHWC", "--dtype", "fp16",
                       "--family", "dw", "--out", str(out_dir))
    assert code == 0
    expected = select_instances(Op.CONV_BWD_WEIGHT, Layout.GNHWC, DType.FP16, None, "dw")
    assert len({i.ndim for i in expected}) > 1, "the filter should span several ranks"
    names = {i.name for i in expected}
    assert {p.name for p in out_dir.iterdir()} == {f"{n}.hip" for n in names} | {"manifest.json"}

    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["op"] == "conv_bwd_weight"
    entries = manifest["instances"]
    assert len(entries) == len(expected) and {e["name"] for e in entries} == names
    by_name = {i.name: i for i in expected}
    for entry in entries:
        inst = by_name[entry["name"]]
        assert entry["op"] == "conv_bwd_weight"
        assert (entry["family"], entry["layout"], entry["dtype"], entry["ndim"]) == ("dw", "gnhwc", "fp16", inst.ndim)
        assert entry["params"] == inst.params_dict() and entry["params"]
        written = (out_dir / entry["file"]).read_bytes()
        assert entry["file"] == f"{inst.name}.hip"
        assert entry["source_hash"] == hashlib.sha256(written).hexdigest()
        assert written.decode() == codegen.render(inst)

    text = flat(out)
    assert f"{len(expected)} instances written to" in text
    for ndim in sorted({i.ndim for i in expected}):
        count = sum(i.ndim == ndim for i in expected)
        assert re.search(rf"gnhwc\W+fp16\W+{ndim}D\W+{count}\b", out), f"no count row for {ndim}D in:\n{out}"


def test_generate_with_filters_matching_nothing_is_a_usage_error(capsys, tmp_path):
    code, _, err = run(capsys, "generate", "--family", "no_such_family", "--out", str(tmp_path / "o"))
    assert code == 2
    assert "'no_such_family' is not a family of conv_bwd_weight" in one_error_line(err)
    assert not (tmp_path / "o").exists()


# --- list ----------------------------------------------------------------------------------------
def test_list_configuration_json_has_every_field(capsys):
    code, out, _ = run(capsys, "list", *CELL, "--ndim", "2", "--json")
    assert code == 0
    records = json.loads(out)
    expected = select_instances(Op.CONV_BWD_WEIGHT, Layout.NHWGC, DType.FP16, 2)
    assert [r["name"] for r in records] == [i.name for i in expected]
    assert {r["family"] for r in records} == {i.family for i in expected}
    for record in records:
        assert set(record) == {"name", "op", "family", "layout", "dtype", "ndim", "params"}
        assert (record["op"], record["layout"], record["dtype"], record["ndim"]) == ("conv_bwd_weight", "nhwgc", "fp16", 2)


def test_list_configuration_table(capsys):
    code, out, _ = run(capsys, "list", *CELL, "--ndim", "1", "--family", "dw")
    assert code == 0
    expected = select_instances(Op.CONV_BWD_WEIGHT, Layout.NHWGC, DType.FP16, 1, "dw")
    assert f"{len(expected)} instances" in flat(out)
    for inst in expected:
        assert inst.name in out


def test_list_problem_json_partitions_the_op_into_applicable_and_rejected(capsys):
    code, out, _ = run(capsys, "list", *CELL, "--problem", SPEC, "--why", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["problem"] == PROBLEM.key
    applicable = [r["name"] for r in data["applicable"]]
    assert applicable == [i.name for i in lookup(PROBLEM)] and applicable
    rejected = {r["name"]: r["reason"] for r in data["rejected"]}
    assert all(reason for reason in rejected.values())
    op_names = {i.name for i in all_instances() if i.op is Op.CONV_BWD_WEIGHT}
    op_names |= {i.name for i in specialized_instances(PROBLEM)}  # the problem's 3x3 from the dwr templates
    assert set(applicable) | set(rejected) == op_names and not set(applicable) & set(rejected)
    other_layout = next(i for i in all_instances() if i.op is Op.CONV_BWD_WEIGHT and i.layout is Layout.NGCHW)
    assert rejected[other_layout.name] == "layout is ngchw, problem is nhwgc"


def test_list_problem_without_why_rejects_nothing(capsys):
    code, out, _ = run(capsys, "list", *CELL, "--problem", SPEC, "--json")
    assert code == 0
    assert json.loads(out)["rejected"] == []


def test_list_problem_why_table_counts_the_cell(capsys):
    code, out, _ = run(capsys, "list", *CELL, "--problem", SPEC, "--why")
    assert code == 0
    applicable = lookup(PROBLEM)
    rejected = explain(PROBLEM)
    same_cell = [r for r in rejected if r.instance.cell_matches(PROBLEM)]
    assert same_cell, "the problem should rule out some instances of its own cell"
    text = squash(out)
    assert squash(f"{len(applicable)} instances compute {PROBLEM.key}") in text
    assert squash(f"not applicable in this cell ({len(same_cell)}); {len(rejected) - len(same_cell)} more") in text


def test_list_problem_with_a_family_lists_and_explains_only_that_family(capsys):
    code, out, _ = run(capsys, "list", *CELL, "--problem", SPEC, "--family", "dwr", "--why", "--json")
    assert code == 0
    data = json.loads(out)
    applicable = [r["name"] for r in data["applicable"]]
    assert applicable == [i.name for i in lookup(PROBLEM) if i.family == "dwr"] and applicable
    assert data["rejected"] and all("_dwr_" in r["name"] for r in data["rejected"])


# --- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["list", "query", "tune"])
@pytest.mark.parametrize("spec, field", [
    ("N=0,G=8,C=1,K=1,input=9x9,filter=3x3", "N"),
    ("N=2,G=8,C=1,K=1,input=2x2,filter=5x5,pad=1", "filter"),
    ("N=2,G=8,C=1,K=1,input=9x9,filter=3x3,stride=0", "stride"),
    ("N=2,G=8,C=1,K=1,input=9x9,filter=3x3,pad=-1", "pad"),
])
def test_invalid_sizes_name_the_field(capsys, command, spec, field):
    code, out, err = run(capsys, command, *CELL, "--problem", spec)
    assert code == 2
    assert one_error_line(err).startswith(f"kfactory: error: invalid {field}:")
    assert out == ""


@pytest.mark.parametrize("spec, token", [
    ("N=2,G=8,C=1,K=1,input=9x9,filter=3x3,oops", "'oops'"),
    ("N=2,G=8,C=1,K=1,input=9xq,filter=3x3", "input='9xq'"),
    ("N=2,G=8,C=1,K=1,input=9x9,filter=3x3,bias=1", "'bias=1'"),
    ("N=two,G=8,C=1,K=1,input=9x9,filter=3x3", "N='two'"),
])
def test_malformed_problem_names_the_bad_token(capsys, spec, token):
    code, _, err = run(capsys, "list", *CELL, "--problem", spec)
    assert code == 2
    line = one_error_line(err)
    assert line.startswith("kfactory: error: bad token") and token in line


# --- the output epilogue in the problem spelling ----------------------------------------------------
EPILOGUE_SPEC = SPEC + ",beta=2,alpha=0.5"


def test_list_problem_with_an_epilogue_keys_it_and_finds_every_family(capsys):
    problem = parse_conv_problem(EPILOGUE_SPEC, Layout.NHWGC, DType.FP16)
    code, out, _ = run(capsys, "list", *CELL, "--problem", EPILOGUE_SPEC, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["problem"] == problem.key and problem.key.endswith(",alpha=0.5,beta=2")
    applicable = [r["name"] for r in data["applicable"]]
    assert applicable == [i.name for i in lookup(problem)] == [i.name for i in lookup(PROBLEM)]


def test_query_with_an_epilogue_keeps_it_apart_and_advises_its_spelling(capsys, tmp_path, gpu):
    db = tmp_path / "x.sqlite"
    record_tuning(db)  # the plain problem's winner: not the scaled problem's
    gpu(DEVICE)
    code, out, _ = run(capsys, "query", *CELL, "--problem", EPILOGUE_SPEC, "--db", str(db), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["tuned"] is False and data["problem"].endswith(",alpha=0.5,beta=2")
    assert ',alpha=0.5,beta=2"' in data["instead"]["advice"]


def test_generate_for_a_problem_with_an_epilogue(capsys, tmp_path):
    code, _, err = run(capsys, "generate", "--op", "conv_bwd_weight", *CELL, "--problem", EPILOGUE_SPEC,
                       "--out", str(tmp_path / "out"))
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert {e["name"] for e in manifest["instances"]} == {i.name for i in lookup(PROBLEM)}


@pytest.mark.parametrize("command", ["list", "query", "tune"])
@pytest.mark.parametrize("spec, cell, says", [
    (SPEC + ",alpha=nan", CELL, "bad token alpha='nan' in problem: 'nan' is not a decimal number"),
    (SPEC + ",beta=1e999", CELL, "invalid beta: must be finite and within fp32 range"),
    (SPEC + ",alpha=2,alpha=3", CELL, "given twice"),
    (SPEC + ",alpha=0.5", ["--layout", "NHWGC", "--dtype", "int8"], "invalid alpha: int8 problems scale in exact integer"),
])
def test_bad_epilogue_values_are_one_line(capsys, tmp_path, no_gpu, command, spec, cell, says):
    code, out, err = run(capsys, command, *cell, "--problem", spec)
    assert code == 2 and out == ""
    assert says in one_error_line(err)


def test_an_op_without_an_epilogue_refuses_alpha_and_beta(capsys):
    code, _, err = run(capsys, "list", "--op", "groupnorm_bwd", "--layout", "NGCHW", "--dtype", "fp16",
                       "--problem", "N=2,C=64,G=32,input=7x9,beta=1")
    assert code == 2
    assert "unknown field 'beta'" in one_error_line(err)


@pytest.mark.parametrize("command", ["list", "generate"])
def test_unsupported_op_names_the_implemented_ones(capsys, monkeypatch, command):
    # Every op has a solver today; one whose solver is not registered must be refused by name.
    op = Op.GROUPNORM_BWD
    monkeypatch.delitem(SOLVERS, op)
    code, _, err = run(capsys, command, "--op", op.value)
    assert code == 2
    line = one_error_line(err)
    assert f"{op.value} has no kernels yet" in line
    assert all(o.value in line for o in SOLVERS)


def test_unknown_layout_is_one_line(capsys):
    code, _, err = run(capsys, "list", "--layout", "NCHW4")
    assert code == 2
    line = one_error_line(err)
    assert "unknown layout 'NCHW4'" in line and "nhwgc" in line


def test_unsupported_cell_lists_the_supported_ones(capsys, monkeypatch):
    # Every (layout, dtype, rank) cell of conv_bwd_weight has kernels, so take one away.
    solver = solver_for(Op.CONV_BWD_WEIGHT)
    cells = solver.supported_cells() - {(Layout.NHWGC, DType.FP16, 2)}
    monkeypatch.setattr(solver, "supported_cells", lambda family=None: cells)
    code, _, err = run(capsys, "list", *CELL, "--problem", SPEC)
    assert code == 2
    line = one_error_line(err)
    assert "conv_bwd_weight has no kernels for nhwgc/fp16/2D" in line
    assert "supported:" in line and "nhwgc/fp16: 1D,3D" in line and "ngchw/fp16: 1D,2D,3D" in line


@pytest.mark.parametrize("config", [[], ["--layout", "NHWGC"], ["--dtype", "fp16"]])
def test_problem_needs_layout_and_dtype(capsys, config):
    code, _, err = run(capsys, "list", *config, "--problem", SPEC)
    assert code == 2
    assert one_error_line(err) == "kfactory: error: --problem needs --layout and --dtype"


@pytest.mark.parametrize("argv", [["query", "--problem", SPEC], ["tune", "--layout", "NHWGC"], []])
def test_missing_arguments_are_one_line(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "the following arguments are required" in one_error_line(err)
    assert out == ""


def test_script_unknown_op_exits_2_with_one_line(script_env):
    result = script("list", "--op", "conv_fwd", env=script_env)
    assert result.returncode == 2
    line = one_error_line(result.stderr)
    assert "conv_fwd" in line and all(o.value in line for o in SOLVERS) and "usage:" not in result.stderr


# --- query ---------------------------------------------------------------------------------------
def test_query_empty_db_without_gpu_names_the_heuristic_pick(capsys, tmp_path, no_gpu):
    db = tmp_path / "x.sqlite"
    code, out, err = run(capsys, "query", *CELL, "--problem", SPEC, "--db", str(db))
    assert code == 0 and "Traceback" not in err
    text = flat(out)
    assert "untuned on this machine (no GPU: no usable GPU runtime:" in text
    assert text.endswith(f"the heuristic would pick {heuristic_pick(PROBLEM).name}")
    assert "not served" not in text
    assert db.is_file()


def test_query_json_empty_db_without_gpu(capsys, tmp_path, no_gpu):
    code, out, _ = run(capsys, "query", *CELL, "--problem", SPEC, "--db", str(tmp_path / "x.sqlite"), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["problem"] == PROBLEM.key
    assert data["tuned"] is False and data["not_served"] == []
    assert data["heuristic"] == heuristic_pick(PROBLEM).name
    assert data["device_error"].startswith("no usable GPU runtime: cuda: cuda runtime found no device")


def test_query_without_gpu_says_why_stored_results_are_not_served(capsys, tmp_path, no_gpu):
    db = tmp_path / "x.sqlite"
    winner, _ = record_tuning(db)
    code, out, _ = run(capsys, "query", *CELL, "--problem", SPEC, "--db", str(db), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["tuned"] is False
    served = {entry["instance"]: entry["reason"] for entry in data["not_served"]}
    assert served[winner] == f"measured on {DEVICE.name} ({DEVICE.arch}); no GPU here to match"
    assert len(served) == 2  # the two verified measurements; the failed one is not offered


def test_query_reports_the_stored_winner(capsys, tmp_path, gpu):
    db = tmp_path / "x.sqlite"
    before = datetime.now(timezone.utc)
    winner, median_us = record_tuning(db)
    after = datetime.now(timezone.utc)
    gpu(DEVICE)

    code, out, _ = run(capsys, "query", *CELL, "--problem", SPEC, "--db", str(db), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["tuned"] is True
    assert (data["instance"], data["median_us"], data["device"], data["arch"]) == (winner, median_us, DEVICE.name, "sm_90")
    recorded = datetime.fromisoformat(data["recorded_at"])
    assert recorded.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= recorded <= after + timedelta(seconds=1)

    code, out, _ = run(capsys, "query", *CELL, "--problem", SPEC, "--db", str(db))
    assert code == 0
    assert flat(out) == (f"{winner} {median_us:.2f} µs on {DEVICE.name} ({DEVICE.arch}), "
                         f"recorded {data['recorded_at']}")


def test_query_refuses_a_winner_from_another_driver(capsys, tmp_path, gpu):
    db = tmp_path / "x.sqlite"
    winner, _ = record_tuning(db)
    gpu(DeviceInfo(**{**DEVICE.__dict__, "driver_version": "13010"}))
    code, out, _ = run(capsys, "query", *CELL, "--problem", SPEC, "--db", str(db))
    assert code == 0
    text = flat(out)
    assert f"stored winner {winner} (4.25 µs) is not served: recorded with driver 13000, this machine has 13010" in text
    assert f"untuned on this device; the heuristic would pick {heuristic_pick(PROBLEM).name}" in text
    assert f'to tune it here: kfactory tune --op conv_bwd_weight --layout nhwgc --dtype fp16 --problem "{PROBLEM.spec()}"' in text


def test_query_refuses_a_winner_that_left_the_catalog(capsys, tmp_path, gpu):
    db = tmp_path / "x.sqlite"
    gone = "conv_bwd_weight_2d_nhwgc_fp16_dw_retired"
    with TuningDB(str(db)) as handle:
        handle.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [Measurement(gone, 1.0, 0.0, 25, True)])
    gpu(DEVICE)
    code, out, _ = run(capsys, "query", *CELL, "--problem", SPEC, "--db", str(db), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["tuned"] is False
    assert data["not_served"] == [{"instance": gone, "median_us": 1.0, "kind": "not_in_catalog",
                                   "reason": "its instance is no longer in the catalog", "recorded": None, "current": None}]
    assert data["instead"]["instance"] == heuristic_pick(PROBLEM).name and "kfactory tune" in data["instead"]["advice"]


def test_script_query_without_gpu(script_env, tmp_path):
    result = script("query", *CELL, "--problem", SPEC, "--db", str(tmp_path / "q.sqlite"), env=script_env)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0
    text = flat(result.stdout)
    assert "untuned on this machine (no GPU:" in text
    assert f"the heuristic would pick {heuristic_pick(PROBLEM).name}" in text


# --- tune ----------------------------------------------------------------------------------------
def test_tune_without_gpu_is_a_clear_error(capsys, tmp_path, no_gpu):
    code, out, err = run(capsys, "tune", *CELL, "--problem", SPEC, "--db", str(tmp_path / "t.sqlite"))
    assert code == 1
    assert one_error_line(err).startswith("kfactory: GPU runtime error: no usable GPU runtime:")
    assert out == ""
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        assert db.stats().measurements == 0


def test_script_tune_without_gpu(script_env, tmp_path):
    result = script("tune", *CELL, "--problem", SPEC, "--db", str(tmp_path / "t.sqlite"), env=script_env)
    assert result.returncode not in (0, 2)
    line = one_error_line(result.stderr)
    assert line.startswith("kfactory: GPU runtime error:")


# --- db ------------------------------------------------------------------------------------------
def _stats(capsys, db: Path) -> dict:
    code, out, _ = run(capsys, "db", "stats", "--db", str(db), "--json")
    assert code == 0
    return json.loads(out)


def test_db_stats_of_an_empty_and_a_filled_db(capsys, tmp_path):
    db = tmp_path / "a.sqlite"
    empty = _stats(capsys, db)
    assert empty["url"] == str(db)
    assert {k: empty[k] for k in ("problems", "winners", "measurements", "failed_measurements", "devices")} == dict.fromkeys(
        ("problems", "winners", "measurements", "failed_measurements", "devices"), 0)
    record_tuning(db)
    filled = _stats(capsys, db)
    assert (filled["problems"], filled["winners"], filled["measurements"], filled["failed_measurements"], filled["devices"]) == (1, 1, 3, 1, 1)
    assert filled["winners_by_op"] == {"conv_bwd_weight": 1}

    code, out, _ = run(capsys, "db", "stats", "--db", str(db))
    assert code == 0
    assert re.search(r"measurements\W+3\b", out) and re.search(r"winners\W+1\b", out)


def test_db_export_import_round_trip(capsys, tmp_path):
    first, second, export = tmp_path / "a.sqlite", tmp_path / "b.sqlite", tmp_path / "dump.json"
    winner, median_us = record_tuning(first)

    code, out, _ = run(capsys, "db", "export", str(export), "--db", str(first))
    assert code == 0
    assert flat(out) == f"exported 5 rows to {export}"  # 1 device + 3 measurements + 1 winner
    json.loads(export.read_text())

    code, out, _ = run(capsys, "db", "import", str(export), "--db", str(second))
    assert code == 0
    assert "measurements_added=3" in flat(out) and "winners_added=1" in flat(out)

    def counts(stats: dict) -> dict:
        return {k: v for k, v in stats.items() if k != "url"}

    assert counts(_stats(capsys, second)) == counts(_stats(capsys, first))
    with TuningDB(str(second)) as db:
        stored = db.lookup(PROBLEM.key, DEVICE).winner
    assert stored is not None and (stored.instance, stored.median_us) == (winner, median_us)

    # Importing the same export again adds nothing.
    code, out, _ = run(capsys, "db", "import", str(export), "--db", str(second))
    assert code == 0 and "measurements_added=0" in flat(out)
    assert counts(_stats(capsys, second)) == counts(_stats(capsys, first))


def test_db_stats_on_a_text_file_is_one_line_naming_it(capsys, tmp_path):
    bogus = tmp_path / "notes.txt"
    bogus.write_text("not a database\n" * 100)
    code, out, err = run(capsys, "db", "stats", "--db", str(bogus))
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert line.startswith("kfactory: error:") and str(bogus) in line
    assert bogus.read_text() == "not a database\n" * 100


def test_db_import_of_a_missing_file_is_one_line_naming_it(capsys, tmp_path):
    missing = tmp_path / "nowhere.json"
    code, _, err = run(capsys, "db", "import", str(missing), "--db", str(tmp_path / "a.sqlite"))
    assert code == 2
    assert str(missing) in one_error_line(err)


def test_script_db_stats_on_a_text_file(script_env, tmp_path):
    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello\n")
    result = script("db", "stats", "--db", str(bogus), env=script_env)
    assert result.returncode == 2 and result.stdout == ""
    line = one_error_line(result.stderr)
    assert str(bogus) in line and "not an SQLite database" in line



def test_list_of_a_cell_names_the_families_that_make_instances_per_problem(capsys):
    code, out, _ = run(capsys, "list", "--op", "conv_bwd_data", "--layout", "NGCHW", "--dtype", "fp16", "--ndim", "2")
    assert code == 0
    flat = " ".join(out.split())
    assert "dwr" in flat and "dws" in flat and "pass --problem to list them" in flat
    code, out, _ = run(capsys, "list", "--op", "conv_bwd_data", "--layout", "NHWGC", "--dtype", "fp16", "--ndim", "3")
    assert "dws" not in " ".join(out.split())  # dws has no 3-D or NHWGC cells


# --- dwsep_conv_fwd: an op whose instances are all made per problem ---------------------------------
DWSEP = ["--op", "dwsep_conv_fwd", "--layout", "nhwgc", "--dtype", "fp16"]
DWSEP_SPEC = "N=64,C=64,K=128,input=112x112,filter=3x3,stride=1,pad=1,dilation=1,bias_pw=1,act_dw=relu6"


def _dwsep_problem(spec: str = DWSEP_SPEC):
    return solver_for(Op.DWSEP_CONV_FWD).parse_problem(spec, Layout.NHWGC, DType.FP16)


def test_list_dwsep_problem_json(capsys):
    problem = _dwsep_problem()
    code, out, _ = run(capsys, "list", *DWSEP, "--problem", DWSEP_SPEC, "--why", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["problem"] == problem.key and problem.key.endswith(",bias_pw=1,act_dw=relu6")
    applicable = data["applicable"]
    assert [r["name"] for r in applicable] == [i.name for i in lookup(problem)] and applicable
    assert {(r["op"], r["family"], r["layout"], r["dtype"], r["ndim"]) for r in applicable} == {
        ("dwsep_conv_fwd", family, "nhwgc", "fp16", 2) for family in ("fused", "twopass", "rowtile")}
    assert all(r["params"]["shape"] == "k3x3s1x1d1x1" for r in applicable)  # the problem's filter compiled in
    rejected = data["rejected"]
    assert rejected and all(r["reason"] == "needs mfma, which target sm_90a lacks" for r in rejected)


def test_list_dwsep_problem_why_table_and_amd_target(capsys):
    problem = _dwsep_problem()
    code, out, _ = run(capsys, "list", *DWSEP, "--problem", DWSEP_SPEC, "--why")
    assert code == 0
    text = squash(out)
    assert squash(f"{len(lookup(problem))} instances compute {problem.key}") in text
    assert squash(f"not applicable in this cell ({len(explain(problem))}); 0 more") in text
    code, out, _ = run(capsys, "list", *DWSEP, "--problem", DWSEP_SPEC, "--target", "gfx90a", "--json")
    assert code == 0
    assert {r["family"] for r in json.loads(out)["applicable"]} == {"fused_mfma"}


def test_list_dwsep_cell_says_instances_come_per_problem(capsys):
    code, out, _ = run(capsys, "list", *DWSEP)
    assert code == 0
    text = flat(out)
    assert "0 instances" in text and "fused, fused_mfma, rowtile, twopass: (also) make instances per problem" in text
    assert "pass --problem to list them" in text


def test_generate_dwsep_problem(capsys, tmp_path):
    problem = _dwsep_problem()
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "generate", *DWSEP, "--problem", DWSEP_SPEC, "--out", str(out_dir))
    assert code == 0, err
    expected = [i for i in lookup(problem) if i.why_not_on(cli.DEFAULT_TARGET) is None]
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["op"] == "dwsep_conv_fwd"
    entries = manifest["instances"]
    assert [e["name"] for e in entries] == [i.name for i in expected] and entries
    assert {p.name for p in out_dir.iterdir()} == {f"{i.name}.hip" for i in expected} | {"manifest.json"}
    for entry, inst in zip(entries, expected):
        written = (out_dir / entry["file"]).read_bytes()
        assert entry["source_hash"] == hashlib.sha256(written).hexdigest()
        assert written.decode() == codegen.render(inst)
    assert f"{len(expected)} instances written to" in flat(out)


def test_generate_dwsep_without_a_problem_says_to_pass_one(capsys, tmp_path):
    code, _, err = run(capsys, "generate", "--op", "dwsep_conv_fwd", "--out", str(tmp_path / "o"))
    assert code == 2
    line = one_error_line(err)
    assert "no instances match those filters; fused, fused_mfma, rowtile, twopass make instances per problem: pass --problem" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", ["list", "query", "generate"])
@pytest.mark.parametrize("spec, cell, says", [
    (DWSEP_SPEC + ",act_pw=gelu", DWSEP, "bad token act_pw='gelu' in problem: choose one of none, relu, relu6"),
    (DWSEP_SPEC + ",bias_dw=2", DWSEP, "invalid bias_dw: must be 0 or 1, got 2"),
    ("N=2,C=8,K=4,input=2x2,filter=5x5,pad=1", DWSEP, "invalid filter: dilated filter extent 5 exceeds padded input 4"),
    ("N=2,C=8,input=9x9,filter=3x3", DWSEP, "problem is missing K="),
    (DWSEP_SPEC, ["--op", "dwsep_conv_fwd", "--layout", "gnhwc", "--dtype", "fp16"],
     "dwsep_conv_fwd has no kernels for gnhwc/fp16/2D; supported: ngchw/bf16: 1D,2D,3D; ngchw/fp16: 1D,2D,3D; "
     "ngchw/fp32: 1D,2D,3D; nhwgc/bf16: 1D,2D,3D; nhwgc/fp16: 1D,2D,3D; nhwgc/fp32: 1D,2D,3D"),
])
def test_bad_dwsep_problems_are_one_line(capsys, tmp_path, no_gpu, command, spec, cell, says):
    extra = {"generate": ["--out", str(tmp_path / "o")], "query": ["--db", str(tmp_path / "x.sqlite")]}.get(command, [])
    code, out, err = run(capsys, command, *cell, "--problem", spec, *extra)
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert line.startswith("kfactory: error: ") and says in line


def test_query_dwsep_without_gpu_names_the_heuristic_pick(capsys, tmp_path, no_gpu):
    problem = _dwsep_problem()
    code, out, _ = run(capsys, "query", *DWSEP, "--problem", DWSEP_SPEC, "--db", str(tmp_path / "x.sqlite"))
    assert code == 0
    assert flat(out).endswith(f"the heuristic would pick {heuristic_pick(problem).name}")
    assert heuristic_pick(problem).family == "rowtile"  # mnv1_b64: 1.63x fused on the H200


def test_list_why_names_a_per_problem_family_that_made_no_instance_and_why(capsys):
    """gwl's points take C and K from the problem; with 4 channels a group none can be made, so no row of
    the table could say why: the listing says it per family."""
    spec = "N=2,G=4,C=4,K=8,input=20x20,filter=3x3,pad=1"
    code, out, _ = run(capsys, "list", *CELL, "--problem", spec, "--family", "gwl", "--why", "--json")
    assert code == 0
    reason = json.loads(out)["families_without_instances"]["gwl"]
    assert "multiples of 8" in reason and "c4k8" in reason
    code, out, _ = run(capsys, "list", *CELL, "--problem", spec, "--why")
    assert code == 0 and squash("gwl: no instance for this problem") in squash(out)
    code, out, _ = run(capsys, "list", *CELL, "--problem", "N=2,G=4,C=8,K=8,input=20x20,filter=3x3,pad=1",
                       "--why", "--json")
    assert "gwl" not in json.loads(out)["families_without_instances"]
