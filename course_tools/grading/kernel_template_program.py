"""The kernel template: a Python that has imported what every graded kernel imports, and that starts
each kernel by forking into a sandbox bubblewrap has already made (course_tools/grading/kernel_template.py).

The grader runs this file's text with the kernel's own interpreter (`python -c`), as root, in the
environment a sandboxed kernel gets, from an empty folder. It imports torch, ipykernel and
matplotlib once and never runs a student's code: each request forks a child that enters the
namespaces of the sandbox's waiting process (its "holder"), takes its root, working folder and
environment, drops to the kernel's user without capabilities or new privileges, sets the limits
and starts ipykernel there. So a kernel sees exactly what a kernel started inside the sandbox
sees, with the imports already done. Only the standard library is imported before the fork, and
nothing the kernel may not see: no course_tools, no checks.

Protocol: one JSON request per line on stdin, one JSON reply per line on stdout. The program ends
at end of input, which is when the grader's process ends.
"""

import ctypes
import json
import os
import signal
import sys

LIBC = ctypes.CDLL(None, use_errno=True)
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
NAMESPACES = (  # entered in this order: the user namespace first gives the rights to enter the rest
    ("user", 0x10000000), ("cgroup", 0x02000000), ("ipc", 0x08000000), ("uts", 0x04000000),
    ("net", 0x40000000), ("mnt", 0x00020000),
)
CLONE_NEWPID = 0x20000000
# What the template sets up once and each kernel takes back (the warning filters before its own).
FORK_STATE: dict = {}
PRELOAD = ("torch", "torch._dynamo", "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell",
           "matplotlib_inline.backend_inline", "matplotlib.pyplot")


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def private_tmp(fonts: str | None, keep: list[str]) -> None:
    """A /tmp of this process's own, holding matplotlib's font list where a kernel has it (matplotlib
    remembers its folders from the import on), and nothing it writes there reaches the host's. The
    folders in `keep` that lie under the host's /tmp (a course cloned there, its environment) are
    bound back at their paths."""
    lists = {}
    for name in os.listdir(fonts) if fonts else ():
        with open(os.path.join(fonts, name), "rb") as source:
            lists[name] = source.read()
    ms_bind, ms_rec, ms_private = 0x1000, 0x4000, 0x40000
    _check(LIBC.unshare(0x00020000), "unshare the mount namespace")
    _check(LIBC.mount(b"none", b"/", None, ms_rec | ms_private, None), "make the mounts private")
    host_tmp = os.open("/tmp", os.O_PATH | os.O_DIRECTORY)
    _check(LIBC.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, b"size=64m,mode=1777"), "mount a tmpfs on /tmp")
    bound: list[str] = []
    for path in sorted({os.path.normpath(p) for p in keep if p.startswith("/tmp/")}, key=len):
        source = f"/proc/self/fd/{host_tmp}/{path[len('/tmp/'):]}"
        if any(path.startswith(folder + "/") for folder in bound) or not os.path.isdir(source):
            continue
        os.makedirs(path, exist_ok=True)
        _check(LIBC.mount(source.encode(), path.encode(), None, ms_bind | ms_rec, None), f"bind {path} back")
        bound.append(path)
    os.close(host_tmp)
    folder = os.environ.get("MPLCONFIGDIR")
    if folder:
        os.makedirs(folder, exist_ok=True)
        for name, data in lists.items():
            with open(os.path.join(folder, name), "wb") as copy:
                copy.write(data)


def preload() -> list[str]:
    """Import what kernels import; what fails here is imported by the kernel itself, as before."""
    # ipykernel sets this before any plot import; matplotlib reads it when it is imported.
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    failed = []
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - any failure only means the kernel imports it itself
            failed.append(name)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised before the fork")
    return failed


