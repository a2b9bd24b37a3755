"""A stored winner is served only to the device it was tuned on, while its instance still exists and
still computes the problem; select() and `kfactory query` say which rule refused it and what instead."""

from __future__ import annotations

import dataclasses
import json

import pytest

import factory.backends
from factory import cli
from factory.api import NotTuned, select
from factory.catalog import all_instances
from factory.problem import DType, Layout, parse_conv_problem
from factory.selector import Refused, heuristic_pick, lookup, stored_choice, tune_command
from fake_gpu import DEVICE, FakeGPU, code_of, isolate
from tuning_db import Measurement, TuningDB

pytestmark = pytest.mark.filterwarnings("ignore:.*cannot be rebuilt in a worker process:RuntimeWarning")

SPEC = "N=2,G=8,C=1,K=1,input=9x9,filter=3x3,pad=1"
PROBLEM = parse_conv_problem(SPEC, Layout.NHWGC, DType.FP16)
TUNED = next(c.name for c in lookup(PROBLEM) if c.name != heuristic_pick(PROBLEM).name)
# An instance of the same cell that does not compute PROBLEM (a depthwise tile family cannot take C=2).
WIDER = parse_conv_problem("N=2,G=8,C=2,K=2,input=9x9,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
INAPPLICABLE = next(i for i in all_instances() if i.cell_matches(PROBLEM) and i.why_not(PROBLEM) is not None)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)


def store(path, device=DEVICE, instance: str = TUNED, us: float = 2.5) -> TuningDB:
    db = TuningDB(str(path))
    code = code_of(instance) if instance in {i.name for i in all_instances()} else None
    db.record(PROBLEM.key, PROBLEM.op.value, device, [Measurement(instance, us, 0.1, 25, True, source_hash=code)])
    return db


def query(capsys, monkeypatch, db: TuningDB, *extra: str) -> str:
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: FakeGPU(PROBLEM))
    code = cli.main(["query", "--layout", "NHWGC", "--dtype", "fp16", "--problem", SPEC, "--db", db.location, *extra])
    out, _ = capsys.readouterr()
    assert code == 0
    return out


CHANGES = [
    ({"compiler_version": "nvrtc 12.8"}, Refused.COMPILER, "recorded with compiler nvrtc 12.8, this machine has nvrtc 13.0"),
    ({"driver_version": "12080"}, Refused.DRIVER, "recorded with driver 12080, this machine has 13000"),
    ({"arch": "sm_80"}, Refused.ARCH, "recorded on sm_80, this device is sm_90"),
    ({"sm_count": 114}, Refused.SM_COUNT, "recorded on a device with 114 SMs, this one has 132"),
]


@pytest.mark.parametrize("change, kind, message", CHANGES, ids=[c[1].value for c in CHANGES])
def test_a_winner_from_another_device_identity_is_not_served(capsys, monkeypatch, tmp_path, change, kind, message):
    db = store(tmp_path / "t.sqlite", dataclasses.replace(DEVICE, **change))
    gpu = FakeGPU(PROBLEM)
    with pytest.raises(NotTuned, match=f"no tuned winner for .*stored winner {TUNED} \\(2.50 µs\\) is not served: {message}"):
        select(PROBLEM, mode="db", backend=gpu, db=db)
    assert select(PROBLEM, mode="auto", backend=gpu, db=db).name == heuristic_pick(PROBLEM).name

    text = " ".join(query(capsys, monkeypatch, db).split())
    assert f"stored winner {TUNED} (2.50 µs) is not served: {message}" in text
    assert f"the heuristic would pick {heuristic_pick(PROBLEM).name}; to tune it here: {tune_command(PROBLEM)}" in text

    data = json.loads(query(capsys, monkeypatch, db, "--json"))
    assert data["tuned"] is False
    [refusal] = data["not_served"]
    assert refusal["kind"] == kind.value and refusal["reason"] == message and refusal["instance"] == TUNED
    assert (refusal["recorded"], refusal["current"]) == (str(change[next(iter(change))]), str(getattr(DEVICE, next(iter(change)))))
    assert data["instead"] == {"instance": heuristic_pick(PROBLEM).name, "source": "heuristic", "advice": tune_command(PROBLEM)}


def test_every_difference_is_its_own_line(capsys, monkeypatch, tmp_path):
    db = store(tmp_path / "t.sqlite", dataclasses.replace(DEVICE, compiler_version="nvrtc 12.8", driver_version="12080"))
    lines = [line for line in query(capsys, monkeypatch, db).splitlines() if "is not served" in line]
    assert [line.split(": ", 1)[1] for line in lines] == [
        "recorded with driver 12080, this machine has 13000",
        "recorded with compiler nvrtc 12.8, this machine has nvrtc 13.0",
    ]


def test_a_winner_whose_instance_left_the_catalog_is_not_served(capsys, monkeypatch, tmp_path):
    gone = "conv_bwd_weight_2d_nhwgc_fp16_dw_retired"
    db = store(tmp_path / "t.sqlite", instance=gone)
    choice = stored_choice(PROBLEM, db.lookup(PROBLEM.key, DEVICE))
    assert choice.winner is None and choice.instance is None
    assert [(r.instance, r.kind) for r in choice.refusals] == [(gone, Refused.NOT_IN_CATALOG)]
    with pytest.raises(NotTuned, match="its instance is no longer in the catalog"):
        select(PROBLEM, mode="db", backend=FakeGPU(PROBLEM), db=db)
    text = " ".join(query(capsys, monkeypatch, db).split())
    assert f"stored winner {gone} (2.50 µs) is not served: its instance is no longer in the catalog" in text


def test_a_winner_that_no_longer_applies_is_not_served(capsys, monkeypatch, tmp_path):
    db = store(tmp_path / "t.sqlite", instance=INAPPLICABLE.name)
    why = INAPPLICABLE.why_not(PROBLEM)
    assert select(PROBLEM, mode="auto", backend=FakeGPU(PROBLEM), db=db).name == heuristic_pick(PROBLEM).name
    data = json.loads(query(capsys, monkeypatch, db, "--json"))
    assert data["not_served"] == [{
        "instance": INAPPLICABLE.name, "median_us": 2.5, "kind": "not_applicable",
        "reason": f"its instance no longer applies to this problem: {why}", "recorded": None, "current": None,
    }]


def test_a_servable_winner_is_served_and_foreign_ones_stay_in_the_json(capsys, monkeypatch, tmp_path):
    db = store(tmp_path / "t.sqlite")
    db.record(PROBLEM.key, PROBLEM.op.value, dataclasses.replace(DEVICE, driver_version="12080"),
              [Measurement(heuristic_pick(PROBLEM).name, 1.0, 0.1, 25, True,
                           source_hash=code_of(heuristic_pick(PROBLEM).name))])
    assert select(PROBLEM, mode="db", backend=FakeGPU(PROBLEM), db=db).name == TUNED
    data = json.loads(query(capsys, monkeypatch, db, "--json"))
    assert data["tuned"] is True and data["instance"] == TUNED
    assert [r["kind"] for r in data["not_served"]] == ["driver"]
    text = " ".join(query(capsys, monkeypatch, db).split())
    assert text.startswith(f"{TUNED} 2.50 µs on {DEVICE.name}") and "not served" not in text
