"""The rule checker's client against a child process of the test's own that speaks the
protocol (one JSON line each way): verdicts, one rule at a time, a child that dies, stalls,
answers garbage or cannot start, and the 503 a write gets when no check can be made."""

from __future__ import annotations

import os
import re
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetwatch.contracts.rules import RuleSpec
from fleetwatch.contracts.settings import Settings
from fleetwatch.serving.app import create_app
from fleetwatch.serving.rules.checker import CheckerUnavailable, RuleChecker, Verdict
from tests.unit.api_support import FakePublisher, add_keys, memory_store

FAKE = textwrap.dedent(
    """
    import json, os, sys, time

    starts = sys.argv[1]
    with open(starts, "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    if os.environ.get("FAKE_CHECKER_SLOW_START"):
        time.sleep(float(os.environ["FAKE_CHECKER_SLOW_START"]))
    for line in sys.stdin:
        rule = json.loads(line)
        when = rule["when"]
        if when == "die":
            print("boom: the JVM fell over", file=sys.stderr, flush=True)
            sys.exit(3)
        if when == "hang":
            time.sleep(3600)
        if when == "chatty":
            print("Setting default log level to WARN", flush=True)
        if when == "garbage":
            print(json.dumps({"answer": 42}), flush=True)
            continue
        if when == "pid":
            answer = {"ok": False, "field": "when", "error": f"pid={os.getpid()}"}
        elif when.startswith("bad"):
            answer = {"ok": False, "field": "when", "error": f"{rule['id']}: {when}"}
        elif rule.get("window") is not None and "over" in when:
            answer = {"ok": False, "field": "window", "error": "not an aggregate"}
        else:
            answer = {"ok": True}
        print(json.dumps(answer), flush=True)
    """
)


def rule(when: str, rule_id: str = "r1", **fields: object) -> RuleSpec:
    return RuleSpec.model_validate({"id": rule_id, "name": "n", "when": when, **fields})


@pytest.fixture
def starts(tmp_path: Path) -> Path:
    """The fake child writes its pid here each time one starts."""
    return tmp_path / "starts"


@pytest.fixture
def checker(tmp_path: Path, starts: Path) -> Iterator[RuleChecker]:
    script = tmp_path / "fake_checker.py"
    script.write_text(FAKE)
    client = RuleChecker(
        tmp_path / "checker.log",
        argv=[sys.executable, str(script), str(starts)],
        start_timeout_s=30,
        timeout_s=2,
    )
    yield client
    client.close()


def started(starts: Path) -> list[int]:
    return [int(p) for p in starts.read_text().split()] if starts.exists() else []


def test_the_child_gets_the_rule_as_written_and_its_verdicts_come_back(
    checker: RuleChecker, starts: Path
) -> None:
    assert started(starts) == []  # nothing runs before the first rule
    assert checker.check(rule("temperature > 80")) == Verdict(True)
    assert checker.check(rule("bad syntax >")) == Verdict(False, "when", "r1: bad syntax >")
    windowed = rule("avg(x) over", window={"size": "5 minutes"})
    assert checker.check(windowed) == Verdict(False, "window", "not an aggregate")
    assert len(started(starts)) == 1  # one long-lived child


