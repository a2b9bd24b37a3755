"""A tune stores each measurement as it is taken: killed at random moments it leaves a sound DB whose
winner is a verified stored measurement, and a rerun measures only what is left.

Tuning runs on tests/fake_gpu.py's FakeGPU (correct outputs from the numpy reference, fixed times,
a few ms per candidate), through the real tuner, compile cache and tuning DB.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import factory.backends
from factory import api, cli
from factory.problem import DType, Layout, parse_conv_problem
from factory.selector import lookup
from fake_gpu import FAKE_TARGET, DEVICE, SETTINGS, FakeGPU, code_of, fake_us, install_fake_compiler
from tuning_db import Measurement, TuningDB

FAKE_GPU = Path(__file__).with_name("fake_gpu.py")
SPEC = "N=2,G=8,C=1,K=1,input=9x9,filter=3x3,pad=1"  # 24 candidates over three families
PROBLEM = parse_conv_problem(SPEC, Layout.NHWGC, DType.FP16)
NAMES = [c.name for c in lookup(PROBLEM, target=FAKE_TARGET)]
# The two fastest by time compute wrong results: a winner must be verified, not just fast.
WRONG = frozenset(sorted(NAMES, key=fake_us)[:2])
DELAY_S = 0.03  # per candidate

# FakeGPU cannot be rebuilt in a worker process, so the tuner measures it in the calling process.
pytestmark = pytest.mark.filterwarnings("ignore:.*cannot be rebuilt in a worker process:RuntimeWarning")


@pytest.fixture(autouse=True)
def _fake_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("KFACTORY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KFACTORY_DB", str(tmp_path / "default.sqlite"))
    install_fake_compiler(monkeypatch.setattr)


def stored(path: Path) -> tuple[list[tuple[str, float | None, bool]], list[tuple[str, float]]]:
    """(measurements as (instance, µs, verified), winners as (instance, µs)) read with plain sqlite3."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = conn.execute("SELECT instance, median_us, verified FROM measurements ORDER BY id").fetchall()
        winners = conn.execute(
            "SELECT m.instance, m.median_us FROM winners w JOIN measurements m ON m.id = w.measurement_id"
        ).fetchall()
    finally:
        conn.close()
    return [(i, us, bool(v)) for i, us, v in rows], winners


def fastest_verified(rows: list[tuple[str, float | None, bool]]) -> tuple[str, float] | None:
    ok = [(us, i) for i, us, v in rows if v and us is not None]
    return None if not ok else (min(ok)[1], min(ok)[0])


def check_consistent(path: Path) -> set[str]:
    """The DB a killed tune leaves: sound, one measurement per instance, winner = fastest verified."""
    rows, winners = stored(path)
    names = [i for i, _, _ in rows]
    assert len(names) == len(set(names)), "a candidate was measured twice"
    assert set(names) <= set(NAMES)
    best = fastest_verified(rows)
    if best is None:
        assert winners == []
    else:
        assert winners == [best]
        assert best[0] not in WRONG
    return set(names)


def start(db: Path, cache: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, str(FAKE_GPU), "--db", str(db), "--cache", str(cache), "--problem", SPEC,
            "--delay", str(DELAY_S), "--wrong", ",".join(sorted(WRONG))]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_killed_tunes_leave_a_sound_db_and_a_rerun_measures_only_the_rest(tmp_path):
    db, cache = tmp_path / "tuning.sqlite", tmp_path / "cache"
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    measured: set[str] = set()
    for kill in range(5):
        proc = start(db, cache)
        assert proc.stdout is not None
        for line in proc.stdout:  # the DB is open and candidates are being measured from here on
            if line.startswith("stage benchmark"):
                break
        # Each run measures at most a few candidates, so five kills never finish the tune.
        time.sleep(rng.uniform(0.0, 4 * DELAY_S))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, f"kill {kill} (seed {seed}): {proc.stderr.read() if proc.stderr else ''}"
        now = check_consistent(db)
        assert now >= measured, f"kill {kill} (seed {seed}) lost committed measurements"
        measured = now
    assert len(measured) < len(NAMES)

    proc = start(db, cache)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    result = json.loads(lines[-1])
    if measured:
        assert f"resume {len(measured)} {len(NAMES)}" in lines
    assert result["reused"] == len(measured)
    assert sorted(result["measured"]) == sorted(set(NAMES) - measured), f"seed {seed}"
    rows, winners = stored(db)
    assert sorted(i for i, _, _ in rows) == sorted(NAMES), "every candidate measured exactly once"
    best = fastest_verified(rows)
    assert best is not None and winners == [best] and best[0] not in WRONG
    assert best[1] == min(fake_us(n) for n in NAMES if n not in WRONG)
    assert result["winner"] == best[0]


