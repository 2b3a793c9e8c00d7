"""`fleetwatch detect FILE --out SCORES.csv`: score a recorded CSV as the streaming path would."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from fleetwatch.cli import progress
from fleetwatch.cli.common import AsJson, fail, load_settings, print_json
from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.filemode.columns import DEVICE_NAMES, TIME_NAMES
from fleetwatch.filemode.csvfile import DEFAULT_PIECE_ROWS, DetectSummary, detect_csv
from fleetwatch.filemode.scoring import DEFAULT_CHUNK_ROWS
from fleetwatch.models.registry import KINDS, Tuning, detector_factory
from fleetwatch.streaming.scorer.policy import policy_of

console = Console()


def _values(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names:
        fail("--values names no column")
    return names


def _report(summary: DetectSummary, out: Path) -> None:
    cols = summary.columns
    table = Table(title=f"fleetwatch detect → {out}", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("timestamp", f"{cols.timestamp} ({cols.time_kind})")
    table.add_row("device", cols.device or "- (one device)")
    table.add_row("values", ", ".join(cols.values))
    table.add_row("rows", f"{summary.rows:,}")
    table.add_row("devices", f"{summary.devices:,}")
    table.add_row("alerts", f"{summary.alerts:,} ({summary.alert_rate:.2%} of rows)")
    if summary.bad_times:
        table.add_row("unreadable timestamps", f"{summary.bad_times:,} rows (not scored)")
    if summary.no_values:
        table.add_row("rows without a value", f"{summary.no_values:,} (not scored)")
    if summary.pools is not None:
        table.add_row("fleet", f"pooled {summary.pools:,} times from new parameters")
    table.add_row("time", f"{summary.seconds:.2f} s ({summary.rows_per_s:,.0f} rows/s)")
    console.print(table)


def _data_rows(path: Path) -> int:
    """The rows of a CSV after its header, by its line ends (the bar's end; a quoted line end
    inside a cell makes it a little long)."""
    lines = 0
    last = b"\n"
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            lines += block.count(b"\n")
            last = block[-1:]
    return max(0, lines - 1 + (last != b"\n"))


def _as_json(summary: DetectSummary, out: Path) -> dict[str, object]:
    return {
        "out": str(out),
        "columns": asdict(summary.columns),
        "rows": summary.rows,
        "devices": summary.devices,
        "alerts": summary.alerts,
        "alert_rate": summary.alert_rate,
        "bad_times": summary.bad_times,
        "no_values": summary.no_values,
        "seconds": summary.seconds,
        "rows_per_s": summary.rows_per_s,
    } | ({} if summary.pools is None else {"fleet_pools": summary.pools})


def detect(
    file: Annotated[Path, typer.Argument(help="a CSV with a header row")],
    out: Annotated[Path, typer.Option("--out", "-o", help="where to write the scored CSV")],
    timestamp: Annotated[
        str | None,
        typer.Option(
            help="the time column (default: one named "
            f"{'|'.join(TIME_NAMES)}, else the first of ISO-8601 times). ISO-8601 times, or "
            "epoch seconds (median below 1e11) or milliseconds; times without a zone are UTC"
        ),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(
            help=f"the device id column (default: one named {'|'.join(DEVICE_NAMES)}, "
            "else the whole file is one device)"
        ),
    ] = None,
    values: Annotated[
        str | None,
        typer.Option(
            help="comma-separated value columns (default: every numeric column other than "
            "the time and device)"
        ),
    ] = None,
    chunk_rows: Annotated[
        int,
        typer.Option(
            min=1,
            help="rows per device scored before the model learns them; 1 is the strictest, "
            "larger is faster",
        ),
    ] = DEFAULT_CHUNK_ROWS,
    piece_rows: Annotated[
        int, typer.Option(min=1000, help="rows read from the file at a time (bounds memory)")
    ] = DEFAULT_PIECE_ROWS,
    detectors: Annotated[
        str | None,
        typer.Option(
            help="comma-separated detector kinds to combine instead of the default one "
            f"(known: {', '.join(sorted(KINDS))}), e.g. level,flatline",
        ),
    ] = None,
    fleet: Annotated[
        bool,
        typer.Option(
            "--fleet",
            help="score the file's devices as one fleet: in lockstep of event time, each "
            "scope's fleet model pooled from the devices (at 120 s, then each minute) and used "
            "as the scorer uses its champion (score.fleet_model); needs a device column",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Score a recorded CSV online and causally with the scorer's own per-device step: per
    device, in timestamp order, each chunk of rows is scored (alert episodes, device-wide
    moves) with what the trainer's step learned from the earlier chunks, then learned.
    Writes every input row with anomaly_score (0-1), alert (an alert of the device is open at
    the row), alert_metric and reason. --fleet: the devices as one fleet, each held to its
    scope's pooled fleet model as in production. --json: the summary as one JSON object."""
    settings = load_settings()
    if out.resolve() == file.resolve():
        fail("--out must not be the input file")
    try:
        make = detector_factory(detectors, Tuning.of(settings.score))
        total = _data_rows(file) if progress.attached() and file.is_file() else None
        with progress.bar(f"detect {file.name}", total) as update:
            summary = detect_csv(
                file,
                out,
                timestamp,
                device,
                _values(values),
                chunk_rows,
                piece_rows,
                make,
                on_piece=lambda rows, _alerts: update(rows),
                fleet=fleet,
                policy=policy_of(settings),
            )
    except FleetwatchError as exc:
        fail(str(exc))
    if as_json:
        print_json(_as_json(summary, out))
        return
    _report(summary, out)
