"""The progress bars long commands draw on stderr, and tune_problem's hooks that advance them.

Shared by the CLI and the Python API's long calls (factory.torch.tune), so both show a tune alike.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def progress_bar(disable: bool = False) -> Progress:
    """A bar on stderr; descriptions and lines printed through it are plain text (a problem's "[...]"
    is not rich markup)."""
    return Progress(
        TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True, markup=False, highlight=False), transient=False, disable=disable,
    )


def tune_hooks(bar: Progress) -> dict[str, Any]:
    """tune_problem's progress and on_resume arguments drawing on `bar`.

    A resumed tune's benchmark bar starts at the candidates measured before, out of all of them.
    """
    from .tuner import Progress as TuneProgress

    tasks: dict[str, Any] = {}
    resumed = [0]

    def resume(done: int, total: int) -> None:
        resumed[0] = done
        rest = "" if done < total else "; nothing left to measure (--fresh measures again)"
        bar.console.print(f"resuming: {done} of {total} already measured{rest}")

    def stage(name: str, total: int) -> None:
        offset = resumed[0] if name == "benchmark" else 0
        tasks[name] = bar.add_task(f"{name:9s}", total=total + offset, completed=offset)

    hooks = TuneProgress(
        on_stage=stage,
        on_compiled=lambda name, ok: bar.advance(tasks["compile"]),
        on_measured=lambda m: bar.advance(tasks["benchmark"]),
    )
    return {"progress": hooks, "on_resume": resume}
