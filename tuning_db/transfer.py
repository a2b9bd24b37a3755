"""The JSON export format, so tuning results can move between machines and databases."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from factory.backends.base import BackendKind, DeviceInfo

from .errors import DatabaseFileError
from .models import SCHEMA_VERSION
from .records import Measurement

FORMAT = "kernel-factory-tuning"


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


def write_document(path: str | os.PathLike[str], document: TransferDocument) -> None:
    """Write atomically (temp file + rename) so a crash never leaves half an export."""
    target = Path(path)
    payload = json.dumps(_encode(document), indent=1)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(payload)
            handle.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_document(path: str | os.PathLike[str]) -> TransferDocument:
    """Parse and validate an export; any defect raises DatabaseFileError with one line."""
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
        return _decode(raw)
    except OSError as exc:
        raise DatabaseFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatabaseFileError(f"{path}: not a JSON file ({_one_line(exc)})") from None
    except _Invalid as exc:
        raise DatabaseFileError(f"{path}: not a usable {FORMAT} export: {_one_line(exc)}") from None


def _one_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


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
                "median_us": m.measurement.median_us,
                "spread_us": m.measurement.spread_us,
                "reps": m.measurement.reps,
                "verified": m.measurement.verified,
                "error": m.measurement.error,
                "gbps": m.measurement.gbps,
                "tflops": m.measurement.tflops,
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


def _decode(raw: Any) -> TransferDocument:
    if not isinstance(raw, Mapping) or raw.get("format") != FORMAT:
        raise _Invalid(f'missing "format": "{FORMAT}"')
    version = _field(raw, "schema_version", int)
    if version > SCHEMA_VERSION:
        raise _Invalid(
            f"schema version {version} is newer than this kernel-factory supports ({SCHEMA_VERSION}); "
            f"upgrade kernel-factory"
        )
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
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        label = f"{where}." if where else ""
        raise _Invalid(f'{label}{key} must be {kind.__name__}{" or null" if optional else ""}')
    return value


def _device(item: Any, index: int) -> DeviceInfo:
    where = f"devices[{index}]"
    backend = _field(item, "backend", str, where=where)
    try:
        kind = BackendKind(backend)
    except ValueError:
        raise _Invalid(f"{where}.backend {backend!r} is not one of {[k.value for k in BackendKind]}") from None
    return DeviceInfo(
        backend=kind,
        arch=_field(item, "arch", str, where=where),
        name=_field(item, "name", str, where=where),
        sm_count=_field(item, "sm_count", int, where=where),
        driver_version=_field(item, "driver_version", str, where=where),
        compiler_version=_field(item, "compiler_version", str, where=where),
    )


def _measurement(item: Any, index: int, device_count: int) -> TransferMeasurement:
    where = f"measurements[{index}]"
    device = _field(item, "device", int, where=where)
    if not 0 <= device < device_count:
        raise _Invalid(f"{where}.device {device} refers to no device")
    stamp = _field(item, "recorded_at", str, where=where)
    try:
        recorded_at = datetime.fromisoformat(stamp)
    except ValueError:
        raise _Invalid(f"{where}.recorded_at {stamp!r} is not an ISO timestamp") from None
    if recorded_at.tzinfo is None:
        recorded_at = recorded_at.replace(tzinfo=timezone.utc)
    measurement = Measurement(
        instance=_field(item, "instance", str, where=where),
        median_us=_field(item, "median_us", float, optional=True, where=where),
        spread_us=_field(item, "spread_us", float, optional=True, where=where),
        reps=_field(item, "reps", int, where=where),
        verified=_field(item, "verified", bool, where=where),
        error=_field(item, "error", str, optional=True, where=where),
        gbps=_field(item, "gbps", float, optional=True, where=where),
        tflops=_field(item, "tflops", float, optional=True, where=where),
        # Absent from exports of schema 1: measured on unknown code.
        source_hash=_field(item, "source_hash", str, optional=True, where=where),
    )
    return TransferMeasurement(
        problem_key=_field(item, "problem_key", str, where=where),
        op=_field(item, "op", str, where=where),
        device=device,
        measurement=measurement,
        recorded_at=recorded_at.astimezone(timezone.utc),
    )


def _winner(
    item: Any, index: int, devices: Sequence[DeviceInfo], measurements: Sequence[TransferMeasurement]
) -> TransferWinner:
    where = f"winners[{index}]"
    winner = TransferWinner(
        problem_key=_field(item, "problem_key", str, where=where),
        op=_field(item, "op", str, where=where),
        device=_field(item, "device", int, where=where),
        measurement=_field(item, "measurement", int, where=where),
    )
    if not 0 <= winner.device < len(devices):
        raise _Invalid(f"{where}.device {winner.device} refers to no device")
    if not 0 <= winner.measurement < len(measurements):
        raise _Invalid(f"{where}.measurement {winner.measurement} refers to no measurement")
    target = measurements[winner.measurement]
    if (target.problem_key, target.device) != (winner.problem_key, winner.device):
        raise _Invalid(f"{where} points at a measurement of another problem or device")
    if not target.measurement.verified or target.measurement.median_us is None:
        raise _Invalid(f"{where} points at an unverified or failed measurement")
    return winner
