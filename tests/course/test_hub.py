"""The course on a real JupyterHub: a teacher and two students as separate Unix accounts, the whole
nbgrader cycle driven in Chromium, one browser context per person.

Real parts only: deploy/hub/setup.sh installs the course as an admin would (accounts, a shared
environment made from the system's Python, configurable-http-proxy from npm, the exchange, the
teacher's course folder), JupyterHub logs everyone in through PAM and starts their servers as
their own accounts, and the teacher grades with the course's sandboxed grader under their own
account. It needs root (it makes accounts) and runs in CI (CI=true), or elsewhere only with
COURSE_HUB_TEST=1; otherwise it skips, saying why. The accounts carry a random prefix, and
whatever a crashed run left is removed first; teardown removes the accounts, their processes and
every folder, and checks that nothing of theirs is left.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from support import CHROMIUM, CHROMIUM_ARGS, PAGE_TIMEOUT_MS, SCREENSHOTS, VIEWPORT, free_port, on_ci

from course_tools.cells import hidden_test_lines, notebook_cells
from course_tools.jobs.class_report import read_scores
from course_tools.jobs.demo_class import build_notebook, load_demo_class
from course_tools.lessons import COURSE_ID, REPO_ROOT

# Marked `browser` by its folder (tests/conftest.py).

LESSON = "04_memory"
CORRECT, MISTAKE = "reference", "forgets_dropout_mask"
# Accounts and folders of this test: hubt<6 hex digits><role>, /tmp/course-hub-<the same digits>.
ACCOUNT = re.compile(r"^hubt[0-9a-f]{6}(teach|ann|ben)$")
FOLDER_PREFIX = "course-hub-"
DOMAIN = "hub.localhost"
# The set-up, hub and server start times of the last run (git-ignored; CI keeps it).
ARTIFACTS = REPO_ROOT / "test-artifacts"
# The first start imports JupyterLab, nbgrader and torch from a cold disk on a busy machine.
START_TIMEOUT_S = 180
# How long the hub may take to shut down (it stops the formgrader service first) before it is killed.
STOP_TIMEOUT_S = 60
GRADE_TIMEOUT_MS = 300_000
# Clicks on the Nbgrader menu's title before giving up, and how long each waits for the menu.
MENU_ATTEMPTS, MENU_WAIT_MS = 5, 15_000


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the hub test makes Unix accounts: run it as root (CI does)"
    if not (on_ci() or os.environ.get("COURSE_HUB_TEST") == "1"):
        return ("the hub test makes and removes Unix accounts on this machine: set COURSE_HUB_TEST=1 "
                "to run it outside CI")
    for tool in ("useradd", "userdel", "chpasswd", "runuser", "npm", "bwrap"):
        if shutil.which(tool) is None:
            return f"the hub test needs {tool} (.ci/run installs what is missing)"
    return None


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


def _processes_of(names: set[str]) -> list[str]:
    uids = set()
    for name in names:
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            pass
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid in uids:
                    found.append(f"{entry.name}: {(entry / 'cmdline').read_bytes()[:80]!r}")
            except OSError:
                pass
    return found


def _processes_under(folder: Path) -> list[int]:
    """Processes whose command line names `folder` (a hub, its proxy, servers started from it)."""
    marker = str(folder).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _remove_accounts(names: set[str]) -> None:
    for name in names:
        _run(["pkill", "-KILL", "-u", name])
    deadline = time.monotonic() + 20
    while _processes_of(names) and time.monotonic() < deadline:
        time.sleep(0.2)
    for name in names:
        _run(["userdel", "--force", "--remove", name])


def _remove_folder(folder: Path) -> None:
    for pid in _processes_under(folder):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(folder, ignore_errors=True)


def remove_leftovers() -> None:
    """What a crashed run left: its accounts (with their processes) and its folders."""
    _remove_accounts({entry.pw_name for entry in pwd.getpwall() if ACCOUNT.match(entry.pw_name)})
    for folder in Path("/tmp").glob(f"{FOLDER_PREFIX}*"):
        _remove_folder(folder)


@dataclass
class Hub:
    base: Path
    tag: str
    port: int
    password: str
    log_path: Path
    process: subprocess.Popen | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def prefix(self) -> Path:
        return self.base / "opt"

    @property
    def exchange(self) -> Path:
        return self.base / "exchange"

    @property
    def teacher(self) -> str:
        return f"hubt{self.tag}teach"

    @property
    def students(self) -> tuple[str, str]:
        return f"hubt{self.tag}ann", f"hubt{self.tag}ben"

    @property
    def accounts(self) -> set[str]:
        return {self.teacher, *self.students}

    @property
    def url(self) -> str:
        return f"http://{DOMAIN}:{self.port}"

    @property
    def service_url(self) -> str:
        """The course's formgrader service: JupyterHub 6 gives it the subdomain <name>--service."""
        return f"http://{COURSE_ID}--service.{DOMAIN}:{self.port}/services/{COURSE_ID}"

    def user_url(self, name: str) -> str:
        return f"http://{name}.{DOMAIN}:{self.port}/user/{name}"

    def home(self, name: str) -> Path:
        return Path(pwd.getpwnam(name).pw_dir)

    @property
    def course(self) -> Path:
        return self.home(self.teacher) / "efficient-pytorch"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self) -> float:
        started = time.monotonic()
        hub_dir = self.prefix / "hub"
        with self.log_path.open("a") as log:
            command = [str(self.prefix / "venv" / "bin" / "jupyterhub"), "-f",
                       str(hub_dir / "jupyterhub_config.py")]
            self.process = subprocess.Popen(
                command, cwd=hub_dir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the hub exited:\n{self.log()[-4000:]}"
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{self.port}/hub/health",
                                                 headers={"Host": f"{DOMAIN}:{self.port}"})
                with urllib.request.urlopen(request, timeout=5) as response:
                    if response.status == 200:
                        return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.25)
        raise AssertionError(f"the hub did not answer in {START_TIMEOUT_S} s:\n{self.log()[-4000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
            self._end_the_old_service()
        self.process = None

    def _end_the_old_service(self) -> None:
        """The formgrader service runs in a session of its own; the hub stops it as it shuts down.
        In one run the hub was still stopping it when it was killed, and the old service kept the
        port: the restarted hub's service could not bind it, and the old one, holding the old OAuth
        secret, answered the teacher with HTTP 500. A real hub's service manager (systemd) ends
        the whole unit; here the service's processes are ended before the hub starts again."""
        marker = f"JUPYTERHUB_SERVICE_NAME={COURSE_ID}".encode()
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and marker in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture(scope="module")
def hub(browser_prerequisites, tmp_path_factory):
    reason = _skip_reason()
    if reason:
        if on_ci() and os.geteuid() == 0:
            pytest.fail(f"CI=true but {reason}", pytrace=False)
        pytest.skip(reason)
    remove_leftovers()
    tag = secrets.token_hex(3)
    base = Path("/tmp") / f"{FOLDER_PREFIX}{tag}"
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    hub = Hub(base=base, tag=tag, port=free_port(), password=secrets.token_urlsafe(12),
              log_path=tmp_path_factory.mktemp("hub") / "hub.log")
    try:
        started = time.monotonic()
        setup = _run(["bash", str(REPO_ROOT / "deploy" / "hub" / "setup.sh")], timeout=900, env={
            **os.environ, "TEACHER": hub.teacher, "STUDENTS": " ".join(hub.students),
            "TEACHER_PASSWORD": hub.password, "STUDENT_PASSWORD": hub.password,
            "PREFIX": str(hub.prefix), "EXCHANGE": str(hub.exchange), "HUB_DOMAIN": DOMAIN,
            "HUB_IP": "127.0.0.1", "HUB_PORT": str(hub.port), "HUB_API_PORT": str(free_port()),
            "PROXY_API_PORT": str(free_port()), "SERVICE_PORT": str(free_port())})
        assert setup.returncode == 0, f"setup.sh failed:\n{setup.stdout[-3000:]}\n{setup.stderr[-3000:]}"
        hub.timings["setup.sh"] = time.monotonic() - started
        hub.timings["hub start"] = hub.start()
        yield hub
    finally:
        hub.stop()
        _remove_accounts(hub.accounts)
        _remove_folder(base)
        left = ([f"account {name}" for name in hub.accounts if _account_exists(name)]
                + _processes_of(hub.accounts) + [str(base)] * base.exists())
        timings = {what: round(seconds, 1) for what, seconds in hub.timings.items()}
        print("hub timings (s):", timings)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "hub-timings.json").write_text(json.dumps(timings, indent=1) + "\n")
        assert not left, f"the hub test left behind: {left}"


