"""A feedback preprocessor that reduces error outputs to their one-line message."""

from nbgrader.preprocessors import NbGraderPreprocessor


class ConciseErrors(NbGraderPreprocessor):
    """Replace each error output's traceback with "ErrorName: message".

    IPython tracebacks quote the source lines around the failure, which would show the hidden
    tests that ClearHiddenTests removed from the cell. The message, written for the student,
    is what feedback should show.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["traceback"] = [f"{output['ename']}: {output['evalue']}"]
        return cell, resources
