"""Lab 10 (gradient compression): no code of the student edition outside the exercises' own cells writes out an
exercise's answer.

The tests of 10.5 and 10.11 need top-k, random-k and error feedback to work while they check something else, and
the test of 10.4 needs the right answer to compare with. Written out in a visible test, such a stand-in or reference is
exercise 10.4's or 10.5's solution, for every student to read. Here every code cell of course/'s notebook but the
exercises' (their contracts and stubs) is parsed, nested functions and classes included, for what only an answer
does: select entries by magnitude (`.abs().topk(`, `.abs().argsort(`, `.abs().sort(`: 10.4's top-k), draw random-k's
indices (`randperm`: 10.4's random-k), set a residual to a difference (10.5's `residual = corrected - sent`), gather
and add up the kept entries (`all_gather_into_tensor(`, `index_add_(`: 10.11). Strings and comments are not code: a
test message may name `torch.randperm` as the contract does. What the derivation exercises must not give away
(10.1-10.3, 10.9, 10.10) tests/test_derivations.py scans for.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from nbplumbing.cells import meta, source

ROOT = Path(__file__).resolve().parents[3]
RELEASE = ROOT / "course" / "10_gradient_compression" / "gradient_compression.ipynb"
SELECTING = {"topk", "argsort", "sort"}  # applied to magnitudes, top-k's selection
GATHERING = {"all_gather_into_tensor": "10.11 (top-k's gather)", "index_add_": "10.11 (adding up the kept entries)",
             "randperm": "10.4 (random-k's draw)"}


def _called_name(call: ast.Call) -> str | None:
    """`f` for f(...), x.f(...) and torch.f(...)."""
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)


def _is_magnitude(node: ast.AST) -> bool:
    """x.abs() or torch.abs(x)."""
    return isinstance(node, ast.Call) and _called_name(node) == "abs"


def answers_in(code: str) -> list[str]:
    """What in `code` writes out an exercise of lab 10: 'line N: what (exercise)'."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call):
            name = _called_name(node)
            on = node.func.value if isinstance(node.func, ast.Attribute) else (node.args[0] if node.args else None)
            if name in SELECTING and (_is_magnitude(on) or any(_is_magnitude(a) for a in node.args[:1])):
                found.append(f"line {node.lineno}: entries selected by magnitude with {name} (10.4's top-k)")
            elif name in GATHERING:
                found.append(f"line {node.lineno}: {name}(...) ({GATHERING[name]})")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named = [t for target in targets for t in ast.walk(target)
                     if getattr(t, "attr", getattr(t, "id", None)) == "residual"]
            if named and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) for n in ast.walk(node.value)):
                found.append(f"line {node.lineno}: the residual set to a difference (10.5's error feedback)")
    return found


def visible_code(notebook: Path) -> dict[str, str]:
    """The code cells of a released notebook but the exercises' own: cell name (grade_id or index) -> source."""
    cells = json.loads(notebook.read_text())["cells"]
    return {meta(c).get("grade_id", f"cell {i}"): source(c) for i, c in enumerate(cells)
            if c["cell_type"] == "code" and not meta(c).get("solution")}


@pytest.mark.parametrize("code, exercise", [
    ("kept = x.reshape(-1).abs().topk(k).indices", "10.4's top-k"),
    ("kept = torch.argsort(x.abs(), descending=True)[:k]", "10.4's top-k"),
    ("kept = torch.randperm(x.numel(), generator=generator)[:k]", "10.4 (random-k's draw)"),
    ("def f(self, grad):\n    def inner():\n        self.residual = corrected - sent\n    return inner", "10.5"),
    ("dist.all_gather_into_tensor(values, sent[kept], async_op=True)", "10.11"),
])
def test_each_pattern_of_an_answer_is_found(code: str, exercise: str) -> None:
    assert any(exercise in line for line in answers_in(code)), answers_in(code)


def test_no_code_outside_the_exercises_writes_out_an_answer() -> None:
    found = [f"{cell}, {line}" for cell, code in visible_code(RELEASE).items() for line in answers_in(code)]
    assert not found, ("the student edition of lab 10 writes out an exercise's answer outside the exercise (move it to "
                       "the hidden tests, or check with a compressor that is no exercise's):\n" + "\n".join(found))
