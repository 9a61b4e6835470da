"""Derivations graded as derivations: what a student must derive is printed nowhere in the student edition.

Each entry, in its lab's tests/labs/labNN/derivations.py, names a graded function whose answer is derived
(docs/derivations.md), the ways its result would be written, and its values at three points of its hidden tests.
The student edition must hold none of them: the release of its lab (every cell, markdown and code, the exercises' own
test cells too: their comments, messages and expected outputs are read as closely as the prose), the student README,
the edition's template files and utils/. An entry's `sentences` catch a statement in any word order: all of a
sentence's fragments in one sentence of a text (a sentence ends at . ; : ? ! followed by a space or a line's end, or at
a blank line; a comment's leading # is dropped first). An entry's `quoted` values are the answer at the notebook's own
examples (a paper's model, a real machine), which an expected output beside the exercise must not print either. Each
entry must also describe its answer, so that the scan could fail: the solution region computes one of the forms, the
exercise's hidden tests state each value, and an instructor cell of the solution each quoted value.

Forms are compared after `normal` and `unstarred`: no whitespace, no LaTeX backslashes, braces, dollar signs or
multiplication signs, lower case. So
`$K^* = \\sqrt{C/\\alpha}$`, `\\sqrt{C / \\alpha}` and `sqrt(C / alpha)` all contain `sqrtc/alpha` or
`sqrt(c/alpha)`. Values are compared as numbers rounded to 3 significant figures, `f"{value:.3g}"`: every number of a
text counts, written as 407350296576, 407,350,296,576, 4.07e11, 4.07 \\times 10^{11} or 10^{11}.
"""

from __future__ import annotations

import re

import pytest

from classroom.export import student_readme
from nbplumbing.cells import meta
from tests import labs
from tests.common import ROOT, lab_marker, lab_params, notebook
from tests.corpus.common import HIDDEN, SOLUTION, cells, solution_notebook
from tests.labs import Derivation

DERIVATIONS = labs.derivations()  # every lab's entries (tests/labs/labNN/derivations.py)

# A number as a text may write it: digits (with thousands separators), a decimal part, and a power of ten written as
# e11, "times 10^11", "cdot 10^{11}", "* 10**11", or 10^11 alone. The lookbehind keeps the digits of names (fc1) out.
NUMBER = re.compile(r"""(?<![\w.])(?P<mantissa>\d{1,3}(?:[,_]\d{3})+(?!\d)|\d+(?:_\d+)*)(?P<fraction>\.\d+)?
    (?:e(?P<e>[+-]?\d+)
      |\s*(?:times|cdot|\*|×)\s*10\s*(?:\^|\*\*)\s*\(?(?P<times>[+-]?\d+)
      |(?<=10)(?:\^|\*\*)\s*\(?(?P<power>[+-]?\d+))?""", re.VERBOSE)


def normal(text: str) -> str:
    """The text without whitespace, LaTeX backslashes, braces and dollar signs, in lower case."""
    return re.sub(r"[\s\\{}$]", "", text).lower()


def three_figures(text: str) -> set[str]:
    """Every number in `text`, as f"{value:.3g}" writes it.

    >>> sorted(three_figures("407350296576 bytes, 4.07 \\\\times 10^{11}; 10^{11}; 1,234,444,433,211 and fc1 of 7,919"))
    ['1.23e+12', '1e+11', '4.07e+11', '7.92e+03']
    """
    found = set()
    for m in NUMBER.finditer(re.sub(r"[\\{}$]", "", text).lower()):
        if m["power"] is not None:
            value = 10.0 ** int(m["power"])
        else:
            exponent = int(m["e"] or m["times"] or 0)
            value = float(re.sub(r"[,_]", "", m["mantissa"]) + (m["fraction"] or "")) * 10.0 ** exponent
        found.add(f"{value:.3g}")
    return found


def grading_cell(nb: dict, grade_id: str) -> str:
    """The grade_id of the test cell that grades the solution cell `grade_id`: the first test cell after it."""
    ids = [meta(c).get("grade_id") for c in nb["cells"]]
    after = nb["cells"][ids.index(grade_id) + 1:]
    return next(meta(c)["grade_id"] for c in after if meta(c).get("grade") and not meta(c).get("solution"))


def release_cells(derivation: Derivation) -> dict[str, str]:
    """The student's release of the derivation's lab, by cell (grade_id, else the cell id): every cell."""
    nb = notebook(ROOT / "course" / derivation.assignment / solution_notebook(derivation.assignment).name)
    return {meta(c).get("grade_id") or c.get("id", str(i)): "".join(c["source"]) for i, c in enumerate(nb["cells"])}


def student_files() -> dict[str, str]:
    """The student edition's texts beyond the releases: its README, the template's files and utils/."""
    files = {"README.md (student edition)": student_readme(ROOT)}
    paths = sorted((ROOT / "classroom" / "template").iterdir()) + sorted((ROOT / "utils").glob("*.py"))
    return files | {str(p.relative_to(ROOT)): p.read_text() for p in paths if p.is_file()}


