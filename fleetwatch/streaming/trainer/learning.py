"""One device's training step, pure: previous parameters + a mini-batch → new parameters.

The trainer's Spark job (:mod:`fleetwatch.streaming.trainer.job`) is glue around these
functions; the tests call them directly. Parameters travel as canonical JSON text
(:func:`params.dumps`), the form they have in the job's state store and, wrapped by
:func:`~fleetwatch.contracts.model_params.encode_device`, on ``model.params``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec
import numpy as np

from fleetwatch.contracts.model_params import HEADER
from fleetwatch.models import params
from fleetwatch.models.base import Detector, Readings
from fleetwatch.models.batch import Batch
from fleetwatch.models.registry import DEFAULT_TUNING, Tuning, default_detector, load_params

FRAME_COLUMNS = ("event_ms", "metric", "value")
"""What :func:`learn_device` reads of a frame (long form, one row per reading and metric)."""


class Update(NamedTuple):
    """New parameters as canonical JSON, and their header
    (:data:`~fleetwatch.contracts.model_params.HEADER`) as values."""

    params_json: str
    header: dict[str, Any]


def learn_device(previous: str | None, frame: Readings) -> str | None:
    """Learn one mini-batch of one device's readings incrementally.

    ``frame`` is long form (:data:`FRAME_COLUMNS`), or already a :class:`Batch`. ``previous``
    is the device's parameters as JSON (``None`` for a device never seen: it starts
    from :func:`default_detector`). Returns the new parameters as canonical JSON, or ``None``
    when nothing changed (no rows to learn). The detector's ``version`` goes up by one per batch
    learned; anomalies are kept out of the statistics by the detector's own gate (``exclude``
    left to ``None``; see :mod:`fleetwatch.streaming.trainer.job`).
    """
    update = learn_update(previous, frame)
    return None if update is None else update.params_json


def learn_update(
    previous: str | None, frame: Readings, detector: Detector | None = None
) -> Update | None:
    """:func:`learn_device` with the header of the new parameters, so that publishing them
    (:func:`~fleetwatch.contracts.model_params.encode_device`) does not parse them again.

    ``detector``, when given, is ``previous`` already loaded (:func:`detector_of`, or the
    detector whose parameters ``previous`` is): it learns in place instead of a detector read
    from the text, with the same result."""
    batch = Batch.of(frame)  # reads only FRAME_COLUMNS of a frame
    if len(batch) == 0:
        return None
    if detector is None:
        detector = detector_of(previous)
    detector.learn(batch)
    new = detector.to_params()
    updated = canonical(new)
    if updated == previous:
        return None
    return Update(updated, {name: new[name] for name in HEADER})


def detector_of(previous: str | None, tuning: Tuning = DEFAULT_TUNING) -> Detector:
    """The detector of parameters text (``None``: a new device's :func:`default_detector`,
    with ``tuning``)."""
    if previous is None:
        return default_detector(tuning)
    return load_params(params.loads(previous))


_JSON = msgspec.json.Encoder(order="sorted").encode
_MSGPACK = msgspec.msgpack.Encoder().encode
_EXPONENT = re.compile(rb"e(?<=[0-9]e)")
"""A digit followed by ``e``: found from the few ``e`` of the text, not its many digits."""
_SMALL = b"0.0000"
"""How msgspec begins a float from 1e-5 to 1e-4, which Python writes with an exponent."""
_NUMBER = frozenset(b"+-.0123456789e")
"""The bytes of a JSON number as msgspec and Python write one."""


def canonical(new: Mapping[str, Any]) -> str:
    """:func:`params.dumps` of ``new``, the same text, written by msgspec (in a fraction of the
    time the standard library takes over a detector's thousands of floats).

    Both write a float as the shortest digits that read back to it, and sort keys alike; they
    differ in a float's form where Python writes an exponent (below 1e-4, from 1e16 on:
    ``1e-05``, ``1e+16``; msgspec ``0.00001``, ``1e16``), in what is not ASCII and DEL
    (escaped by ``json.dumps`` only), and in NaN and infinities (``json.dumps`` refuses them
    here, msgspec writes ``null``). A float written in msgspec's form is written again as
    Python writes it (:func:`_python_floats`); text that is not ASCII, holds DEL, a
    non-finite float, or a backslash (an escape in a string, which the search for floats does
    not parse), or that msgspec cannot write, is written by :func:`params.dumps`."""
    try:
        text, packed = _JSON(new), _MSGPACK(new)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return params.dumps(new)  # what msgspec cannot write (a numpy number, a huge integer)
    if not text.isascii() or b"\x7f" in text or _not_finite(packed):
        return params.dumps(new)
    if _EXPONENT.search(text) is None and _SMALL not in text:
        return text.decode("ascii")
    if b"\\" in text:
        return params.dumps(new)
    return _python_floats(text)


def _python_floats(text: bytes) -> str:
    """msgspec's JSON ``text`` (ASCII, no backslash) with every float of an exponent or of
    ``0.0000`` in it written as Python writes it: ``repr`` of the float its digits read back to,
    the same float (both write the shortest digits that do). A number is outside strings: the
    quotes before it are even in number, there being no escaped quote."""
    spans = {_number_at(text, m.start()) for m in _EXPONENT.finditer(text)}
    at = text.find(_SMALL)
    while at >= 0:
        spans.add(_number_at(text, at))
        at = text.find(_SMALL, at + len(_SMALL))
    out: list[bytes] = []
    done = 0
    for start, end in sorted(spans):
        if start < done or text.count(b'"', 0, start) % 2:
            continue  # in a string
        out += [text[done:start], repr(float(text[start:end])).encode("ascii")]
        done = end
    out.append(text[done:])
    return b"".join(out).decode("ascii")


def _number_at(text: bytes, at: int) -> tuple[int, int]:
    """The span of the run of :data:`_NUMBER` bytes around ``text[at]``."""
    start, end = at, at + 1
    while start > 0 and text[start - 1] in _NUMBER:
        start -= 1
    while end < len(text) and text[end] in _NUMBER:
        end += 1
    return start, end


def _not_finite(packed: bytes) -> bool:
    """Whether MessagePack bytes hold a float64 (0xcb) whose sign and exponent bits are all
    ones, NaN or infinite: the byte 0xcb, then 0x7f or 0xff, then 0xf0 or above, anywhere
    (compared over the whole buffer at once, not byte by byte)."""
    b = np.frombuffer(packed, np.uint8)
    found = (b[:-2] == 0xCB) & ((b[1:-1] | 0x80) == 0xFF) & (b[2:] >= 0xF0)
    return bool(found.any())
