"""The course as a student and a teacher see it: JupyterLab 4 in headless Chromium.

One JupyterLab server (this environment's, so nbgrader's server and lab extensions and the
`python3` kernel are the course's) serves a throw-away course copy; Playwright drives Chromium
through the menus and toolbar one notebook at a time:

- each release notebook, run to the end: only the exercise stubs fail (their NotImplementedError,
  and NameErrors after them), every plot shows as an image, progress bars show as widgets;
- (the worked solutions run under nbval, headless: the browser adds nothing to that run but time);
- nbgrader's Validate button on a filled-in student notebook: the success dialog;
- the formgrader (Nbgrader menu): the four assignments.

A full-length screenshot of every notebook run lands in test-artifacts/screenshots/ (git-ignored;
CI keeps it). Needs Chromium (`apt-get install chromium`, or CHROMIUM=/path/to/chrome) and
`pip install playwright`; without them the module skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import nbformat
import pytest
from support import SCREENSHOTS, VIEWPORT, Lab, copy_course, free_port, lab_environment, write_lab_config

from course_tools.jobs.nbgrader_course import generate_release, open_course
from course_tools.lessons import REPO_ROOT, assignment_ids

# Marked `browser` by its folder (tests/conftest.py).

LESSONS = assignment_ids(REPO_ROOT)
# The stub nbgrader writes into every solution cell of release/ (nbgrader_config.py).
STUB_MESSAGE = "write your solution here, then run the test cell below"
RUN_TIMEOUT_MS = 600_000


# --------------------------------------------------------------------------------------------
# The course copy and the JupyterLab server
# --------------------------------------------------------------------------------------------


def notebook_of(folder: Path) -> Path:
    """The one notebook of a lesson folder (release/<lesson>/ or notebooks/<lesson>/)."""
    notebooks = sorted(folder.glob("*.ipynb"))
    assert len(notebooks) == 1, f"expected one notebook in {folder}, found {notebooks}"
    return notebooks[0]


@pytest.fixture(scope="module")
def browser_course(browser_prerequisites, tmp_path_factory):
    """A throw-away course: source/, nbgrader_config.py, release/ generated now (its gradebook
    knows the assignments), and the committed worked solutions in notebooks/."""
    root = copy_course(tmp_path_factory.mktemp("browser_course"))
    api = open_course(root)
    for assignment in assignment_ids(root):
        generate_release(api, assignment)
    shutil.copytree(REPO_ROOT / "notebooks", root / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return root


@pytest.fixture(scope="module")
def lab(browser_course, tmp_path_factory):
    """JupyterLab on localhost, serving the course copy; nbgrader reads the course's
    nbgrader_config.py from the server's working directory, so the server starts in the course."""
    home = tmp_path_factory.mktemp("jupyter_home")
    env = lab_environment(home)
    write_lab_config(home)
    port, token = free_port(), uuid.uuid4().hex
    log = home / "jupyterlab.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             f"--ServerApp.token={token}", f"--ServerApp.root_dir={browser_course}"],
            cwd=browser_course, env=env, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True)
    server = Lab(url=f"http://127.0.0.1:{port}", token=token, root=browser_course, log=log)
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(f"JupyterLab exited with {process.returncode}:\n{server.log_tail()}")
            try:
                server.api("GET", "/api/status")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer /api/status in 120 s:\n{server.log_tail()}")
                time.sleep(0.5)
        yield server
    finally:
        try:
            for thread in server.shutdowns:
                thread.join(timeout=60)
            server.shut_down_kernels()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        process.send_signal(signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


# --------------------------------------------------------------------------------------------
# The browser
# --------------------------------------------------------------------------------------------


@pytest.fixture
def page(browser, lab, request):
    """A fresh tab; afterwards its kernels are shut down so that notebooks run one at a time.
    When the test failed, the tab as it was is saved as test-artifacts/screenshots/FAILED-<test>.png."""
    failed_before = request.session.testsfailed
    tab = browser.new_page()
    yield tab
    if request.session.testsfailed > failed_before:  # the call phase's report is already counted
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^\w.-]+", "_", request.node.name).strip("_")
        try:
            tab.screenshot(path=str(SCREENSHOTS / f"FAILED-{name}.png"))
        except Exception as error:  # a screenshot must not hide the failure
            print(f"no screenshot of the failure: {error}")
    tab.close()
    lab.shut_down_kernels_soon()


