"""Conversions between ORM rows and the plain records callers see."""

from __future__ import annotations

from datetime import datetime

from .devices import to_device_info
from .models import MeasurementRow, WinnerRow
from .records import Measurement, Winner


def measurement_row(
    problem_key: str, op: str, device_id: int, m: Measurement, recorded_at: datetime
) -> MeasurementRow:
    return MeasurementRow(
        problem_key=problem_key,
        op=op,
        device_id=device_id,
        instance=m.instance,
        source_hash=m.source_hash,
        median_us=m.median_us,
        spread_us=m.spread_us,
        reps=m.reps,
        verified=m.verified,
        error=m.error,
        gbps=m.gbps,
        tflops=m.tflops,
        recorded_at=recorded_at,
    )


def to_measurement(row: MeasurementRow) -> Measurement:
    return Measurement(
        instance=row.instance,
        median_us=row.median_us,
        spread_us=row.spread_us,
        reps=row.reps,
        verified=row.verified,
        error=row.error,
        gbps=row.gbps,
        tflops=row.tflops,
        source_hash=row.source_hash,
    )


def to_winner(row: WinnerRow) -> Winner:
    measurement = row.measurement
    assert measurement.median_us is not None, "a winner always points at a timed measurement"
    return Winner(
        problem_key=row.problem_key,
        op=row.op,
        instance=measurement.instance,
        median_us=measurement.median_us,
        device=to_device_info(row.device),
        recorded_at=measurement.recorded_at,
        source_hash=measurement.source_hash,
    )
