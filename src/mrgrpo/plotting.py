"""The one way mrgrpo draws a figure to a file: matplotlib on the Agg backend, saved and closed.

Shared by the run report (:mod:`mrgrpo.train.report`) and the experiment plots
(:mod:`mrgrpo.experiments.plots`). matplotlib is the ``plots`` extra: it is imported when a
figure is drawn, never at module import; without it the caller gets :class:`MissingExtraError`
with its install line, naming ``purpose``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mrgrpo.extras import import_extra


def pyplot(purpose: str) -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    matplotlib = import_extra("matplotlib", "plots", purpose)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def saved_figure(
    path: str | Path, purpose: str, *, dpi: int, tight: bool = True, **subplots: Any
) -> Iterator[tuple[Any, Any]]:
    """``with saved_figure(path, purpose, dpi=100, figsize=(7, 4)) as (fig, ax): ...``

    Yields ``plt.subplots(**subplots)``; when the block ends normally the figure is laid out
    (``tight``) and saved to ``path`` at ``dpi``. The figure is closed on every exit.
    """
    plt = pyplot(purpose)
    fig, axes = plt.subplots(**subplots)
    try:
        yield fig, axes
        if tight:
            fig.tight_layout()
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)
