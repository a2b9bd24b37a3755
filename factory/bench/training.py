"""`kfactory bench --model NAME`: a full training step of a real network, stock PyTorch vs patched.

A step is forward + cross-entropy loss + backward + SGD (momentum) update on fixed random data, under
the chosen autocast and memory format. The stock and the patched model are built from the same seed
(the same weights); `factory.torch.patch` swaps the patched one's modules. Per configuration:

- the median step time of each (CUDA events around each step; warm-up first, which also lets the ops
  choose and load their kernels), and the ratio;
- the losses of `steps` training steps from the same seed, stock vs patched, beside the same
  comparison of stock with a second stock run (PyTorch's own run-to-run noise, which nondeterministic
  kernels make non-zero), and whether the patched run stays within tolerance;
- where the time went: the GPU time of one step by kernel kind (ours, convolution, normalization, GEMM,
  elementwise, optimizer, other) and its ten largest kernels, from torch.profiler.

The architectures are torchvision's, built without weights (torchvision must be installed).
"""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .model import BenchError

if TYPE_CHECKING:  # factory.torch imports torch; this module must not
    from ..torch.versus import Race

# Our names for the architectures, and torchvision's builders of them.
ARCHITECTURES = {"mobilenet_v2": "mobilenet_v2", "convnext_tiny": "convnext_tiny", "resnext50": "resnext50_32x4d"}
AUTOCASTS = ("bf16", "fp16", "none")
MEMORY_FORMATS = ("channels_last", "contiguous")
# Largest relative loss difference from stock a patched run may show over `steps` steps (per autocast):
# reduced precision lets rounding differences of the same math grow through training steps.
LOSS_RTOL = {"none": 1e-3, "bf16": 5e-2, "fp16": 2e-2}
# Kernel kinds of the breakdown, first match wins (names as the CUDA profiler reports kernels).
KERNEL_KINDS = (
    ("ours", re.compile(r"^kf_")),
    ("optimizer", re.compile(r"multi_tensor|foreach|sgd|momentum", re.I)),
    ("convolution", re.compile(r"conv|cudnn|wgrad|dgrad|fprop|implicit|winograd|xmma|nhwckrsc", re.I)),
    ("normalization", re.compile(r"norm|welford|batch_norm|group_norm|layer_norm", re.I)),
    ("gemm", re.compile(r"gemm|cublas|sm90_xmma|cutlass|matmul", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|reduce|copy|fill|unrolled", re.I)),
)


@dataclass(frozen=True)
class StepConfig:
    """One configuration of a model's training step."""

    architecture: str
    batch: int = 64
    size: int = 224
    autocast: str = "bf16"  # AUTOCASTS
    memory_format: str = "channels_last"  # MEMORY_FORMATS
    classes: int = 1000
    lr: float = 0.01
    compile: str | None = None  # a torch.compile backend ("inductor", "aot_eager"): both models, fullgraph
    cuda_graph: bool = False  # both steps captured whole in a CUDA graph and replayed

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise BenchError(f"--model {self.architecture!r}: one of {', '.join(ARCHITECTURES)}")
        if self.autocast not in AUTOCASTS:
            raise BenchError(f"--autocast {self.autocast!r}: one of {', '.join(AUTOCASTS)}")
        if self.memory_format not in MEMORY_FORMATS:
            raise BenchError(f"--memory-format {self.memory_format!r}: one of {', '.join(MEMORY_FORMATS)}")
        if self.cuda_graph and self.autocast == "fp16":
            raise BenchError("--cuda-graph with --autocast fp16: GradScaler's step reads its overflow flag on the "
                             "host, which a captured step cannot; use bf16 or none")
        if self.batch < 1 or self.size < 32 or self.classes < 2:
            raise BenchError(f"--batch {self.batch} and --size {self.size} must be >= 1 and >= 32")

    @property
    def label(self) -> str:
        compiled = f" compiled ({self.compile})" if self.compile else ""
        graphed = " graphed" if self.cuda_graph else ""
        return f"{self.architecture} b{self.batch} {self.size}² {self.autocast} {self.memory_format}{compiled}{graphed}"


def build_architecture(config: StepConfig) -> Any:
    """torchvision's network, randomly initialised from torch's current seed."""
    try:
        import torchvision
    except ImportError:
        raise BenchError("--model needs torchvision (pip install torchvision matching your torch)") from None
    return getattr(torchvision.models, ARCHITECTURES[config.architecture])(weights=None, num_classes=config.classes)


def autocast_dtype(name: str) -> Any:
    """The torch dtype of an --autocast value (None for `none`)."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name)


def planned_problems(config: StepConfig, build: Callable[[StepConfig], Any] | None = None) -> list[Any]:
    """The distinct problems the patched training step of `config` meets on a GPU, found on the meta
    device: no GPU, no weights, no arithmetic, so any machine can plan (or queue) a model's tuning."""
    try:
        import torch
    except ImportError:
        raise BenchError("--model needs PyTorch (pip install 'kernel-factory[bench]')") from None

    from ..torch import patch, step_problems
    from ..torch.modules import planned_autocast

    with torch.device("meta"):
        model = (build or build_architecture)(config)
    patch(model)
    fmt = torch.channels_last if config.memory_format == "channels_last" else torch.contiguous_format
    model = model.to(memory_format=fmt)
    images = torch.empty(config.batch, 3, config.size, config.size, device="meta").to(memory_format=fmt)
    labels = torch.zeros(config.batch, dtype=torch.long, device="meta")
    with planned_autocast(autocast_dtype(config.autocast)):
        return step_problems(model, images, lambda out: torch.nn.functional.cross_entropy(out.float(), labels))


class TrainingStep:
    """A model, its SGD optimizer and one fixed random batch: each call is one training step and
    returns its loss (a tensor, not synchronised)."""

    def __init__(self, model: Any, config: StepConfig, device: Any, seed: int) -> None:
        import torch

        fmt = torch.channels_last if config.memory_format == "channels_last" else torch.contiguous_format
        generator = torch.Generator().manual_seed(seed)
        self.model = model.to(device=device, memory_format=fmt).train()
        # fullgraph: a graph break in a patched model is an error here, not a silent slowdown.
        self.forward = (torch.compile(self.model, fullgraph=True, backend=config.compile) if config.compile
                        else self.model)
        self.images = torch.randn(config.batch, 3, config.size, config.size, generator=generator).to(
            device=device, memory_format=fmt)
        self.labels = torch.randint(0, config.classes, (config.batch,), generator=generator).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.lr, momentum=0.9)
        self.autocast = autocast_dtype(config.autocast)
        self.device = torch.device(device)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.autocast is torch.float16)

    def __call__(self) -> Any:
        self.optimizer.zero_grad(set_to_none=True)
        return self._forward_backward_update()

    def _forward_backward_update(self) -> Any:
        import torch

        with torch.autocast(self.device.type, dtype=self.autocast or torch.float32, enabled=self.autocast is not None):
            loss = torch.nn.functional.cross_entropy(self.forward(self.images), self.labels)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    def captured(self, warmup: int = 3) -> tuple[Callable[[], Any], list[Any]]:
        """The step captured whole in a CUDA graph (PyTorch's whole-network recipe), after `warmup`
        eager steps on a side stream, whose losses come back too: each call of the returned function
        replays one step (gradients written, not accumulated) and returns its loss."""
        import torch

        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            warm = [self() for _ in range(warmup)]
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            loss = self._forward_backward_update()

        return _Replay(graph, loss, self), warm


