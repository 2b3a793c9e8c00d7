"""The local broker's storage format step: ids the tool accepts, and its reasons surfaced."""

from __future__ import annotations

import base64
import uuid

import pytest
from pydantic import ValidationError

from fleetwatch.contracts.settings import KafkaSettings
from fleetwatch.stack.kafka import _cause, new_cluster_id


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    dash_first = uuid.UUID(bytes=b"\xf8" + bytes(15))  # encodes to "-AAAA…"
    plain = uuid.UUID(bytes=b"\x01" * 16)
    assert base64.urlsafe_b64encode(dash_first.bytes).startswith(b"-")
    draws = iter([dash_first, plain])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    cluster_id = new_cluster_id()
    assert not cluster_id.startswith("-")
    assert base64.urlsafe_b64decode(cluster_id + "==") == plain.bytes


def test_random_cluster_ids_are_16_bytes_in_url_safe_base64() -> None:
    for _ in range(500):
        cluster_id = new_cluster_id()
        assert len(cluster_id) == 22
        assert not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_the_storage_tools_usage_error_is_the_reason_given() -> None:
    output = (
        "usage: kafka-storage format [-h] --config CONFIG --cluster-id CLUSTER_ID\n"
        "kafka-storage: error: argument --cluster-id/-t: expected one argument\n"
        "main ERROR Reconfiguration failed: No configuration found\n"
    )
    assert _cause(output) == "argument --cluster-id/-t: expected one argument"


def test_an_exception_message_is_the_reason_given() -> None:
    output = (
        'Exception in thread "main" java.lang.IllegalArgumentException: requirement failed: '
        "two listeners on the same port\n\tat scala.Predef$.require(Predef.scala:337)\n"
    )
    assert _cause(output) == "requirement failed: two listeners on the same port"


def test_the_client_and_controller_ports_must_differ() -> None:
    with pytest.raises(ValidationError, match="two different ports"):
        KafkaSettings(port=9500, controller_port=9500)
