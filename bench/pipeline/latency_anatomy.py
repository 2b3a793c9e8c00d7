"""Where a probe's end-to-end latency went: its reading's hops matched with the scorer's
micro-batches (from the scorer's progress log, ``spark.progress_log``) and the JVM's GC pauses
(from its ``-Xlog:gc`` file).

A reading published at ``published`` reaches ``telemetry.raw`` at ``raw`` (a consumer's
arrival), is taken by the first micro-batch that starts after that (its offsets are read at
the start), and its alert reaches a consumer of ``alerts`` at ``alert``. So:

    latency = ingest (raw - published) + wait (batch start - raw)
              + batch (its triggerExecution) + deliver (alert - batch end)

``wait`` is the part of the batch in progress when the reading arrived that was left to run.
``deliver`` is mostly negative: the sink writes the alert within ``addBatch``, before the
batch's offsets and commit logs are written and its progress is reported.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

PARTS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
_GC = re.compile(
    r"^\[(?P<at>[^\]]+)\].*GC\(\d+\) (?P<what>Pause [^(]*\([^)]*\)).* (?P<ms>[\d.]+)ms$"
)


@dataclass(frozen=True)
class Batch:
    id: int
    start_ms: float
    duration_ms: float
    rows: int
    report: dict[str, Any]

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.duration_ms


def _epoch_ms(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def batches(progress_log: Path) -> list[Batch]:
    """The data batches of a progress log, in order of start."""
    out: list[Batch] = []
    if not progress_log.exists():
        return out
    for line in progress_log.read_text().splitlines():
        report = json.loads(line)
        out.append(
            Batch(
                int(report["batchId"]),
                _epoch_ms(report["timestamp"]),
                float(report.get("durationMs", {}).get("triggerExecution", 0)),
                int(report.get("numInputRows", 0)),
                report,
            )
        )
    return sorted(out, key=lambda b: b.start_ms)


def gc_pauses(gc_log: Path) -> list[tuple[float, float, str]]:
    """(end epoch ms, pause ms, what) of each stop-the-world pause in a ``-Xlog:gc:…:time``
    file."""
    out: list[tuple[float, float, str]] = []
    if not gc_log.exists():
        return out
    for line in gc_log.read_text().splitlines():
        m = _GC.match(line.strip())
        if m:
            at = datetime.strptime(m["at"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000
            out.append((at, float(m["ms"]), m["what"]))
    return out


def anatomy(batch: Batch, pauses: list[tuple[float, float, str]]) -> dict[str, Any]:
    """One batch: its parts, rows, state operator and GC pauses within it."""
    d = batch.report.get("durationMs", {})
    op = (batch.report.get("stateOperators") or [{}])[0]
    custom = {k: v for k, v in (op.get("customMetrics") or {}).items() if v}
    gc = [p for p in pauses if batch.start_ms <= p[0] <= batch.end_ms]
    return {
        "batch": batch.id,
        "ms": batch.duration_ms,
        "rows": batch.rows,
        **{k: d.get(k, 0) for k in PARTS},
        "state_commit_ms": op.get("commitTimeMs"),
        "state_updates_ms": op.get("allUpdatesTimeMs"),
        "state_rows": op.get("numRowsTotal"),
        "state_mb": round(int(op.get("memoryUsedBytes", 0)) / 1e6, 1),
        "gc_pauses": len(gc),
        "gc_ms": round(sum(p[1] for p in gc), 1),
        # the store's latencies of this batch; not its file counts (``rocksdbFilesCopied``,
        # ``rocksdbFilesReused``): they are the last snapshot upload's, by the maintenance task,
        # and repeat unchanged in every report until the next one
        "rocksdb": {
            k: v
            for k, v in custom.items()
            if k.startswith("rocksdb") and ("Latency" in k or "Snapshot" in k)
        },
    }


def decompose(
    published: dict[Any, int],
    raw: dict[Any, int],
    alert: dict[Any, int],
    runs: list[Batch],
    pauses: list[tuple[float, float, str]],
    worst: float = 1.0,
) -> dict[str, Any]:
    """Each probe's latency in its four parts; their percentiles; the slowest ``worst`` % of
    probes with the batch they waited on and their own; the slowest ``worst`` % of batches."""
    starts = np.array([b.start_ms for b in runs])
    rows: list[dict[str, Any]] = []
    for key, t_pub in published.items():
        if key not in raw or key not in alert or not len(starts):
            continue
        i = int(np.searchsorted(starts, raw[key]))
        if i >= len(runs):
            continue
        own = runs[i]
        rows.append(
            {
                "key": key,
                "latency": alert[key] - t_pub,
                "ingest": raw[key] - t_pub,
                "wait": own.start_ms - raw[key],
                "batch": own.duration_ms,
                "deliver": alert[key] - own.end_ms,
                "own": own,
                "before": runs[i - 1] if i > 0 else None,
            }
        )
    if not rows:
        return {"probes": 0}
    parts = ("latency", "ingest", "wait", "batch", "deliver")
    summary: dict[str, Any] = {
        "probes": len(rows),
        **{
            p: {
                q: round(float(np.percentile([r[p] for r in rows], int(q[1:]))), 1)
                for q in ("p50", "p95", "p99")
            }
            for p in parts
        },
    }
    n = max(1, int(np.ceil(len(rows) * worst / 100)))
    slow = sorted(rows, key=lambda r: -r["latency"])[:n]
    summary["slowest_probes"] = [
        {
            **{p: round(float(r[p]), 1) for p in parts},
            "waited_on": None if r["before"] is None else anatomy(r["before"], pauses),
            "own_batch": anatomy(r["own"], pauses),
        }
        for r in slow
    ]
    data = [b for b in runs if b.rows > 0]
    durations = [b.duration_ms for b in data]
    m = max(1, int(np.ceil(len(data) * worst / 100)))
    summary["batches"] = {
        "n": len(data),
        "p50": round(float(np.percentile(durations, 50)), 1) if data else None,
        "p99": round(float(np.percentile(durations, 99)), 1) if data else None,
        "gc_pauses": len(pauses),
        "gc_ms_p99": round(float(np.percentile([p[1] for p in pauses], 99)), 1) if pauses else None,
        "slowest": [anatomy(b, pauses) for b in sorted(data, key=lambda b: -b.duration_ms)[:m]],
    }
    return summary
