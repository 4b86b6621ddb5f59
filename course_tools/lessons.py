"""What the course is: where it lives, its nbgrader course id, its lessons (every folder of source/
that holds a notebook, in lesson order) and how long one of their cells may run.

Imports nothing heavy (no nbgrader, no torch), so the GPU check can use it on a machine that has
only what nbval needs.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
COURSE_ID = "efficient-pytorch"
# Seconds one notebook cell may run, for grading (nbgrader_config.py) and for nbval (tests/conftest.py,
# the GPU check): training cells take seconds on a laptop CPU, nbgrader's default of 30 s is too short.
CELL_TIMEOUT_S = 300


def assignment_ids(root: Path = REPO_ROOT) -> list[str]:
    """The assignments authored under root/source/, in lesson order."""
    source = Path(root) / "source"
    return sorted(p.name for p in source.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
