"""Figures for the explorers' callbacks (chapters 1–8), made outside pyplot.

JupyterLab 4.6 sends widget messages over a kernel subshell (ipykernel 7), which runs in a
thread of its own. After every widget message the ``comm`` package fires IPython's
``post_execute`` event, and pyplot's hook on it redraws every stale pyplot figure, in that
thread. A callback drawing a pyplot figure in the main thread meanwhile shares its figure,
and matplotlib's one mathtext parser, with that redraw: matplotlib is not thread-safe, and
the two draws corrupt the parser's state (in chapter 5, ``fig.tight_layout()`` raised
"ValueError: Expected end of text, found '$'" on a log axis's tick label). A
``matplotlib.figure.Figure`` made here is in no list that hook walks; ``show_figure``
displays it once, finished.
"""

from __future__ import annotations

__all__ = ["new_figure", "show_figure"]


def new_figure(figsize: tuple[float, float] | None = None, ncols: int = 1):
    """A figure outside pyplot with ``ncols`` Axes side by side: (figure, Axes or a list)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols)
    return fig, axes


def show_figure(fig) -> None:
    """Display ``fig`` in the running IPython kernel (as pyplot's inline backend would: PNG
    and its ``<Figure size …>`` text); outside IPython there is nowhere to show it."""
    from IPython import get_ipython

    if get_ipython() is not None:
        from IPython.display import display

        display(fig)
