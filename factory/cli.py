"""kfactory: generate | list | tune | query | db | bench | enqueue | worker | jobs.

One rule at the top: anything the user can cause (a bad argument, environment variable, path, file or
DB) prints one line naming the culprit and exits 2; Ctrl-C, or SIGTERM (`timeout`, a batch scheduler's
stop), exits 130 and leaves every file whole; only our own bugs show a traceback.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import signal
import sys
import threading
import warnings
from datetime import timezone
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from rich.console import Console
from rich.table import Table

from . import codegen, outdir
from .backends import BACKEND_ENV, BackendError, BackendKind
from .bench import add_bench_parser
from .catalog import Instance, per_problem_families, select_instances, unspecialized_families
from .device import DEFAULT_TARGET, TARGETS, target_for, target_named
from .ops import SOLVERS, solver_for
from .progress_bars import progress_bar, tune_hooks
from .problem import DType, KernelFactoryError, Layout, Op
from .selector import check_supported, explain, heuristic_pick, lookup

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
MIN_REPS, MAX_REPS = 2, 100_000  # the median and spread need two samples; more is hours per candidate
# On a terminal, its width; piped to a file or a log, 200 columns, so that a table's row stays one line where
# it fits (rich assumes 80 there and folds every long name).
console = Console(stderr=False, width=None if sys.stdout.isatty() else 200)
errors = Console(stderr=True, soft_wrap=True)  # soft wrap: an error stays one line at any width


class UsageError(Exception):
    """A command-line mistake: one line to stderr, exit 2."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage block) and exit 2; subcommands inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(text: str) -> str:
    """`text` with line breaks and other control characters escaped, so a message stays one line."""
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


