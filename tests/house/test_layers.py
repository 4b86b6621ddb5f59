"""course_tools/ in layers: base, grading/, jobs/, measure/; imports point only downwards, never in a
circle, and always at the module that defines the name."""

import ast
from pathlib import Path

import pytest

from course_tools.lessons import REPO_ROOT

PACKAGE = REPO_ROOT / "course_tools"
# A module may import from its own layer and the layers after it in this list, never before it.
LAYERS = ("measure", "jobs", "grading", "base")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in LAYERS else "base"


def course_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) for every import of a course_tools module in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("course_tools"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if (PACKAGE.parent / (submodule.replace(".", "/") + ".py")).exists():
                    found.append((submodule, []))
                else:
                    found.append((node.module, [alias.name]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names if alias.name.startswith("course_tools")]
    return found


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: {target for target, _ in course_imports(path)} - {name} for name, path in MODULES.items()}


def test_every_module_imports_only_its_layer_and_those_below():
    upward = [f"{name} ({layer(name)}) imports {target} ({layer(target)})"
              for name, targets in GRAPH.items() for target in targets
              if LAYERS.index(layer(target)) < LAYERS.index(layer(name))]
    assert not upward, upward


def test_no_modules_import_each_other_in_a_circle():
    done, path = set(), []

    def visit(name):
        if name in path:
            pytest.fail("import circle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        path.append(name)
        for target in sorted(GRAPH.get(name, ())):
            visit(target)
        path.pop()
        done.add(name)

    for name in MODULES:
        visit(name)


def defined_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


@pytest.mark.parametrize("path", [*MODULES.values(), REPO_ROOT / "nbgrader_config.py",
                                  *sorted((REPO_ROOT / "tests").rglob("*.py"))],
                         ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_names_come_from_the_module_that_defines_them(path):
    """No re-exports: a name imported from a course_tools module is one that module defines."""
    borrowed = [f"{name} from {module}" for module, names in course_imports(path) for name in names
                if module in MODULES and name not in defined_names(MODULES[module])]
    assert not borrowed, f"{path.name} imports names their module only re-exports: {borrowed}"


# ---------------------------------------------------------------------------------------------
# helpers/ by who runs it: the student's tools at the top, the judges in checks/ (the grader's
# process only), the collectors in collect/ (next to the student's code) and transport/ between.
# ---------------------------------------------------------------------------------------------

HELPERS = REPO_ROOT / "helpers"
# Each room, and the rooms it must never import from.
FORBIDDEN = {
    "tools": ("checks", "collect"),
    "transport": ("checks", "collect"),
    "collect": ("checks",),
    "checks": (),
}


def helpers_room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in FORBIDDEN else "tools"


def helpers_imports(path: Path) -> set[str]:
    """Every helpers module the file imports, at any depth (a name imported from a package that is
    a module of its own counts as that module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "helpers":
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                is_module = (REPO_ROOT / (submodule.replace(".", "/") + ".py")).exists()
                found.add(submodule if is_module else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "helpers"}
    return found


HELPER_MODULES = {module_name(path): path for path in sorted(HELPERS.rglob("*.py"))}


@pytest.mark.parametrize("module", sorted(HELPER_MODULES))
def test_each_helpers_room_imports_only_what_it_may(module):
    room = helpers_room(module)
    wrong = sorted(target for target in helpers_imports(HELPER_MODULES[module])
                   if helpers_room(target) in FORBIDDEN[room])
    assert not wrong, (f"{module} ({room}) imports {wrong}: the student's tools and the transport never "
                       "import judges or collectors, and a collector never imports a judge")


def test_the_rooms_hold_what_their_names_say():
    rooms = {helpers_room(module) for module in HELPER_MODULES}
    assert rooms == set(FORBIDDEN), rooms
    tools = [module for module in HELPER_MODULES if helpers_room(module) == "tools"]
    assert not [m for m in tools if m.split(".")[-1].startswith(("checks", "collect"))], tools


@pytest.mark.parametrize("path", sorted(HELPERS.rglob("*.py")),
                         ids=lambda path: str(path.relative_to(HELPERS)))
def test_no_helpers_module_is_over_400_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= 400, f"{path.relative_to(REPO_ROOT)} has {lines} lines: split it by exercise or by job"
