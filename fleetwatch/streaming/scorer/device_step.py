"""One device's micro-batch in the scorer, pure: its state, current parameters and readings in;
new state and output records out. The bucket's step
(:mod:`~fleetwatch.streaming.scorer.bucket_step`) calls :func:`process` per device with
readings; a device's timer is :mod:`~fleetwatch.streaming.scorer.expiry`'s.

:func:`process` is a sequence of steps, each in the module of its concern:

1. :mod:`~fleetwatch.streaming.scorer.dedup`: repeats dropped, readings behind the watermark set
   apart, the new ones split into in-order and out-of-order;
2. :mod:`~fleetwatch.streaming.scorer.late`: readings behind the watermark written to
   ``telemetry.late`` and counted, not scored; they may fill a dropout's gap;
3. :mod:`~fleetwatch.streaming.scorer.windows`: the new readings in the event-time windows, and
   the windows the watermark passed closed;
4. :mod:`~fleetwatch.streaming.scorer.sessions`: a gap or a reboot ends a session;
5. :mod:`~fleetwatch.streaming.scorer.scoring`: the new readings scored with the device's
   detectors and followed through its alert episodes
   (:mod:`~fleetwatch.streaming.scorer.episodes`);
6. :mod:`~fleetwatch.streaming.scorer.device_state`: the newest reading, the status and, when
   what it says changed, the state record.

A batch of repeats and late readings only skips 4 and 5.
"""

from __future__ import annotations

import pandas as pd

from fleetwatch.streaming.scorer import dedup, device_state, late, scoring, sessions, windows
from fleetwatch.streaming.scorer.detectors import FleetLookup
from fleetwatch.streaming.scorer.device_state import DeviceScoringState, new_state
from fleetwatch.streaming.scorer.expiry import expire, forgotten, wants_timer
from fleetwatch.streaming.scorer.output import Output, Role
from fleetwatch.streaming.scorer.policy import Policy
from fleetwatch.streaming.scorer.readings import Rows

__all__ = ["Output", "Policy", "Role", "expire", "forgotten", "process", "wants_timer"]


def process(
    device_id: str,
    state: DeviceScoringState | None,
    params_json: str | None,
    readings: pd.DataFrame | Rows,
    watermark_ms: int,
    now_ms: int,
    policy: Policy,
    fleet: FleetLookup | None = None,
    row_scores: dict[int, float] | None = None,
) -> tuple[DeviceScoringState, Output]:
    """One micro-batch of one device. ``readings``: one row per (reading, metric) with columns
    ``seq, event_ms, device_event_ms, device_sent_ms, received_ms, clock_offset_ms, firmware,
    status, metric, value``. ``params_json`` is the device's current parameters (after any
    update in this batch; ``None`` where they are parsed already) and ``state["params_version"]``
    their version; ``fleet`` finds the champion of the device's scope (see
    :attr:`Policy.fleet_model`). ``row_scores``, when given, gets every in-order reading's score
    by ``seq``, calm or not (file mode's row scores)."""
    st = new_state() if state is None else state
    out = Output()
    given = Rows.of(readings)
    if len(given) == 0:
        return st, out
    batch = dedup.sort_out(st, given, watermark_ms, out)
    heard = late.set_aside(device_id, st, batch.late, watermark_ms, now_ms, policy, out)
    windows.update(st, policy.windows, batch.kept, watermark_ms)
    if batch.kept is None:
        out.add_all(Role.ALERTS, heard)
        device_state.publish_counts(device_id, st, bool(heard), now_ms, out)
        return st, out
    sessions.follow(device_id, st, batch.in_order, policy.session_gap_ms, out)
    judged = scoring.score(device_id, st, params_json, batch, now_ms, policy, fleet, row_scores)
    out.add_all(Role.ALERTS, [*heard, *judged.events])
    every_ms = policy.state_every_ms
    device_state.publish(device_id, st, batch.in_order, judged.open_ids, now_ms, every_ms, out)
    return st, out