@dataclass(frozen=True)
class _Replay:
    """One replay of a captured step per call, returning its loss. It holds the step too: the graph
    reads and writes the model's parameters, optimizer state and batch in place, which must outlive it."""

    graph: Any
    loss: Any
    step: TrainingStep

    def __call__(self) -> Any:
        self.graph.replay()
        return self.loss.clone()  # the captured loss is overwritten by the next replay


@dataclass(frozen=True)
class KernelTime:
    name: str
    kind: str
    us: float  # GPU time per step
    calls: int


@dataclass(frozen=True)
class Breakdown:
    """Where one step's GPU time went."""

    total_us: float
    by_kind: dict[str, float]
    top: tuple[KernelTime, ...]
    source: str = "GPU kernels"  # what was timed: "GPU kernels", or "CPU leaf ops" without a GPU


@dataclass(frozen=True)
class ModelResult:
    config: StepConfig
    stock_ms: float
    patched_ms: float
    stock_spread: float  # (p90 - p10) / median of the per-step times
    patched_spread: float
    losses_stock: tuple[float, ...]
    losses_patched: tuple[float, ...]
    losses_stock_again: tuple[float, ...]  # a second stock run: PyTorch's run-to-run noise
    loss_rtol: float
    swapped: int
    kept: tuple[str, ...]  # modules patch() left alone, with why
    problems: int  # distinct problems of ours the patched step meets
    breakdown_stock: Breakdown | None = None
    breakdown_patched: Breakdown | None = None
    fallbacks: tuple[str, ...] = ()  # the fallback notes the patched steps gave
    races: tuple[Race, ...] = ()  # per problem, ours vs PyTorch's op as prepare() timed them

    @property
    def speedup(self) -> float:
        return self.stock_ms / self.patched_ms

    @property
    def loss_diff(self) -> float:
        return relative_difference(self.losses_patched, self.losses_stock)

    @property
    def noise(self) -> float:
        return relative_difference(self.losses_stock_again, self.losses_stock)

    @property
    def losses_agree(self) -> bool:
        return self.loss_diff <= self.loss_rtol

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        out |= {"speedup": self.speedup, "loss_diff": self.loss_diff, "noise": self.noise,
                "losses_agree": self.losses_agree}
        return out


