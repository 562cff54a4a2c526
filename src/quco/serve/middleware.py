"""The ASGI middleware of ``quco serve``: a request body size limit and structured access logs.

Access logs carry no headers, no query strings and no bodies.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

access_log = logging.getLogger("quco.serve.access")


class BodyLimitMiddleware:
    """Refuse request bodies over ``limit`` bytes with 413, whether or not they declare a Content-Length.

    The body is read here, up to the limit, and replayed to the app: an error raised while the app reads it
    would be turned into a generic 400 by FastAPI's body parsing.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _send_json(send, 413, self._message(int(declared)))
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await _send_json(send, 413, self._message(size))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _message(self, size: int) -> dict:
        return {
            "error": {
                "message": f"request body of {size}+ bytes is over the limit of {self.limit} bytes",
                "type": "invalid_request_error",
                "code": "body_too_large",
            }
        }


async def _send_json(send: Callable, status: int, body: dict) -> None:
    raw = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


class AccessLogMiddleware:
    """One JSON line per request: id, method, path (no query), status, milliseconds, client, auth outcome."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex[:12]
        scope.setdefault("state", {})["request_id"] = request_id
        start = time.perf_counter()
        status = 500

        async def logging_send(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", []).append((b"x-request-id", request_id.encode()))
            await send(message)

        try:
            await self.app(scope, receive, logging_send)
        finally:
            client = scope.get("client")
            record = {
                "request_id": request_id,
                "method": scope.get("method"),
                "path": scope.get("path"),
                "status": status,
                "ms": round((time.perf_counter() - start) * 1000, 1),
                "client": client[0] if client else None,
                "auth": scope["state"].get("auth", "none"),
            }
            for key in ("quco_method", "trace_id"):
                if key in scope["state"]:
                    record[key] = scope["state"][key]
            access_log.info(json.dumps(record))
