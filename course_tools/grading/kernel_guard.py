"""The grader's guard inside a student's kernel: it answers the grader's requests, never judges.

At autograde, course_tools.grading.execute.GuardedExecute sends this file's source to the student's
kernel before any notebook cell runs. `install()` snapshots the objects the lesson's collectors
rely on (builtins, the parts of torch they call, every function and class of `helpers`) and the
interpreter's hooks (IPython's input and AST transformers, events and exception handlers,
`sys.settrace`/`setprofile`, `sys.meta_path`, `sys.path_hooks`, `sys.modules`, the display and
exception hooks), adds an audit hook that refuses further audit hooks, and registers a handler
for the grader's own kernel message, `course_guard_request`. From then on the grader talks to the
guard only through that message, never through a cell, so nothing a solution cell installs in
IPython's input pipeline sees or rewrites the grader's requests:

- `describe`: what each name a test reads is in the notebook (a function, a plain value, missing);
- `call`: run one of the lesson's collectors on the student's function, with the inputs the
  grader chose, and answer with plain data (helpers.transport.wire);
- `reset` (IPython's input pipeline too) before a read-only cell that IPython runs, and
  `remember` after it: the globals those trusted cells bound, as they were right after the cell ran.

Each request first puts back every snapshot object, Python hook and remembered global that a
student's cell replaced, so a collector measures with the real torch and helpers. No test cell,
test source or reference ever reaches the kernel: the grader judges in its own process
(course_tools.grading.verdict). What the guard restores only keeps the evidence a collector reports
honest for honest students; code in this process can still forge that evidence, and
docs/grading-trust.md says what that can and cannot buy. This module imports nothing at import time.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import types

# Objects whose attributes a check relies on, by dotted path (module or class).
GUARDED_PATHS = (
    "builtins",
    "math",
    "torch",
    "torch.Tensor",
    "torch.nn",
    "torch.nn.functional",
    "torch.nn.Module",
    "torch.nn.utils",
    "torch.optim",
    "torch.optim.Optimizer",
    "torch.amp",
    "torch.amp.GradScaler",
    "torch.autograd",
    "torch.autograd.graph",
    # helpers.memory.SavedTensorMeter, which measures in the kernel, enters these hooks.
    "torch.autograd.graph.saved_tensors_hooks",
    "torch.testing",
    "torch.utils.checkpoint",
    "torch.utils.data",
    "torch.utils.data.DataLoader",
    "IPython.core.interactiveshell.InteractiveShell",
    "ipykernel.zmqshell.ZMQInteractiveShell",
    "ipykernel.kernelbase.Kernel",
    "ipykernel.ipkernel.IPythonKernel",
)
GUARDED_PACKAGE = "helpers"
# IPython swaps these builtins around every execution; they are not the student's doing.
KERNEL_OWNED_BUILTINS = frozenset({"input", "raw_input", "get_ipython", "exit", "quit", "display",
                                   "__IPYTHON__", "help"})
# torch._dynamo, on its first import, replaces torch.manual_seed with
# torch._compile._disable_dynamo(torch.manual_seed). Importing it up front costs about 0.8 s of every
# kernel's start, and a kernel that skips the demonstrations often never needs it; instead the
# guard accepts exactly that wrapper of exactly the snapshot's function (`_is_dynamo_wrapper`).
DYNAMO_WRAPPED = {"torch": ("manual_seed",)}


def _resolve(path: str):
    module_name, _, rest = path.partition(".")
    obj = importlib.import_module(module_name)
    for part in rest.split(".") if rest else ():
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(f"{obj.__name__}.{part}")
    return obj


def _package_modules(package_name: str) -> list[types.ModuleType]:
    package = importlib.import_module(package_name)
    modules = [package]
    for info in pkgutil.walk_packages(package.__path__, prefix=package_name + "."):
        modules.append(importlib.import_module(info.name))
    return modules


def _functions_inside(value) -> list[types.FunctionType]:
    """The plain functions an attribute holds: itself, what it wraps (functools.wraps), the function
    of a staticmethod, classmethod or property; their code can be swapped in place."""
    found, pending = [], [value]
    while pending and len(found) < 16:
        item = pending.pop()
        if isinstance(item, (staticmethod, classmethod)):
            pending.append(item.__func__)
        elif isinstance(item, property):
            pending += [f for f in (item.fget, item.fset, item.fdel) if f is not None]
        elif isinstance(item, types.FunctionType) and item not in found:
            found.append(item)
            wrapped = vars(item).get("__wrapped__")
            if wrapped is not None:
                pending.append(wrapped)
    return found


def _dynamo_wrapper_codes() -> tuple[types.CodeType, ...]:
    """The code of the wrappers torch._compile._disable_dynamo makes, taken before student code ran."""
    try:
        disable = importlib.import_module("torch._compile")._disable_dynamo
    except (ImportError, AttributeError):
        return ()
    return tuple(c for c in disable.__code__.co_consts if isinstance(c, types.CodeType))


def _is_dynamo_wrapper(value, original, codes: tuple[types.CodeType, ...]) -> bool:
    """Whether `value` is torch._dynamo's wrapper of `original`: a plain function whose code is the
    wrapper's own, as it was before any student code ran, and whose closure holds `original`."""
    return (type(value) is types.FunctionType and any(value.__code__ is code for code in codes)
            and any(cell.cell_contents is original for cell in value.__closure__ or ()))


