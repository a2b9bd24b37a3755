"""The real machine behind a run: the CUDA device through PyTorch, our backend, the tuning DB.

Everything here needs a GPU; it is kept out of the row logic (runner.py) so that logic runs on CPU
in tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from .model import BenchError, Serve
from .runner import Env, OurKernel
from .timing import CudaTimer, TimingSettings

# (stage name, total) -> per-item advance callback; the CLI wires these to a progress bar.
StageHook = Callable[[str, int], Callable[[], None]]


@dataclass(frozen=True)
class Machine:
    env: Env
    timer: CudaTimer
    description: dict[str, Any]  # device, driver, library versions: goes into results.json


def open_machine(settings: TimingSettings, db_url: str | None, stage: StageHook, seed: int | None = None,
                 serve: Serve = Serve.TUNED) -> Machine:
    """Check for a GPU (one BenchError line if there is none) and wire PyTorch, our backend and the DB;
    `serve` says which kernel a row runs."""
    try:
        import torch
    except ImportError:
        raise BenchError("kfactory bench needs PyTorch (pip install 'kernel-factory[bench]')") from None
    if not torch.cuda.is_available():
        raise BenchError("kfactory bench needs a CUDA GPU visible to PyTorch; none found on this machine")
    from tuning_db import TuningDB

    from ..backends import BackendError, get_backend

    device = torch.device("cuda", torch.cuda.current_device())
    # PyTorch's side as the benchmark defines it: cuDNN picks its fastest algorithm per shape; fp32
    # stays fp32 (no TF32), as ours does, so results are comparable and checkable.
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        backend = get_backend()
    except BackendError as exc:
        raise BenchError(f"kfactory bench: {exc}") from None
    db = TuningDB(db_url)
    timer = CudaTimer(settings, device)

    def kernel_for(problem: Any) -> OurKernel:
        if serve is Serve.TUNED:
            return tuned_kernel(problem, backend, db, stage)
        return served_kernel(problem, backend, db, serve)

    info = backend.device_info()
    props = torch.cuda.get_device_properties(device)
    description = {
        "device": props.name,
        "sm_count": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "arch": info.arch,
        "driver": info.driver_version,
        "compiler": info.compiler_version,
        "backend": info.backend.value,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "cudnn_benchmark": True,
        "tf32": False,
        "db": str(db.location),
        "select": serve.value,
    }
    seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
    env = Env(device=device, timer=timer, kernel_for=kernel_for, synchronize=lambda: torch.cuda.synchronize(device), seed=seed)
    return Machine(env, timer, description)


@dataclass(frozen=True)
class ServedKernel:
    """A kernel chosen without tuning, and where it came from (the row's note says)."""

    kernel: Any  # factory.api.Kernel
    served: str

    @property
    def name(self) -> str:
        return self.kernel.name

    def run(self, stream: int | None = None, **tensors: Any) -> None:
        self.kernel.run(stream=stream, **tensors)


def served_kernel(problem: Any, backend: Any, db: Any, serve: Serve) -> OurKernel:
    """What an untuned problem is served: `nearest` as select(mode=AUTO) does (the problem's own
    winner if it has one, else the nearest tuned problem's, else the heuristic's), `heuristic` the
    op's prior alone. Nothing is tuned."""
    from ..api import Origin, Served, kernel_for, untuned_choice
    from ..device import target_for
    from ..selector import heuristic_pick

    if serve is Serve.HEURISTIC:
        choice = Served(heuristic_pick(problem, target=target_for(backend.device_info())), Origin.HEURISTIC)
    else:
        choice = untuned_choice(problem, db, backend)
    return ServedKernel(kernel_for(choice.instance, problem, backend), choice.describe())


def tuned_kernel(problem: Any, backend: Any, db: Any, stage: StageHook) -> OurKernel:
    """The DB's winner on this device once every candidate is measured there.

    The tune resumes: candidates measured before (this device, their current code) are skipped, so a
    problem tuned in full costs a DB read, while one whose tune was cut off (a killed run leaves the
    winner of the candidates measured so far) or that gained candidates is finished first.
    """
    from ..api import NotTuned, SelectMode, select, tune_problem
    from ..tuner import Progress

    advance: dict[str, Callable[[], None]] = {}

    def on_stage(name: str, total: int) -> None:
        advance[name] = stage(f"tune {name}", total)

    hooks = Progress(
        on_stage=on_stage,
        on_compiled=lambda name, ok: advance["compile"](),
        on_measured=lambda m: advance["benchmark"](),
    )
    outcome = tune_problem(problem, backend, db, progress=hooks)
    if outcome.winner is None:
        raise NotTuned(f"tuning verified no instance for {problem.key}")
    return select(problem, mode=SelectMode.DB, backend=backend, db=db)

