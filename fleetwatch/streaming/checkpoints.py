"""Reading Spark streaming checkpoints: where a query got to, and carrying on from there when
the query's plan changes.

Spark cannot restart a query on a checkpoint written by a different stateful plan. Each job
therefore keeps its checkpoint under a plan version (``score-v2``); when the version moves on,
the new query starts from the source offsets the previous version last committed, so an upgrade
neither skips readings nor scores the whole log again.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from confluent_kafka.admin import AdminClient

from fleetwatch.contracts.settings import KafkaSettings
from fleetwatch.kafka_config import client_config

logger = logging.getLogger(__name__)


def committed_offsets(checkpoint: Path, topic: str) -> dict[int, int]:
    """Source offsets of ``topic`` after the last committed micro-batch (outputs written);
    empty if the checkpoint has committed nothing."""
    commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    if not commits:
        return {}
    lines = (checkpoint / "offsets" / commits[-1].name).read_text().splitlines()
    for line in reversed(lines):
        try:
            sources = json.loads(line)
        except ValueError:
            continue
        if isinstance(sources, dict) and topic in sources:
            return {int(p): int(o) for p, o in sources[topic].items()}
    return {}


def versioned(root: Path, job: str, version: int) -> Path:
    return root / f"{job}-v{version}"


def previous_offsets(root: Path, job: str, version: int, topic: str) -> dict[int, int]:
    """Offsets committed by the newest earlier plan version of ``job`` (or an unversioned
    checkpoint), when the current version has no checkpoint yet."""
    if versioned(root, job, version).exists():
        return {}
    pattern = re.compile(rf"^{re.escape(job)}(?:-v(\d+))?$")
    older = []
    for path in root.glob(f"{job}*"):
        if (m := pattern.match(path.name)) and int(m.group(1) or 0) < version:
            older.append((int(m.group(1) or 0), path))
    for _, path in sorted(older, reverse=True):
        if offsets := committed_offsets(path, topic):
            logger.info(
                "continuing %s v%d from the offsets of %s: %s", job, version, path.name, offsets
            )
            return offsets
    return {}


def starting_offsets(topic: str, offsets: dict[int, int], partitions: list[int]) -> str:
    """Spark's ``startingOffsets`` JSON; partitions the old query never saw start earliest (-2)."""
    return json.dumps({topic: {str(p): offsets.get(p, -2) for p in sorted(partitions)}})


def resume_offsets(root: Path, job: str, version: int, topic: str, kafka: KafkaSettings) -> str:
    """``startingOffsets`` for a query's first start: earliest, or after a plan change where the
    previous plan stopped (partitions it never saw start earliest)."""
    offsets = previous_offsets(root, job, version, topic)
    if not offsets:
        return "earliest"
    admin = AdminClient(client_config(kafka))
    partitions = list(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    return starting_offsets(topic, offsets, partitions)
