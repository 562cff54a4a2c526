"""The look shared by the figures of EM against retrievals per question (the gate frontier, the results table):
one size, one axis labelling, the methods as labelled red squares, written as PNG files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

METHOD_COLOR = "tab:red"
METHOD_FONTSIZE = 6.5


def new_axes(figsize: tuple[float, float] = (8.4, 4.6)) -> tuple[Any, Any]:
    """A figure and its axes, drawn without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=figsize, dpi=120)


def mark_method(ax: Any, x: float, y: float, label: str, filled: bool = True, offset: tuple = (4, 3)) -> Any:
    """A method at its measured cost and score: a red square (hollow for a partial row) and its label."""
    face = METHOD_COLOR if filled else "white"
    ax.plot([x], [y], "s", ms=5, color=METHOD_COLOR, markerfacecolor=face)
    return ax.annotate(
        label, (x, y), textcoords="offset points", xytext=offset, fontsize=METHOD_FONTSIZE, color=METHOD_COLOR
    )


def save(
    fig: Any, ax: Any, path: str | Path, title: str, ylabel: str = "EM (%)", legend: bool = True
) -> Path:
    """Label the axes, title the figure, place the legend right of the axes, write the PNG and close it."""
    import matplotlib.pyplot as plt

    ax.set_xlabel("retrievals per question")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