def open_lab(page, lab: Lab, path: str = "") -> None:
    """JupyterLab in a fresh workspace (no tabs restored from an earlier test), opening `path`."""
    workspace = f"test-{uuid.uuid4().hex[:8]}"
    tree = f"/tree/{path}" if path else ""
    page.goto(f"{lab.url}/lab/workspaces/{workspace}{tree}?token={lab.token}")
    page.locator(".lm-MenuBar-itemLabel").first.wait_for()


def open_notebook(page, lab: Lab, path: str) -> None:
    """Open a notebook and wait until its kernel is ready."""
    open_lab(page, lab, path)
    page.wait_for_function("""path => {
        const panel = window.jupyterapp?.shell.currentWidget;
        const kernel = panel?.sessionContext?.session?.kernel;
        return panel?.context?.path === path && panel.context.isReady && panel.sessionContext.isReady
            && kernel?.connectionStatus === 'connected' && kernel?.status === 'idle';
    }""", arg=path, polling=250)
    _watch_execute_requests(page)
    _watch_progress_bars(page)


def _watch_execute_requests(page) -> None:
    # The cells' own state cannot say when a run is over: once one cell's reply is an error,
    # JupyterLab marks every cell that has no execution count yet as idle, queued ones included,
    # while the kernel still holds their requests. So count what the kernel was asked and answered:
    # window.__requestsSent since the last run_cells(), window.__awaitingReplies still unanswered.
    page.evaluate("""() => {
        const session = window.jupyterapp.shell.currentWidget.sessionContext;
        window.__requestsSent = 0;
        window.__awaitingReplies = new Set();
        const watch = kernel => kernel?.anyMessage.connect((_, {msg, direction}) => {
            if (direction === 'send' && msg.header.msg_type === 'execute_request') {
                window.__requestsSent += 1;
                window.__awaitingReplies.add(msg.header.msg_id);
            } else if (direction === 'recv' && msg.header.msg_type === 'execute_reply') {
                window.__awaitingReplies.delete(msg.parent_header.msg_id);
            }
        });
        watch(session.session?.kernel);
        session.kernelChanged.connect((_, change) => {
            window.__awaitingReplies.clear();
            watch(change.newValue);
        });
    }""")


def menu(page, top: str, item: str) -> None:
    """Click a menu bar entry, then one of its items (exact labels, as a user reads them)."""
    page.locator(".lm-MenuBar-itemLabel").get_by_text(top, exact=True).click()
    page.locator(".lm-Menu-itemLabel").get_by_text(item, exact=True).click()


def notebook_json(page) -> dict:
    """The open notebook as JupyterLab's model holds it (nbformat JSON, outputs included)."""
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.toJSON()")


def _watch_progress_bars(page) -> None:
    # tqdm's notebook bar is an ipywidgets HBox holding a progress widget; with leave=False it
    # disappears when done, so record every bar that appears while the notebook runs.
    page.evaluate("""() => {
        window.__progressBars = new Map();  // bar -> the last text it showed
        new MutationObserver(() => {
            for (const bar of document.querySelectorAll('.jp-OutputArea .widget-hprogress')) {
                const box = bar.closest('.widget-hbox') ?? bar;
                const text = box.textContent.replace(/\\s+/g, ' ').trim();
                if (text || !window.__progressBars.has(box)) window.__progressBars.set(box, text);
            }
        }).observe(document.body, {subtree: true, childList: true, characterData: true});
    }""")


