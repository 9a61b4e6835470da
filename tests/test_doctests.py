"""Every `>>>` example in a docstring of the course's Python code runs, and gives what the docstring says.

Each module of utils/, nbplumbing/, autograder/, benchmark/, classroom/ and tests/ that holds `>>>` is imported and
its doctests run (as `python -m doctest` would); every `>>>` line of the file must be an example that was found and
run, so that an example outside a docstring, or in a module that cannot be imported, fails here instead of going
unread.
"""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

from tests.common import ROOT

PACKAGES = ("utils", "nbplumbing", "autograder", "benchmark", "classroom", "tests")
PROMPT = re.compile(r"^\s*>>> ", re.MULTILINE)
MODULES = sorted(path.relative_to(ROOT) for package in PACKAGES for path in (ROOT / package).rglob("*.py")
                 if PROMPT.search(path.read_text()) and path.resolve() != Path(__file__).resolve())


def _module_name(path: Path) -> str:
    return ".".join(path.with_suffix("").parts).removesuffix(".__init__")


def test_the_course_has_doctests() -> None:
    assert {Path("utils/timeouts.py"), Path("nbplumbing/cells.py"), Path("utils/launch_report.py")} <= set(MODULES)


@pytest.mark.parametrize("path", MODULES, ids=str)
def test_docstring_examples_run(path: Path) -> None:
    module = importlib.import_module(_module_name(path))
    tests = doctest.DocTestFinder(exclude_empty=True).find(module)
    examples = sum(len(test.examples) for test in tests if test.filename and Path(test.filename) == ROOT / path)
    prompts = len(PROMPT.findall((ROOT / path).read_text()))
    assert examples == prompts, f"{path}: {prompts} lines start with >>>, but only {examples} are docstring examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
