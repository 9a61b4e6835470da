"""Tampering: what a submission changed that it must not, and what nbgrader itself reports of it.

A submission is compared with the released notebook, cell by cell: a changed locked cell, a deleted or unmarked
test cell, changed points, and a student cell that rebinds a name the locked cells define (`launch`, `np`, a
helper) or patches an attribute of one (`torch.equal = ...`). Test cells that run after such a replacement test
nothing, so the grader withholds their points for an instructor to review.

A student cell that reaches torch's private distributed internals (`private_internals`) is flagged too, for an
instructor to read: the traffic ledger (utils.p2p_ledger) refuses what they reach at run time where it can, and
these are the spellings that can get past it. Its points are left to the tests.
"""

from __future__ import annotations

import ast
import re

from nbplumbing.cells import meta, parse_cell, source

# Names that a submission has no business using, each a way past utils.p2p_ledger: torch's functional collectives and
# the dispatcher's operators (torch.ops.c10d, torch.ops._c10d_functional), a group's backends and torch's C++
# bindings (which skip the process group), the dispatch-mode stack (the ledger's last level), the ledger's own switches,
# and those of utils.nccl_rules (which the tests that run under NCCL's rules rely on).
PRIVATE_INTERNALS = frozenset({
    "_functional_collectives", "_functional_collectives_impl", "_c10d_functional", "c10d_functional",
    "_c10d_functional_autograd", "c10d", "_dtensor", "symm_mem", "_symmetric_memory",
    "_get_backend", "ProcessGroupGloo", "ProcessGroupNCCL", "_distributed_c10d", "_broadcast_coalesced",
    "_jit_get_operation", "_python_dispatch", "_pop_torch_dispatch_stack", "_unset_dispatch_mode",
    "_DisableTorchDispatch", "unrestricted", "_calls", "NcclRules", "emulating",
})


def find_tampering(nb: dict, released: dict, name: str) -> tuple[list[str], list[str]]:
    """(what was tampered with, the test cells that ran after a cell that replaced a grading helper)."""
    found: list[str] = []
    untrusted: list[str] = []
    after_patch = False
    theirs = {meta(c)["grade_id"]: c for c in nb["cells"] if meta(c).get("grade_id")}
    locked_code = []
    for cell in released["cells"]:
        info = meta(cell)
        gid = info.get("grade_id")
        if not gid:
            continue
        if cell["cell_type"] == "code" and info.get("locked") and not info.get("grade"):
            locked_code.append(source(cell))
        mine = theirs.get(gid)
        if info.get("grade"):
            if mine is None:
                found.append(f"{name}: deleted the test cell {gid}")
            elif float(meta(mine).get("points", 0)) != float(info.get("points", 0)):
                found.append(f"{name}: changed the points of {gid}")
        if info.get("locked") and mine is not None and source(mine).strip() != source(cell).strip():
            found.append(f"{name}: edited the locked cell {gid}")
    protected: dict[str, str] = {}
    for src in locked_code:
        protected.update(_bound_names(src))
    unlocked = [source(c) for c in released["cells"] if c["cell_type"] == "code" and not meta(c).get("locked")]
    allowed = {n for src in unlocked for n in _bound_names(src)}
    provided = {n for src in unlocked for n in private_internals(src)}
    roots = {how.split(".")[0] for how in protected.values() if how}
    aliases = set(protected) | {n for c in nb["cells"] if c["cell_type"] == "code" and not meta(c).get("locked")
                                for n in _module_aliases(source(c), roots, set(protected))}
    for cell in nb["cells"]:
        if after_patch and meta(cell).get("grade") and meta(cell).get("grade_id"):
            untrusted.append(meta(cell)["grade_id"])
        if cell["cell_type"] != "code" or meta(cell).get("locked"):
            continue
        rebound = sorted(n for n, how in _bound_names(source(cell)).items()
                         if n in protected and n not in allowed and (not how or how != protected[n]))
        patched = sorted(_patched_attributes(source(cell), aliases))
        where = meta(cell).get("grade_id") or "a cell"
        if rebound:
            found.append(f"{name}: {where} redefines {', '.join(rebound)} (a grading helper)")
        if patched:
            found.append(f"{name}: {where} replaces {', '.join(patched)} (a grading helper)")
        internals = sorted(private_internals(source(cell)) - provided)
        if internals:
            found.append(f"{name}: {where} uses torch's private distributed internals ({', '.join(internals)})")
        after_patch = after_patch or bool(rebound or patched)
    return found, untrusted


def _bound_names(source: str) -> dict[str, str]:
    """Names a cell binds at top level (def, class, import, assignment, `global` in a function) -> how.

    "how" is the import for an import ("numpy as np") and "" otherwise, so that re-importing what the setup
    cell imports, under the same name, is not taken for a redefinition.
    """
    tree = parse_cell(source)
    if tree is None:
        return {}
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = ""
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            prefix = f"{node.module}." if isinstance(node, ast.ImportFrom) else ""
            for a in node.names:
                names[(a.asname or a.name).split(".")[0]] = prefix + a.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update((n, "") for target in targets for n in _target_names(target))
    names.update((n, "") for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names)
    return names


def _module_aliases(source: str, roots: set[str], protected: set[str]) -> set[str]:
    """Names a cell binds to what a locked cell imports: `import torch as t`, `from torch import nn as n` (the same
    module, another name) and `t2 = torch` (a name for a protected one)."""
    tree = parse_cell(source)
    if tree is None:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in roots)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in roots:
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in protected:
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _target_names(target: ast.expr) -> list[str]:
    """The plain names an assignment target binds (`a`, `a, b`, `*a`), not `a.b` or `a[0]`."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _target_names(elt)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _patched_attributes(source: str, protected: set[str]) -> set[str]:
    """`np.allclose = ...`, `setattr(torch, "equal", ...)` on a protected name, anywhere in the cell."""
    tree = parse_cell(source)
    if tree is None:
        return set()
    out = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id in protected:
                out.add(f"{target.value.id}.{target.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in protected:
            out.add(f"{node.args[0].id}.<setattr>")
    return out


def private_internals(source: str) -> set[str]:
    """The PRIVATE_INTERNALS a cell names: as an attribute, in an import, or as a part of a dotted string
    (`getattr(torch.ops, "c10d")`, `importlib.import_module("torch.distributed._functional_collectives")`)."""
    tree = parse_cell(source)
    if tree is None:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(node.module.split(".") if isinstance(node, ast.ImportFrom) and node.module else [])
            names.update(part for alias in node.names for part in alias.name.split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.update(re.split(r"\.|::", node.value))
    return names & PRIVATE_INTERNALS


def reported_by_nbgrader(log: str) -> list[str]:
    """What nbgrader itself reported: re-added missing cells, reset points or cell types.

    Not "Attribute 'checksum' ... has changed": nbgrader logs it for every test cell of every submission,
    honest ones too, because the gradebook's copy holds the hidden tests the student's copy lacks.
    """
    found = []
    for m in re.finditer(r"Missing grade cell (\S+) encountered", log):
        found.append(f"nbgrader put back the deleted test cell {m[1]}")
    for m in re.finditer(r"Attribute '(points|locked|cell_type)' for cell (\S+) has changed", log):
        found.append(f"nbgrader reset the {m[1]} of {m[2]}")
    return sorted(set(found))
