"""Measure how long each worked-solution notebook takes to run top to bottom on this machine.

Each notebook in notebooks/ is executed several times in a fresh kernel (kernel start included,
as a student pressing "Restart and run all" would see it); the median is reported. With
--update-readme the table between the runtime-table markers of docs/run-time.md is rewritten.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course_tools.lessons import REPO_ROOT

START, END = "<!-- runtime-table:start -->", "<!-- runtime-table:end -->"


def run_once(path: Path, timeout: int = 600) -> float:
    """Seconds to execute the notebook at `path` in a new python3 kernel, in its own folder."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, kernel_name="python3", timeout=timeout,
                            resources={"metadata": {"path": str(path.parent)}})
    started = time.perf_counter()
    client.execute()
    return time.perf_counter() - started


def machine() -> str:
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {device}, "
            f"torch {torch.__version__}")


def measure(repeats: int) -> list[tuple[str, float, list[float]]]:
    rows = []
    for path in sorted((REPO_ROOT / "notebooks").glob("*/*.ipynb")):
        times = [run_once(path) for _ in range(repeats)]
        rows.append((str(path.relative_to(REPO_ROOT)), statistics.median(times), times))
        print(f"{rows[-1][0]}: median {rows[-1][1]:.1f} s over {repeats} runs "
              f"({', '.join(f'{t:.1f}' for t in times)})", flush=True)
    return rows


def table(rows, repeats: int) -> str:
    lines = [f"Measured by `make benchmark` ({repeats} runs each, median, kernel start included) on "
             f"{machine()}:", "", "| notebook | median run time |", "| --- | --- |"]
    lines += [f"| `{name}` | {median:.0f} s |" for name, median, _ in rows]
    return "\n".join(lines)


def update_readme(text: str, readme: Path = REPO_ROOT / "docs" / "run-time.md", start: str = START,
                  end: str = END) -> None:
    """Replace what stands between the `start` and `end` markers of docs/run-time.md with `text`."""
    content = readme.read_text()
    if start not in content or end not in content:
        raise SystemExit(f"{readme} has no {start} ... {end} markers")
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    readme.write_text(pattern.sub(lambda _: f"{start}\n{text}\n{end}", content))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--update-readme", action="store_true")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    result = table(measure(args.repeats), args.repeats)
    print(result)
    if args.update_readme:
        update_readme(result)


if __name__ == "__main__":
    main()
