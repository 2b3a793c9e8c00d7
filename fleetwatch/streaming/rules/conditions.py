"""A rule's condition through Spark's own parser and analyser: checked against the reading's
schema, and compiled into what the rules query evaluates (:class:`CompiledRule`).

A bare name in a condition is a metric of the reading, a double (``vibration``; a name with a
dot or a dash in backticks, `` `motor.temp` ``); ``device_id``, ``seq``, ``firmware`` and
``status`` are the reading's own fields. Without a window the condition is any boolean SQL over
one reading, of the functions :data:`SCALAR_FUNCTIONS`. With a window it aggregates: each
aggregate (:data:`~fleetwatch.streaming.rules.panes.AGGREGATES`) is evaluated by Spark per
reading on its argument and merged over the window's panes; above the aggregates the condition
holds comparisons, logic, arithmetic and ``abs`` (:mod:`~fleetwatch.streaming.rules.having`).
The rules query and the checker run with ANSI mode off, so that a reading no rule can
evaluate (a cast that fails, a division by zero) gives a null, which does not fire, rather
than failing the query for every device.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.contracts.identifiers import METRIC_NAME_PATTERN
from fleetwatch.contracts.rules import RuleRecord, RuleSpec
from fleetwatch.streaming.rules import having, panes
from fleetwatch.streaming.rules.compiled import CompiledRule

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

READING_FIELDS = {"device_id": "string", "seq": "bigint", "firmware": "string", "status": "string"}
"""The reading's own fields a condition may name; every other name is a metric."""
PROJECTION_COLUMNS = frozenset({"event_ms", "received_ms", "event_time"})
"""Columns the rules query adds beside a reading's fields
(:func:`~fleetwatch.streaming.rules.projection.raw_readings`): not a metric's name in a rule."""
SCALAR_FUNCTIONS = frozenset(
    {
        "abs", "acos", "asin", "atan", "atan2", "cbrt", "ceil", "ceiling", "coalesce", "cos",
        "cosh", "degrees", "exp", "expm1", "floor", "greatest", "hypot", "if", "ifnull",
        "isnan", "isnotnull", "isnull", "least", "ln", "log", "log10", "log1p", "log2", "mod",
        "nanvl", "negative", "nullif", "nvl", "nvl2", "pmod", "positive", "pow", "power",
        "radians", "rint", "round", "bround", "sign", "signum", "sin", "sinh", "sqrt", "tan",
        "tanh", "lower", "upper", "length", "char_length", "character_length", "startswith",
        "endswith", "contains", "substring", "substr", "concat", "trim", "ltrim", "rtrim",
        "like", "ilike", "rlike", "regexp", "regexp_like", "double", "float", "int", "bigint",
        "string", "boolean", "try_divide", "try_add", "try_subtract", "try_multiply",
        "between",  # x BETWEEN a AND b, as Spark's parser gives it
    }
)  # fmt: skip
"""Deterministic functions with no side effect: a rule gives the same answer on a replay and
cannot fail the query on purpose (``raise_error``, ``assert_true``, ``reflect`` are not here)."""
_COMPARISONS = frozenset(
    {"GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual", "EqualTo"}
)
_METRIC = re.compile(METRIC_NAME_PATTERN)


class RuleError(FleetwatchError, ValueError):
    """A rule Spark cannot run as written; ``field`` names the part of the rule that is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass
class _Node:
    kind: str
    attrs: dict[str, Any]
    children: list[_Node]
    java: Any

    @property
    def name(self) -> str:
        """A function's or an attribute's name, as written (``[motor.temp]`` → ``motor.temp``)."""
        return str(self.attrs["nameParts"]).strip("[]")


def local_rules_session(app_name: str) -> SparkSession:
    """A small local Spark session of one process (the checker, ``rules test``), as
    :func:`rules_session` sets it up."""
    # lazy: pyspark is imported only where Spark runs
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return rules_session(spark)


def rules_session(spark: SparkSession) -> SparkSession:
    """A session of ``spark`` (its context, its own SQL confs) with ANSI mode off, and names
    case-sensitive, as a reading's metrics are (``Temp`` and ``temp`` are two metrics)."""
    session = spark.newSession()
    session.conf.set("spark.sql.ansi.enabled", "false")
    session.conf.set("spark.sql.caseSensitive", "true")
    return session


def parse(spark: SparkSession, text: str) -> _Node:
    """``text`` → its expression tree as Spark's parser reads it (``RuleError`` when it does
    not parse)."""
    from pyspark.errors import ParseException  # lazy: pyspark is imported only where Spark runs

    try:
        expr = spark._jsparkSession.sessionState().sqlParser().parseExpression(text)
    except ParseException as exc:
        raise RuleError("when", _spark_message(exc)) from None
    nodes = json.loads(expr.toJSON())
    position = iter(range(len(nodes)))

    def build(java: Any) -> _Node:
        node = nodes[next(position)]
        count = java.children().size()
        children = [build(java.children().apply(i)) for i in range(count)]
        kind = node["class"].rsplit(".", 1)[-1]
        return _Node(kind, node, children, java)

    return build(expr)


