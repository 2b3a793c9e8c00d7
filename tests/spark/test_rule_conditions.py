"""Operators' rules through local Spark: a condition compiled and checked by Spark's parser and
analyser against a reading's schema, accepted or refused with the field and the reason; the
checker process's protocol; and the rules' SQL per reading (the projection), whose rows the
pure step then judges into the alerts the rules mean."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from fleetwatch.contracts.rules import RuleRecord, RuleSpec
from fleetwatch.contracts.settings import Settings
from fleetwatch.streaming.rules import check as checker
from fleetwatch.streaming.rules import processor, projection, step
from fleetwatch.streaming.rules.conditions import RuleError, check, compile_rule, rules_session
from fleetwatch.streaming.rules.loosest import loosest
from fleetwatch.streaming.spark_session import build_session
from tests.jvm import with_quick_jit

T0 = 1_763_700_000_000
WINDOW = {"size": "4 s", "slide": "2 s"}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = build_session(with_quick_jit(Settings()), "fleetwatch-test-rules")
    yield rules_session(session)
    session.stop()


def spec(when: str, window: dict[str, str] | None = None) -> RuleSpec:
    return RuleSpec.model_validate({"id": "r1", "name": "a rule", "when": when, "window": window})


# -- compile and check ------------------------------------------------------------------------


def test_a_condition_on_one_reading(spark: Any) -> None:
    rule = check(spark, spec("temperature > 80"))
    assert (rule.condition, rule.values, rule.metrics, rule.metric) == (
        "temperature > 80",
        ("temperature",),
        ("temperature",),
        "temperature",
    )
    assert not rule.windowed
    # a reading's own field is not a metric; the evidence is the first metric named; the
    # values computed per reading are what the condition compares with its numbers, and the
    # rest of it as a truth (each once)
    both = check(spark, spec("status = 'ok' AND temperature > 80"))
    assert (both.metrics, both.metric, both.shown, both.values) == (
        ("temperature",),
        "temperature",
        "temperature",
        ("(status = 'ok')", "temperature"),
    )
    assert both.having == [
        "And",
        ["EqualTo", ["agg", 0], ["lit", 1.0]],
        ["GreaterThan", ["agg", 1], ["lit", 80.0]],
    ]
    assert both.evidence == ["agg", 1]


def test_an_average_over_a_window(spark: Any) -> None:
    rule = check(spark, spec("avg(vibration) > 7", WINDOW))
    assert rule.window_ms == (4_000, 2_000)
    assert (rule.aggregates, rule.values, rule.condition) == (("avg",), ("vibration",), None)
    assert rule.having == ["GreaterThan", ["agg", 0], ["lit", 7.0]]
    assert rule.evidence == ["agg", 0]


def test_silence_counts_every_reading(spark: Any) -> None:
    rule = check(spark, spec("count(*) = 0", {"size": "10 minutes"}))
    assert rule.window_ms == (600_000, 600_000)
    assert (rule.aggregates, rule.values, rule.metrics, rule.metric) == (
        ("count",),
        ("1",),
        (),
        "*",
    )
    assert rule.having == ["EqualTo", ["agg", 0], ["lit", 0.0]]


def test_arithmetic_abs_and_is_null_above_quoted_metrics(spark: Any) -> None:
    rule = check(spark, spec("abs(avg(`motor.temp`) - 3) < 1e-3 OR min(y) IS NULL", WINDOW))
    assert rule.metrics == ("motor.temp", "y")
    assert (rule.aggregates, rule.values) == (("avg", "min"), ("`motor.temp`", "y"))
    assert rule.having == [
        "Or",
        ["LessThan", ["abs", ["Subtract", ["agg", 0], ["lit", 3.0]]], ["lit", 1e-3]],
        ["IsNull", ["agg", 1]],
    ]


def test_a_filtered_aggregate_is_written_with_case_when(spark: Any) -> None:
    rule = check(spark, spec("avg(CASE WHEN x > 0 THEN x END) > 1", WINDOW))
    assert (rule.aggregates, rule.values) == (("avg",), ("CASE WHEN (x > 0) THEN x END",))


def test_between_on_one_reading(spark: Any) -> None:
    rule = check(spark, spec("temperature BETWEEN 80 AND 90"))
    raw = spark.createDataFrame(
        [kafka_row("d1", i, i, temperature=t) for i, t in enumerate([79.0, 80.0, 90.0, 95.0])],
        "key string, value string, timestamp timestamp",
    )
    readings = projection.raw_readings(raw, projection.metrics_of([rule]))
    fired = {r.seq: r.rules[0].fired for r in projection.rule_values(readings, [rule]).collect()}
    assert fired == {0: False, 1: True, 2: True, 3: False}


def test_a_repeated_aggregate_is_computed_once(spark: Any) -> None:
    rule = check(spark, spec("avg(x) > 7 AND avg(x) < 9 AND sum(x) / count(*) > 1", WINDOW))
    assert (rule.aggregates, rule.values) == (("avg", "sum", "count"), ("x", "x", "1"))


REFUSED = [
    pytest.param("temperature >", None, "when", "PARSE_SYNTAX_ERROR", id="syntax"),
    pytest.param("frobnicate(temperature) > 1", None, "when", "frobnicate()", id="unknown-fn"),
    pytest.param("raise_error('x') IS NULL", None, "when", "raise_error()", id="raise_error"),
    pytest.param("rand() > 0.5", None, "when", "rand()", id="nondeterministic"),
    pytest.param(
        "avg(vibration) > 7", None, "window", "give the rule one", id="aggregate-no-window"
    ),
    pytest.param(
        "vibration > 7", WINDOW, "when", "aggregates its readings", id="window-no-aggregate"
    ),
    pytest.param(
        "avg(vibration) > 7 AND vibration > 1",
        WINDOW,
        "when",
        "vibration outside an aggregate",
        id="bare-metric-in-window",
    ),
    pytest.param("temperature + 1", None, "when", "a double, not a boolean", id="not-boolean"),
    pytest.param("a.b > 1", None, "when", "quote a name with a dot, `a.b`", id="dotted-name"),
    pytest.param("percentile(vibration, 0.5) > 7", WINDOW, "when", "percentile()", id="percentile"),
    pytest.param("temperature > (SELECT 1)", None, "when", "no subqueries", id="subquery"),
    pytest.param("EXISTS (SELECT 1)", None, "when", "no subqueries", id="exists"),
    pytest.param("max(avg(x)) > 1", WINDOW, "when", "inside another aggregate", id="nested"),
    pytest.param("event_ms > 1", None, "when", "own column, not a metric", id="query-column"),
    pytest.param(
        "avg(x) FILTER (WHERE x > 0) > 1", WINDOW, "when", "FILTER (WHERE …) is not", id="filter"
    ),
    pytest.param("avg(event_time) > 1", WINDOW, "when", "own column", id="query-column-in-avg"),
    pytest.param("avg(x) > 'high'", WINDOW, "when", "where a number is wanted", id="text"),
]


@pytest.mark.parametrize(("when", "window", "field", "words"), REFUSED)
def test_a_rule_spark_cannot_run_is_refused_with_the_field_and_why(
    spark: Any, when: str, window: dict[str, str] | None, field: str, words: str
) -> None:
    with pytest.raises(RuleError) as refused:
        check(spark, spec(when, window))
    assert refused.value.field == field
    assert words in refused.value.message


def test_a_syntax_error_points_at_the_fault(spark: Any) -> None:
    with pytest.raises(RuleError) as refused:
        check(spark, spec("temperature > > 80"))
    first, sql, caret = refused.value.message.split("\n")
    assert "PARSE_SYNTAX_ERROR" in first
    assert "== SQL ==" not in refused.value.message  # Spark's plan is left out
    assert sql == "temperature > > 80"
    assert caret.endswith("^^^")
    assert sql[caret.index("^")] == ">"
    assert caret.index("^") == sql.index("> 80")


# -- the checker the API runs -----------------------------------------------------------------


def test_the_checker_answers_a_rule_a_line(spark: Any) -> None:
    lines = [
        json.dumps({"id": "hot", "name": "hot", "when": "temperature > 80"}),
        "",
        json.dumps({"id": "x", "name": "x", "when": "avg(v) > 1"}),
        json.dumps({"id": "Not An Id", "name": "x", "when": "v > 1"}),
        json.dumps(
            {
                "id": "w",
                "name": "w",
                "when": "avg(v) > 1",
                "window": {"size": "5 s", "slide": "3 s"},
            }
        ),
        "not json",
        json.dumps(
            {"id": "q", "name": "q", "when": "count(*) = 0", "window": {"size": "1 minute"}}
        ),
    ]
    out = io.StringIO()
    checker.serve(spark, io.StringIO("\n".join(lines) + "\n"), out)
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(answers) == 6  # the blank line has no answer
    assert answers[0] == {"ok": True}
    assert answers[1] == {
        "ok": False,
        "field": "window",
        "error": "avg() aggregates over a window: give the rule one",
    }
    assert (answers[2]["ok"], answers[2]["field"]) == (False, "id")
    assert (answers[3]["ok"], answers[3]["field"]) == (False, "window")
    assert "must divide" in answers[3]["error"]
    assert (answers[4]["ok"], answers[4]["field"]) == (False, "rule")  # not JSON
    assert answers[5] == {"ok": True}
    assert checker.answer(spark, lines[0]) == {"ok": True}


# -- the rules' SQL per reading, then the step ------------------------------------------------


def record(
    rule_id: str, when: str, window: dict[str, str] | None, devices: list[str]
) -> RuleRecord:
    return RuleRecord.model_validate(
        {
            "id": rule_id,
            "name": rule_id,
            "when": when,
            "window": window,
            "version": 1,
            "updated_ms": T0,
            "devices": devices,
        }
    )


def kafka_row(device: str, seq: int, at: int, **metrics: float) -> tuple[str, str, datetime]:
    """A ``telemetry.raw`` record as the Kafka source gives it: key, value, timestamp."""
    value = {
        "v": 1,
        "device_id": device,
        "seq": seq,
        "event_ms": T0 + at,
        "received_ms": T0 + at + 5,
        "status": "ok",
        "metrics": metrics,
    }
    stamp = datetime.fromtimestamp((T0 + at) / 1000, tz=UTC)
    return device, json.dumps(value), stamp


def test_the_projection_and_the_step_agree_on_what_the_rules_mean(spark: Any) -> None:
    rules = [
        compile_rule(spark, record("hot", "temperature > 80", None, ["d1", "d2"])),
        compile_rule(spark, record("shaky", "avg(vibration) > 7", WINDOW, ["d1"])),
        compile_rule(
            spark, record("quiet", "count(*) = 0", {"size": "10 s", "slide": "5 s"}, ["d1", "d2"])
        ),
    ]
    rows = [
        kafka_row("d1", 1, 500, temperature=85.0, vibration=9.0),
        kafka_row("d1", 2, 1_500, temperature=70.0, vibration=8.0),
        kafka_row("d1", 3, 2_500, vibration=1.0),  # no temperature
        kafka_row("d2", 1, 700, temperature=90.0),
        kafka_row("d3", 1, 800, temperature=99.0),  # no rule selects d3
        ("d1", "not a reading", datetime.fromtimestamp(T0 / 1000, tz=UTC)),
    ]
    raw = spark.createDataFrame(rows, "key string, value string, timestamp timestamp")
    readings = projection.raw_readings(raw, projection.metrics_of(rules))
    atoms = projection.atoms_of(rules)
    assert atoms.sql == ("temperature", "vibration", "1")
    by_id = {rule.id: rule for rule in rules}

    # the operator's input: the rows as pandas frames (Arrow: a null in an array is NaN)
    batch = processor.readings_of(
        projection.rule_atoms(readings, atoms).toPandas(), processor.Plans(atoms, by_id)
    )
    got = {(r.device_id, r.seq): list(r.values.items()) for r in batch}
    assert got == {
        ("d1", 1): [("hot", (True, [85.0])), ("shaky", (None, [9.0])), ("quiet", (None, [1.0]))],
        ("d1", 2): [("hot", (False, [70.0])), ("shaky", (None, [8.0])), ("quiet", (None, [1.0]))],
        ("d1", 3): [("hot", (None, [None])), ("shaky", (None, [1.0])), ("quiet", (None, [1.0]))],
        ("d2", 1): [("hot", (True, [90.0])), ("quiet", (None, [1.0]))],
    }

    bucket = step.new_bucket()
    alerts = []
    for watermark, readings_in in [(0, batch), (2_000, []), (15_000, [])]:
        judged = step.judge(bucket, readings_in, by_id, T0 + watermark, T0, 3_600_000)
        assert (judged.late, judged.repeats) == (0, 0)
        alerts += [(d, a.rule_id, a.status, a.event_ms - T0, a.value) for d, a in judged.alerts]
    assert alerts == [
        ("d1", "hot", "open", 500, 85.0),
        ("d1", "hot", "resolve", 1_500, 70.0),
        ("d2", "hot", "open", 700, 90.0),
        ("d1", "shaky", "open", 2_000, 8.5),  # [-2 s, 2 s): 9 and 8
        ("d1", "shaky", "resolve", 4_000, 6.0),  # [0, 4 s): 9, 8 and 1
        ("d1", "quiet", "open", 15_000, 0.0),  # [5 s, 15 s): nothing
        ("d2", "quiet", "open", 15_000, 0.0),
    ]


def test_metric_names_are_case_sensitive_as_on_the_wire(spark: Any) -> None:
    """``Temperature`` and ``temperature`` are two metrics of a reading: two rules naming them
    run side by side (Spark's default would find the two columns ambiguous and fail the rules
    query for every rule), as does a metric spelt like the query's own ``event_ms``."""
    whens = ["Temperature > 50", "temperature > 50", "Temperature > 1 AND temperature > 0"]
    whens.append("EVENT_MS > 1")
    for when in whens:
        check(spark, spec(when))
    rules = [
        compile_rule(spark, record(f"r{i}", when, None, ["d1"])) for i, when in enumerate(whens)
    ]
    raw = spark.createDataFrame(
        [kafka_row("d1", 1, 0, Temperature=99.0, temperature=1.0, EVENT_MS=5.0)],
        "key string, value string, timestamp timestamp",
    )
    readings = projection.raw_readings(raw, projection.metrics_of(rules))
    (row,) = projection.rule_values(readings, rules).collect()
    assert row.event_ms == T0
    assert [(e.id, e.fired, e["values"]) for e in row.rules] == [
        ("r0", True, [99.0]),
        ("r1", False, [1.0]),
        ("r2", True, [99.0]),
        ("r3", True, [5.0]),
    ]


