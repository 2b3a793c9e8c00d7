"""``streaming/submit.py``, spark-submit's entry file: it runs the job it is named, the scorer
or the trainer (with its default observer), and refuses any other name."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fleetwatch.streaming import submit
from fleetwatch.streaming.scorer import job as scorer
from fleetwatch.streaming.trainer import job as trainer
from fleetwatch.streaming.trainer.observer import NoopObserver


@pytest.mark.parametrize(
    ("argv", "ran"),
    [
        (["submit.py"], "score"),
        (["submit.py", "score"], "score"),
        (["submit.py", "train"], "train"),
    ],
)
def test_it_runs_the_job_it_is_named(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], ran: str
) -> None:
    calls: list[tuple[str, Any]] = []
    # the process's signal handlers and logging stay pytest's
    monkeypatch.setattr(submit, "stop_event", threading.Event)
    monkeypatch.setattr(submit, "configure_logging", lambda level: None)
    monkeypatch.setenv("FLEETWATCH_TRAIN__TRACKING", "false")
    monkeypatch.setattr(scorer, "run", lambda settings, stop: calls.append(("score", stop)))
    monkeypatch.setattr(
        trainer, "run", lambda settings, stop, observer: calls.append(("train", observer))
    )
    submit.main(argv)
    assert [name for name, _ in calls] == [ran]
    if ran == "train":
        assert isinstance(calls[0][1], NoopObserver)  # tracking off: the default observer


def test_an_unknown_job_is_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="unknown job 'replay'"):
        submit.main(["submit.py", "replay"])
