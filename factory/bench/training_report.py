"""`kfactory bench --model ...`: run the training-step benchmark over its configurations and write
models.json (every number) and models.md (the table and where the time went)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from .model import BenchError
from .suite import parse_list
from .training import ARCHITECTURES, AUTOCASTS, MEMORY_FORMATS, ModelResult, StepConfig, run_model


def _tune_budget(text: str) -> Any:
    from ..cli import _budget  # the parser `kfactory tune --budget` uses (imported late: cli imports this module)

    return _budget(text)


def add_step_arguments(g: Any) -> None:
    """The shape of a training step (--batch, --size, --autocast, --memory-format) for --model."""
    g.add_argument("--batch", type=int, default=64, help="--model batch size (default 64)")
    g.add_argument("--size", type=int, default=224, help="--model image size (default 224)")
    g.add_argument("--autocast", default="bf16", help=f"--model: comma-separated of {', '.join(AUTOCASTS)} (default bf16)")
    g.add_argument("--memory-format", default="channels_last",
                   help=f"--model: comma-separated of {', '.join(MEMORY_FORMATS)} (default channels_last)")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training step (--model)")
    g.add_argument("--model", metavar="NAMES",
                   help=f"time a full training step instead of ops: comma-separated of {', '.join(ARCHITECTURES)} "
                        "(torchvision's architectures, random weights and data), stock vs factory.torch.patch")
    add_step_arguments(g)
    g.add_argument("--steps", type=int, default=20, help="--model: training steps whose losses are compared (default 20)")
    g.add_argument("--tune", action="store_true",
                   help="--model: first tune every problem the patched step meets (factory.torch.tune)")
    g.add_argument("--tune-budget", type=_tune_budget, default=None, metavar="K|Ns",
                   help="--model with --tune: measure only the K candidates the prior ranks first, or for N "
                        "seconds, per problem (as kfactory tune --budget)")
    g.add_argument("--no-race", action="store_true",
                   help="--model: serve ours on every problem, even where PyTorch's kernel times faster (by default "
                        "factory.torch.prepare races the two per problem and the faster serves)")
    g.add_argument("--compile", metavar="BACKEND", help="--model: run both models under torch.compile(fullgraph=True) "
                   "with this backend (inductor; a graph break is an error)")
    g.add_argument("--cuda-graph", action="store_true",
                   help="--model: capture both steps whole in a CUDA graph and time their replays (bf16 or none)")
    g.add_argument("--device", default="cuda", help="--model: torch device (default cuda; cpu runs the harness "
                   "with PyTorch's kernels everywhere)")


def configs(args: argparse.Namespace) -> list[StepConfig]:
    names = parse_list(args.model)
    if not names:
        raise BenchError(f"--model needs at least one of {', '.join(ARCHITECTURES)}")
    return [StepConfig(name, args.batch, args.size, autocast, fmt, compile=getattr(args, "compile", None),
                       cuda_graph=getattr(args, "cuda_graph", False))
            for name in names for fmt in parse_list(args.memory_format) or [""]
            for autocast in parse_list(args.autocast) or [""]]


def cmd_model_bench(args: argparse.Namespace) -> int:
    if args.random is not None or args.cases or args.suite or args.ops or args.select != "tuned":
        raise BenchError("--model times whole training steps: it takes no --random, --suite, --cases, --ops or --select")
    if args.reps < 1 or args.warmup < 0 or args.steps < 1:
        raise BenchError("--reps and --steps must be >= 1 and --warmup >= 0")
    if args.tune_budget is not None and not args.tune:
        raise BenchError("--tune-budget limits --tune: give both")
    todo = configs(args)
    import torch

    if args.compile is not None:
        known = torch._dynamo.list_backends(exclude_tags=())
        if args.compile not in known:
            raise BenchError(f"--compile {args.compile!r}: one of {', '.join(known)}")
    device = torch.device(args.device)
    if args.cuda_graph and device.type != "cuda":
        raise BenchError("--cuda-graph needs --device cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BenchError("--model needs a CUDA GPU (or --device cpu for a dry run of the harness)")
    errors = Console(stderr=True, markup=False, highlight=False)
    started = datetime.now(timezone.utc)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: list[ModelResult] = []
    interrupted = False
    try:
        for config in todo:
            results.append(run_model(config, device, steps=args.steps, reps=args.reps, warmup=args.warmup,
                                     seed=args.seed or 0, tune=args.tune, tune_budget=args.tune_budget,
                                     race=not args.no_race, say=errors.print))
            errors.print(line(results[-1]))
            meta = _meta(args, device, started, complete=len(results) == len(todo))
            _write(out, results, meta)  # after every configuration: an interrupted run keeps what it measured
    except KeyboardInterrupt:
        interrupted = True
    meta = _meta(args, device, started, complete=not interrupted)
    _write(out, results, meta)
    if args.json:
        sys.stdout.write((out / "models.json").read_text())
    else:
        console = Console() if sys.stdout.isatty() else Console(width=200)
        console.print(table(results, f"training step on {meta['device']}"))
    errors.print(f"wrote {out / 'models.json'}, {out / 'models.md'}")
    if interrupted:
        errors.print(f"interrupted after {len(results)} of {len(todo)} configurations")
        return 130
    return 0 if all(r.losses_agree for r in results) else 1


def _meta(args: argparse.Namespace, device: Any, started: datetime, complete: bool) -> dict[str, Any]:
    import torch

    return {"started_at": started.isoformat(), "finished_at": datetime.now(timezone.utc).isoformat(),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
            "torch": torch.__version__, "reps": args.reps, "warmup": args.warmup, "steps": args.steps,
            "seed": args.seed or 0, "tuned_first": args.tune, "raced": not args.no_race,
            "tune_budget": str(args.tune_budget) if args.tune_budget is not None else None, "complete": complete,
            "timing": ("torch.cuda events" if device.type == "cuda" else "the wall clock")
            + " around each whole step (forward, loss, backward, SGD), median"}


def _write(out: Path, results: Sequence[ModelResult], meta: dict[str, Any]) -> None:
    (out / "models.json").write_text(json.dumps({"meta": meta, "results": [r.record() for r in results]},
                                                indent=2, default=str) + "\n")
    (out / "models.md").write_text(markdown(results, meta))


def line(r: ModelResult) -> str:
    agree = "losses agree" if r.losses_agree else "LOSSES DIFFER"
    return (f"{r.config.label}: stock {r.stock_ms:.2f} ms, patched {r.patched_ms:.2f} ms, {r.speedup:.3f}x; "
            f"{agree} (max rel {r.loss_diff:.2e}, stock-vs-stock {r.noise:.2e}, tolerance {r.loss_rtol:g})")


def table(results: Sequence[ModelResult], title: str) -> Table:
    t = Table(title=title)
    for column in ("configuration", "stock ms", "patched ms", "speedup", "loss diff", "stock noise", "swapped",
                   "problems", "ours in step"):
        t.add_column(column, justify="left" if column == "configuration" else "right")
    for r in results:
        ours = r.breakdown_patched.by_kind.get("ours", 0.0) / r.breakdown_patched.total_us if r.breakdown_patched else None
        t.add_row(r.config.label, f"{r.stock_ms:.2f}", f"{r.patched_ms:.2f}", f"{r.speedup:.3f}×",
                  f"{r.loss_diff:.1e}" + ("" if r.losses_agree else " ✗"), f"{r.noise:.1e}", str(r.swapped),
                  str(r.problems), "-" if ours is None else f"{ours:.0%}")
    return t


def races_table(races: Sequence[Any]) -> list[str]:
    """Per problem: ours and PyTorch's op as prepare() timed them (one call each, L2 flushed), and which serves."""
    ours = sum(min(r.ours_us, r.pytorch_us) for r in races)
    theirs = sum(r.pytorch_us for r in races)
    lines = [f"Per problem, ours vs PyTorch's op (one call each, L2 flushed, median): the faster "
             f"serves. Sum over the problems: {theirs / 1e3:.2f} ms PyTorch alone, {ours / 1e3:.2f} ms served "
             f"({sum(not r.pytorch_wins for r in races)} of {len(races)} problems ours).", "",
             "| problem | ours µs | PyTorch µs | served |", "|---|---|---|---|"]
    lines += [f"| `{r.problem}` | {r.ours_us:.1f} | {r.pytorch_us:.1f} | {'PyTorch' if r.pytorch_wins else 'ours'} |"
              for r in races]
    return lines + [""]


