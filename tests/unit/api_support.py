"""What the API's unit tests share: an in-memory store, an app on it, keys of each scope, and
fakes for Kafka and the rule checker."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from fleetwatch.contracts.alerts import Alert, alert_id, event_id
from fleetwatch.contracts.commands import Command
from fleetwatch.contracts.rules import RuleSpec
from fleetwatch.contracts.settings import ApiSettings, Settings
from fleetwatch.serving.app import create_app
from fleetwatch.serving.control.publisher import PublishFailed
from fleetwatch.serving.rules.checker import CheckerUnavailable, Verdict
from fleetwatch.serving.store import Store
from fleetwatch.serving.store.keys import create_key


def make_alert(
    device_id: str,
    seq: int,
    event_ms: int,
    status: str = "open",
    revision: int = 0,
    start_ms: int | None = None,
    severity: str = "warning",
    metric: str = "temperature",
) -> Alert:
    start = event_ms if start_ms is None else start_ms
    aid = alert_id(device_id, metric, "fixed-baseline", start)
    return Alert.model_validate(
        {
            "alert_id": aid,
            "device_id": device_id,
            "metric": metric,
            "status": status,
            "detector": "fixed-baseline",
            "params_version": 0,
            "seq": seq,
            "event_ms": event_ms,
            "received_ms": event_ms + 10,
            "detected_ms": event_ms + 500,
            "value": 45.0,
            "expected": 21.0,
            "band": 8.0,
            "score": 0.67,
            "reason": f"{metric}=45 outside 21±8",
            "severity": severity,
            "start_ms": start,
            "end_ms": event_ms if status in ("resolve", "withdraw") else None,
            "revision": revision,
            "event_id": event_id(aid, revision),
        }
    )


@dataclass
class FakePublisher:
    """Stands in for Kafka: records what was published; can be told to fail."""

    published: list[Command] = field(default_factory=list)
    lifts: list[tuple[str, int]] = field(default_factory=list)
    rules: list[tuple[str, bytes | None]] = field(default_factory=list)
    """``(rule_id, record value)``; ``None``: a tombstone."""
    failing: bool = False
    up: bool = True

    def publish(self, command: Command) -> None:
        if self.failing:
            raise PublishFailed("broker away (test)")
        self.published.append(command)

    def lift_quarantine(self, device_id: str, lifted_ms: int) -> None:
        if self.failing:
            raise PublishFailed("broker away (test)")
        self.lifts.append((device_id, lifted_ms))

    def publish_rule(self, rule_id: str, value: bytes | None) -> None:
        if self.failing:
            raise PublishFailed("broker away (test)")
        self.rules.append((rule_id, value))

    def reachable(self) -> bool:
        return self.up

    def close(self) -> None:
        pass


@dataclass
class FakeChecker:
    """Stands in for Spark's rule checker: a condition in ``refused`` is refused with its
    ``(field, message)``; ``down`` (a reason) makes every check fail as unavailable."""

    refused: dict[str, tuple[str, str]] = field(default_factory=dict)
    down: str | None = None
    checked: list[RuleSpec] = field(default_factory=list)

    def check(self, spec: RuleSpec) -> Verdict:
        if self.down is not None:
            raise CheckerUnavailable(self.down)
        self.checked.append(spec)
        if spec.when in self.refused:
            return Verdict(False, *self.refused[spec.when])
        return Verdict(True)

    def close(self) -> None:
        pass


@dataclass
class Api:
    client: TestClient
    store: Store
    publisher: FakePublisher
    keys: dict[str, str]
    checker: FakeChecker = field(default_factory=FakeChecker)

    def as_(self, scope: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[scope]}"}

    def get(self, path: str, scope: str = "read", **kw: Any) -> Any:
        return self.client.get(path, headers=self.as_(scope), **kw)

    def post(self, path: str, scope: str = "admin", **kw: Any) -> Any:
        headers = self.as_(scope) | kw.pop("headers", {})
        return self.client.post(path, headers=headers, **kw)


def memory_store() -> Store:
    return Store("sqlite://")


def add_keys(store: Store) -> dict[str, str]:
    keys = {}
    with store.session() as session, session.begin():
        for scope in ("read", "operate", "admin"):
            _, keys[scope] = create_key(session, f"{scope}-key", [scope], 1)
    return keys


def running_api(tmp_path: Path, **api: Any) -> Iterator[Api]:
    store = memory_store()
    keys = add_keys(store)
    publisher = FakePublisher()
    checker = FakeChecker()
    settings = Settings(run_dir=tmp_path, api=ApiSettings(**api))
    app = create_app(
        settings,
        store=store,
        materialise=False,
        publisher=publisher,
        workers=False,
        checker=checker,
    )
    with TestClient(app) as client:
        yield Api(client, store, publisher, keys, checker)
