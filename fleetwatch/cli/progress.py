"""Progress bars for long work, on stderr and only when stderr is a terminal: ``detect``,
``replay`` and a ``train`` backfill. Piped or captured output gets none."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fleetwatch.contracts import wire
from fleetwatch.contracts.settings import KafkaSettings
from fleetwatch.kafka_topic import end_offsets

Update = Callable[[int], None]
"""``update(completed)``: how far the work is, in the bar's units."""

_err = Console(stderr=True)
POLL_S = 0.5


def attached() -> bool:
    """Whether a bar would be seen: stderr is a terminal."""
    return _err.is_terminal


@contextmanager
def bar(description: str, total: int | None) -> Iterator[Update]:
    """A bar while the block runs (``total`` None: a count without an end), removed when it
    ends; log lines printed meanwhile appear above it. Off a terminal, ``update`` does
    nothing."""
    if not attached():
        yield lambda completed: None
        return
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=_err,
        transient=True,
    )
    task = progress.add_task(description, total=total)
    with progress, _logging_above():
        yield lambda completed: progress.update(task, completed=completed)


@contextmanager
def _logging_above() -> Iterator[None]:
    """The root logger's stderr handlers write through rich's stand-in for stderr meanwhile,
    which prints each line above the bar instead of through it."""
    moved = [
        (h, h.stream)
        for h in logging.getLogger().handlers
        if isinstance(h, logging.StreamHandler) and h.stream is sys.__stderr__
    ]
    for handler, _ in moved:
        handler.setStream(sys.stderr)
    try:
        yield
    finally:
        for handler, stream in moved:
            handler.setStream(stream)


def offsets_read(report: dict[str, Any], topic: str) -> int | None:
    """From a Spark progress report: the sum over ``topic``'s partitions of the offset its
    Kafka source has read to, or None when no source reads ``topic``."""
    for source in report.get("sources", []):
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if isinstance(end, dict) and isinstance(end.get(topic), dict):
            return sum(int(offset) for offset in end[topic].values())
    return None


def log_end(kafka: KafkaSettings, topic: str) -> int | None:
    """The sum of ``topic``'s partitions' end offsets: where a bar of offsets read ends (None
    when the topic cannot be read; the bar then has no end)."""
    try:
        return sum(end_offsets(kafka, topic).values())
    except (KeyError, KafkaException):
        return None


def reports_to(update: Update, topic: str) -> Callable[[dict[str, Any]], None]:
    """A handler of a query's progress reports that moves a bar: to the offsets of ``topic``
    read so far, or, when no Kafka source reads it (files), by the rows read."""
    rows = 0

    def handle(report: dict[str, Any]) -> None:
        nonlocal rows
        rows += int(report.get("numInputRows") or 0)
        read = offsets_read(report, topic)
        update(rows if read is None else read)

    return handle


class ReportFollower:
    """Hands the progress reports a query appends to ``path`` (one JSON line each, the
    ``spark.progress_log`` file) to ``handle`` from a thread, from the file's end as of
    :meth:`start` on; :meth:`stop` reads what is left and joins the thread."""

    def __init__(self, path: Path, handle: Callable[[dict[str, Any]], None]) -> None:
        self.path = path
        self.handle = handle
        self._position = path.stat().st_size if path.exists() else 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cli-progress")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self._read()

    def _loop(self) -> None:
        while not self._done.wait(POLL_S):
            self._read()

    def _read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self._position)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # the rest of a line still being written
                self._position += len(line)
                if (report := wire.loads_object(line)) is not None:
                    self.handle(report)
