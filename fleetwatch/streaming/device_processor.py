"""The scorer's ``StatefulProcessor``: Spark's side of :mod:`device_scoring`.

Per device, two ``ValueState`` values in the RocksDB state store: ``params`` (the newest
parameters as JSON, and their version: written only when a new version arrives) and ``live``
(everything else, one JSON document: read and written once per micro-batch — each state call
is a round trip to the JVM, so fewer, larger values are faster). One event-time timer per
device at ``last seen + session gap`` finds devices that fall silent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pandas as pd

from fleetwatch.contracts.settings import Settings
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.streaming.device_scoring import (
    ALERTS,
    CACHE,
    LATE,
    SESSIONS,
    STATE,
    Output,
    Policy,
    best_params,
    expire,
    new_state,
    process,
    wants_timer,
)


def policy_of(settings: Settings) -> Policy:
    return Policy(
        session_gap_ms=settings.score.session_gap_s * 1000,
        min_readings=settings.score.min_readings,
        clear_readings=settings.score.clear_readings,
        baseline=FixedBaseline(bands=dict(settings.score.baseline)),
    )


def topic_names(settings: Settings) -> dict[str, str]:
    t = settings.topics
    return {
        ALERTS: t.alerts,
        STATE: t.device_state,
        SESSIONS: t.device_sessions,
        LATE: t.telemetry_late,
    }


def output_frame(device_id: str, out: Output, topics: dict[str, str]) -> pd.DataFrame:
    roles = [role for role, _ in out.records]
    return pd.DataFrame(
        {
            "topic": [topics[r] for r in roles],
            "key": [device_id] * len(roles),
            "value": [value for _, value in out.records],
            "role": roles,
        }
    )


def device_scorer(settings: Settings) -> Any:
    """The processor (built lazily: pyspark is imported only where Spark runs)."""
    from pyspark.sql.streaming.stateful_processor import (
        ExpiredTimerInfo,
        StatefulProcessor,
        StatefulProcessorHandle,
        TimerValues,
    )
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    policy = policy_of(settings)
    topics = topic_names(settings)
    params_schema = StructType(
        [StructField("params", StringType(), False), StructField("version", LongType(), False)]
    )
    live_schema = StructType([StructField("live", StringType(), False)])

    class DeviceScorer(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.handle = handle
            self.params = handle.getValueState("params", params_schema)
            self.live = handle.getValueState("live", live_schema)

        def _state(self) -> dict[str, Any] | None:
            stored = self.live.get()
            return None if stored is None else json.loads(stored[0])

        def handleInputRows(
            self, key: tuple[str], rows: Any, timerValues: TimerValues
        ) -> Iterator[pd.DataFrame]:
            device_id = key[0]
            chunks = list(rows)
            frame = chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
            state = self._state()
            version = 0 if state is None else int(state["v"])
            params_json: str | None = None
            is_params = (frame["src"] == "p").to_numpy()
            if is_params.any():
                best = best_params(frame.loc[is_params, "params"].tolist())
                if best is not None and best[0] > version:
                    version, params_json = best
                    self.params.update((params_json, version))
                frame = frame.loc[~is_params]
            if params_json is None and version > 0 and CACHE.get(device_id, version) is None:
                stored = self.params.get()
                params_json = None if stored is None else str(stored[0])
            if state is not None:
                state["v"] = version
            elif version > 0:
                state = {**new_state(), "v": version}
            if frame.empty:
                if state is not None:
                    self.live.update((json.dumps(state),))
                return
            state, out = process(
                device_id,
                state,
                params_json,
                frame,
                timerValues.getCurrentWatermarkInMs(),
                time.time_ns() // 1_000_000,
                policy,
            )
            due = wants_timer(state, policy)
            if due is not None:
                self.handle.registerTimer(due)
            self.live.update((json.dumps(state),))
            if out.records:
                yield output_frame(device_id, out, topics)

        def handleExpiredTimer(
            self, key: tuple[str], timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
        ) -> Iterator[pd.DataFrame]:
            device_id = key[0]
            state = self._state()
            if state is None:
                return
            state, out, again = expire(
                device_id,
                state,
                timerValues.getCurrentWatermarkInMs(),
                time.time_ns() // 1_000_000,
                policy,
            )
            if again is not None:
                self.handle.registerTimer(again)
            self.live.update((json.dumps(state),))
            if out.records:
                yield output_frame(device_id, out, topics)

        def close(self) -> None:
            return None

    return DeviceScorer()