# --- in-process: resume, fresh, stale winners ------------------------------------------------------
class Stop(Exception):
    pass


def stop_after(count: int):
    seen: list[str] = []

    def on_measured(m: Measurement) -> None:
        seen.append(m.instance)
        if len(seen) == count:
            raise Stop

    return api.Progress(on_measured=on_measured), seen


def test_an_interrupted_tune_keeps_what_it_measured_and_the_rerun_reuses_it(tmp_path):
    gpu = FakeGPU(PROBLEM, wrong=WRONG)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        hooks, seen = stop_after(7)
        with pytest.raises(Stop):
            api.tune_problem(PROBLEM, gpu, db, SETTINGS, hooks)
        assert sorted(m.instance for m, _, _ in db.measurements(PROBLEM.key, DEVICE)) == sorted(seen)
        partial = db.best(PROBLEM.key, DEVICE)
        verified_seen = [n for n in seen if n not in WRONG]
        assert partial is not None and partial.instance == min(verified_seen, key=fake_us)

        resumes: list[tuple[int, int]] = []
        gpu.timed.clear()
        outcome = api.tune_problem(PROBLEM, gpu, db, SETTINGS, on_resume=lambda *a: resumes.append(a))
        assert resumes == [(7, len(NAMES))]
        assert outcome.reused == 7
        assert sorted(gpu.timed) == sorted(set(NAMES) - set(seen) - WRONG)
        assert [m.instance for m in outcome.measurements] == [c.name for c in api.rank_candidates(
            PROBLEM, lookup(PROBLEM, target=FAKE_TARGET), FAKE_TARGET)]  # measured best-ranked first
        assert outcome.winner.instance == min(set(NAMES) - WRONG, key=fake_us)
        assert len(db.measurements(PROBLEM.key, DEVICE)) == len(NAMES)

        # Everything measured: a third run measures nothing and keeps the winner.
        gpu.timed.clear()
        again = api.tune_problem(PROBLEM, gpu, db, SETTINGS)
        assert gpu.timed == [] and again.reused == len(NAMES) and again.winner == outcome.winner


def test_another_driver_does_not_resume(tmp_path):
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        api.tune_problem(PROBLEM, FakeGPU(PROBLEM), db, SETTINGS)
        other = FakeGPU(PROBLEM, dataclasses.replace(DEVICE, driver_version="13010"))
        outcome = api.tune_problem(PROBLEM, other, db, SETTINGS)
        assert outcome.reused == 0 and len(other.timed) == len(NAMES)


def test_fresh_measures_everything_and_decides_on_the_new_times(tmp_path):
    first = min(NAMES, key=fake_us)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        assert api.tune_problem(PROBLEM, FakeGPU(PROBLEM), db, SETTINGS).winner.instance == first
        # The old winner got 10x slower: the old, faster time must not keep it on top.
        slower = FakeGPU(PROBLEM, us={first: 10 * fake_us(first)})
        outcome = api.tune_problem(PROBLEM, slower, db, SETTINGS, fresh=True)
        assert outcome.reused == 0 and len(slower.timed) == len(NAMES)
        second = min((n for n in NAMES if n != first), key=fake_us)
        assert outcome.winner.instance == second and db.best(PROBLEM.key, DEVICE).instance == second
        assert len(db.measurements(PROBLEM.key, DEVICE)) == 2 * len(NAMES)


