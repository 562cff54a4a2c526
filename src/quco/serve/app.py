"""``quco serve``: dynamic RAG behind HTTP, as quco's own API and as an OpenAI-compatible chat endpoint.

``POST /v1/answer`` returns the answer with its trace and counters; ``POST /v1/chat/completions`` answers the
last user message with the method named by ``model``, so any OpenAI client can use quco unchanged.
``GET /healthz`` needs no key; ``GET /viewer`` is the trace viewer page (it fetches traces with the key).

The bodies are in ``schemas.py``, the routes in ``routes.py``, the error shape in ``http_errors.py`` and the
body limit and access log in ``middleware.py``; ``create_app`` puts them together.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from quco.serve.http_errors import install_error_handlers
from quco.serve.middleware import AccessLogMiddleware, BodyLimitMiddleware
from quco.serve.routes import router
from quco.serve.schemas import ErrorBody
from quco.serve.service import AnswerService, ServeSettings


def create_app(settings: ServeSettings | None = None, service: AnswerService | None = None) -> FastAPI:
    """The FastAPI app for ``settings`` (the service's pipelines are built at startup when preload is set)."""
    settings = settings or ServeSettings()
    app = FastAPI(
        title="quco",
        summary="Dynamic retrieval-augmented generation (QuCo-RAG and the methods it is compared against).",
        version=_version(),
        lifespan=_lifespan,
        responses={401: {"model": ErrorBody}, 429: {"model": ErrorBody}, 502: {"model": ErrorBody}},
    )
    app.state.settings = settings
    app.state.service = service or AnswerService(settings)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    app.add_middleware(AccessLogMiddleware)
    install_error_handlers(app)
    app.include_router(router)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Build the default pipeline before serving when ``preload`` is set; close the service at shutdown."""
    service: AnswerService = app.state.service
    if app.state.settings.preload:
        import anyio

        await anyio.to_thread.run_sync(service.preload)
    yield
    service.close()


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("quco")
    except Exception:  # noqa: BLE001 - running from a source tree
        return "0"
