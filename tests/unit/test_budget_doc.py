"""docs/budget.md's curve: rendered from the budget bench's results file, between its markers."""

import json
from pathlib import Path
from typing import Any

from bench.budget_doc import BEGIN, COMMAND, DOC, END, NAME, main

PAGE = f"# The budget\n\nBefore.\n\n{BEGIN}\nstale\n{END}\n\nAfter.\n"


def point(budget: float, f1: float) -> dict[str, Any]:
    return {
        "budget": budget,
        "per_1000_devices_day": budget * 1000,
        "skab_f1": f1,
        "skab_f1_ci": [f1 - 0.05, f1 + 0.04],
        "skab_recall_pct": 80.5,
        "skab_far_pct": 12.25,
        "skab_false_openings": 7,
        "skab_delay_rows_p50": 18.5,
        "skab_tuning_f1": 0.86,
        "sim_f1": 0.93,
        "sim_recall": 0.97,
        "sim_false_per_device_day": 2.4,
        "sim_false_per_1000_day": 2400,
        "sim_delay_p50_s": {"spike": 0.0, "level_shift": 1.0, "drift": None},
        "noise_worst": "on_off",
        "noise_worst_per_day": 2.5,
        "noise_worst_ratio": 2.5,
    }


def write(results: Path, curve: list[dict[str, Any]]) -> None:
    figures = {
        "curve": curve,
        "devices": 100,
        "minutes": 12.0,
        "noise_days": 1.0,
        "noise_devices": 3,
        "loadavg_1m": 4.2,
        "loadavg_1m_end": 5.1,
    }
    record = {"command": "python bench/quality/budget_curve.py --skab X", "figures": figures}
    record["finished"] = "2026-12-05T19:00:00+00:00"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{NAME}.json").write_text(json.dumps(record))


def render(tmp_path: Path, *extra: str) -> int:
    return main(["--results", str(tmp_path / "r"), "--doc", str(tmp_path / "b.md"), *extra])


def test_one_row_per_budget_in_the_order_run(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text(PAGE)
    write(tmp_path / "r", [point(1.0, 0.835), point(0.1, 0.81)])
    assert render(tmp_path) == 0
    text = (tmp_path / "b.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + 2
    assert rows[1].startswith("| 1 | 1000 | 0.835 [0.785, 0.875] | 80.5 % |")
    assert rows[2].startswith("| 0.1 | 100 | 0.81 ")
    assert "| spike 0, level shift 1 |" in rows[1]
    assert "2.5 (on_off)" in rows[1]
    assert "on 2026-12-05 (load average 4.2" in text
    assert "stale" not in text
    assert text.startswith("# The budget")
    assert text.endswith("After.\n")


def test_check_says_stale_until_rendered_and_rendering_again_changes_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "b.md").write_text(PAGE)
    write(tmp_path / "r", [point(1.0, 0.835)])
    assert render(tmp_path, "--check") == 1
    assert render(tmp_path) == 0
    once = (tmp_path / "b.md").read_text()
    assert render(tmp_path) == 0
    assert (tmp_path / "b.md").read_text() == once
    assert render(tmp_path, "--check") == 0


def test_without_results_the_page_says_how_to_measure(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text(PAGE)
    assert render(tmp_path) == 0
    assert f"Not yet measured: `{COMMAND}`." in (tmp_path / "b.md").read_text()


def test_a_page_without_markers_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# The budget\n")
    assert render(tmp_path) == 2
    assert (tmp_path / "b.md").read_text() == "# The budget\n"


def test_the_project_page_has_the_markers() -> None:
    text = DOC.read_text()
    assert text.index(BEGIN) < text.index(END)
