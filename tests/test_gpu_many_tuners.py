"""On a GPU: four `kfactory tune` processes on two overlapping problems (two per problem) and two
processes querying in a loop share one SQLite tuning DB. Every process exits 0, none reports a locked
database, and each problem ends with exactly one winner: the fastest verified measurement stored for it.

    python -m pytest -m gpu -s tests/test_gpu_many_tuners.py      # -s shows the summary table
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from factory.device import target_for
from factory.problem import DType, Layout, parse_conv_problem
from factory.selector import lookup
from tuning_db import TuningDB

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[1]
# Small depthwise problems with short candidate lists (three families each), 2-D and 1-D.
SPECS = ("N=2,G=8,C=1,K=1,input=9x9,filter=3x3,pad=1", "N=4,G=16,C=1,K=1,input=64,filter=5,pad=2")
CELL = ["--layout", "NHWGC", "--dtype", "fp16"]
TUNE_TIMEOUT_S = 300

QUERY_LOOP = """
import json, sys
from pathlib import Path
from factory import cli
stop, specs, db = Path(sys.argv[1]), sys.argv[2:-1], sys.argv[-1]
runs = 0
while not stop.exists():
    for spec in specs:
        code = cli.main(["query", "--layout", "NHWGC", "--dtype", "fp16", "--problem", spec, "--db", db, "--json"])
        if code != 0:
            sys.exit(code)
        runs += 1
print(json.dumps({"queries": runs}), file=sys.stderr)
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["KFACTORY_CACHE_DIR"] = str(tmp_path / "cache")  # cold cache: the tuners also race on compiling
    env["COLUMNS"] = "200"
    env.pop("KFACTORY_DB", None)
    return env


def test_four_tuners_and_two_queriers_share_one_db(tmp_path, gpu_backend):
    db_path = tmp_path / "shared.sqlite"
    stop = tmp_path / "stop"
    env = _env(tmp_path)
    started = time.monotonic()
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name: str, argv: list[str]) -> subprocess.Popen[str]:
        # Files, not pipes: a process must never block on a full pipe nobody is reading yet.
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=(logs / f"{name}.out").open("w"),
                                stderr=(logs / f"{name}.err").open("w"), text=True)

    def output(name: str) -> tuple[str, str]:
        return (logs / f"{name}.out").read_text(), (logs / f"{name}.err").read_text()

    tuners = []
    for index, spec in enumerate(SPECS):
        for copy in range(2):
            name = f"tune-{index}-{copy}"
            argv = [sys.executable, "-m", "factory.cli", "tune", *CELL, "--problem", spec, "--db", str(db_path),
                    "--reps", "20", "--json"]
            tuners.append((name, spec, start(name, argv), time.monotonic()))
    queriers = [(f"query-{i}", start(f"query-{i}", [sys.executable, "-c", QUERY_LOOP, str(stop), *SPECS, str(db_path)]))
                for i in range(2)]

    outputs: list[tuple[str, str, int, str, str, float]] = []
    try:
        for name, spec, proc, t0 in tuners:
            proc.wait(timeout=TUNE_TIMEOUT_S)
            outputs.append((name, spec, proc.returncode, *output(name), time.monotonic() - t0))
    finally:
        stop.touch()
        for name, proc in queriers:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            outputs.append((name, "", proc.returncode, *output(name), time.monotonic() - started))
        for _, _, proc, _ in tuners:
            if proc.poll() is None:
                proc.kill()
    wall = time.monotonic() - started

    for name, _, code, out, err, _ in outputs:
        assert "database is locked" not in (out + err).lower(), f"{name}:\n{err[-2000:]}"
        assert code == 0, f"{name} exited {code}:\n{err[-2000:]}"

    device = gpu_backend.device_info()
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        summary = []
        for spec in SPECS:
            problem = parse_conv_problem(spec, Layout.NHWGC, DType.FP16)
            rows = conn.execute(
                "SELECT m.instance, m.median_us, m.verified FROM measurements m WHERE m.problem_key = ?",
                (problem.key,),
            ).fetchall()
            winners = conn.execute(
                "SELECT m.instance, m.median_us FROM winners w JOIN measurements m ON m.id = w.measurement_id "
                "WHERE w.problem_key = ?",
                (problem.key,),
            ).fetchall()
            verified = [(us, name) for name, us, ok in rows if ok and us is not None]
            assert verified, f"{problem.key}: no verified measurement"
            best_us, best_name = min(verified)
            assert len(winners) == 1, f"{problem.key}: {len(winners)} winners"
            assert winners[0] == (best_name, best_us), f"{problem.key}: winner {winners[0]}, fastest {best_name} {best_us}"
            with TuningDB(str(db_path)) as db:
                served = db.best(problem.key, device)
            assert served is not None and served.instance == best_name
            measured = {name for name, _, _ in rows}
            everyone = {c.name for c in lookup(problem, target=target_for(device))}  # the device's own target
            assert measured == everyone, "every candidate measured at least once"
            tune_walls = [w for _, s, _, _, _, w in outputs if s == spec]
            reused = [json.loads(out)["reused"] for name, s, _, out, _, _ in outputs if s == spec]
            summary.append((problem.key, best_name, best_us, len(rows), len(verified), reused, tune_walls))
    finally:
        conn.close()

    queries = [json.loads(err.strip().splitlines()[-1])["queries"] for name, _, _, _, err, _ in outputs
               if name.startswith("query")]
    print(f"\n{device.name} ({device.arch}, {device.sm_count} SMs, driver {device.driver_version}, "
          f"{device.compiler_version}); 4 tuners + 2 query loops ({sum(queries)} queries), wall {wall:.1f} s")
    print(f"{'problem':<96} {'winner':<64} {'µs':>8} {'rows':>5} {'ok':>4}  reused  tune wall s")
    for key, name, us, n, ok, reused, walls in summary:
        print(f"{key:<96} {name:<64} {us:8.2f} {n:5d} {ok:4d}  {reused}  {', '.join(f'{w:.1f}' for w in walls)}")
