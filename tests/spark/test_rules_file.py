"""``fleetwatch rules test``: rules judged over a recorded CSV with the scorer's projection and
step — a hard limit, a sliding average and a silence fire where the recording says, and nothing
else does."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

from typer.testing import CliRunner

from fleetwatch.cli.main import app

T0 = 1_700_000_000_000
RULES = """
- id: hot
  name: too hot
  severity: critical
  when: temperature > 80
- id: shaky
  name: vibration over 7 mm/s on average
  when: avg(vibration) > 7
  window: {size: 30 seconds, slide: 10 seconds}
- id: silent
  name: no reading for a minute
  when: count(*) = 0
  window: {size: 1 minute, slide: 10 seconds}
"""


def recording(path: Path) -> None:
    """Two devices, a reading a second for 10 minutes: ``a`` at 90 °C for 10 s from 100 s and
    shaking for 60 s from 200 s; ``b`` silent from 300 s to 400 s."""
    rng = random.Random(1)
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["timestamp", "device_id", "temperature", "vibration"])
        for i in range(600):
            for device in ("a", "b"):
                if device == "b" and 300 <= i < 400:
                    continue
                hot = device == "a" and 100 <= i < 110
                shaking = device == "a" and 200 <= i < 260
                temperature = 90.0 if hot else 21 + rng.random()
                vibration = 9.0 if shaking else rng.random()
                out.writerow([T0 + i * 1000, device, temperature, vibration])


def test_rules_fire_over_a_recording_where_it_says(tmp_path: Path) -> None:
    rules, data = tmp_path / "rules.yaml", tmp_path / "rec.csv"
    rules.write_text(RULES)
    recording(data)
    result = CliRunner().invoke(app, ["rules", "test", str(rules), "--file", str(data), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout.strip().splitlines()[-1])
    assert document["rows"] == 1100
    assert document["late"] == 0
    events = [
        (e["rule_id"], e["device_id"], e["status"], (e["event_ms"] - T0) // 1000)
        for e in document["events"]
    ]
    assert events == [
        ("hot", "a", "open", 100),
        ("hot", "a", "resolve", 110),
        # [200 s, 230 s) is the first window of 30 s all shaking; [240 s, 270 s) a third calm
        ("shaky", "a", "open", 230),
        ("shaky", "a", "resolve", 270),
        # [300 s, 360 s) is the first minute without a reading; [350 s, 410 s) has ten
        ("silent", "b", "open", 360),
        ("silent", "b", "resolve", 410),
    ]


def test_a_rule_spark_refuses_is_a_clear_error(tmp_path: Path) -> None:
    rules, data = tmp_path / "rules.yaml", tmp_path / "rec.csv"
    rules.write_text("id: bad\nname: bad\nwhen: avg(temperature) > 7\n")
    recording(data)
    result = CliRunner().invoke(app, ["rules", "test", str(rules), "--file", str(data)])
    assert result.exit_code == 1
    assert "window" in result.output
    assert "avg() aggregates over a window" in result.output