class Guard:
    """Snapshots taken before any student code ran, and the operations the grader calls."""

    def __init__(self, paths=GUARDED_PATHS, package: str = GUARDED_PACKAGE):
        self.dynamo_wrapper_codes = _dynamo_wrapper_codes()
        self.owners: dict[str, object] = {path: _resolve(path) for path in paths}
        for module in _package_modules(package):
            self.owners[module.__name__] = module
            for value in list(vars(module).values()):
                if isinstance(value, type) and getattr(value, "__module__", "") == module.__name__:
                    self.owners[f"{module.__name__}.{value.__name__}"] = value
        self.attributes = {path: dict(vars(owner)) for path, owner in self.owners.items()}
        for name in KERNEL_OWNED_BUILTINS:
            self.attributes["builtins"].pop(name, None)
        # Every module loaded before any student code: none may be swapped in sys.modules or given a
        # class of its own (a module type with its own __getattribute__).
        self.modules = dict(sys.modules)
        self.module_types = {name: type(module) for name, module in self.modules.items()}
        self.functions = {}
        for path, attributes in self.attributes.items():
            if not path.startswith(package):
                continue
            for name, value in attributes.items():
                for depth, function in enumerate(_functions_inside(value)):
                    label = f"{path}.{name}" + ".__wrapped__" * depth
                    self.functions.setdefault(id(function), (label, function, function.__code__,
                                                             function.__defaults__, function.__kwdefaults__))
        self.remembered: dict[str, object] = {}

    def remember(self, namespace: dict, names) -> None:
        """Trust the current values of `names`: a read-only cell just bound them."""
        for name in names:
            if name in namespace:
                self.remembered[name] = namespace[name]

    def restore(self, namespace: dict) -> list[str]:
        """Undo every replacement of a guarded object; return what was undone."""
        found = []
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                found.append(f"sys.modules[{name!r}]")
                sys.modules[name] = module
            if type(module) is not self.module_types[name]:
                found.append(f"the type of module {name!r}")
                module.__class__ = self.module_types[name]
        for path, snapshot in self.attributes.items():
            owner = self.owners[path]
            current = vars(owner)
            changed = [k for k, v in snapshot.items() if k not in current or current[k] is not v]
            for key in [k for k in changed if k in DYNAMO_WRAPPED.get(path, ()) and k in current]:
                if _is_dynamo_wrapper(current[key], snapshot[key], self.dynamo_wrapper_codes):
                    snapshot[key] = current[key]
                    changed.remove(key)
            # A module gains attributes legitimately (lazy submodules); a class should not.
            added = [] if isinstance(owner, types.ModuleType) else [k for k in current if k not in snapshot]
            for key in changed + added:
                found.append(f"{path}.{key}")
                if key in snapshot:
                    setattr(owner, key, snapshot[key])
                else:
                    delattr(owner, key)
        for path, function, code, defaults, kwdefaults in self.functions.values():
            if (function.__code__, function.__defaults__, function.__kwdefaults__) != (code, defaults,
                                                                                      kwdefaults):
                found.append(f"{path}.__code__")
                function.__code__, function.__defaults__, function.__kwdefaults__ = (
                    code, defaults, kwdefaults)
        for name, value in self.remembered.items():
            if namespace.get(name, _MISSING) is not value:
                found.append(f"the global {name!r}")
                namespace[name] = value
        return found


