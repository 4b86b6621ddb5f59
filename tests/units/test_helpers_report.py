"""helpers.report.record: silent unless the GPU check asks for figures, strict about what it records."""

import json
import math

import pytest

from helpers.report import FIGURES_ENV, record


def test_without_the_variable_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(FIGURES_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    record("bf16 step", 12.5, "ms")
    assert list(tmp_path.iterdir()) == []


def test_each_figure_is_one_json_line(tmp_path, monkeypatch):
    path = tmp_path / "figures.jsonl"
    monkeypatch.setenv(FIGURES_ENV, str(path))
    record("bf16 step", 12.5, "ms")
    record(" peak memory ", 3 * 2**20, "bytes")
    record("device", "cpu")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [{"name": "bf16 step", "value": 12.5, "unit": "ms"},
                     {"name": "peak memory", "value": float(3 * 2**20), "unit": "bytes"},
                     {"name": "device", "value": "cpu", "unit": ""}]


@pytest.mark.parametrize(("name", "value", "error"), [
    ("", 1.0, ValueError), (None, 1.0, ValueError), ("x", math.nan, ValueError), ("x", math.inf, ValueError),
    ("x", True, TypeError), ("x", [1.0], TypeError), ("x", None, TypeError)])
def test_bad_figures_are_refused_even_when_not_recording(monkeypatch, name, value, error):
    monkeypatch.delenv(FIGURES_ENV, raising=False)
    with pytest.raises(error):
        record(name, value)
