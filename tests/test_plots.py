"""Every result plots the same way: ``plot(ax=None)`` draws on one Axes and returns it."""

from __future__ import annotations

from typing import Any

import matplotlib
import pytest

from tunekit import doctor, lr_find, probe, search, train

from .tasks import classification_task, regression_task

matplotlib.use("Agg")
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("plots")
    space = out / "space.toml"
    space.write_text('[lr]\ntype = "float"\nlog = true\nlow = 1e-3\nhigh = 1e-1\n')
    return {
        "lr_find": lr_find(classification_task(), sweep_steps=20, device="cpu"),
        "probe": probe(classification_task(), memory_budget="16GiB", device="cpu", throughput_points=2, noise_repeats=2),
        "train": train(classification_task(), run_steps=5),
        "search": search(regression_task(), str(space), trials=2, max_steps=10, device="cpu", out=out / "s"),
        "doctor": doctor(classification_task(), device="cpu"),
    }


@pytest.mark.parametrize("kind", ["lr_find", "probe", "train", "search", "doctor"])
def test_plot_draws_on_the_axes_it_is_given_and_returns_it(results: dict[str, Any], kind: str) -> None:
    import matplotlib.pyplot as plt

    result = results[kind]
    fig, ax = plt.subplots()
    assert result.plot(ax) is ax and ax.has_data()
    drawn = result.plot()
    assert isinstance(drawn, Axes) and drawn is not ax and drawn.has_data()
    assert isinstance(result.figure(), Figure)
    assert result._repr_png_()[:4] == b"\x89PNG"
    plt.close("all")


# The search's headline carries device seconds on a second axis above its samples: 4 panels, 5 Axes.
@pytest.mark.parametrize("kind, panels", [("search", 5), ("doctor", 2)])
def test_an_overview_figure_holds_its_plots_headline_first(results: dict[str, Any], kind: str, panels: int) -> None:
    fig = results[kind].plot_overview()
    assert len(fig.axes) == panels and all(a.has_data() or a.texts for a in fig.axes)
    assert fig.axes[0].get_title() == results[kind].plot().get_title()
    assert fig.axes[0].get_xlabel() == results[kind].plot().get_xlabel()


def test_probe_plot_shows_a_small_model_under_a_large_budget(results: dict[str, Any]) -> None:
    """16 GiB of budget and a model of some KiB: both on the plot, on a log axis."""
    r = results["probe"]
    ax = r.plot()
    low, high = ax.get_ylim()
    assert ax.get_yscale() == "log"
    assert high >= r.budget_bytes and low <= r.predicted_peak(1) < 1e-3 * r.budget_bytes


@pytest.mark.parametrize("kind", ["lr_find", "probe", "train", "search", "doctor"])
def test_a_notebook_shows_the_summary_and_the_figure_together(results: dict[str, Any], kind: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """text/html holds the summary (escaped) above the figure; the figure is drawn off pyplot, so an
    inline backend has nothing of it to show again."""
    import base64
    import html

    import matplotlib.pyplot as plt

    plt.close("all")
    result = results[kind]
    with monkeypatch.context() as m:
        m.setattr(plt, "figure", lambda *a, **k: pytest.fail("a pyplot figure: the inline backend would show it"))
        bundle = result._repr_mimebundle_()
    assert set(bundle) == {"text/html", "image/png"}  # IPython adds text/plain: the short repr
    page = bundle["text/html"]
    assert html.escape(result.summary(), quote=False) in page and page.index("<pre") < page.index("<img")
    assert base64.b64decode(bundle["image/png"])[:4] == b"\x89PNG"
    assert f'src="data:image/png;base64,{bundle["image/png"]}"' in page
    assert plt.get_fignums() == []


def test_a_figure_that_fails_leaves_the_summary_shown(results: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    result = results["doctor"]
    monkeypatch.setattr(type(result), "figure", lambda self: 1 / 0)
    bundle = result._repr_mimebundle_()
    assert "[PASS]" in bundle["text/html"] and "no figure: ZeroDivisionError" in bundle["text/html"]
    assert "image/png" not in bundle
