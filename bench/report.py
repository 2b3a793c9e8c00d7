"""The README's current-figures table, rendered from the results files the benches write.

Each bench writes ``bench/results/<group>-<name>.json`` when it runs
(:func:`bench.common.write_results`): its figures, the command line, the date, the load
average at its start and end and the git revision. :data:`BENCHES` picks a few headline
figures of each and labels them; this script renders one table row per figure (the figure,
its value, the command that produced it, the date) between the README's two markers
(:data:`BEGIN`, :data:`END`), and a figure whose results file is missing reads "not yet
measured" beside the command that measures it. No figure is typed by hand.

    python bench/report.py [--results DIR] [--readme FILE] [--check]

``--check`` changes nothing and exits 1 when the README's table is not what the results give.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"
BEGIN = "<!-- figures:begin -->"
END = "<!-- figures:end -->"
NOT_MEASURED = "not yet measured"

Pick = Callable[[Mapping[str, Any]], Any]


def key(path: str) -> Pick:
    """The value at a dotted ``path`` of a bench's figures (``alert_api_ms.p95``)."""

    def pick(figures: Mapping[str, Any]) -> Any:
        value: Any = figures
        for part in path.split("."):
            value = value[part]
        return value

    return pick


def worst(path: str) -> Pick:
    """The largest value of the mapping at ``path``."""
    return lambda figures: max(key(path)(figures).values())


@dataclass(frozen=True)
class Figure:
    label: str
    pick: Pick
    unit: str = ""
    digits: int | None = None
    """Decimals shown; ``None`` shows the number as the bench wrote it."""


@dataclass(frozen=True)
class Bench:
    name: str
    """The results file's name without ``.json``: ``<group>-<name>`` of
    ``bench/<group>/<name>.py``, or of a part of the script its command names."""
    command: str
    """How to run it, shown while it has no results (a row of results shows the command run)."""
    figures: tuple[Figure, ...]


BENCHES: tuple[Bench, ...] = (
    Bench(
        "quality-realdata",
        "python bench/quality/realdata.py --skab SKAB/data",
        (
            Figure("SKAB outlier F1 (34 fault files)", key("outlier_f1"), digits=3),
            Figure(
                "SKAB held-out outlier F1 (valve2/, other/)", key("held_out.outlier_f1"), digits=3
            ),
            Figure("SKAB held-out false-alarm rate", key("held_out.far_pct"), "%", 2),
            Figure(
                "SKAB held-out anomaly_score average precision", key("held_out.score_ap"), digits=3
            ),
            Figure("SKAB false-alarm rate, normal rows", key("far_pct"), "%", 2),
            Figure("SKAB missed-alarm rate, fault rows", key("mar_pct"), "%", 2),
            Figure("SKAB NAB score, standard profile", key("nab_standard"), digits=2),
            Figure("SKAB alert episodes per labelled fault", key("episodes_per_anomaly"), digits=2),
        ),
    ),
    Bench(
        "quality-offline",
        "python bench/quality/offline.py --start 2026-11-20T10:00:00Z",
        (
            Figure("simulated fleet F1, offline replay", key("f1"), digits=3),
            Figure("simulated fleet recall, offline replay", key("recall"), digits=3),
            Figure(
                "simulated fleet false alerts, offline replay",
                key("false_alerts_per_device_day"),
                "per device-day",
                1,
            ),
        ),
    ),
    Bench(
        "quality-live",
        "python bench/quality/live.py",
        (
            Figure("simulated fleet F1, live pipeline", key("f1"), digits=3),
            Figure(
                "simulated fleet false alerts, live pipeline",
                key("false_alerts_per_device_day"),
                "per device-day",
                1,
            ),
        ),
    ),
    Bench(
        "quality-noise_budget",
        "python bench/quality/noise_budget.py",
        (
            Figure(
                "healthy noise: shapes over budget past the 95 % interval, at 1 / 0.1 / 0.01",
                lambda f: [len(f["by_budget"][b]["broken"]) for b in ("1", "0.1", "0.01")],
                "of 7",
            ),
        ),
    ),
    Bench(
        "quality-healthy_fleet",
        "python bench/quality/healthy_fleet.py",
        (
            Figure(
                "healthy simulated fleet: kinds over budget past the 95 % interval, at 1 / 0.1 / "
                "0.01",
                lambda f: [len(f["by_budget"][b]["broken"]) for b in ("1", "0.1", "0.01")],
                "of 4",
            ),
        ),
    ),
    Bench(
        "quality-constants",
        "python bench/quality/constants.py",
        (Figure("detection constants that change what alerts (budget 35)", key("alerting")),),
    ),
    Bench(
        "micro-detect",
        "python bench/micro/detect.py",
        (Figure("`fleetwatch detect` throughput", key("rows_per_s"), "rows/s", 0),),
    ),
    Bench(
        "micro-score_bucket",
        "python bench/micro/score_bucket.py",
        (Figure("scorer's Python step, CPU per reading", key("us_per_reading"), "µs", 1),),
    ),
    Bench(
        "micro-train_bucket",
        "python bench/micro/train_bucket.py",
        (
            Figure(
                "trainer's Python step, warm", key("warm_readings_per_cpu_s"), "readings/CPU s", 0
            ),
        ),
    ),
    Bench(
        "micro-gateway",
        "python bench/micro/gateway.py",
        (
            Figure("gateway drain, 1 worker", key("gateway_rps.1"), "readings/s", 0),
            Figure("gateway CPU per reading, 1 worker", key("gateway_cpu_us_per_msg.1"), "µs", 1),
        ),
    ),
    Bench(
        "micro-api",
        "python bench/micro/api.py",
        (Figure("API p99 at 500 requests/s, 10,000 devices", key("p99_ms"), "ms", 1),),
    ),
    Bench(
        "pipeline-under_load",
        "python bench/pipeline/under_load.py --seconds 60 --repeat 3",
        (
            Figure("publish → alert p50 at 1,000 readings/s", key("p50_ms_1k"), "ms", 0),
            Figure("publish → alert p99 at 1,000 readings/s", key("p99_ms_1k"), "ms", 0),
            Figure("publish → alert p99 at 5,000 readings/s", key("p99_ms_5k"), "ms", 0),
            Figure(
                "pipeline CPU per reading at 5,000/s, worst run",
                lambda f: max(run["pipeline"] for run in f["cpu_us_per_reading_5k"]),
                "µs",
                0,
            ),
        ),
    ),
    Bench(
        "pipeline-max_throughput",
        "python bench/pipeline/under_load.py --skip-latency",
        (Figure("scorer sustained throughput", key("max_throughput_rps"), "readings/s", 0),),
    ),
    Bench(
        "pipeline-sustainable_rate",
        "python bench/pipeline/sustainable_rate.py",
        (
            Figure(
                "rate held at p99 ≤ 1 s, 3 phases in a row, one warm pipeline",
                key("sustainable_rps"),
                "readings/s",
                0,
            ),
        ),
    ),
    Bench(
        "pipeline-to_api",
        "python bench/pipeline/to_api.py",
        (Figure("event → alert stored by the API, p95", key("alert_api_ms.p95"), "ms", 0),),
    ),
    Bench(
        "pipeline-train",
        "python bench/pipeline/train.py --rate 24000 --no-baseline",
        (
            Figure("trainer throughput, 10,000 devices", key("throughput_rps"), "readings/s", 0),
            Figure("parameter freshness p95", key("freshness_p95_s"), "s", 1),
            Figure("trainer peak RSS, all its processes", key("peak_rss_mb"), "MB", 0),
        ),
    ),
    Bench(
        "pipeline-hostile",
        "python bench/pipeline/hostile.py",
        (
            Figure("readings lost beside hostile devices", key("lost"), digits=0),
            Figure(
                "normal p99 beside a 50x flood, over the same run alone",
                key("flood_normal_p99_ratio"),
                "times",
                2,
            ),
        ),
    ),
)