_MISSING = object()
REQUEST = "course_guard_request"
REPLY = "course_guard_reply"
# IPython's shell attributes whose contents decide what a cell's source becomes and what happens
# around it; a solution cell can add to any of them.
SHELL_LISTS = ("input_transformers_cleanup", "input_transformers_post", "ast_transformers")
# Methods a solution cell could replace on the shell itself (the classes are in GUARDED_PATHS).
SHELL_METHODS = ("run_cell", "run_cell_async", "run_ast_nodes", "run_code", "transform_cell")
# IPython swaps sys.displayhook around every cell it runs; tests, run with exec, never call it.
SYS_HOOKS = ("excepthook", "breakpointhook", "stdout", "stderr", "stdin")


class Interpreter:
    """The interpreter's hooks as they were before any student code ran, and putting them back."""

    def __init__(self, shell):
        self.shell = shell
        self.shell_lists = {name: list(getattr(shell, name)) for name in SHELL_LISTS
                            if isinstance(getattr(shell, name, None), list)}
        self.events = {name: list(callbacks) for name, callbacks in shell.events.callbacks.items()}
        self.custom_exceptions = (shell.custom_exceptions, shell.CustomTB)
        self.sys_hooks = {name: getattr(sys, name) for name in SYS_HOOKS}
        self.meta_path, self.path_hooks = list(sys.meta_path), list(sys.path_hooks)

    def reset_ipython(self) -> list[str]:
        """Put IPython's input pipeline back; only cells that IPython runs go through it."""
        found = []
        for name, snapshot in self.shell_lists.items():
            current = getattr(self.shell, name, None)
            if current is not snapshot and (not isinstance(current, list) or current != snapshot):
                found.append(f"IPython's {name}")
                setattr(self.shell, name, list(snapshot))
        for name in SHELL_METHODS:
            if name in vars(self.shell):
                found.append(f"IPython's {name}")
                del vars(self.shell)[name]
        callbacks = self.shell.events.callbacks
        if {name: list(c) for name, c in callbacks.items()} != self.events:
            found.append("IPython's events (pre_run_cell, post_execute, ...)")
            callbacks.clear()
            callbacks.update({name: list(c) for name, c in self.events.items()})
        if (self.shell.custom_exceptions, self.shell.CustomTB) != self.custom_exceptions:
            found.append("IPython's custom exception handler")
            self.shell.custom_exceptions, self.shell.CustomTB = self.custom_exceptions
        return found

    def reset_python(self) -> list[str]:
        """Put the interpreter's own hooks back; return what had changed."""
        import threading

        found = []
        if sys.gettrace() is not None or sys.getprofile() is not None:
            found.append("a trace or profile function (sys.settrace / sys.setprofile)")
        sys.settrace(None)
        sys.setprofile(None)
        threading.settrace(None)
        threading.setprofile(None)
        for name, hook in self.sys_hooks.items():
            if getattr(sys, name) is not hook:
                found.append(f"sys.{name}")
                setattr(sys, name, hook)
        for name, snapshot in (("meta_path", self.meta_path), ("path_hooks", self.path_hooks)):
            current = getattr(sys, name)
            if not isinstance(current, list) or current != snapshot:
                found.append(f"sys.{name}")
                if isinstance(current, list):
                    current[:] = snapshot
                else:
                    setattr(sys, name, list(snapshot))
        return found


