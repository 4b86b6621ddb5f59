"""Run a student's kernel in a bubblewrap sandbox that sees only its own folder and what it needs.

The sandbox shows the kernel, read-only: the system (/usr, /etc and the libraries), this Python
and its environment, and the `helpers` package; read-write: the submission's own folder and an
empty /tmp. The course folder around it (source/ with the solutions, the gradebook, the other
students' submissions) does not exist in there. Memory and CPU time are capped with setrlimit.
Where bubblewrap is missing or the kernel forbids user namespaces, grading still works and says
plainly that it is unsandboxed.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Integer

INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) to sandbox grading"
# Environment variables a kernel may see; the grader's own (tokens, credentials) stay outside.
PASSED_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "TZ", "NBGRADER_EXECUTION", "CUDA_VISIBLE_DEVICES",
                      "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED")


@dataclass(frozen=True)
class SandboxStatus:
    """Whether kernels can be sandboxed here, and a sentence saying so."""

    available: bool
    reason: str

    @property
    def message(self) -> str:
        if self.available:
            return f"grading is sandboxed: {self.reason}"
        return f"grading is NOT sandboxed ({self.reason}): student code runs with the grader's rights"


@functools.cache
def sandbox_status(executable: str = "bwrap") -> SandboxStatus:
    """Try bubblewrap once: a binary that exists but cannot create namespaces is no sandbox."""
    path = shutil.which(executable)
    if path is None:
        return SandboxStatus(False, f"bubblewrap not found; {INSTALL_HINT}")
    try:
        probe = subprocess.run([path, *_system_binds(), "--unshare-all", "--share-net", "--die-with-parent",
                                "--proc", "/proc", "--dev", "/dev", "true"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return SandboxStatus(False, f"bubblewrap failed to start: {error}")
    if probe.returncode != 0:
        first_line = (probe.stderr.strip().splitlines() or ["no message"])[0]
        return SandboxStatus(False, f"bubblewrap cannot create a sandbox here: {first_line}")
    return SandboxStatus(True, "bubblewrap, own folder only, memory and CPU limits")


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


def sandboxed_command(command: list[str], workdir: str, connection_file: str,
                      memory_bytes: int, cpu_seconds: int) -> list[str]:
    """`command` wrapped so that it runs in the sandbox, in `workdir`, under the given limits."""
    limits = [shutil.which("prlimit") or "prlimit", f"--data={memory_bytes}", f"--cpu={cpu_seconds}",
              "--core=0", "--"]
    home = "/tmp/home"
    # Order matters: the empty /tmp first, then the binds, which may lie under /tmp themselves.
    sandbox = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--unshare-all", "--share-net",
               "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", home,
               *_system_binds(), *_python_binds(), *_device_binds(),
               "--bind", workdir, workdir,
               "--ro-bind", connection_file, connection_file,
               "--chdir", workdir, "--clearenv", "--setenv", "HOME", home,
               "--setenv", "MPLCONFIGDIR", "/tmp/matplotlib",
               # The grader's pid means nothing in the kernel's pid namespace, and without one
               # ipykernel prints a Ctrl-C notice per kernel; 1 tells it not to watch its parent,
               # which --die-with-parent does instead.
               "--setenv", "JPY_PARENT_PID", "1"]
    for name in PASSED_ENVIRONMENT:
        if name in os.environ:
            sandbox += ["--setenv", name, os.environ[name]]
    return limits + sandbox + command


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel inside the sandbox, with the grader's memory and CPU limits."""

    memory_limit_bytes = Integer(8 * 2**30, help="data-segment limit of a kernel, in bytes").tag(config=True)
    cpu_limit_seconds = Integer(3600, help="CPU-time limit of a kernel (setrlimit)").tag(config=True)

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        workdir = str(Path(kw.get("cwd") or Path.cwd()).resolve())
        kernel_cmd = sandboxed_command(kernel_cmd, workdir, str(Path(self.connection_file).resolve()),
                                       self.memory_limit_bytes, self.cpu_limit_seconds)
        # A SIGINT sent from outside stops at bubblewrap; ipykernel interrupts itself on request.
        self.kernel_spec.interrupt_mode = "message"
        await super()._async_launch_kernel(kernel_cmd, **kw)
