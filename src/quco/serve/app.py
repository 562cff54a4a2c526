"""``quco serve``: dynamic RAG behind HTTP, as quco's own API and as an OpenAI-compatible chat endpoint.

``POST /v1/answer`` returns the answer with its trace and counters; ``POST /v1/chat/completions`` answers the
last user message with the method named by ``model``, so any OpenAI client can use quco unchanged.
``GET /healthz`` needs no key; ``GET /viewer`` is the trace viewer page (it fetches traces with the key).
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from quco.errors import ConfigError
from quco.inputs import text_problem
from quco.serve.http_errors import HTTPFailure, failure_for, install_error_handlers
from quco.serve.middleware import AccessLogMiddleware, BodyLimitMiddleware
from quco.serve.schemas import AnswerRequest, AnswerResponse, ChatMessage, ChatRequest, ErrorBody
from quco.serve.service import AnswerService, ServeSettings
from quco.serve.viewer import viewer_html

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

    install_error_handlers(app)

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
            raise failure_for(exc) from exc
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
