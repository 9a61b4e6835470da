"""Lab 06 (async staleness): fast checks particular to this lab, on the solution's pure-numpy exercises.

The structure of the notebook, its grading and its mutants (corpus.py, beside this file) are checked for every lab
by the shared tests. Here: the three exercises that need no processes are executed from the solution notebook
and held against their docstring examples and against each other, and the contract of stability_limit is
checked not to give its answer away. Takes well under a second.
"""

from __future__ import annotations

import ast
import json
import math
import re

import numpy as np
import pytest

from tests.common import COURSE, SOLUTIONS

NOTEBOOK = SOLUTIONS / "06_async_staleness" / "async_staleness.ipynb"
RELEASED = COURSE / "06_async_staleness" / "async_staleness.ipynb"
PURE = ["delayed_gd", "spectral_radius", "stability_limit"]


def _sources() -> dict[str, str]:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in cells
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


@pytest.fixture(scope="module")
def solution() -> dict:
    namespace = {"np": np, "math": math}
    for name in PURE:
        exec(_sources()[name], namespace)
    return namespace


def test_docstring_examples(solution: dict) -> None:
    assert solution["delayed_gd"](0.5, 1, 3).tolist() == [1.0, 0.5, 0.0, -0.25]
    assert solution["spectral_radius"](0.5, 0) == 0.5
    assert solution["stability_limit"](0) == 2.0


def test_the_closed_form_is_where_the_spectral_radius_reaches_one(solution: dict) -> None:
    for tau in range(0, 21):
        limit = solution["stability_limit"](tau)
        assert solution["spectral_radius"](limit * (1 - 1e-6), tau) < 1 < solution["spectral_radius"](
            limit * (1 + 1e-6), tau), tau


def test_the_simulation_grows_like_the_spectral_radius(solution: dict) -> None:
    for a, tau in [(0.5, 2), (0.5, 3), (1.2, 1)]:
        trajectory = np.abs(solution["delayed_gd"](a, tau, 600))
        rate = (trajectory[-40:].max() / trajectory[-240:-200].max()) ** (1 / 200)
        assert abs(rate - solution["spectral_radius"](a, tau)) < 2e-3, (a, tau, rate)


def test_the_contract_of_stability_limit_does_not_give_the_formula() -> None:
    """Students derive the boundary: the docstring must not state it."""
    docstring = re.search(r'"""(.*?)"""', _sources()["stability_limit"], re.DOTALL)[1]
    assert not re.search(r"\b(sin|pi|asin)\b", docstring), docstring


def test_the_release_gives_neither_the_closed_form_nor_a_ready_made_spectral_radius() -> None:
    """What students see (course/, hidden tests removed) states the asymptote pi / (2 tau), never the boundary itself.

    Nor does a visible test compute a spectral radius (np.roots) that 6.2 could copy, or a numerical boundary for 6.3.
    """
    cells = json.loads(RELEASED.read_text())["cells"]
    for index, text in enumerate("".join(c["source"]) for c in cells):
        assert not re.search(r"sin\s*\(\s*(math\.|np\.)?pi|\\sin\s*\\frac\{\\pi\}", text), (index, text[:300])
        assert "np.roots" not in text, (index, text[:300])


def test_the_servers_messages_stay_on_the_cpu() -> None:
    """The server receives from any source, which NCCL cannot do: every message it makes is a CPU tensor (Gloo's).

    The shared device check (tests/test_devices.py) accepts any device=; here it must be the CPU, or on a GPU box
    the messages would go to NCCL. The notebook says why where it introduces the server.
    """
    tree = ast.parse(_sources()["parameter_server"])
    factories = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                 and isinstance(c.func.value, ast.Name) and c.func.value.id == "torch"
                 and c.func.attr in {"tensor", "zeros", "ones", "empty", "full"}]
    assert factories
    for call in factories:
        devices = [ast.literal_eval(k.value) for k in call.keywords if k.arg == "device"]
        assert devices == ["cpu"], ast.unparse(call)
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    intro = next("".join(c["source"]) for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == "ps-md")
    assert "NCCL cannot receive from any source" in intro and 'device="cpu"' in intro
