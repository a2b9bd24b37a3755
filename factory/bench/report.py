"""Rows -> the terminal table, results.csv, results.json, speedup.png and roofline.png.

CSV and JSON carry the same flat records (one per row, derived percentages included), so either
can be read back; JSON adds the run's metadata, ceilings and geometric means.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .model import Ceilings, Row, Status, Timing

COLUMNS = (
    "op", "case", "dtype", "layout", "status", "ours_us", "ours_iqr_us", "torch_us", "torch_iqr_us", "speedup",
    "ours_host_us", "torch_host_us",
    "ours_roofline_pct", "torch_roofline_pct",
    "ours_dram_pct", "torch_dram_pct", "ours_mma_pct", "torch_mma_pct", "ours_gbps", "torch_gbps",
    "max_rel_err", "tolerance", "reps", "instance", "problem", "min_bytes", "macs", "tune_s", "note",
)
OVERALL = "overall"


def geomean(values: Iterable[float]) -> float | None:
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def geomeans(rows: Sequence[Row]) -> dict[str, float | None]:
    """Geometric-mean speedup per op (every op that has rows, in order; None when none was measured) and overall."""
    result: dict[str, float | None] = {}
    for op in dict.fromkeys(r.op for r in rows):
        result[op.value] = geomean(r.speedup for r in rows if r.op is op and r.speedup is not None)
    result[OVERALL] = geomean(r.speedup for r in rows if r.speedup is not None)
    return result


def record(row: Row, ceilings: Ceilings | None) -> dict[str, Any]:
    """The flat CSV/JSON record of a row (None where a value does not apply)."""
    def med(t: Timing | None) -> float | None:
        return t.median_us if t else None

    def gbps(t: Timing | None) -> float | None:
        return row.min_bytes / (t.median_us * 1e-6) / 1e9 if t and row.min_bytes and t.median_us > 0 else None

    def pct(kind: str, t: Timing | None) -> float | None:
        if ceilings is None:
            return None
        if kind == "roofline":
            return ceilings.roofline_pct(row.min_bytes, row.macs, med(t))
        return ceilings.dram_pct(row.min_bytes, med(t)) if kind == "dram" else ceilings.mma_pct(row.macs, med(t))

    reps = row.ours.reps if row.ours else (row.torch.reps if row.torch else None)
    return {
        "op": row.op.value, "case": row.case, "dtype": row.dtype.value, "layout": row.layout.name,
        "status": row.status.value,
        "ours_us": med(row.ours), "ours_iqr_us": row.ours.iqr_us if row.ours else None,
        "torch_us": med(row.torch), "torch_iqr_us": row.torch.iqr_us if row.torch else None,
        "speedup": row.speedup,
        "ours_host_us": row.ours.host_us if row.ours else None,
        "torch_host_us": row.torch.host_us if row.torch else None,
        "ours_roofline_pct": pct("roofline", row.ours), "torch_roofline_pct": pct("roofline", row.torch),
        "ours_dram_pct": pct("dram", row.ours), "torch_dram_pct": pct("dram", row.torch),
        "ours_mma_pct": pct("mma", row.ours), "torch_mma_pct": pct("mma", row.torch),
        "ours_gbps": gbps(row.ours), "torch_gbps": gbps(row.torch),
        "max_rel_err": row.max_rel_err, "tolerance": row.tolerance, "reps": reps,
        "instance": row.instance, "problem": row.problem, "min_bytes": row.min_bytes, "macs": row.macs,
        "tune_s": row.tune_s, "note": row.note,
    }


def write_csv(path: Path, rows: Sequence[Row], ceilings: Ceilings | None) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in record(row, ceilings).items()})


def write_json(path: Path, rows: Sequence[Row], ceilings: Ceilings | None, meta: Mapping[str, Any]) -> None:
    data = {
        "meta": dict(meta),
        "ceilings": asdict(ceilings) if ceilings else None,
        "geomean_speedup": geomeans(rows),
        "rows": [record(r, ceilings) for r in rows],
    }
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def _timing_from(rec: Mapping[str, Any], side: str) -> Timing | None:
    median = rec.get(f"{side}_us")
    if median is None:
        return None
    return Timing(float(median), float(rec.get(f"{side}_iqr_us") or 0.0), float(median), float(median), int(rec.get("reps") or 0))


def row_from_record(rec: Mapping[str, Any]) -> Row:
    """A Row back from its results.json record (spread beyond the IQR and host timings are not stored)."""
    from ..problem import DType, Layout, Op

    return Row(
        op=Op(rec["op"]), case=rec["case"], dtype=DType(rec["dtype"]), layout=Layout[rec["layout"]],
        status=Status(rec["status"]), problem=rec.get("problem") or "", instance=rec.get("instance"),
        ours=_timing_from(rec, "ours"), torch=_timing_from(rec, "torch"), max_rel_err=rec.get("max_rel_err"),
        tolerance=rec.get("tolerance"), min_bytes=rec.get("min_bytes"), macs=rec.get("macs"), note=rec.get("note") or "",
        tune_s=rec.get("tune_s"),
    )


def replot(results: Path, out: Path) -> list[Path]:
    """speedup.png and roofline.png redrawn from a stored results.json (no GPU needed)."""
    data = json.loads(results.read_text())
    rows = [row_from_record(r) for r in data["rows"]]
    ceilings = Ceilings(**data["ceilings"]) if data.get("ceilings") else None
    out.mkdir(parents=True, exist_ok=True)
    return [plot_speedup(out / "speedup.png", rows), plot_roofline(out / "roofline.png", rows, ceilings)]


def write_all(out: Path, rows: Sequence[Row], ceilings: Ceilings | None, meta: Mapping[str, Any]) -> list[Path]:
    """Every output file; PNGs only when matplotlib is installed (the list says what was written)."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.csv", out / "results.json"]
    write_csv(written[0], rows, ceilings)
    write_json(written[1], rows, ceilings, meta)
    if importlib.util.find_spec("matplotlib") is None:
        return written
    written.append(plot_speedup(out / "speedup.png", rows))
    written.append(plot_roofline(out / "roofline.png", rows, ceilings))
    return written


