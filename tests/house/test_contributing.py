"""CONTRIBUTING.md names every module of helpers/ and course_tools/, so its map stays whole."""

import re

import pytest

from course_tools.lessons import REPO_ROOT

MODULES = sorted(path for folder in ("helpers", "course_tools") for path in (REPO_ROOT / folder).rglob("*.py")
                 if path.name != "__init__.py")


def test_there_are_modules_to_name():
    assert len(MODULES) > 20


def written_name(module) -> str:
    """How CONTRIBUTING names a module: by its name, or by its path below its room in helpers/
    (`checks/memory`, `collect/memory/plan`), so that a judge and a tool of one name stay apart."""
    helpers = REPO_ROOT / "helpers"
    if module.is_relative_to(helpers) and len(module.relative_to(helpers).parts) > 1:
        return module.relative_to(helpers).with_suffix("").as_posix()
    return module.stem


@pytest.mark.parametrize("module", MODULES, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_contributing_names_every_module(module):
    text = (REPO_ROOT / "CONTRIBUTING.md").read_text()
    assert re.search(rf"`{re.escape(written_name(module))}`", text), (
        f"CONTRIBUTING.md does not name {module.relative_to(REPO_ROOT)}: add it to the module list")
