"""The dashboards as code: each module builds one with the Grafana Foundation SDK; this one
turns them into the JSON models Grafana reads (``deploy/grafana/dashboards/*.json``, committed,
and what ``fleetwatch grafana push`` publishes).

``fleetwatch grafana build`` rewrites the files; ``--check`` (and a unit test) fails when they
differ from what the code builds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from fleetwatch.observability import device, fleet, pipeline

BUILDERS: dict[str, Callable[[], dashboard.Dashboard]] = {
    "fleet": fleet.build,
    "device": device.build,
    "pipeline": pipeline.build,
}
"""File stem → builder. The uids are fixed: a push replaces a dashboard of the same uid."""


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def model(name: str) -> dict[str, Any]:
    """The dashboard's JSON model, panels numbered in order (ids are unique per dashboard)."""
    built: dict[str, Any] = json.loads(json.dumps(BUILDERS[name]().build(), cls=JSONEncoder))
    for number, panel in enumerate(_panels(built.get("panels", [])), start=1):
        panel["id"] = number
    return built


def models() -> dict[str, dict[str, Any]]:
    return {name: model(name) for name in BUILDERS}


def render(built: dict[str, Any]) -> str:
    return json.dumps(built, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, built in models().items():
        path = directory / f"{name}.json"
        path.write_text(render(built))
        written.append(path)
    return written


def stale(directory: Path) -> list[str]:
    """Files of ``directory`` missing or different from what the code builds."""
    out = []
    for name, built in models().items():
        path = directory / f"{name}.json"
        if not path.exists() or path.read_text() != render(built):
            out.append(path.name)
    return out
