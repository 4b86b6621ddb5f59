"""Which demonstration cells the grader may leave out: the teacher's, unchanged, and read by nothing.

A lesson's demonstrations (plots, timing loops, worked examples) are most of what a graded kernel
computes, and no test reads them: the tests call the student's functions with inputs the grader
chooses. A teacher marks such a cell in source/ with the tag `skip-when-grading`, which says "this
cell changes nothing a test or a student's function reads". The grader then skips a cell of a
submission only when all of these hold:

- the cell's source is exactly that of a tagged cell of the release (the tag is read from the
  release, never from the submission, whose metadata the student controls);
- no cell that runs binds or reads a name it binds, nor a name it reads that the setup cell does
  not bind (so a student's function that uses a demonstration's `model` keeps the cells that make
  and change `model`); this is decided to a fixed point, since a kept cell's names count too. A
  demonstration that calls a student's function is skipped only when no call can leave state for
  a later one (`keeps_no_state`: no global beyond the setup's and the student's defs, no class,
  decorator, default that is not a literal, function attribute or write into a global object);
- no cell that runs reaches names in ways a parse cannot follow (`globals()`, `eval`, magics),
  which would hide what it reads. The test is by name (`.stack`, `.modules`), with exceptions
  that name no such way: `model.modules()`, a call (`sys.modules` is a dict, and calling it
  fails); `importlib.import_module("torch.utils.checkpoint")`, a torch module named by a
  constant; and an attribute of a torch module the setup cell imported, read directly from the
  setup's name (`torch.stack`, `nn.modules`), when it is one of torch's compiled operators or
  modules in an unmodified torch and no cell that runs rebinds that name or writes attributes
  (`setattr`, `__dict__`, `torch.x = ...`), which could make it something else.

Anything else runs as stock nbgrader would run it. Validate and a student's Run All never skip.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import symtable
import types
from typing import NamedTuple

from course_tools.cells import grade_id, is_read_only

SKIP_TAG = "skip-when-grading"
# Ways to reach a global by a name a parse does not see (names, and attributes such as
# sys.modules or a frame's f_globals); a running cell of the student's that uses one keeps every
# demonstration.
DYNAMIC_NAMES = frozenset({"globals", "locals", "vars", "eval", "exec", "get_ipython", "__import__",
                           "__builtins__", "__main__", "builtins"})
# Reading a builtin is not a dependency between cells (rebinding one is: it is then a bound name).
BUILTIN_NAMES = frozenset(dir(builtins))
DYNAMIC_ATTRIBUTES = frozenset({"modules", "_getframe", "currentframe", "stack", "f_globals", "f_locals",
                                "f_back", "__globals__", "user_ns", "import_module", "getmembers"})


# Names and attributes through which a cell can change what a module's attribute is.
ATTRIBUTE_WRITERS = frozenset({"setattr", "delattr", "__dict__", "__setattr__", "__delattr__"})


# A class's submissions share most cells with the release: each is transformed once per process.
@functools.lru_cache(maxsize=4096)
def _python(source: str) -> str | None:
    """The cell as the kernel runs it (IPython's magics and escapes turned into calls); None when
    IPython cannot transform it."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except (SyntaxError, ValueError, ImportError):
        return None


def _parse(source: str) -> ast.Module | None:
    python = _python(source)
    try:
        return None if python is None else ast.parse(python)
    except SyntaxError:
        return None


def _scopes(source: str) -> list[symtable.SymbolTable] | None:
    """The symbol tables of every scope of the cell, the module's first; None when it does not
    compile (`return` outside a function parses, and fails here)."""
    python = _python(source)
    try:
        pending = [] if python is None else [symtable.symtable(python, "cell", "exec")]
    except SyntaxError:
        return None
    scopes = []
    while pending:
        scopes.append(pending.pop())
        pending.extend(scopes[-1].get_children())
    return scopes or None


def _owned_by_torch(value) -> bool:
    name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
    return isinstance(name, str) and (name == "torch" or name.startswith("torch."))


def _torch_module(name: str) -> types.ModuleType | None:
    if name.split(".")[0] != "torch":
        return None  # and nothing else is imported here
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


@functools.lru_cache(maxsize=256)
def _torch_attribute(module_name: str, attribute: str) -> bool:
    """Whether module_name.attribute is, in this process's unmodified torch, one of torch's compiled
    operators or modules (torch.stack, nn.modules): nothing written in Python, which could be a
    wrapper around a frame function."""
    module = _torch_module(module_name)
    # vars(): what the module holds, not what its __getattr__ makes up (torch.ops answers any name)
    value = vars(module).get(attribute) if module is not None else None
    return _owned_by_torch(value) and isinstance(value, (types.BuiltinFunctionType, types.ModuleType))


@functools.lru_cache(maxsize=1024)
def torch_imports(source: str) -> frozenset[tuple[str, str]]:
    """(name, module) for each torch module a (setup) cell binds by importing it: `import torch`,
    `from torch import nn`, `import torch.nn.functional as F`; not the functions it imports."""
    tree = _parse(source)
    found = set()
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Import):
            found.update((alias.asname, alias.name) if alias.asname else (alias.name.split(".")[0],) * 2
                         for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.update((alias.asname or alias.name, f"{node.module}.{alias.name}") for alias in node.names)
    return frozenset((name, module) for name, module in found if _torch_module(module) is not None)


@functools.lru_cache(maxsize=4096)
def _could_change(source: str, names: frozenset[str]) -> bool:
    """Whether a cell rebinds one of `names` in any scope, or writes an attribute of one, or names a
    way to write attributes by name (True when it does not parse)."""
    tree = _parse(source)
    if tree is None:
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in ATTRIBUTE_WRITERS:
            return True
        if isinstance(node, ast.Attribute) and (node.attr in ATTRIBUTE_WRITERS or (
                not isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name)
                and node.value.id in names)):
            return True
    scopes = _scopes(source)
    return scopes is None or any(
        symbol.get_name() in names and (symbol.is_assigned() or symbol.is_imported()
                                        or symbol.is_parameter() or symbol.is_namespace())
        for scope in scopes for symbol in scope.get_symbols())