def compile_rule(spark: SparkSession, record: RuleRecord | RuleSpec) -> CompiledRule:
    """The rule as the rules query runs it; ``RuleError`` for a condition it cannot run."""
    tree = parse(spark, record.when)
    metrics: list[str] = []
    aggregates: list[str] = []
    _walk(tree, metrics, aggregates, inside_aggregate=False)
    devices = getattr(record, "devices", None)
    common: dict[str, Any] = {
        "id": record.id,
        "version": getattr(record, "version", 0),
        "name": record.name,
        "severity": record.severity,
        "when": record.when,
        "devices": None if devices is None else frozenset(devices),
        "metrics": tuple(metrics),
        "metric": metrics[0] if metrics else "*",
    }
    if record.window is None:
        if aggregates:
            raise RuleError(
                "window", f"{aggregates[0]}() aggregates over a window: give the rule one"
            )
        left = tree.children[0] if tree.kind in _COMPARISONS else None
        shown = (
            left.java.sql() if left is not None else _named(tree, metrics[0]) if metrics else "NULL"
        )
        atoms: list[str] = []
        lifted = _lifted(tree, atoms)
        evidence = ["agg", _atom(shown, atoms)]
        return CompiledRule(
            **common,
            values=tuple(atoms),
            condition=record.when,
            shown=shown,
            having=lifted,
            evidence=evidence,
            since_ms=getattr(record, "updated_ms", None),
        )
    if not aggregates:
        raise RuleError(
            "when", "a windowed rule's condition aggregates its readings: avg(x) > 7, count(*) = 0"
        )
    functions: list[str] = []
    arguments: list[str] = []
    above = _having(tree, functions, arguments)
    evidence = above[1] if tree.kind in _COMPARISONS else ["agg", 0]
    window = record.window
    return CompiledRule(
        **common,
        values=tuple(arguments),
        window_ms=(window.size_ms, window.slide_ms),
        aggregates=tuple(functions),
        having=above,
        evidence=evidence,
    )


def check(spark: SparkSession, spec: RuleSpec) -> CompiledRule:
    """Compile ``spec`` and have Spark's analyser resolve it against a reading's schema (and its
    value for an alert): ``RuleError`` with Spark's words where it is wrong."""
    from pyspark.errors import PySparkException  # lazy: pyspark is imported only where Spark runs

    rule = compile_rule(spark, spec)
    view = reading_view(spark, rule.metrics)
    try:
        kind = view.selectExpr(f"({spec.when}) AS c").schema["c"].dataType.simpleString()
        for sql in rule.values:
            view.selectExpr(f"CAST(({sql}) AS DOUBLE) AS v").schema  # noqa: B018
    except PySparkException as exc:
        raise RuleError("when", _spark_message(exc)) from None
    if kind != "boolean":
        raise RuleError("when", f"the condition is a {kind}, not a boolean")
    return rule


def reading_view(spark: SparkSession, metrics: tuple[str, ...]) -> DataFrame:
    """An empty frame of a reading's fields and ``metrics`` as doubles: what a condition is
    analysed against."""
    columns = [
        *(f"`{n}` {t}" for n, t in READING_FIELDS.items()),
        *(f"`{m}` double" for m in metrics),
    ]
    return spark.createDataFrame([], ", ".join(columns))


def _walk(node: _Node, metrics: list[str], aggregates: list[str], inside_aggregate: bool) -> None:
    if node.kind == "UnresolvedAttribute":
        name = node.name
        if ", " in name:
            raise RuleError("when", f"{name.replace(', ', '.')}: quote a name with a dot, `a.b`")
        if name not in READING_FIELDS:
            if name in PROJECTION_COLUMNS:
                raise RuleError("when", f"{name!r} is the rules query's own column, not a metric")
            if not _METRIC.fullmatch(name):
                raise RuleError("when", f"{name!r} is not a metric name")
            if name not in metrics:
                metrics.append(name)
    elif node.kind == "UnresolvedFunction":
        name = node.name.lower()
        if name in panes.AGGREGATES:
            if inside_aggregate:
                raise RuleError("when", f"{name}() inside another aggregate")
            if node.attrs.get("isDistinct"):
                raise RuleError("when", f"{name}(DISTINCT …) is not supported over a window")
            if node.attrs.get("filter"):
                raise RuleError(
                    "when",
                    f"{name}(…) FILTER (WHERE …) is not supported over a window: "
                    f"{name}(CASE WHEN … THEN x END) is",
                )
            aggregates.append(name)
            inside_aggregate = True
        elif name not in SCALAR_FUNCTIONS:
            raise RuleError("when", f"{name}() is not a function a rule may use")
    elif node.kind.startswith("Unresolved") and node.kind != "UnresolvedStar":
        raise RuleError("when", f"{node.java.sql()} is not allowed in a rule")
    elif "Subquery" in node.kind or node.kind == "Exists":
        raise RuleError("when", "a rule's condition reads one device's readings: no subqueries")
    for child in node.children:
        _walk(child, metrics, aggregates, inside_aggregate)


