"""What every ``quco`` sub-command shares: its consoles, logging set-up, error handling and Typer app shape.

Sub-commands live with their subsystems (``eval/cli/``, ``llm/models_cli.py`` …) and import this module,
never ``quco.cli``, so that no subsystem depends on the top-level command.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.logging import RichHandler

from quco.errors import QucoError

out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def sub_app(help: str, *, no_args_is_help: bool = True) -> typer.Typer:  # noqa: A002 (Typer's own name)
    """A Typer app for one ``quco`` sub-command group: plain tracebacks off, no shell-completion commands."""
    return typer.Typer(
        help=help, no_args_is_help=no_args_is_help, add_completion=False, pretty_exceptions_enable=False
    )


def setup_logging(verbose: bool) -> None:
    """quco's log lines on stderr (debug with ``verbose``); other libraries' only from warnings up."""
    level = logging.DEBUG if verbose else logging.INFO
    handler = RichHandler(console=err, show_path=False, show_time=False, markup=False)
    logging.basicConfig(level=logging.WARNING, handlers=[handler], format="%(message)s", force=True)
    logging.getLogger("quco").setLevel(level)


def friendly_errors(fn: F | None = None, *, interrupted: str = "interrupted") -> Any:
    """Turn user-facing errors into one line on stderr and exit code 2, never a traceback.

    Ctrl-C prints ``interrupted`` (what was kept, where a command has something to say) and exits with 130.
    Use bare (``@friendly_errors``) or with the message (``@friendly_errors(interrupted="…")``).
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except QucoError as exc:
                err.print(f"[bold red]error:[/bold red] {exc}", highlight=False, soft_wrap=True)
                raise typer.Exit(2) from None
            except KeyboardInterrupt:
                err.print(interrupted)
                raise typer.Exit(130) from None

        return wrapper  # type: ignore[return-value]

    return decorate(fn) if fn is not None else decorate