# --- terminal -----------------------------------------------------------------------------------
def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


NOTE_WIDTH = 48  # the table shows the start of a note; results.csv / .json hold it whole
PROBLEM_WIDTH = 80  # what the problem column (random runs) adds to the width of a piped table
_DEFAULTS = {"stride": "1", "dilation": "1", "pad": "0"}
_PER_DIM = ("stride", "dilation", "pad", "pad_left", "pad_right")


def problem_text(problem: str) -> str:
    """A row's problem as a short --problem string: the problem key's sizes, less stride, dilation and pad
    where they are the default, and one number where every dim has the same ('N=8,G=48,C=1,K=1,
    input=55x55,filter=3x3,stride=2,pad=1'); a row without a key (no solver) keeps its spec."""
    spec = problem.split(":", 4)[4] if problem.count(":") >= 4 else problem
    kept = []
    for token in spec.split(","):
        name, _, value = token.partition("=")
        parts = value.split("x")
        if name in _DEFAULTS and all(v == _DEFAULTS[name] for v in parts):
            continue
        kept.append(f"{name}={parts[0]}" if name in _PER_DIM and len(set(parts)) == 1 else token)
    return ",".join(kept)


def print_table(console: Any, rows: Sequence[Row], ceilings: Ceilings | None, title: str = "kfactory bench",
                problems: bool = False) -> None:
    """The rows, then the geometric-mean speedup per op and overall (rich Console); `problems` adds each
    row's sizes after its case name (for drawn cases, whose names do not say them)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title))
    columns = [("op", False), ("case", False), ("dtype", False), ("layout", False), ("ours µs", True),
               ("PyTorch µs", True), ("speedup", True), ("% roofline ours/PT", True), ("% DRAM ours/PT", True),
               ("% MMA ours", True), ("tune s", True),
               ("status / note", False)]
    if problems:
        columns.insert(2, ("problem", False))
    texts = [problem_text(row.problem) for row in rows]
    for col, right in columns:
        # A problem's sizes take the room they need, at the other columns' expense; on a terminal too
        # narrow even for that they fold onto more lines, never lose their end.
        if col == "problem":
            table.add_column(col, overflow="fold", min_width=max((len(t) for t in texts), default=0))
        else:
            table.add_column(col, justify="right" if right else "left", overflow="ellipsis")
    for row, text in zip(rows, texts):
        r = record(row, ceilings)
        speed = r["speedup"]
        speed_text = "–" if speed is None else f"[{'green' if speed >= 1 else 'red'}]{speed:.2f}×[/]"
        status = row.status.label if row.status is not Status.OK else ""
        if row.status is Status.WRONG:
            status = f"[bold red]{status}[/]"
        short = row.note if len(row.note) <= NOTE_WIDTH else row.note[: NOTE_WIDTH - 1] + "…"
        note = "; ".join(t for t in (status, escape(short)) if t)
        sizes = (escape(text),) if problems else ()
        table.add_row(
            row.op.value, escape(row.case), *sizes, row.dtype.value, row.layout.name,
            _timing_text(row.ours), _timing_text(row.torch), speed_text,
            f"{_num(r['ours_roofline_pct'], '.0f')}/{_num(r['torch_roofline_pct'], '.0f')}",
            f"{_num(r['ours_dram_pct'], '.0f')}/{_num(r['torch_dram_pct'], '.0f')}", _num(r["ours_mma_pct"], ".1f"),
            _num(row.tune_s, ".1f"), note,
        )
    console.print(table)
    if ceilings:
        console.print(f"ceilings: copy {ceilings.copy_gbps:.0f} GB/s (read + write), "
                      f"bf16 matmul {ceilings.matmul_tflops:.0f} TFLOP/s ({ceilings.matmul_n}³)")
    tuned = [row.tune_s for row in rows if row.tune_s is not None]
    if tuned:
        console.print(f"getting our kernels (tuning what was not tuned, loading winners): {sum(tuned):.1f} s "
                      f"over {len(tuned)} rows, longest {max(tuned):.1f} s")
    for op, value in geomeans(rows).items():
        name = "overall" if op == OVERALL else op
        measured = [r for r in rows if r.speedup is not None and (op == OVERALL or r.op.value == op)]
        text = "not implemented" if value is None and _all_status(rows, op, Status.NOT_IMPLEMENTED) else (
            "no measured rows" if value is None else f"{value:.2f}×")
        console.print(f"geomean speedup {name}: {text}" + (f" over {len(measured)} rows" if measured else ""))


def _all_status(rows: Sequence[Row], op: str, status: Status) -> bool:
    mine = [r for r in rows if op == OVERALL or r.op.value == op]
    return bool(mine) and all(r.status is status for r in mine)


def _timing_text(t: Timing | None) -> str:
    return "–" if t is None else f"{t.median_us:.1f} ±{t.iqr_us:.1f}"


# --- figures ------------------------------------------------------------------------------------
def _figure(n_bars: int, width: float = 10.0) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, 1.6 + 0.32 * max(n_bars, 1)), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _label(row: Row) -> str:
    # Separators that are glyphs, not spaces: some minimal font setups render a space with no width.
    return f"{row.op.value} | {row.case} | {row.dtype.value} | {row.layout.name}"


def _speedup_tick(exponent: int) -> str:
    """2**exponent as a short label: 1/64×, 1/2×, 1×, 4×."""
    return f"{2 ** exponent}×" if exponent >= 0 else f"1/{2 ** -exponent}×"


def plot_speedup(path: Path, rows: Sequence[Row]) -> Path:
    """Horizontal bars of log2(speedup), green where we win, red where we lose; unmeasured rows say why."""
    fig, ax = _figure(len(rows))
    labels = [_label(r) for r in rows]
    ys = list(range(len(rows)))[::-1]
    speeds = [r.speedup for r in rows]
    logs = [math.log2(s) if s else 0.0 for s in speeds]
    colors = ["#2e7d32" if (s or 0) >= 1 else "#c62828" for s in speeds]
    ax.barh(ys, logs, color=colors, height=0.7)
    span = max([abs(v) for v in logs] + [1.0])
    for y, row, s, v in zip(ys, rows, speeds, logs):
        if s is None:
            ax.text(0.05 * span, y, row.status.label, va="center", ha="left", fontsize=8,
                    color="#c62828" if row.status is Status.WRONG else "#555555")
        else:
            ax.text(v + (0.03 * span if v >= 0 else -0.03 * span), y, f"{s:.2f}×", va="center",
                    ha="left" if v >= 0 else "right", fontsize=8)
    ax.axvline(0.0, color="black", linewidth=1.0)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    lim = math.ceil(span + 0.5)
    ax.set_xlim(-lim, lim)
    ticks = list(range(-lim, lim + 1))
    ax.set_xticks(ticks, [_speedup_tick(t) for t in ticks], fontsize=8)
    ax.set_xlabel("speedup over PyTorch (log scale; right of the 1× line: ours faster)")
    wins = sum(1 for s in speeds if s is not None and s >= 1)
    measured = sum(1 for s in speeds if s is not None)
    ax.set_title(f"kfactory vs PyTorch: faster in {wins} of {measured} measured rows")
    ax.grid(axis="x", alpha=0.3)
    fig.savefig(path, dpi=120)
    return path


def plot_roofline(path: Path, rows: Sequence[Row], ceilings: Ceilings | None) -> Path:
    """Achieved % of each row's binding roofline (the larger of its DRAM floor, minimum bytes at the
    measured copy bandwidth, and its matmul floor, 2 MACs at the measured matmul rate), ours vs PyTorch."""
    timed = [r for r in rows if r.ours is not None or r.torch is not None]
    fig, ax = _figure(len(timed) * 1.6)
    recs = [record(r, ceilings) for r in timed]
    ys = [1.6 * i for i in range(len(timed))][::-1]
    h = 0.6
    ours = [rec["ours_roofline_pct"] or 0.0 for rec in recs]
    theirs = [rec["torch_roofline_pct"] or 0.0 for rec in recs]
    ax.barh([y + h / 2 for y in ys], ours, height=h, color="#1565c0", label="kfactory")
    ax.barh([y - h / 2 for y in ys], theirs, height=h, color="#9e9e9e", label="PyTorch")
    for y, row, rec, o, t in zip(ys, timed, recs, ours, theirs):
        if rec["ours_roofline_pct"] is None:
            why = "not timed" if row.status is Status.OK else f"ours: {row.status.label}"
            ax.text(1, y + h / 2, why, va="center", fontsize=7, color="#c62828" if row.status is Status.WRONG else "#555555")
        else:
            ax.text(o + 1, y + h / 2, f"{o:.0f}%", va="center", fontsize=7)
        if rec["torch_roofline_pct"] is not None:
            ax.text(t + 1, y - h / 2, f"{t:.0f}%", va="center", fontsize=7)
    ax.axvline(100.0, color="black", linewidth=1.0, linestyle="--", label="roofline")
    ax.set_yticks(ys, [_label(r) for r in timed], fontsize=8)
    ax.set_ylim(-1.1, 1.6 * max(len(timed), 1) - 0.5)
    ax.set_xlim(0, max([100.0, *ours, *theirs]) * 1.12)
    bw = f"\n(copy {ceilings.copy_gbps:.0f} GB/s, bf16 matmul {ceilings.matmul_tflops:.0f} TFLOP/s)" if ceilings else ""
    ax.set_xlabel("% of the binding roofline: max(DRAM floor, matmul floor) / time")
    ax.set_title(f"How close each case runs to its roofline{bw}")
    fig.legend(loc="outside upper right", ncols=3)  # above the bars, never over one
    ax.grid(axis="x", alpha=0.3)
    if not timed:
        ax.text(0.5, 0.5, "no timed rows", transform=ax.transAxes, ha="center")
    fig.savefig(path, dpi=120)
    return path