def relative_difference(a: Sequence[float], b: Sequence[float]) -> float:
    """Largest |a - b| / max(|b|, 1e-6) over the steps (inf when a loss is not finite)."""
    if len(a) != len(b):
        raise ValueError("loss lists differ in length")
    worst = 0.0
    for x, y in zip(a, b):
        if not (math.isfinite(x) and math.isfinite(y)):
            return math.inf
        worst = max(worst, abs(x - y) / max(abs(y), 1e-6))
    return worst


def losses(step: TrainingStep, steps: int, seed: int, graphed: bool = False) -> tuple[tuple[float, ...], Callable[[], Any]]:
    """The losses of `steps` training steps, from the random state `seed` gives (dropout and
    stochastic depth draw from it: two runs compare only when their draws are the same), and the
    step to time afterwards: `graphed`, the first steps run eagerly, the rest are replays of the
    step captured in a CUDA graph, and so is the step returned."""
    import torch

    torch.manual_seed(seed)
    if not graphed:
        return tuple(float(v) for v in torch.stack([step() for _ in range(steps)]).float().cpu()), step
    replay, warm = step.captured(min(3, steps))
    taken = warm + [replay() for _ in range(steps - len(warm))]
    return tuple(float(v) for v in torch.stack(taken).float().cpu()), replay


def time_steps(step: Callable[[], Any], reps: int, warmup: int, device: Any) -> tuple[float, float]:
    """(median ms, relative spread) of a step: CUDA events around each on a GPU, the wall clock elsewhere."""
    import torch

    for _ in range(warmup):
        step()
    cuda = torch.device(device).type == "cuda"
    times: list[float] = []
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            step()
            times.append((time.perf_counter() - began) * 1e3)
    median = statistics.median(times)
    ordered = sorted(times)
    spread = (ordered[int(0.9 * (len(ordered) - 1))] - ordered[int(0.1 * (len(ordered) - 1))]) / median
    return median, spread


def kernel_kind(name: str) -> str:
    for kind, pattern in KERNEL_KINDS:
        if pattern.search(name):
            return kind
    return "other"


