"""A file's devices as one fleet (``fleetwatch detect --fleet``): each scope's fleet model pooled
from the devices' parameters at a cadence in event time, and found for a device as the scorer
finds its scope's champion.

The pooling is production's, function for function: the devices' parameters go through
:func:`~fleetwatch.fleet.publish.pooled_by_scope` (devices grouped by scope, the metrics their
multivariate member learned, or their streams' for a device of one metric;
:func:`~fleetwatch.fleet.pca.pool_detectors` where the scope's devices have one, and
:func:`~fleetwatch.fleet.tails.pool_members`), each scope's model is written as the champion's
``model.params`` record (:func:`~fleetwatch.contracts.model_params.encode_champion`), and read
back as the scorer reads it (:func:`~fleetwatch.streaming.scorer.detectors.fleet_params`, then
:func:`~fleetwatch.streaming.scorer.detectors.fleet_model`). The scorer's step then uses it as
it uses a champion (:func:`~fleetwatch.streaming.scorer.detectors.choose`: the members borrow its
pooled tails, and ``score.fleet_model`` says where its PCA part, if any, stands in for the
multivariate member).

When: production pools when an operator's schedule runs ``register-fleet`` and ``promote``; a
file is pooled on the schedule :class:`FilePool` is given, by default the offline replay's
(``bench/quality/offline.py``, decision 0005): 120 s of event time after the file's first
reading, then every minute.

Causal: a pool at time ``T`` takes each device's parameters in force when its latest chunk
starting before ``T`` was scored (:attr:`~fleetwatch.filemode.pipeline.DevicePipeline.in_force`),
learned from its chunks before that one, all of whose readings precede ``T``. So no reading is
scored with what any device learned from a reading at or after the pool's time, and appending
later rows to a file leaves the pools its earlier rows were scored with unchanged. A pool's
input is the devices' parameter versions in force; the same versions give the same champions,
which are then kept rather than pooled again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from fleetwatch.contracts.model_params import encode_champion
from fleetwatch.filemode.pipeline import DevicePipeline
from fleetwatch.fleet.publish import pooled_by_scope
from fleetwatch.streaming.scorer.detectors import FleetModel, fleet_model, fleet_params


@dataclass
class FilePool:
    """The champions of a file's scopes, pooled from its devices as event time passes."""

    first_ms: int = 120_000
    """Event time after the file's first reading at which its scopes are first pooled (the
    schedule's first ``register-fleet``)."""
    every_ms: int = 60_000
    """Event time between pools after the first (the schedule's period)."""
    due_ms: int | None = None
    """The next pooling time (``None``: no reading seen yet)."""
    champions: dict[str, FleetModel] = field(default_factory=dict)
    pools: int = 0
    """How many times the champions were pooled from new parameters."""
    _inputs: tuple[tuple[str, int], ...] = ()

    def champion(self, scope: str) -> FleetModel | None:
        """The scope's champion, if any: the scorer's
        :data:`~fleetwatch.streaming.scorer.detectors.FleetLookup`."""
        return self.champions.get(scope)

    def until(self, event_ms: int, devices: Mapping[str, DevicePipeline]) -> None:
        """Pool as of the latest pooling time at or before ``event_ms``, if one came since the
        last call: before scoring a chunk whose first reading is at ``event_ms``."""
        if self.due_ms is None:
            self.due_ms = event_ms + self.first_ms
            return
        if event_ms < self.due_ms:
            return
        at = self.due_ms + (event_ms - self.due_ms) // self.every_ms * self.every_ms
        self.due_ms = at + self.every_ms
        self._pool(at, devices)

    def _pool(self, at_ms: int, devices: Mapping[str, DevicePipeline]) -> None:
        """Each scope's champion from the devices' parameters in force (devices by name, so
        the pool does not depend on the file's row order)."""
        held = {name: devices[name].in_force for name in sorted(devices)}
        learned = {name: force for name, force in held.items() if force[1] is not None}
        inputs = tuple((name, version) for name, (version, _) in learned.items())
        if inputs == self._inputs:
            return
        self._inputs = inputs
        self.pools += 1
        table = {
            devices[name].device_id: {"params": json.loads(str(params))}
            for name, (_, params) in learned.items()
        }
        champions = {}
        for scope, (pooled, _) in sorted(pooled_by_scope(table).items()):
            record = encode_champion(scope, f"file-{scope}", self.pools, pooled, self.pools, at_ms)
            found = fleet_params([record])
            model = None if found is None else fleet_model(found[2], found[1])
            if model is not None:
                champions[scope] = model
        self.champions = champions