def test_a_version_judges_on_the_real_time_path_only_readings_received_after_it(
    spark: Any,
) -> None:
    newer = record("r1", "temperature > 50", None, ["d1"]).model_copy(
        update={"version": 2, "updated_ms": T0 + 1_000}
    )
    rule = compile_rule(spark, newer)
    assert rule.since_ms == T0 + 1_000
    raw = spark.createDataFrame(
        [kafka_row("d1", i, at, temperature=99.0) for i, at in enumerate([0, 994, 995, 2_000])],
        "key string, value string, timestamp timestamp",
    )
    readings = projection.raw_readings(raw, projection.metrics_of([rule]))
    judged = [r.seq for r in projection.rule_values(readings, [rule]).collect()]
    assert judged == [2, 3]  # received at T0 + 1,000 and after
    assert check(spark, spec("temperature > 50")).since_ms is None  # a spec is not a version


LIFTED = [
    "temperature > 80",
    "80 < temperature",
    "temperature >= 25.3 AND humidity < 1e2",
    "NOT (temperature <= 50) OR humidity = 40",
    "abs(temperature - 20) > 5",
    "status = 'fault'",
    "temperature IS NULL OR humidity > 10",
    "seq % 2 = 0 AND temperature > humidity",
    "temperature BETWEEN 80 AND 90",
    "temperature * 2 > humidity + 1",
    "coalesce(temperature, 0) > 10",
]
"""Conditions without a window: comparisons with a number either way round, logic over nulls,
functions, strings, two metrics against each other."""