def test_rules_checked_at_once_each_get_their_own_verdict(checker: RuleChecker) -> None:
    verdicts: dict[str, Verdict] = {}

    def check(i: int) -> None:
        verdicts[f"r{i}"] = checker.check(rule(f"bad {i}", rule_id=f"r{i}"))

    threads = [threading.Thread(target=check, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert verdicts == {f"r{i}": Verdict(False, "when", f"r{i}: bad {i}") for i in range(8)}


def test_a_child_that_dies_is_reported_and_another_starts_for_the_next_rule(
    checker: RuleChecker, starts: Path
) -> None:
    first = checker.check(rule("pid")).error
    with pytest.raises(CheckerUnavailable, match=r"exited \(code 3\) while checking: boom"):
        checker.check(rule("die"))
    second = checker.check(rule("pid")).error
    assert first != second
    assert len(started(starts)) == 2


def test_a_child_killed_between_rules_is_started_again(checker: RuleChecker, starts: Path) -> None:
    pid = int((checker.check(rule("pid")).error or "").removeprefix("pid="))
    os.kill(pid, 9)
    assert checker._proc is not None
    checker._proc.wait(timeout=10)
    assert checker.check(rule("x > 1")) == Verdict(True)
    assert len(started(starts)) == 2


def test_a_child_that_stalls_is_killed_and_replaced(checker: RuleChecker, starts: Path) -> None:
    checker.check(rule("x > 1"))
    with pytest.raises(CheckerUnavailable, match="did not answer within 2 s"):
        checker.check(rule("hang"))
    assert checker.check(rule("x > 1")) == Verdict(True)
    assert len(started(starts)) == 2


def test_an_answer_outside_the_protocol_is_refused_and_the_child_replaced(
    checker: RuleChecker, starts: Path
) -> None:
    with pytest.raises(CheckerUnavailable, match=re.escape('protocol: {"answer": 42}')):
        checker.check(rule("garbage"))
    assert checker.check(rule("x > 1")) == Verdict(True)
    assert len(started(starts)) == 2


def test_a_line_that_is_not_json_before_the_answer_is_passed_over(
    checker: RuleChecker, starts: Path
) -> None:
    assert checker.check(rule("chatty")) == Verdict(True)
    assert checker.check(rule("bad one")) == Verdict(False, "when", "r1: bad one")
    assert len(started(starts)) == 1


def test_the_first_answer_may_take_the_start_timeout(
    checker: RuleChecker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_CHECKER_SLOW_START", "3")  # longer than timeout_s (2 s)
    assert checker.check(rule("x > 1")) == Verdict(True)


def test_close_stops_the_child(checker: RuleChecker) -> None:
    checker.check(rule("x > 1"))
    proc = checker._proc
    assert proc is not None
    checker.close()
    assert proc.poll() is not None


def test_a_checker_that_cannot_start_says_why_and_is_not_retried_at_once(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    script = tmp_path / "broken.py"
    script.write_text(
        "import sys\n"
        f"open({str(starts)!r}, 'a').write('1\\n')\n"
        "sys.exit('Error: JAVA_HOME is not set and no java could be found')\n"
    )
    checker = RuleChecker(tmp_path / "c.log", argv=[sys.executable, str(script)], retry_after_s=60)
    with pytest.raises(CheckerUnavailable, match="before its first answer: Error: JAVA_HOME"):
        checker.check(rule("x > 1"))
    with pytest.raises(CheckerUnavailable, match=r"JAVA_HOME.*tried again after 60 s"):
        checker.check(rule("x > 1"))
    assert started(starts) == [1]


def test_a_write_without_a_checker_module_is_a_503_naming_it(tmp_path: Path) -> None:
    store = memory_store()
    keys = add_keys(store)
    checker = RuleChecker(
        tmp_path / "c.log", argv=[sys.executable, "-m", "fleetwatch.streaming.rules.no_such"]
    )
    publisher = FakePublisher()
    app = create_app(
        Settings(run_dir=tmp_path),
        store=store,
        materialise=False,
        publisher=publisher,
        workers=False,
        checker=checker,
    )
    with TestClient(app) as client:
        response = client.post(
            "/rules",
            json={"id": "hot", "name": "Hot", "when": "temperature > 80"},
            headers={"Authorization": f"Bearer {keys['admin']}"},
        )
    checker.close()
    assert response.status_code == 503
    detail = response.json()["detail"]
    assert "cannot be checked now" in detail
    assert "No module named fleetwatch.streaming.rules.no_such" in detail
    assert publisher.rules == []


def test_the_default_child_is_the_installed_check_command(tmp_path: Path) -> None:
    """The API starts the package's own console script, found beside its interpreter."""
    checker = RuleChecker(tmp_path / "c.log")
    command = Path(checker.argv[0])
    assert checker.argv == [str(command)]
    assert command.name == "fleetwatch-rule-check"
    assert command.parent == Path(sys.executable).parent
    assert os.access(command, os.X_OK)
