"""CONTRIBUTING.md names every module of helpers/ and course_tools/, so its map stays whole."""

import re

import pytest

from course_tools.lessons import REPO_ROOT

MODULES = sorted(path for folder in ("helpers", "course_tools") for path in (REPO_ROOT / folder).rglob("*.py")
                 if path.name != "__init__.py")


def test_there_are_modules_to_name():
    assert len(MODULES) > 20


@pytest.mark.parametrize("module", MODULES, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_contributing_names_every_module(module):
    text = (REPO_ROOT / "CONTRIBUTING.md").read_text()
    assert re.search(rf"`{re.escape(module.stem)}`", text), (
        f"CONTRIBUTING.md does not name {module.relative_to(REPO_ROOT)}: add it to the module list")
