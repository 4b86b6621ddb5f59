"""Unit tests of helpers.plots (Agg backend, no window)."""

import matplotlib
import matplotlib.pyplot as plt
import pytest

from helpers import plots

# Switching is allowed while no figure is open; Agg never opens a window.
matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_plot_curves():
    ax = plots.plot_curves({"fp32": [3, 2, 1], "bf16": [3, 2.1, 1.2]}, xlabel="step",
                           ylabel="loss", title="t", logy=True, styles={"bf16": {"ls": "--"}})
    assert len(ax.lines) == 2 and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["fp32", "bf16"]
    assert ax.lines[1].get_linestyle() == "--" and ax.get_title() == "t"


def test_plot_curves_draws_on_given_axes():
    _, ax = plt.subplots()
    assert plots.plot_curves({"a": [1]}, xlabel="x", ylabel="y", ax=ax) is ax


def test_plot_curves_rejects_bad_input():
    with pytest.raises(ValueError, match="curves is empty"):
        plots.plot_curves({}, xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match="styles name curves that do not exist"):
        plots.plot_curves({"a": [1]}, xlabel="x", ylabel="y", styles={"b": {}})


def test_plot_bars():
    ax = plots.plot_bars({"fp32": 10.0, "bf16": 4.5, "fp16": 4.4}, ylabel="ms")
    assert len(ax.patches) == 3 and len(ax.texts) == 3
    ax = plots.plot_bars({"a": 1.0}, ylabel="ms", annotate=False, logy=True)
    assert len(ax.texts) == 0 and ax.get_yscale() == "log"


def test_plot_stacked_memory():
    bars = {"fp32": {"params": 4, "grads": 4, "adam": 8}, "bf16": {"params": 2, "grads": 2}}
    ax = plots.plot_stacked_memory(bars, title="memory")
    assert len(ax.patches) == 2 * 3
    assert ax.get_ylabel() == "MiB"
    tops = sorted(p.get_y() + p.get_height() for p in ax.patches)
    assert tops[-1] == 16
    with pytest.raises(ValueError, match="negative amount"):
        plots.plot_stacked_memory({"a": {"x": -1}})


def test_plot_grouped_bars_puts_each_series_side_by_side():
    groups = {"Adam": {"forward": 10, "backward": 12, "step": 14}, "SGD": {"forward": 6, "backward": 8}}
    ax = plots.plot_grouped_bars(groups, ylabel="MiB", floor={"Adam": 8, "SGD": 4}, floor_label="held")
    assert len(ax.patches) == 2 * 3
    assert sorted(p.get_height() for p in ax.patches)[-1] == 14
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Adam", "SGD"]
    assert "held" in [t.get_text() for t in ax.get_legend().get_texts()]
    ax = plots.plot_grouped_bars(groups, ylabel="MiB", floor={"SGD": 4}, floor_label="held")
    assert "held" in [t.get_text() for t in ax.get_legend().get_texts()]   # not only the first group's
    with pytest.raises(ValueError, match="negative value"):
        plots.plot_grouped_bars({"a": {"x": -1}}, ylabel="MiB")


def test_plot_error_per_tensor_floors_zeros():
    errors = {"sum": {"w": 0.0, "b": 1e-3}, "mean": {"w": 1e-7, "b": 2e-7}}
    ax = plots.plot_error_per_tensor(errors)
    assert len(ax.patches) == 4 and ax.get_yscale() == "log"
    assert min(p.get_height() for p in ax.patches) == plots.LOG_FLOOR
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "b"]
    # The exact zero is marked as such, not drawn as a tiny error.
    assert [p.get_hatch() for p in ax.patches].count("//") == 1
    assert [t.get_text() for t in ax.texts] == ["0"]


def test_plot_timeline():
    segments = [("data", 0.0, 0.5), ("compute", 0.5, 0.2), ("data", 0.7, 0.5)]
    ax = plots.plot_timeline(segments, title="profile")
    assert len(ax.patches) == 3
    assert [t.get_text() for t in ax.get_yticklabels()] == ["data", "compute"]
    with pytest.raises(ValueError, match="duration >= 0"):
        plots.plot_timeline([("data", 0.0, -1.0)])
    with pytest.raises(ValueError, match="segments is empty"):
        plots.plot_timeline([])


def test_plot_format_ranges():
    ax = plots.plot_format_ranges({"fp16": (2**-24, 2**-14, 65504.0), "bf16": (9.2e-41, 1.2e-38, 3.4e38)})
    assert ax.get_xscale() == "log" and len(ax.patches) == 4
    assert [t.get_text() for t in ax.get_yticklabels()] == ["fp16", "bf16"]


def test_plot_format_ranges_rejects_unordered_limits():
    with pytest.raises(ValueError, match="subnormal, normal, max"):
        plots.plot_format_ranges({"bad": (1.0, 0.5, 2.0)})


def test_plot_log_histogram():
    ax = plots.plot_log_histogram({"grads": [1e-9, 1e-8, 0.0, 1e-3]}, lines={"fp16 smallest": 2**-24})
    assert len(ax.lines) == 1 and sum(p.get_height() for p in ax.patches) == 3


def test_plot_log_histogram_needs_nonzero_values():
    with pytest.raises(ValueError, match="no nonzero finite value"):
        plots.plot_log_histogram({"zeros": [0.0, 0.0]})
    with pytest.raises(ValueError, match="positive magnitude"):
        plots.plot_log_histogram({"ok": [1.0]}, lines={"bad": 0.0})
