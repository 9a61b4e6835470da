r"""Constructs in a submission's own cells that can reach how the grader runs the tests: flagged for review.

The hidden tests run in the submission's kernel, after its code (autograder/execution.py says what the grader
checks there). Code that reaches IPython's machinery, the interpreter's module table, builtins, the source cache,
frames, the garbage collector, C memory, tracing, or that runs code it builds at run time, or that replaces an
attribute of a module, can try to change how the tests run or read them. None of it is needed by an exercise of the
course, so each such line is flagged for an instructor to read, with its cell and line; the points are left to the
tests (a flag is never a silent zero). A construct that the released notebook's own unlocked cells already hold
is not flagged.

>>> [f.split(": ", 1)[1] for f in flags_of("import inspect as i\nx = i.stack()\n", "a cell")]
['line 1 `import inspect as i` (imports inspect)']
>>> flags_of("import torch as _t\n_t.equal = lambda *a: True\n", "ex")
['ex: line 2 `_t.equal = lambda *a: True` (replaces an attribute of the module _t)']
>>> flags_of("y = sum(x * x for x in range(3))\n", "ex")
[]
"""

from __future__ import annotations

import ast
import re

from nbplumbing.cells import meta, parse_cell, source

MODULES = frozenset({"builtins", "linecache", "inspect", "gc", "ctypes", "IPython", "ipykernel", "importlib",
                     "traceback", "atexit", "jupyter_client", "zmq", "bdb", "pdb", "tracemalloc", "threading",
                     "_thread", "concurrent", "pickle", "copyreg", "marshal", "faulthandler", "code", "codeop"})
NAMES = frozenset({"get_ipython", "In", "Out", "_ih", "_oh", "_dh", "_i", "_ii", "_iii", "__builtins__",
                   "__graded_cell_end__", "__graded_cell_seal__", "__import__"})
CALLS = frozenset({"exec", "eval", "compile", "__import__", "globals"})
# The shell and what runs a cell in it (IPython's, reachable as `quit._ip` or `sys.displayhook.shell` without a
# flagged name), the interpreter's hooks, frames and threads, and a module's namespace as a dict.
ATTRIBUTES = frozenset({"set_custom_exc", "input_transformers_cleanup", "input_transformers_post",
                        "ast_transformers", "settrace", "setprofile", "_getframe", "f_back",
                        "f_globals", "f_locals", "tb_frame", "gi_frame", "__closure__", "__code__", "__globals__",
                        "showtraceback", "run_cell", "_ip", "transform_ast", "transform_cell", "run_code",
                        "run_ast_nodes", "custom_exceptions", "CustomTB", "events", "displayhook", "excepthook",
                        "user_ns", "user_global_ns", "display_pub", "linecache", "f_trace", "f_lineno",
                        "_current_frames", "__dict__", "__builtins__", "__subclasses__"})
# Methods that run when an object is unpickled, compared, collected or handed to torch: a rank's result, or a
# tensor that makes torch.equal true, can carry one into the tests.
DEFINED = frozenset({"__reduce__", "__reduce_ex__", "__setstate__", "__torch_function__", "__torch_dispatch__",
                     "__del__", "__eq__", "__bool__", "__instancecheck__"})
HISTORY = re.compile(r"_i\d+|_\d+")  # IPython's numbered inputs and outputs


def flags_of(src: str, where: str, aliases: set[str] | None = None) -> list[str]:
    """The flags of one cell's source: "<where>: line N `<line>` (<why>)", in line order.

    `aliases`: names the notebook binds to modules (module_names); the cell's own imports are added.
    """
    tree = parse_cell(src)
    if tree is None:
        return []
    lines = src.splitlines()
    modules = set(aliases or ()) | module_names(src)
    found: dict[tuple[int, str], None] = {}
    for node in ast.walk(tree):
        for why in _reasons(node, modules):
            found[(node.lineno, why)] = None
    out = []
    for lineno, why in sorted(found):
        line = lines[lineno - 1].strip() if lineno <= len(lines) else ""
        out.append(f"{where}: line {lineno} `{line[:120]}` ({why})")
    return out


def _reasons(node: ast.AST, modules: set[str]) -> list[str]:
    """Why one syntax node is flagged (empty: it is not)."""
    why = []
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [a.name for a in node.names]
        why += [f"imports {n}" for n in names if n.split(".")[0] in MODULES]
    elif isinstance(node, ast.Name) and (node.id in NAMES or HISTORY.fullmatch(node.id)):
        why.append(f"uses {node.id}")
    elif isinstance(node, ast.Attribute) and (node.attr in ATTRIBUTES or node.attr == "modules"  # sys.modules
                                              and isinstance(node.value, ast.Name) and node.value.id in modules):
        why.append(f"uses .{node.attr}")
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id in CALLS:
            why.append(f"calls {node.func.id}")
        elif node.func.id in ("setattr", "delattr") and node.args and _root(node.args[0]) in modules:
            why.append(f"replaces an attribute of the module {_root(node.args[0])}")
        elif node.func.id == "vars" and node.args and _root(node.args[0]) in modules:
            why.append(f"reads the namespace of the module {_root(node.args[0])}")
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (node.name in DEFINED
                                                                                      or node.name in NAMES):
        why.append(f"defines {node.name}")
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and _root(target) in modules:
                why.append(f"replaces an attribute of the module {_root(target)}")
    return why


def _root(node: ast.AST) -> str | None:
    """The name at the root of an attribute chain (`a` of `a.b.c`), if it is one."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def module_names(src: str) -> set[str]:
    """Names a cell binds to a module: by import (`import torch as t`, `from torch import nn`), or by assigning a
    name that is one (`t2 = t`, once `t` is known)."""
    tree = parse_cell(src)
    if tree is None:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    for node in ast.walk(tree):  # aliases of aliases, in any order within the cell
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in names:
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def find_flags(nb: dict, released: dict, name: str) -> list[str]:
    """Every flag of the submission's own code cells (not the locked ones, which must match the release), less
    the kinds of construct the release's own unlocked cells hold."""
    aliases = {n for cell in nb["cells"] if cell["cell_type"] == "code" for n in module_names(source(cell))}
    given = {_why(f) for cell in released["cells"]
             if cell["cell_type"] == "code" and not meta(cell).get("locked")
             for f in flags_of(source(cell), "", aliases)}
    found = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or meta(cell).get("locked"):
            continue
        where = f"{name}: {meta(cell).get('grade_id') or f'cell {index + 1}'}"
        found += [f for f in flags_of(source(cell), where, aliases) if _why(f) not in given]
    return found


def _why(flag: str) -> str:
    return flag[flag.rindex("(") + 1:-1]