def progress_bars_seen(page) -> list[str]:
    """Each progress bar shown since the notebook opened, as its last text (description, count)."""
    return page.evaluate("() => [...window.__progressBars.values()]")


def run_cells(page, top: str, item: str) -> None:
    """Start a run from the menu, and wait until it is over: the kernel was asked to execute,
    has answered every request, is idle, and no cell is still running."""
    page.evaluate("() => { window.__requestsSent = 0; window.__idleSince = null; }")
    menu(page, top, item)
    page.wait_for_function("""() => {
        const panel = window.jupyterapp.shell.currentWidget;
        const running = panel.content.widgets.some(
            cell => cell.model.type === 'code' && cell.model.executionState === 'running');
        if (window.__requestsSent === 0 || window.__awaitingReplies.size > 0 || running
                || panel.sessionContext.session?.kernel?.status !== 'idle') {
            window.__idleSince = null;
            return false;
        }
        window.__idleSince = window.__idleSince ?? Date.now();
        return Date.now() - window.__idleSince > 300;
    }""", timeout=RUN_TIMEOUT_MS, polling=100)


def select_cell(page, index: int) -> None:
    """Make cell `index` the active cell, in command mode (a click on its prompt)."""
    page.locator(".jp-NotebookPanel:visible .jp-Notebook > .jp-WindowedPanel-outer .jp-Cell") \
        .nth(index).locator(".jp-InputPrompt").click()