def markdown(results: Sequence[ModelResult], meta: dict[str, Any]) -> str:
    lines = [f"# Training step, stock vs patched, on {meta['device']}", "",
             f"torch {meta['torch']}; {meta['reps']} timed steps after {meta['warmup']} warm-up; losses over "
             f"{meta['steps']} steps from seed {meta['seed']}; {meta['timing']}.", "",
             "| configuration | stock ms | patched ms | speedup | loss diff (tolerance) | stock vs stock | swapped | problems |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.config.label} | {r.stock_ms:.2f} | {r.patched_ms:.2f} | {r.speedup:.3f}× | "
                     f"{r.loss_diff:.1e} ({r.loss_rtol:g}){'' if r.losses_agree else ' ✗'} | {r.noise:.1e} | "
                     f"{r.swapped} | {r.problems} |")
    for r in results:
        lines += ["", f"## {r.config.label}", ""]
        for title, b in (("stock", r.breakdown_stock), ("patched", r.breakdown_patched)):
            if b is None:
                continue
            kinds = ", ".join(f"{kind} {us / 1e3:.2f} ms" for kind, us in b.by_kind.items())
            lines += [f"{title}: {b.source} {b.total_us / 1e3:.2f} ms per step: {kinds}", "",
                      "| kernel | kind | µs per step | calls |", "|---|---|---|---|"]
            lines += [f"| `{k.name}` | {k.kind} | {k.us:.1f} | {k.calls} |" for k in b.top]
            lines.append("")
        if r.races:
            lines += races_table(r.races)
        if r.fallbacks:
            lines += ["PyTorch's kernels instead of ours:", *(f"- {f}" for f in r.fallbacks), ""]
        if r.kept:
            lines += ["Modules patch() kept:", *(f"- {k}" for k in r.kept), ""]
    return "\n".join(lines) + "\n"
