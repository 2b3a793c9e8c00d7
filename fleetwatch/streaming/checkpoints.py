"""Reading Spark streaming checkpoints: where a query got to, and carrying on from there when
the query's plan changes.

Spark cannot restart a query on a checkpoint written by a different stateful plan. Each job
therefore keeps its checkpoint under a plan version (``score-v2``); when the version moves on,
the new query starts from the source offsets the previous version last committed, so an upgrade
neither skips readings nor scores the whole log again. The jobs read their checkpoints through
Hadoop's filesystem API (:mod:`~fleetwatch.streaming.checkpoint_files`), wherever they are.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import TypeVar

from confluent_kafka.admin import AdminClient

from fleetwatch.contracts.settings import KafkaSettings
from fleetwatch.kafka_config import client_config
from fleetwatch.streaming.checkpoint_files import CheckpointFiles, LocalFiles, join

logger = logging.getLogger(__name__)

Where = TypeVar("Where", str, Path)
"""A checkpoint's place: a Hadoop filesystem URI or local path as text, or a local ``Path``."""

LOCAL = LocalFiles()


def committed_offsets(
    checkpoint: str | Path, topic: str, files: CheckpointFiles = LOCAL
) -> dict[int, int]:
    """Source offsets of ``topic`` after the last committed micro-batch (outputs written);
    empty if the checkpoint has committed nothing."""
    root = str(checkpoint)
    commits = sorted(
        (n for n in files.names(join(root, "commits")) if n.isdigit()), key=int, reverse=True
    )
    if not commits:
        return {}
    lines = files.read_text(join(root, "offsets", commits[0])).splitlines()
    for line in reversed(lines):
        try:
            sources = json.loads(line)
        except ValueError:
            continue
        if isinstance(sources, dict) and topic in sources:
            return {int(p): int(o) for p, o in sources[topic].items()}
    return {}


def versioned(root: Where, job: str, version: int) -> Where:
    name = f"{job}-v{version}"
    return root / name if isinstance(root, Path) else join(root, name)


def previous_offsets(
    root: str | Path, job: str, version: int, topic: str, files: CheckpointFiles = LOCAL
) -> dict[int, int]:
    """Offsets committed by the newest earlier plan version of ``job`` (or an unversioned
    checkpoint), when the current version has no checkpoint yet."""
    root = str(root)
    if files.exists(versioned(root, job, version)):
        return {}
    pattern = re.compile(rf"^{re.escape(job)}(?:-v(\d+))?$")
    older = []
    for name in files.names(root):
        if (m := pattern.match(name)) and int(m.group(1) or 0) < version:
            older.append((int(m.group(1) or 0), name))
    for _, name in sorted(older, reverse=True):
        if offsets := committed_offsets(join(root, name), topic, files):
            logger.info("continuing %s v%d from the offsets of %s: %s", job, version, name, offsets)
            return offsets
    return {}


def starting_offsets(topic: str, offsets: dict[int, int], partitions: list[int]) -> str:
    """Spark's ``startingOffsets`` JSON; partitions the old query never saw start earliest (-2)."""
    return json.dumps({topic: {str(p): offsets.get(p, -2) for p in sorted(partitions)}})


def resume_offsets(
    root: str, job: str, version: int, topic: str, kafka: KafkaSettings, files: CheckpointFiles
) -> str:
    """``startingOffsets`` for a query's first start: earliest, or after a plan change where the
    previous plan stopped (partitions it never saw start earliest)."""
    offsets = previous_offsets(root, job, version, topic, files)
    if not offsets:
        return "earliest"
    admin = AdminClient(client_config(kafka))
    partitions = list(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    return starting_offsets(topic, offsets, partitions)
