"""The rules' early opens (``alerts.fast``) folded into the scorer's episodes by the materialiser:
the first of an episode is stored and owed to the webhooks at once; the later ones, and the
scorer's own open of the same episode, add nothing; an early open the scorer never confirms is
withdrawn when it opens the rule's episode under another id."""

from __future__ import annotations

from sqlalchemy import select

from fleetwatch.contracts.alerts import Alert
from fleetwatch.contracts.rules import rule_alert_id
from fleetwatch.serving.materialiser import write_all
from fleetwatch.serving.store import Store
from fleetwatch.serving.store.ingest import Batch
from fleetwatch.serving.tables import AlertEventRow, AlertRow, DeliveryRow, WebhookRow
from tests.unit.api_support import memory_store

DEVICE = "d1"


def rule_event(event_ms: int, status: str = "open", start_ms: int | None = None) -> Alert:
    start = event_ms if start_ms is None else start_ms
    ident = rule_alert_id(DEVICE, "temperature", "hot", start)
    revision = 0 if status == "open" else 1
    return Alert(
        alert_id=ident,
        device_id=DEVICE,
        metric="temperature",
        status=status,
        detector="rule",
        params_version=0,
        seq=event_ms // 1000,
        event_ms=event_ms,
        received_ms=event_ms,
        detected_ms=event_ms,
        value=90.0,
        expected=None,
        band=None,
        score=1.0,
        reason="rule hot: too hot",
        severity="critical",
        start_ms=start,
        end_ms=event_ms if status == "resolve" else None,
        revision=revision,
        event_id=f"{ident}.{revision}",
        rule_id="hot",
        rule_version=1,
    )


def subscribed() -> Store:
    store = memory_store()
    with store.session() as session, session.begin():
        session.add(
            WebhookRow(
                webhook_id="w1",
                url="http://127.0.0.1:1/hook",
                secret="whsec_x",
                devices=[],
                tags=[],
                severities=[],
                statuses=[],
                enabled=True,
                created_ms=0,
                updated_ms=0,
            )
        )
    return store


def write(store: Store, batch: Batch, now: int = 1) -> None:
    with store.session() as session, session.begin():
        write_all(session, batch, now)


def episodes(store: Store) -> list[tuple[str, str]]:
    with store.session() as session:
        rows = session.execute(
            select(AlertRow.alert_id, AlertRow.state).order_by(AlertRow.start_ms)
        )
        return [(r[0], r[1]) for r in rows]


def deliveries(store: Store) -> list[str]:
    with store.session() as session:
        return sorted(session.scalars(select(DeliveryRow.message_id)).all())


def test_the_first_early_open_starts_the_episode_and_is_owed_to_the_webhooks() -> None:
    store = subscribed()
    first, second = rule_event(1_000), rule_event(2_000)
    write(store, Batch(early=[first, second]))
    assert episodes(store) == [(first.alert_id, "open")], "the second reading's is dropped"
    assert len(deliveries(store)) == 1

    write(store, Batch(alerts=[first]))  # the scorer's own open of the same episode
    assert episodes(store) == [(first.alert_id, "open")]
    assert len(deliveries(store)) == 1, "the same event is not delivered twice"
    with store.session() as session:
        assert len(session.scalars(select(AlertEventRow.event_id)).all()) == 1

    resolved = rule_event(3_000, "resolve", start_ms=1_000)
    write(store, Batch(alerts=[resolved], early=[rule_event(2_500)]))
    assert episodes(store) == [(first.alert_id, "resolved")]


def test_after_a_resolve_an_early_open_starts_the_next_episode() -> None:
    store = subscribed()
    write(store, Batch(alerts=[rule_event(1_000), rule_event(2_000, "resolve", start_ms=1_000)]))
    write(store, Batch(early=[rule_event(5_000)]))
    assert [s for _, s in episodes(store)] == ["resolved", "open"]


def test_an_early_open_the_scorer_does_not_confirm_is_withdrawn() -> None:
    store = subscribed()
    orphan = rule_event(1_000)  # the scorer judged this reading late: it opens at the next
    write(store, Batch(early=[orphan]))
    confirmed = rule_event(1_200)
    write(store, Batch(alerts=[confirmed]))
    assert episodes(store) == [(orphan.alert_id, "withdrawn"), (confirmed.alert_id, "open")]
    # the subscriber that got the orphan's open gets its withdrawal
    assert f"{orphan.alert_id}.1" in deliveries(store)
    with store.session() as session:
        assert f"{orphan.alert_id}.1" in session.scalars(select(AlertEventRow.event_id)).all()


def test_model_alerts_and_other_rules_are_untouched() -> None:
    store = subscribed()
    other = rule_event(1_000).model_copy(
        update={"rule_id": "cold", "alert_id": "x", "event_id": "x.0"}
    )
    write(store, Batch(alerts=[other]))
    write(store, Batch(alerts=[rule_event(2_000)]))
    assert sorted(s for _, s in episodes(store)) == ["open", "open"]