def _refuse_audit_hooks(event: str, args) -> None:
    if event == "sys.addaudithook":
        raise RuntimeError("the grader does not allow audit hooks while it grades")


def _short(value: BaseException) -> str:
    try:
        return str(value)[:2000]
    except Exception:
        return "(its message could not be read)"


class Handler:
    """Answers the grader's `course_guard_request` messages inside the kernel."""

    def __init__(self, guard: Guard, interpreter: Interpreter, kernel):
        self.guard, self.interpreter, self.kernel = guard, interpreter, kernel
        self.namespace = interpreter.shell.user_ns

    def __call__(self, stream, idents, message) -> None:
        content = message.get("content", {})
        self.request_buffers = message.get("buffers") or []
        try:
            reply = {"status": "ok", **getattr(self, "op_" + content["op"])(**content.get("args", {}))}
        except BaseException as error:  # the grader must get an answer, whatever happened
            reply = {"status": "guard_error", "ename": type(error).__name__, "evalue": _short(error)}
        reply["nonce"] = content.get("nonce")
        buffers = reply.pop("buffers", None)
        self.kernel.session.send(stream, REPLY, reply, message, idents, buffers=buffers)

    def op_describe(self, names) -> dict:
        """What each name the grader's test reads is in the notebook: a function the grader calls
        through `call`, a value (as plain data), or missing. The helpers that encode it are put
        back first: a cell may have rewritten them as it may any function."""
        undone = self.interpreter.reset_python() + self.guard.restore(self.namespace)
        from helpers.transport import wire

        kinds, values = {}, {}
        for name in names:
            if name not in self.namespace:
                kinds[name] = "missing"
            elif callable(self.namespace[name]):
                kinds[name] = "function"
            else:
                try:
                    wire.encode(self.namespace[name])
                except Exception:  # noqa: BLE001 - the value's own code may raise anything
                    kinds[name] = "unreadable"
                else:
                    kinds[name], values[name] = "value", self.namespace[name]
        tree, buffers = wire.encode(values)
        return {"kinds": kinds, "values": tree, "buffers": buffers, "undone": undone}

    def op_call(self, collector: str, function: str, inputs) -> dict:
        """Run a check's collector on the student's function, with the grader's interpreter hooks
        and helpers put back first; answer with its plain-data result."""
        from helpers.transport import remote

        undone = self.interpreter.reset_python() + self.guard.restore(self.namespace)
        if function not in self.namespace:
            raise NameError(f"name {function!r} is not defined")
        try:
            tree, buffers = remote.serve(collector, self.namespace[function], inputs, self.request_buffers)
        finally:
            sys.settrace(None)
            sys.setprofile(None)
        return {"result": tree, "buffers": buffers, "undone": undone}

    def op_reset(self) -> dict:
        interpreter = self.interpreter
        return {"undone": interpreter.reset_ipython() + interpreter.reset_python()
                + self.guard.restore(self.namespace)}

    def op_remember(self, names) -> dict:
        self.guard.remember(self.namespace, names)
        return {}


def install() -> Guard:
    """Take the snapshots and start answering the grader; call before any student code runs."""
    from IPython import get_ipython

    shell = get_ipython()
    # The kernel starts in the submission's folder, which is first on the import path: a `helpers/`
    # or `torch.py` handed in there would become the package the checks run on. Import the
    # guarded modules without it; later imports of the same names find them in sys.modules.
    import os

    here, saved = os.path.realpath(os.getcwd()), list(sys.path)
    sys.path[:] = [entry for entry in saved if os.path.realpath(entry or os.curdir) != here]
    try:
        guard = Guard()
    finally:
        sys.path[:] = saved
    kernel = shell.kernel
    kernel.shell_handlers[REQUEST] = Handler(guard, Interpreter(shell), kernel)
    sys.addaudithook(_refuse_audit_hooks)
    return guard
