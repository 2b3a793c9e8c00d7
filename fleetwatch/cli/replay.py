"""`fleetwatch replay`: the scorer over a range of the log into a new topic; `replay diff`."""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer
from rich.console import Console

from fleetwatch.cli import progress
from fleetwatch.cli.common import AsJson, fail, load_settings, print_json
from fleetwatch.cli.preflight import require_kafka
from fleetwatch.cli.stages import epoch_ms
from fleetwatch.streaming.progress_metrics import following
from fleetwatch.streaming.scorer.replay import Diff, diff, read_events
from fleetwatch.streaming.scorer.replay import replay as run_replay
from fleetwatch.streaming.spark_session import build_session

app = typer.Typer(
    help="Re-run the scorer over a range of telemetry.raw, and compare alert topics.",
    invoke_without_command=True,
    no_args_is_help=False,
)
_out = Console(soft_wrap=True)


@app.callback()
def replay(
    ctx: typer.Context,
    from_: Annotated[
        str | None, typer.Option("--from", help="first event time (ISO 8601 with a zone)")
    ] = None,
    to: Annotated[str | None, typer.Option("--to", help="event times before this one")] = None,
    output_topic: Annotated[
        str | None, typer.Option("--output-topic", help="where the alert events go")
    ] = None,
) -> None:
    """Score a range of telemetry.raw with the scorer's own plan (availableNow) into
    --output-topic, with the parameters on model.params."""
    if ctx.invoked_subcommand is not None:
        return
    if not output_topic:
        fail("give --output-topic (the topic the replayed alert events are written to)")
    settings = load_settings()
    if output_topic == settings.topics.alerts:
        fail(f"--output-topic must not be the live alerts topic {output_topic!r}")
    lo, hi = epoch_ms(from_), epoch_ms(to)
    if lo is not None and hi is not None and lo >= hi:
        fail("--from must be before --to")
    require_kafka(settings.kafka)
    raw = settings.topics.telemetry_raw
    total = progress.log_end(settings.kafka, raw) if progress.attached() else None
    spark = build_session(settings, "fleetwatch-replay")
    try:
        with progress.bar(f"replay {raw} → {output_topic} (offsets)", total) as update:
            shown = (
                following(spark, "fleetwatch-replay", progress.reports_to(update, raw))
                if progress.attached()
                else contextlib.nullcontext()
            )
            with shown:
                run_replay(spark, settings, output_topic, lo, hi)
    except RuntimeError as exc:
        fail(str(exc))
    finally:
        spark.stop()
    _out.print(f"replayed into {output_topic}")


@app.command("diff")
def diff_topics(
    a: Annotated[str, typer.Argument(help="an alert topic")],
    b: Annotated[str, typer.Argument(help="another alert topic")],
    as_json: AsJson = False,
) -> None:
    """Compare the alert events of two topics by event id (detected_ms ignored); exit 1 when
    they differ (--json: the counts and every differing event id)."""
    settings = load_settings()
    try:
        left = read_events(settings.kafka, a)
        right = read_events(settings.kafka, b)
    except (LookupError, TimeoutError) as exc:
        fail(str(exc))
    result = diff(left, right)
    if as_json:
        print_json(
            {
                "a": a,
                "b": b,
                "identical": result.identical,
                "same": result.same,
                "only_a": result.only_a,
                "only_b": result.only_b,
                "changed": result.changed,
            }
        )
    else:
        _print_diff(a, b, result)
    if not result.identical:
        raise typer.Exit(1)


def _print_diff(a: str, b: str, result: Diff) -> None:
    _out.print(
        f"{result.same} identical, {len(result.only_a)} only in {a}, "
        f"{len(result.only_b)} only in {b}, {len(result.changed)} different"
    )
    for label, ids in (
        (f"only in {a}", result.only_a),
        (f"only in {b}", result.only_b),
        ("different", result.changed),
    ):
        for event in ids[:20]:
            _out.print(f"  {label}: {event}")
