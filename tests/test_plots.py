"""Every result plots the same way: ``plot(ax=None)`` draws on one Axes and returns it."""

from __future__ import annotations

from typing import Any

import matplotlib
import pytest

from tunekit import Local, Measurement, StepSettings, Sweep, doctor, lr_find, probe, search, train

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
        "lr_find": lr_find(classification_task(), sweep=Sweep(sweep_steps=20), step=StepSettings(device="cpu")),
        "probe": probe(classification_task(), memory_budget="16GiB", step=StepSettings(device="cpu"),
                       measure=Measurement(throughput_points=2, noise_repeats=2)),
        "train": train(classification_task(), run_steps=5),
        "search": search(regression_task(), str(space), trials=2, out=out / "s", backend=Local(device="cpu"),
                         budget="10updates"),
        "doctor": doctor(classification_task(), step=StepSettings(device="cpu")),
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


# The search's headline carries device seconds on a secondary axis above its samples (a child of its Axes).
@pytest.mark.parametrize("kind, panels", [("search", 4), ("doctor", 2)])
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


def _display_points(ax: Any) -> list[tuple[float, float]]:
    """Every plotted point of ``ax``'s lines and scatters, in display (pixel) coordinates."""
    import numpy as np

    points: list[Any] = []
    for line in ax.get_lines():
        xy = np.asarray(line.get_xydata(), dtype=float)
        # axhline/axvline are drawn across the axes (axes-fraction coordinates): the label may sit by them
        if len(xy) and line.get_transform() is ax.transData:
            points.extend(line.get_transform().transform(xy))
    for coll in ax.collections:
        offsets = np.asarray(coll.get_offsets(), dtype=float)
        if len(offsets):
            points.extend(coll.get_offset_transform().transform(offsets))
    return [tuple(p) for p in points]


def _inside(box: Any, point: tuple[float, float]) -> bool:
    return box.x0 <= point[0] <= box.x1 and box.y0 <= point[1] <= box.y1


@pytest.mark.parametrize("source", ["given", "1/4 of this machine's RAM, a CPU run's share; memory_budget= for more"])
def test_probe_plot_keeps_its_legend_off_the_data_and_the_budget_label_inside(results: dict[str, Any],
                                                                            source: str) -> None:
    """The legend covers no memory curve, measured point or throughput point; the budget's label (its
    source however long) lies inside the axes, above its line, over no data."""
    import dataclasses

    r = dataclasses.replace(results["probe"], budget_source=source)
    if not any(t.get("peak_bytes") for t in r.tried):  # a CPU probe measures no peak: give it one to show
        r.tried = [*r.tried, {"batch": 64, "ok": True, "peak_bytes": r.predicted_peak(64), "predicted_bytes": 0}]
    ax = r.plot()
    fig = ax.figure
    fig.tight_layout()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    twins = [a for a in fig.axes if a is not ax]
    points = _display_points(ax) + [p for a in twins for p in _display_points(a)]
    assert len(points) > 20 and twins  # the curves, the measured point and the throughput are all there
    legend = ax.get_legend().get_window_extent(renderer)
    assert not [p for p in points if _inside(legend, p)]
    assert fig.bbox.x0 <= legend.x0 and legend.x1 <= fig.bbox.x1  # not cut off at the figure's edge
    label = next(t for t in ax.texts if t.get_text().startswith("budget "))
    assert source.split(";")[0].split()[-1] in label.get_text().replace("\n", " ")
    box, frame = label.get_window_extent(renderer), ax.get_window_extent(renderer)
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
    assert box.y0 >= ax.transData.transform((1, r.budget_bytes))[1] - 1  # above its line
    assert not [p for p in points if _inside(box, p)]