def drop_privileges(uid: int, gid: int) -> None:
    _check(LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no new privileges")
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for capability in range(last + 1):
        _check(LIBC.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), "drop the bounding set")
    _check(LIBC.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice, all empty
    _check(LIBC.capset(header, data), "clear capabilities")


def set_limits(limits: dict) -> None:
    import resource

    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


def become_kernel(request: dict, handles: dict, joined: int) -> None:
    """In the forked kernel: enter the sandbox, drop to the kernel's user, say so on `joined`, start
    ipykernel."""
    if request.get("cgroup_procs"):
        with open(request["cgroup_procs"], "w") as procs:
            procs.write(str(os.getpid()))
    for name, flag in NAMESPACES:
        _check(LIBC.setns(handles[name], flag), f"enter the sandbox's {name} namespace")
    os.fchdir(handles["root"])
    os.chroot(".")
    os.chdir(request["cwd"])
    drop_privileges(request["uid"], request["gid"])
    set_limits(request["limits"])
    os.write(joined, b"ok")
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    argv = request["argv"]
    preloaded = argv[1:3] == ["-m", "ipykernel_launcher"] and "ipykernel.kernelapp" in sys.modules
    # ipykernel echoes what the student's code writes to fds 1 and 2 to the descriptors it started
    # with: the template's stderr is the grader's log, so a preloaded kernel's are /dev/null
    # (course_tools.grading.kernel_output). A command the template could not preload keeps the log,
    # where its reason for not starting belongs (a template without ipykernel: not the student's doing).
    os.dup2(null if preloaded else 2, 1)
    if preloaded:
        os.dup2(null, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    os.environ.clear()
    os.environ.update(request["environment"])
    for name, value in FORK_STATE.get("set by imports", {}).items():
        os.environ[name] = value
        if value.startswith("/tmp/"):
            os.makedirs(value, exist_ok=True)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if not preloaded:
        # Not what was preloaded: run the command itself, which says what is missing if it fails.
        os.execvp(argv[0], argv)
    import importlib.util
    import random
    import warnings

    warnings.filters[:] = FORK_STATE.get("warning filters", warnings.filters)

    # Each kernel draws its own random numbers, as a kernel started afresh would.
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    # As `python -m ipykernel_launcher` runs: its own path first in argv, and the working folder
    # off sys.path until ipykernel puts "" there.
    sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, *argv[3:]]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


def spawn(request: dict) -> int:
    """Fork the kernel's keeper, which forks the kernel into the sandbox's pid namespace and, once it
    ends, ends the sandbox (`holder` is its first process). Returns the kernel's pid once it has
    entered the sandbox and dropped its rights; raises where it could not."""
    holder = int(request["holder"])
    handles = {name: os.open(f"/proc/{holder}/ns/{name}", os.O_RDONLY) for name, _ in NAMESPACES}
    handles["pid"] = os.open(f"/proc/{holder}/ns/pid", os.O_RDONLY)
    handles["root"] = os.open(f"/proc/{holder}/root", os.O_RDONLY | os.O_DIRECTORY)
    report_read, report_write = os.pipe()
    keeper = os.fork()
    if keeper == 0:
        try:
            os.close(report_read)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _check(LIBC.setns(handles["pid"], CLONE_NEWPID), "enter the sandbox's pid namespace")
            joined_read, joined_write = os.pipe()
            kernel = os.fork()
            if kernel == 0:
                try:
                    os.close(report_write)
                    os.close(joined_read)
                    become_kernel(request, handles, joined_write)
                except BaseException as error:  # noqa: BLE001 - said to the grader's log, then gone
                    print(f"sandbox: the kernel template could not start the kernel: {error}",
                          file=sys.stderr)
                finally:
                    os._exit(1)
            os.close(joined_write)
            for handle in handles.values():
                os.close(handle)
            joined = os.read(joined_read, 2) == b"ok"
            os.close(joined_read)
            os.write(report_write, str(kernel if joined else "failed").encode())
            os.close(report_write)
            os.waitpid(kernel, 0)
            try:
                os.kill(holder, signal.SIGKILL)
            except ProcessLookupError:
                pass
        finally:
            os._exit(0)
    os.close(report_write)
    for handle in handles.values():
        os.close(handle)
    with os.fdopen(report_read, "rb") as report:
        answer = report.read()
    if not answer:
        raise RuntimeError("the kernel's keeper ended before it forked the kernel")
    if answer == b"failed":
        raise RuntimeError("the kernel could not enter its sandbox (the grader's log says why)")
    return int(answer)


def serve(fonts: str | None, keep: list[str]) -> None:
    import warnings

    private_tmp(fonts, keep)
    os.chdir("/tmp")
    before = dict(os.environ)
    failed = preload()
    # What the imports set for themselves (torch._dynamo: its cache folder under /tmp), which each
    # kernel gets too, as it would have from importing them.
    FORK_STATE["set by imports"] = {name: value for name, value in os.environ.items()
                                    if before.get(name) != value and name != "MPLBACKEND"}
    # Python 3.12 warns at each fork of a process with threads (a BLAS pool started by an import);
    # the kernel is forked from a single thread, and gets the usual warning filters back.
    usual_filters = warnings.filters[:]
    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
    FORK_STATE["warning filters"] = usual_filters
    # The keepers are reaped as they end; each keeper waits for its own kernel.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    # What the imports made lives as long as any kernel: out of the collector's sight, a kernel's
    # collections never walk it, and never write to (so copy) the pages it shares with the template.
    import gc

    gc.freeze()
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # nothing a preloaded module prints may reach the replies
    replies.write(json.dumps({"ready": True, "not_preloaded": failed}) + "\n")
    for line in sys.stdin:
        try:
            reply = {"pid": spawn(json.loads(line))}
        except Exception as error:  # noqa: BLE001 - the grader falls back or fails this kernel
            reply = {"error": f"{type(error).__name__}: {error}"}
        replies.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    del sys.path[0]  # the empty folder it runs in; the kernel puts its own working folder there
    serve(sys.argv[1] or None, json.loads(sys.argv[2]))
