"""Running the simulated fleet on a virtual clock, for the simulator's unit tests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fleetwatch.simulator.engine import Fleet
from fleetwatch.simulator.recording import virtual_run
from fleetwatch.simulator.scenario import Scenario


@dataclass
class Run:
    messages: list[tuple[str, bytes]] = field(default_factory=list)
    truth: list[dict[str, Any]] = field(default_factory=list)
    sent_at: list[int] = field(default_factory=list)

    def readings(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Parsed well-formed readings by (device, seq)."""
        out = {}
        for device, payload in self.messages:
            try:
                body = json.loads(payload)
            except ValueError:
                continue
            if isinstance(body.get("metrics"), dict):
                out[(device, body["seq"])] = body
        return out


def simulate(scenario: Scenario, start_ms: int = 1_700_000_000_000) -> Run:
    fleet = Fleet(scenario, range(scenario.devices), start_ms, str)
    run = Run()
    for now, tick in virtual_run(fleet):
        run.messages.extend(tick.messages)
        run.sent_at.extend([now] * len(tick.messages))
        run.truth.extend(tick.truth)
    return run
