"""``fleetwatch detect`` without the command line: a CSV in, the scored CSV out, in pieces.

The file is read as text in pieces of ``piece_rows`` rows (``pd.read_csv(chunksize=…)``), so
memory stays bounded however long the file is; each device keeps its detector from piece to
piece. The columns are chosen on the first piece. Rows are taken per device in timestamp
order within a piece; across pieces, in file order (a recording is expected to be roughly
time-ordered: a row far earlier than the piece before it is still scored, after them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fleetwatch.contracts.settings import Settings
from fleetwatch.filemode.columns import FileColumns, FileModeError, choose_columns
from fleetwatch.filemode.scoring import DEFAULT_CHUNK_ROWS, FileDetector
from fleetwatch.models.base import Detector
from fleetwatch.models.registry import default_detector
from fleetwatch.streaming.scorer.policy import Policy, policy_of

logger = logging.getLogger(__name__)

DEFAULT_PIECE_ROWS = 100_000


@dataclass(frozen=True)
class DetectSummary:
    columns: FileColumns
    rows: int
    devices: int
    alerts: int
    bad_times: int
    no_values: int
    seconds: float
    pools: int | None = None
    """With ``fleet``, how many times the fleet's champions were pooled from new parameters."""

    @property
    def alert_rate(self) -> float:
        return self.alerts / self.rows if self.rows else 0.0

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def pieces(path: Path, piece_rows: int) -> Iterator[pd.DataFrame]:
    """The file as text, ``piece_rows`` rows at a time."""
    try:
        reader = pd.read_csv(
            path, dtype=str, keep_default_na=False, na_filter=False, chunksize=piece_rows
        )
        with reader:
            yield from reader
    except FileNotFoundError as exc:
        raise FileModeError(f"no such file: {path}") from exc
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise FileModeError(f"cannot read {path} as CSV: {exc}") from exc


def detect_csv(
    source: Path,
    out: Path,
    timestamp: str | None = None,
    device: str | None = None,
    values: Sequence[str] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    piece_rows: int = DEFAULT_PIECE_ROWS,
    make: Callable[[], Detector] = default_detector,
    on_piece: Callable[[int, int], None] | None = None,
    fleet: bool = False,
    policy: Policy | None = None,
) -> DetectSummary:
    """Score ``source`` into ``out`` (every input row, its columns, then the scores);
    ``on_piece(rows, alerts)``, if given, after each piece with the totals so far; ``fleet``
    scores the devices as one fleet (:mod:`~fleetwatch.filemode.fleet`); ``policy`` is the
    scorer's (default: the default settings')."""
    if not source.is_file():
        raise FileModeError(f"no such file: {source}")
    started = time.perf_counter()
    detector: FileDetector | None = None
    rows = alerts = 0
    for piece in pieces(source, piece_rows):
        if piece.empty:
            continue
        if detector is None:
            columns = choose_columns(piece, timestamp, device, values)
            detector = FileDetector(
                columns, chunk_rows, make, policy or policy_of(Settings()), fleet
            )
        scored = detector.score_piece(piece)
        scored.to_csv(out, mode="w" if rows == 0 else "a", header=rows == 0, index=False)
        rows += len(scored)
        alerts += int(scored["alert"].sum())
        logger.info("scored %d rows of %s, %d alerts so far", rows, source, alerts)
        if on_piece is not None:
            on_piece(rows, alerts)
    if detector is None:
        raise FileModeError(f"{source} has a header but no rows")
    return DetectSummary(
        detector.columns,
        rows,
        len(detector.devices),
        alerts,
        detector.bad_times,
        detector.no_values,
        time.perf_counter() - started,
        None if detector.pool is None else detector.pool.pools,
    )
