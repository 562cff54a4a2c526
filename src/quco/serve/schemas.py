"""The request and response bodies of ``quco serve`` (quco's own API and the OpenAI chat request)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class AnswerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_trace: bool = True
    timeout_s: float | None = Field(
        None, gt=0, description="Lower than the server's timeout to give up sooner."
    )


class AnswerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str
    method: str | None = Field(
        None, description="A method this server offers (GET /v1/models); default: its own."
    )
    options: AnswerOptions = Field(default_factory=AnswerOptions)


class AnswerResponse(BaseModel):
    id: str
    method: str
    question: str
    answer: str
    prediction: str
    stop_reason: str
    seconds: float
    counters: dict[str, Any]
    notes: list[str]
    trace: dict[str, Any] | None = None
    viewer: str = Field(description="Path of this answer's page in the trace viewer.")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The OpenAI chat request; sampling fields are accepted and ignored (the method decides)."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessage]
    stream: bool = False


class ErrorBody(BaseModel):
    error: dict[str, Any]
