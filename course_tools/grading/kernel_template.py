"""Graded kernels forked from a template that has already imported torch, ipykernel and matplotlib.

Importing those takes most of a graded kernel's start (about 1.5 s of CPU of every submission, on a
grade of 3 to 4 s). With a root grader, each grading process starts one template
(`kernel_template_program.py`, run with the kernel's own Python) and every kernel of that process is forked
from it, inside a sandbox that bubblewrap has made exactly as for a kernel started afresh: the
sandbox's first process waits there (the "holder"), and the forked kernel enters its namespaces,
its root and working folder, takes its environment, drops to the kernel's user without
capabilities, sets the same limits and starts ipykernel. The student's code runs in the kernel
only, never in the template, which never runs anything a submission handed in; two kernels forked
from it share nothing they could write to.

Where the template cannot be used (a grader that is not root, a kernel that is not ipykernel's
launcher, a template that did not start), kernels start afresh inside the sandbox, as before.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
import threading
import time
from pathlib import Path

PROGRAM = Path(__file__).with_name("kernel_template_program.py")
START_SECONDS = 120
SPAWN_SECONDS = 60


class TemplateFailed(RuntimeError):
    """The template could not start, or could not start a kernel."""


class KernelTemplate:
    """One running template process and the pipe that asks it for kernels."""

    def __init__(self, executable: str, fonts: str | None, environment: dict[str, str],
                 keep: tuple[str, ...]):
        # Why this template may no longer be used, once a kernel of it failed: the rest of the run
        # starts kernels afresh rather than risk every submission on it.
        self.broken = ""
        self._lock = threading.Lock()
        self._buffer = b""
        with tempfile.TemporaryDirectory(prefix="kernel-template-") as empty:
            # stderr is the grader's own: the template's messages land in the grader's log (its
            # kernels get /dev/null, course_tools.grading.kernel_output). A session of its own: a
            # Ctrl-C meant for the grader (sent to its process group) must not kill the template in
            # the middle of starting a kernel; the template ends when the grader closes its input,
            # however the grader ends.
            command = [executable, "-c", PROGRAM.read_text(), fonts or "", json.dumps(keep)]
            self.process = subprocess.Popen(command, cwd=empty, env=environment, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, start_new_session=True)
        ready = self._reply(START_SECONDS)
        if not ready.get("ready"):
            self.close()
            raise TemplateFailed(ready.get("error") or "it did not say it was ready")
        self.not_preloaded = ready.get("not_preloaded", [])

    def alive(self) -> bool:
        return self.process.poll() is None

    def spawn(self, holder: int, argv: list[str], cwd: str, environment: dict[str, str],
              limits: dict[str, int], uid: int, gid: int, cgroup_procs: str | None) -> int:
        """Fork a kernel into the sandbox whose first process is `holder` (a pid as the grader sees it),
        to run `argv` in `cwd` with exactly `environment`; returns the kernel's pid."""
        request = {"holder": holder, "argv": argv, "cwd": cwd, "environment": environment, "limits": limits,
                   "uid": uid, "gid": gid, "cgroup_procs": cgroup_procs}
        with self._lock:
            try:
                self.process.stdin.write((json.dumps(request) + "\n").encode())
                self.process.stdin.flush()
            except OSError as error:
                raise TemplateFailed(f"the template is gone ({error})") from error
            reply = self._reply(SPAWN_SECONDS)
        if "pid" not in reply:
            raise TemplateFailed(reply.get("error", "no answer"))
        return int(reply["pid"])

    def _reply(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        pipe = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                return {"error": f"no answer within {timeout} s"}
            chunk = os.read(pipe, 65536)
            if not chunk:
                return {"error": f"it ended (exit status {self.process.wait()})"}
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return {"error": f"an unreadable answer: {line[:200]!r}"}

    def give_up(self, reason: str) -> None:
        """Use this template no more (see `broken`)."""
        self.broken = reason
        self.close()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


_TEMPLATES: dict[tuple, KernelTemplate | TemplateFailed] = {}
_TEMPLATES_LOCK = threading.Lock()


def kernel_template(executable: str, fonts: str | None, environment: dict[str, str],
                    keep: tuple[str, ...] = ()) -> KernelTemplate:
    """This process's template for kernels of `executable`, started on first use (and again if it
    ended); raises TemplateFailed, once and then on every call, where it cannot start. `keep`: the
    folders of that Python's environment, which the template's own /tmp shows where they lie
    under the host's."""
    key = (executable, fonts, tuple(sorted(environment.items())), keep)
    with _TEMPLATES_LOCK:
        template = _TEMPLATES.get(key)
        if isinstance(template, TemplateFailed):
            raise template
        if template is not None and template.broken:
            raise TemplateFailed(template.broken)
        if template is None or not template.alive():
            try:
                template = KernelTemplate(executable, fonts, environment, keep)
            except (OSError, TemplateFailed) as error:
                failure = TemplateFailed(f"the kernel template of {executable} did not start: {error}")
                _TEMPLATES[key] = failure
                raise failure from error
            _TEMPLATES[key] = template
        return template


def wait_for_holder(fd: int, timeout: float) -> bool:
    """Whether the sandbox's holder said, on `fd`, that the sandbox is ready; closes `fd`."""
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready) and bool(os.read(fd, 16))
    finally:
        os.close(fd)
