"""The grading sandbox: what a kernel inside it can see, and how grading says when there is none."""

import subprocess
import sys

import pytest

from course_tools import sandbox
from course_tools.sandbox import SandboxStatus, sandbox_status, sandboxed_command

needs_sandbox = pytest.mark.skipif(not sandbox_status().available, reason=sandbox_status().message)

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


def run_sandboxed(tmp_path, memory_bytes=2 * 2**30):
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "gradebook.db").write_text("grades")
    workdir = course / "autograded" / "student" / "assignment"
    workdir.mkdir(parents=True)
    connection = tmp_path / "kernel.json"
    connection.write_text("{}")
    command = sandboxed_command([sys.executable, "-c", PROBE, str(course)], str(workdir), str(connection),
                                memory_bytes=memory_bytes, cpu_seconds=60)
    result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "GRADER_SECRET": "x"})
    assert result.returncode == 0, result.stderr
    return result.stdout, workdir


@needs_sandbox
def test_kernel_sees_only_its_folder_and_the_course_helpers(tmp_path):
    output, workdir = run_sandboxed(tmp_path)
    assert "course visible: False" in output, output
    assert "own folder writable: True" in output and (workdir / "answer.txt").read_text() == "42"
    assert "helpers importable: helpers" in output
    assert "secret in env: False" in output


@needs_sandbox
def test_memory_beyond_the_limit_fails_inside_the_kernel(tmp_path):
    output, _ = run_sandboxed(tmp_path, memory_bytes=1 * 2**30)
    assert "allocation: MemoryError" in output, output


def test_status_says_plainly_when_grading_is_unsandboxed(monkeypatch):
    sandbox_status.cache_clear()
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    try:
        status = sandbox_status()
    finally:
        sandbox_status.cache_clear()
    assert not status.available
    assert status.message.startswith("grading is NOT sandboxed")
    assert "apt-get install bubblewrap" in status.message


def test_a_sandbox_that_cannot_start_is_no_sandbox(monkeypatch):
    sandbox_status.cache_clear()
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: "/bin/false")
    try:
        status = sandbox_status()
    finally:
        sandbox_status.cache_clear()
    assert status == SandboxStatus(False, status.reason) and "cannot create a sandbox" in status.reason
