"""The output directory of `kfactory generate`: whole files only, the manifest last, one run per directory.

Each file is written to a temporary name in the directory and renamed into place, so an interrupted
run (Ctrl-C, kill, a full disk) leaves every file either as it was or complete, never truncated. The
manifest is written last: a manifest always lists files that exist. A directory is written into only
when it is new, empty, or holds the output of a generate with the same selection (an earlier or an
interrupted run, which is then replaced); anything else in it is left alone and the run refused.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

MANIFEST = "manifest.json"
SOURCE_SUFFIX = ".hip"
_TEMP_PREFIX = ".kfactory-"
_TEMP_SUFFIX = ".tmp"


class OutputDirError(Exception):
    """The output directory cannot take this run; the message names it and why (one line)."""


@dataclass(frozen=True)
class Selection:
    """The generate filters that decide which instances a directory holds."""

    op: str
    layout: str | None
    dtype: str | None
    ndim: int | None
    family: str | None
    target: str | None = None  # the device target the instances were chosen for
    problem: str | None = None  # generate --problem: the problem's key

    def describe(self) -> str:
        parts = [f"--op {self.op}"] + [f"--{k} {v}" for k, v in asdict(self).items() if k != "op" and v is not None]
        return " ".join(parts)


@dataclass(frozen=True)
class Previous:
    """What an earlier run of the same selection left: the files its manifest listed."""

    files: frozenset[str]


def prepare(out: Path, selection: Selection, names: Iterable[str]) -> Previous:
    """Create `out` or check it may be written by this run; returns the earlier run's files."""
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"--out {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputDirError(f"--out {out}: cannot create the directory: {exc.strerror or exc}") from None
    remove_temporaries(out)
    previous = _previous_run(out, selection)
    ours = {f"{name}{SOURCE_SUFFIX}" for name in names} | previous.files | {MANIFEST}
    foreign = sorted(entry.name for entry in out.iterdir() if entry.name not in ours)
    if foreign:
        raise OutputDirError(
            f"--out {out}: holds {len(foreign)} file(s) this generate would not write (e.g. {foreign[0]!r}); "
            f"choose an empty or new directory"
        )
    return previous


def _previous_run(out: Path, selection: Selection) -> Previous:
    manifest = out / MANIFEST
    if not manifest.exists():
        return Previous(frozenset())
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        recorded = Selection(**data["selection"])
        files = frozenset(str(entry["file"]) for entry in data["instances"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        raise OutputDirError(
            f"--out {out}: holds a {MANIFEST} that is not from this kfactory generate; choose another directory"
        ) from None
    if recorded != selection:
        raise OutputDirError(
            f"--out {out}: holds the output of `generate {recorded.describe()}`; "
            f"choose another directory for `generate {selection.describe()}`"
        )
    if any(Path(name).name != name or not name.endswith(SOURCE_SUFFIX) for name in files):
        raise OutputDirError(f"--out {out}: its {MANIFEST} lists files outside the directory; choose another directory")
    return Previous(files)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename: never a partial file."""
    fd, tmp = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def publish(out: Path, selection: Selection, records: Sequence[Mapping[str, Any]], previous: Previous) -> None:
    """Write the manifest (after every source is in place), then drop the earlier run's leftovers."""
    document = {"op": selection.op, "selection": asdict(selection), "instances": list(records)}
    write_atomic(out / MANIFEST, json.dumps(document, indent=2) + "\n")
    current = {str(r["file"]) for r in records}
    for name in sorted(previous.files - current):
        (out / name).unlink(missing_ok=True)


def remove_temporaries(out: Path) -> None:
    """Temporary files of a run that was killed before it could remove them (or of this run, when an
    interrupt lands between a temporary's creation and write_atomic's own cleanup)."""
    for entry in out.glob(f"{_TEMP_PREFIX}*{_TEMP_SUFFIX}"):
        entry.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