def test_a_winner_that_left_the_catalog_is_replaced_by_a_rerun(tmp_path):
    gone = "conv_bwd_weight_2d_nhwgc_fp16_dw_retired"
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        db.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [Measurement(gone, 0.5, 0.0, 25, True)])
        outcome = api.tune_problem(PROBLEM, FakeGPU(PROBLEM), db, SETTINGS)
        assert outcome.winner.instance == min(NAMES, key=fake_us)
        assert api.select(PROBLEM, mode="db", backend=FakeGPU(PROBLEM), db=db).name == outcome.winner.instance


# --- the command line ------------------------------------------------------------------------------
def test_cli_tune_says_it_resumes_and_fresh_measures_again(capsys, tmp_path, monkeypatch):
    gpu = FakeGPU(PROBLEM, wrong=WRONG)
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: gpu)
    db = str(tmp_path / "cli.sqlite")
    with TuningDB(db) as handle:
        first = [n for n in NAMES if n not in WRONG][:5]
        handle.record(PROBLEM.key, PROBLEM.op.value, DEVICE, [Measurement(n, fake_us(n), 0.0, 4, True, source_hash=code_of(n))
                                                                   for n in first])

    code = cli.main(["tune", "--layout", "NHWGC", "--dtype", "fp16", "--problem", SPEC, "--db", db, "--reps", "4"])
    out, err = capsys.readouterr()
    assert code == 0
    assert f"resuming: 5 of {len(NAMES)} already measured" in " ".join(err.split())
    assert len(gpu.timed) == len(NAMES) - 5 - len(WRONG)
    best = min(set(NAMES) - WRONG, key=fake_us)
    assert f"winner: {best}" in " ".join(out.split())

    gpu.timed.clear()
    code = cli.main(["tune", "--layout", "NHWGC", "--dtype", "fp16", "--problem", SPEC, "--db", db, "--reps", "4",
                     "--fresh", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and "resuming" not in err
    data = json.loads(out)
    assert data["reused"] == 0 and data["winner"] == best and len(data["measurements"]) == len(NAMES)
    assert len(gpu.timed) == len(NAMES) - len(WRONG)


def test_the_bench_finishes_a_cut_off_tune_before_serving_its_winner(tmp_path):
    """A killed run leaves the winner of what it measured; the bench must not take that for a tuned problem."""
    from factory.bench.gpu import tuned_kernel

    gpu = FakeGPU(PROBLEM, wrong=WRONG)
    stage = lambda name, total: (lambda: None)  # noqa: E731 - no progress bar here
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        hooks, seen = stop_after(3)
        with pytest.raises(Stop):
            api.tune_problem(PROBLEM, gpu, db, SETTINGS, hooks)
        assert db.best(PROBLEM.key, DEVICE) is not None  # a winner of three candidates
        gpu.timed.clear()
        kernel = tuned_kernel(PROBLEM, gpu, db, stage)
        assert sorted(gpu.timed) == sorted(set(NAMES) - set(seen) - WRONG)
        assert kernel.instance.name == min(set(NAMES) - WRONG, key=fake_us)
        gpu.timed.clear()
        assert tuned_kernel(PROBLEM, gpu, db, stage).instance.name == kernel.instance.name
        assert gpu.timed == []


def test_a_budget_measures_the_prior_s_first_candidates_and_a_full_tune_the_rest(tmp_path):
    from factory.api import rank_candidates

    gpu = FakeGPU(PROBLEM, wrong=WRONG)
    ranked = [c.name for c in rank_candidates(PROBLEM, lookup(PROBLEM, target=FAKE_TARGET), FAKE_TARGET)]
    assert sorted(ranked) == sorted(NAMES)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        outcome = api.tune_problem(PROBLEM, gpu, db, SETTINGS, budget=5)
        assert sorted(m.instance for m in outcome.measurements) == sorted(ranked[:5])
        assert sorted(gpu.timed) == sorted(set(ranked[:5]) - WRONG)
        gpu.timed.clear()
        full = api.tune_problem(PROBLEM, gpu, db, SETTINGS)
        assert full.reused == 5 and sorted(gpu.timed) == sorted(set(ranked[5:]) - WRONG)
        with pytest.raises(ValueError, match="at least 1"):
            api.tune_problem(PROBLEM, gpu, db, SETTINGS, budget=0)


def test_a_budget_after_a_full_tune_keeps_the_faster_winner_it_did_not_measure(tmp_path):
    from factory.api import rank_candidates

    gpu = FakeGPU(PROBLEM, wrong=WRONG)
    ranked = [c.name for c in rank_candidates(PROBLEM, lookup(PROBLEM, target=FAKE_TARGET), FAKE_TARGET)]
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        best = api.tune_problem(PROBLEM, gpu, db, SETTINGS).winner
        before = ranked.index(best.instance)
        assert before >= 1, "the fake times must put the winner below the prior's first candidate"
        again = api.tune_problem(PROBLEM, gpu, db, SETTINGS, budget=before)
        assert again.winner.instance == best.instance and again.winner.median_us == best.median_us
        assert stored(tmp_path / "t.sqlite")[1] == [(best.instance, best.median_us)]


def _retune_budget_on_a_budget_2_tune(tmp_path, monkeypatch, capsys):
    """A DB whose problem was tuned with a budget of 2 on FakeGPU; the prior's ranking; and a runner of
    scripts/retune_budget.py on it (arguments after the DB), returning its output with the GPU's timings reset."""
    import runpy
    from factory.api import rank_candidates

    script = Path(__file__).parent.parent / "scripts" / "retune_budget.py"
    monkeypatch.syspath_prepend(str(script.parent))
    gpu = FakeGPU(PROBLEM, wrong=WRONG)
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: gpu)
    ranked = [c.name for c in rank_candidates(PROBLEM, lookup(PROBLEM, target=FAKE_TARGET), FAKE_TARGET)]
    path = tmp_path / "t.sqlite"
    with TuningDB(str(path)) as db:
        api.tune_problem(PROBLEM, gpu, db, SETTINGS, budget=2)

    def retune(*args: str) -> str:
        gpu.timed.clear()
        monkeypatch.setattr(sys, "argv", ["retune_budget.py", str(path), *args])
        with pytest.raises(SystemExit) as ended:
            runpy.run_path(str(script), run_name="__main__")
        assert ended.value.code == 0
        return capsys.readouterr().out

    return gpu, ranked, path, retune


def test_retune_budget_measures_the_first_candidates_a_stored_winner_was_decided_without(tmp_path, monkeypatch, capsys):
    gpu, ranked, path, retune = _retune_budget_on_a_budget_2_tune(tmp_path, monkeypatch, capsys)
    out = retune("--budget", "6", "--reps", "4")
    assert sorted(gpu.timed) == sorted(set(ranked[2:6]) - WRONG)
    assert "1 problems tuned again" in out and PROBLEM.key in out
    best = min(set(ranked[:6]) - WRONG, key=fake_us)
    assert stored(path)[1][0][0] == best
    out = retune("--budget", "6", "--reps", "4")  # the first six all measured now: nothing to do
    assert gpu.timed == [] and "0 problems tuned again" in out


def test_retune_budget_first_takes_only_problems_whose_first_candidates_hold_a_point_it_finds(
        tmp_path, monkeypatch, capsys):
    gpu, ranked, _, retune = _retune_budget_on_a_budget_2_tune(tmp_path, monkeypatch, capsys)
    out = retune("--budget", "4", "--first", re.escape(ranked[5]))  # the sixth candidate: not among the first four
    assert gpu.timed == [] and "0 problems tuned again" in out and "--first" in out
    out = retune("--budget", "4", "--first", re.escape(ranked[3]))
    assert sorted(gpu.timed) == sorted(set(ranked[2:4]) - WRONG) and "1 problems tuned again" in out


@pytest.mark.parametrize("args", [["--op", "conv_fwd"], ["--reps", "1"], ["--budget", "0"], ["--first", "(_mx"]])
def test_retune_budget_refuses_bad_arguments_in_one_line(args, tmp_path, monkeypatch, capsys):
    import runpy

    script = Path(__file__).parent.parent / "scripts" / "retune_budget.py"
    monkeypatch.syspath_prepend(str(script.parent))
    TuningDB(str(tmp_path / "t.sqlite")).close()
    monkeypatch.setattr(sys, "argv", ["retune_budget.py", str(tmp_path / "t.sqlite"), *args])
    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(script), run_name="__main__")
    err = capsys.readouterr().err.strip().splitlines()
    assert ended.value.code == 2 and args[0] in err[-1]
    assert "conv_bwd_weight" in err[-1] or args[0] != "--op"  # the supported ops named