def test_a_lifted_condition_decides_as_spark_does(spark: Any) -> None:
    """Each condition judged from the values it lifts out (:func:`processor.readings_of`) holds,
    fails or is null on exactly the readings where Spark's own evaluation of it does."""
    rules = [
        compile_rule(spark, record(f"r{i:02d}", when, None, ["d1"]))
        for i, when in enumerate(LIFTED)
    ]
    grid = [None, 0.0, 10.0, 20.0, 25.3, 40.0, 50.0, 80.0, 85.0, 90.0, 100.0]
    rows = []
    for i, (t, h) in enumerate((t, h) for t in grid for h in grid):
        metrics = {k: v for k, v in (("temperature", t), ("humidity", h)) if v is not None}
        key, value, stamp = kafka_row("d1", i, i, **metrics)
        if i % 3 == 0:
            value = value.replace('"status": "ok"', '"status": "fault"')
        rows.append((key, value, stamp))
    raw = spark.createDataFrame(rows, "key string, value string, timestamp timestamp")
    readings = projection.raw_readings(raw, projection.metrics_of(rules))
    expected = {
        (row.seq, rule.id): row[f"c{i}"]
        for row in readings.selectExpr(
            "seq", *(f"({rule.condition}) AS c{i}" for i, rule in enumerate(rules))
        ).collect()
        for i, rule in enumerate(rules)
    }
    atoms = projection.atoms_of(rules)
    by_id = {rule.id: rule for rule in rules}
    frame = projection.rule_atoms(readings, atoms).toPandas()
    got = {
        (r.seq, rule_id): fired
        for r in processor.readings_of(frame, processor.Plans(atoms, by_id))
        for rule_id, (fired, _) in r.values.items()
    }
    assert len(got) == len(rows) * len(rules)
    assert {k: v for k, v in got.items() if v != expected[k]} == {}
    assert {v for v in expected.values()} == {True, False, None}


