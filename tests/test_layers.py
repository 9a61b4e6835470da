"""The course's packages stand in layers, and every import runs down them: no arrow up, no two modules in a circle.

    classroom/      the class's logistics: the release, the exchange, the student edition, the hub (which grades)
    autograder/     grading
    benchmark/      the benchmark, beside grading: it reads the solution notebooks' cells
    nbplumbing/     running nbgrader, reading cells, finding and stopping processes, cgroups
    utils/          the library the notebooks import

Every import counts, a function's own as well as the module's, since either makes one module need the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.common import ROOT

# package -> the packages of the course it may import (itself always)
MAY_IMPORT = {
    "utils": set(),
    "nbplumbing": {"utils"},
    "autograder": {"nbplumbing", "utils"},
    "benchmark": {"nbplumbing", "utils"},
    "classroom": {"autograder", "nbplumbing", "utils"},
}


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of MAY_IMPORT's packages under root."""
    files = {}
    for package in MAY_IMPORT:
        for path in sorted((root / package).rglob("*.py")):
            files[".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")] = path
    return files


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The course's modules that the module `name` imports, anywhere in its file."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x, from ..y import z
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from package import module` imports the module; `from module import name`, the module
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # import a.b.c of a module a.b that defines c
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the course's modules it imports."""
    files = module_files(root)
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a package that MAY_IMPORT does not allow, as "module -> module"."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if b.split(".")[0] not in MAY_IMPORT[a.split(".")[0]] | {a.split(".")[0]})


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, each in a loop (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while (member := stack.pop()) != node:
                group.append(member)
            if group:
                found.append(sorted([node, *group]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_runs_up_the_layers() -> None:
    graph = import_graph(ROOT)
    assert {"nbplumbing.adapter", "autograder.grade", "classroom.hub.server"} <= set(graph)
    assert "nbplumbing.adapter" in graph["classroom.exchange"], "the graph misses a plain import"
    assert not upward_imports(graph), f"imports up the layers: {upward_imports(graph)}"


def test_no_modules_import_each_other() -> None:
    assert not circles(import_graph(ROOT)), f"modules that import each other: {circles(import_graph(ROOT))}"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    """A small tree whose plumbing reaches up into grading, grading up into the classroom (inside a function), and
    two modules of grading import each other (one of them by a relative import)."""
    _write(tmp_path, {
        "utils/timeouts.py": "",
        "nbplumbing/__init__.py": "",
        "nbplumbing/adapter.py": "from autograder.scrub import scrub\nfrom utils import timeouts\n",
        "autograder/__init__.py": "",
        "autograder/scrub.py": "import nbplumbing.adapter\nfrom autograder import grade\n",
        "autograder/grade.py": "def f():\n    from classroom import hub\nfrom .scrub import scrub\n",
        "classroom/hub/__init__.py": "from nbplumbing.adapter import run_nbgrader\n",
        "benchmark/reference.py": "from nbplumbing import adapter\n",
    })
    return tmp_path


def test_the_checks_find_an_upward_import_and_a_circle(broken: Path) -> None:
    graph = import_graph(broken)
    assert upward_imports(graph) == ["autograder.grade -> classroom.hub", "nbplumbing.adapter -> autograder.scrub"]
    assert circles(graph) == [["autograder.grade", "autograder.scrub", "classroom.hub", "nbplumbing.adapter"]]
    del graph["nbplumbing.adapter"], graph["classroom.hub"]  # the two modules of grading alone
    assert circles(graph) == [["autograder.grade", "autograder.scrub"]]