@pytest.mark.parametrize("text", ["0", "-3", "five"])
def test_a_bad_budget_is_a_one_line_error(capsys, text):
    with pytest.raises(SystemExit) as exit_:  # argparse errors exit through SystemExit
        cli.main(["tune", "--layout", "NHWGC", "--dtype", "fp16", "--problem", SPEC, "--budget", text])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "budget" in err[0]


def test_a_tune_reports_its_wall_time_by_phase_and_what_it_measured_reused_and_pruned(tmp_path):
    gpu = FakeGPU(PROBLEM, wrong=WRONG)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        started = time.monotonic()
        first = api.tune_problem(PROBLEM, gpu, db, SETTINGS, budget=5)
        wall = time.monotonic() - started
        assert (first.measured, first.reused, first.pruned) == (5, 0, len(NAMES) - 5)
        times = first.times
        # FakeGPU's synchronize sleeps: every candidate's check and timed repetitions take real time.
        assert times.verify_s > 0 and times.time_s > 0 and times.compile_s > 0 and times.reference_s > 0
        assert times.total_s <= wall
        rest = api.tune_problem(PROBLEM, gpu, db, SETTINGS)
        assert (rest.measured, rest.reused, rest.pruned) == (len(NAMES) - 5, 5, 0)
        assert api.tune_problem(PROBLEM, gpu, db, SETTINGS).times.total_s == 0.0  # nothing left to measure


