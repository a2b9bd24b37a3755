"""The JSON export format, so tuning results can move between machines and databases.

Writing never damages what is at the target: an export goes to a temporary file in the target's
directory and is renamed over it, and only a new path, an empty file or an earlier export may be
replaced (never the database itself, a device node, a directory, a symlink or a read-only file).
Reading validates every field, so an import can add only rows `tune` itself could have written.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from factory.backends.base import BackendKind, DeviceInfo
from factory.problem import Op

from .errors import DatabaseFileError
from .models import PROBLEM_KEY_LENGTH, SCHEMA_VERSION
from .records import Measurement

FORMAT = "kernel-factory-tuning"

# Bounds on imported values: the columns' sizes, and numbers no real GPU or run comes near.
_INSTANCE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,256}")
_SHORT_TEXT = 64  # arch, driver and compiler versions
_DEVICE_NAME = 256
_ERROR_TEXT = 65536
_MAX_SM_COUNT = 1 << 20
_MAX_REPS = 1 << 24
_MAX_US = 1e12  # 11.6 days for one kernel run
_KNOWN_OPS = frozenset(op.value for op in Op)
# What an export starts with: the first key written by _encode.
_EXPORT_HEAD = re.compile(rb'^\s*\{\s*"format"\s*:\s*"' + FORMAT.encode() + rb'"')
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


@dataclass(frozen=True)
class TransferMeasurement:
    """A measurement with its context; `device` indexes the document's device list."""

    problem_key: str
    op: str
    device: int
    measurement: Measurement
    recorded_at: datetime


@dataclass(frozen=True)
class TransferWinner:
    """A winner; `measurement` indexes the document's measurement list."""

    problem_key: str
    op: str
    device: int
    measurement: int


@dataclass(frozen=True)
class TransferDocument:
    schema_version: int
    devices: tuple[DeviceInfo, ...]
    measurements: tuple[TransferMeasurement, ...]
    winners: tuple[TransferWinner, ...]

    @property
    def rows(self) -> int:
        return len(self.devices) + len(self.measurements) + len(self.winners)


class _Invalid(ValueError):
    """A structural problem in a document; becomes a DatabaseFileError naming the file."""


