"""Errors in the OpenAI shape, so that OpenAI clients raise their usual exceptions with quco's message.

``HTTPFailure`` is what the routes raise; ``failure_for`` maps a failure while answering to its status and
code; ``install_error_handlers`` renders these, and FastAPI's own errors, as ``{"error": {...}}`` bodies.
"""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from quco.errors import ConfigError, InputError, QucoError
from quco.serve.service import AnswerTimeout, Overloaded

# Unexpected failures go to the app's logger, so the server's errors have one logger name to filter on.
log = logging.getLogger("quco.serve.app")


class HTTPFailure(Exception):
    def __init__(self, status: int, message: str, code: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


def error_response(
    status: int, message: str, code: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def failure_for(exc: Exception) -> HTTPFailure:
    """The HTTP error for a failure while answering (unexpected ones are logged with their traceback)."""
    from quco.llm.openai_compat import LLMServerError

    if isinstance(exc, Overloaded):
        return HTTPFailure(429, str(exc), "overloaded", {"Retry-After": "1"})
    if isinstance(exc, AnswerTimeout):
        return HTTPFailure(504, str(exc), "timeout")
    if isinstance(exc, LLMServerError):
        return HTTPFailure(502, f"the LLM server failed: {exc}", "llm_server_error")
    if isinstance(exc, (InputError, ConfigError)):
        return HTTPFailure(400, str(exc), "invalid_request")
    if isinstance(exc, QucoError):
        return HTTPFailure(500, str(exc), "pipeline_error")
    log.exception("unexpected error while answering", exc_info=exc)
    return HTTPFailure(500, f"internal error ({type(exc).__name__}); see the server log", "internal_error")


async def _on_failure(_: Request, exc: HTTPFailure) -> JSONResponse:
    return error_response(exc.status, exc.message, exc.code, exc.headers)


async def _on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    # FastAPI's own errors (unknown route, unreadable body) in the same shape as ours
    message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
    if exc.status_code == 400 and "parsing the body" in message:
        message = "the request body is not valid JSON in UTF-8"
    code = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "error")
    return error_response(exc.status_code, message, code, getattr(exc, "headers", None))


async def _on_invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
    err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
    return error_response(422, f"invalid request: {where}: {err.get('msg')}", "invalid_request")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(HTTPFailure, _on_failure)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(RequestValidationError, _on_invalid)