def _search_with_every_kind_of_trial() -> Any:
    """A search's result, by hand: trials of uneven speed (the first slow), one of each way to end."""
    from tunekit.results.search import SearchResult

    def trial(n: int, state: str, value: Any, samples: int, seconds: float, lr: float, **kw: Any) -> dict[str, Any]:
        return dict(number=n, state=state, value=value, params={"lr": lr}, config={"lr": lr}, samples=samples,
                    curve=[[samples // 2, 9.0], [samples, value or 8.0]], seconds=seconds, finished=n, lr=lr, **kw)

    trials = [trial(0, "COMPLETE", 5.0, 1000, 40.0, 1e-3), trial(1, "COMPLETE", 4.0, 1000, 5.0, 3e-3),
              trial(2, "PRUNED", None, 300, 2.0, 1e-2), trial(3, "FAIL", None, 200, 1.0, 1e-1, diverged=True),
              trial(4, "FAIL", None, 500, 3.0, 2e-2, error="interrupted; re-run on --resume"),
              trial(5, "FAIL", None, 100, 1.0, 4e-2, error="ValueError: bad batch"),
              trial(6, "RUNNING", None, 0, 0.0, 6e-2),
              trial(7, "COMPLETE", 2.0, 1000, 5.0, 5e-3)]
    trials[6]["finished"] = None  # still running when the result was read
    return SearchResult(study_name="s", storage="in-memory", space="x", direction="minimize", best_value=2.0,
                        best_params={}, best_config={}, trials=trials, seed_params={}, distributions={},
                        param_importances={}, probe_samples=500, probe_seconds=10.0)


def test_search_plots_draw_an_interrupted_trial_as_interrupted() -> None:
    """A killed or still running trial is neither diverged nor failed: its own marker and label, at its
    last value, in the LR plot and among the curves."""
    import matplotlib.pyplot as plt

    r = _search_with_every_kind_of_trial()
    ax = r.plot_lr()
    by_label = {c.get_label(): c for c in ax.collections}
    assert {"complete", "pruned (last value)", "diverged", "failed (an error)", "interrupted (last value)"} <= set(by_label)
    interrupted = by_label["interrupted (last value)"]
    assert sorted(x for x, _ in interrupted.get_offsets()) == [2e-2, 6e-2]
    assert [float(y) for x, y in interrupted.get_offsets() if x == 2e-2] == [8.0]  # its last value, not the worst
    assert interrupted.get_paths()[0] != by_label["diverged"].get_paths()[0]
    assert [x for x, _ in by_label["diverged"].get_offsets()] == [1e-1]
    assert [x for x, _ in by_label["failed (an error)"].get_offsets()] == [4e-2]
    curves = r.plot_curves()
    assert "interrupted" in curves.get_legend_handles_labels()[1]
    plt.close("all")


def test_best_so_far_top_axis_marks_each_step_at_its_own_device_seconds() -> None:
    """The top axis relabels the same points: a step drawn at the samples spent by a trial reads, on
    the top axis, the device seconds spent by that trial (a slow first trial moves no step earlier)."""
    import matplotlib.pyplot as plt
    import numpy as np

    r = _search_with_every_kind_of_trial()
    ax = r.plot_best()
    ax.figure.canvas.draw()
    (top,) = ax.child_axes
    _, by_samples, _ = r._best_so_far("samples")
    _, by_seconds, _ = r._best_so_far("seconds")
    assert by_seconds[:2] == [50.0, 55.0] and by_samples[:2] == [1500.0, 2500.0]
    below = ax.transData.transform([(x, 0.0) for x in by_samples])[:, 0]
    above = top.transData.transform([(x, 0.0) for x in by_seconds])[:, 0]
    assert np.allclose(below, above, atol=0.5)
    forward, inverse = r.seconds_at_samples()
    assert np.allclose(inverse(forward(np.array(by_samples))), by_samples)
    plt.close("all")


def test_with_confirmation_the_plots_show_the_chosen_configuration_not_the_luckiest_run() -> None:
    """Trial 0 was lucky once (1.0, then 3.0); trial 1's configuration was chosen by its mean (1.5, 1.6, 1.7): its
    three runs are the bold curves, trial 0 is one curve among the others, and the best-so-far plot marks the
    chosen mean the luckiest run overstated."""
    import matplotlib.pyplot as plt

    from tunekit.results.confirmation import Confirmation, ConfirmedConfig
    from tunekit.results.search import SearchResult

    def trial(n: int, value: float, of: Any = None) -> dict[str, Any]:
        return dict(number=n, state="COMPLETE", value=value, params={"lr": 1e-3 * (1 + (n if of is None else of))},
                    config={}, samples=100, curve=[[50, 9.0], [100, value]], seconds=1.0, finished=n, confirm_of=of)

    trials = [trial(0, 1.0), trial(1, 1.5), trial(2, 1.6, of=1), trial(3, 1.7, of=1), trial(4, 3.0, of=0)]
    c = Confirmation(chosen=1, mean=1.6, best_single=1.0, best_single_trial=0, overstated=0.6,
                     configurations=[ConfirmedConfig(0, [0, 4], [1.0, 3.0], 2.0), ConfirmedConfig(1, [1, 2, 3], [1.5, 1.6, 1.7], 1.6)])
    r = SearchResult(study_name="s", storage="in-memory", space="x", direction="minimize", best_value=1.6,
                     best_params=trials[1]["params"], best_config={}, trials=trials, seed_params={}, distributions={},
                     param_importances={}, confirmation=c)
    curves = r.plot_curves()
    bold = [line for line in curves.lines if line.get_linewidth() == 2.2]
    assert sorted(float(line.get_ydata()[-1]) for line in bold) == [1.5, 1.6, 1.7]  # the chosen one's runs, not 1.0
    assert "chosen by its mean (trial 1, 3 runs)" in curves.get_legend_handles_labels()[1]
    best = r.plot_best()
    (mean,) = [line for line in best.lines if line.get_label() == "chosen by its mean (trial 1)"]
    assert list(mean.get_ydata()) == [1.6, 1.6]
    plain = SearchResult(**{**r.to_dict(), "confirmation": None})  # without confirmation: the best trial, bold
    assert [float(line.get_ydata()[-1]) for line in plain.plot_curves().lines if line.get_linewidth() == 2.2] == [1.0]
    plt.close("all")
