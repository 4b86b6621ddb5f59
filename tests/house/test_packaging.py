"""A non-editable install (deploy/hub/setup.sh installs the course so) carries every package of
helpers/ and course_tools/: a subpackage that pyproject.toml's list misses installs as nothing, and
the notebooks fail on the hub with "No module named ..." while every test of this checkout passes."""

import tomllib

from setuptools import find_packages

from course_tools.lessons import REPO_ROOT


def test_the_install_carries_every_package_of_helpers_and_course_tools():
    settings = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    include = settings["tool"]["setuptools"]["packages"]["find"]["include"]
    installed = set(find_packages(str(REPO_ROOT), include=include))
    packages = {".".join(path.parent.relative_to(REPO_ROOT).parts)
                for top in ("helpers", "course_tools") for path in (REPO_ROOT / top).rglob("__init__.py")}
    assert packages <= installed, f"pyproject.toml's packages leave out {sorted(packages - installed)}"
    assert {"helpers.checks.memory", "helpers.collect", "helpers.transport"} <= installed
