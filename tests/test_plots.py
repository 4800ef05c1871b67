"""Every result plots the same way: ``plot(ax=None)`` draws on one Axes and returns it."""

from __future__ import annotations

from typing import Any

import matplotlib
import pytest

from tunekit import lr_find, probe, search, train

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
        "lr_find": lr_find(classification_task(), steps=20, device="cpu"),
        "probe": probe(classification_task(), memory_budget="16GiB", device="cpu", throughput_points=2, noise_repeats=2),
        "train": train(classification_task(), max_steps=5),
        "search": search(regression_task(), str(space), trials=2, max_steps=10, device="cpu", out=out / "s"),
    }


@pytest.mark.parametrize("kind", ["lr_find", "probe", "train", "search"])
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


def test_a_search_figure_is_its_four_plots(results: dict[str, Any]) -> None:
    fig = results["search"].plot_overview()
    assert len(fig.axes) == 4 and all(a.has_data() or a.texts for a in fig.axes)
    assert fig.axes[0].get_xlabel() == results["search"].plot().get_xlabel()  # the headline comes first


def test_probe_plot_shows_a_small_model_under_a_large_budget(results: dict[str, Any]) -> None:
    """16 GiB of budget and a model of some KiB: both on the plot, on a log axis."""
    r = results["probe"]
    ax = r.plot()
    low, high = ax.get_ylim()
    assert ax.get_yscale() == "log"
    assert high >= r.budget_bytes and low <= r.predicted_peak(1) < 1e-3 * r.budget_bytes
