"""The look shared by the figures of EM against retrievals per question (the gate frontier, the results table):
one size, one axis labelling, the methods as labelled red squares, written as PNG files."""

from __future__ import annotations

from collections.abc import Sequence
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


def mark_method(
    ax: Any,
    x: float,
    y: float,
    label: str,
    filled: bool = True,
    color: str = METHOD_COLOR,
    fontsize: float = METHOD_FONTSIZE,
) -> Any:
    """A method at its measured cost and score: a square (hollow for a partial row) and its label."""
    ax.plot([x], [y], "s", ms=5, color=color, markerfacecolor=color if filled else "white")
    return ax.annotate(
        label, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=fontsize, color=color
    )


# Where a label may sit around its point (offset in points, horizontal alignment), in order of preference.
_PLACES = [((4, 3), "left"), ((4, -9), "left"), ((-4, 3), "right"), ((-4, -9), "right"), ((4, 10), "left"),
           ((4, -16), "left"), ((-4, 10), "right"), ((-4, -16), "right"), ((4, 17), "left"), ((4, -23), "left")]  # fmt: skip


def place_labels(fig: Any, ax: Any, labels: Sequence[Any]) -> None:
    """Move each label to the first place around its point where it covers no other label, no other point
    and stays inside the axes (the first place when none is free)."""
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    points = [ax.transData.transform(ann.xy) for ann in labels]
    placed: list[Any] = []
    for i, ann in enumerate(labels):
        others = [p for j, p in enumerate(points) if j != i]
        for offset, align in _PLACES:
            ann.xyann, _ = offset, ann.set_horizontalalignment(align)
            box = ann.get_window_extent(renderer).expanded(1.05, 1.1)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if (
                inside
                and not any(box.overlaps(b) for b in placed)
                and not any(box.contains(px, py) for px, py in others)
            ):
                break
        else:
            ann.xyann, _ = _PLACES[0][0], ann.set_horizontalalignment(_PLACES[0][1])
        placed.append(ann.get_window_extent(renderer))


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
