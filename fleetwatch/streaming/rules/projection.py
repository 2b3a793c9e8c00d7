"""The rules' SQL over each reading, in Spark.

:func:`rule_atoms` (the rules query, :mod:`~fleetwatch.streaming.rules.job`, and ``fleetwatch
rules test``): a reading in, one row out with the values the rules compute on it, each
distinct SQL once (:class:`Atoms`) — rules that differ in their thresholds or their devices
share them, so the work per reading grows with the distinct expressions, not with the rules;
which rules judge the device, and their conditions over those values, are the per-device
step's (:func:`~fleetwatch.streaming.rules.processor.readings_of`). Its output's schema is the
same whatever the rules, so the query's stateful operator after it keeps its state when the
rules change.

:func:`rule_values` (the real-time query, :mod:`~fleetwatch.streaming.rules.fast`): each rule
that judges the device with its condition, evaluated in Spark, and the value it shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetwatch.streaming.rules.compiled import CompiledRule
from fleetwatch.streaming.rules.conditions import READING_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

RULES_COLUMN = "rules"
RULES_TYPE = "array<struct<id: string, fired: boolean, values: array<double>>>"
ATOMS_COLUMN = "atoms"


@dataclass(frozen=True)
class Atoms:
    """The values the rules compute on a reading, and which of them each rule reads."""

    sql: tuple[str, ...]
    """Each distinct SQL of the rules' :attr:`~CompiledRule.values`, once."""
    index: Mapping[str, tuple[int, ...]]
    """Rule id → the position in :attr:`sql` of each of its values."""
    selected: Mapping[str, tuple[str, ...]]
    """Device id → the ids of the rules that judge it, for a device some rule names."""
    every: tuple[str, ...]
    """The ids of the rules that judge every device (in their order)."""

    def rules_of(self, device_id: str) -> tuple[str, ...]:
        """The rules that judge ``device_id``, in the rules' order."""
        return self.selected.get(device_id, self.every)


def atoms_of(rules: Sequence[CompiledRule]) -> Atoms:
    sql: list[str] = []
    index: dict[str, tuple[int, ...]] = {}
    for rule in rules:
        for value in rule.values:
            if value not in sql:
                sql.append(value)
        index[rule.id] = tuple(sql.index(value) for value in rule.values)
    named: dict[str, list[str]] = {}
    for rule in rules:
        for device in rule.devices or ():
            named.setdefault(device, []).append(rule.id)
    every = tuple(rule.id for rule in rules if rule.devices is None)
    if every:  # a named device is judged by the rules of every device too, in the rules' order
        order = {rule.id: i for i, rule in enumerate(rules)}
        named = {d: sorted([*ids, *every], key=order.__getitem__) for d, ids in named.items()}
    return Atoms(tuple(sql), index, {d: tuple(ids) for d, ids in named.items()}, every)


def metrics_of(rules: Sequence[CompiledRule]) -> list[str]:
    """Every metric the rules name, once, in order."""
    return list(dict.fromkeys(m for rule in rules for m in rule.metrics))


def raw_readings(raw: DataFrame, metrics: Sequence[str]) -> DataFrame:
    """Kafka rows of ``telemetry.raw`` → a reading's fields, ``event_ms`` and ``received_ms``,
    the record's timestamp as ``event_time``, and one double column per metric in ``metrics``
    (null where the reading lacks it). A value that is not a reading's JSON gives nulls and is
    left out (the scorer dead-letters it)."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    wanted = ", ".join(f"`{m}`: double" for m in metrics) or "`_`: double"
    schema = (
        "struct<seq: bigint, event_ms: bigint, received_ms: bigint, firmware: string, "
        f"status: string, metrics: struct<{wanted}>>"
    )
    key, value = F.col("key").cast("string"), F.col("value").cast("string")
    parsed = F.from_json(F.when(F.is_valid_utf8(value), value), schema)
    return (
        raw.where(key.isNotNull() & value.isNotNull() & F.is_valid_utf8(key))
        .select(key.alias("device_id"), parsed.alias("r"), F.col("timestamp").alias("event_time"))
        .where(F.col("r.event_ms").isNotNull() & F.col("r.seq").isNotNull())
        .select(
            "device_id",
            *(F.col(f"r.{name}").alias(name) for name in READING_FIELDS if name != "device_id"),
            "r.event_ms",
            "r.received_ms",
            "event_time",
            *(F.col("r.metrics").getField(m).alias(m) for m in metrics),
        )
    )


def rule_atoms(readings: DataFrame, atoms: Atoms) -> DataFrame:
    """``readings`` (a reading's fields and its metrics as columns) → ``device_id``, ``seq``,
    ``event_ms``, ``received_ms`` and :data:`ATOMS_COLUMN`, each of :attr:`Atoms.sql` as a
    double; a reading of a device no rule judges is left out."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    values = F.array(*(F.expr(f"CAST(({sql}) AS DOUBLE)") for sql in atoms.sql))
    out = readings.select(
        "device_id",
        "seq",
        "event_ms",
        "received_ms",
        values.cast("array<double>").alias(ATOMS_COLUMN),
    )
    if atoms.every:
        return out
    return out.where(F.col("device_id").isin(sorted(atoms.selected)))


def rule_values(readings: DataFrame, rules: Sequence[CompiledRule]) -> DataFrame:
    """``readings`` (a reading's fields and its metrics as columns) and rules without a window
    → ``device_id``, ``seq``, ``event_ms``, ``received_ms`` and :data:`RULES_COLUMN`
    (:data:`RULES_TYPE`): each rule that judges the device, with its condition and the value
    it shows; a reading no rule judges is left out."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    judged = F.filter(F.array(*(_judged(rule) for rule in rules)), lambda r: r.isNotNull())
    return readings.select(
        "device_id", "seq", "event_ms", "received_ms", judged.alias(RULES_COLUMN)
    ).where(F.size(RULES_COLUMN) > 0)


def _judged(rule: CompiledRule) -> Column:
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    if rule.condition is None or rule.shown is None:
        raise ValueError(f"rule {rule.id} has a window: the real-time query has no state")
    entry = F.struct(
        F.lit(rule.id).alias("id"),
        F.expr(f"({rule.condition})").cast("boolean").alias("fired"),
        F.array(F.expr(f"CAST(({rule.shown}) AS DOUBLE)")).alias("values"),
    )
    judged: Column | None = None
    if rule.devices is not None:
        judged = F.col("device_id").isin(sorted(rule.devices))
    if rule.since_ms is not None:
        received_ms = F.coalesce(F.col("received_ms"), F.col("event_ms"))
        received = received_ms >= F.lit(rule.since_ms)
        judged = received if judged is None else judged & received
    return entry if judged is None else F.when(judged, entry)
