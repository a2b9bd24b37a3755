"""An untuned problem is served the winner of the nearest tuned problem of its cell on this device
(factory.nearest): select(mode=AUTO) runs it and `kfactory query` says where it came from."""

from __future__ import annotations

import dataclasses
import json

import pytest

import factory.backends
from factory import cli
from factory.api import SelectMode, select
from factory.nearest import cell_prefix, distance, nearest_choice, sizes
from factory.problem import DType, Layout, Op, parse_conv_problem
from factory.selector import heuristic_pick, lookup
from fake_gpu import DEVICE, FakeGPU, code_of, isolate
from tuning_db import Measurement, TuningDB

pytestmark = pytest.mark.filterwarnings("ignore:.*cannot be rebuilt in a worker process:RuntimeWarning")

ASKED = parse_conv_problem("N=64,G=8,C=1,K=1,input=28x28,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
NEAR = parse_conv_problem("N=32,G=8,C=1,K=1,input=28x28,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
FAR = parse_conv_problem("N=2,G=8,C=1,K=1,input=9x9,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)


def not_the_heuristic(problem, skip: int = 0) -> str:
    """A tuning point of `problem` in the family the heuristic picks for ASKED, other than its pick for
    ASKED, that computes ASKED too (a neighbour refines the point within the prior's family)."""
    guess = heuristic_pick(ASKED)
    asked = {c.name for c in lookup(ASKED)}
    return [c.name for c in lookup(problem)
            if c.name != guess.name and c.family == guess.family and c.name in asked][skip]


def any_point(problem) -> str:
    return next(c.name for c in lookup(problem) if c.name != heuristic_pick(problem).name)


def store(db: TuningDB, problem, instance: str, device=DEVICE, code: str | None = "current") -> None:
    source = code_of(instance) if code == "current" else code
    db.record(problem.key, problem.op.value, device, [Measurement(instance, 3.0, 0.1, 25, True, source_hash=source)])


def test_distance_counts_log_sizes_and_fields_only_one_side_has():
    assert cell_prefix(ASKED.key) == "conv_bwd_weight:nhwgc:fp16:2d:"
    a, b = sizes(ASKED.key), sizes(NEAR.key)
    assert distance(a, a) == 0
    assert distance(a, b) == pytest.approx(abs(__import__("math").log2(65 / 33)))
    assert distance(a, b) < distance(a, sizes(FAR.key))
    assert distance({"N": (1,)}, {"N": (1,), "M": (3, 3)}) == 2.0


def test_the_nearest_tuned_problem_wins_over_a_farther_one(tmp_path):
    near_pick, far_pick = not_the_heuristic(NEAR), not_the_heuristic(FAR, skip=1)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        store(db, FAR, far_pick)
        store(db, NEAR, near_pick)
        choice = nearest_choice(ASKED, db, DEVICE)
    assert choice is not None
    assert (choice.instance.name, choice.source_key, choice.source_instance) == (near_pick, NEAR.key, near_pick)


@pytest.mark.parametrize("change", [{"sm_count": 114}, {"arch": "sm_80"}], ids=["sm_count", "arch"])
def test_a_winner_of_another_device_is_no_neighbour(tmp_path, change):
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        store(db, NEAR, not_the_heuristic(NEAR), device=dataclasses.replace(DEVICE, **change))
        assert nearest_choice(ASKED, db, DEVICE) is None


def test_a_winner_of_another_layout_or_of_older_code_is_no_neighbour(tmp_path):
    other_layout = parse_conv_problem("N=32,G=8,C=1,K=1,input=28x28,filter=3x3,pad=1", Layout.NGCHW, DType.FP16)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        store(db, other_layout, any_point(other_layout))
        store(db, NEAR, not_the_heuristic(NEAR), code="0" * 64)
        assert nearest_choice(ASKED, db, DEVICE) is None


def test_a_neighbour_of_another_class_or_family_or_too_far_is_no_neighbour(tmp_path):
    grouped = parse_conv_problem("N=32,G=8,C=2,K=2,input=28x28,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    far = parse_conv_problem("N=1,G=8,C=1,K=1,input=512x512,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
    other_family = next(c.name for c in lookup(NEAR) if c.family != heuristic_pick(ASKED).family)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        store(db, grouped, any_point(grouped))  # C = K = 2: not depthwise
        store(db, far, not_the_heuristic(far))  # 5 doublings of N and 4 of each spatial size
        assert distance(sizes(ASKED.key), sizes(far.key)) > 12
        assert nearest_choice(ASKED, db, DEVICE) is None
        store(db, NEAR, other_family)  # the heuristic's family for ASKED differs
        assert nearest_choice(ASKED, db, DEVICE) is None


def test_each_op_has_its_own_reach_the_distance_its_neighbours_still_beat_its_prior(tmp_path, monkeypatch):
    """GroupNorm's prior is a time model that neighbours two doublings away served worse than: its reach
    is shorter than backward-weight's, so the same neighbour serves one op and not the other."""
    from factory.ops import solver_for
    from factory.ops.groupnorm_bwd.problem import parse_groupnorm_problem

    asked = parse_groupnorm_problem("N=8,C=256,G=32,input=56x56", Layout.NHWGC, DType.FP16)
    near = parse_groupnorm_problem("N=32,C=256,G=32,input=56x56", Layout.NHWGC, DType.FP16)  # N twice doubled
    gn = solver_for(Op.GROUPNORM_BWD)
    assert gn.nearest_reach < distance(sizes(asked.key), sizes(near.key)) < solver_for(Op.CONV_BWD_WEIGHT).nearest_reach
    family = heuristic_pick(asked).family
    point = next(c.name for c in lookup(near) if c.family == family and c.name != heuristic_pick(asked).name)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        store(db, near, point)
        assert nearest_choice(asked, db, DEVICE) is None
        monkeypatch.setattr(type(gn), "nearest_reach", 5.0)
        choice = nearest_choice(asked, db, DEVICE)
        assert choice is not None and choice.instance.name == point


def test_a_compiled_in_filter_carries_over_to_the_asked_filter(tmp_path, monkeypatch):
    """A depthwise backward-data winner tuned on 3x3 serves a 5x5 problem as the same tuning point (the
    op's reach widened: the carrying over is what is checked here, not how far)."""
    from factory.ops import solver_for

    monkeypatch.setattr(type(solver_for(Op.CONV_BWD_DATA)), "nearest_reach", 5.0)
    tuned = parse_conv_problem("N=8,G=64,C=1,K=1,input=28x28,filter=3x3,pad=1", Layout.NHWGC, DType.FP16,
                               Op.CONV_BWD_DATA)
    asked = parse_conv_problem("N=16,G=64,C=1,K=1,input=28x28,filter=5x5,pad=2", Layout.NHWGC, DType.FP16,
                               Op.CONV_BWD_DATA)
    winner = next(c for c in lookup(tuned) if c.family == "dwc" and c.params.cv == 4 and c.params.across == 4
                  and c.params.rows == 1)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        store(db, tuned, winner.name)
        choice = nearest_choice(asked, db, DEVICE)
    assert choice is not None and choice.source_instance == winner.name
    assert choice.instance.name == winner.name.replace("k3x3s1x1d1x1", "k5x5s1x1d1x1")
    assert choice.instance in lookup(asked)


def test_select_auto_runs_the_neighbour_and_query_says_so(tmp_path, capsys, monkeypatch):
    near_pick = not_the_heuristic(NEAR)
    path = tmp_path / "t.sqlite"
    with TuningDB(str(path)) as db:
        store(db, NEAR, near_pick)
        assert select(ASKED, SelectMode.AUTO, backend=FakeGPU(ASKED), db=db).instance.name == near_pick
        assert select(ASKED, SelectMode.HEURISTIC, backend=FakeGPU(ASKED), db=db).instance.name != near_pick
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: FakeGPU(ASKED))
    argv = ["query", "--layout", "NHWGC", "--dtype", "fp16", "--problem", ASKED.key.split(":", 4)[4], "--db", str(path)]
    assert cli.main(argv + ["--json"]) == 0
    instead = json.loads(capsys.readouterr().out)["instead"]
    assert instead["source"] == "nearest" and instead["instance"] == near_pick and instead["from_problem"] == NEAR.key
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"serving {near_pick}, the winner of the nearest tuned problem {NEAR.key}" in out.replace("\n", "")


def test_bench_select_serves_what_each_mode_would_and_says_where_it_came_from(tmp_path):
    from factory.bench.gpu import served_kernel
    from factory.bench.model import Serve

    near_pick = not_the_heuristic(NEAR)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        gpu = FakeGPU(ASKED)
        untuned = served_kernel(ASKED, gpu, db, Serve.NEAREST)
        assert (untuned.name, untuned.served) == (heuristic_pick(ASKED).name, "served: heuristic")
        store(db, NEAR, near_pick)
        near = served_kernel(ASKED, gpu, db, Serve.NEAREST)
        assert (near.name, near.served) == (near_pick, f"served: nearest (winner of {NEAR.key})")
        guess = served_kernel(ASKED, gpu, db, Serve.HEURISTIC)  # the prior alone, whatever the DB holds
        assert (guess.name, guess.served) == (heuristic_pick(ASKED).name, "served: heuristic")
        own = any_point(ASKED)
        store(db, ASKED, own)
        assert (served_kernel(ASKED, gpu, db, Serve.NEAREST).name, served_kernel(ASKED, gpu, db, Serve.NEAREST).served) == (own, "served: tuned")
        assert gpu.timed == []  # nothing was tuned


def _regret_script(monkeypatch):
    import runpy
    from pathlib import Path

    scripts = Path(__file__).parent.parent / "scripts"
    monkeypatch.syspath_prepend(str(scripts))  # as `python scripts/nearest_regret.py` has it
    return runpy.run_path(str(scripts / "nearest_regret.py"), run_name="regret")


def test_regret_of_problems_served_from_another_db_and_what_auto_serves(tmp_path, monkeypatch):
    """A problem tuned in full in one DB, served as untuned from another DB's winners: the regret is the
    served instance's stored time over the winner's; with no neighbour, `auto` is the heuristic's."""
    guess, near_pick = heuristic_pick(ASKED).name, not_the_heuristic(NEAR)
    assert guess != near_pick
    script = _regret_script(monkeypatch)
    with TuningDB(str(tmp_path / "evaluated.sqlite")) as evaluated, TuningDB(str(tmp_path / "served.sqlite")) as served:
        evaluated.record(ASKED.key, ASKED.op.value, DEVICE, [
            Measurement(near_pick, 3.0, 0.1, 25, True, source_hash=code_of(near_pick)),
            Measurement(guess, 7.5, 0.1, 25, True, source_hash=code_of(guess)),
        ])
        store(served, NEAR, near_pick)
        [row] = script["regrets"](evaluated, None, served)
        assert (row.neighbour, row.nearest, row.heuristic, row.auto) == (True, 1.0, 2.5, 1.0)
        [alone] = script["regrets"](evaluated, None)  # left out of itself, the DB has no neighbour
        assert (alone.neighbour, alone.nearest, alone.auto) == (False, None, 2.5)


def _ship(tmp_path, monkeypatch, problem, instance: str) -> None:
    """Ship `instance` as the winner of `problem` on DEVICE, from a DB of its own, and point the package at it."""
    from factory.shipped import winners_document
    from tuning_db.transfer import write_document

    folder = tmp_path / "shipped"
    folder.mkdir()
    with TuningDB(str(tmp_path / "to_ship.sqlite")) as db:
        store(db, problem, instance)
        document, _ = winners_document(db, DEVICE.arch)
    write_document(str(folder / f"{DEVICE.arch}.json"), document)
    monkeypatch.setenv("KFACTORY_SHIPPED", str(folder))


def test_a_shipped_winner_is_a_neighbour_below_the_users_own(tmp_path, monkeypatch):
    shipped_pick, own_pick = not_the_heuristic(NEAR), not_the_heuristic(NEAR, skip=1)
    _ship(tmp_path, monkeypatch, NEAR, shipped_pick)
    with TuningDB(str(tmp_path / "user.sqlite")) as db:
        choice = nearest_choice(ASKED, db, DEVICE)  # the user's DB is empty: the shipped neighbour serves
        assert choice is not None and (choice.instance.name, choice.shipped) == (shipped_pick, True)
        assert nearest_choice(ASKED, db, DEVICE, shipped=False) is None
        store(db, NEAR, own_pick)  # the user tuned the same neighbour: theirs counts, the shipped one not
        choice = nearest_choice(ASKED, db, DEVICE)
        assert choice is not None and (choice.instance.name, choice.shipped) == (own_pick, False)


def test_a_winner_shipped_from_another_device_is_no_neighbour(tmp_path, monkeypatch):
    _ship(tmp_path, monkeypatch, NEAR, not_the_heuristic(NEAR))
    with TuningDB(str(tmp_path / "user.sqlite")) as db:
        assert nearest_choice(ASKED, db, dataclasses.replace(DEVICE, sm_count=114)) is None


def test_select_auto_serves_the_nearest_shipped_winner_to_an_empty_db_and_query_says_so(tmp_path, capsys, monkeypatch):
    shipped_pick = not_the_heuristic(NEAR)
    _ship(tmp_path, monkeypatch, NEAR, shipped_pick)
    path = tmp_path / "empty.sqlite"
    with TuningDB(str(path)) as db:
        assert select(ASKED, SelectMode.AUTO, backend=FakeGPU(ASKED), db=db).instance.name == shipped_pick
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: FakeGPU(ASKED))
    argv = ["query", "--layout", "NHWGC", "--dtype", "fp16", "--problem", ASKED.key.split(":", 4)[4], "--db", str(path)]
    assert cli.main(argv + ["--json"]) == 0
    instead = json.loads(capsys.readouterr().out)["instead"]
    assert (instead["source"], instead["instance"], instead["from_shipped"]) == ("nearest", shipped_pick, True)
    assert cli.main(argv) == 0
    assert f"the winner of the nearest shipped tuned problem {NEAR.key}" in capsys.readouterr().out.replace("\n", "")


def test_the_regret_scripts_refuse_a_missing_db_or_a_file_that_is_no_db_in_one_line(tmp_path, monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    scripts = Path(__file__).parent.parent / "scripts"
    monkeypatch.syspath_prepend(str(scripts))
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("not a database")
    for script, args in (("budget_regret.py", [str(tmp_path / "missing.db")]),
                         ("retune_budget.py", [str(tmp_path / "missing.db")]),
                         ("nearest_regret.py", [str(not_a_db)]),
                         ("prior_fit.py", ["--train", str(not_a_db)]),
                         ("measured_ranking.py", ["--train", str(not_a_db), "--test", str(not_a_db)])):
        monkeypatch.setattr(sys, "argv", [script, *args])
        with pytest.raises(SystemExit) as ended:
            runpy.run_path(str(scripts / script), run_name="__main__")
        err = capsys.readouterr().err.strip()
        assert ended.value.code == 2 and len(err.splitlines()) == 1, (script, err)
        assert "no such tuning database" in err or "not an SQLite database" in err
    assert not (tmp_path / "missing.db").exists()
    TuningDB(str(tmp_path / "empty.db")).close()  # a DB, but nothing of the op tuned in it
    monkeypatch.setattr(sys, "argv", ["measured_ranking.py", "--train", str(tmp_path / "empty.db")])
    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(scripts / "measured_ranking.py"), run_name="__main__")
    err = capsys.readouterr().err.strip()
    assert ended.value.code == 2 and err.count("\n") == 0 and "no tuned conv_bwd_weight problem" in err
