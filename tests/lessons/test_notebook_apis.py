"""Every API a notebook names exists in the installed torch, CUDA-only branches included.

CI has no GPU, so a cell's `if device.type == "cuda":` branch never runs there; a renamed or removed
attribute in it (torch 2.13 has no `cuda_time_total` on profiler events) would first fail on a
student's GPU. This test stands in for that run: it resolves, on the real modules, every dotted
name a source notebook reads from something it imported (`torch.cuda.memory._record_memory_history`,
`ProfilerActivity.CUDA`, `memory.cuda_peak_bytes`) and every profiler `sort_by` key, in every cell
and every branch. What a name returns at run time (a tensor's methods) is left to nbval.
"""

import ast
import importlib
import inspect
from pathlib import Path

import nbformat
import pytest

from course_tools.lessons import REPO_ROOT, assignment_ids

NOTEBOOKS = [path for lesson in assignment_ids(REPO_ROOT)
             for path in sorted((REPO_ROOT / "source" / lesson).glob("*.ipynb"))]


def code_of(notebook_path: Path) -> list[tuple[int, ast.Module]]:
    """(cell index, parsed code) of every code cell; IPython's magics and shell lines left out."""
    parsed = []
    for index, cell in enumerate(nbformat.read(notebook_path, as_version=4).cells):
        if cell.cell_type != "code":
            continue
        lines = [line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        parsed.append((index, ast.parse("\n".join(lines))))
    return parsed


def imported_names(trees) -> dict[str, str]:
    """name -> dotted path of what `import` and `from ... import` statements bind to it."""
    bound = {}
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        root = alias.name.split(".")[0]
                        bound[root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def assigned_names(trees) -> set[str]:
    """Names some cell also binds by assignment, a loop or a def: not only an import's."""
    names = set()
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
                names.add(node.name)
    return names


def resolve(dotted: str):
    """The object at a dotted path: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            target = getattr(target, part)
        return target
    raise ImportError(dotted)


def attribute_chains(tree: ast.Module):
    """(root name, [attr, attr, ...], line) of each outermost dotted read such as a.b.c."""
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner.add(id(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            attrs, value = [], node
            while isinstance(value, ast.Attribute):
                attrs.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                yield value.id, attrs, node.lineno


@pytest.mark.parametrize("notebook_path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_every_imported_name_a_notebook_reads_exists(notebook_path):
    trees = code_of(notebook_path)
    imports = imported_names(trees)
    reassigned = assigned_names(trees)
    missing, checked = [], 0
    for index, tree in trees:
        for root, attrs, line in attribute_chains(tree):
            if root not in imports or root in reassigned:
                continue
            target = resolve(imports[root])
            walked = imports[root]
            for attr in attrs:
                # Past a function or an instance the attribute belongs to a result, not to the API.
                if not (inspect.ismodule(target) or inspect.isclass(target)):
                    break
                walked += "." + attr
                if not hasattr(target, attr):
                    missing.append(f"cell {index}, line {line}: {walked} does not exist")
                    break
                target = getattr(target, attr)
                checked += 1
    assert checked > 20, f"{notebook_path.name}: only {checked} names checked; is the parser broken?"
    assert not missing, f"{notebook_path.parent.name}: " + "; ".join(missing)


@pytest.mark.parametrize("notebook_path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_profiler_sort_keys_exist(notebook_path):
    from torch.autograd.profiler_util import FunctionEventAvg

    event = FunctionEventAvg()
    for index, tree in code_of(notebook_path):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "sort_by" and isinstance(keyword.value, ast.Constant):
                        assert hasattr(event, keyword.value.value), (
                            f"{notebook_path.parent.name} cell {index}: profiler events have no "
                            f"{keyword.value.value!r} in this torch (device_time_total?)")