def test_tune_prints_the_wall_time_split_and_every_name_whole_on_a_narrow_terminal(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: FakeGPU(PROBLEM, wrong=WRONG))
    monkeypatch.setattr(cli.console, "width", 60)
    argv = ["tune", "--layout", "NHWGC", "--dtype", "fp16", "--problem", SPEC, "--db", str(tmp_path / "t.sqlite"),
            "--budget", "4"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"4 measured, 0 reused, {len(NAMES) - 4} not measured (--budget 4 candidates); wall " in " ".join(out.split())
    for phase in ("compile", "reference", "verify", "time", "workers"):
        assert f"{phase} " in out
    # Folded, not cut: each row's instance cell, read down its lines, is the whole name.
    cells: list[str] = []
    for line in out.splitlines():
        fields = line.split("│")
        if len(fields) < 4:
            continue
        rank, name = fields[1].strip(), fields[2].strip()
        if rank.isdigit():
            cells.append(name)
        elif cells and not rank:
            cells[-1] += name
    assert len(cells) == 4 and set(cells) <= set(NAMES), cells
    assert max(len(line) for line in out.splitlines()) <= 60 < max(len(c) for c in cells)  # it did fold
    assert "…" not in out
    assert cli.main([*argv[:-1], "6", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["measured"], record["reused"], record["pruned"]) == (2, 4, len(NAMES) - 6)
    split = record["wall_s"]
    assert split["total_s"] == pytest.approx(sum(v for k, v in split.items() if k != "total_s"))


def test_a_time_budget_measures_in_the_prior_s_order_at_least_one_and_a_full_tune_the_rest(tmp_path):
    from factory.api import Budget, rank_candidates

    gpu = FakeGPU(PROBLEM, wrong=WRONG)
    ranked = [c.name for c in rank_candidates(PROBLEM, lookup(PROBLEM, target=FAKE_TARGET), FAKE_TARGET)]
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        spent = api.tune_problem(PROBLEM, gpu, db, SETTINGS, budget=Budget(seconds=1e-6))
        assert [m.instance for m in spent.measurements] == ranked[:1] and spent.pruned == len(NAMES) - 1
        rest = api.tune_problem(PROBLEM, gpu, db, SETTINGS, budget=Budget(seconds=600))
        assert rest.reused == 1 and rest.measured == len(NAMES) - 1 and rest.pruned == 0


@pytest.mark.parametrize(("text", "budget"), [("16", (16, None)), ("5s", (None, 5.0)), (" 2.5s", (None, 2.5))])
def test_budget_strings(text, budget):
    from factory.api import Budget

    parsed = Budget.parse(text)
    assert (parsed.candidates, parsed.seconds) == budget


@pytest.mark.parametrize("text", ["0s", "-1s", "s", "infs", "nans", "1.5", "5m"])
def test_bad_time_budgets_are_one_line_errors(capsys, text):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["tune", "--layout", "NHWGC", "--dtype", "fp16", "--problem", SPEC, "--budget", text])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "budget" in err[0]


@pytest.mark.parametrize("spec,layout", [("N=64,G=8,C=1,K=1,input=28x28,filter=3x3,pad=1", Layout.NGCHW),  # ties
                                         ("N=64,G=8,C=1,K=1,input=28x28,filter=3x3,pad=1", Layout.GNHWC),  # ties
                                         ("N=3,G=1,C=24,K=40,input=9x9,filter=1x1", Layout.NHWGC),
                                         ("N=2,G=4,C=8,K=8,input=7x9,filter=3x3,stride=2,pad=1", Layout.NHWGC)])
def test_the_heuristic_pick_is_the_first_candidate_a_budget_measures(spec, layout):
    """Ties in the prior's score break the same way in both, so `--budget 1` measures the untuned pick."""
    from factory.selector import heuristic_pick

    problem = parse_conv_problem(spec, layout, DType.FP16)
    candidates = lookup(problem, target=FAKE_TARGET)
    ranked = api.rank_candidates(problem, candidates, FAKE_TARGET)
    assert ranked[0] == heuristic_pick(problem, candidates, FAKE_TARGET)
    assert sorted(c.name for c in ranked) == sorted(c.name for c in candidates)


def test_a_tune_commits_every_new_best_at_once_and_the_rest_in_batches(tmp_path, monkeypatch):
    """Whenever a candidate becomes the tune's fastest, the DB's winner is already it (a killed tune
    leaves a verified winner); measurements that cannot win go in batches, and all are stored at the end."""
    monkeypatch.setattr(api, "STORE_BATCH", 3)
    gpu = FakeGPU(PROBLEM, wrong=WRONG)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        commits: list[int] = []
        real_record = db.record
        monkeypatch.setattr(db, "record", lambda key, op, device, ms: commits.append(len(ms)) or real_record(key, op, device, ms))
        best: list[float] = []

        def on_measured(m: Measurement) -> None:
            if m.verified and m.median_us is not None and (not best or m.median_us <= best[-1]):
                best.append(m.median_us)
                stored = db.best(PROBLEM.key, DEVICE)
                assert stored is not None and stored.median_us == m.median_us  # committed before it is told

        outcome = api.tune_problem(PROBLEM, gpu, db, SETTINGS, api.Progress(on_measured=on_measured))
        assert sum(commits) == len(NAMES) == len(db.measurements(PROBLEM.key, DEVICE))
        assert len(commits) < len(NAMES) and max(commits) <= 3
        assert outcome.winner is not None and outcome.winner.median_us == best[-1]