def breakdown(step: Callable[[], Any], device: Any, steps: int = 3) -> Breakdown:
    """The GPU kernels of `steps` profiled steps (CPU ops on a machine without one), per step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    step()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize(device)
    kernels: dict[str, list[float]] = {}
    for event in prof.events():
        is_kernel = event.device_type == torch.autograd.DeviceType.CUDA if cuda else not event.cpu_children
        if not is_kernel:
            continue
        us = event.device_time if cuda else event.cpu_time
        kernels.setdefault(event.name, []).append(us)
    rows = sorted((KernelTime(name[:120], kernel_kind(name), sum(t) / steps, len(t) // steps)
                   for name, t in kernels.items()), key=lambda k: -k.us)
    by_kind: dict[str, float] = {}
    for row in rows:
        by_kind[row.kind] = by_kind.get(row.kind, 0.0) + row.us
    return Breakdown(sum(r.us for r in rows), dict(sorted(by_kind.items(), key=lambda kv: -kv[1])), tuple(rows[:10]),
                     "GPU kernels" if cuda else "CPU leaf ops")


def run_model(config: StepConfig, device: Any, *, steps: int = 20, reps: int = 20, warmup: int = 5, seed: int = 0,
              tune: bool = False, tune_budget: Any = None, race: bool = True, profile: bool = True,
              build: Callable[[StepConfig], Any] | None = None,
              say: Callable[[str], None] = lambda line: None) -> ModelResult:
    """Time and compare one configuration; see the module's docstring. `tune` first tunes every problem
    the patched step meets (factory.torch.tune, `tune_budget` candidates or seconds each) into the default DB;
    `race`: prepare() serves PyTorch's kernel where it times faster than ours (else ours everywhere)."""
    import warnings

    import torch

    from ..torch import KernelFactoryFallback, clear_kernel_choices, patch, prepare, step_problems
    from ..torch import tune as tune_model

    clear_kernel_choices()  # each configuration chooses its kernels and says its fallbacks afresh

    def fresh(patched: bool) -> tuple[TrainingStep, Any]:
        torch.manual_seed(seed)
        model = (build or build_architecture)(config)
        report = patch(model) if patched else None
        return TrainingStep(model, config, device, seed), report

    graphed = config.cuda_graph
    say(f"{config.label}: losses of {steps} steps (stock, stock again, patched)")
    losses_stock, stock_call = losses(fresh(False)[0], steps, seed, graphed)
    losses_again = losses(fresh(False)[0], steps, seed, graphed)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", KernelFactoryFallback)
        patched, report = fresh(True)
        with torch.autocast(torch.device(device).type, dtype=patched.autocast or torch.float32,
                            enabled=patched.autocast is not None):
            met = step_problems(patched.model, patched.images,
                                lambda out: torch.nn.functional.cross_entropy(out, patched.labels))
            if tune:
                say(f"{config.label}: tuning the {len(met)} problems the patched step meets")
                tune_model(patched.model, patched.images, budget=tune_budget,
                           loss_fn=lambda out: torch.nn.functional.cross_entropy(out, patched.labels))
            races: tuple[Race, ...] = ()
            if torch.device(device).type == "cuda":  # compile the served kernels in parallel, not mid-step
                races = prepare(patched.model, patched.images, progress=False, versus_pytorch=race,
                                loss_fn=lambda out: torch.nn.functional.cross_entropy(out, patched.labels)).races
        losses_patched, patched_call = losses(patched, steps, seed, graphed)
        say(f"{config.label}: timing {reps} steps each")
        stock = fresh(False)[0]
        if graphed:  # the stock step timed is the one whose losses were taken: it is captured already
            stock_ms, stock_spread = time_steps(stock_call, reps, warmup, device)
        else:
            stock_ms, stock_spread = time_steps(stock, reps, warmup, device)
        patched_ms, patched_spread = time_steps(patched_call, reps, warmup, device)
        profiles = (breakdown(stock, device), breakdown(patched, device)) if profile else (None, None)
    fallbacks = tuple(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, KernelFactoryFallback)))
    return ModelResult(
        config, stock_ms, patched_ms, stock_spread, patched_spread, losses_stock, losses_patched, losses_again,
        LOSS_RTOL[config.autocast], len(report.swapped), tuple(k.line() for k in report.kept), len(met),
        profiles[0], profiles[1], fallbacks, races)