def test_rules_that_differ_in_thresholds_and_devices_share_their_values(spark: Any) -> None:
    """A thousand thresholds on one metric are one value per reading, each rule still judging
    its own devices against its own threshold."""
    rules = [
        compile_rule(spark, record(f"r{i}", f"temperature > {60 + i}", None, [f"d{i % 2}"]))
        for i in range(6)
    ]
    atoms = projection.atoms_of(rules)
    assert atoms.sql == ("temperature",)
    assert atoms.rules_of("d0") == ("r0", "r2", "r4")
    assert atoms.rules_of("d9") == ()
    raw = spark.createDataFrame(
        [kafka_row(d, 1, 0, temperature=63.5) for d in ("d0", "d1", "d9")],
        "key string, value string, timestamp timestamp",
    )
    readings = projection.raw_readings(raw, projection.metrics_of(rules))
    frame = projection.rule_atoms(readings, atoms).toPandas()
    by_id = {rule.id: rule for rule in rules}
    got = {
        r.device_id: {k: v[0] for k, v in r.values.items()}
        for r in processor.readings_of(frame, processor.Plans(atoms, by_id))
    }
    assert got == {
        "d0": {"r0": True, "r2": True, "r4": False},
        "d1": {"r1": True, "r3": True, "r5": False},
    }


