"""Fixtures shared by the pipeline and grading tests: throw-away copies of the course."""

import os

import pytest
from support import copy_course

# `make test` runs two pytest-xdist workers on two cores, and each starts kernels (nbgrader, nbval,
# JupyterLab) whose torch would take every core again; the spinning OpenMP threads then fight, and
# a demo class graded beside another took 3.5 times as long (370 s against 104 s). One thread per
# process, set before anything imports torch, and inherited by every kernel the tests start.
os.environ.setdefault("OMP_NUM_THREADS", "1")



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
    from course_tools.course import assignment_ids, generate_release, open_course

    root = copy_course(tmp_path_factory.mktemp("course"))
    api = open_course(root)
    for assignment in assignment_ids(root):
        generate_release(api, assignment)
    return root