def load(results: Path) -> dict[str, dict[str, Any]]:
    """Every results file in ``results``, by bench name."""
    if not results.is_dir():
        return {}
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}


def value_text(value: Any, figure: Figure) -> str:
    if value is None:  # the run skipped it (under_load.py --skip-max)
        return NOT_MEASURED
    if isinstance(value, list):  # one value per run
        bare = Figure(figure.label, figure.pick, "", figure.digits)
        return f"{' / '.join(value_text(v, bare) for v in value)} {figure.unit}".rstrip()
    if isinstance(value, bool) or not isinstance(value, int | float):
        text = str(value)
    elif figure.digits is None:
        text = f"{value:,}"
    else:
        text = f"{value:,.{figure.digits}f}"
    return f"{text} {figure.unit}".rstrip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def rows(benches: Sequence[Bench], results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One Markdown table row per figure of ``benches``, in their order."""
    out = []
    for bench in benches:
        record = results.get(bench.name)
        for figure in bench.figures:
            try:
                if record is None:
                    raise KeyError(bench.name)
                value = value_text(figure.pick(record["figures"]), figure)
                command, date = record["command"], record["finished"][:10]
            except (KeyError, TypeError, ValueError):
                value, command, date = NOT_MEASURED, bench.command, ""
            out.append(f"| {figure.label} | {value} | `{_cell(command)}` | {date} |")
    return out


def table(benches: Sequence[Bench], results: Mapping[str, Mapping[str, Any]]) -> str:
    head = ["| figure | value | measured by | date |", "| --- | ---: | --- | --- |"]
    return "\n".join([*head, *rows(benches, results)])


def between(text: str, begin: str, end: str, generated: str) -> str:
    """``text`` with what lies between its ``begin`` and ``end`` markers replaced by
    ``generated`` (a line saying it is generated goes first)."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"no {begin} … {end} markers, in that order")
    note = "<!-- generated by `make bench-report` from bench/results/*.json -->"
    return f"{text[:start]}{begin}\n{note}\n{generated}\n{text[stop:]}"


def render(readme: str, benches: Sequence[Bench], results: Mapping[str, Mapping[str, Any]]) -> str:
    """``readme`` with the text between its markers replaced by the table."""
    return between(readme, BEGIN, END, table(benches, results))


def update(path: Path, render_text: Callable[[str], str], check: bool) -> int:
    """Render ``path``'s generated part with ``render_text``: 0 when written (or, with
    ``check``, when already current), 1 when ``check`` finds it stale, 2 when it has no
    markers (the file is then left as it is)."""
    before = path.read_text()
    try:
        after = render_text(before)
    except ValueError as exc:
        print(f"{path}: the file has {exc}", file=sys.stderr)
        return 2
    if check:
        if after != before:
            print(f"{path}: the generated table is stale; run make bench-report")
            return 1
        return 0
    if after != before:
        path.write_text(after)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is stale")
    args = parser.parse_args(argv)
    results = load(args.results)
    return update(args.readme, lambda text: render(text, BENCHES, results), args.check)


if __name__ == "__main__":
    sys.exit(main())