# Default values that cannot hold state between calls: literals, torch's dtypes and a few of the
# standard library's constants and clocks, by name.
IMMUTABLE_ATTRIBUTES = {
    "torch": frozenset({"float16", "bfloat16", "float32", "float64", "half", "float", "double", "int8",
                        "int16", "int32", "int64", "long", "int", "uint8", "bool", "complex64",
                        "complex128"}),
    "math": frozenset({"inf", "nan", "pi", "e"}),
    "time": frozenset({"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time",
                       "process_time"}),
}


def _immutable(default: ast.expr) -> bool:
    if isinstance(default, ast.Constant):
        return True
    if isinstance(default, ast.UnaryOp) and isinstance(default.operand, ast.Constant):
        return True
    if isinstance(default, ast.Tuple):
        return all(_immutable(item) for item in default.elts)
    return (isinstance(default, ast.Attribute) and isinstance(default.value, ast.Name)
            and default.attr in IMMUTABLE_ATTRIBUTES.get(default.value.id, ()))


@functools.lru_cache(maxsize=4096)
def keeps_no_state(source: str, functions: frozenset[str]) -> bool:
    """Whether a student's cell defines only functions whose calls leave nothing behind for a later
    call beyond the globals a parse of names sees: no class, no decorator, no default that is not
    a literal, no write into a global object or a function's attributes (`predict.calls`), no
    `setattr`. A closure keeps state only through an assignment (`predict = make()`), which is not
    a definition and so is never taken for a pure one. False when the cell does not parse."""
    tree, scopes = _parse(source), _scopes(source)
    if tree is None or scopes is None:
        return False
    global_in_functions = {symbol.get_name() for scope in scopes[1:] for symbol in scope.get_symbols()
                           if symbol.is_global()}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            return False
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            defaults = [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]
            if node.decorator_list or not all(_immutable(d) for d in defaults):
                return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in ATTRIBUTE_WRITERS:
            return False
        if isinstance(node, ast.Attribute) and node.attr in ATTRIBUTE_WRITERS:
            return False
        if isinstance(node, ast.Attribute | ast.Subscript):
            root = node.value
            while isinstance(root, ast.Attribute | ast.Subscript | ast.Call):
                root = root.func if isinstance(root, ast.Call) else root.value
            if not isinstance(root, ast.Name):
                continue
            if root.id in functions and isinstance(node, ast.Attribute):
                return False        # a function's own attributes (predict.calls), read or written
            if not isinstance(node.ctx, ast.Load) and root.id in global_in_functions:
                return False        # a write into a global object from inside a function
    return True


def _imports_torch_by_name(call: ast.Call) -> bool:
    """importlib.import_module("torch.utils.checkpoint"): a torch module named by a constant."""
    name = call.args[0] if len(call.args) == 1 and not call.keywords else None
    return (isinstance(name, ast.Constant) and isinstance(name.value, str)
            and name.value.split(".")[0] == "torch")


