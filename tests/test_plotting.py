"""The shared figure helper: the figure is saved when its block ends, and closed on every exit."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from mrgrpo.plotting import pyplot, saved_figure  # noqa: E402


def test_a_figure_is_saved_as_png_and_closed(tmp_path):
    plt = pyplot("test plots")
    before = len(plt.get_fignums())
    path = tmp_path / "f.png"
    with saved_figure(path, "test plots", dpi=50, ncols=2, figsize=(4, 2)) as (fig, axes):
        assert len(axes) == 2 and len(plt.get_fignums()) == before + 1
        axes[0].plot([1, 2], [3, 4])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(plt.get_fignums()) == before
    assert plt.get_backend().lower() == "agg"


def test_a_failing_block_saves_nothing_and_leaves_no_open_figure(tmp_path):
    plt = pyplot("test plots")
    before = len(plt.get_fignums())
    with pytest.raises(RuntimeError, match="boom"):
        with saved_figure(tmp_path / "f.png", "test plots", dpi=50):
            raise RuntimeError("boom")
    assert not (tmp_path / "f.png").exists()
    assert len(plt.get_fignums()) == before


def test_without_matplotlib_the_caller_gets_the_install_line(monkeypatch, tmp_path):
    import sys

    from mrgrpo.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtraError, match=r"my figures .*pip install 'mrgrpo\[plots\]'"):
        with saved_figure(tmp_path / "f.png", "my figures", dpi=50):
            pass
