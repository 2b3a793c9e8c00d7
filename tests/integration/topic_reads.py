"""Reading a test's topics whole, once they have settled."""

from __future__ import annotations

from tests.integration.conftest import Isolated, Record
from tests.polling import wait_until


def stable_end(isolated: Isolated, topic: str, timeout_s: float = 120) -> dict[int, int]:
    """The topic's end offsets once they stop moving for two seconds."""
    last: list[dict[int, int]] = [{}]

    def settled() -> bool:
        ends = isolated.end_offsets(topic)
        same = ends == last[0]
        last[0] = ends
        return same

    wait_until(settled, timeout_s, f"{topic} to settle", interval_s=2.0)
    return last[0]


def read(isolated: Isolated, topic: str) -> list[Record]:
    """Every record of ``topic`` up to its end offsets now (those the caller has waited for)."""
    return isolated.read_to_end(topic)
