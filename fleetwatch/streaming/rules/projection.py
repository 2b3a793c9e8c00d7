"""The rules' SQL over each reading, in Spark: a reading in, one row out with each rule that
judges its device — its condition (a rule without a window) and the values it aggregates or
shows. The rules query (:mod:`~fleetwatch.streaming.rules.job`) runs it on ``telemetry.raw``;
``fleetwatch rules test`` on a recorded file. Its output's schema is the same whatever the
rules, so the query's stateful operator after it keeps its state when the rules change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fleetwatch.streaming.rules.compiled import CompiledRule
from fleetwatch.streaming.rules.conditions import READING_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

RULES_COLUMN = "rules"
RULES_TYPE = "array<struct<id: string, fired: boolean, values: array<double>>>"


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


def rule_values(readings: DataFrame, rules: Sequence[CompiledRule]) -> DataFrame:
    """``readings`` (a reading's fields and its metrics as columns) → ``device_id``, ``seq``,
    ``event_ms``, ``received_ms`` and :data:`RULES_COLUMN` (:data:`RULES_TYPE`): each rule
    that judges the device, with its condition and values; a reading no rule judges is left
    out."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    judged = F.filter(F.array(*(_judged(rule) for rule in rules)), lambda r: r.isNotNull())
    return readings.select(
        "device_id", "seq", "event_ms", "received_ms", judged.alias(RULES_COLUMN)
    ).where(F.size(RULES_COLUMN) > 0)


def _judged(rule: CompiledRule) -> Column:
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    fired = (
        F.lit(None).cast("boolean")
        if rule.condition is None
        else F.expr(f"({rule.condition})").cast("boolean")
    )
    values = F.array(*(F.expr(f"CAST(({sql}) AS DOUBLE)") for sql in rule.values))
    entry = F.struct(
        F.lit(rule.id).alias("id"),
        fired.alias("fired"),
        values.cast("array<double>").alias("values"),
    )
    if rule.devices is None:
        return entry
    return F.when(F.col("device_id").isin(sorted(rule.devices)), entry)
