"""``quco serve``: dynamic RAG behind HTTP, as quco's own API and as an OpenAI-compatible chat endpoint.

``POST /v1/answer`` returns the answer with its trace and counters; ``POST /v1/chat/completions`` answers the
last user message with the method named by ``model``, so any OpenAI client can use quco unchanged.
``GET /healthz`` needs no key; ``GET /viewer`` is the trace viewer page (it fetches traces with the key).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from quco.errors import ConfigError, InputError, QucoError
from quco.inputs import text_problem
from quco.serve.schemas import AnswerRequest, AnswerResponse, ChatMessage, ChatRequest, ErrorBody
from quco.serve.service import AnswerService, AnswerTimeout, Overloaded, ServeSettings
from quco.serve.viewer import viewer_html

access_log = logging.getLogger("quco.serve.access")
log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------------------
# Errors in the OpenAI shape, so that OpenAI clients raise their usual exceptions with our message.


class HTTPFailure(Exception):
    def __init__(self, status: int, message: str, code: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


def _error(status: int, message: str, code: str, headers: dict[str, str] | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _failure_for(exc: Exception) -> HTTPFailure:
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


# ------------------------------------------------------------------------------------------------------------
# Middleware: body size limit and structured access logs (no headers, no query strings, no bodies).


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


# ------------------------------------------------------------------------------------------------------------
# The app.


def create_app(settings: ServeSettings | None = None, service: AnswerService | None = None) -> FastAPI:
    """The FastAPI app for ``settings`` (the service's pipelines are built at startup when preload is set)."""
    settings = settings or ServeSettings()
    service = service or AnswerService(settings)
    key = settings.api_key.encode() if settings.api_key else None

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.preload:
            import anyio

            await anyio.to_thread.run_sync(service.preload)
        yield
        service.close()

    app = FastAPI(
        title="quco",
        summary="Dynamic retrieval-augmented generation (QuCo-RAG and the methods it is compared against).",
        version=_version(),
        lifespan=lifespan,
        responses={401: {"model": ErrorBody}, 429: {"model": ErrorBody}, 502: {"model": ErrorBody}},
    )
    app.state.service = service
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    app.add_middleware(AccessLogMiddleware)

    async def authenticate(request: Request) -> None:
        state = request.scope.setdefault("state", {})
        if key is None:
            state["auth"] = "off"
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            state["auth"] = "missing"
            raise HTTPFailure(
                401,
                "missing bearer token; send 'Authorization: Bearer <key>'",
                "unauthorized",
                {"WWW-Authenticate": "Bearer"},
            )
        if not hmac.compare_digest(token.strip().encode(), key):
            state["auth"] = "bad"
            raise HTTPFailure(401, "invalid bearer token", "unauthorized", {"WWW-Authenticate": "Bearer"})
        state["auth"] = "ok"

    @app.exception_handler(HTTPFailure)
    async def _on_failure(_: Request, exc: HTTPFailure) -> JSONResponse:
        return _error(exc.status, exc.message, exc.code, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own errors (unknown route, unreadable body) in the same shape as ours
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 400 and "parsing the body" in message:
            message = "the request body is not valid JSON in UTF-8"
        code = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, "error"
        )
        return _error(exc.status_code, message, code, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _on_invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        return _error(422, f"invalid request: {where}: {err.get('msg')}", "invalid_request")

    def _check_question(question: str) -> str:
        if not question or not question.strip():
            raise HTTPFailure(400, "the question is empty", "invalid_request")
        problem = text_problem(question)
        if problem is not None:
            raise HTTPFailure(400, f"the question is not valid text: {problem}", "invalid_text")
        if len(question) > settings.max_question_chars:
            raise HTTPFailure(
                400,
                f"the question has {len(question)} characters; the limit is {settings.max_question_chars}",
                "question_too_long",
            )
        return question

    async def _answer(request: Request, question: str, method: str | None, timeout_s: float | None) -> Any:
        try:
            answered = await service.answer(question, method, timeout_s)
        except Exception as exc:  # noqa: BLE001 - every failure becomes one clear HTTP error
            raise _failure_for(exc) from exc
        request.scope["state"]["quco_method"] = answered.method
        request.scope["state"]["trace_id"] = answered.id
        return answered

    # -- routes --------------------------------------------------------------------------------------------
    @app.get("/healthz", tags=["service"], summary="Liveness and load (no key needed).")
    async def healthz() -> dict[str, Any]:
        return {
            "status": "ok",
            "methods": list(service.pool.allowed),
            "load": service.load,
            "answered": service.answered,
            "failed": service.failed,
            "uptime_s": round(time.time() - service.started, 1),
        }

    @app.post(
        "/v1/answer",
        response_model=AnswerResponse,
        dependencies=[Depends(authenticate)],
        tags=["quco"],
        summary="Answer a question with dynamic RAG; returns the answer, its trace and its counters.",
    )
    async def answer(request: Request, body: AnswerRequest) -> AnswerResponse:
        _check_question(body.question)
        answered = await _answer(request, body.question, body.method, body.options.timeout_s)
        trace = answered.trace
        data = trace.to_dict()
        return AnswerResponse(
            id=answered.id,
            method=answered.method,
            question=trace.question,
            answer=trace.answer,
            prediction=trace.prediction,
            stop_reason=trace.stop_reason,
            seconds=answered.seconds,
            counters=data["counters"],
            notes=trace.notes,
            trace=data if body.options.include_trace else None,
            viewer=f"/viewer?id={answered.id}",
        )

    @app.post(
        "/v1/chat/completions",
        dependencies=[Depends(authenticate)],
        tags=["openai"],
        summary="OpenAI-compatible chat: answers the last user message; `model` names the method.",
    )
    async def chat(request: Request, body: ChatRequest) -> Response:
        question = _last_user_text(body.messages)
        _check_question(question)
        try:
            method = service.pool.resolve(body.model)
        except ConfigError as exc:
            raise HTTPFailure(404, str(exc), "model_not_found") from exc
        answered = await _answer(request, question, method, None)
        trace = answered.trace
        content = trace.prediction or trace.answer
        created = int(time.time())
        chat_id = f"chatcmpl-{answered.id}"
        counters = trace.counters
        usage = {
            "prompt_tokens": sum(counters.prompt_tokens.values()),
            "completion_tokens": sum(counters.generated_tokens.values()),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        extension = {
            "trace_id": answered.id,
            "answer": trace.answer,
            "stop_reason": trace.stop_reason,
            "retrievals": counters.retrievals,
            "viewer": f"/viewer?id={answered.id}",
        }
        if body.stream:
            return StreamingResponse(
                _stream_chunks(chat_id, created, method, content, extension),
                media_type="text/event-stream",
            )
        return JSONResponse(
            {
                "id": chat_id,
                "object": "chat.completion",
                "created": created,
                "model": method,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                        "logprobs": None,
                    }
                ],
                "usage": usage,
                "quco": extension,
            }
        )

    @app.get(
        "/v1/models", dependencies=[Depends(authenticate)], tags=["openai"], summary="Methods, as models."
    )
    async def models() -> dict[str, Any]:
        created = int(service.started)
        return {
            "object": "list",
            "data": [
                {"id": m, "object": "model", "created": created, "owned_by": "quco"}
                for m in service.pool.allowed
            ],
        }

    @app.get("/v1/traces", dependencies=[Depends(authenticate)], tags=["viewer"], summary="Recent trace ids.")
    async def traces() -> dict[str, Any]:
        return {"ids": service.traces.ids()}

    @app.get(
        "/v1/traces/{trace_id}",
        dependencies=[Depends(authenticate)],
        tags=["viewer"],
        summary="One recent trace (kept in memory).",
    )
    async def trace(trace_id: str) -> dict[str, Any]:
        data = service.traces.get(trace_id)
        if data is None:
            raise HTTPFailure(
                404, f"no trace '{trace_id}' (only the last {settings.trace_history} are kept)", "not_found"
            )
        return data

    @app.get("/viewer", response_class=HTMLResponse, tags=["viewer"], summary="The trace viewer page.")
    async def viewer() -> HTMLResponse:
        return HTMLResponse(viewer_html())

    return app


def _last_user_text(messages: list[ChatMessage]) -> str:
    for message in reversed(messages):
        if message.role != "user":
            continue
        if isinstance(message.content, str):
            return message.content
        if isinstance(message.content, list):
            return " ".join(str(p.get("text", "")) for p in message.content if p.get("type") == "text")
    raise HTTPFailure(400, "the chat request has no user message to answer", "invalid_request")


async def _stream_chunks(
    chat_id: str, created: int, model: str, content: str, extension: dict[str, Any]
) -> AsyncIterator[bytes]:
    """The whole answer as OpenAI stream chunks (quco decides retrieval mid-generation, so it answers first)."""

    def chunk(delta: dict[str, Any], finish: str | None, extra: bool = False) -> bytes:
        body: dict[str, Any] = {
            "id": chat_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if extra:
            body["quco"] = extension
        return f"data: {json.dumps(body)}\n\n".encode()

    yield chunk({"role": "assistant", "content": ""}, None)
    yield chunk({"content": content}, None)
    yield chunk({}, "stop", extra=True)
    yield b"data: [DONE]\n\n"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("quco")
    except Exception:  # noqa: BLE001 - running from a source tree
        return "0"
