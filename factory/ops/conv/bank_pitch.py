"""What the channels-last tile families (`dwc` backward-data, `dwl` and `gwl` backward-weight) share. They
lay a tile out in shared memory as rows of positions x a chunk of groups, and their threads read `vector`
groups each, the threads of a warp taking group vectors first, then thread tiles down the rows, then
across the columns: row pitches chosen so a warp's reads of one step fall into distinct banks, and the
cells a tuning point fits. `gwl` reads its tiles with matrix fragments instead (ldmatrix: eight rows of 16
bytes a phase): `fragment_rows_pitch` spreads those rows over the banks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BANK_BYTES = 4
BANKS = 32
ACCESS_BYTES_A_WAVEFRONT = 128  # shared memory serves a warp's wide accesses 128 bytes at a time
WARP = 32
VECTOR_BYTES_MAX = 16


@dataclass(frozen=True)
class ThreadTiles:
    """How a block's threads read a shared tile: `cv` group vectors of `vector` elements side by side,
    then `across_h` thread tiles `row_step` rows apart, then thread tiles `col_step` elements apart
    along a row."""

    threads: int
    cv: int
    vector: int
    across_h: int
    row_step: int
    col_step: int


def conflict_free_pitch(tiles: ThreadTiles, least: int, element_bytes: int) -> int:
    """The row pitch in elements: at least `least`, stepping by the vector, and the first that puts the
    reads of a warp's threads at one step into distinct banks within each 128-byte wavefront (else the
    one with the fewest words on one bank)."""
    access = tiles.vector * element_bytes
    lanes_a_wavefront = max(1, ACCESS_BYTES_A_WAVEFRONT // access)
    best, best_conflicts = least, None
    for pitch in range(least, least + ACCESS_BYTES_A_WAVEFRONT // element_bytes + 1, tiles.vector):
        conflicts = 0
        for first in range(0, min(WARP, tiles.threads), lanes_a_wavefront):
            banks: dict[int, set[int]] = {}
            for lane in range(first, min(first + lanes_a_wavefront, tiles.threads)):
                v, q = lane % tiles.cv, lane // tiles.cv
                ph, pw = q % tiles.across_h, q // tiles.across_h
                start = (ph * tiles.row_step * pitch + pw * tiles.col_step + v * tiles.vector) * element_bytes
                for word in range(start // BANK_BYTES, (start + access) // BANK_BYTES):
                    banks.setdefault(word % BANKS, set()).add(word)
            conflicts = max(conflicts, max(len(words) for words in banks.values()))
        if best_conflicts is None or conflicts < best_conflicts:
            best, best_conflicts = pitch, conflicts
        if conflicts == 1:
            break
    return best


def aligned(elements: int, element_bytes: int) -> int:
    """`elements` rounded up to a whole number of 16-byte copies (a shared-memory region's start)."""
    return -(-elements * element_bytes // VECTOR_BYTES_MAX) * VECTOR_BYTES_MAX // element_bytes


def tile_point_fits(params: Any, element_bytes: int, ndim: int) -> bool:
    """Whether a tile point fits a cell: its compiled filter has the cell's rank, a 1-D point is one thread
    tile tall, and a thread's vector is one access of at most 16 bytes."""
    if len(params.compiled.filter) != ndim or (ndim == 1 and params.across_h * params.rows != 1):
        return False
    return params.vector * element_bytes <= VECTOR_BYTES_MAX


def most_on_one_bank(row_step_bytes: int, element_bytes: int) -> int:
    """Words one bank serves for a warp's fragment read of a tile whose consecutive reduction rows (output
    positions) are `row_step_bytes` apart: ldmatrix reads 8 rows of 16 bytes a phase (16-bit operands);
    the fp32 path reads 4 rows of 8 words."""
    rows, words = (8, 4) if element_bytes == 2 else (4, 8)
    banks: dict[int, set[int]] = {}
    for r in range(rows):
        first = r * row_step_bytes // BANK_BYTES
        for w in range(first, first + words):
            banks.setdefault(w % BANKS, set()).add(w)
    return max(len(ws) for ws in banks.values())


def fragment_rows_pitch(least: int, step: int, element_bytes: int) -> int:
    """The pitch in elements between a tile's reduction rows (positions) that matrix fragments read: at least
    `least`, a whole number of 16-byte copies, and the first whose fragment reads (rows `step` positions
    apart) spread over the most banks."""
    unit = VECTOR_BYTES_MAX // element_bytes
    first = -(-least // unit) * unit
    candidates = range(first, first + 8 * unit + 1, unit)
    return min(candidates, key=lambda pitch: (most_on_one_bank(step * pitch * element_bytes, element_bytes), pitch))
