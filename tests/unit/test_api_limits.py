"""Request bodies are bounded before the route parses them or checks the key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.api_support import Api, running_api

LIMIT = 4096


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from running_api(tmp_path, max_body_bytes=LIMIT)


def test_a_declared_body_over_the_limit_is_refused_before_the_key_is_checked(api: Api) -> None:
    body = b'{"device_id": "' + b"x" * (2 * LIMIT) + b'"}'
    response = api.client.post("/devices", content=body)  # no key at all
    assert response.status_code == 413
    assert response.json() == {"detail": f"request body larger than {LIMIT} bytes"}


def test_a_chunked_body_over_the_limit_is_cut_off_as_it_arrives(api: Api) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(100):  # 100 chunks of 1 KiB, no Content-Length
            yield b" " * 1024

    response = api.client.post("/devices", content=chunks(), headers=api.as_("admin"))
    assert response.status_code == 413
    assert "content-length" not in {k.lower() for k in response.request.headers}


def test_a_body_within_the_limit_goes_through(api: Api) -> None:
    response = api.post("/devices", json={"device_id": "pump-7"})
    assert response.status_code in (200, 201), response.text
    unauthorised = api.client.post("/devices", json={"device_id": "pump-8"})
    assert unauthorised.status_code == 401


def test_a_content_length_that_is_not_a_number_is_refused(api: Api) -> None:
    response = api.client.post(
        "/devices", content=b"{}", headers={"content-length": "lots", **api.as_("admin")}
    )
    assert response.status_code == 400
