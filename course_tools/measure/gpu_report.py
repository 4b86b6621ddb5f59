"""The GPU check's report: nbval's results per lesson and the figures each notebook recorded.

Written as gpu-report/report.json (everything) and report.md (for people). Nothing here imports
torch or nbgrader, so the report can be rendered again from report.json anywhere.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path


def parse_junit(path: Path) -> dict:
    """Totals, per-notebook counts and failures from pytest's JUnit XML of an nbval run."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    totals = {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    notebooks: dict[str, dict[str, int]] = {}
    failures = []
    for suite in suites:
        for case in suite.iter("testcase"):
            name = case.get("classname", "")
            outcome = ("failed" if case.find("failure") is not None
                       else "errors" if case.find("error") is not None
                       else "skipped" if case.find("skipped") is not None else "passed")
            counts = notebooks.setdefault(name, {"passed": 0, "failed": 0, "errors": 0, "skipped": 0})
            counts[outcome] += 1
            totals["tests"] += 1
            totals[outcome] += 1
            problem = case.find("failure") if outcome == "failed" else case.find("error")
            if problem is not None:
                message = (problem.get("message") or problem.text or "").strip()
                failures.append({"notebook": name, "cell": case.get("name", ""), "outcome": outcome,
                                 "message": message[:600]})
    return {"totals": totals, "notebooks": notebooks, "failures": failures}


def read_figures(path: Path) -> tuple[list[dict], list[str]]:
    """The figures a notebook recorded (helpers.report.record's JSON lines) and any unreadable line."""
    if not path.exists():
        return [], []
    figures, problems = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            figure = json.loads(line)
            figures.append({"name": str(figure["name"]), "value": figure["value"],
                            "unit": str(figure.get("unit", ""))})
        except (ValueError, KeyError, TypeError):
            problems.append(f"line {number} of {path.name} is not a figure: {line[:120]!r}")
    return figures, problems


def format_value(value, unit: str) -> str:
    if isinstance(value, float):
        text = f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    else:
        text = str(value)
    return (f"{text} {unit}" if unit else text).replace("|", "\\|")


def lesson_failed(section: dict) -> bool:
    return section["nbval"].get("returncode") != 0 or bool(section.get("problems"))


def _nbval_line(nbval: dict) -> str:
    verdict = "passed" if nbval.get("returncode") == 0 else "FAILED"
    return (f"nbval **{verdict}** in {nbval['duration_s']:.0f} s (exit code {nbval.get('returncode')}); "
            f"pytest says: {nbval.get('summary', '')}")


def _lesson_lines(lesson: str, section: dict) -> list[str]:
    lines = [f"## {lesson}", "", _nbval_line(section["nbval"]), ""]
    for failure in section["nbval"].get("failures", []):
        message = " ".join(failure["message"].split())[:300]
        lines.append(f"- {failure['outcome']}: {failure['cell']}: {message}")
    lines += [f"- {problem}" for problem in section.get("problems", [])]
    if section["nbval"].get("failures") or section.get("problems"):
        lines.append("")
    if not section["figures"]:
        lines += ["No figures: this notebook recorded none (helpers.report.record).", ""]
        return lines
    lines += ["| figure | value |", "| --- | --- |"]
    lines += [f"| {figure['name']} | {format_value(figure['value'], figure['unit'])} |"
              for figure in section["figures"]]
    return lines + [""]


def render_markdown(report: dict) -> str:
    machine = report["machine"]
    lines = ["# GPU check report", ""]
    if report["mode"] == "cpu-self-test":
        lines += [f"**CPU self-test.** {report['reason']}. The notebooks ran at their CPU size: the "
                  "figures prove that the code paths run, they are not the course's figures.", ""]
    else:
        lines += [f"**GPU check on {machine['device']}** (compute capability {machine.get('capability')}, "
                  f"{machine.get('gpu_memory_bytes', 0) / 2**30:.0f} GiB).", ""]
    lessons = report["lessons"]
    failed = [lesson for lesson, section in lessons.items() if lesson_failed(section)]
    silent = [lesson for lesson, section in lessons.items() if not section["figures"]]
    result = f"{len(lessons) - len(failed)} of {len(lessons)} lessons passed nbval"
    result += f" ({', '.join(failed)} failed)" if failed else ""
    result += f"; no figures from {', '.join(silent)}" if silent else ""
    lines += [f"- result: {result}",
              f"- written {report['written']} by `python -m course_tools.measure.gpu_check`, commit "
              f"{machine.get('commit') or 'unknown'}",
              f"- torch {machine['torch']} (CUDA {machine['cuda'] or 'none'}), Python {machine['python']}, "
              f"{machine['platform']}, {machine['cpu_count']} CPU cores",
              "- each lesson: nbval over its worked notebook (--nbval-lax: the nbval-check-output cells "
              "must print what they print on a CPU), then the figures that notebook recorded", ""]
    for lesson, section in lessons.items():
        lines += _lesson_lines(lesson, section)
    return "\n".join(lines).rstrip() + "\n"


def write_report(report: dict, out_dir: Path) -> Path:
    """Write report.json and report.md into out_dir; return report.md's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    path = out_dir / "report.md"
    path.write_text(render_markdown(report))
    return path