# --- writing -------------------------------------------------------------------------------------
def write_document(path: str | os.PathLike[str], document: TransferDocument, *, compact: bool = False) -> None:
    """Write atomically (temp file + rename) so a crash never leaves half an export.

    The file gets the mode a new file of this process would (0666 less the umask). `compact` leaves out
    the indentation and spaces (the package's shipped files: thousands of winners, read by programs only).
    """
    target = Path(path)
    check_export_target(target)
    layout: dict[str, Any] = {"separators": (",", ":")} if compact else {"indent": 1}
    payload = json.dumps(_encode(document), allow_nan=False, **layout)
    tmp: str | None = None
    # One protected region from the temp file's creation on: a Ctrl-C between creating it and entering
    # a second `try` would leave it behind.
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(payload)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise DatabaseFileError(f"{target}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def check_export_target(target: Path) -> None:
    """Refuse a target whose replacement would lose something: only a new path, an empty regular
    file or an earlier export may be written. The tuning DB itself is refused by the same rule."""
    if str(target) in ("", ".") or target.name in ("", ".", ".."):
        raise DatabaseFileError(f"{str(target)!r}: not a file name")
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        if not target.parent.is_dir():
            raise DatabaseFileError(f"{target}: directory {target.parent} does not exist") from None
        return
    except OSError as exc:
        raise DatabaseFileError(f"{target}: cannot write: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise DatabaseFileError(f"{target}: is a symbolic link; export writes a new file or replaces an earlier export")
    if not stat.S_ISREG(st.st_mode):
        raise DatabaseFileError(f"{target}: not a regular file; export writes a new file or replaces an earlier export")
    if not st.st_mode & 0o222:
        raise DatabaseFileError(f"{target}: is read-only; export leaves it alone")
    if target.name.endswith(_SQLITE_SIDE_FILES):
        raise DatabaseFileError(f"{target}: looks like a database's side file; export leaves it alone")
    if st.st_size and not _is_export(target):
        raise DatabaseFileError(
            f"{target}: exists and is not a {FORMAT} export (a database?); export writes a new file "
            f"or replaces an earlier export"
        )


def _is_export(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return _EXPORT_HEAD.match(handle.read(256)) is not None
    except OSError:
        return False


def _umask() -> int:
    """This process's umask, read without changing it where Linux allows."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _finite(value: float | None) -> float | None:
    """JSON has no Infinity or NaN: a time that is not a number is exported as no time."""
    return value if value is None or math.isfinite(value) else None


def _encode(document: TransferDocument) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "schema_version": document.schema_version,
        "devices": [
            {
                "backend": d.backend.value,
                "arch": d.arch,
                "name": d.name,
                "sm_count": d.sm_count,
                "driver_version": d.driver_version,
                "compiler_version": d.compiler_version,
            }
            for d in document.devices
        ],
        "measurements": [
            {
                "problem_key": m.problem_key,
                "op": m.op,
                "device": m.device,
                "instance": m.measurement.instance,
                "median_us": _finite(m.measurement.median_us),
                "spread_us": _finite(m.measurement.spread_us),
                "reps": m.measurement.reps,
                "verified": m.measurement.verified and _finite(m.measurement.median_us) is not None,
                "error": m.measurement.error,
                "gbps": _finite(m.measurement.gbps),
                "tflops": _finite(m.measurement.tflops),
                "source_hash": m.measurement.source_hash,
                "recorded_at": m.recorded_at.astimezone(timezone.utc).isoformat(),
            }
            for m in document.measurements
        ],
        "winners": [
            {"problem_key": w.problem_key, "op": w.op, "device": w.device, "measurement": w.measurement}
            for w in document.winners
        ],
    }


# --- reading -------------------------------------------------------------------------------------
def read_document(path: str | os.PathLike[str]) -> TransferDocument:
    """Parse and validate an export; any defect raises DatabaseFileError with one line."""
    try:
        _check_readable(Path(path))
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle, parse_constant=_no_constant)
        return _decode(raw)
    except OSError as exc:
        raise DatabaseFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatabaseFileError(f"{path}: not a JSON file ({_one_line(exc)})") from None
    except RecursionError:
        raise DatabaseFileError(f"{path}: not a usable {FORMAT} export: nested too deeply") from None
    except _Invalid as exc:
        raise DatabaseFileError(f"{path}: not a usable {FORMAT} export: {_one_line(exc)}") from None
    except ValueError as exc:  # an integer of thousands of digits, NaN / Infinity
        raise DatabaseFileError(f"{path}: not a usable {FORMAT} export: {_one_line(exc)}") from None


def _check_readable(path: Path) -> None:
    """A FIFO or a device would block or never end: only regular files are read."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise _Invalid("not a regular file")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _one_line(exc: Exception) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= 200 else line[:200] + "..."


def _decode(raw: Any) -> TransferDocument:
    if not isinstance(raw, Mapping) or raw.get("format") != FORMAT:
        raise _Invalid(f'missing "format": "{FORMAT}"')
    version = _field(raw, "schema_version", int)
    if version > SCHEMA_VERSION:
        raise _Invalid(
            f"schema version {version} is newer than this kernel-factory supports ({SCHEMA_VERSION}); "
            f"upgrade kernel-factory"
        )
    if version < 1:
        raise _Invalid(f"schema version {version} is not one kernel-factory ever wrote")
    devices = tuple(_device(item, i) for i, item in enumerate(_list(raw, "devices")))
    measurements = tuple(
        _measurement(item, i, len(devices)) for i, item in enumerate(_list(raw, "measurements"))
    )
    winners = tuple(_winner(item, i, devices, measurements) for i, item in enumerate(_list(raw, "winners")))
    return TransferDocument(version, devices, measurements, winners)


def _list(raw: Mapping[str, Any], key: str) -> Sequence[Any]:
    value = raw.get(key)
    if not isinstance(value, list):
        raise _Invalid(f'"{key}" must be a list')
    return value


def _field(item: Any, key: str, kind: type, *, optional: bool = False, where: str = "") -> Any:
    if not isinstance(item, Mapping):
        raise _Invalid(f"{where or 'document'} is not an object")
    value = item.get(key)
    if value is None and optional:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError:
            raise _Invalid(f"{where}.{key} is out of range") from None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        label = f"{where}." if where else ""
        raise _Invalid(f'{label}{key} must be {kind.__name__}{" or null" if optional else ""}')
    return value


def _text(item: Any, key: str, where: str, limit: int) -> str:
    """A non-empty string of printable characters, at most `limit` long."""
    value = _field(item, key, str, where=where)
    if not value or len(value) > limit or not value.isprintable():
        raise _Invalid(f"{where}.{key} must be 1 to {limit} printable characters")
    return value


def _int_in(item: Any, key: str, where: str, low: int, high: int) -> int:
    value = _field(item, key, int, where=where)
    if not low <= value <= high:
        raise _Invalid(f"{where}.{key} {value if abs(value) < 10**12 else '(huge)'} is not in {low}..{high}")
    return value


def _number(item: Any, key: str, where: str, *, positive: bool) -> float | None:
    """An optional finite number, > 0 (`positive`) or >= 0; a time of 0 would beat every real one."""
    value = _field(item, key, float, optional=True, where=where)
    if value is None:
        return None
    low_ok = value > 0.0 if positive else value >= 0.0
    if not (math.isfinite(value) and low_ok and value <= _MAX_US * 1e6):
        raise _Invalid(f"{where}.{key} {value!r} must be a finite number {'> 0' if positive else '>= 0'}")
    return value


def _op(item: Any, where: str) -> str:
    op = _field(item, "op", str, where=where)
    if op not in _KNOWN_OPS:
        raise _Invalid(f"{where}.op {op[:64]!r} is not one of {sorted(_KNOWN_OPS)}")
    return op


def _device(item: Any, index: int) -> DeviceInfo:
    where = f"devices[{index}]"
    backend = _field(item, "backend", str, where=where)
    try:
        kind = BackendKind(backend)
    except ValueError:
        raise _Invalid(f"{where}.backend {backend[:64]!r} is not one of {[k.value for k in BackendKind]}") from None
    return DeviceInfo(
        backend=kind,
        arch=_text(item, "arch", where, _SHORT_TEXT),
        name=_text(item, "name", where, _DEVICE_NAME),
        sm_count=_int_in(item, "sm_count", where, 1, _MAX_SM_COUNT),
        driver_version=_text(item, "driver_version", where, _SHORT_TEXT),
        compiler_version=_text(item, "compiler_version", where, _SHORT_TEXT),
    )


def _measurement(item: Any, index: int, device_count: int) -> TransferMeasurement:
    where = f"measurements[{index}]"
    device = _field(item, "device", int, where=where)
    if not 0 <= device < device_count:
        raise _Invalid(f"{where}.device refers to no device")
    instance = _field(item, "instance", str, where=where)
    if not _INSTANCE_NAME.fullmatch(instance):
        raise _Invalid(f"{where}.instance {instance[:64]!r} is not an instance name")
    median = _number(item, "median_us", where, positive=True)
    verified = _field(item, "verified", bool, where=where)
    if verified and median is None:
        raise _Invalid(f"{where} is verified but has no time")
    if median is not None and median > _MAX_US:
        raise _Invalid(f"{where}.median_us {median!r} is not a plausible time")
    error = _field(item, "error", str, optional=True, where=where)
    if error is not None and len(error) > _ERROR_TEXT:
        raise _Invalid(f"{where}.error is longer than {_ERROR_TEXT} characters")
    measurement = Measurement(
        instance=instance,
        median_us=median,
        spread_us=_number(item, "spread_us", where, positive=False),
        reps=_int_in(item, "reps", where, 0, _MAX_REPS),
        verified=verified,
        error=error,
        gbps=_number(item, "gbps", where, positive=False),
        tflops=_number(item, "tflops", where, positive=False),
        source_hash=_source_hash(item, where),
    )
    return TransferMeasurement(
        problem_key=_text(item, "problem_key", where, PROBLEM_KEY_LENGTH),
        op=_op(item, where),
        device=device,
        measurement=measurement,
        recorded_at=_timestamp(item, where),
    )


_SOURCE_HASH = re.compile(r"[0-9a-f]{64}")


def _source_hash(item: Any, where: str) -> str | None:
    """The sha256 of the source the measurement timed; absent (exports of schema 1): unknown code."""
    value = _field(item, "source_hash", str, optional=True, where=where)
    if value is not None and not _SOURCE_HASH.fullmatch(value):
        raise _Invalid(f"{where}.source_hash {value[:64]!r} is not a sha256 hex digest")
    return value


def _timestamp(item: Any, where: str) -> datetime:
    stamp = _field(item, "recorded_at", str, where=where)
    try:
        recorded_at = datetime.fromisoformat(stamp)
    except ValueError:
        raise _Invalid(f"{where}.recorded_at {stamp[:64]!r} is not an ISO timestamp") from None
    if recorded_at.tzinfo is None:
        recorded_at = recorded_at.replace(tzinfo=timezone.utc)
    try:
        return recorded_at.astimezone(timezone.utc)
    except OverflowError:
        raise _Invalid(f"{where}.recorded_at {stamp[:64]!r} is out of range") from None


def _winner(
    item: Any, index: int, devices: Sequence[DeviceInfo], measurements: Sequence[TransferMeasurement]
) -> TransferWinner:
    where = f"winners[{index}]"
    winner = TransferWinner(
        problem_key=_text(item, "problem_key", where, PROBLEM_KEY_LENGTH),
        op=_op(item, where),
        device=_field(item, "device", int, where=where),
        measurement=_field(item, "measurement", int, where=where),
    )
    if not 0 <= winner.device < len(devices):
        raise _Invalid(f"{where}.device refers to no device")
    if not 0 <= winner.measurement < len(measurements):
        raise _Invalid(f"{where}.measurement refers to no measurement")
    target = measurements[winner.measurement]
    if (target.problem_key, target.device, target.op) != (winner.problem_key, winner.device, winner.op):
        raise _Invalid(f"{where} points at a measurement of another problem, op or device")
    if not target.measurement.verified or target.measurement.median_us is None:
        raise _Invalid(f"{where} points at an unverified or failed measurement")
    return winner