def _account_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.fixture(scope="module")
def chromium(hub):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Every <user>.hub.localhost is this machine, as a wildcard DNS record makes it for a real hub.
        rules = f"--host-resolver-rules=MAP {DOMAIN} 127.0.0.1, MAP *.{DOMAIN} 127.0.0.1"
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=[*CHROMIUM_ARGS, rules],
                                             headless=True)
        yield browser
        browser.close()


class Person:
    """One person's browser context and JupyterLab tab."""

    def __init__(self, hub: Hub, chromium, name: str):
        self.hub, self.name = hub, name
        self.role = name.removeprefix(f"hubt{hub.tag}")
        self.context = chromium.new_context(viewport=VIEWPORT)
        self.context.set_default_timeout(PAGE_TIMEOUT_MS)
        self.page = self.context.new_page()

    def log_in(self) -> float:
        """Through the hub's login form; returns the seconds until this person's JupyterLab showed."""
        page = self.page
        page.goto(f"{self.hub.url}/hub/login")
        page.fill("#username_input", self.name)
        page.fill("#password_input", self.hub.password)
        started = time.monotonic()
        page.click("#login_submit")
        page.wait_for_url(re.compile(rf"/user/{self.name}/lab"), timeout=START_TIMEOUT_S * 1000)
        page.wait_for_selector("#jp-main-dock-panel", timeout=START_TIMEOUT_S * 1000)
        return time.monotonic() - started

    def right_sidebar(self) -> str:
        """The labels of JupyterLab's right sidebar tabs (Create Assignment is one, for a teacher)."""
        return " ".join(self.page.locator(".jp-SideBar.jp-mod-right").all_inner_texts())

    def menu_items(self) -> list[str]:
        """The labels under JupyterLab's Nbgrader menu (an extension that is off leaves none)."""
        page = self.page
        page.click("#jp-MainMenu div.lm-MenuBar-itemLabel:text('Nbgrader')")
        menu = page.locator(".lm-Menu").last
        menu.wait_for()
        labels = [text.strip() for text in menu.locator(".lm-Menu-itemLabel").all_inner_texts()]
        page.keyboard.press("Escape")
        return [label for label in labels if label]

    def open_from_menu(self, command: str) -> None:
        """Open the Nbgrader menu and run `command` from it. A click on the menu's title just after
        Escape closed it (menu_items) left the title highlighted and the menu shut in one run:
        the click is repeated until the command shows."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        page = self.page
        entry = page.locator(f"li[data-command='{command}']")
        for _ in range(MENU_ATTEMPTS - 1):
            page.click("#jp-MainMenu div.lm-MenuBar-itemLabel:text('Nbgrader')")
            try:
                entry.wait_for(state="visible", timeout=MENU_WAIT_MS)
                break
            except PlaywrightTimeout:
                page.keyboard.press("Escape")
        else:
            page.click("#jp-MainMenu div.lm-MenuBar-itemLabel:text('Nbgrader')")
        entry.click()


def _api_call(page, url_part: str, action):
    """Run `action`, wait for the POST whose URL contains `url_part` and return its JSON body.
    nbgrader reports many failures as HTTP 200 with success false: the body decides."""
    with page.expect_response(lambda r: url_part in r.url and r.request.method == "POST",
                              timeout=GRADE_TIMEOUT_MS) as answer:
        action()
    response = answer.value
    assert response.ok, f"{url_part}: HTTP {response.status}"
    body = response.json()
    body = json.loads(body) if isinstance(body, str) else body
    assert body.get("success"), f"{url_part} failed: {body.get('error')}\n{body.get('log', '')[-2000:]}"
    return body


def _close_modal(frame) -> None:
    frame.locator(".modal.in .modal-footer button").first.click()
    frame.wait_for_selector(".modal.in", state="detached")


def _formgrader(page):
    frame = None
    deadline = time.monotonic() + 60
    while frame is None and time.monotonic() < deadline:
        frame = next((f for f in page.frames if "/formgrader" in f.url), None)
        page.wait_for_timeout(100)
    assert frame is not None, "the formgrader did not open inside JupyterLab"
    return frame


def _row(frame, assignment: str):
    """The formgrader's table row of `assignment` (it gives rows no ids)."""
    frame.wait_for_selector("tbody td.name a")
    rows = frame.locator("tbody tr")
    names = [text.strip() for text in rows.locator("td.name").all_inner_texts()]
    assert assignment in names, f"the formgrader lists {names}, not {assignment}"
    return rows.nth(names.index(assignment))


