"""A scorer stopped on SIGTERM lets the micro-batch under way finish before stopping."""

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from fleetwatch.streaming.query_loop import stop_after_batch


@dataclass
class FakeQuery:
    """A query whose batch in flight commits after ``polls_to_commit`` status reads."""

    polls_to_commit: int
    batch_id: int = 4
    stopped_mid_batch: bool | None = None
    isActive: bool = True
    reads: int = field(default=0)

    @property
    def status(self) -> dict[str, Any]:
        self.reads += 1
        if self.reads > self.polls_to_commit:
            self.batch_id += 1
        return {"isTriggerActive": True}

    @property
    def lastProgress(self) -> SimpleNamespace:
        return SimpleNamespace(batchId=self.batch_id)

    def stop(self) -> None:
        self.stopped_mid_batch = self.reads <= self.polls_to_commit
        self.isActive = False


def test_the_batch_in_flight_completes_before_the_stop() -> None:
    query = FakeQuery(polls_to_commit=3)
    assert stop_after_batch(query, timeout_s=5, poll_s=0.001)  # type: ignore[arg-type]
    assert query.stopped_mid_batch is False


def test_a_batch_that_does_not_complete_in_time_is_cut_short() -> None:
    query = FakeQuery(polls_to_commit=10**9)
    assert not stop_after_batch(query, timeout_s=0.05, poll_s=0.001)  # type: ignore[arg-type]
    assert query.stopped_mid_batch is True
