"""Which detectors score a device's readings: its own learned parameters (the newest of its
``model.params`` records, :func:`best_params`, parsed once per version and Python worker,
:data:`CACHE`), the scope's fleet champion (:func:`fleet_params`, :data:`CHAMPIONS`) where
``score.fleet_model`` says so, or — with neither — the fixed baseline (``None`` here).

The two caches are the only state of this module, and only save work: the state store holds
the parameters, and a miss parses them again. Used by
:mod:`~fleetwatch.streaming.scorer.scoring` (per device: :func:`choose`) and
:mod:`~fleetwatch.streaming.scorer.bucket_step` (the parameters and champions a bucket holds).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from fleetwatch.contracts.errors import ParamsRecordError
from fleetwatch.contracts.fleet import scope_of_metrics
from fleetwatch.contracts.model_params import decode
from fleetwatch.fleet.model import load as load_fleet
from fleetwatch.models.base import Detector
from fleetwatch.models.combiner import device_tail_of
from fleetwatch.models.device_tail import DeviceTail
from fleetwatch.models.errors import ModelError
from fleetwatch.models.params import loads
from fleetwatch.models.registry import load_params
from fleetwatch.models.tail import StreamTail
from fleetwatch.streaming.scorer.device_state import DeviceScoringState
from fleetwatch.streaming.scorer.readings import Rows


@dataclass(frozen=True)
class FleetModel:
    """A scope's champion as the scorer holds it (:mod:`~fleetwatch.fleet.model`): the label
    alerts carry (``name/version``), its pooled multivariate detector (``None``: a scope of
    single-metric devices has none) and the members' tails pooled with it by kind
    (:mod:`~fleetwatch.fleet.tails`)."""

    label: str
    detector: Detector | None
    tails: Mapping[str, Mapping[str, StreamTail]] = field(default_factory=dict)


FleetLookup = Callable[[str], FleetModel | None]
"""Scope → its champion, if any (the processor's view of the fleet records it has seen)."""

Member = tuple[Detector, str | None]
"""A detector the scorer runs for a device, and the fleet model's label when it is one."""


class DetectorCache:
    """Parsed detectors by device, so a batch does not re-read 10 KB of JSON per device. The
    state store holds the parameters; this only saves parsing them (a miss re-reads them)."""

    def __init__(self, size: int = 20_000) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[int, Detector]] = OrderedDict()

    def get(self, device_id: str, version: int) -> Detector | None:
        item = self._items.get(device_id)
        if item is None or item[0] != version:
            return None
        self._items.move_to_end(device_id)
        return item[1]

    def drop(self, device_id: str) -> None:
        """Forget the device's detector (its versions start again after a tombstone)."""
        self._items.pop(device_id, None)

    def put(self, device_id: str, version: int, detector: Detector) -> None:
        self._items[device_id] = (version, detector)
        self._items.move_to_end(device_id)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


CACHE = DetectorCache()

CHAMPIONS: dict[str, tuple[int, FleetModel | None]] = {}
"""Parsed fleet champions by scope, with their version (``None``: unreadable), per worker."""


def _newest(values: list[str], key: str) -> Mapping[str, Any] | None:
    """The ``model.params`` record of the highest version among ``values`` that has the field
    ``key`` (``device_id``: a device's own; ``scope``: a fleet champion); bad records skipped,
    the first of a version kept."""
    best: Mapping[str, Any] | None = None
    for value in values:
        try:
            record = decode(value)
        except ParamsRecordError:
            continue
        if key in record and (best is None or record["version"] > best["version"]):
            best = record
    return best


def _compact(params: dict[str, Any]) -> str:
    return json.dumps(params, separators=(",", ":"))


def best_params(values: list[str]) -> tuple[int, str] | None:
    """The newest parameters among a device's ``model.params`` record values: ``(version,
    parameters JSON)`` (bad records skipped)."""
    best = _newest(values, "device_id")
    return None if best is None else (best["version"], _compact(best["params"]))


def fleet_params(values: list[str]) -> tuple[int, str, str] | None:
    """The newest fleet champion among ``fleet:{scope}`` record values: ``(version, parameters
    JSON, label)`` (bad records skipped)."""
    best = _newest(values, "scope")
    if best is None:
        return None
    label = f"{best['model']}/{best['model_version']}"
    return best["version"], _compact(best["params"]), label


class ChampionStore(Protocol):
    def champion(self, scope: str) -> tuple[str, str] | None:
        """The scope's champion: its parameters (JSON) and label (``name/version``), if any."""
        ...


