"""``fleetwatch rules test``: rules judged over a recorded CSV with the scorer's own code —
Spark's projection of the rules' SQL (:func:`~fleetwatch.streaming.rules.projection.rule_atoms`)
and the rules query's per-device step (:func:`~fleetwatch.streaming.rules.step.judge`) — so a
rule fires on the file where and when it would have fired live.

The file is read in pieces (bounded memory, as ``fleetwatch detect``); its columns are found as
``detect`` finds them (a timestamp, a device id if there is one, numeric metrics), a ``status``
or ``firmware`` column is the reading's own field. Event time is the file's: the watermark
follows the latest time read less the allowed lateness, and at the end of the file every
window still open is judged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from fleetwatch.contracts.alerts import Alert
from fleetwatch.contracts.rules import RuleSpec
from fleetwatch.filemode.columns import (
    FileModeError,
    TimeKind,
    choose_columns,
    numbers,
    parse_times,
)
from fleetwatch.filemode.csvfile import pieces
from fleetwatch.streaming.rules.compiled import CompiledRule
from fleetwatch.streaming.rules.conditions import READING_FIELDS, compile_rule
from fleetwatch.streaming.rules.processor import Plans, readings_of
from fleetwatch.streaming.rules.projection import atoms_of, metrics_of, rule_atoms
from fleetwatch.streaming.rules.step import BucketRules, Reading, judge, new_bucket

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FILE_DEVICE = "file"
"""The device of a file without a device column."""
NEVER_EXPIRE_MS = 2**62


@dataclass
class RuleTest:
    rules: list[CompiledRule]
    alerts: list[Alert] = field(default_factory=list)
    rows: int = 0
    late: int = 0


def judge_file(
    spark: SparkSession,
    specs: Sequence[RuleSpec],
    path: Path,
    lateness_ms: int,
    piece_rows: int = 50_000,
) -> RuleTest:
    """Every alert event ``specs`` raise over the file at ``path``."""
    rules = [compile_rule(spark, spec) for spec in specs]
    out = RuleTest(rules)
    by_id = {rule.id: rule for rule in rules}
    atoms = atoms_of(rules)
    plans = Plans(atoms, by_id)
    bucket: BucketRules = new_bucket()
    metrics = metrics_of(rules)
    latest = -(2**62)
    columns = None
    for piece in pieces(path, piece_rows):
        if columns is None:
            columns = choose_columns(piece)
            missing = [m for m in metrics if m not in piece.columns]
            if missing:
                raise FileModeError(f"the rules name metrics the file has no column for: {missing}")
        frame = _readings(
            piece, columns.timestamp, columns.device, columns.time_kind, metrics, out.rows
        )
        out.rows += len(piece)
        if frame.empty:
            continue
        computed = rule_atoms(spark.createDataFrame(frame), atoms).toPandas()
        for chunk in _in_time_order(readings_of(computed, plans)):
            # as in the query: a step is judged with the watermark of the steps before it
            result = judge(bucket, chunk, by_id, latest - lateness_ms, 0, NEVER_EXPIRE_MS)
            latest = max(latest, max(r.event_ms for r in chunk))
            out.alerts.extend(a for _, a in result.alerts)
            out.late += result.late
    longest = max((r.window_ms[0] for r in rules if r.window_ms is not None), default=0)
    end = judge(bucket, [], by_id, latest + longest + 1, 0, NEVER_EXPIRE_MS)
    out.alerts.extend(a for _, a in end.alerts)
    return out


def _readings(
    piece: pd.DataFrame,
    timestamp: str,
    device: str | None,
    kind: TimeKind,
    metrics: Sequence[str],
    first_seq: int,
) -> pd.DataFrame:
    times = parse_times(piece[timestamp], kind)
    ok = np.isfinite(times)
    frame = pd.DataFrame(
        {
            "device_id": piece[device].astype(str) if device else FILE_DEVICE,
            "seq": np.arange(first_seq, first_seq + len(piece), dtype=np.int64),
            "event_ms": np.where(ok, times, 0).astype(np.int64),
            "received_ms": np.where(ok, times, 0).astype(np.int64),
        }
    )
    for name in READING_FIELDS:
        if name not in frame.columns:
            frame[name] = piece[name].astype(str) if name in piece.columns else None
    for metric in metrics:
        frame[metric] = numbers(piece[metric])
    return frame.loc[ok].reset_index(drop=True)


def _in_time_order(readings: list[Reading], per_step: int = 1_000) -> Iterator[list[Reading]]:
    """The piece's readings by event time, in steps of ``per_step`` (the watermark moves after
    each, as micro-batches would move it)."""
    ordered = sorted(readings, key=lambda r: (r.event_ms, r.device_id, r.seq))
    for start in range(0, len(ordered), per_step):
        yield ordered[start : start + per_step]