def _having(node: _Node, functions: list[str], arguments: list[str]) -> having.Tree:
    """The condition above its aggregates as a :mod:`~fleetwatch.streaming.rules.having` tree;
    each aggregate's function and argument SQL appended (a repeated one shared)."""
    if node.kind == "UnresolvedFunction" and node.name.lower() in panes.AGGREGATES:
        function = node.name.lower()
        argument = node.children[0].java.sql() if node.children else "1"
        key = (function, argument)
        pairs = list(zip(functions, arguments, strict=True))
        if key not in pairs:
            functions.append(function)
            arguments.append(argument)
            pairs.append(key)
        return ["agg", pairs.index(key)]
    if node.kind == "Literal":
        return ["lit", _literal(node)]
    if node.kind == "UnresolvedFunction" and node.name.lower() == "abs":
        return ["abs", _having(node.children[0], functions, arguments)]
    if node.kind in having.OPERATORS:
        return [node.kind, *(_having(c, functions, arguments) for c in node.children)]
    if node.kind == "UnresolvedAttribute":
        raise RuleError("when", f"{node.name} outside an aggregate: a window has many readings")
    raise RuleError(
        "when",
        f"{node.java.sql()} over a window's aggregates: only comparisons, AND/OR/NOT, "
        "arithmetic, abs() and IS [NOT] NULL apply above them; put it inside the aggregate",
    )


def _lifted(node: _Node, atoms: list[str]) -> having.Tree:
    """A condition without a window as a :mod:`~fleetwatch.streaming.rules.having` tree over
    values Spark computes per reading (``atoms``, each SQL once), its numbers lifted out:
    ``AND`` / ``OR`` / ``NOT`` stay in the tree, as does a comparison of any expression with a
    numeric literal (the expression a value, compared as a double); anything else is a value
    of its own, its truth as 1.0 or 0.0. Rules that differ only in their thresholds then share
    their values, so the projection's work per reading grows with the distinct expressions the
    rules name, not with the rules."""
    if node.kind in ("And", "Or", "Not"):
        return [node.kind, *(_lifted(c, atoms) for c in node.children)]
    if node.kind in _COMPARISONS:
        left, right = node.children
        if _is_number(right) and not _is_number(left):
            return [node.kind, ["agg", _atom(left.java.sql(), atoms)], ["lit", _literal(right)]]
        if _is_number(left) and not _is_number(right):
            return [node.kind, ["lit", _literal(left)], ["agg", _atom(right.java.sql(), atoms)]]
    return ["EqualTo", ["agg", _atom(node.java.sql(), atoms)], ["lit", 1.0]]


def _atom(sql: str, atoms: list[str]) -> int:
    if sql not in atoms:
        atoms.append(sql)
    return atoms.index(sql)


_NUMERIC_TYPES = frozenset({"byte", "short", "integer", "long", "float", "double"})


def _is_number(node: _Node) -> bool:
    kind = str(node.attrs.get("dataType", ""))
    return node.kind == "Literal" and (kind in _NUMERIC_TYPES or kind.startswith("decimal"))


def _literal(node: _Node) -> float | bool | None:
    kind, value = node.attrs.get("dataType"), node.attrs.get("value")
    if value is None or kind == "null":
        return None
    if kind == "boolean":
        return str(value).lower() == "true"
    try:
        return float(value)
    except ValueError:
        raise RuleError("when", f"{value!r} where a number is wanted") from None


def _named(node: _Node, metric: str) -> str:
    """The SQL of the first place ``node`` names ``metric``."""
    if node.kind == "UnresolvedAttribute" and node.name == metric:
        return str(node.java.sql())
    for child in node.children:
        found = _named(child, metric)
        if found:
            return found
    return ""


def _spark_message(exc: Exception) -> str:
    """Spark's message without the plan it appends: its first line, and a parse error's SQL
    with the caret under the fault."""
    text = str(exc).strip()
    first, _, rest = text.partition("\n")
    if "== SQL ==" in rest:
        return f"{first}\n{rest.split('== SQL ==', 1)[1].strip(chr(10))}"
    return first.split(";\n", 1)[0]