def code_cells(notebook: dict) -> list[tuple[int, dict]]:
    return [(i, cell) for i, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code"]


def errors_of(cell: dict) -> list[dict]:
    return [output for output in cell.get("outputs", []) if output["output_type"] == "error"]


def has_image(cell: dict) -> bool:
    return any("image/png" in output.get("data", {}) for output in cell.get("outputs", []))


def source_of(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def uses_progress_bars(notebook: dict) -> bool:
    return any("progress(" in source_of(cell) for _, cell in code_cells(notebook))


def finished_bars(notebook: dict) -> list[str]:
    """The lines closed progress bars left ("training: 30/30 in 00:01"), in place of their widgets."""
    return [text for _, cell in code_cells(notebook) for output in cell["outputs"]
            if re.fullmatch(r".+: \d+(/\d+)? in [\d:]+( \(stopped early\))?",
                            text := "".join(output.get("data", {}).get("text/plain", "")))]


def first_line(cell: dict) -> str:
    lines = [line for line in source_of(cell).splitlines()
             if line.strip() and not line.startswith("# NBVAL")]
    return lines[0][:80] if lines else ""


def run_all(page, *, resume_after_errors: bool) -> dict:
    """Run > Run All Cells, and wait for the kernel. JupyterLab stops a run at the first error;
    with resume_after_errors, go on as a student would (select the next cell that did not run,
    Run > Run Selected Cell and All Below) until every code cell has run."""
    run_cells(page, "Run", "Run All Cells")
    for _ in range(200):
        notebook = notebook_json(page)
        not_run = [i for i, cell in code_cells(notebook) if cell["execution_count"] is None]
        if not not_run or not resume_after_errors:
            return notebook
        stopped_at = [i for i, cell in code_cells(notebook) if i < not_run[0] and errors_of(cell)]
        assert stopped_at, f"the run stopped before cell {not_run[0]} without an error"
        select_cell(page, not_run[0])
        run_cells(page, "Run", "Run Selected Cell and All Below")
    raise AssertionError("the notebook kept stopping: more than 200 runs")


def rendered_images(page) -> int:
    return page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output img").count()


def full_screenshot(page, name: str) -> Path:
    """The whole notebook in one image: the viewport grows to the notebook's height."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.keyboard.press("Escape")
    left_tab = page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
    if left_tab.count():  # collapse the file browser: more width for the notebook
        left_tab.first.click()
    # The notebook's scrolling element (which one depends on JupyterLab's windowing mode).
    page.evaluate("""() => {
        const notebook = window.jupyterapp.shell.currentWidget.content.node;
        window.__scroller = [notebook, ...notebook.querySelectorAll('.jp-WindowedPanel-outer')].reduce(
            (a, b) => b.scrollHeight - b.clientHeight > a.scrollHeight - a.clientHeight ? b : a);
    }""")
    scroller = "window.__scroller"
    for _ in range(2):  # twice: the new width changes how long the notebook is
        page.wait_for_timeout(300)
        content, box = page.evaluate(f"() => [{scroller}.scrollHeight, {scroller}.clientHeight]")
        height = min(page.viewport_size["height"] - box + content, 32_000)  # chrome + notebook
        page.set_viewport_size({"width": VIEWPORT["width"], "height": height})
    page.evaluate(f"() => {{ {scroller}.scrollTop = 0; }}")
    page.wait_for_timeout(500)
    page.screenshot(path=str(path))
    page.set_viewport_size(VIEWPORT)
    return path


def scratch_notebook(lab: Lab, name: str, cells: list) -> Path:
    """A notebook of these cells in the lab's root, on the course's kernel."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                       "language": "python"}
    notebook.cells = cells
    path = lab.root / name
    nbformat.write(notebook, path)
    return path


def describe(index: int, cell: dict, output: dict) -> str:
    return f"cell {index} ({first_line(cell)!r}): {output['ename']}: {output['evalue']}"


# --------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------


def test_kernel_runs_this_environment(page, lab):
    """The notebooks' kernel `python3` is this environment's Python, with torch and helpers."""
    path = scratch_notebook(lab, "kernel_check.ipynb", [nbformat.v4.new_code_cell(
        "import sys, torch, helpers\nprint(sys.prefix)\nprint(torch.__version__)")])
    open_notebook(page, lab, path.name)
    ran = run_all(page, resume_after_errors=False)
    (cell,) = ran["cells"]
    assert not errors_of(cell), [describe(0, cell, e) for e in errors_of(cell)]
    printed = "".join(o.get("text", "") for o in cell["outputs"] if o["output_type"] == "stream")
    kernel_prefix, torch_version = printed.splitlines()[:2]
    assert Path(kernel_prefix).resolve() == Path(sys.prefix).resolve()
    import torch

    assert torch_version == torch.__version__


def test_run_all_waits_for_the_cells_queued_behind_an_error(page, lab):
    """The harness itself: after a cell's error JupyterLab shows the queued cells as idle, and a
    loaded machine can leave the kernel idle between two requests. Here a cell announces idle
    and then works on for a second; the run is over only when the last cell has answered."""
    failing = nbformat.v4.new_code_cell("raise ValueError('expected')")
    failing.metadata["tags"] = ["raises-exception"]
    # ipykernel's own (private) status call: the idle a starved kernel shows between two cells.
    idle_then_busy = nbformat.v4.new_code_cell(
        "import time\nget_ipython().kernel._publish_status('idle', 'shell')\ntime.sleep(1.5)")
    path = scratch_notebook(lab, "queued_after_error.ipynb",
                            [failing, idle_then_busy, nbformat.v4.new_code_cell("print('last')")])
    open_notebook(page, lab, path.name)
    ran = run_all(page, resume_after_errors=False)
    assert [cell["execution_count"] for cell in ran["cells"]] == [1, 2, 3]
    assert ran["cells"][2]["outputs"][0]["text"] == "last\n"


@pytest.mark.parametrize("lesson", LESSONS)
def test_release_runs_to_the_end_failing_only_on_the_stubs(page, lab, lesson):
    """A student's first Run All, one click: it reaches the last cell. Only the cells tagged
    raises-exception (a test cell, or a demonstration that calls the student's function) may fail,
    and only with the stub's error; every other cell shows the output the worked solution shows,
    its plots and progress bars included."""
    release = notebook_of(lab.root / "release" / lesson)
    solution = nbformat.read(notebook_of(lab.root / "notebooks" / lesson), as_version=4)
    open_notebook(page, lab, release.relative_to(lab.root).as_posix())
    ran = run_all(page, resume_after_errors=False)
    bars = progress_bars_seen(page)
    images = rendered_images(page)
    full_screenshot(page, f"{lesson}-release")

    not_run = [f"cell {i} ({first_line(cell)!r})" for i, cell in code_cells(ran)
               if cell["execution_count"] is None]
    errors_before = [describe(i, cell, error) for i, cell in code_cells(ran) for error in errors_of(cell)]
    assert not not_run, ("Run All stopped before the end; not run: " + ", ".join(not_run[:5])
                         + "; errors shown: " + ("; ".join(errors_before) or "none"))
    unexpected, stubs_failed = [], False
    for index, cell in code_cells(ran):
        until_solved = "raises-exception" in cell.get("metadata", {}).get("tags", [])
        for error in errors_of(cell):
            stub = error["ename"] == "NotImplementedError" and STUB_MESSAGE in error["evalue"]
            stubs_failed |= stub
            if not until_solved or not (stub or error["ename"] == "NameError"):
                unexpected.append(describe(index, cell, error))
        if not until_solved and not cell["outputs"] and solution.cells[index].get("outputs"):
            unexpected.append(f"cell {index} ({first_line(cell)!r}) shows nothing, unlike the solution's")
    assert stubs_failed, "no exercise stub raised NotImplementedError: is release/ the student version?"
    assert not unexpected, "cells that did not show what they should:\n" + "\n".join(unexpected)

    plots_missing = [f"cell {i} ({first_line(cell)!r})" for i, cell in code_cells(ran)
                     if has_image(solution.cells[i]) and not has_image(cell) and not errors_of(cell)]
    assert not plots_missing, "cells that plot in the solution show no plot: " + ", ".join(plots_missing)
    plots = sum(has_image(cell) for _, cell in code_cells(ran))
    assert plots > 0, "the release shows no plot at all"
    assert images >= plots, f"{plots} plots in the notebook, {images} shown as images"
    if uses_progress_bars(ran):
        # A bar that finishes before the browser draws its widget still leaves its line of text.
        assert bars or finished_bars(ran), "the notebook runs progress() but no progress bar appeared"


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_saved_notebook_reopens_without_widget_errors(page, lab, lesson):
    """A worked notebook, saved by the kernel that ran it and opened with a new one, as a student
    reopens theirs: nothing says a widget is missing where a progress bar ran."""
    notebook = nbformat.read(notebook_of(lab.root / "notebooks" / lesson), as_version=4)
    # JupyterLab saves no widget state unless asked (Settings > Save Widget State Automatically).
    notebook.metadata.pop("widgets", None)
    saved = lab.root / "reopened" / lesson / "saved.ipynb"
    saved.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, saved)
    open_notebook(page, lab, saved.relative_to(lab.root).as_posix())
    # A student's own notebook is trusted (they ran it), so JupyterLab draws its widget outputs
    # as widgets instead of their text fallback.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:trust'); }")
    page.locator(".jp-Dialog .jp-mod-accept").click()
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.content.model.cells.get(0).trusted")
    # The whole notebook in the viewport, so that every cell renders (JupyterLab renders only what
    # is in view), and time for widget views, which render asynchronously.
    page.set_viewport_size({"width": VIEWPORT["width"], "height": 32_000})
    page.wait_for_timeout(3000)
    shown = page.locator(".jp-NotebookPanel:visible").inner_text()
    page.set_viewport_size(VIEWPORT)
    assert "Error displaying widget" not in shown and "model not found" not in shown
    if uses_progress_bars(notebook_json(page)):
        assert finished_bars(notebook_json(page)), "the saved notebook should keep each bar's line of text"


def filled_in(release: dict, solution: dict) -> dict:
    """The release notebook as a student hands it in: each solution cell holds the worked
    solution's code, everything else (locked test cells, their checksums) as released."""
    answers = {cell.metadata["nbgrader"]["grade_id"]: cell.source
               for cell in solution.cells if cell.metadata.get("nbgrader", {}).get("solution")}
    for cell in release.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = answers[cell.metadata["nbgrader"]["grade_id"]]
    return release


def test_validate_button_passes_a_filled_in_notebook(page, lab):
    """nbgrader's Validate (notebook toolbar) on a student's completed notebook: success.
    The server extension validates any notebook under the server's root with the course's
    nbgrader_config.py (read from the server's working directory): kernel, timeout."""
    lesson = LESSONS[-1]  # the quickest lesson on a CPU (docs/run-time.md)
    release = notebook_of(lab.root / "release" / lesson)
    student = lab.root / "student" / lesson / release.name
    student.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(filled_in(nbformat.read(release, as_version=4),
                             nbformat.read(notebook_of(lab.root / "notebooks" / lesson), as_version=4)),
                   student)
    open_notebook(page, lab, student.relative_to(lab.root).as_posix())
    page.locator(".jp-NotebookPanel:visible .jp-Toolbar").get_by_text("Validate", exact=True).click()
    dialog = page.locator(".jp-Dialog")
    message = dialog.locator("#validation-message")
    message.wait_for(timeout=RUN_TIMEOUT_MS)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{lesson}-validate.png"))
    verdict = message.inner_text()
    assert dialog.locator(".jp-Dialog-header").inner_text().strip() == "Validation Results"
    assert "validation-success" in (message.get_attribute("class") or ""), verdict
    assert "Success! Your notebook passes all the tests." in verdict
    dialog.get_by_role("button", name="Ok").click()


def test_validate_dialog_shows_the_diagnosis_not_a_traceback(page, lab):
    """A realistic mistake (demo student 04/plain_micro_batches_first) in an otherwise
    finished notebook: Validate's dialog names the failing test with the course's message, and no
    traceback through the helpers stands before it."""
    from course_tools.jobs.demo_class import demo_file, parse_submission

    lesson = LESSONS[-1]
    mistake = parse_submission(demo_file(lesson, "plain_micro_batches_first"))
    notebook = filled_in(nbformat.read(notebook_of(lab.root / "release" / lesson), as_version=4),
                         nbformat.read(notebook_of(lab.root / "notebooks" / lesson), as_version=4))
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in mistake.cells:
            cell.source = mistake.cells[grade_id]
    student = lab.root / "student-mistake" / lesson / notebook_of(lab.root / "release" / lesson).name
    student.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, student)
    open_notebook(page, lab, student.relative_to(lab.root).as_posix())
    page.locator(".jp-NotebookPanel:visible .jp-Toolbar").get_by_text("Validate", exact=True).click()
    dialog = page.locator(".jp-Dialog")
    dialog.locator("#validation-message").wait_for(timeout=RUN_TIMEOUT_MS)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{lesson}-validate-mistake.png"))
    shown = dialog.inner_text()
    assert " ".join(mistake.says.split()) in " ".join(shown.split()), shown[-2000:]
    assert "Traceback" not in shown and "helpers/checks/" not in shown, shown[-2000:]
    dialog.get_by_role("button", name="Ok").click()


def test_formgrader_lists_the_assignments(page, lab):
    """Nbgrader > Formgrader opens the formgrader on this course, listing every assignment."""
    open_lab(page, lab)
    menu(page, "Nbgrader", "Formgrader")
    formgrader = page.frame_locator("#formgrader-iframe iframe")
    names = formgrader.locator("#main-table tr td.name")
    for lesson in LESSONS:
        names.get_by_text(lesson, exact=True).wait_for()
    names.last.scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "formgrader.png"))
    assert sorted(names.all_inner_texts()) == LESSONS
