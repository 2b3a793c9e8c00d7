"""Record a run to a file and replay it, at its original speed or faster.

``record`` runs the scenario on a virtual clock (no broker, as fast as the CPU allows) and
writes JSON lines: one ``scenario`` header, then ``msg`` lines (offset from the start in ms,
device id, the exact payload) and ``truth`` lines, in the order they happened. ``replay``
publishes the messages again with the same spacing divided by ``speed`` (0: no pacing), so a
run can be repeated exactly: the payloads, event times included, are the recorded ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetwatch.simulator.engine import Fleet, Tick
from fleetwatch.simulator.errors import SimulatorError
from fleetwatch.simulator.scenario import Scenario, scenario_from_dict, scenario_to_dict

_TOPIC = "{}"


@dataclass(frozen=True)
class Recorded:
    at_ms: int
    device_id: str
    payload: bytes


def virtual_run(fleet: Fleet) -> Iterator[tuple[int, Tick]]:
    """Step ``fleet`` on a virtual clock from reading to reading until it ends (then close it)."""
    now = fleet.next_due_ms()
    while not fleet.finished:
        yield now, fleet.step(now)
        now = fleet.next_due_ms() if not fleet.finished else now
    yield now, fleet.close(now)


def record(scenario: Scenario, path: Path, start_ms: int) -> tuple[int, int]:
    """Write the whole run to ``path``; (messages, truth records) written."""
    if scenario.count is None and scenario.duration_s is None:
        raise SimulatorError("a recording needs an end: set count or duration_s")
    fleet = Fleet(scenario, range(scenario.devices), start_ms, _TOPIC.format)
    messages = truths = 0
    with path.open("w") as out:
        header = {"type": "scenario", "start_ms": start_ms, "scenario": scenario_to_dict(scenario)}
        out.write(json.dumps(header) + "\n")
        for now, tick in virtual_run(fleet):
            for device_id, payload in tick.messages:
                line = {"type": "msg", "at_ms": now - start_ms, "device_id": device_id}
                line["payload"] = payload.decode("latin-1")
                out.write(json.dumps(line, separators=(",", ":")) + "\n")
            for truth in tick.truth:
                out.write(json.dumps({"type": "truth", **truth}, separators=(",", ":")) + "\n")
            messages += len(tick.messages)
            truths += len(tick.truth)
    return messages, truths


def read_header(path: Path) -> tuple[Scenario, int]:
    with path.open() as fh:
        first = json.loads(fh.readline() or "{}")
    if first.get("type") != "scenario":
        raise SimulatorError(f"{path} is not a simulator recording")
    return scenario_from_dict(first["scenario"]), int(first["start_ms"])


def recorded(path: Path) -> Iterator[Recorded | dict[str, Any]]:
    """The messages (as :class:`Recorded`) and truth records (dicts) of a recording, in order."""
    with path.open() as fh:
        for line in fh:
            item = json.loads(line)
            if item["type"] == "msg":
                yield Recorded(item["at_ms"], item["device_id"], item["payload"].encode("latin-1"))
            elif item["type"] == "truth":
                del item["type"]
                yield item


def replay(
    path: Path,
    publish: Callable[[str, bytes], None],
    on_truth: Callable[[dict[str, Any]], None],
    speed: float,
    should_stop: Callable[[], bool],
    wait: Callable[[float], None],
) -> int:
    """Publish a recording's messages paced by their offsets / ``speed``; messages published."""
    started = time.monotonic()
    sent = 0
    for item in recorded(path):
        if should_stop():
            break
        if isinstance(item, dict):
            on_truth(item)
            continue
        if speed > 0 and (delay := started + item.at_ms / 1000 / speed - time.monotonic()) > 0:
            wait(delay)
        publish(item.device_id, item.payload)
        sent += 1
    return sent