def test_the_loosest_bound_holds_wherever_a_rule_fires_and_leaves_out_the_rest(
    spark: Any,
) -> None:
    """The real-time query's filter before its rules: every reading some rule fires on passes
    it, and readings no rule can fire on do not (rules of one shape with many thresholds are
    one comparison with the loosest)."""
    whens = [
        *(f"temperature > {t}" for t in (81, 85.5, 90)),
        *(f"humidity < {h}" for h in (12, 20)),
        *(f"{t} < temperature AND humidity >= {h}" for t, h in ((50, 30), (60, 35))),
        "status = 'fault' OR temperature = 42",
        "temperature = 10",
    ]
    rules = [
        compile_rule(spark, record(f"r{i}", when, None, ["d1"])) for i, when in enumerate(whens)
    ]
    bound = loosest(rules)
    assert bound is not None
    assert bound.count("> CAST('81.0' AS DOUBLE)") == 1  # one comparison for three thresholds
    grid = [None, 0.0, 10.0, 15.0, 25.0, 30.0, 40.0, 42.0, 55.0, 70.0, 82.0, 95.0]
    rows = []
    for i, (t, h) in enumerate((t, h) for t in grid for h in grid):
        metrics = {k: v for k, v in (("temperature", t), ("humidity", h)) if v is not None}
        rows.append(kafka_row("d1", i, i, **metrics))
    raw = spark.createDataFrame(rows, "key string, value string, timestamp timestamp")
    readings = projection.raw_readings(raw, projection.metrics_of(rules))
    fired = " OR ".join(f"coalesce(({rule.condition}), false)" for rule in rules)
    judged = readings.selectExpr("seq", f"{fired} AS fired", f"coalesce(({bound}), false) AS kept")
    seen = {(row.fired, row.kept) for row in judged.collect()}
    assert (True, False) not in seen  # no firing reading is left out
    assert (False, False) in seen  # and the bound leaves some out
    assert (True, True) in seen
    # a shape that bounds nothing (NOT) leaves every reading in
    assert (
        loosest([*rules, compile_rule(spark, record("n", "NOT (rpm > 5)", None, ["d1"]))]) is None
    )
