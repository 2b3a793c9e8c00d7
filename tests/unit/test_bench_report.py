"""The README's figures table: rendered from the benches' results files, between its markers."""

import json
from pathlib import Path
from typing import Any

import pytest

from bench.common import ROOT, bench_name, write_results
from bench.report import (
    BEGIN,
    BENCHES,
    END,
    NOT_MEASURED,
    Bench,
    Figure,
    key,
    main,
    value_text,
    worst,
)

README = f"""# fleetwatch

Intro.

{BEGIN}
| stale | table |
{END}

## After
"""

DETECT = Bench(
    "micro-detect",
    "python bench/micro/detect.py",
    (Figure("detect throughput", key("rows_per_s"), "rows/s", 0),),
)
BUDGET = Bench(
    "quality-noise_budget",
    "python bench/quality/noise_budget.py",
    (Figure("worst shape", worst("shapes"), "per device-day", 2),),
)


def write(results: Path, name: str, figures: dict[str, Any], finished: str) -> None:
    record = {"command": f"python bench/{name}.py --x", "finished": finished, "figures": figures}
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{name}.json").write_text(json.dumps(record))


def table_of(readme: str) -> list[str]:
    inside = readme[readme.index(BEGIN) + len(BEGIN) : readme.index(END)]
    return [line for line in inside.splitlines() if line.startswith("|")]


def run(tmp_path: Path) -> int:
    return main(["--results", str(tmp_path / "results"), "--readme", str(tmp_path / "README.md")])


@pytest.fixture
def readme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("bench.report.BENCHES", (DETECT, BUDGET))
    path = tmp_path / "README.md"
    path.write_text(README)
    return path


def test_a_row_per_figure_from_its_results_file(tmp_path: Path, readme: Path) -> None:
    write(
        tmp_path / "results", "micro-detect", {"rows_per_s": 17561.4}, "2026-03-02T10:00:00+00:00"
    )
    write(
        tmp_path / "results",
        "quality-noise_budget",
        {"shapes": {"poisson": 0.14, "student_t2": 1.97}},
        "2026-03-03T11:00:00+00:00",
    )
    assert run(tmp_path) == 0
    rows = table_of(readme.read_text())
    assert rows[0] == "| figure | value | measured by | date |"
    assert rows[2:] == [
        "| detect throughput | 17,561 rows/s | `python bench/micro-detect.py --x` | 2026-03-02 |",
        "| worst shape | 1.97 per device-day | `python bench/quality-noise_budget.py --x` "
        "| 2026-03-03 |",
    ]


def test_a_missing_results_file_says_not_yet_measured_with_the_command(
    tmp_path: Path, readme: Path
) -> None:
    write(tmp_path / "results", "micro-detect", {"rows_per_s": 9000}, "2026-03-02T10:00:00+00:00")
    assert run(tmp_path) == 0
    rows = table_of(readme.read_text())
    assert rows[-1] == (
        f"| worst shape | {NOT_MEASURED} | `python bench/quality/noise_budget.py` |  |"
    )


def test_a_figure_missing_from_its_file_is_not_measured_either(
    tmp_path: Path, readme: Path
) -> None:
    write(tmp_path / "results", "micro-detect", {"seconds": 3.2}, "2026-03-02T10:00:00+00:00")
    assert run(tmp_path) == 0
    assert NOT_MEASURED in table_of(readme.read_text())[2]


def test_only_the_text_between_the_markers_changes(tmp_path: Path, readme: Path) -> None:
    assert run(tmp_path) == 0
    after = readme.read_text()
    assert "stale" not in after
    assert after.startswith(README[: README.index(BEGIN) + len(BEGIN)])
    assert after.endswith(README[README.index(END) :])
    assert len(table_of(after)) == 2 + 2


def test_rendering_twice_changes_nothing_and_check_agrees(tmp_path: Path, readme: Path) -> None:
    write(tmp_path / "results", "micro-detect", {"rows_per_s": 9000}, "2026-03-02T10:00:00+00:00")
    assert main(["--results", str(tmp_path / "results"), "--readme", str(readme), "--check"]) == 1
    assert run(tmp_path) == 0
    once = readme.read_text()
    assert run(tmp_path) == 0
    assert readme.read_text() == once
    assert main(["--results", str(tmp_path / "results"), "--readme", str(readme), "--check"]) == 0


def test_a_readme_without_markers_is_refused(tmp_path: Path, readme: Path) -> None:
    readme.write_text("# fleetwatch\n")
    assert run(tmp_path) == 2
    assert readme.read_text() == "# fleetwatch\n"


def test_write_results_names_the_file_after_the_bench_and_records_the_run(
    tmp_path: Path,
) -> None:
    script = ROOT / "bench" / "micro" / "detect.py"
    path = write_results(script, {"rows_per_s": 123}, tmp_path, argv=["--rows", "5"])
    assert path == tmp_path / "micro-detect.json"
    record = json.loads(path.read_text())
    assert record["bench"] == bench_name(script) == "micro-detect"
    assert record["command"] == "python bench/micro/detect.py --rows 5"
    assert record["figures"] == {"rows_per_s": 123}
    assert len(record["load_avg_start"]) == len(record["load_avg_end"]) == 3
    assert record["finished"] >= record["started"]
    write_results(script, {"rows_per_s": 456}, tmp_path, argv=[])
    assert json.loads(path.read_text())["figures"] == {"rows_per_s": 456}
    assert [p.name for p in tmp_path.iterdir()] == ["micro-detect.json"]


def test_every_bench_of_the_table_is_a_script_and_the_table_fits() -> None:
    for bench in BENCHES:
        group, _ = bench.name.split("-", 1)
        script = bench.command.split()[1]
        assert script.startswith(f"bench/{group}/"), bench.name
        assert (ROOT / script).is_file(), bench.name
    assert sum(len(b.figures) for b in BENCHES) + 2 <= 36


def test_a_figure_of_each_run_shows_every_run() -> None:
    figure = Figure("p99", key("p99"), "ms", 0)
    assert value_text([984.6, 1051.7], figure) == "985 / 1,052 ms"
    assert value_text("below 1,000", Figure("rate", key("r"), "readings/s")) == (
        "below 1,000 readings/s"
    )