def bucket_champion(
    versions: Mapping[str, int], store: ChampionStore, scope: str
) -> FleetModel | None:
    """The scope's champion of the version a bucket holds (``versions``: scope → version;
    ``None``: none): parsed once per version and worker (:data:`CHAMPIONS`), read from
    ``store`` on a miss. ``partial(bucket_champion, versions, store)`` is a :data:`FleetLookup`."""
    version = versions.get(scope)
    if version is None:
        return None
    cached = CHAMPIONS.get(scope)
    if cached is not None and cached[0] == int(version):
        return cached[1]
    stored = store.champion(scope)
    found = None if stored is None else fleet_model(stored[1], stored[0])
    CHAMPIONS[scope] = (int(version), found)
    return found


def fleet_model(label: str, params_json: str) -> FleetModel | None:
    """The champion of parameters ``params_json`` (either shape :mod:`~fleetwatch.fleet.model`
    reads); ``None``: unreadable."""
    try:
        detector, tails = load_fleet(loads(params_json))
    except (ModelError, KeyError, TypeError, ValueError):
        return None
    return FleetModel(label, detector, tails)


class Chosen(NamedTuple):
    members: list[Member] | None
    """The detectors to run (:func:`members_for`; ``None``: the fixed baseline)."""
    prior: Detector | None
    """What the fleet knows of the device's states (:func:`fleet_prior`)."""
    device: DeviceTail | None = None
    """The device's one decision, when its detector makes one
    (:mod:`~fleetwatch.models.device_tail`)."""


def choose(
    device_id: str,
    st: DeviceScoringState,
    params_json: str | None,
    rows: Rows,
    mode: str,
    fleet: FleetLookup | None,
) -> Chosen:
    """The detectors that score the device's ``rows``: its own of its parameter version
    (:func:`detector_for`), with the champion of its scope (:func:`champion_of`) where ``mode``
    (``score.fleet_model``) says, each member holding the champion's tails of its kind."""
    detector = detector_for(device_id, int(st["params_version"]), params_json)
    found = champion_of(st, rows, mode, fleet)
    members = members_for(detector, mode, found)
    borrow_tails(members, found)
    return Chosen(members, fleet_prior(found), device_tail_of(detector) if members else None)


def detector_for(device_id: str, version: int, params_json: str | None) -> Detector | None:
    """The device's detector of parameter ``version``: parsed from ``params_json`` once per
    worker, then from :data:`CACHE` (``params_json`` may then be ``None``: the processor reads
    the parameters from its state store only on a miss). ``None``: no parameters (version 0),
    none to parse, or parameters that do not load."""
    if version <= 0:
        return None
    cached = CACHE.get(device_id, version)
    if cached is not None:
        return cached
    if params_json is None:
        return None
    try:
        detector = load_params(loads(params_json))
    except (ModelError, KeyError, TypeError, ValueError):
        return None
    CACHE.put(device_id, version, detector)
    return detector


def members_for(
    detector: Detector | None, mode: str, champion: FleetModel | None
) -> list[Member] | None:
    """The detectors to run: the device's own (``None``: none learned yet, the fixed baseline),
    with its poolable one (:attr:`~fleetwatch.models.base.Detector.poolable`, the multivariate
    detector) replaced by the scope's ``champion``'s (:func:`champion_of`) as ``mode``
    (``score.fleet_model``) says: ``fallback`` while the own one is not warmed up. A champion
    without a multivariate detector replaces nothing (its tails: :func:`borrow_tails`)."""
    own = [] if detector is None else detector.members()
    members: list[Member] = [(m, None) for m in own]
    if champion is None or champion.detector is None or mode == "off":
        return members or None
    pooled = next((i for i, (m, _) in enumerate(members) if m.poolable), None)
    if mode != "always" and pooled is not None and members[pooled][0].warmed_up:
        return members
    if pooled is None:
        members.append((champion.detector, champion.label))
    else:
        members[pooled] = (champion.detector, champion.label)
    return members


def champion_of(
    st: DeviceScoringState, rows: Rows, mode: str, fleet: FleetLookup | None
) -> FleetModel | None:
    """The champion of the device's scope (the metrics it has reported), if any; ``None``
    with fleet models off."""
    if fleet is None or mode == "off":
        return None
    return fleet(scope_of_metrics({*rows["metric"].tolist(), *st["last_values"]}))


def borrow_tails(members: list[Member] | None, champion: FleetModel | None) -> None:
    """Give each member the champion's tails pooled of its own kind (none without a champion:
    a member cached from an earlier batch must not keep an older one's)."""
    tails: Mapping[str, Mapping[str, StreamTail]] = {} if champion is None else champion.tails
    for member, _ in members or []:
        member.borrow_tails(tails.get(member.kind, {}))


def fleet_prior(champion: FleetModel | None) -> Detector | None:
    """The champion's multivariate model, which may tell a state the fleet knows
    (:meth:`~fleetwatch.models.base.Detector.familiar_times`); ``None`` without one."""
    return None if champion is None else champion.detector
