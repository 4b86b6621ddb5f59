"""Kernels forked from a Python that has already imported torch, ipykernel and matplotlib, for the
Validate corpus (tests/grading/test_validate_corpus.py).

The corpus runs nbgrader's Validator, as the Validate button does, on about 55 submissions. A
kernel started afresh spends about 3 s of CPU on Python, ipykernel, torch and matplotlib before the
notebook's first cell, and the suite is bound by its two cores. Grading forks its kernels from such
a template inside the sandbox (course_tools/grading/kernel_template.py); Validate runs unsandboxed, with
the checks in the kernel, so the corpus gets a template of its own: one process per pytest worker
that imports those modules once and forks a kernel for each Validate, with exactly the command
line, environment and working folder the Validator asked for. Only the imports are shared: each
kernel gets fresh random seeds and the warning filters of a fresh start, and runs the notebook in a
session of its own. Where the template cannot start, kernels start afresh.

`ForkedKernelManager` is a jupyter_client kernel manager: `Execute.kernel_manager_class` names it.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid

from jupyter_client.manager import AsyncKernelManager
from traitlets import default

TEMPLATE = r'''
import json, os, random, signal, sys, warnings

os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
import torch, ipykernel.kernelapp, ipykernel.ipkernel, ipykernel.zmqshell  # noqa: E401
import matplotlib_inline.backend_inline, matplotlib.pyplot  # noqa: E401
import importlib.util

LAUNCHER = importlib.util.find_spec("ipykernel_launcher").origin
FRESH_FILTERS = warnings.filters[:]
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernels are reaped as they end
import gc

gc.freeze()  # as the grader's template does (course_tools/grading/kernel_template_program.py)
replies = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
replies.write("ready\n")
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid:
        replies.write(f"{pid}\n")
        continue
    status = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.environ.clear()
        os.environ.update(request["env"])
        warnings.filters[:] = FRESH_FILTERS
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        sys.argv = [LAUNCHER, *request["argv"][3:]]
        ipykernel.kernelapp.launch_new_instance()
        status = 0
    finally:
        os._exit(status)
'''
START_SECONDS = 120
FORK_SECONDS = 30


class UnsandboxedTemplate:
    def __init__(self):
        self.lock = threading.Lock()
        self.process = subprocess.Popen([sys.executable, "-c", TEMPLATE], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, start_new_session=True)
        if self._reply(START_SECONDS) != "ready":
            self.close()
            raise RuntimeError("the kernel template did not start")

    def _reply(self, seconds: float) -> str:
        ready, _, _ = select.select([self.process.stdout], [], [], seconds)
        return self.process.stdout.readline().strip() if ready else ""

    def fork(self, argv: list[str], env: dict[str, str], cwd: str) -> int:
        with self.lock:
            self.process.stdin.write(json.dumps({"argv": argv, "env": env, "cwd": cwd}) + "\n")
            self.process.stdin.flush()
            reply = self._reply(FORK_SECONDS)
        if not reply.isdigit():
            raise RuntimeError(f"the kernel template did not fork a kernel ({reply!r})")
        return int(reply)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


_template: UnsandboxedTemplate | None = None
_template_lock = threading.Lock()
_sockets: str | None = None


def sockets_folder() -> str:
    """A folder of this process's for the kernels' Unix sockets, removed when it ends."""
    global _sockets
    with _template_lock:
        if _sockets is None:
            _sockets = tempfile.mkdtemp(prefix="forked-kernels-")
            atexit.register(shutil.rmtree, _sockets, True)
        return _sockets


def unsandboxed_template() -> UnsandboxedTemplate:
    """This process's template, started on first use; it ends when this process closes its input."""
    global _template
    with _template_lock:
        if _template is None or _template.process.poll() is not None:
            _template = UnsandboxedTemplate()
            atexit.register(_template.close)
        return _template


class ForkedKernel:
    """The forked kernel as jupyter_client's local provisioner handles its process: it is the
    template's child, so it is watched through a pidfd (which no other process can come to name)."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        return self.wait(0) if self.returncode is None else self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if self.returncode is None:
            ended, _, _ = select.select([self._pidfd], [], [], timeout)
            if not ended:
                if timeout is None or timeout > 0:
                    raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
                return None
            os.close(self._pidfd)
            # Not this process's child: its exit status is the template's to collect.
            self.returncode = -signal.SIGKILL
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            signal.pidfd_send_signal(self._pidfd, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class ForkedKernelManager(AsyncKernelManager):
    """Starts each ipykernel kernel by forking it from this process's template."""

    @default("transport")
    def _transport_default(self) -> str:
        # Unix sockets: a TCP port chosen for one kernel was taken by another process's kernel
        # before it could bind it ("Address already in use") when pytest-xdist ran the corpus.
        return "ipc"

    async def _async_pre_start_kernel(self, **kw):
        # Absolute socket paths: the kernel binds them in its working folder, the notebook's.
        self.ip = os.path.join(sockets_folder(), uuid.uuid4().hex)
        return await super()._async_pre_start_kernel(**kw)

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        this_python = os.path.realpath(kernel_cmd[0]) == os.path.realpath(sys.executable)
        if kernel_cmd[1:3] != ["-m", "ipykernel_launcher"] or not this_python:
            return await super()._async_launch_kernel(kernel_cmd, **kw)
        template = unsandboxed_template()
        env = dict(kw.get("env") or os.environ)
        # ipykernel ends when this process goes, as a kernel started by jupyter_client does.
        env["JPY_PARENT_PID"] = str(template.process.pid)
        kernel = ForkedKernel(template.fork(kernel_cmd, env, str(kw.get("cwd") or os.getcwd())))
        provisioner = self.provisioner
        # Signals go to the kernel through its pidfd, never to a process group a reused pid names.
        provisioner.process, provisioner.pid, provisioner.pgid = kernel, kernel.pid, None
        provisioner.cwd = kw.get("cwd")
        self._reconcile_connection_info(provisioner.connection_info)
