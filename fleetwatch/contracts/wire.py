"""JSON as every reader of a topic decodes it: size and nesting are checked before the parser
sees the record, so a hostile record (a value nested a hundred thousand deep, megabytes of
text, bytes that are not UTF-8) is refused with :class:`RecordRejected` like any other record
that breaks its contract, instead of raising whatever the parser raises."""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Any

import msgspec

from fleetwatch.contracts.errors import PayloadError

MAX_RECORD_BYTES = 1_048_588
"""Kafka's default ``message.max.bytes``: no record a broker with default limits accepts is
larger, so nothing legitimate is refused by this bound."""
MAX_DEPTH = 32
"""The deepest nesting accepted: eight times the deepest record fleetwatch writes (a champion's
parameters: record → params → list → list), and far below the interpreter's recursion limit,
which the standard parser reaches on deep input."""

_DECODE = msgspec.json.Decoder().decode
"""msgspec's JSON parser, untyped: the value the standard library's gives for any text both
parse (numbers, big integers, a key given twice: the last). It refuses what the standard one
reads beyond JSON (``NaN``, infinities) and strings escaping a lone surrogate; those go to the
standard parser, so what is accepted, and the reason for what is refused, is unchanged."""
_BRACKETS = b"[]{}"
_OTHER_BYTES = bytes(b for b in range(256) if b not in _BRACKETS)
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class RecordRejected(PayloadError, ValueError):
    """A record that is not bounded JSON; the message says which bound or rule it broke. A
    ``ValueError`` too, so a reader's existing ``except ValueError`` refuses it."""


def loads(value: str | bytes | bytearray | None) -> Any:
    """The JSON value of a record, within :data:`MAX_RECORD_BYTES` and :data:`MAX_DEPTH`.

    Raises :class:`RecordRejected` for an empty record, one too large or too deep, bytes that
    are not UTF-8, and text that is not JSON. A record with at most :data:`MAX_DEPTH` brackets
    in all (a reading has two) is parsed at once; only one with more is scanned for its depth.
    """
    if not value:
        raise RecordRejected("empty record (a tombstone or nothing)")
    if len(value) > MAX_RECORD_BYTES:
        raise RecordRejected(f"record of {len(value)} bytes exceeds {MAX_RECORD_BYTES}")
    if isinstance(value, str):
        text = value
        if not (text.isascii() or is_utf8(text)):
            raise RecordRejected("not JSON: not UTF-8 (a lone surrogate in the text)")
        if text.count("[") + text.count("{") > MAX_DEPTH:
            _check_depth(text.encode())
    else:
        if value.count(b"[") + value.count(b"{") > MAX_DEPTH:
            _check_depth(bytes(value))
        try:
            text = value.decode()
        except UnicodeDecodeError as exc:
            raise RecordRejected(f"not JSON: not UTF-8 ({exc})") from exc
    try:
        parsed = _DECODE(text)
    except msgspec.MsgspecError:
        # what the compiled parser refuses, the standard one parses as before or says why
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise RecordRejected(f"not JSON: {exc}") from exc
    if "\\u" in text and not _strings_are_utf8(parsed):
        raise RecordRejected("not JSON: a string escapes a lone surrogate (not UTF-8)")
    return parsed


def loads_object(value: str | bytes | bytearray | None) -> dict[str, Any] | None:
    """The JSON object a record holds, decoded as :func:`loads` decodes it; ``None`` for a
    record that :func:`loads` refuses or whose value is not an object."""
    try:
        parsed = loads(value)
    except RecordRejected:
        return None
    return parsed if isinstance(parsed, dict) else None


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogates, which a reader given bytes that
    are not UTF-8 may hold, and which no writer can encode again)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def utf8_text(text: str) -> str:
    """``text`` with what UTF-8 cannot encode replaced, for a dead letter's key or value."""
    return text if is_utf8(text) else text.encode(errors="replace").decode()


def _strings_are_utf8(value: Any) -> bool:
    if isinstance(value, str):
        return is_utf8(value)
    if isinstance(value, dict):
        return all(is_utf8(k) and _strings_are_utf8(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_strings_are_utf8(v) for v in value)
    return True


def depth(text: bytes) -> int:
    """How deep ``text``'s arrays and objects nest, brackets inside strings not counted."""
    brackets = _strings_removed(text).translate(None, _OTHER_BYTES)
    return max(accumulate(_STEP[b] for b in brackets), default=0)


def _check_depth(text: bytes) -> None:
    found = depth(text)
    if found > MAX_DEPTH:
        raise RecordRejected(f"nested {found} levels deep, more than {MAX_DEPTH}")


def _strings_removed(text: bytes) -> bytes:
    """``text`` without the contents of its JSON strings (escapes honoured)."""
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        quote = text.find(b'"', i)
        if quote < 0:
            out += text[i:]
            break
        out += text[i:quote]
        j = quote + 1
        while True:
            end = text.find(b'"', j)
            if end < 0:
                return bytes(out)  # an unterminated string: the parser refuses it
            backslashes = len(text[j:end]) - len(text[j:end].rstrip(b"\\"))
            if backslashes % 2 == 0:
                break
            j = end + 1
        i = end + 1
    return bytes(out)
