"""Put a submission's nbgrader cells back in the release's order before it is graded."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.corpus.words import generate_corpus_id
from nbgrader import preprocessors as nbgrader_preprocessors
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor

from course_tools.cells import grade_id, nbgrader_metadata

# Where the release notebook, once read, waits in a notebook's nbconvert resources for the
# grading steps after the first that asks (the intake, the cell order, the demonstrations).
RELEASE_KEY = "course_release_notebook"


def release_notebook(config, resources):
    """The release's version of the notebook being graded, or None when the course has none. It is
    located and read once per graded notebook; every step gets that one copy, and must not change it."""
    if RELEASE_KEY not in resources:
        resources[RELEASE_KEY] = _read_release(config, resources.get("nbgrader") or {})
    return resources[RELEASE_KEY]


def _read_release(config, info: dict):
    if not info.get("assignment") or not info.get("notebook"):
        return None
    coursedir = CourseDirectory(config=config)
    path = Path(coursedir.format_path(coursedir.release_directory, ".", info["assignment"])) / (
        info["notebook"] + ".ipynb")
    try:
        return nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return None


def give_cells_ids(nb) -> None:
    """An id for each cell without one, which notebook format 4.5 requires (nbformat warns at every
    later read and validation)."""
    for cell in nb.cells:
        if not cell.get("id"):
            cell["id"] = generate_corpus_id()


class OverwriteCells(nbgrader_preprocessors.OverwriteCells):
    """nbgrader's OverwriteCells (same name, same options), except that a deleted cell it brings back
    gets an id at once: nbconvert validates the notebook after each step, and would warn."""

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        give_cells_ids(nb)
        return nb, resources


class RestoreCellOrder(NbGraderPreprocessor):
    """Put the read-only and graded cells back in the release's order, and bring back deleted
    read-only cells (the setup cell, for one), so that every test runs after the code it tests.

    Runs after OverwriteCells (which restores the content and type of those cells, and deleted
    test cells). A student's own cells travel with the nbgrader cell above them. A cell without
    an id gets one.
    """

    def preprocess(self, nb, resources):
        release = self._release_notebook(resources)
        if release is None:
            return nb, resources
        order = [grade_id(c) for c in release.cells if grade_id(c)]
        rank = {name: position for position, name in enumerate(order)}
        head, blocks = [], []
        for cell in nb.cells:
            if grade_id(cell) in rank:
                blocks.append([cell])
            elif blocks:
                blocks[-1].append(cell)
            else:
                head.append(cell)
        present = {grade_id(block[0]) for block in blocks}
        for cell in release.cells:
            name = grade_id(cell)
            if name and name not in present and nbgrader_metadata(cell).get("locked"):
                self.log.warning("Restoring deleted read-only cell %s", name)
                restored = nbformat.from_dict(cell)
                if restored.cell_type == "code":
                    restored.outputs, restored.execution_count = [], None
                blocks.append([restored])
        if [grade_id(b[0]) for b in blocks] != sorted((grade_id(b[0]) for b in blocks), key=rank.get):
            self.log.warning("Restoring the release's cell order")
        blocks.sort(key=lambda block: rank[grade_id(block[0])])
        nb.cells = head + [cell for block in blocks for cell in block]
        give_cells_ids(nb)
        return nb, resources

    def _release_notebook(self, resources):
        release = release_notebook(self.config, resources)
        if release is None:
            self.log.warning("No release notebook for %s: the cell order is not checked",
                             resources.get("nbgrader", {}).get("notebook"))
        return release

    def preprocess_cell(self, cell, resources, index):
        return cell, resources
