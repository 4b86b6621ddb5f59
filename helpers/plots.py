"""The matplotlib figures the lessons share; each draws on `ax` (or a new one) and returns it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

# Values at or below this are drawn at it on log axes, where zero has no place.
LOG_FLOOR = 1e-12


def _axes(ax):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots()
    return ax


def _legend_beside(ax) -> None:
    # Bars fill their axes up to the top, so a legend inside always covers one of them.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


def _require_non_empty_mapping(value, name: str) -> None:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} is empty: there is nothing to plot")


def _inner_keys(outer: Mapping[str, Mapping[str, float]], name: str, shape: str) -> list[str]:
    """The keys of every inner dict of {outer: {inner: value}}, in first-seen order."""
    _require_non_empty_mapping(outer, name)
    keys: list[str] = []
    for outer_key, inner in outer.items():
        if not isinstance(inner, Mapping):
            raise TypeError(f"{name}[{outer_key!r}] must be a dict of {shape}")
        keys += [key for key in inner if key not in keys]
    return keys


def plot_curves(curves: Mapping[str, Sequence[float]], *, xlabel: str, ylabel: str,
                title: str = "", ax=None, logy: bool = False,
                styles: Mapping[str, dict] | None = None):
    """Draw one line per label from {label: y values (x = 0, 1, ...)}; returns the Axes."""
    _require_non_empty_mapping(curves, "curves")
    styles = styles or {}
    unknown = sorted(set(styles) - set(curves))
    if unknown:
        raise ValueError(f"styles name curves that do not exist: {unknown}")
    ax = _axes(ax)
    for label, values in curves.items():
        values = [float(v) for v in values]
        if not values:
            raise ValueError(f"curve {label!r} has no values")
        ax.plot(range(len(values)), values, label=label, **styles.get(label, {}))
    if logy:
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend()
    return ax


def plot_bars(values: Mapping[str, float], *, ylabel: str, title: str = "", ax=None,
              logy: bool = False, annotate: bool = True):
    """Draw one bar per {label: value}, each labelled with its value; returns the Axes."""
    _require_non_empty_mapping(values, "values")
    ax = _axes(ax)
    heights = [float(v) for v in values.values()]
    bars = ax.bar(list(values), heights)
    if annotate:
        ax.bar_label(bars, labels=[f"{h:.3g}" for h in heights])
    if logy:
        ax.set_yscale("log")
    ax.set(ylabel=ylabel, title=title)
    return ax


def plot_stacked_memory(bars: Mapping[str, Mapping[str, float]], *, ylabel: str = "MiB",
                        title: str = "", ax=None):
    """Draw one stacked bar per key from {bar: {component: amount}}; returns the Axes."""
    components = _inner_keys(bars, "bars", "component -> amount")
    ax = _axes(ax)
    bottoms = [0.0] * len(bars)
    for component in components:
        heights = [float(parts.get(component, 0.0)) for parts in bars.values()]
        if any(h < 0 for h in heights):
            raise ValueError(f"component {component!r} has a negative amount")
        ax.bar(list(bars), heights, bottom=bottoms, label=component)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set(ylabel=ylabel, title=title)
    _legend_beside(ax)
    return ax


def plot_grouped_bars(groups: Mapping[str, Mapping[str, float]], *, ylabel: str, title: str = "",
                      ax=None, floor: Mapping[str, float] | None = None, floor_label: str = ""):
    """Draw side-by-side bars from {group: {series: value}} (a series' colour is the same in every
    group); `floor`, {group: value}, marks a level under each group's bars with a dashed line (what
    is held throughout, say). Returns the Axes."""
    series = _inner_keys(groups, "groups", "series -> value")
    if ax is None:
        import matplotlib.pyplot as plt

        # Room for each group's label under its bars.
        _, ax = plt.subplots(figsize=(max(6.4, 2.0 * len(groups)), 4.8))
    width = 0.8 / len(series)
    for index, name in enumerate(series):
        heights = [float(values.get(name, 0.0)) for values in groups.values()]
        if any(h < 0 for h in heights):
            raise ValueError(f"series {name!r} has a negative value")
        positions = [g - 0.4 + width * (index + 0.5) for g in range(len(groups))]
        ax.bar(positions, heights, width=width, label=name)
    floored = [(position, group) for position, group in enumerate(groups) if floor and group in floor]
    for drawn, (position, group) in enumerate(floored):
        ax.hlines(float(floor[group]), position - 0.4, position + 0.4, colors="black",
                  linestyles="dashed", label=floor_label if drawn == 0 else None)   # one legend entry
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set(ylabel=ylabel, title=title)
    _legend_beside(ax)
    return ax


def plot_error_per_tensor(errors: Mapping[str, Mapping[str, float]], *, title: str = "", ax=None):
    """Draw grouped bars on a log axis from {method: {tensor name: error}}; returns the Axes. An
    error of exactly 0, which a log axis cannot place, is a hatched stub at LOG_FLOOR labelled "0"."""
    _require_non_empty_mapping(errors, "errors")
    names: list[str] = []
    for method, per_tensor in errors.items():
        if not isinstance(per_tensor, Mapping):
            raise TypeError(f"errors[{method!r}] must be a dict of tensor name -> error")
        names += [n for n in per_tensor if n not in names]
    ax = _axes(ax)
    width = 0.8 / len(errors)
    for offset, (method, per_tensor) in enumerate(errors.items()):
        values = [float(per_tensor.get(n, 0.0)) for n in names]
        positions = [i + (offset - (len(errors) - 1) / 2) * width for i in range(len(names))]
        bars = ax.bar(positions, [max(v, LOG_FLOOR) for v in values], width=width, label=method)
        for bar, value in zip(bars, values, strict=True):
            if value <= 0.0:
                bar.set_hatch("//")
                ax.annotate("0", (bar.get_x() + bar.get_width() / 2, LOG_FLOOR), ha="center", va="bottom",
                            xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yscale("log")
    ax.set(ylabel="error", title=title)
    _legend_beside(ax)
    return ax


def plot_timeline(segments: Sequence[tuple[str, float, float]], *, title: str = "", ax=None):
    """Draw horizontal bars from [(label, start_s, duration_s)], one row per label; returns Axes."""
    if isinstance(segments, (str, Mapping)) or not isinstance(segments, Sequence):
        raise TypeError("segments must be a list of (label, start_s, duration_s) tuples")
    if not segments:
        raise ValueError("segments is empty: there is nothing to plot")
    rows: dict[str, int] = {}
    for segment in segments:
        if len(segment) != 3:
            raise ValueError(f"each segment must be (label, start_s, duration_s), got {segment!r}")
        label, start, duration = segment
        if not (math.isfinite(start) and math.isfinite(duration)) or duration < 0:
            raise ValueError(f"segment {label!r} needs a finite start and duration >= 0")
        rows.setdefault(label, len(rows))
    ax = _axes(ax)
    colours = [f"C{i % 10}" for i in range(len(rows))]
    for label, start, duration in segments:
        ax.barh(rows[label], duration, left=start, color=colours[rows[label]])
    ax.set_yticks(range(len(rows)), list(rows))
    # The first label on top, as in a profiler trace.
    ax.invert_yaxis()
    ax.set(xlabel="time (s)", title=title)
    return ax


def plot_format_ranges(formats: Mapping[str, tuple[float, float, float]], *, title: str = "", ax=None):
    """Draw each float format's positive range on a log axis from {name: (smallest subnormal,
    smallest normal, largest finite)}: a light bar for subnormals, a dark bar for normals."""
    _require_non_empty_mapping(formats, "formats")
    ax = _axes(ax)
    for row, (name, limits) in enumerate(formats.items()):
        if len(limits) != 3 or not 0 < limits[0] <= limits[1] < limits[2]:
            raise ValueError(f"formats[{name!r}] must be (subnormal, normal, max) "
                             "with 0 < subnormal <= normal < max")
        subnormal, normal, largest = (float(v) for v in limits)
        ax.barh(row, normal - subnormal, left=subnormal, color=f"C{row}", alpha=0.35)
        ax.barh(row, largest - normal, left=normal, color=f"C{row}")
        ax.annotate(f"max {largest:.4g}", (largest, row), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.set_xscale("log")
    # Autoscaling ignores bar edges on a log axis, so the tiny end would be cut off.
    smallest = min(float(limits[0]) for limits in formats.values())
    largest_of_all = max(float(limits[2]) for limits in formats.values())
    ax.set_xlim(smallest / 10, largest_of_all * 1e6)
    ax.set_yticks(range(len(formats)), list(formats))
    ax.invert_yaxis()
    ax.set(xlabel="magnitude (light: subnormal, dark: normal)", title=title)
    return ax


def plot_log_histogram(samples: Mapping[str, Sequence[float]], *, lines: Mapping[str, float] | None = None,
                       xlabel: str = "log10 |value|", title: str = "", ax=None, bins: int = 60):
    """Histogram of log10|v| for the nonzero values of each sample set, with labelled vertical lines
    at the given magnitudes (e.g. a format's smallest number); returns the Axes."""
    _require_non_empty_mapping(samples, "samples")
    ax = _axes(ax)
    for label, values in samples.items():
        finite = [float(v) for v in values if math.isfinite(float(v))]
        magnitudes = [math.log10(abs(v)) for v in finite if v != 0.0]
        if not magnitudes:
            raise ValueError(f"samples[{label!r}] has no nonzero finite value to draw")
        ax.hist(magnitudes, bins=bins, alpha=0.6, label=label)
    for index, (label, magnitude) in enumerate((lines or {}).items()):
        if magnitude <= 0:
            raise ValueError(f"line {label!r} must be at a positive magnitude, got {magnitude}")
        ax.axvline(math.log10(magnitude), color=f"C{index + 3}", linestyle="--", label=label)
    ax.set(xlabel=xlabel, ylabel="count", title=title)
    ax.legend(fontsize=8)
    return ax
