"""A memory cgroup for each sandboxed kernel, where the machine lets the grader make one.

The grader's own memory cgroup (v1 or v2) is found from /proc/self; a kernel's cgroup is a child of
it whose limit bounds all the kernel's processes together, shared memory and tmpfs included. The
launch enters it (ENTER_CGROUP) before bubblewrap runs, so every process of the sandbox is born
inside. See course_tools/grading/sandbox.py for how the pieces fit.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from course_tools.units import MB

# Each kernel's memory cgroup is named CGROUP_PREFIX<grader pid>-<its start time>-<n>: a grader
# that crashed left the ones whose owner no longer runs, and the next one removes them.
CGROUP_PREFIX = "course-kernel-"

# The first thing the launch runs, before any namespace or student code exists: moves itself into
# the kernel's memory cgroup ($0) and execs the rest of the command line, so that every process of
# the sandbox is born inside it. $$ is this shell's pid as the grader sees it.
ENTER_CGROUP = (
    'echo $$ > "$0/cgroup.procs" || { echo "sandbox: cannot enter the kernel\'s memory cgroup $0" >&2; '
    'exit 1; }; exec "$@"'
)


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


@dataclass
class PeakReading:
    """What the grader read from a kernel's memory cgroup over one stretch of time: the bytes charged
    just before it (`before`) and the most charged at once during it (`peak`), or None until read."""

    before: int | None = None
    peak: int | None = None


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

    def usage(self) -> int:
        """The bytes charged to it now: every process's memory, its shared memory and tmpfs pages."""
        return int(self.read("memory.usage_in_bytes" if self.version == 1 else "memory.current"))

    @contextlib.contextmanager
    def peak_over(self) -> Iterator[PeakReading]:
        """The most bytes charged to it at once inside the block, read by the grader: the peak is
        reset on entering (cgroup v1's memory.max_usage_in_bytes, v2's memory.peak through an open
        file, Linux 6.12 or later) and read on leaving. The kernel can neither read nor write these
        files (it runs as another uid, without capabilities, in a mount where they do not exist)."""
        reading = PeakReading()
        if self.version == 1:
            _write_control(self.path / "memory.max_usage_in_bytes", 0)
            reading.before = self.usage()
            yield reading
            reading.peak = max(int(self.read("memory.max_usage_in_bytes")), reading.before)
            return
        # v2 resets memory.peak per open file: what this descriptor reads is the peak since its reset.
        # Before Linux 6.12 it cannot be reset, and the reading stays empty.
        with contextlib.ExitStack() as stack:
            try:
                descriptor = os.open(self.path / "memory.peak", os.O_RDWR)
                stack.callback(os.close, descriptor)
                os.write(descriptor, b"reset")
            except OSError:
                yield reading
                return
            reading.before = self.usage()
            yield reading
            reading.peak = max(int(os.pread(descriptor, 64, 0)), reading.before)

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
