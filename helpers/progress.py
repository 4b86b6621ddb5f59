"""Progress bars that stay silent while nbgrader grades and leave no widget in a saved notebook."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from helpers.device import is_grading


def progress(iterable: Iterable | None = None, desc: str = "", total: int | None = None, **kwargs):
    """A tqdm bar over `iterable` (leave=False), disabled while grading.

    In a notebook the bar is a widget while it runs, and when it closes the cell's output becomes
    one line of text ("training: 30/30 in 00:02"). A widget's output saved in a notebook names a
    model that only the kernel that drew it holds; reopened with a new kernel, JupyterLab would
    show "Error displaying widget: model not found" where the bar was.
    """
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm as notebook_tqdm

    kwargs.setdefault("leave", False)
    # Autograded notebooks are stored with their outputs; progress bars would only add noise.
    kwargs["disable"] = kwargs.get("disable", False) or is_grading()
    if kwargs["disable"] or not issubclass(tqdm, notebook_tqdm):
        return tqdm(iterable, desc=desc, total=total, **kwargs)
    return _notebook_bar_class()(iterable, desc=desc, total=total, **kwargs)


@functools.cache
def _notebook_bar_class():
    # Built on first use: tqdm.notebook imports ipywidgets, which a script or a test never needs.
    from tqdm.notebook import tqdm as notebook_tqdm

    class NotebookBar(notebook_tqdm):
        """tqdm's notebook bar, shown through a display handle that its close() turns into text."""

        def __init__(self, *args, **kwargs):
            from IPython.display import display

            super().__init__(*args, display=False, **kwargs)
            self._handle = display(self.container, display_id=True)

        def close(self):
            if self.disable or self._handle is None:
                return super().close()
            handle, self._handle = self._handle, None
            super().close()
            elapsed = self.format_interval(self.format_dict["elapsed"])
            count = f"{self.n}/{self.total}" if self.total else f"{self.n}"
            stopped = " (stopped early)" if self.total and self.n < self.total else ""
            handle.update({"text/plain": f"{self.desc}: {count} in {elapsed}{stopped}"}, raw=True)

    return NotebookBar

