"""A fleet of workers on fake GPUs (tests/fake_gpu.py's FleetGPU), on SQLite and on a real PostgreSQL
server: `kfactory worker` processes claim each job exactly once, a worker killed mid-job (SIGKILL) has its
job finished by another on a second attempt, concurrent `kfactory enqueue` of one file adds each job once,
Ctrl-C and SIGTERM release the job in hand, failing jobs stop after their attempts with the last error, a
lease taken over stores nothing, and `kfactory jobs` shows the queue."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import factory.fleet.gpus as fleet_gpus
from factory import cli
from factory.fleet.gpus import FleetError, parse_gpus, visible
from factory.fleet.problems import plan
from factory.fleet.worker import Worker, WorkerSettings
from factory.selector import problem_from_key
from fake_gpu import DEVICE, FleetGPU, isolate
from tuning_db import JobSpec, JobState, TuningDB

pytestmark = pytest.mark.filterwarnings("ignore:.*cannot be rebuilt in a worker process:RuntimeWarning")

TESTS = Path(__file__).parent
ROOT = TESTS.parent
# 1-D fp32 depthwise problems, one per group count: 8 candidates each, tens of milliseconds per tune here.
SPEC = "N=1,G={g},C=1,K=1,input=9,filter=3,pad=1"
CANDIDATES = 8


def problem_file(path: Path, count: int, first: int = 1) -> Path:
    path.write_text("# fleet test problems\n" + "".join(f"--layout NHWGC --dtype fp32 --problem {SPEC.format(g=8 * n)}\n"
                                                         for n in range(first, first + count)))
    return path


def fleet_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "KFACTORY_FLEET_GPU": "fake_gpu:FleetGPU",
        "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "KFACTORY_CACHE_DIR": str(tmp_path / "cache"),
    })
    env.pop("KFACTORY_DB", None)
    env.update(extra)
    return env


def kfactory(*args: str) -> list[str]:
    return [sys.executable, "-m", "factory.cli", *args]


def run(argv: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def enqueue(url: str, path: Path, env: dict[str, str], *extra: str) -> dict[str, Any]:
    done = run(kfactory("enqueue", "--db", url, "--problems", str(path), "--json", *extra), env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def claims(output: str) -> list[int]:
    return [int(line.split(" job ")[1].split()[0]) for line in output.splitlines() if " claimed (attempt" in line]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return fleet_env(tmp_path)


# --- many workers -----------------------------------------------------------------------------------
def test_four_workers_claim_each_of_200_jobs_exactly_once(db_url: str, env: dict[str, str], tmp_path: Path) -> None:
    added = enqueue(db_url, problem_file(tmp_path / "problems.txt", 200), env)
    assert added["added"] == 200
    done = run(kfactory("worker", "--db", db_url, "--gpus", "0,1,2,3", "--drain", "--poll", "0.1", "--lease", "30",
                        "--reps", "4"), env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    claimed = claims(done.stdout)
    with TuningDB(db_url) as db:
        jobs = db.jobs.jobs()
        assert sorted(claimed) == sorted(j.id for j in jobs), "every job claimed exactly once"
        assert all(j.state is JobState.DONE and j.attempts == 1 and j.winner_instance for j in jobs)
        assert db.stats().measurements == 200 * CANDIDATES and db.stats().winners == 200
        workers = {j.owner for j in jobs}
    assert len(workers) >= 2, f"the jobs were not shared: {workers}"
    assert done.stdout.count("no job left for this device; exiting") == 4


def test_a_worker_killed_mid_job_has_its_job_finished_by_another(db_url: str, tmp_path: Path) -> None:
    path = problem_file(tmp_path / "problems.txt", 3)
    slow = fleet_env(tmp_path, KFACTORY_FAKE_DELAY="0.5")  # 8 candidates: about 4 s per job
    enqueue(db_url, path, slow)
    first = subprocess.Popen(kfactory("worker", "--db", db_url, "--gpus", "0", "--lease", "2", "--poll", "0.1",
                                      "--reps", "4"), env=slow, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=ROOT)
    assert first.stdout is not None
    worker_pid = None
    for line in first.stdout:
        if " claimed (attempt 1/3)" in line:
            worker_pid = int(line.split(" pid ")[1].split("]")[0])
            killed_job = claims(line)[0]
            break
    assert worker_pid is not None, first.stderr.read() if first.stderr else ""
    time.sleep(0.3)  # inside the tune, between candidates
    os.kill(worker_pid, signal.SIGKILL)  # the worker process itself: no cleanup, no release
    out, err = first.communicate(timeout=60)
    assert first.returncode == 128 + signal.SIGKILL, out + err
    with TuningDB(db_url) as db:
        job = db.jobs.job(killed_job)
        assert job.state is JobState.RUNNING and job.attempts == 1 and f":{worker_pid}:" in job.owner
        assert db.measurements(job.problem_key) == []  # nothing of the killed attempt was stored

    done = run(kfactory("worker", "--db", db_url, "--gpus", "0", "--drain", "--lease", "2", "--poll", "0.1",
                        "--reps", "4"), fleet_env(tmp_path), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"job {killed_job} claimed (attempt 2/3)" in done.stdout
    with TuningDB(db_url) as db:
        jobs = {j.id: j for j in db.jobs.jobs()}
        assert all(j.state is JobState.DONE for j in jobs.values())
        assert jobs[killed_job].attempts == 2 and f":{worker_pid}:" not in jobs[killed_job].owner
        assert all(j.attempts == 1 for i, j in jobs.items() if i != killed_job)
        assert len(db.measurements(jobs[killed_job].problem_key)) == CANDIDATES


def test_concurrent_enqueue_of_one_file_adds_each_job_once(db_url: str, env: dict[str, str], tmp_path: Path) -> None:
    path = problem_file(tmp_path / "problems.txt", 60)
    TuningDB(db_url).close()  # created once; the enqueuers race on the jobs, not on creating the schema
    procs = [subprocess.Popen(kfactory("enqueue", "--db", db_url, "--problems", str(path), "--json"), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(4)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        reports.append(json.loads(out))
    assert sum(r["added"] for r in reports) == 60
    assert all(r["added"] + r["present"] == 60 for r in reports)
    with TuningDB(db_url) as db:
        assert len(db.jobs.jobs()) == 60


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_stopping_the_workers_releases_the_job_in_hand(tmp_path: Path, how: str) -> None:
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    slow = fleet_env(tmp_path, KFACTORY_FAKE_DELAY="0.5")
    enqueue(url, problem_file(tmp_path / "problems.txt", 1), slow)
    proc = subprocess.Popen(kfactory("worker", "--db", url, "--gpus", "0", "--poll", "0.1", "--reps", "4"), env=slow,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if " claimed (attempt 1/3)" in line:
            break
    time.sleep(0.3)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends to every process of the group
    else:
        proc.send_signal(signal.SIGTERM)  # systemd's stop: the supervisor alone
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "released: pending again" in out
    with TuningDB(url) as db:
        [job] = db.jobs.jobs()
        assert (job.state, job.attempts) == (JobState.PENDING, 0)
        assert db.measurements(job.problem_key) == []


# --- one worker in this process ----------------------------------------------------------------------
@pytest.fixture
def local(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FleetGPU:
    isolate(monkeypatch, tmp_path)
    return FleetGPU(monkeypatch.setattr)


def drain(url: str, source: FleetGPU) -> list[str]:
    said: list[str] = []
    worker = Worker(WorkerSettings(url, "0", lease_s=5, poll_s=0.05, reps=4, drain=True), source, said.append)
    try:
        assert worker.run() == 0
    finally:
        worker.close()
    return said


def queue(url: str, count: int, max_attempts: int = 3) -> list[Any]:
    problems = [problem_from_key(k) for k in keys(count)]
    with TuningDB(url) as db:
        db.jobs.enqueue(plan(problems, DEVICE).specs, max_attempts)
    return problems


def keys(count: int) -> list[str]:
    from factory.problem import DType, Layout, parse_conv_problem

    return [parse_conv_problem(SPEC.format(g=8 * n), Layout.NHWGC, DType.FP32).key for n in range(1, count + 1)]


def test_a_failing_job_stops_after_its_attempts_with_the_last_error(db_url: str, local: FleetGPU,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    queue(db_url, 2, max_attempts=2)
    local.fail = "G=16,"
    said = drain(db_url, local)
    with TuningDB(db_url) as db:
        ok, bad = db.jobs.jobs()
        assert (ok.state, ok.attempts) == (JobState.DONE, 1)
        assert (bad.state, bad.attempts) == (JobState.FAILED, 2)
        assert bad.error == f"BackendError: launch: simulated failure of {bad.problem_key}"
    assert sum("failed (attempt" in line for line in said) == 2


def test_a_job_enqueued_from_other_code_fails_at_once(db_url: str, local: FleetGPU) -> None:
    [key] = keys(1)
    with TuningDB(db_url) as db:
        db.jobs.enqueue([JobSpec(key, "conv_bwd_weight", DEVICE, "0" * 64)])
    drain(db_url, local)
    with TuningDB(db_url) as db:
        [job] = db.jobs.jobs()
        assert (job.state, job.attempts) == (JobState.FAILED, 1)
        assert "source version 000000000000 was enqueued" in job.error and "enqueue again" in job.error
        assert db.measurements(key) == []


class Thief(FleetGPU):
    """Takes the job over (as a worker whose claim followed an expired lease would) when the tune starts."""

    def __init__(self, url: str, setattr: Any) -> None:
        super().__init__(setattr)
        self.url = url
        self.delay_s = 0.05

    def backend(self, problem: Any) -> Any:
        from sqlalchemy import update

        from tuning_db.models import JobRow

        with TuningDB(self.url) as db, db._handle.writer().begin() as conn:
            conn.execute(update(JobRow).values(owner="thief", lease_token="stolen"))
        return super().backend(problem)


def test_a_worker_whose_lease_was_taken_over_stores_nothing(db_url: str, monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    queue(db_url, 1)
    worker = Worker(WorkerSettings(db_url, "0", lease_s=1, poll_s=0.05, reps=4), Thief(db_url, monkeypatch.setattr),
                    lambda line: None)
    said: list[str] = []
    worker.say = said.append
    try:
        lease = worker.db.jobs.claim(DEVICE, worker.settings.owner, 1)
        assert worker.work(lease) == 0
    finally:
        worker.close()
    assert any("lease lost, nothing stored" in line for line in said), said
    with TuningDB(db_url) as db:
        [job] = db.jobs.jobs()
        assert job.state is JobState.RUNNING and job.owner == "thief"
        assert db.measurements(job.problem_key) == [] and db.stats().winners == 0


def test_jobs_shows_the_queue_as_a_table_json_and_a_watch(db_url: str, local: FleetGPU, capsys) -> None:
    queue(db_url, 3)
    with TuningDB(db_url) as db:
        lease = db.jobs.claim(DEVICE, "host:1:gpu0", 60)
    assert cli.main(["jobs", "--db", db_url]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "3 jobs: 2 pending, 1 running, 0 done, 0 failed" in out and "host:1:gpu0" in out
    assert cli.main(["jobs", "--db", db_url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["counts"] == {"pending": 2, "running": 1, "done": 0, "failed": 0}
    [running] = data["running"]
    assert running["owner"] == "host:1:gpu0" and running["id"] == lease.job.id and not running["lease_expired"]
    assert running["started_at"] is not None and running["running_s"] >= 0

    with TuningDB(db_url) as db:
        db.jobs.release(lease)
    drain(db_url, local)
    assert cli.main(["jobs", "--db", db_url, "--watch", "--interval", "0.1"]) == 0  # drained: returns at once
    out = capsys.readouterr().out
    assert "3/3" in out and "100%" in out and "3 done" in out
    assert cli.main(["jobs", "--db", db_url, "--devices", "--json"]) == 0
    [device] = json.loads(capsys.readouterr().out)
    assert device["name"] == DEVICE.name


# --- the command line's edges -----------------------------------------------------------------------
def test_gpus_all_or_numbers_and_what_each_worker_sees() -> None:
    assert parse_gpus("0,0,3") == ["0", "0", "3"]
    assert parse_gpus("all", FleetGPU()) == ["0", "1"]
    with pytest.raises(FleetError, match="--gpus must be"):
        parse_gpus("0,x")
    assert visible("1", {}) == {"CUDA_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "1"}
    # Inside an allocation that shows GPUs 2 and 3 (SLURM), ordinal 1 is physical GPU 3.
    assert visible("1", {"CUDA_VISIBLE_DEVICES": "2,3"})["CUDA_VISIBLE_DEVICES"] == "3"
    with pytest.raises(FleetError, match="sees 2 GPU"):
        visible("2", {"CUDA_VISIBLE_DEVICES": "2,3"})


@pytest.mark.parametrize(
    ("argv", "phrase"),
    [
        (["worker", "--db", "postgresql+psycopg://kfactory@127.0.0.1:1/none", "--gpus", "0"], "cannot open tuning database"),
        (["worker", "--db", "nosuchdb+x://host/db"], "unknown database scheme"),
        (["jobs", "--db", "postgresql+pg8000://u@h/db"], "pip install pg8000"),
        (["worker", "--gpus", "zero"], "--gpus must be"),
        (["worker", "--lease", "0"], "--lease must be"),
        (["enqueue", "--random", "3"], "--random needs --seed"),
        (["enqueue", "--problems", "/nonexistent/problems.txt"], "not a file"),
        (["enqueue", "--suite", "--device", "7"], "no device #7"),
    ],
)
def test_mistakes_are_one_line(argv: list[str], phrase: str, capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KFACTORY_DB", str(tmp_path / "t.db"))
    monkeypatch.setattr(fleet_gpus, "gpu_source", lambda: FleetGPU())
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own refusals exit from inside the parser
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and phrase in err, err


def test_a_missing_postgres_driver_names_the_package(capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    assert cli.main(["jobs", "--db", "postgresql+psycopg://u@127.0.0.1/db"]) == 2
    err = capsys.readouterr().err
    assert "pip install psycopg[binary]" in err and len(err.strip().splitlines()) == 1


def test_enqueue_without_a_gpu_says_how_to_name_a_device(capsys, tmp_path: Path, monkeypatch) -> None:
    from factory.backends import BackendError

    class NoGpu(FleetGPU):
        def device(self) -> Any:
            raise BackendError("no usable GPU runtime")

    monkeypatch.setattr(fleet_gpus, "gpu_source", lambda: NoGpu())
    path = problem_file(tmp_path / "p.txt", 2)
    assert cli.main(["enqueue", "--db", str(tmp_path / "t.db"), "--problems", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--device local needs a GPU" in err and "--device all" in err
    assert not (tmp_path / "t.db").exists()


def test_enqueue_reads_suites_random_draws_and_problem_lines(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(fleet_gpus, "gpu_source", lambda: FleetGPU())
    db = str(tmp_path / "t.db")
    assert cli.main(["enqueue", "--db", db, "--random", "3", "--seed", "5", "--ops", "groupnorm_bwd", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["added"] == 3
    assert cli.main(["enqueue", "--db", db, "--random", "3", "--seed", "5", "--ops", "groupnorm_bwd", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["present"] == 3
    assert cli.main(["enqueue", "--db", db, "--suite", "--ops", "groupnorm_bwd", "--cases", "unet_320", "--json"]) == 0
    suite = json.loads(capsys.readouterr().out)
    assert suite["problems"] >= 2 and suite["added"] + suite["present"] == suite["problems"]
    lines = tmp_path / "mixed.txt"
    lines.write_text("N=1,G=8,C=1,K=1,input=9,filter=3,pad=1  # a bare spec takes the command's op/layout/dtype\n"
                     "--op groupnorm_bwd --layout NGCHW --dtype fp32 --problem N=1,C=8,G=4,input=4x4\n")
    assert cli.main(["enqueue", "--db", db, "--problems", str(lines), "--layout", "NHWGC", "--dtype", "fp32",
                     "--max-attempts", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["added"] == 2
    with TuningDB(db) as opened:
        assert {j.max_attempts for j in opened.jobs.jobs()} == {3, 5}
    lines.write_text("--layout NHWGC --dtype fp32 --problem N=1,G=8\n")
    assert cli.main(["enqueue", "--db", db, "--problems", str(lines)]) == 2
    assert f"{lines}:1:" in capsys.readouterr().err


def test_enqueue_for_every_registered_device_or_named_ones(capsys, tmp_path: Path, monkeypatch) -> None:
    """A machine without a GPU fills the queue of the devices the workers registered."""
    import dataclasses

    from factory.backends import BackendError

    class NoGpu(FleetGPU):
        def device(self) -> Any:
            raise BackendError("no usable GPU runtime")

    monkeypatch.setattr(fleet_gpus, "gpu_source", lambda: NoGpu())
    db = str(tmp_path / "t.db")
    other = dataclasses.replace(DEVICE, driver_version="13010")
    with TuningDB(db) as opened:
        first, second = opened.jobs.register(DEVICE), opened.jobs.register(other)
    path = problem_file(tmp_path / "p.txt", 3)
    assert cli.main(["enqueue", "--db", db, "--problems", str(path), "--device", str(second), "--json"]) == 0
    assert [d["id"] for d in json.loads(capsys.readouterr().out)["devices"]] == [second]
    assert cli.main(["enqueue", "--db", db, "--problems", str(path), "--device", "all", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(d["id"], d["added"], d["present"]) for d in report["devices"]] == [(first, 3, 0), (second, 0, 3)]
    with TuningDB(db) as opened:
        assert [j.device for j in opened.jobs.jobs()].count(other) == 3


def test_enqueue_plans_a_model_s_training_step_without_a_gpu(capsys, tmp_path: Path, monkeypatch) -> None:
    """`--model`: the problems of the patched step, found on the meta device, become jobs; a second
    autocast adds the other dtype's problems."""
    torch = pytest.importorskip("torch")
    from factory.bench import training
    from factory.bench.training import StepConfig, planned_problems

    nn = torch.nn

    def network(config: StepConfig) -> Any:
        return nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.GroupNorm(4, 16), nn.ReLU(),
                             nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.Conv2d(16, 32, 1),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, config.classes))

    monkeypatch.setattr(training, "build_architecture", network)
    db = str(tmp_path / "t.db")
    with TuningDB(db) as opened:
        opened.jobs.register(DEVICE)
    args = ["enqueue", "--db", db, "--model", "mobilenet_v2", "--batch", "8", "--size", "64", "--device", "all",
            "--json"]
    assert cli.main(args) == 0
    expected = planned_problems(StepConfig("mobilenet_v2", batch=8, size=64))
    assert len(expected) == 6 and json.loads(capsys.readouterr().out)["added"] == len(expected)
    with TuningDB(db) as opened:
        assert {j.problem_key for j in opened.jobs.jobs()} == {p.key for p in expected}
    assert cli.main([*args[:-1], "--autocast", "bf16,none", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # The fp32 step's problems: its convolutions are new; its GroupNorm is the bf16 step's (fp32 under autocast).
    assert report["present"] == len(expected) and report["added"] == len(expected) - 1
    assert cli.main(["enqueue", "--db", db, "--model", "vgg", "--device", "all"]) == 2
    assert "--model 'vgg': one of" in capsys.readouterr().err


def test_a_channels_last_step_is_planned_channels_last() -> None:
    """The meta device's convolution returns contiguous outputs; the planned step must still meet every layer
    in the channels-last format a GPU's step runs them in (it planned all but the first as NGCHW)."""
    torch = pytest.importorskip("torch")
    from factory.bench.training import StepConfig, planned_problems

    nn = torch.nn

    def network(config: StepConfig) -> Any:
        return nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                             nn.Conv2d(32, 64, 1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1, groups=8),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, config.classes))

    for memory_format, layout in (("channels_last", "nhwgc"), ("contiguous", "ngchw")):
        planned = planned_problems(StepConfig("mobilenet_v2", batch=8, size=32, memory_format=memory_format), network)
        assert len(planned) == 5 and {p.layout.value for p in planned} == {layout}, [p.key for p in planned]
