"""Fixtures shared by test modules: throw-away copies of the course, and Chromium for the browser
tests."""

import os
from pathlib import Path

import pytest
from support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PAGE_TIMEOUT_MS,
    VIEWPORT,
    copy_course,
    missing_browser_prerequisite,
    on_ci,
)

# `make test` runs two pytest-xdist workers on two cores, and each starts kernels (nbgrader, nbval,
# JupyterLab) whose torch would take every core again; the spinning OpenMP threads then fight, and
# a demo class graded beside another took 3.5 times as long (370 s against 104 s). One thread per
# process, set before anything imports torch, and inherited by every kernel the tests start.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The longest scopes first (measured with --durations; docs/run-time.md): pytest-xdist hands out
# whole scopes in the order they were collected, and the suite lasts until its last scope ends, so
# a demo class or the hub test started last was the suite's tail.
LONG_SCOPES_FIRST = (
    "tests/grading/test_grading.py::TestDemoClass_04",        # 640 s in CI (make test's log)
    "tests/course/test_hub.py",                               # 320 s
    "tests/grading/test_grading.py::TestDemoClass_02",
    "tests/grading/test_grading.py::TestDemoClass_03",
    "tests/grading/test_grading.py",
    "tests/jobs/test_autograde.py",
    "tests/grading/test_validate_corpus.py::TestValidate_04",
    "tests/grading/test_validate_corpus.py::TestValidate_03",
    "tests/grading/test_variants.py",
    "tests/course/test_browser.py",
)


# The tiers, one folder each; `ls tests` shows them. units/ (each helper, bad input included),
# house/ (the repository's own rules) and lessons/ (what the notebooks name exists) are fast;
# grading/ and jobs/ mark their slow tests (a whole notebook or class graded) one by one; every
# test in course/ drives the whole course in Chromium or on a JupyterHub, and is marked here.
FOLDER_MARKERS = {"course": ("browser",)}
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if path.is_relative_to(TESTS):
            for marker in FOLDER_MARKERS.get(path.relative_to(TESTS).parts[0], ()):
                item.add_marker(marker)

    def rank(item):
        return next((position for position, prefix in enumerate(LONG_SCOPES_FIRST)
                     if item.nodeid.startswith(prefix)), len(LONG_SCOPES_FIRST))

    items.sort(key=rank)  # stable: each scope keeps its own order


def pytest_configure(config):
    # nbval over notebooks/ gets the course's one cell timeout (course_tools.lessons), unless the
    # command line names another.
    from course_tools.lessons import CELL_TIMEOUT_S

    given = any(arg.startswith("--nbval-cell-timeout") for arg in config.invocation_params.args)
    if hasattr(config.option, "nbval_cell_timeout") and not given:
        config.option.nbval_cell_timeout = CELL_TIMEOUT_S


@pytest.fixture(scope="module")
def torch_on_one_thread():
    """torch on one intra-op thread for a module of tiny computations, whatever OMP_NUM_THREADS says."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def released_course(tmp_path_factory):
    """A fresh course copy with release/ generated (and the assignments in its gradebook)."""
    from course_tools.jobs.nbgrader_course import generate_release, open_course
    from course_tools.lessons import assignment_ids

    root = copy_course(tmp_path_factory.mktemp("course"))
    api = open_course(root)
    for assignment in assignment_ids(root):
        generate_release(api, assignment)
    return root


@pytest.fixture(scope="module")
def browser_prerequisites():
    """Skip the module without Chromium or Playwright; on CI (CI=true) fail instead."""
    missing = missing_browser_prerequisite()
    if missing and on_ci():
        pytest.fail(f"CI=true but {missing}", pytrace=False)
    if missing:
        pytest.skip(missing)


@pytest.fixture(scope="module")
def browser(browser_prerequisites):
    """One headless Chromium for the module; each test opens its own tab in it."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                                              headless=True)
        context = chromium.new_context(viewport=VIEWPORT)
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        yield context
        context.close()
        chromium.close()
