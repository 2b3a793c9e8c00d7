"""The rules query's ``StatefulProcessor``: Spark's side of
:func:`~fleetwatch.streaming.rules.step.judge`.

Keyed by a bucket of devices (:func:`~fleetwatch.streaming.buckets.bucket_of`), as the scorer
is, for the same reason: a state call is a round trip to the JVM. Per bucket, one ``ValueState``
holds every device's rule state, pickled (JSON's types only), and one event-time timer stands
at the earliest window end still to judge, so a window closes when the watermark passes it even
for a device that sends nothing more.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pandas as pd

from fleetwatch.contracts import clock
from fleetwatch.streaming.rules import having
from fleetwatch.streaming.rules.compiled import CompiledRule
from fleetwatch.streaming.rules.projection import ATOMS_COLUMN, Atoms, atoms_of
from fleetwatch.streaming.rules.step import BucketRules, Judged, Reading, judge, new_bucket

OUTPUT_SCHEMA = "topic STRING, key STRING, value STRING"


Entry = tuple[str, tuple[int, ...], having.Judge | None, having.Judge | None]
"""A rule as one device's readings meet it: its id, the positions of its values among the
atoms, and — without a window — its condition and the value it shows as functions of them."""


class Plans:
    """Each device's rules as :data:`Entry` tuples, made once per device: a reading then meets
    its device's rules without looking each one up."""

    def __init__(self, atoms: Atoms, rules: Mapping[str, CompiledRule]) -> None:
        self.atoms = atoms
        self.rules = rules
        self._by_ids: dict[tuple[str, ...], tuple[Entry, ...]] = {}
        self._by_device: dict[str, tuple[Entry, ...]] = {}

    def of(self, device_id: str) -> tuple[Entry, ...]:
        plan = self._by_device.get(device_id)
        if plan is None:
            ids = self.atoms.rules_of(device_id)
            plan = self._by_ids.get(ids)
            if plan is None:  # devices judged by the same rules share one plan
                plan = self._by_ids[ids] = tuple(self._entry(rule_id) for rule_id in ids)
            self._by_device[device_id] = plan
        return plan

    def _entry(self, rule_id: str) -> Entry:
        rule = self.rules[rule_id]
        index = self.atoms.index[rule_id]
        if rule.window_ms is not None:
            return (rule_id, index, None, None)
        assert rule.having is not None
        assert rule.evidence is not None
        return (rule_id, index, having.compiled(rule.having), having.compiled(rule.evidence))


def readings_of(frame: pd.DataFrame, plans: Plans) -> list[Reading]:
    """The operator's input rows (:func:`~fleetwatch.streaming.rules.projection.rule_atoms`)
    → readings, each with every rule that judges its device: a rule without a window with its
    condition (true, false or null, as SQL has it) and the value it shows; a windowed rule
    with the values it aggregates. A reading no rule judges is left out."""
    out = []
    for device, seq, event_ms, received_ms, computed in zip(
        frame["device_id"],
        frame["seq"],
        frame["event_ms"],
        frame["received_ms"],
        frame[ATOMS_COLUMN],
        strict=True,
    ):
        device = str(device)
        plan = plans.of(device)
        if not plan:
            continue
        row = [_number(v) for v in computed]
        values: dict[str, tuple[bool | None, list[float | None]]] = {}
        for rule_id, index, holds, shown in plan:
            own = [row[i] for i in index]
            if holds is None or shown is None:
                values[rule_id] = (None, own)
                continue
            held = holds(own)
            values[rule_id] = (None if held is None else bool(held), [_number(shown(own))])
        received = event_ms if received_ms is None or received_ms != received_ms else received_ms
        out.append(Reading(device, int(seq), int(event_ms), int(received), values))
    return out


def alert_rows(judged: Judged, topic: str) -> pd.DataFrame:
    rows = [
        (topic, device, json.dumps(alert.model_dump(), separators=(",", ":"), allow_nan=False))
        for device, alert in judged.alerts
    ]
    return pd.DataFrame(rows, columns=["topic", "key", "value"])


def _number(value: Any) -> float | None:
    return None if value is None or value != value else float(value)


def rule_judge(rules: Sequence[CompiledRule], alerts_topic: str, expire_after_ms: int) -> Any:
    """The processor for ``rules`` (built lazily: pyspark is imported only where Spark runs)."""
    # lazy: pyspark is imported only where Spark runs
    from pyspark.sql.streaming.stateful_processor import (
        ExpiredTimerInfo,
        StatefulProcessor,
        StatefulProcessorHandle,
        TimerValues,
    )
    from pyspark.sql.types import BinaryType, StructField, StructType

    by_id: Mapping[str, CompiledRule] = {rule.id: rule for rule in rules}
    plans = Plans(atoms_of(rules), by_id)
    schema = StructType([StructField("rules", BinaryType(), False)])

    class BucketJudge(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.handle = handle
            self.state = handle.getValueState("rules", schema)

        def _judge(
            self, readings: list[Reading], timer_values: TimerValues
        ) -> Iterator[pd.DataFrame]:
            stored = self.state.get()
            bucket: BucketRules = new_bucket() if stored is None else pickle.loads(stored[0])
            armed = bucket["timer_ms"]
            watermark = timer_values.getCurrentWatermarkInMs()
            judged = judge(bucket, readings, by_id, watermark, clock.now_ms(), expire_after_ms)
            due = bucket["timer_ms"]
            if due != armed:
                if armed is not None and armed > watermark:
                    self.handle.deleteTimer(armed)
                if due is not None:
                    self.handle.registerTimer(due)
            if bucket["devices"]:
                self.state.update((pickle.dumps(bucket, protocol=pickle.HIGHEST_PROTOCOL),))
            else:
                self.state.clear()
            yield alert_rows(judged, alerts_topic)

        def handleInputRows(
            self, key: tuple[int], rows: Any, timerValues: TimerValues
        ) -> Iterator[pd.DataFrame]:
            readings = [r for chunk in rows for r in readings_of(chunk, plans)]
            yield from self._judge(readings, timerValues)

        def handleExpiredTimer(
            self, key: tuple[int], timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
        ) -> Iterator[pd.DataFrame]:
            yield from self._judge([], timerValues)

        def close(self) -> None:
            return None

    return BucketJudge()