# --- argument helpers ---------------------------------------------------------------------------
def _enum_arg(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except KernelFactoryError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _reps(text: str) -> int:
    try:
        reps = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--reps must be a whole number (got {text!r})") from None
    if not MIN_REPS <= reps <= MAX_REPS:
        raise argparse.ArgumentTypeError(f"--reps must be between {MIN_REPS} and {MAX_REPS} (got {reps})")
    return reps


def _budget(text: str) -> "Budget":
    from .api import Budget

    try:
        return Budget.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _out_dir(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("--out must name a directory (got an empty string)")
    return text


def _implemented_op(text: str) -> Op:
    op = Op.parse(text)
    solver_for(op)  # raises UnsupportedProblem naming the implemented ops
    return op


def _add_config(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--op", type=_enum_arg(_implemented_op), default=Op.CONV_BWD_WEIGHT, help="op id (default conv_bwd_weight)")
    p.add_argument("--layout", type=_enum_arg(Layout.parse), required=required, help="e.g. NHWGC, NGCHW, NGCHW_GKYXC, GNHWC")
    p.add_argument("--dtype", type=_enum_arg(DType.parse), required=required, help="fp16, bf16, bf16_fp32w, fp32, int8, int8_sat, fp16_comp_bf8_fp8")


def _add_target(p: argparse.ArgumentParser, text: str = "the GPU the instances are for (default sm_90a, the H100)") -> None:
    choices = ", ".join(TARGETS)
    p.add_argument("--target", type=_enum_arg(target_named), default=DEFAULT_TARGET, help=f"{text}; one of {choices}")


def _add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="tuning DB: SQLAlchemy URL or SQLite file (default: $KFACTORY_DB or the user data dir)")


def _open_db(args: argparse.Namespace, read_only: bool = False):
    """The tuning DB of --db / $KFACTORY_DB; `read_only` commands open an existing SQLite file read-only,
    so they work on a file they may not write and can never change it."""
    from tuning_db import TuningDB
    from tuning_db.paths import as_db_url, default_db_url, read_only_url

    url = as_db_url(args.db) if args.db is not None else default_db_url()
    return TuningDB(read_only_url(url) if read_only else url)


def _backend():
    """The GPU backend; a bad $KFACTORY_BACKEND is a usage error naming it."""
    from .backends import get_backend

    value = os.environ.get(BACKEND_ENV, "")
    if value and value not in {k.value for k in BackendKind}:
        raise UsageError(f"{BACKEND_ENV}={value!r} is not one of {', '.join(k.value for k in BackendKind)}")
    return get_backend()


def _check_family(op: Op, family: str | None) -> None:
    families = sorted(solver_for(op).families)
    if family is not None and family not in families:
        raise UsageError(f"--family {family!r} is not a family of {op.value}; families: {', '.join(families)}")


def _problem(args: argparse.Namespace):
    if args.layout is None or args.dtype is None:
        raise UsageError("--problem needs --layout and --dtype")
    problem = solver_for(args.op).parse_problem(args.problem, args.layout, args.dtype)
    check_supported(problem)
    return problem


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


# --- generate -----------------------------------------------------------------------------------
def cmd_generate(args: argparse.Namespace) -> int:
    _check_family(args.op, args.family)
    problem = None
    if args.problem is not None:
        # The instances that compute the problem, template points specialized for it included.
        problem = _problem(args)
        if args.ndim is not None and args.ndim != problem.ndim:
            raise UsageError(f"--ndim {args.ndim} contradicts the {problem.ndim}-D --problem")
        matching = [i for i in lookup(problem, target=args.target) if args.family is None or i.family == args.family]
    else:
        matching = select_instances(args.op, args.layout, args.dtype, args.ndim, args.family)
    instances = [i for i in matching if i.why_not_on(args.target) is None]
    if not instances:
        extra = f" that run on {args.target.arch}" if matching else ""
        # An op whose families only have template points (dwsep_conv_fwd) lists nothing without a problem.
        per_problem = [] if problem is not None else [
            f for f in per_problem_families(args.op, args.layout, args.dtype, args.ndim) if args.family in (None, f)]
        if per_problem:
            extra += f"; {', '.join(per_problem)} make instances per problem: pass --problem (with --layout and --dtype)"
        raise UsageError(f"no instances match those filters{extra}")
    out = Path(args.out)
    selection = outdir.Selection(args.op.value, args.layout.value if args.layout else None,
                                 args.dtype.value if args.dtype else None, args.ndim, args.family, args.target.arch,
                                 problem.key if problem is not None else None)
    try:
        previous = outdir.prepare(out, selection, (inst.name for inst in instances))
    except outdir.OutputDirError as exc:
        raise UsageError(str(exc)) from None
    try:
        manifest = []
        with progress_bar() as progress:
            task = progress.add_task(f"rendering {args.op.value}", total=len(instances))
            for inst in instances:
                source = codegen.render(inst)
                path = out / f"{inst.name}{outdir.SOURCE_SUFFIX}"
                outdir.write_atomic(path, source)
                manifest.append(_instance_record(inst) | {"file": path.name, "source_hash": codegen.source_hash(source)})
                progress.advance(task)
        outdir.publish(out, selection, manifest, previous)
    except BaseException:
        outdir.remove_temporaries(out)  # a Ctrl-C can land before write_atomic's cleanup is armed
        raise
    counts = collections.Counter((r["layout"], r["dtype"], r["ndim"]) for r in manifest)
    skipped = len(matching) - len(instances)
    note = f"; {skipped} left out: they cannot run on {args.target.arch}" if skipped else ""
    table = Table(title=f"{len(manifest)} instances written to {out} (target {args.target.arch}{note})")
    for col in ("layout", "dtype", "ndim", "instances"):
        table.add_column(col)
    for (layout, dtype, ndim), n in sorted(counts.items()):
        table.add_row(layout, dtype, f"{ndim}D", str(n))
    console.print(table)
    return 0


def _instance_record(inst: Instance) -> dict[str, Any]:
    return {
        "name": inst.name, "op": inst.op.value, "family": inst.family, "layout": inst.layout.value,
        "dtype": inst.dtype.value, "ndim": inst.ndim, "params": inst.params_dict(),
    }


# --- list ---------------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    _check_family(args.op, args.family)
    if args.problem is not None:
        problem = _problem(args)
        view = solver_for(problem.op).lower_rank_view(problem)
        mine = lambda family: args.family in (None, family)  # noqa: E731  (--family narrows both lists)
        applicable = [i for i in lookup(problem, target=args.target) if mine(i.family)]
        rejected = [r for r in explain(problem, target=args.target) if mine(r.instance.family)] if args.why else []
        unmade = {f: why for f, why in unspecialized_families(problem).items() if mine(f)} if args.why else {}
        if args.why and view is not None:  # the families that see the problem as its view
            seen_as_view = lambda f: solver_for(problem.op).problem_seen_by(f, problem) == view  # noqa: E731
            unmade.update({f: why for f, why in unspecialized_families(view).items() if mine(f) and seen_as_view(f)})
        if args.json:
            _emit_json({
                "problem": problem.key,
                "lower_rank_view": None if view is None else view.key,
                "applicable": [_instance_record(i) for i in applicable],
                "rejected": [{"name": r.instance.name, "reason": r.reason} for r in rejected],
                "families_without_instances": unmade,
            })
            return 0
        _print_instances(applicable, f"{len(applicable)} instances compute {problem.key}")
        if view is not None:
            console.print(f"families without {problem.ndim}-D kernels compute it as {view.key} (the same tensors)",
                          markup=False, highlight=False, soft_wrap=True)
        if args.why:
            same_cell = [r for r in rejected if r.instance.cell_matches(problem)]
            other = len(rejected) - len(same_cell)
            table = Table(title=f"not applicable in this cell ({len(same_cell)}); {other} more are for other layouts/dtypes/ranks")
            table.add_column("instance", overflow="fold")
            table.add_column("why not", overflow="fold")
            for r in same_cell:
                table.add_row(r.instance.name, r.reason)
            console.print(table)
            for family, why in unmade.items():
                console.print(f"{family}: no instance for this problem: {why}", markup=False, highlight=False,
                              soft_wrap=True)
        return 0
    instances = select_instances(args.op, args.layout, args.dtype, args.ndim, args.family)
    if args.json:
        _emit_json([_instance_record(i) for i in instances])
        return 0
    _print_instances(instances, f"{len(instances)} instances")
    per_problem = [f for f in per_problem_families(args.op, args.layout, args.dtype, args.ndim)
                   if args.family in (None, f)]
    _print_families(args.op, {i.family for i in instances} | set(per_problem))
    if per_problem:
        console.print(f"{', '.join(per_problem)}: (also) make instances per problem, with its filter, stride and "
                      "dilation (some families: more of the problem) compiled in; pass --problem to list them",
                      markup=False, highlight=False)
    return 0


def _print_families(op: Op, names: set[str]) -> None:
    """What each listed family is, so a name's family field explains itself."""
    table = Table(title=f"{op.value} families")
    table.add_column("family")
    table.add_column("what it is")
    for family in solver_for(op).family_list:
        if family.name in names:
            table.add_row(family.name, family.description)
    console.print(table)


def _print_instances(instances: Sequence[Instance], title: str) -> None:
    table = Table(title=title)
    table.add_column("instance", overflow="fold")
    table.add_column("family")
    for inst in instances:
        table.add_row(inst.name, inst.family)
    console.print(table)


# --- tune ---------------------------------------------------------------------------------------
def cmd_tune(args: argparse.Namespace) -> int:
    from .api import compiled_figures, tune_problem
    from .tuner import TuneSettings

    problem = _problem(args)
    backend = _backend()  # before the DB: a machine without a GPU leaves no new DB file behind
    db = _open_db(args)
    with progress_bar() as bar:
        settings = TuneSettings(reps=args.reps, device_verify=not args.host_verify)
        outcome = tune_problem(problem, backend, db, settings, **tune_hooks(bar), fresh=args.fresh, budget=args.budget)
    if not any(m.verified for m in outcome.measurements):
        # The stored winner (if any) is not this run's outcome: --fresh decided from new times only.
        outcome = dataclasses.replace(outcome, winner=None)
    ranked = sorted(outcome.measurements, key=lambda m: (not m.verified, m.median_us or float("inf")))
    figures = compiled_figures(problem, (m.instance for m in ranked), backend)
    if args.json:
        _emit_json({
            "problem": problem.key,
            "device": backend.device_info().__dict__ | {"backend": backend.device_info().backend.value},
            "winner": outcome.winner.instance if outcome.winner else None,
            "reused": outcome.reused,
            "measured": outcome.measured,
            "pruned": outcome.pruned,
            "wall_s": dataclasses.asdict(outcome.times) | {"total_s": outcome.times.total_s},
            "measurements": [m.__dict__ | _figures_record(figures.get(m.instance)) for m in ranked],
        })
        return 0 if outcome.winner else 1
    reused = f" ({outcome.reused} measured in an earlier run)" if outcome.reused else ""
    table = Table(title=f"{problem.key} on {backend.device_info().name}{reused}")
    numeric = ("#", "µs", "GB/s", "TFLOP/s", "regs", "spill B", "occ")
    # What the compile cache knows, where the terminal has room for it beside whole names (--json has it always).
    compiled_columns = ("regs", "spill B", "occ") if figures and console.width >= WIDE_TABLE else ()
    for col in ("#", "instance", "µs", "GB/s", "TFLOP/s", *compiled_columns, "verified"):
        table.add_column(col, justify="right" if col in numeric else "left", overflow="fold", no_wrap=col in numeric,
                         min_width=24 if col == "instance" else None)
    for rank, m in enumerate(ranked, 1):
        got = figures.get(m.instance)
        compiled: tuple[str, ...] = ()
        if compiled_columns:
            compiled = ((str(got.resources.registers), str(got.resources.spill_bytes), _number(got.occupancy, "{:.0%}"))
                        if got is not None else ("-", "-", "-"))
        if m.verified and m.median_us is not None:
            table.add_row(str(rank), m.instance, f"{m.median_us:.2f}", _number(m.gbps, "{:.0f}"),
                          _number(m.tflops, "{:.2f}"), *compiled, "yes")
        else:
            table.add_row(str(rank), m.instance, "-", "-", "-", *compiled, f"no: {(m.error or '')[:80]}")
    console.print(table)
    pruned = f", {outcome.pruned} not measured (--budget {args.budget})" if outcome.pruned else ""
    console.print(f"{outcome.measured} measured, {outcome.reused} reused{pruned}; wall {outcome.times.summary()}")
    if outcome.winner:
        console.print(f"winner: {outcome.winner.instance} {outcome.winner.median_us:.2f} µs (stored)")
        return 0
    console.print("no candidate verified; nothing stored as winner")
    return 1


WIDE_TABLE = 100  # columns a terminal needs for tune's compile figures


def _figures_record(figures: Any) -> dict[str, Any]:
    """A measurement's compile figures in `tune --json`: resources and occupancy, None when unknown."""
    if figures is None:
        return {"resources": None, "occupancy": None}
    return {"resources": dataclasses.asdict(figures.resources), "occupancy": figures.occupancy}


def _number(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


# --- query --------------------------------------------------------------------------------------
def cmd_query(args: argparse.Namespace) -> int:
    from .nearest import nearest_choice
    from .selector import stored_choice, tune_command
    from .shipped import lookup_shipped

    problem = _problem(args)
    db = _open_db(args, read_only=True)
    try:
        device = _backend().device_info()
        device_error = None
    except BackendError as exc:
        device, device_error = None, str(exc)
    guess = heuristic_pick(problem, target=target_for(device) if device is not None else args.target)
    result: dict[str, Any] = {"problem": problem.key, "heuristic": guess.name}
    winner = None
    if device is not None:
        choice = stored_choice(problem, db.lookup(problem.key, device), target=target_for(device))
        winner = choice.winner
        refusals = [_refusal_record(r) for r in choice.refusals]
        lines = [r.line() for r in choice.refusals]
    else:
        stored = [(m, dev) for m, dev, _ in db.measurements(problem.key) if m.verified]
        refusals = [{"instance": m.instance, "median_us": m.median_us, "kind": "no_device",
                     "reason": f"measured on {dev.name} ({dev.arch}); no GPU here to match"} for m, dev in stored]
        lines = [f"not served: {r['instance']}: {r['reason']}" for r in refusals]
    if winner is not None:
        result |= {"tuned": True, "instance": winner.instance, "median_us": winner.median_us,
                   "device": winner.device.name, "arch": winner.device.arch,
                   "recorded_at": winner.recorded_at.astimezone(timezone.utc).isoformat(), "not_served": refusals}
    else:
        advice = tune_command(problem) if device is not None else None
        shipped = lookup_shipped(problem, device) if device is not None else None
        near = nearest_choice(problem, db, device) if device is not None else None
        instead: dict[str, Any] = {"instance": guess.name, "source": "heuristic", "advice": advice}
        if shipped is not None and shipped.found is not None:
            found = shipped.found.winner
            result["shipped"] = {"instance": found.instance, "median_us": found.median_us, "device": found.device.name,
                                 "sm_count": found.device.sm_count, "match": shipped.found.match.value,
                                 "served": shipped.instance is not None,
                                 "not_served": [_refusal_record(r) for r in shipped.refusals]}
        if shipped is not None and shipped.instance is not None:
            instead = {"instance": shipped.instance.name, "source": "shipped", "advice": advice}
        elif near is not None:
            instead = {"instance": near.instance.name, "source": "nearest", "from_problem": near.source_key,
                       "from_instance": near.source_instance, "from_us": near.source_us,
                       "from_shipped": near.shipped, "distance": round(near.distance, 3), "advice": advice}
        result |= {"tuned": False, "not_served": refusals, "instead": instead}
        if device_error:
            result["device_error"] = device_error
    if args.json:
        _emit_json(result)
        return 0
    if winner is not None:
        console.print(f"{winner.instance}  {winner.median_us:.2f} µs  on {winner.device.name} ({winner.device.arch}), "
                      f"recorded {result['recorded_at']}", markup=False, highlight=False, soft_wrap=True)
        return 0
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if device is None:
        console.print(f"untuned on this machine (no GPU: {device_error}); the heuristic would pick {guess.name}",
                      markup=False, highlight=False, soft_wrap=True)
        return 0
    instead = result["instead"]
    shipped_note = result.get("shipped")
    if instead["source"] == "shipped":
        console.print(f"untuned on this device; serving {instead['instance']}, the winner shipped for this problem "
                      f"({shipped_note['median_us']:.2f} µs on {shipped_note['device']}); to tune it here: "
                      f"{tune_command(problem)}", markup=False, highlight=False, soft_wrap=True)
        return 0
    if shipped_note is not None:
        why = "; ".join(r["reason"] for r in shipped_note["not_served"]) or (
            f"shipped from a similar device ({shipped_note['device']}, {shipped_note['sm_count']} SMs); "
            "served once re-timed here: kfactory db verify --shipped")
        console.print(f"shipped winner {shipped_note['instance']} not served: {why}", markup=False, highlight=False,
                      soft_wrap=True)
    if instead["source"] == "nearest":
        where = "shipped " if instead["from_shipped"] else ""
        console.print(f"untuned on this device; serving {instead['instance']}, the winner of the nearest {where}tuned "
                      f"problem {instead['from_problem']} ({instead['from_us']:.2f} µs there); to tune it here: "
                      f"{tune_command(problem)}", markup=False, highlight=False, soft_wrap=True)
        return 0
    console.print(f"untuned on this device; the heuristic would pick {guess.name}; "
                  f"to tune it here: {tune_command(problem)}", markup=False, highlight=False, soft_wrap=True)
    return 0


def _refusal_record(r: Any) -> dict[str, Any]:
    return {"instance": r.instance, "median_us": r.median_us, "kind": r.kind.value, "reason": r.message,
            "recorded": r.recorded, "current": r.current}


# --- db -----------------------------------------------------------------------------------------
def cmd_db(args: argparse.Namespace) -> int:
    if args.db_command == "verify":
        return cmd_db_verify(args)
    db = _open_db(args, read_only=args.db_command not in ("import", "upgrade"))
    if args.db_command == "upgrade":
        return _report_upgrade(db, args.json)
    if args.db_command == "stats":
        stats = db.stats()
        data = stats.__dict__ if hasattr(stats, "__dict__") else dict(stats)
        if args.json:
            _emit_json(data)
            return 0
        table = Table(title="tuning DB")
        table.add_column("field")
        table.add_column("value")
        for key, value in data.items():
            table.add_row(key, str(value))
        console.print(table)
    elif args.db_command == "export":
        rows = db.export_json(args.file)
        console.print(f"exported {rows} rows to {args.file}")
    elif args.db_command == "import":
        report = db.import_json(args.file)
        console.print(f"imported {args.file}: {report}")
    return 0


def _report_upgrade(db: Any, as_json: bool) -> int:
    """What opening the DB for writing did to its schema (Alembic migrations run on open)."""
    from tuning_db.schema import HEAD_REVISION

    opened = db.opened
    if as_json:
        _emit_json({"db": db.location, "found": opened.found, "version": opened.version, "revision": HEAD_REVISION,
                    "created": opened.found is None, "upgraded": opened.upgraded})
        return 0
    if opened.found is None:
        line = f"{db.location}: created at schema version {opened.version} (revision {HEAD_REVISION})"
    elif opened.upgraded:
        line = f"{db.location}: upgraded from schema version {opened.found} to {opened.version} (revision {HEAD_REVISION})"
    else:
        line = f"{db.location}: already at schema version {opened.version} (revision {HEAD_REVISION})"
    console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0


def _verify_shipped(args: argparse.Namespace, backend: Any, db: Any, op: str | None) -> int:
    from .recheck import describe_shipped, retime_shipped
    from .shipped import shipped_winners
    from .tuner import TuneSettings

    device = backend.device_info()
    todo = [s for s in shipped_winners().similar_to(device) if op is None or s.winner.op == op]
    with progress_bar() as bar:
        task = bar.add_task("re-timing", total=len(todo))
        results = retime_shipped(db, backend, op=op, settings=TuneSettings(reps=args.reps),
                                 on_winner=lambda shipped: bar.advance(task))
    records = [{"problem": r.problem_key, "instance": r.shipped.winner.instance, "shipped_us": r.shipped.winner.median_us,
                "shipped_device": r.shipped.winner.device.name, "shipped_sm_count": r.shipped.winner.device.sm_count,
                "now_us": r.now.median_us if r.now is not None else None, "trusted": r.trusted,
                "already": r.already, "winner": r.winner.instance if r.winner else None,
                "detail": describe_shipped(r)} for r in results]
    if args.json:
        _emit_json({"device": device.name, "shipped": records})
        return 0
    if not results:
        console.print(f"no shipped winner of a device similar to this {device.name} ({device.arch}, "
                      f"{device.sm_count} SMs) to re-time", markup=False, highlight=False, soft_wrap=True)
        return 0
    table = Table(title=f"shipped winners re-timed on {device.name}")
    for col in ("problem", "instance", "shipped µs", "shipped on", "now µs", "action"):
        table.add_column(col, justify="right" if col.endswith("µs") else "left", overflow="fold")
    for r, rec in zip(results, records):
        table.add_row(r.problem_key, rec["instance"], f"{rec['shipped_us']:.2f}",
                      f"{rec['shipped_device']} ({rec['shipped_sm_count']} SMs)", _number(rec["now_us"], "{:.2f}"),
                      rec["detail"])
    console.print(table)
    trusted = sum(r.trusted for r in results)
    console.print(f"{trusted} of {len(results)} served here from now on", markup=False, highlight=False)
    return 0


def cmd_db_verify(args: argparse.Namespace) -> int:
    from .recheck import Action, as_record, describe, recheck_winners
    from .tuner import TuneSettings

    if not args.threshold >= 1.0 or args.threshold == float("inf"):
        raise UsageError(f"--threshold must be a finite number >= 1 (got {args.threshold})")
    op = args.op.value if args.op else None
    backend = _backend()
    db = _open_db(args)
    if args.shipped:
        if args.changed:
            raise UsageError("--changed re-times this device's own winners; --shipped those of similar devices: one at a time")
        return _verify_shipped(args, backend, db, op)
    with progress_bar() as bar:
        task = bar.add_task("verifying", total=None)
        seen = [0]

        def started(winner: Any) -> None:
            bar.update(task, completed=seen[0], description=f"verifying {winner.instance[:40]}")
            seen[0] += 1

        def finished(result: Any) -> None:  # one line a winner: a log shows how far a long run got
            times = f"{result.recorded_us:.2f} -> {_number(result.now_us, '{:.2f}')} µs; " if result.now else ""
            bar.console.print(f"{result.problem_key} {result.instance}: {times}{describe(result)}", soft_wrap=True)

        results = recheck_winners(db, backend, op=op, threshold=args.threshold, settings=TuneSettings(reps=args.reps),
                                  progress=tune_hooks(bar)["progress"], changed_only=args.changed,
                                  on_count=lambda n: bar.update(task, total=n), on_winner=started, on_result=finished)
        bar.update(task, completed=seen[0], description="verified")
    failed = any(r.action is Action.RETUNE_FAILED for r in results)
    if args.json:
        _emit_json({"device": backend.device_info().name, "threshold": args.threshold,
                    "winners": [as_record(r) for r in results]})
        return 1 if failed else 0
    if not results:
        console.print("no stored winners" + (" measured on older code" if args.changed else "")
                      + (f" of {args.op.value}" if args.op else ""))
        return 0
    table = Table(title=f"stored winners on {backend.device_info().name} (threshold {args.threshold:g}x)")
    for col in ("problem", "instance", "recorded µs", "now µs", "ratio", "action"):
        table.add_column(col, justify="right" if col in ("recorded µs", "now µs", "ratio") else "left",
                         overflow="fold")
    for r in results:
        table.add_row(r.problem_key, r.instance, f"{r.recorded_us:.2f}", _number(r.now_us, "{:.2f}"),
                      _number(r.ratio, "{:.2f}"), describe(r))
    console.print(table)
    counts = collections.Counter(r.action.value for r in results)
    console.print(", ".join(f"{n} {action.replace('_', ' ')}" for action, n in sorted(counts.items())))
    return 1 if failed else 0


# --- fleet: enqueue | worker | jobs -------------------------------------------------------------
def _positive(name: str, convert: Callable[[str], Any], minimum: float) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number (got {text!r})") from None
        if not value >= minimum or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number >= {minimum:g} (got {text})")
        return value

    return parse


def _db_url(args: argparse.Namespace) -> str:
    from tuning_db.paths import as_db_url, default_db_url

    return as_db_url(args.db) if args.db is not None else default_db_url()


def cmd_enqueue(args: argparse.Namespace) -> int:
    from .fleet import problems as fleet_problems
    from .fleet.gpus import gpu_source

    if args.random is not None:
        if args.seed is None:
            raise UsageError("--random needs --seed S (the same seed, N and --ops draw the same problems)")
        problems = fleet_problems.random_problems(args.random, args.seed, args.ops, args.dtypes)
    elif args.problems is not None:
        problems = fleet_problems.file_problems(args.problems, args.op, args.layout, args.dtype)
    elif args.model is not None:
        problems = fleet_problems.model_problems(args)
    else:
        problems = fleet_problems.suite_problems(args.suite, args.ops, args.dtypes, args.cases)
    args.local_device = None
    if args.device.strip().lower() == "local":
        try:  # before the DB: a machine without a GPU leaves no new DB file behind
            args.local_device = gpu_source().device()
        except BackendError as exc:
            raise UsageError(f"--device local needs a GPU on this machine ({one_line(str(exc))}); enqueue for "
                             "devices the workers registered with --device all or --device ID") from None
    db = _open_db(args)
    devices = fleet_problems.target_devices(db, args.device, args.local_device)
    report: dict[str, Any] = {"db": db.location, "problems": len(problems), "added": 0, "present": 0, "devices": [],
                              "unservable": []}
    for device_id, device in devices:
        plan = fleet_problems.plan(problems, device)
        added = db.jobs.enqueue(plan.specs, args.max_attempts)
        report["added"] += added.added
        report["present"] += added.present
        report["devices"].append({"id": device_id, "name": device.name, "arch": device.arch, "added": added.added,
                                  "present": added.present, "unservable": len(plan.unservable)})
        report["unservable"] += [{"device": device_id, "problem": key, "reason": why} for key, why in plan.unservable]
    if args.json:
        _emit_json(report)
        return 0
    for entry in report["devices"]:
        left_out = f"; {entry['unservable']} left out: no instance computes them there" if entry["unservable"] else ""
        console.print(f"device #{entry['id']} {entry['name']} ({entry['arch']}): {entry['added']} jobs added, "
                      f"{entry['present']} already queued{left_out}", markup=False, highlight=False, soft_wrap=True)
    for entry in report["unservable"][:10]:
        console.print(f"  left out: {entry['problem']}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"{report['added']} jobs added to {db.location} (max attempts {args.max_attempts}); "
                  f"run them: kfactory worker --db URL --gpus all", markup=False, highlight=False, soft_wrap=True)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from tuning_db import TuningDB

    from .fleet.gpus import parse_gpus, visible
    from .fleet.supervisor import FleetSettings, run_fleet

    gpus = tuple(parse_gpus(args.gpus))
    for gpu in gpus:
        visible(gpu)  # a GPU this process cannot see is refused before anything starts
    url = _db_url(args)
    TuningDB(url).close()  # a bad URL, an unreachable server or a foreign file is one line here; upgrades once
    settings = FleetSettings(url, gpus, args.lease, args.poll, args.reps, args.drain)
    return run_fleet(settings, lambda line: console.print(f"kfactory worker: {line}", markup=False, highlight=False,
                                                          soft_wrap=True))


def cmd_jobs(args: argparse.Namespace) -> int:
    from .fleet import view

    db = _open_db(args)
    out = console
    if args.devices:
        devices = db.jobs.devices()
        if args.json:
            _emit_json([{"id": i, "backend": d.backend.value, "arch": d.arch, "name": d.name, "sm_count": d.sm_count,
                         "driver": d.driver_version, "compiler": d.compiler_version} for i, d in devices])
            return 0
        table = Table(title=f"devices in {db.location}")
        for col in ("id", "backend", "arch", "name", "SMs/CUs", "driver", "compiler"):
            table.add_column(col)
        for i, d in devices:
            table.add_row(str(i), d.backend.value, d.arch, d.name, str(d.sm_count), d.driver_version, d.compiler_version)
        out.print(table)
        return 0
    if args.json:
        _emit_json(view.status_record(db.jobs.status(), db.location))
        return 0
    if args.watch:
        view.watch(out, db, args.interval)
        return 0
    view.show(out, db.jobs.status(), db.location)
    return 0


def _add_fleet_parsers(sub: Any) -> None:
    from tuning_db.jobs import DEFAULT_LEASE_S, DEFAULT_MAX_ATTEMPTS

    from .fleet.worker import DEFAULT_POLL_S

    enq = sub.add_parser("enqueue", help="add tuning jobs to the DB: suite rows, a random draw or a file of problems",
                         description="One job per problem and device, unique per problem, device identity and source "
                                     "version: enqueueing again (from anywhere, at once) adds only what is new.")
    source = enq.add_mutually_exclusive_group(required=True)
    source.add_argument("--suite", nargs="?", const="", metavar="FILE",
                        help="the rows of a suite TOML (default: the shipped bench/public_suite.toml)")
    source.add_argument("--random", type=int, metavar="N", help="N problems per op, drawn as `bench --random` does (needs --seed)")
    source.add_argument("--problems", metavar="FILE", help="one problem per line: `--problem SPEC` with optional "
                        "--op/--layout/--dtype, or a bare SPEC; `-` reads standard input")
    source.add_argument("--model", metavar="NAMES", help="every problem the patched training step of these torchvision "
                        "networks meets (mobilenet_v2, convnext_tiny, resnext50; needs torchvision), planned without "
                        "a GPU; shaped by --batch, --size, --autocast, --memory-format")
    enq.add_argument("--seed", type=int, help="seed of --random's draw")
    enq.add_argument("--ops", help="comma-separated op ids (--suite, --random)")
    enq.add_argument("--dtypes", help="comma-separated dtypes (--suite, --random)")
    enq.add_argument("--cases", help="comma-separated case names (--suite)")
    from .bench.training_report import add_step_arguments

    add_step_arguments(enq.add_argument_group("training step (--model)"))
    _add_config(enq, required=False)
    enq.add_argument("--device", default="local",
                     help="whose jobs: local (this machine's GPU, the default), all (every device in the DB, e.g. "
                          "those the workers registered) or device ids (kfactory jobs --devices)")
    enq.add_argument("--max-attempts", type=_positive("--max-attempts", int, 1), default=DEFAULT_MAX_ATTEMPTS,
                     help=f"attempts before a failing job stops (default {DEFAULT_MAX_ATTEMPTS})")
    enq.add_argument("--json", action="store_true")
    _add_db(enq)
    enq.set_defaults(func=cmd_enqueue)

    wrk = sub.add_parser("worker", help="tune the DB's jobs: one worker process per GPU",
                         description="Each worker claims a job of its GPU's device under a lease, tunes it and "
                                     "stores measurements, winner and job state in one transaction.")
    wrk.add_argument("--gpus", default="all", help="all (the default) or device numbers, e.g. 0,1 (0,0: two "
                     "workers share GPU 0); numbers count the GPUs this process sees")
    wrk.add_argument("--lease", type=_positive("--lease", float, 1.0), default=DEFAULT_LEASE_S,
                     help=f"seconds a claim holds without a heartbeat (default {DEFAULT_LEASE_S:g}; heartbeats "
                          "every quarter of it): how soon another worker takes over a killed worker's job")
    wrk.add_argument("--poll", type=_positive("--poll", float, 0.01), default=DEFAULT_POLL_S,
                     help=f"seconds between looks at an empty queue (default {DEFAULT_POLL_S:g})")
    wrk.add_argument("--reps", type=_reps, default=25, help=f"timed repetitions per candidate ({MIN_REPS}..{MAX_REPS})")
    wrk.add_argument("--drain", action="store_true",
                     help="exit once no job of the GPU's device is pending or running (default: wait for more)")
    _add_db(wrk)
    wrk.set_defaults(func=cmd_worker)

    jobs = sub.add_parser("jobs", help="the job queue: pending, running (worker, since when), done, failed, ETA")
    jobs.add_argument("--watch", action="store_true", help="redraw with a progress bar until no job is pending or running")
    jobs.add_argument("--interval", type=_positive("--interval", float, 0.1), default=2.0,
                      help="seconds between redraws (default 2)")
    jobs.add_argument("--devices", action="store_true", help="list the DB's devices and their ids (enqueue --device)")
    jobs.add_argument("--json", action="store_true")
    _add_db(jobs)
    jobs.set_defaults(func=cmd_jobs)


# --- entry point --------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kfactory", description="Convolution-family GPU kernels: generate, tune, query.")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="write one HIP source per instance and manifest.json")
    _add_config(gen, required=False)
    gen.add_argument("--ndim", type=int, choices=(1, 2, 3))
    gen.add_argument("--family", help="kernel family (e.g. dl, dw)")
    gen.add_argument("--problem", help="only the instances that compute this problem (needs --layout and --dtype), "
                                       "the ones specialized for it included")
    gen.add_argument("--out", type=_out_dir, default="build/instances",
                     help="output directory: new, empty, or an earlier generate's with the same filters (default build/instances)")
    _add_target(gen)
    gen.set_defaults(func=cmd_generate)

    lst = sub.add_parser("list", help="instances that support a configuration or problem")
    _add_config(lst, required=False)
    lst.add_argument("--ndim", type=int, choices=(1, 2, 3))
    lst.add_argument("--family")
    lst.add_argument("--problem", help='e.g. "N=32,G=32,C=4,K=4,input=56x56,filter=3x3,stride=1,pad=1,dilation=1"')
    lst.add_argument("--why", action="store_true", help="say why the other instances do not apply")
    lst.add_argument("--json", action="store_true")
    _add_target(lst)
    lst.set_defaults(func=cmd_list)

    for name, func, text in (("tune", cmd_tune, "benchmark and verify every applicable instance on this GPU; store the winner"),
                             ("query", cmd_query, "the stored winner for a problem, or what the heuristic would pick")):
        p = sub.add_parser(name, help=text)
        _add_config(p, required=True)
        p.add_argument("--problem", required=True)
        _add_db(p)
        p.add_argument("--json", action="store_true")
        if name == "query":
            _add_target(p, "target the heuristic's pick is for when no GPU is present (default sm_90a, the H100)")
        if name == "tune":
            p.add_argument("--reps", type=_reps, default=25,
                           help=f"timed repetitions per candidate ({MIN_REPS}..{MAX_REPS}; >= 20 recommended)")
            p.add_argument("--fresh", action="store_true",
                           help="measure every candidate again (default: continue, keeping this device's earlier measurements)")
            p.add_argument("--budget", type=_budget, default=None, metavar="K|Ns",
                           help="measure only the K candidates the prior ranks first, or candidates in that order for N "
                                "seconds (e.g. 5s); a later tune without it measures the rest")
            p.add_argument("--host-verify", action="store_true",
                           help="read every candidate's outputs back and check them on the host (slower; by default "
                                "the GPU checks them and only a failing candidate's outputs come back)")
        p.set_defaults(func=func)

    db = sub.add_parser("db", help="tuning DB maintenance")
    dbsub = db.add_subparsers(dest="db_command", required=True)
    stats = dbsub.add_parser("stats", help="counts of problems, winners, measurements, devices")
    stats.add_argument("--json", action="store_true")
    _add_db(stats)
    exp = dbsub.add_parser("export", help="write every row to a JSON file")
    exp.add_argument("file")
    _add_db(exp)
    imp = dbsub.add_parser("import", help="merge a JSON export, keeping the faster verified winner")
    imp.add_argument("file")
    _add_db(imp)
    upg = dbsub.add_parser("upgrade", help="bring the DB to this kernel-factory's schema (Alembic migrations, "
                                           "in place; any writing command also does on open)")
    upg.add_argument("--json", action="store_true")
    _add_db(upg)
    ver = dbsub.add_parser("verify", help="re-time stored winners on this GPU; re-tune those that got slower or fail")
    ver.add_argument("--op", type=_enum_arg(_implemented_op), help="only winners of this op")
    ver.add_argument("--threshold", type=float, default=1.25,
                     help="re-tune when now > threshold x the recorded time (default 1.25)")
    ver.add_argument("--reps", type=_reps, default=25, help=f"timed repetitions per candidate ({MIN_REPS}..{MAX_REPS})")
    ver.add_argument("--changed", action="store_true",
                     help="only this device's winners measured on older code (a template changed since): what "
                          "an upgrade or a template edit leaves to re-time")
    ver.add_argument("--shipped", action="store_true",
                     help="instead: time once each winner shipped from a similar device (same arch, another model "
                          "or SM count) on this GPU and record it, so it is served here from then on")
    ver.add_argument("--json", action="store_true")
    _add_db(ver)
    db.set_defaults(func=cmd_db)

    add_bench_parser(sub)
    _add_fleet_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; see the module docstring for the exit rule. SIGTERM stops a command as Ctrl-C
    does (on the main thread, where signals can be handled), so what a tune or bench measured is
    written before it exits; the handler is set and put back here, inside the `try`, so an interrupt
    at any moment is caught."""
    previous: Any = None
    try:
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
        return _main(argv)
    except KeyboardInterrupt:
        errors.print("kfactory: interrupted", markup=False, highlight=False)
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _interrupt_on_sigterm(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM waits for the clean-up
    raise KeyboardInterrupt


def _main(argv: Sequence[str] | None) -> int:
    with warnings.catch_warnings():
        warnings.showwarning = _warning_line
        return _run(build_parser().parse_args(argv))


def _run(args: argparse.Namespace) -> int:
    from tuning_db import TuningDBError

    try:
        return args.func(args)
    except (KernelFactoryError, TuningDBError, UsageError) as exc:
        return _fail(f"kfactory: error: {exc}")
    except OSError as exc:  # a path or device the user named, or the environment pointed at
        return _fail(f"kfactory: error: {_os_error(exc)}")
    except BackendError as exc:
        _fail(f"kfactory: GPU runtime error: {exc}")
        return 1


def _fail(message: str) -> int:
    errors.print(one_line(message), markup=False, highlight=False)
    return EXIT_USAGE


def _os_error(exc: OSError) -> str:
    """`path: reason`, naming both files of a rename."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    names = [str(n) for n in (exc.filename, exc.filename2) if n is not None]
    return f"{' -> '.join(names)}: {reason}" if names else reason


def _warning_line(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """Warnings (an unusable compile cache, ...) as one line each, not Python's two."""
    errors.print(one_line(f"kfactory: warning: {message}"), markup=False, highlight=False)


if __name__ == "__main__":
    sys.exit(main())