def _write_as(owner: str, path: Path, notebook) -> None:
    nbformat.write(notebook, path)
    shutil.chown(path, owner, owner)


def _assignment_list(person: Person) -> None:
    person.open_from_menu("nbgrader:open-assignment-list")
    person.page.wait_for_selector("#released_assignments_list")


def _wait_rows(page, name: str, count: int):
    rows = page.locator(f"#{name}_assignments_list > .list_item")
    deadline = time.monotonic() + 60
    while rows.count() != count and time.monotonic() < deadline:
        page.click("#refresh_assignments_list")
        page.wait_for_timeout(1000)
    assert rows.count() == count, f"{name} assignments: {rows.count()} rows, expected {count}"
    return rows


def _validate(page) -> str:
    page.click(f"#fetched_assignments_list a:text('{LESSON}')")
    page.locator("#fetched_assignments_list .item_status button:text('Validate')").first.click()
    dialog = page.locator(".jp-Dialog-content")
    dialog.wait_for(timeout=GRADE_TIMEOUT_MS)
    text = dialog.inner_text()
    dialog.locator("button").last.click()
    page.click(f"#fetched_assignments_list a:text('{LESSON}')")
    return text


def _submit(page, submissions_before: int) -> None:
    page.locator("#fetched_assignments_list .item_status button:text('Submit')").first.click()
    rows = page.locator("#submitted_assignments_list .list_item")
    deadline = time.monotonic() + 60
    while rows.count() < submissions_before + 1 and time.monotonic() < deadline:
        page.wait_for_timeout(500)


