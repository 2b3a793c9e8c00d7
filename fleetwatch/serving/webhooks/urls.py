"""Where webhooks may point: http(s), no credentials in the URL, and — unless configured —
no loopback, private, link-local or otherwise non-public address (checked at registration and
again before every delivery, since a name can start resolving elsewhere).

At delivery the name is resolved once, and the request goes to the address that was checked
(:func:`pin`): the URL's host becomes that address, the ``Host`` header and the TLS server name
(SNI and certificate check) stay the name. A name that answers a public address to the check
and a private one to the connection (DNS rebinding) cannot reach the private one."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, urlsplit

from fleetwatch.serving.errors import ServingError

Resolver = Callable[[str, int], list[str]]


class UrlRefused(ServingError):
    """A webhook URL the API will not call; the message says why."""


def resolve(host: str, port: int) -> list[str]:
    infos: list[Any] = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    return sorted({str(info[4][0]) for info in infos})


@dataclass(frozen=True)
class Pinned:
    """What to request for a webhook URL: the URL to connect to, and the headers and request
    extensions that keep the name it was registered under."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    extensions: dict[str, Any] = field(default_factory=dict)


def check_url(url: str, allow_private: bool, resolver: Resolver = resolve) -> str:
    """``url`` if it may be called, else :class:`UrlRefused` naming the rule it breaks."""
    _check(url, allow_private, resolver)
    return url


def pin(url: str, allow_private: bool, resolver: Resolver = resolve) -> Pinned:
    """``url`` checked and bound to the address the check resolved (see the module's note);
    with private addresses allowed, the URL as it is."""
    parts, addresses = _check(url, allow_private, resolver)
    if not addresses:
        return Pinned(url)
    host = parts.hostname or ""
    address = addresses[0]
    literal = f"[{address}]" if address.version == 6 else str(address)
    default = 443 if parts.scheme == "https" else 80
    netloc = literal if parts.port in (None, default) else f"{literal}:{parts.port}"
    named = host if parts.port in (None, default) else f"{host}:{parts.port}"
    extensions: dict[str, Any] = {"sni_hostname": host} if parts.scheme == "https" else {}
    return Pinned(parts._replace(netloc=netloc).geturl(), {"Host": named}, extensions)


def _check(
    url: str, allow_private: bool, resolver: Resolver
) -> tuple[SplitResult, list[ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    """The URL's parts and, unless private addresses are allowed, the public addresses its
    host resolved to (all of them checked); else :class:`UrlRefused`."""
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
        return parts, []
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
    return parts, addresses
