"""nbgrader's exchange round trip on one machine, and the instructor's JupyterLab on the gradebook it fills.

One course, one exchange folder and two home folders, all temporary. The instructor's course root is a copy of this
repository's Makefile, nbplumbing/, autograder/ and classroom/ with its solutions/ and course/ (links), so that `make
instructor-lab` runs there, never here (`-o .venv/.installed`: the set-up counts as done and is never run; the .venv
is this repository's). The instructor runs the steps the make targets run (`python -m classroom
release-lab|collect|return-feedback`, `python -m autograder autograde`); the student's steps are the calls
JupyterLab's Assignments tab makes (nbgrader's exchange classes, in this process). The student submits a broken case
of the corpus, so the score is known and is not full marks. The smallest lab (by notebook size) keeps the one
autograde short.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
from pathlib import Path

import pytest
from traitlets.config import Config

from autograder.__main__ import main as autograder_main
from classroom.__main__ import main as classroom_main
from classroom.export import CLASS_BANNER
from nbplumbing import adapter
from tests import corpus
from tests.common import ASSIGNMENTS, ROOT, notebook, own_lines, page_text, secret_lines, text_lines
from tests.corpus.common import GRADED, HIDDEN, write_case
from tests.test_lab_server import make_lab, page_config

pytestmark = pytest.mark.slow  # one autograde run (about 40 s): left out of `make test-fast`, as the other such runs

LAB = min(ASSIGNMENTS, key=lambda a: corpus.solution_notebook(a).stat().st_size)
STUDENT = pwd.getpwuid(os.getuid()).pw_name  # who submits: collect takes a submission only from its owner
COURSE_ID = adapter.nbgrader_config().CourseDirectory.course_id
SLOW = re.compile("deadlock|hang|loop|sleep|slow")  # corpus cases that wait for a time limit: not this one


def student_step(step: str, home: Path, exchange: Path) -> None:
    """What the Assignments tab runs for the student: FetchAssignment, Submit or FetchFeedback."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange import ExchangeFactory

    config = Config()
    config.Exchange.root, config.Exchange.cache = str(exchange), str(home / ".nbgrader-cache")
    config.Exchange.assignment_dir = str(home)
    config.CourseDirectory.update(course_id=COURSE_ID, assignment_id=LAB, student_id=STUDENT, root=str(home))
    coursedir = CourseDirectory(config=config)
    action = getattr(ExchangeFactory(config=config), step)
    action(coursedir=coursedir, authenticator=Authenticator(config=config), config=config).start()


@pytest.fixture(scope="module")
def trip(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The whole round trip; returns the folders and the case submitted."""
    tmp = tmp_path_factory.mktemp("exchange")
    root, home, exchange = tmp / "instructor", tmp / "student", tmp / "exchange"
    root.mkdir()
    home.mkdir()
    shutil.copy(ROOT / "Makefile", root / "Makefile")
    # the plumbing, the grader's config, and the instructor's and the release header
    for package in ("nbplumbing", "autograder", "classroom"):
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("solutions", "course", ".venv"):
        (root / name).symlink_to((ROOT / name).resolve())
    case = next(c for c in corpus.cases(LAB) if c.status == GRADED and c.loses and not c.tampered
                and c.name != "release" and not SLOW.search(c.name))
    where = ["--root", str(root), "--exchange", str(exchange)]

    assert classroom_main(["release-lab", LAB, *where]) == 0
    student_step("FetchAssignment", home, exchange)
    [fetched] = sorted((home / LAB).glob("*.ipynb"))
    banner = "".join(notebook(fetched)["cells"][0]["source"])
    solved = write_case(tmp / "solved", LAB, case)  # the student's work, written over the fetched notebook
    shutil.copy(solved, fetched)
    student_step("Submit", home, exchange)
    assert classroom_main(["collect", LAB, *where]) == 0
    assert autograder_main(["autograde", "--root", str(root), "--workers", "1", "--fast"]) == 0
    assert classroom_main(["return-feedback", LAB, *where]) == 0
    student_step("FetchFeedback", home, exchange)
    return {"root": root, "home": home, "case": case, "notebook": fetched.stem, "banner": banner}


def test_the_fetched_notebook_says_what_a_student_does(trip: dict) -> None:
    """Its first cell is the class's banner, not course/'s, which names `make release` and solutions/."""
    assert trip["banner"] == CLASS_BANNER, trip["banner"]
    assert "solutions/" not in trip["banner"] and "make release" not in trip["banner"]


def test_student_holds_feedback_with_the_right_score(trip: dict) -> None:
    points = corpus.test_cells(LAB)
    full = sum(points.values())
    want = full - sum(points[c] for c in trip["case"].loses)
    pages = sorted((trip["home"] / LAB / "feedback").glob(f"*/{trip['notebook']}.html"))
    assert len(pages) == 1, f"the student's feedback: {pages}"
    text = page_text(pages[0])
    assert f"(Score: {want:.1f} / {full:.1f})" in text, text[:500]
    assert adapter.read_score(trip["root"], STUDENT, LAB) == (want, full)
    [graded] = (adapter.course_dir(trip["root"], "autograded") / STUDENT / LAB).glob("*.ipynb")
    leaked = (secret_lines(LAB, HIDDEN) - own_lines(notebook(graded))) & text_lines(text)
    assert not leaked, f"the student's feedback shows hidden tests: {sorted(leaked)[:5]}"


def test_instructor_lab_serves_formgrader_on_the_gradebook(trip: dict, tmp_path: Path) -> None:
    """`make instructor-lab`: formgrader answers, lists every lab of solutions/ and the one graded submission;
    the instructor's plugins are on in that JupyterLab."""
    with make_lab(tmp_path, repo=trip["root"], target="instructor-lab", make_options=("-o", ".venv/.installed")) \
            as (lab, _):
        assert lab.request("/formgrader")[0] == 200
        listed = {a["name"]: a for a in lab.json("/formgrader/api/assignments")}
        disabled = set(page_config(lab)["disabledExtensions"])
    assert set(listed) == set(ASSIGNMENTS), sorted(listed)
    assert listed[LAB]["num_submissions"] == 1, listed[LAB]
    assert not {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment"} & disabled, disabled
