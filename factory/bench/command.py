"""`kfactory bench`: the suite, or `--random N` drawn problems, against PyTorch on this GPU; `--compare A.json B.json`.

Mistakes (bad suite, unknown op/case/dtype, no GPU) raise BenchError, which the CLI prints as one
line with exit status 2. A run exits 1 when a row is wrong or failed, after writing every file.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from ..progress_bars import progress_bar
from ..tuner import keep_measuring_worker
from .model import BenchError, BenchItem, Row, Serve, Status
from .random_cases import draw, parse_random_dtypes, random_meta
from .report import PROBLEM_WIDTH, problem_text
from .suite import expand, load_suite, parse_dtypes, parse_list, parse_ops
from .timing import MIN_REPS, TimingSettings

DEFAULT_OUT = "build/bench"


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `bench` on the CLI's subparsers (sets func=cmd_bench)."""
    p = subparsers.add_parser(
        "bench",
        help="time our kernels against PyTorch on the benchmark suite (GPU), or compare two runs",
        description="For each suite case (or --random drawn problem) x dtype x layout: our tuned kernel (tuned first "
        "when untuned) and PyTorch's op on the same inputs, checked against each other, then timed the same way.",
    )
    p.add_argument("--suite", help="suite TOML (default: the shipped bench/public_suite.toml)")
    p.add_argument("--ops", help="comma-separated op ids to run, e.g. conv_bwd_weight,groupnorm_bwd")
    p.add_argument("--dtypes", help="comma-separated subset of fp16,bf16,fp32 (fp32 only where a case sets fp32 = true; "
                   "with --random also bf16_fp32w)")
    p.add_argument("--cases", help="comma-separated case names (a quick subset)")
    p.add_argument("--random", type=int, metavar="N",
                   help="instead of the suite: N problems per op drawn from network-like distributions "
                   "(needs --seed; takes --ops and --dtypes; not --suite or --cases)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"directory for results.csv/json and the PNGs (default {DEFAULT_OUT})")
    p.add_argument("--db", help="tuning DB: SQLAlchemy URL or SQLite file (default: $KFACTORY_DB or the user data dir)")
    p.add_argument("--reps", type=int, default=50, help=f"timed reps per contender (default 50; < {MIN_REPS} is a smoke run)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls before timing (default 10)")
    p.add_argument("--seed", type=int,
                   help="seed of the random inputs and, with --random, of the drawn problems "
                   "(the same seed, N, --ops and --dtypes draw the same problems; default: fresh inputs)")
    p.add_argument("--select", default=Serve.TUNED.value, choices=[m.value for m in Serve],
                   help="which of our kernels a row runs: tuned (tune the problem first when untuned; default), "
                        "nearest (what an untuned problem is served: the nearest tuned problem's winner, else the "
                        "heuristic's; never tunes), heuristic (the op's prior alone)")
    p.add_argument("--json", action="store_true", help="print results.json to stdout instead of the table")
    p.add_argument("--replot", metavar="RESULTS.json", help="redraw speedup.png and roofline.png in --out from a stored run; runs nothing")
    p.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"), help="per-case ratios between two runs; runs nothing")
    from .training_report import add_model_arguments

    add_model_arguments(p)
    p.set_defaults(func=cmd_bench)
    return p


def cmd_bench(args: argparse.Namespace) -> int:
    console = _console()
    if args.compare:
        return _compare(console, *args.compare)
    if args.replot:
        return _replot(args.replot, args.out)
    if args.model is not None:
        from .training_report import cmd_model_bench

        return cmd_model_bench(args)
    random_run: dict[str, Any] | None = None
    suite_path: str | None = None
    if args.random is not None:
        items, random_run = _random_items(args)
    else:
        suite = load_suite(args.suite)
        items = expand(suite, parse_ops(args.ops), parse_dtypes(args.dtypes), parse_list(args.cases) or None)
        suite_path = str(suite.path)
    if args.reps < 1 or args.warmup < 0:
        raise BenchError("--reps must be >= 1 and --warmup >= 0")
    settings = TimingSettings(reps=args.reps, warmup=args.warmup)
    progress = progress_bar()
    stage = _stage_hook(progress)

    from .ceilings import measure_ceilings
    from .gpu import open_machine
    from .runner import bench_item

    machine = open_machine(settings, args.db, stage, args.seed, Serve(args.select))
    errors = Console(stderr=True, markup=False, highlight=False)
    if settings.reps < MIN_REPS:
        errors.print(f"note: {settings.reps} reps per contender: a smoke run, not a measurement (>= {MIN_REPS} for that)")
    started = datetime.now(timezone.utc)
    rows: list[Row] = []
    with progress:
        progress.console.print(f"measuring ceilings on {machine.description['device']} ...")
        ceilings = measure_ceilings(machine.timer, machine.env.device)
        progress.console.print(f"ceilings: copy {ceilings.copy_gbps:.0f} GB/s, bf16 matmul {ceilings.matmul_tflops:.0f} TFLOP/s")
        task = progress.add_task("cases", total=len(items))
        interrupted = False
        try:
            with keep_measuring_worker():  # the rows' tunes share one measuring process
                for item in items:
                    progress.update(task, description=item.label)
                    row = bench_item(item, machine.env)
                    rows.append(row)
                    label = f"{item.label} [{problem_text(row.problem)}]" if random_run else item.label
                    progress.console.print(_row_line(label, row))
                    progress.advance(task)
        except KeyboardInterrupt:
            interrupted = True  # keep what was measured: write it below, then exit 130
    meta = {
        "started_at": started.isoformat(),
        "finished_at": datetime.now(timezone.utc).isoformat(),
        "suite": suite_path,
        "random": random_run,
        "filters": {"ops": args.ops, "dtypes": args.dtypes, "cases": args.cases},
        "reps": settings.reps,
        "warmup": settings.warmup,
        "seed": machine.env.seed,
        "timing": "torch.cuda events on the current stream, 256 MiB L2 flush before every rep, median",
        "machine": machine.description,
        "complete": not interrupted,
    }
    from .report import print_table, write_all

    out = Path(args.out)
    written = write_all(out, rows, ceilings, meta)
    if args.json:
        sys.stdout.write((out / "results.json").read_text())
    else:
        title = f"kfactory bench on {machine.description['device']}"
        if random_run:
            title += f": {random_run['n_per_op']} random problems per op, seed {random_run['seed']}"
            console = _console(extra=PROBLEM_WIDTH)
        print_table(console, rows, ceilings, title=title, problems=random_run is not None)
    if not any(p.suffix == ".png" for p in written):
        errors.print("note: PNGs skipped: matplotlib is not installed (pip install 'kernel-factory[bench]')")
    errors.print("wrote " + ", ".join(str(p) for p in written))
    if interrupted:
        errors.print(f"interrupted after {len(rows)} of {len(items)} rows")
        return 130
    bad = [r for r in rows if r.status in (Status.WRONG, Status.FAILED)]
    if bad:
        errors.print(f"{len(bad)} rows wrong or failed: " + ", ".join(f"{r.case} {r.dtype.value} {r.layout.name}" for r in bad))
        return 1
    return 0


def _console(extra: int = 0) -> Console:
    # A wide table stays one line per row when piped to a file or a log (rich assumes 80 columns there).
    return Console() if sys.stdout.isatty() else Console(width=200 + extra)


def _random_items(args: argparse.Namespace) -> tuple[list[BenchItem], dict[str, Any]]:
    """The drawn items of `--random N` and what results.json records to draw them again."""
    if args.suite or args.cases:
        raise BenchError("--random draws its own problems: it takes no --suite or --cases")
    if args.seed is None:
        raise BenchError("--random needs --seed S (the same seed, N and --ops draw the same problems)")
    ops = parse_ops(args.ops)
    dtypes = parse_random_dtypes(parse_list(args.dtypes))
    items = draw(args.random, args.seed, ops, dtypes)
    return items, random_meta(args.random, args.seed, ops, dtypes, items)


def _compare(console: Console, a: str, b: str) -> int:
    from .compare import compare_runs, load_results, print_comparison

    print_comparison(console, compare_runs(load_results(a), load_results(b)), a, b)
    return 0


def _replot(results: str, out: str) -> int:
    from .compare import load_results
    from .report import replot

    load_results(results)  # a missing or foreign file is a one-line BenchError
    for path in replot(Path(results), Path(out)):
        print(f"wrote {path}")
    return 0


def _stage_hook(progress: Any) -> Callable[[str, int], Callable[[], None]]:
    """Tuning stages as transient bars: each disappears when its last item is done."""
    def stage(name: str, total: int) -> Callable[[], None]:
        task = progress.add_task(f"  {name}", total=total)
        done = [0]

        def advance() -> None:
            progress.advance(task)
            done[0] += 1
            if done[0] >= total:
                progress.remove_task(task)

        return advance

    return stage


def _row_line(label: str, row: Row) -> str:
    if row.status is Status.OK and row.speedup is not None:
        return f"{label}: ours {row.ours.median_us:.1f} µs, PyTorch {row.torch.median_us:.1f} µs, {row.speedup:.2f}×"
    if row.ours is not None:
        return f"{label}: ours {row.ours.median_us:.1f} µs ({row.status.label}{': ' + row.note if row.note else ''})"
    return f"{label}: {row.status.label}{': ' + row.note if row.note else ''}"


def main(argv: list[str] | None = None) -> int:
    """`python -m factory.bench` without the full CLI: same arguments, same one-line errors."""
    parser = argparse.ArgumentParser(prog="kfactory")
    add_bench_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", *(sys.argv[1:] if argv is None else argv)])
    from tuning_db import TuningDBError

    from ..problem import KernelFactoryError

    try:
        return args.func(args)
    except (KernelFactoryError, TuningDBError) as exc:
        sys.stderr.write(f"kfactory: error: {' '.join(str(exc).split())}\n")
        return 2

