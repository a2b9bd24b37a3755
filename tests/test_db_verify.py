"""`kfactory db verify`: stored winners re-timed on this GPU; slower or failing ones re-tuned; winners
that are not servable here listed with the reason. Runs on tests/fake_gpu.py's FakeGPU."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

import factory.api
import factory.backends
import factory.recheck
from factory import cli
from factory.backends import BackendError, BackendKind
from factory.ops.groupnorm_bwd import GroupNormProblem
from factory.problem import DType, Layout, parse_conv_problem
from factory.recheck import Action, Trigger, recheck_winners
from factory.selector import UnreadableKey, lookup, problem_from_key
from fake_gpu import FAKE_TARGET, DEVICE, SETTINGS, FakeGPU, code_of, fake_us, install_fake_compiler
from tuning_db import Measurement, TuningDB

pytestmark = pytest.mark.filterwarnings("ignore:.*cannot be rebuilt in a worker process:RuntimeWarning")

KEEP = parse_conv_problem("N=1,G=4,C=1,K=1,input=8x8,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
SLOW = parse_conv_problem("N=1,G=4,C=1,K=1,input=16,filter=3,pad=1", Layout.NHWGC, DType.FP16)
FAIL = parse_conv_problem("N=1,G=4,C=1,K=1,input=8x8,filter=3x3,pad=1", Layout.NGCHW, DType.FP16)
GONE = parse_conv_problem("N=1,G=2,C=1,K=1,input=8x8,filter=3x3,pad=1", Layout.NHWGC, DType.FP16)
RETIRED = "conv_bwd_weight_2d_nhwgc_fp16_dw_retired"
OLD_DRIVER = dataclasses.replace(DEVICE, driver_version="12080")


def fastest(problem: Any, exclude: frozenset[str] = frozenset(), us: dict[str, float] | None = None) -> str:
    return min((c.name for c in lookup(problem, target=FAKE_TARGET) if c.name not in exclude), key=lambda n: (us or {}).get(n, fake_us(n)))


class Switchboard:
    """One FakeGPU per problem behind one backend: tune() calls switch to the problem's GPU."""

    kind = BackendKind.CUDA

    def __init__(self, gpus: dict[str, FakeGPU]) -> None:
        self.gpus = gpus
        self.current = next(iter(gpus.values()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.current, name)

    def device_info(self):
        return DEVICE

    def follow(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for module, name in ((factory.api, "tune_timed"), (factory.recheck, "tune")):
            real = getattr(module, name)

            def switching(problem, *args, _real=real, **kwargs):
                self.current = self.gpus[problem.key]
                return _real(problem, *args, **kwargs)

            monkeypatch.setattr(module, name, switching)


@pytest.fixture(autouse=True)
def _fake_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("KFACTORY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KFACTORY_DB", str(tmp_path / "default.sqlite"))
    monkeypatch.delenv("KFACTORY_BACKEND", raising=False)
    monkeypatch.setattr(factory.backends, "_ACTIVE", {})
    install_fake_compiler(monkeypatch.setattr)


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    """A DB with winners of KEEP, SLOW and FAIL tuned here, plus two that are not servable, and a
    GPU on which KEEP's winner is 10% slower, SLOW's 10x slower and FAIL's now computes garbage."""
    path = str(tmp_path / "verify.sqlite")
    with TuningDB(path) as db:
        for problem in (KEEP, SLOW, FAIL):
            factory.api.tune_problem(problem, FakeGPU(problem), db, SETTINGS)
        db.record(KEEP.key, KEEP.op.value, OLD_DRIVER, [Measurement(fastest(KEEP), 3.0, 0.1, 25, True,
                                                                         source_hash=code_of(fastest(KEEP)))])
        db.record(GONE.key, GONE.op.value, DEVICE, [Measurement(RETIRED, 1.0, 0.1, 25, True)])
    keep, slow, fail = fastest(KEEP), fastest(SLOW), fastest(FAIL)
    board = Switchboard({
        KEEP.key: FakeGPU(KEEP, us={keep: 1.1 * fake_us(keep)}),
        SLOW.key: FakeGPU(SLOW, us={slow: 10 * fake_us(slow)}),
        FAIL.key: FakeGPU(FAIL, wrong=frozenset({fail})),
    })
    board.follow(monkeypatch)
    return path, board


def test_verify_keeps_retunes_and_lists_what_is_not_served(tuned):
    path, board = tuned
    with TuningDB(path) as db:
        results = recheck_winners(db, board, threshold=1.25, settings=SETTINGS)
        by_problem: dict[str, list] = {}
        for r in results:
            by_problem.setdefault(r.problem_key, []).append(r)
        assert set(by_problem) == {KEEP.key, SLOW.key, FAIL.key, GONE.key}

        keep_rows = {r.action: r for r in by_problem[KEEP.key]}
        assert set(keep_rows) == {Action.KEPT, Action.NOT_SERVED}
        kept = keep_rows[Action.KEPT]
        assert kept.instance == fastest(KEEP) and kept.ratio == pytest.approx(1.1)
        foreign = keep_rows[Action.NOT_SERVED]
        assert [(r.kind.value, r.recorded, r.current) for r in foreign.refusals] == [("driver", "12080", "13000")]
        assert "recorded with driver 12080, this machine has 13000" in foreign.refusals[0].message
        assert db.best(KEEP.key, DEVICE).instance == fastest(KEEP)

        [slow] = by_problem[SLOW.key]
        assert (slow.action, slow.trigger) == (Action.RETUNED, Trigger.SLOWER)
        assert slow.ratio == pytest.approx(10.0)
        new = fastest(SLOW, us=board.gpus[SLOW.key].us)
        assert new != slow.instance and slow.new_winner.instance == new
        assert db.best(SLOW.key, DEVICE).instance == new

        [fail] = by_problem[FAIL.key]
        assert (fail.action, fail.trigger) == (Action.RETUNED, Trigger.FAILS)
        assert fail.now is not None and not fail.now.verified and fail.now.error.startswith("verify:")
        assert fail.now_us is None and fail.ratio is None
        assert fail.new_winner.instance == fastest(FAIL, exclude=frozenset({fail.instance}))
        assert db.best(FAIL.key, DEVICE).instance == fail.new_winner.instance

        [gone] = by_problem[GONE.key]
        assert gone.action is Action.NOT_SERVED and gone.instance == RETIRED
        assert [r.kind.value for r in gone.refusals] == ["not_in_catalog"]
        assert db.best(GONE.key, DEVICE).instance == RETIRED  # reported, not touched

        # Re-tuning measured every candidate again: the fresh run's times decided.
        assert len(db.measurements(SLOW.key, DEVICE)) == 2 * len(lookup(SLOW, target=FAKE_TARGET)) + 1


def test_verify_compiles_every_winner_ahead_in_one_batch(tuned, monkeypatch):
    """The winners' instances go to compile_many together before any is timed (timing then loads each
    from the compile cache); a name no catalog has is left out of the batch and reported as before."""
    path, board = tuned
    batches: list[list[str]] = []
    real = factory.recheck.compile_many

    def recording(kind, jobs, workers=None, on_done=None):
        batches.append(sorted(j.name for j in jobs))
        return real(kind, jobs, workers=workers, on_done=on_done)

    monkeypatch.setattr(factory.recheck, "compile_many", recording)
    with TuningDB(path) as db:
        stored = sorted({w.instance for w in db.winners(None)} - {RETIRED})
        results = recheck_winners(db, board, threshold=1.25, settings=SETTINGS)
    assert batches[0] == stored and len(stored) > 1
    assert any(r.instance == RETIRED and r.action is Action.NOT_SERVED for r in results)


def test_verify_command_prints_the_table_and_json(capsys, tuned, monkeypatch):
    path, board = tuned
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: board)
    code = cli.main(["db", "verify", "--db", path, "--reps", "4", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    data = json.loads(out)
    # A line a winner on stderr as it is done (a log of a long run shows how far it got), stdout JSON only.
    lines = [" ".join(line.split()) for line in err.splitlines() if line.startswith("conv_bwd_weight:")]
    assert len(lines) == len(data["winners"]) == 5
    assert any(line.startswith(SLOW.key) and "µs; slower than the threshold; re-tuned" in line for line in lines), \
        "\n".join(lines)
    assert data["threshold"] == 1.25
    actions = sorted((w["problem"], w["action"]) for w in data["winners"])
    assert actions == sorted([(KEEP.key, "kept"), (KEEP.key, "not_served"), (SLOW.key, "retuned"),
                              (FAIL.key, "retuned"), (GONE.key, "not_served")])
    slow = next(w for w in data["winners"] if w["problem"] == SLOW.key)
    assert slow["trigger"] == "slower" and slow["ratio"] == pytest.approx(10.0)
    assert slow["new_winner"] and slow["new_winner_us"] < slow["now_us"]
    gone = next(w for w in data["winners"] if w["problem"] == GONE.key)
    assert gone["not_served"][0]["kind"] == "not_in_catalog"

    # Second pass on the same GPU: everything servable now holds.
    monkeypatch.setattr(cli.console, "width", 400)  # one line per row, as on a wide terminal
    code = cli.main(["db", "verify", "--db", path, "--reps", "4"])
    out, _ = capsys.readouterr()
    assert code == 0
    text = " ".join(out.replace("│", " ").replace("┃", " ").split())
    for column in ("problem", "instance", "recorded µs", "now µs", "ratio", "action"):
        assert column in text
    assert "kept" in text and "re-tuned" not in text
    assert "not served: recorded with driver 12080, this machine has 13000" in text
    assert f"{SLOW.key} {fastest(SLOW, us=board.gpus[SLOW.key].us)}" in text
    assert "3 kept, 2 not served" in text


def test_verify_of_one_op_with_no_winners(capsys, tuned, monkeypatch):
    path, board = tuned
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: board)
    code = cli.main(["db", "verify", "--db", path, "--op", "groupnorm_bwd"])
    out, _ = capsys.readouterr()
    assert code == 0 and " ".join(out.split()) == "no stored winners of groupnorm_bwd"


def test_verify_changed_with_every_winner_current_times_nothing(capsys, tuned, monkeypatch):
    path, board = tuned
    monkeypatch.setattr(factory.backends, "get_backend", lambda *a, **k: board)
    code = cli.main(["db", "verify", "--db", path, "--changed"])
    out, _ = capsys.readouterr()
    assert code == 0 and " ".join(out.split()) == "no stored winners measured on older code"
    assert cli.main(["db", "verify", "--db", path, "--changed", "--shipped"]) == 2
    assert "--changed re-times this device's own winners" in capsys.readouterr().err


@pytest.mark.parametrize("threshold", ["0.9", "nan", "inf"])
def test_verify_threshold_must_be_at_least_one(capsys, tmp_path, threshold):
    code = cli.main(["db", "verify", "--db", str(tmp_path / "x.sqlite"), "--threshold", threshold])
    _, err = capsys.readouterr()
    assert code == 2
    [line] = err.splitlines()
    assert line.startswith("kfactory: error: --threshold must be a finite number >= 1")


def test_verify_without_gpu_is_one_line(capsys, tmp_path, monkeypatch):
    def none(*a, **k):
        raise BackendError("no usable GPU runtime: cuda: no device")

    monkeypatch.setattr(factory.backends, "get_backend", none)
    code = cli.main(["db", "verify", "--db", str(tmp_path / "x.sqlite")])
    _, err = capsys.readouterr()
    assert code == 1
    [line] = err.splitlines()
    assert line.startswith("kfactory: GPU runtime error: no usable GPU runtime")


# --- stored keys back to problems ------------------------------------------------------------------
@pytest.mark.parametrize("problem", [
    KEEP,
    parse_conv_problem("N=3,G=2,C=5,K=7,input=4x9x6,filter=3x1x2,stride=2x1x1,pad=1x0x1,dilation=1x2x1",
                       Layout.GNHWC, DType.BF16_FP32W),
    GroupNormProblem(N=2, C=64, G=32, input=(7, 9), layout=Layout.NHWGC, dtype=DType.BF16),
    GroupNormProblem(N=4, C=32, G=8, input=(5,), layout=Layout.NGCHW, dtype=DType.FP32, affine=False),
])
def test_problem_from_key_reads_every_stored_key_back(problem):
    assert problem_from_key(problem.key) == problem


@pytest.mark.parametrize("key", [
    "conv_bwd_weight:garbage",
    "conv_bwd_weight:nhwgc:fp16:2d:N=1,G=4",
    "conv_bwd_weight:nhwgc:fp99:2d:N=1,G=4,C=1,K=1,input=8x8,filter=3x3",
    # parses, but not to this key: a key must name its problem exactly
    "conv_bwd_weight:nhwgc:fp16:2d:N=1,G=4,C=1,K=1,input=8x8,filter=3x3",
])
def test_problem_from_key_refuses_what_does_not_read_back(key):
    with pytest.raises(UnreadableKey, match="stored problem key"):
        problem_from_key(key)


def test_a_winner_under_an_unreadable_key_is_listed(tmp_path):
    with TuningDB(str(tmp_path / "k.sqlite")) as db:
        db.record("conv_bwd_weight:garbage", "conv_bwd_weight", DEVICE, [Measurement("x", 1.0, 0.0, 25, True)])
        [row] = recheck_winners(db, FakeGPU(KEEP), settings=SETTINGS)
    assert row.action is Action.NOT_SERVED and "not op:layout:dtype:rank:sizes" in row.unreadable