def sentences(text: str) -> list[str]:
    """The text's sentences, each as `normal` writes it: comments' leading # dropped, cut at . ; : ? ! before a space
    or a line's end, and at blank lines.

    >>> sentences("# Per unit, two all-gathers\\n# and one reduce-scatter. Then: nothing else.\\n\\nA new one")
    ['perunit,twoall-gathersandonereduce-scatter.', 'then:', 'nothingelse.', 'anewone']
    """
    text = re.sub(r"^[ \t]*#+", "", text, flags=re.MULTILINE)
    pieces = re.split(r"(?<=[.;:?!])(?=\s)|\n[ \t]*\n", text)
    return [normal(piece) for piece in pieces if normal(piece)]


def unstarred(text: str) -> str:
    """`text` without multiplication signs, so that a product reads alike either way.

    >>> unstarred(normal("at least 2 * (N - 1) * M bytes")) == unstarred(normal("at least $2(N-1)M$ bytes"))
    True
    """
    return text.replace("*", "")


def printed(derivation: Derivation, texts: dict[str, str]) -> list[str]:
    """Where the texts print one of the derivation's forms, sentences, values or quoted values: 'where: what' for each.

    Forms and sentences are compared `unstarred`: 2 * (N - 1) * M is found where 2(N-1)M is listed, and the reverse.
    """
    found = []
    for where, text in texts.items():
        found += [f"{where}: {form!r}" for form in derivation.forms if unstarred(form) in unstarred(normal(text))]
        found += [f"{where}: {' ... '.join(fragments)!r} in one sentence" for fragments in derivation.sentences
                  if any(all(unstarred(f) in unstarred(sentence) for f in fragments) for sentence in sentences(text))]
        numbers = three_figures(text)
        found += [f"{where}: the value {value}" for value in sorted(set(derivation.values) & numbers)]
        found += [f"{where}: the example's value {value}" for value in sorted(set(derivation.quoted) & numbers)]
    return found


def derivation_params() -> list:
    return [pytest.param(d, marks=getattr(pytest.mark, lab_marker(d.assignment)), id=f"{d.assignment}/{d.grade_id}")
            for d in DERIVATIONS]


@pytest.mark.parametrize("derivation", derivation_params())
def test_no_derived_result_is_printed_in_the_release(derivation: Derivation) -> None:
    found = printed(derivation, release_cells(derivation))
    assert not found, (f"course/{derivation.assignment} prints what {derivation.grade_id} must derive, outside its "
                       f"test cell: {found} (move it out of the release, into the solution region or an instructor "
                       "cell)")


@pytest.mark.parametrize("derivation", derivation_params())
def test_no_derived_result_is_printed_in_the_student_edition(derivation: Derivation) -> None:
    found = printed(derivation, student_files())
    assert not found, f"the student edition prints what {derivation.grade_id} must derive: {found}"


@pytest.mark.parametrize("derivation", derivation_params())
def test_the_forms_describe_the_solution(derivation: Derivation) -> None:
    """The solution region of the graded cell computes one of the forms: the scan above is not vacuous."""
    cell = cells(notebook(solution_notebook(derivation.assignment)))[derivation.grade_id]
    solution = normal("".join(m[0] for m in SOLUTION.finditer("".join(cell["source"]))))
    assert any(form in solution for form in derivation.forms), (
        f"none of the forms listed for {derivation.grade_id} occurs in its solution: {derivation.forms}")


@pytest.mark.parametrize("derivation", [p for p in derivation_params() if p.values[0].values])
def test_the_values_are_the_hidden_tests(derivation: Derivation) -> None:
    """Three values, each one that the exercise's hidden tests assert, written there as a number."""
    nb = notebook(solution_notebook(derivation.assignment))
    test = "".join(cells(nb)[grading_cell(nb, derivation.grade_id)]["source"])
    hidden = three_figures("".join(m[0] for m in HIDDEN.finditer(test)))
    assert len(set(derivation.values)) == 3, f"{derivation.grade_id}: {derivation.values} are not three values"
    missing = [value for value in derivation.values if value not in hidden]
    assert not missing, f"{derivation.grade_id}: the hidden tests of its test cell state no value {missing}"


@pytest.mark.parametrize("derivation", [p for p in derivation_params() if p.values[0].quoted])
def test_the_quoted_values_are_checked_in_the_solution(derivation: Derivation) -> None:
    """Each quoted value is the answer's at an example of the notebook: an instructor cell of the solution states it."""
    nb = notebook(solution_notebook(derivation.assignment))
    stated = set().union(*(three_figures("".join(cell["source"])) for cell in nb["cells"]
                           if "instructor" in cell["metadata"].get("tags", [])))
    missing = [value for value in derivation.quoted if value not in stated]
    assert not missing, f"{derivation.grade_id}: no instructor cell of the solution states the quoted values {missing}"


@pytest.mark.parametrize("assignment", lab_params(sorted({d.assignment for d in DERIVATIONS})))
def test_instructor_cells_leave_the_release(assignment: str) -> None:
    """A cell tagged "instructor" in solutions/ (a derivation's argument, its exact checks) is not in course/."""
    tagged = [cell for cell in notebook(solution_notebook(assignment))["cells"]
              if "instructor" in cell["metadata"].get("tags", [])]
    release = notebook(ROOT / "course" / assignment / solution_notebook(assignment).name)
    sources = {"".join(cell["source"]) for cell in release["cells"]}
    left = [cell["id"] for cell in tagged if "".join(cell["source"]) in sources]
    assert not left, f"course/{assignment} keeps the instructor-only cells {left}: run `make release`"
