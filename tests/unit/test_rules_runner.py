"""The scorer's rules thread: a rules query that fails, or cannot start, is started again after
RETRY_S with the current rules, and the thread goes on (the scoring query is never touched);
a change of the rules restarts the query once after a burst of records."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from fleetwatch.contracts.settings import Settings
from fleetwatch.streaming.rules import job
from fleetwatch.streaming.rules.compiled import CompiledRule
from tests.polling import wait_until

RULE = CompiledRule("hot", 1, "hot", "warning", "t > 1", None, ("t",), "t", ("t",), "t > 1")


class FakeQuery:
    def __init__(self) -> None:
        self.isActive = True

    def exception(self) -> str:
        return "a rule's SQL failed"


class FakeFollower:
    """Says the rules changed on its first poll (a burst of two records), then nothing."""

    def __init__(self) -> None:
        self.rules: dict[str, Any] = {"hot": object()}
        self.polls = 0

    def poll(self, timeout_s: float) -> bool:
        self.polls += 1
        time.sleep(0.01)  # stands for the blocking Kafka poll, so the runner's loop does not spin
        return self.polls <= 2

    def close(self) -> None:
        pass


def run(runner: job.RulesRunner, until: Any, timeout_s: float = 5.0) -> None:
    thread = threading.Thread(target=runner._follow, args=(None, FakeFollower()))
    thread.start()
    try:
        wait_until(until, timeout_s, "the runner's queries", interval_s=0.01)
    finally:
        runner._stop.set()
        thread.join(5)
    assert not thread.is_alive()


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> job.RulesRunner:
    monkeypatch.setattr(job, "RETRY_S", 0.05)
    monkeypatch.setattr(job, "compiled", lambda spark, records: [RULE])
    monkeypatch.setattr(job, "stop_after_batch", lambda query: True)
    settings = Settings().model_copy(
        update={"score": Settings().score.model_copy(update={"rules_fast_path": False})}
    )
    return job.RulesRunner(settings)


def test_a_query_that_cannot_start_is_tried_again(
    runner: job.RulesRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts: list[FakeQuery | None] = []

    def start(spark: Any, settings: Settings, rules: list[CompiledRule]) -> FakeQuery:
        if not starts:
            starts.append(None)
            raise RuntimeError("the plan does not analyse")
        starts.append(query := FakeQuery())
        return query

    monkeypatch.setattr(job, "start", start)
    run(runner, lambda: len(starts) >= 2)
    assert starts[0] is None
    assert isinstance(starts[1], FakeQuery), "started again after RETRY_S"
    assert runner.applied == {"hot": 1}


def test_a_failed_query_is_started_again_and_a_burst_restarts_once(
    runner: job.RulesRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts: list[FakeQuery] = []
    others_active: list[bool] = []  # at each start, whether an earlier query was still running

    def start(spark: Any, settings: Settings, rules: list[CompiledRule]) -> FakeQuery:
        others_active.append(any(q.isActive for q in starts))
        starts.append(query := FakeQuery())
        return query

    monkeypatch.setattr(job, "start", start)
    first_at: list[float] = []

    def failed_once() -> bool:
        if len(starts) == 1:
            first_at.append(time.monotonic())
            if first_at[-1] - first_at[0] > 0.2:
                starts[0].isActive = False  # the first query fails, well after the burst
        return len(starts) >= 2

    run(runner, failed_once)
    assert len(starts) == 2
    assert others_active == [False, False], "the burst of two changes started one query"
