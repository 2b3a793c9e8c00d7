"""Where webhooks may point: http(s), no credentials in the URL, and — unless configured —
no loopback, private, link-local or otherwise non-public address (checked at registration and
again before every delivery, since a name can start resolving elsewhere)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from fleetwatch.serving.errors import ServingError

Resolver = Callable[[str, int], list[str]]


class UrlRefused(ServingError):
    """A webhook URL the API will not call; the message says why."""


def resolve(host: str, port: int) -> list[str]:
    infos: list[Any] = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    return sorted({str(info[4][0]) for info in infos})


def check_url(url: str, allow_private: bool, resolver: Resolver = resolve) -> str:
    """``url`` if it may be called, else :class:`UrlRefused` naming the rule it breaks."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise UrlRefused(f"not a URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise UrlRefused("the URL must start with http:// or https://")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused("the URL must not carry credentials (user:password@); use the secret")
    host = parts.hostname
    if not host:
        raise UrlRefused("the URL has no host")
    if parts.fragment:
        raise UrlRefused("the URL must not have a #fragment")
    if allow_private:
        return url
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            addresses = [ipaddress.ip_address(a.split("%")[0]) for a in resolver(host, port)]
        except (OSError, UnicodeError) as exc:
            raise UrlRefused(f"the host {host!r} does not resolve: {exc}") from exc
    if not addresses:
        raise UrlRefused(f"the host {host!r} does not resolve")
    for address in addresses:
        if not address.is_global:
            raise UrlRefused(
                f"the host {host!r} is a non-public address ({address}); "
                "set api.webhooks.allow_private to allow it"
            )
    return url
