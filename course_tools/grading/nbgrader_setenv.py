"""nbgrader's switch of the environment around a run, made to put the environment back.

nbgrader sets NBGRADER_EXECUTION (and NBGRADER_VALIDATING while validating) for the time of a
Validate or an autograde with `nbgrader.utils.setenv`. In nbgrader 0.9 that context manager
restores nothing when the run raises (a kernel that dies during Validate raises DeadKernelError),
and it looks each previous value up under the new value instead of the name, so it deletes a
variable that was set before. A Validate runs inside the student's JupyterLab server, and the
formgrader's autograde inside the teacher's: after one Validate whose kernel died, every kernel
that server starts inherits NBGRADER_EXECUTION=validate, so `helpers.is_grading()` says True in
the student's own notebook (no progress bars, demonstrations at grading size even on a GPU) until
the server restarts. `mend_nbgrader_setenv` puts a correct switch in its place; the course's
nbgrader_config.py and the hub's student configuration call it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def setenv(**variables: str) -> Iterator[None]:
    """Set environment variables for the body; afterwards each has its earlier value (or is unset)
    again, however the body ended."""
    previous = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def mend_nbgrader_setenv() -> None:
    """Make every Validate and autograde in this process use `setenv` above. nbgrader's Validator and
    Autograde look `utils.setenv` up when they run, so replacing it there is enough."""
    from nbgrader import utils

    utils.setenv = setenv
