"""The routes of ``quco serve``; each reads the service and settings from ``request.app.state``.

``create_app`` stores ``service`` (the ``AnswerService``) and ``settings`` (its ``ServeSettings``) there.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from quco.errors import ConfigError
from quco.inputs import text_problem
from quco.serve.http_errors import HTTPFailure, failure_for
from quco.serve.schemas import AnswerRequest, AnswerResponse, ChatMessage, ChatRequest
from quco.serve.service import Answered, AnswerService, ServeSettings
from quco.serve.viewer import viewer_html

router = APIRouter()


def _service(request: Request) -> AnswerService:
    return request.app.state.service


def _settings(request: Request) -> ServeSettings:
    return request.app.state.settings


async def authenticate(request: Request) -> None:
    """The bearer key check of every route but /healthz and /viewer; records its outcome for the access log."""
    state = request.scope.setdefault("state", {})
    key = _settings(request).api_key
    if not key:
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
    if not hmac.compare_digest(token.strip().encode(), key.encode()):
        state["auth"] = "bad"
        raise HTTPFailure(401, "invalid bearer token", "unauthorized", {"WWW-Authenticate": "Bearer"})
    state["auth"] = "ok"


def _check_question(question: str, max_chars: int) -> str:
    if not question or not question.strip():
        raise HTTPFailure(400, "the question is empty", "invalid_request")
    problem = text_problem(question)
    if problem is not None:
        raise HTTPFailure(400, f"the question is not valid text: {problem}", "invalid_text")
    if len(question) > max_chars:
        raise HTTPFailure(
            400,
            f"the question has {len(question)} characters; the limit is {max_chars}",
            "question_too_long",
        )
    return question


async def _answer(request: Request, question: str, method: str | None, timeout_s: float | None) -> Answered:
    try:
        answered = await _service(request).answer(question, method, timeout_s)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear HTTP error
        raise failure_for(exc) from exc
    request.scope["state"]["quco_method"] = answered.method
    request.scope["state"]["trace_id"] = answered.id
    return answered


@router.get("/healthz", tags=["service"], summary="Liveness and load (no key needed).")
async def healthz(request: Request) -> dict[str, Any]:
    service = _service(request)
    return {
        "status": "ok",
        "methods": list(service.pool.allowed),
        "load": service.load,
        "answered": service.answered,
        "failed": service.failed,
        "uptime_s": round(time.time() - service.started, 1),
    }


@router.post(
    "/v1/answer",
    response_model=AnswerResponse,
    dependencies=[Depends(authenticate)],
    tags=["quco"],
    summary="Answer a question with dynamic RAG; returns the answer, its trace and its counters.",
)
async def answer(request: Request, body: AnswerRequest) -> AnswerResponse:
    _check_question(body.question, _settings(request).max_question_chars)
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


@router.post(
    "/v1/chat/completions",
    dependencies=[Depends(authenticate)],
    tags=["openai"],
    summary="OpenAI-compatible chat: answers the last user message; `model` names the method.",
)
async def chat(request: Request, body: ChatRequest) -> Response:
    question = _last_user_text(body.messages)
    _check_question(question, _settings(request).max_question_chars)
    try:
        method = _service(request).pool.resolve(body.model)
    except ConfigError as exc:
        raise HTTPFailure(404, str(exc), "model_not_found") from exc
    answered = await _answer(request, question, method, None)
    return _chat_reply(answered, method, body.stream)


def _chat_reply(answered: Answered, method: str, stream: bool) -> Response:
    """The OpenAI chat completion for an answer, whole or as a stream, with quco's fields under ``quco``."""
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
    if stream:
        return StreamingResponse(
            _stream_chunks(chat_id, created, method, content, extension),
            media_type="text/event-stream",
        )
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": "stop",
        "logprobs": None,
    }
    return JSONResponse(
        {
            "id": chat_id,
            "object": "chat.completion",
            "created": created,
            "model": method,
            "choices": [choice],
            "usage": usage,
            "quco": extension,
        }
    )


@router.get(
    "/v1/models", dependencies=[Depends(authenticate)], tags=["openai"], summary="Methods, as models."
)
async def models(request: Request) -> dict[str, Any]:
    service = _service(request)
    created = int(service.started)
    return {
        "object": "list",
        "data": [
            {"id": m, "object": "model", "created": created, "owned_by": "quco"} for m in service.pool.allowed
        ],
    }


@router.get("/v1/traces", dependencies=[Depends(authenticate)], tags=["viewer"], summary="Recent trace ids.")
async def traces(request: Request) -> dict[str, Any]:
    return {"ids": _service(request).traces.ids()}


@router.get(
    "/v1/traces/{trace_id}",
    dependencies=[Depends(authenticate)],
    tags=["viewer"],
    summary="One recent trace (kept in memory).",
)
async def trace(request: Request, trace_id: str) -> dict[str, Any]:
    data = _service(request).traces.get(trace_id)
    if data is None:
        kept = _settings(request).trace_history
        raise HTTPFailure(404, f"no trace '{trace_id}' (only the last {kept} are kept)", "not_found")
    return data


@router.get("/viewer", response_class=HTMLResponse, tags=["viewer"], summary="The trace viewer page.")
async def viewer() -> HTMLResponse:
    return HTMLResponse(viewer_html())


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