@functools.lru_cache(maxsize=4096)
def reaches_globals_dynamically(source: str, torch_names: frozenset[tuple[str, str]] = frozenset()) -> bool:
    """Whether the cell names a way to read globals that a parse cannot follow (True when it does
    not parse). torch_names: (name, module) of the torch modules the setup bound and no running
    cell can change (see the module's docstring); their own attributes are not such a way."""
    tree = _parse(source)
    if tree is None:
        return True
    modules = dict(torch_names)
    calls = {id(node.func): node for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in DYNAMIC_NAMES:
            return True
        if isinstance(node, ast.Attribute) and node.attr in DYNAMIC_ATTRIBUTES:
            call = calls.get(id(node))
            if call is not None and (node.attr == "modules" or (
                    node.attr == "import_module" and _imports_torch_by_name(call))):
                continue
            base = node.value.id if isinstance(node.value, ast.Name) else None
            if not (isinstance(node.ctx, ast.Load) and base in modules
                    and _torch_attribute(modules[base], node.attr)):
                return True
        if isinstance(node, ast.alias) and node.name.split(".")[0] in DYNAMIC_NAMES:
            return True
        # `from sys import modules` reaches them with no attribute read, and `from inspect import *`
        # binds names no parse can list
        if isinstance(node, ast.ImportFrom) and (
                (node.module or "").split(".")[0] in DYNAMIC_NAMES
                or any(alias.name == "*" or alias.name in DYNAMIC_ATTRIBUTES for alias in node.names)):
            return True
    return False


class CellNames(NamedTuple):
    mentioned: frozenset[str]  # every global the cell reads or binds, at any depth
    bound: frozenset[str]  # the globals it binds
    definitions: frozenset[str]  # the bound ones that only a def, class or import binds
    inner: frozenset[str]  # the globals its functions and classes mention (read when they are called)


# A class's submissions share most cells with the release: each source is parsed once per process.
@functools.lru_cache(maxsize=4096)
def global_names(source: str) -> CellNames | None:
    """The globals a cell touches, scope by scope: a function's parameters and locals are not
    globals, the globals its body reads when called are. None: the cell does not parse."""
    scopes = _scopes(source)
    if scopes is None:
        return None
    mentioned, bound, definitions, inner = set(), set(), set(), set()
    for scope in scopes:
        for symbol in scope.get_symbols():
            name = symbol.get_name()
            if scope.get_type() == "module":
                mentioned.add(name)
                if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace():
                    bound.add(name)
            elif symbol.is_global():
                mentioned.add(name)
                inner.add(name)
                if symbol.is_declared_global() and symbol.is_assigned():
                    bound.add(name)
    definitions.update(symbol.get_name() for symbol in scopes[0].get_symbols()
                       if symbol.is_namespace() or symbol.is_imported())
    return CellNames(frozenset(mentioned), frozenset(bound), frozenset(definitions), frozenset(inner))


def _tags(cell) -> list:
    tags = cell.get("metadata", {}).get("tags", []) if isinstance(cell.get("metadata"), dict) else []
    return tags if isinstance(tags, list) else []


def skipped_at_grading(cells, release_cells) -> set[int]:
    """Indices of the code cells in `cells` (a submission, after nbgrader restored its read-only
    cells) that the grader may skip, by the rules in this module's docstring."""
    tagged = {c["source"] for c in release_cells
              if c.get("cell_type") == "code" and SKIP_TAG in _tags(c) and not grade_id(c)}
    if not tagged:
        return set()
    names, candidates = {}, set()
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        found = global_names(cell["source"])
        if found is None:
            if cell["source"] in tagged:
                continue  # a tagged cell that does not parse here runs, as stock would run it
            return set()  # a running cell whose names cannot be read: skip nothing
        names[index] = found
        if cell["source"] in tagged and not grade_id(cell):
            candidates.add(index)
    kept = [i for i in names if i not in candidates]
    running = [cells[i]["source"] for i in names if not is_read_only(cells[i])]
    setup_torch = frozenset().union(*(torch_imports(cells[i]["source"])
                                      for i in kept if is_read_only(cells[i])))
    changeable = frozenset(name for name, _ in setup_torch)
    if any(_could_change(source, changeable) for source in running):
        setup_torch = frozenset()
    if any(reaches_globals_dynamically(cells[i]["source"], setup_torch)
           for i in kept if not is_read_only(cells[i])):
        return set()
    setup_bound = set().union(*(names[i].bound for i in kept if is_read_only(cells[i])))
    independent = setup_bound | BUILTIN_NAMES
    # A demonstration that calls the student's functions changes nothing later cells read, unless
    # those functions read globals beyond the setup's and the student's own defs (a cache, a
    # counter, a demonstration's model): then it runs, as it would without the grader.
    student = [i for i in kept if not is_read_only(cells[i])]
    trees = [_parse(cells[i]["source"]) for i in student]
    student_functions = frozenset(node.name for tree in trees if tree is not None for node in tree.body
                                  if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))
    student_definitions = set().union(*(names[i].definitions for i in student))
    student_reads = set().union(*(names[i].inner for i in student))
    # A default such as time.perf_counter is immutable only while `time` is the module.
    assigned = set().union(*(names[i].bound - names[i].definitions for i in student))
    if not student_reads - independent - student_definitions and not assigned & set(IMMUTABLE_ATTRIBUTES) \
            and all(keeps_no_state(cells[i]["source"], student_functions) for i in student):
        independent |= student_definitions
    needed = set().union(*(names[i].mentioned for i in kept))
    changed = True
    while changed:
        changed = False
        for index in sorted(candidates):
            cell_names = names[index]
            if (cell_names.bound | (cell_names.mentioned - independent)) & needed:
                candidates.discard(index)
                needed |= cell_names.mentioned
                changed = True
    return candidates
