"""Shipped winners beneath the user's DB (factory.shipped): served as they are on an identical device,
only after one re-timing (`db verify --shipped`) on a similar one, never once their code changed or on
another arch; a shipped file written from a tuned DB. Runs on tests/fake_gpu.py's FakeGPU."""

from __future__ import annotations

import dataclasses
import json

import pytest

import factory.backends
import factory.shipped
from factory import api, cli
from factory.problem import DType, Layout, parse_conv_problem
from factory.recheck import describe_shipped, retime_shipped
from factory.device import target_for
from factory.selector import problem_from_key, serving_refusals
from factory.shipped import Match, ShippedWinners, lookup_shipped, match_of, winners_document
from fake_gpu import DEVICE, SETTINGS, FakeGPU, isolate
from tuning_db import TuningDB
from tuning_db.transfer import write_document

pytestmark = pytest.mark.filterwarnings("ignore:.*cannot be rebuilt in a worker process:RuntimeWarning")

PROBLEM = parse_conv_problem("N=1,G=4,C=1,K=1,input=8x8,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
NEW_DRIVER = dataclasses.replace(DEVICE, driver_version="13990", compiler_version="nvrtc 13.9")  # identical
FEWER_SMS = dataclasses.replace(DEVICE, name="NVIDIA H100 PCIe", sm_count=114)  # similar
OTHER_ARCH = dataclasses.replace(DEVICE, arch="sm_80", name="NVIDIA A100", sm_count=108)


@pytest.fixture()
def shipped(monkeypatch, tmp_path):
    """A DB tuned on DEVICE, its winners shipped in a folder $KFACTORY_SHIPPED names; the winner's name."""
    isolate(monkeypatch, tmp_path)
    tuned = TuningDB(str(tmp_path / "tuned.sqlite"))
    winner = api.tune_problem(PROBLEM, FakeGPU(PROBLEM), tuned, SETTINGS).winner.instance
    document, left_out = winners_document(tuned, DEVICE.arch)
    tuned.close()
    assert left_out == [] and len(document.winners) == 1
    folder = tmp_path / "shipped"
    folder.mkdir()
    write_document(folder / "sm_90.json", document)
    monkeypatch.setenv("KFACTORY_SHIPPED", str(folder))
    return winner


def user_db(tmp_path) -> TuningDB:
    return TuningDB(str(tmp_path / "user.sqlite"))


def test_devices_match_on_backend_and_arch_and_are_identical_with_the_same_model_and_sm_count():
    assert match_of(DEVICE, NEW_DRIVER) is Match.IDENTICAL
    assert match_of(DEVICE, FEWER_SMS) is Match.SIMILAR
    assert match_of(DEVICE, OTHER_ARCH) is None


def test_an_identical_device_is_served_the_shipped_winner_without_measuring(shipped, tmp_path):
    gpu = FakeGPU(PROBLEM, NEW_DRIVER)
    db = user_db(tmp_path)
    served = api.untuned_choice(PROBLEM, db, gpu)
    assert served.origin is api.Origin.SHIPPED and served.instance.name == shipped
    assert "shipped winner (identical device" in served.describe()
    assert api.select(PROBLEM, mode="db", backend=gpu, db=db).name == shipped
    assert api.select(PROBLEM, backend=gpu, db=db).name == shipped
    assert gpu.timed == []


def test_the_user_s_own_winner_comes_before_the_shipped_one(shipped, tmp_path):
    gpu = FakeGPU(PROBLEM, NEW_DRIVER, us={shipped: 1e6})  # here, the shipped winner is slow
    db = user_db(tmp_path)
    own = api.tune_problem(PROBLEM, gpu, db, SETTINGS).winner.instance
    assert own != shipped and api.untuned_choice(PROBLEM, db, gpu).origin is api.Origin.TUNED


def test_a_similar_device_is_served_it_only_after_one_re_timing(shipped, tmp_path):
    gpu = FakeGPU(PROBLEM, FEWER_SMS)
    db = user_db(tmp_path)
    assert api.untuned_choice(PROBLEM, db, gpu).origin is api.Origin.HEURISTIC
    with pytest.raises(api.NotTuned):
        api.select(PROBLEM, mode="db", backend=gpu, db=db)
    (result,) = retime_shipped(db, gpu, settings=SETTINGS)
    assert gpu.timed and set(gpu.timed) == {shipped}  # that candidate alone
    assert result.trusted and not result.already and "re-timed" in describe_shipped(result)
    served = api.untuned_choice(PROBLEM, db, gpu)
    assert served.origin is api.Origin.TUNED and served.instance.name == shipped
    gpu.timed.clear()
    (again,) = retime_shipped(db, gpu, settings=SETTINGS)
    assert again.already and gpu.timed == []
    assert retime_shipped(db, FakeGPU(PROBLEM, NEW_DRIVER), settings=SETTINGS) == []  # identical: nothing to do


def test_a_shipped_winner_that_fails_here_is_not_served(shipped, tmp_path):
    gpu = FakeGPU(PROBLEM, FEWER_SMS, wrong=frozenset({shipped}))
    db = user_db(tmp_path)
    (result,) = retime_shipped(db, gpu, settings=SETTINGS)
    assert not result.trusted and "fails here" in describe_shipped(result)
    assert api.untuned_choice(PROBLEM, db, gpu).origin is api.Origin.HEURISTIC


def test_a_shipped_winner_measured_on_other_code_or_another_arch_is_never_served(shipped, monkeypatch):
    real = factory.shipped.shipped_winners()
    (winner,) = [s.winner for s in [real.find(PROBLEM.key, DEVICE)]]
    stale = ShippedWinners([dataclasses.replace(winner, source_hash="0" * 64)])
    monkeypatch.setattr(factory.shipped, "shipped_winners", lambda: stale)
    found = lookup_shipped(PROBLEM, NEW_DRIVER)
    assert found.instance is None and found.refusals and "code" in found.refusals[0].message
    monkeypatch.setattr(factory.shipped, "shipped_winners", lambda: real)
    assert lookup_shipped(PROBLEM, OTHER_ARCH).found is None


def test_shipping_can_be_turned_off(shipped, monkeypatch):
    monkeypatch.setenv("KFACTORY_SHIPPED", "off")
    assert len(factory.shipped.shipped_winners()) == 0 and lookup_shipped(PROBLEM, DEVICE).found is None


def test_winners_whose_code_changed_are_left_out_of_a_shipped_file(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    db = TuningDB(str(tmp_path / "tuned.sqlite"))
    api.tune_problem(PROBLEM, FakeGPU(PROBLEM), db, SETTINGS)
    monkeypatch.setattr("factory.selector.hash_of", lambda instance: "f" * 64)  # every template edited since
    document, left_out = winners_document(db, DEVICE.arch)
    assert document.winners == () and len(left_out) == 1 and PROBLEM.key in left_out[0]
    assert winners_document(db, "gfx90a")[0].winners == ()


def test_db_verify_shipped_and_query_say_what_they_did(shipped, tmp_path, monkeypatch, capsys):
    gpu = FakeGPU(PROBLEM, FEWER_SMS)
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: gpu)
    monkeypatch.setattr(cli.console, "width", 400)
    db = str(tmp_path / "user.sqlite")
    query = ["query", "--op", "conv_bwd_weight", "--layout", "NHWGC", "--dtype", "fp16", "--problem", PROBLEM.spec(),
             "--db", db]
    assert cli.main(query) == 0
    assert "kfactory db verify --shipped" in capsys.readouterr().out
    assert cli.main(["db", "verify", "--shipped", "--json", "--db", db]) == 0
    (record,) = json.loads(capsys.readouterr().out)["shipped"]
    assert record["trusted"] and record["instance"] == shipped and record["shipped_sm_count"] == DEVICE.sm_count
    assert cli.main([*query, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["instance"] == shipped


def test_a_missing_folder_or_a_defective_file_is_one_line_naming_it(monkeypatch, tmp_path, capsys):
    from factory.shipped import ShippedError, shipped_winners

    monkeypatch.setenv("KFACTORY_SHIPPED", str(tmp_path / "nowhere"))
    with pytest.raises(ShippedError, match="KFACTORY_SHIPPED=.*nowhere.* is not a folder"):
        shipped_winners()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "sm_90.json").write_text('{"format": "something else"}')
    monkeypatch.setenv("KFACTORY_SHIPPED", str(tmp_path / "bad"))
    with pytest.raises(ShippedError, match="shipped winners: .*sm_90.json"):
        shipped_winners()
    isolate(monkeypatch, tmp_path)
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: FakeGPU(PROBLEM, NEW_DRIVER))
    query = ["query", "--op", "conv_bwd_weight", "--layout", "NHWGC", "--dtype", "fp16", "--problem", PROBLEM.spec(),
             "--db", str(tmp_path / "q.sqlite")]
    assert cli.main(query) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sm_90.json" in err


def test_the_ship_script_writes_a_file_the_loader_reads_and_refuses_a_missing_db(monkeypatch, tmp_path, capsys):
    import runpy
    import sys

    isolate(monkeypatch, tmp_path)
    db = TuningDB(str(tmp_path / "tuned.sqlite"))
    winner = api.tune_problem(PROBLEM, FakeGPU(PROBLEM), db, SETTINGS).winner.instance
    db.close()
    script = str(__import__("pathlib").Path(__file__).parent.parent / "scripts" / "ship_winners.py")

    def run(*args: str) -> int:
        monkeypatch.setattr(sys, "argv", ["ship_winners.py", *args])
        with pytest.raises(SystemExit) as ended:
            runpy.run_path(script, run_name="__main__")
        return ended.value.code

    out = tmp_path / "shipped" / "sm_90.json"
    out.parent.mkdir()
    assert run("--db", str(tmp_path / "tuned.sqlite"), "--arch", "sm_90", "--out", str(out)) == 0
    assert "\n" not in out.read_text().rstrip()  # compact: thousands of winners, read by programs only
    monkeypatch.setenv("KFACTORY_SHIPPED", str(out.parent))
    assert lookup_shipped(PROBLEM, NEW_DRIVER).instance.name == winner
    assert run("--db", str(tmp_path / "missing.sqlite"), "--arch", "sm_90", "--out", str(out)) == 2
    assert "no such tuning database" in capsys.readouterr().err
    assert not (tmp_path / "missing.sqlite").exists()


def test_every_winner_the_package_ships_is_servable_with_today_s_code(monkeypatch):
    """A template or catalog edit that changes a shipped winner's source (or drops its instance) silently
    turns it off; this says which ones, so the file is rebuilt (scripts/ship_winners.py) or the edit
    reconsidered."""
    monkeypatch.delenv("KFACTORY_SHIPPED", raising=False)
    factory.shipped._loaded.clear()
    winners = [w for ws in factory.shipped.shipped_winners()._by_key.values() for w in ws]
    assert winners, "the package ships no winners"
    stale = []
    for winner in winners:
        refusals = serving_refusals(problem_from_key(winner.problem_key), winner, None, target_for(winner.device))
        if refusals:
            stale.append(f"{winner.problem_key}: {refusals[0].message}")
    assert stale == [], f"{len(stale)} of {len(winners)} shipped winners are no longer served:\n" + "\n".join(stale[:10])
