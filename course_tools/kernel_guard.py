"""The grader's guard inside a student's kernel: undo patching before each test, catch it during one.

At autograde, course_tools.execute.GuardedExecute sends this file's source to the student's
kernel before any notebook cell runs, and `install()` snapshots the objects a check relies on:
builtins, the parts of torch the checks call, and every function and class of `helpers`. Then:

- after each read-only cell (setup, tests) the grader calls `remember(names)`: the globals those
  trusted cells bound (`check_updates`, `torch`, ...), as they were right after the cell ran;
- before each test cell, `restore(namespace)` puts back every snapshot object and remembered
  global that a student's cell replaced, and deletes globals that shadow a builtin the tests use;
  it returns what it undid, so the feedback can say so;
- after each test cell, `tampered(namespace)` lists what the code under test replaced while the
  test ran; the grader then fails that test, because its verdict cannot be trusted.

Code in the same process can always reach the guard itself; the guard stops the patching that a
student would try (replacing a check, `torch.allclose`, a builtin or a test's global), and the
sandbox limits what anything else can read. This module imports nothing at import time.
"""

from __future__ import annotations

import builtins
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
    "torch.testing",
    "torch.utils.checkpoint",
    "torch.utils.data",
    "torch.utils.data.DataLoader",
)
GUARDED_PACKAGE = "helpers"
# IPython swaps these builtins around every execution; they are not the student's doing.
KERNEL_OWNED_BUILTINS = frozenset({"input", "raw_input", "get_ipython", "exit", "quit", "display",
                                   "__IPYTHON__", "help"})
# Modules that patch torch when first imported (torch._dynamo wraps torch.manual_seed): import
# them before the snapshot, or their first import during a test would look like tampering.
PATCHING_IMPORTS = ("torch._dynamo",)


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


def _is_function(obj) -> bool:
    return isinstance(obj, types.FunctionType)


class Guard:
    """Snapshots taken before any student code ran, and the operations the grader calls."""

    def __init__(self, paths=GUARDED_PATHS, package: str = GUARDED_PACKAGE):
        for name in PATCHING_IMPORTS:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
        self.owners: dict[str, object] = {path: _resolve(path) for path in paths}
        for module in _package_modules(package):
            self.owners[module.__name__] = module
            for value in list(vars(module).values()):
                if isinstance(value, type) and getattr(value, "__module__", "") == module.__name__:
                    self.owners[f"{module.__name__}.{value.__name__}"] = value
        self.attributes = {path: dict(vars(owner)) for path, owner in self.owners.items()}
        for name in KERNEL_OWNED_BUILTINS:
            self.attributes["builtins"].pop(name, None)
        self.modules = {name: module for name, module in self.owners.items()
                        if isinstance(module, types.ModuleType) and sys.modules.get(name) is module}
        self.functions = {}
        for path, attributes in self.attributes.items():
            if not path.startswith(package):
                continue
            for name, value in attributes.items():
                if _is_function(value):
                    self.functions[f"{path}.{name}"] = (value, value.__code__, value.__defaults__,
                                                        value.__kwdefaults__)
        self.remembered: dict[str, object] = {}

    def remember(self, namespace: dict, names) -> None:
        """Trust the current values of `names`: a read-only cell just bound them."""
        for name in names:
            if name in namespace:
                self.remembered[name] = namespace[name]

    def _differences(self, namespace: dict, fix: bool, shadow_names=(), rebound=()) -> list[str]:
        found = []
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                found.append(f"sys.modules[{name!r}]")
                if fix:
                    sys.modules[name] = module
        for path, snapshot in self.attributes.items():
            owner = self.owners[path]
            current = vars(owner)
            changed = [k for k, v in snapshot.items() if k not in current or current[k] is not v]
            # A module gains attributes legitimately (lazy submodules); a class should not.
            added = [] if isinstance(owner, types.ModuleType) else [k for k in current if k not in snapshot]
            for key in changed + added:
                found.append(f"{path}.{key}")
                if fix:
                    if key in snapshot:
                        setattr(owner, key, snapshot[key])
                    else:
                        delattr(owner, key)
        for path, (function, code, defaults, kwdefaults) in self.functions.items():
            if (function.__code__, function.__defaults__, function.__kwdefaults__) != (code, defaults,
                                                                                      kwdefaults):
                found.append(f"{path}.__code__")
                if fix:
                    function.__code__, function.__defaults__, function.__kwdefaults__ = (
                        code, defaults, kwdefaults)
        for name, value in self.remembered.items():
            if name not in rebound and namespace.get(name, _MISSING) is not value:
                found.append(f"the global {name!r}")
                if fix:
                    namespace[name] = value
        builtin_names = vars(builtins)
        for name in shadow_names:
            if name in namespace and name in builtin_names and name not in self.remembered:
                found.append(f"the global {name!r} (it hid the builtin)")
                if fix:
                    del namespace[name]
        return found

    def restore(self, namespace: dict, shadow_names=()) -> list[str]:
        """Undo every replacement of a guarded object; return what was undone."""
        return self._differences(namespace, fix=True, shadow_names=shadow_names)

    def tampered(self, namespace: dict, rebound=()) -> list[str]:
        """What is replaced now, left as it is (the grader fails the test that ran); `rebound` are
        the globals the test cell itself binds."""
        return self._differences(namespace, fix=False, rebound=rebound)


_MISSING = object()


def install() -> Guard:
    """Take the snapshots; call before any student code runs."""
    return Guard()