def test_a_class_on_the_hub(hub, chromium):
    """Teacher releases, two students fetch, validate and submit, the teacher grades and releases
    feedback, each student reads it; refusals hold between accounts."""
    people: list[Person] = []
    try:
        _a_class_on_the_hub(hub, chromium, people)
    except BaseException:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for person in people:
            person.page.screenshot(path=str(SCREENSHOTS / f"FAILED-hub-{person.role}.png"))
        raise
    finally:
        for person in people:
            person.context.close()


def _a_class_on_the_hub(hub: Hub, chromium, people: list) -> None:
    teacher = Person(hub, chromium, hub.teacher)
    people.append(teacher)
    hub.timings["teacher's server start"] = teacher.log_in()

    assert "Create Assignment" in teacher.right_sidebar()
    assert "Formgrader" in teacher.menu_items()

    # 1. The formgrader inside the teacher's JupyterLab lists the four lessons; a due date already
    #    past, then generate and release one.
    teacher.open_from_menu("nbgrader:open-formgrader")
    formgrader = _formgrader(teacher.page)
    formgrader.wait_for_selector("td.name")
    lessons = sorted(p.name for p in (REPO_ROOT / "source").iterdir() if any(p.glob("*.ipynb")))
    listed = sorted(text.strip() for text in formgrader.locator("td.name").all_inner_texts())
    assert listed == lessons
    row = _row(formgrader, LESSON)
    row.locator("td.edit a").click()
    formgrader.fill("#edit-assignment-modal .modal-duedate", "2020-01-01T00:00")
    formgrader.fill("#edit-assignment-modal .modal-timezone", "+0000")
    with teacher.page.expect_response(lambda r: r.url.endswith(f"/formgrader/api/assignment/{LESSON}")
                                      and r.request.method == "PUT") as saved:
        formgrader.click("#edit-assignment-modal button.save")
    assert saved.value.ok, f"setting the due date: HTTP {saved.value.status}"
    _api_call(teacher.page, f"/formgrader/api/assignment/{LESSON}/assign",
              lambda: row.locator("td.assign a").click())
    _close_modal(formgrader)
    _api_call(teacher.page, f"/formgrader/api/assignment/{LESSON}/release",
              lambda: _row(formgrader, LESSON).locator("td.release a").click())

    # 2. Two students in their own JupyterLab: fetch, fill in (the demo class's notebooks), Validate,
    #    Submit. Ann hands in the untouched release first and the correct one later.
    demo = {s.student: s for s in load_demo_class(LESSON)}
    source_nb = nbformat.read(next((REPO_ROOT / "source" / LESSON).glob("*.ipynb")), as_version=4)
    students = {}
    for name, demo_student in zip(hub.students, (CORRECT, MISTAKE), strict=True):
        person = students[name] = Person(hub, chromium, name)
        people.append(person)
        hub.timings[f"{name}'s server start"] = person.log_in()
        # A student's Nbgrader menu holds the assignment list alone (Validate is in it), and no
        # Create Assignment panel.
        assert person.menu_items() == ["Assignment List"], person.menu_items()
        assert "Create Assignment" not in person.right_sidebar()
        _assignment_list(person)
        rows = _wait_rows(person.page, "released", 1)
        rows.first.locator(".item_status button").click()
        _wait_rows(person.page, "fetched", 1)
        fetched = next((hub.home(name) / LESSON).glob("*.ipynb"))
        release_nb = nbformat.read(fetched, as_version=4)
        if demo_student == CORRECT:
            _submit(person.page, 0)
        _write_as(name, fetched, build_notebook(demo[demo_student], source_nb, release_nb))
        verdict = _validate(person.page)
        if demo_student == CORRECT:
            assert "Success" in verdict, verdict
        else:
            assert demo[MISTAKE].says in verdict, verdict
        _submit(person.page, 1 if demo_student == CORRECT else 0)

    # A hub restart between submit and collect loses nothing.
    hub.stop()
    hub.timings["hub restart"] = hub.start()

    # 3. The teacher collects, grades, generates and releases feedback.
    teacher.page.reload()
    teacher.page.wait_for_selector("#jp-main-dock-panel", timeout=START_TIMEOUT_S * 1000)
    teacher.open_from_menu("nbgrader:open-formgrader")
    formgrader = _formgrader(teacher.page)
    formgrader.wait_for_selector("td.name")
    _api_call(teacher.page, f"/formgrader/api/assignment/{LESSON}/collect",
              lambda: _row(formgrader, LESSON).locator("td.collect a").click())
    formgrader.goto(formgrader.url.split("/formgrader/")[0] + f"/formgrader/manage_submissions/{LESSON}")
    formgrader.wait_for_selector("td.autograde a")
    for name in hub.students:
        student_row = formgrader.locator(f"tbody tr:has(td.student-id[data-order='{name}'])")
        graded = _api_call(teacher.page, f"/formgrader/api/submission/{LESSON}/{name}/autograde",
                           lambda row=student_row: row.locator("td.autograde a").click())
        assert "grading is sandboxed" in graded["log"], f"grading {name} did not say it is sandboxed"
        _close_modal(formgrader)
    formgrader.goto(formgrader.url.split("/formgrader/")[0] + "/formgrader/manage_assignments")
    _api_call(teacher.page, f"/formgrader/api/assignment/{LESSON}/generate_feedback",
              lambda: _row(formgrader, LESSON).locator("td.generate-feedback a").click())
    _close_modal(formgrader)
    _api_call(teacher.page, f"/formgrader/api/assignment/{LESSON}/release_feedback",
              lambda: _row(formgrader, LESSON).locator("td.release-feedback a").click())

    with Gradebook(f"sqlite:///{hub.course / 'gradebook.db'}", COURSE_ID) as gradebook:
        recorded = read_scores(gradebook, LESSON)
        late = {name: gradebook.find_submission(LESSON, name).total_seconds_late for name in hub.students}
    for name, demo_student in zip(hub.students, (CORRECT, MISTAKE), strict=True):
        scores, max_scores = recorded[name]
        lost = {cell for cell, score in scores.items() if score < max_scores[cell]}
        assert lost == set(demo[demo_student].loses), f"{name} ({demo_student}) lost {sorted(lost)}"
        assert late[name] > 0, f"{name}'s submission after the due date is not recorded as late"

    # 4. Each student fetches their feedback; the page shows the mistake, never a hidden test line.
    hidden = hidden_test_lines(notebook_cells((REPO_ROOT / "source" / LESSON).glob("*.ipynb")))
    for name, demo_student in zip(hub.students, (CORRECT, MISTAKE), strict=True):
        # Back later, in a fresh tab: the one left open saw the hub restart (its file browser says
        # so in a dialog).
        page = students[name].page
        page.reload()
        page.wait_for_selector("#jp-main-dock-panel", timeout=START_TIMEOUT_S * 1000)
        _assignment_list(students[name])
        _wait_rows(page, "submitted", 1)
        page.locator("#submitted_assignments_list .item_status button:text('Fetch Feedback')").first.click()
        pages = []
        deadline = time.monotonic() + 60
        while not pages and time.monotonic() < deadline:
            pages = sorted((hub.home(name) / LESSON / "feedback").glob("*/*.html"))
            page.wait_for_timeout(500)
        assert pages, f"{name} got no feedback"
        relative = pages[-1].relative_to(hub.home(name))
        page.goto(f"{hub.user_url(name)}/files/{relative}")
        text = page.inner_text("body")
        if demo_student == MISTAKE:
            assert demo[MISTAKE].says in text
        shown = {line.strip() for line in text.splitlines()}
        assert not hidden & shown, f"{name}'s feedback shows hidden test lines: {sorted(hidden & shown)[:2]}"

    # The course's formgrader service opens for the teacher (the role) ...
    response = teacher.page.goto(f"{hub.service_url}/formgrader")
    assert response is not None and response.status == 200, f"the teacher's formgrader service: {response}"
    teacher.page.wait_for_selector("td.name")

    # 5. ... and what must be refused is refused.
    ann, ben = hub.students
    probe = students[ann].page
    for url in (f"{hub.user_url(hub.teacher)}/api/contents", f"{hub.user_url(ben)}/api/contents",
                f"{hub.service_url}/formgrader"):
        response = probe.goto(url)
        status = response.status if response is not None else None
        assert status == 403, f"{ann} reached {url}: HTTP {status}"
    for folder in (hub.exchange / COURSE_ID / "inbound", hub.course, hub.home(ben)):
        listing = _run(["runuser", "-u", ann, "--", "ls", str(folder)])
        assert listing.returncode != 0, f"{ann} could list {folder}: {listing.stdout[:200]}"
