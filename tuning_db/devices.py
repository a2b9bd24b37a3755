"""Device identity: storing DeviceInfo rows and explaining why a result is not served to a device."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from factory.backends.base import BackendKind, DeviceInfo

from .models import DeviceRow
from .records import DeviceField, Mismatch


def to_device_info(row: DeviceRow) -> DeviceInfo:
    return DeviceInfo(
        backend=BackendKind(row.backend),
        arch=row.arch,
        name=row.name,
        sm_count=row.sm_count,
        driver_version=row.driver_version,
        compiler_version=row.compiler_version,
    )


def _identity(device: DeviceInfo) -> dict[str, object]:
    return {
        "backend": device.backend.value,
        "arch": device.arch,
        "name": device.name,
        "sm_count": device.sm_count,
        "driver_version": device.driver_version,
        "compiler_version": device.compiler_version,
    }


def find_device_id(session: Session, device: DeviceInfo) -> int | None:
    """The stored id of exactly this device, or None if nothing was ever recorded on it."""
    criteria = [getattr(DeviceRow, column) == value for column, value in _identity(device).items()]
    return session.execute(select(DeviceRow.id).where(*criteria)).scalar()


def ensure_device_id(session: Session, device: DeviceInfo) -> tuple[int, bool]:
    """The id of `device`, inserting it if new; the flag says whether it was inserted.

    The insert runs in a savepoint so a concurrent writer on a server database that wins the
    race only costs a re-read, not the caller's transaction.
    """
    found = find_device_id(session, device)
    if found is not None:
        return found, False
    try:
        with session.begin_nested():
            row = DeviceRow(**_identity(device))
            session.add(row)
        return row.id, True
    except IntegrityError:
        found = find_device_id(session, device)
        if found is None:
            raise
        return found, False


def mismatches(recorded: DeviceInfo, current: DeviceInfo) -> list[Mismatch]:
    """Every way `recorded` differs from `current`, each phrased for a user; empty when they match."""
    units = "CUs" if current.backend is BackendKind.HIP else "SMs"
    checks = (
        (DeviceField.BACKEND, recorded.backend.value, current.backend.value,
         "recorded with the {r} backend, this machine uses {c}"),
        (DeviceField.ARCH, recorded.arch, current.arch, "recorded on {r}, this device is {c}"),
        (DeviceField.NAME, recorded.name, current.name, "recorded on {r}, this device is {c}"),
        (DeviceField.SM_COUNT, str(recorded.sm_count), str(current.sm_count),
         "recorded on a device with {r} " + units + ", this one has {c}"),
        (DeviceField.DRIVER, recorded.driver_version, current.driver_version,
         "recorded with driver {r}, this machine has {c}"),
        (DeviceField.COMPILER, recorded.compiler_version, current.compiler_version,
         "recorded with compiler {r}, this machine has {c}"),
    )
    return [
        Mismatch(field, was, now, template.format(r=was, c=now))
        for field, was, now, template in checks
        if was != now
    ]


def mismatch_reasons(recorded: DeviceInfo, current: DeviceInfo) -> list[str]:
    """Every way `recorded` differs from `current`, phrased for a user; empty when they match."""
    return [m.message for m in mismatches(recorded, current)]
