"""``quco serve api``: run the HTTP service (FastAPI on uvicorn)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from quco.errors import ConfigError, QucoError

serve_app = typer.Typer(help="Run quco as an HTTP service.", no_args_is_help=True)


@serve_app.callback()
def _group() -> None:
    """Run quco as an HTTP service (a group even with one command, so that `quco serve api` stays stable)."""


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _settings(
    config: Path | None,
    sets: list[str] | None,
    method: str | None,
    methods: str | None,
    api_key_env: str,
    concurrency: int,
    queue: int,
    timeout: float,
    max_body_bytes: int,
    max_question_chars: int,
):  # noqa: ANN202 - quco.serve.ServeSettings
    from quco.config import load_config, parse_override
    from quco.serve.service import ServeSettings

    overrides = dict(parse_override(s) for s in sets or [])
    cfg = load_config(config, overrides=overrides or None, method=method)
    key = os.environ.get(api_key_env) or None if api_key_env else None
    return ServeSettings(
        config=cfg,
        methods=tuple(m.strip() for m in (methods or "").split(",") if m.strip()),
        api_key=key,
        concurrency=concurrency,
        queue=queue,
        timeout_s=timeout,
        max_body_bytes=max_body_bytes,
        max_question_chars=max_question_chars,
    )


@serve_app.command("api")
def api(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML pipeline config.")] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a config field, e.g. --set generator.backend=openai"),
    ] = None,
    method: Annotated[str | None, typer.Option("--method", "-m", help="Default method.")] = None,
    methods: Annotated[
        str | None,
        typer.Option("--methods", help="Comma-separated methods callers may choose (model field)."),
    ] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the bearer key; unset variable = no auth.")
    ] = "QUCO_API_KEY",
    concurrency: Annotated[int, typer.Option(help="Questions answered at once.")] = 2,
    queue: Annotated[int, typer.Option(help="Questions waiting for a slot before new ones get 429.")] = 16,
    timeout: Annotated[float, typer.Option(help="Per-request timeout in seconds (504 after it).")] = 300.0,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body (413 above).")] = 64 * 1024,
    max_question_chars: Annotated[int, typer.Option(help="Longest question (400 above).")] = 2000,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Serve POST /v1/answer, POST /v1/chat/completions (model = method), GET /healthz, /docs and /viewer."""
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
        force=True,
    )
    logging.getLogger("quco").setLevel(logging.DEBUG if verbose else logging.INFO)
    try:
        import uvicorn

        from quco.serve.app import create_app
    except ImportError as exc:
        typer.echo(
            f"error: quco serve needs FastAPI and uvicorn ({exc.name} is missing); install quco[serve]",
            err=True,
        )
        raise typer.Exit(2) from None
    try:
        settings = _settings(
            config,
            sets,
            method,
            methods,
            api_key_env,
            concurrency,
            queue,
            timeout,
            max_body_bytes,
            max_question_chars,
        )
        if settings.api_key is None and host not in _LOOPBACK:
            raise ConfigError(
                f"refusing to listen on {host} without a key; export {api_key_env}=<secret> or use --host 127.0.0.1"
            )
        app = create_app(settings)
    except QucoError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    # uvicorn's own access log prints query strings; the app writes structured ones without secrets instead.
    uvicorn.run(app, host=host, port=port, access_log=False, log_level="warning")
