"""The budget's trade-off curve in ``docs/budget.md``, rendered from the results file of
``bench/quality/budget_curve.py``: one table row per budget, between the page's two markers
(:data:`BEGIN`, :data:`END`), as :mod:`bench.report` renders the README's figures. No figure is
typed by hand; without a results file the table says how to measure it.

    python bench/budget_doc.py [--results DIR] [--doc FILE] [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # see bench/common.py

from bench.report import RESULTS, ROOT, between, update

DOC = ROOT / "docs" / "budget.md"
BEGIN = "<!-- curve:begin -->"
END = "<!-- curve:end -->"
NAME = "quality-budget_curve"
COMMAND = "python bench/quality/budget_curve.py --skab SKAB/data"
HEAD = (
    "| budget (a device-day) | for 1,000 devices, a day | SKAB held-out F1 [95 % CI] "
    "| SKAB recall | SKAB false-alarm rows | SKAB false openings | SKAB delay p50 (rows) "
    "| simulated F1 | simulated recall | simulated false alerts a device-day "
    "| simulated delay p50 (s) | worst healthy noise a device-day |\n"
    "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"
)


def _text(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def row(point: Mapping[str, Any]) -> str:
    delays = ", ".join(
        f"{kind.replace('_', ' ')} {_text(v)}"
        for kind, v in point["sim_delay_p50_s"].items()
        if v is not None
    )
    low, high = point["skab_f1_ci"]
    cells = [
        _text(point["budget"]),
        _text(point["per_1000_devices_day"]),
        f"{_text(point['skab_f1'])} [{_text(low)}, {_text(high)}]",
        f"{_text(point['skab_recall_pct'])} %",
        f"{_text(point['skab_far_pct'])} %",
        _text(point["skab_false_openings"]),
        _text(point["skab_delay_rows_p50"]),
        _text(point["sim_f1"]),
        _text(point["sim_recall"]),
        _text(point["sim_false_per_device_day"]),
        delays,
        f"{_text(point['noise_worst_per_day'])} ({point['noise_worst']})",
    ]
    return "| " + " | ".join(cells) + " |"


def table(record: Mapping[str, Any] | None) -> str:
    """The curve's table with the command and date it was measured by, or how to measure it."""
    if record is None:
        return f"Not yet measured: `{COMMAND}`."
    figures = record["figures"]
    lines = [HEAD, *(row(point) for point in figures["curve"])]
    where = (
        f"Measured by `{record['command']}` on {record['finished'][:10]} (load average "
        f"{figures['loadavg_1m']} at the start, {figures['loadavg_1m_end']} at the end; "
        f"{figures['devices']} simulated devices for {figures['minutes']:g} minutes, "
        f"{figures['noise_devices']} devices of each noise shape for "
        f"{figures['noise_days']:g} {'day' if figures['noise_days'] == 1 else 'days'})."
    )
    return "\n".join([*lines, "", where])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is stale")
    args = parser.parse_args(argv)
    path = args.results / f"{NAME}.json"
    record = json.loads(path.read_text()) if path.is_file() else None
    return update(args.doc, lambda text: between(text, BEGIN, END, table(record)), args.check)


if __name__ == "__main__":
    sys.exit(main())
