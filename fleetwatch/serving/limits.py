"""Request bodies are bounded before anything reads them.

A body larger than ``api.max_body_bytes`` is refused with 413 before the route parses it or
checks the caller's key: by its ``Content-Length`` when it declares one, otherwise (a chunked
upload) as soon as the bytes received pass the limit, keeping at most the limit in memory."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    """Reads a request's body (up to the limit) before the app sees the request, then hands
    it on unchanged; a body that passes the limit is answered 413 and the app never runs."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or []) if scope["type"] == "http" else {}
        declared = headers.get(b"content-length")
        if declared is None and b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body
            return
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                await _refuse(send, 400, "Content-Length is not a number")
                return
            if length > self.max_bytes:
                await _refuse(send, 413, self._detail())
                return
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                await _refuse(send, 413, self._detail())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        handed = False

        async def replay() -> Message:
            nonlocal handed
            if not handed:
                handed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: a disconnect, when it comes

        await self.app(scope, replay, send)

    def _detail(self) -> str:
        return f"request body larger than {self.max_bytes} bytes"
