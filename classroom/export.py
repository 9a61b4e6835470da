"""The student edition of the course: what a class gets, without solutions, hidden tests, references or mutants.

    python -m classroom export OUT         # (make student-repo OUT=dir)

OUT becomes a git repository with one commit, ready to push: course/ (the release, every lab in it), utils/,
the pinned requirements.txt, environment.yml and pyproject.toml (the install of utils/), and three files made
from this repository's own:
- Makefile: this Makefile's variables and its set-up, `help`, `lab` and `clean` rules, and a `test` rule that runs
  the visible tests (STUDENT_TEST_RULE): nothing is written twice, so the student's `make lab` is the same;
- README.md: the student sections (STUDENT_SECTIONS) of this README and of docs/, under a note on what it is;
- tests/test_labs.py: classroom/template/student_tests.py, every lab's visible tests as the Validate button runs them.
Every notebook of course/ keeps its bytes but its first cell: the release's banner (classroom/template/
release_header.ipynb) says how the full repository makes it, from solutions/ with `make release`, neither of which
the edition has; here it says what a student does (STUDENT_BANNER).
Nothing else is copied: solutions/, autograder/, benchmark/, classroom/ and tests/ stay here. `leaks` checks the result.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from nbplumbing.adapter import REPO_ROOT, PipelineError, course_dir

TEMPLATE = Path(__file__).resolve().with_name("template")  # the files made for the student edition
COPIED = ("utils", "jupyter", "requirements.txt", "environment.yml", "pyproject.toml", ".gitignore")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info")
STUDENT_RULES = {"help", "$(STAMP)", "lab", "class-lab", "clean"}  # the Makefile rules a student gets as they are
STUDENT_TEST_RULE = """\
test: $(STAMP)  ## every lab's visible tests, as the Validate button runs them (one lab: make test LAB=01)
\t$(BIN)/python -m pytest tests $(if $(LAB),-k "$(LAB)") $(PYTEST_ARGS)
"""
# The student edition's README: these sections, in this order, of README.md and of docs/. A document's own title
# ("# Troubleshooting") stands for the whole document, its headings one level down.
STUDENT_SECTIONS = (("README.md", "Quick start (students)"),
                    ("docs/students.md", "The labs in detail"), ("docs/students.md", "How ranks run from a notebook"),
                    ("docs/students.md", "Conda users"), ("docs/troubleshooting.md", "Troubleshooting"))
EDITION_NOTE = """\
## This repository

The student edition of the course: the notebooks in `course/` and the small library they import, `utils/`.
`make test` runs the visible tests of every lab, the same check as the *Validate* button
(`make test LAB=01` for one lab); every test fails with `NotImplementedError` until you solve its exercise.
Your instructor grades with more tests than the ones you see.
"""
# The first cell of each of the edition's notebooks, in place of the release's banner: what a student does. {lab}: the
# lab's number ("02"), for the test rule above.
BANNER_ID = "generated-banner"
STUDENT_BANNER = """\
*Your copy of this lab: solve the exercises in the cells marked `YOUR CODE HERE` and run the notebook from the top.
The *Validate* button (or `make test LAB={lab}` in a terminal, in the folder above `course/`) runs the visible tests;
your instructor grades with more tests than the ones you see.*"""
# The same cell in a notebook that a class fetches from nbgrader's exchange (classroom/hub/exchange.py's ClassRelease):
# the student holds that notebook alone, no Makefile.
CLASS_BANNER = """\
*Your copy of this lab: solve the exercises in the cells marked `YOUR CODE HERE` and run the notebook from the top.
The *Validate* button runs the visible tests; submit from the *Assignments* tab. Your instructor grades with more
tests than the ones you see.*"""
# What must never reach students: nbgrader's markers of answers and hidden tests, and the instructor's folders.
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
INSTRUCTOR_PATHS = ("solutions", "autograder", "benchmark", "classroom", "tests/corpus", "tests/labs", "submitted",
                    "autograded", "feedback", "gradebook.db")


def export(out: Path, root: Path = REPO_ROOT) -> Path:
    """Write the student edition of `root` into `out` (new or empty) as a git repository; return `out`."""
    out = Path(out).resolve()
    if out.exists() and any(out.iterdir()):
        raise PipelineError(f"{out} is not empty: the student edition goes into a new or empty folder")
    release = course_dir(root, "release")
    if not any(release.glob("*/*.ipynb")):
        raise PipelineError(f"no notebooks in {release}: run `make release` first")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(release, out / "course", ignore=IGNORED)
    for path in (out / "course").glob("*/*.ipynb"):
        path.write_text(student_notebook(path.read_text(), path.parent.name[:2]))
    for name in COPIED:
        source = Path(root) / name
        shutil.copytree(source, out / name, ignore=IGNORED) if source.is_dir() else shutil.copy(source, out / name)
    (out / "Makefile").write_text(student_makefile((Path(root) / "Makefile").read_text()))
    (out / "README.md").write_text(student_readme(root))
    (out / "tests").mkdir()
    shutil.copy(TEMPLATE / "student_tests.py", out / "tests" / "test_labs.py")
    if found := leaks(out):
        shutil.rmtree(out)
        raise PipelineError("the student edition would hold answers; nothing was written:\n  " + "\n  ".join(found))
    _git_commit(out)
    return out


def student_notebook(text: str, lab: str, banner: str = STUDENT_BANNER) -> str:
    """A released notebook's text with its first cell, the release's banner, saying what a student does instead
    (`banner`: the student edition's, or CLASS_BANNER).

    The rest is kept byte for byte: nbgrader writes notebooks as json.dumps(..., indent=1, ensure_ascii=False) does.

    Raises:
        PipelineError: the first cell is not the banner (cell id BANNER_ID).
    """
    notebook = json.loads(text)
    first = notebook["cells"][0] if notebook["cells"] else {}
    if first.get("id") != BANNER_ID:
        raise PipelineError(f"lab {lab}: the released notebook does not start with the banner cell {BANNER_ID!r}")
    lines = banner.format(lab=lab).split("\n")
    first["source"] = [line + "\n" for line in lines[:-1]] + lines[-1:]
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def student_makefile(makefile: str) -> str:
    """The Makefile's paragraphs (blank-line separated) that define variables or STUDENT_RULES, and the test rule.

    A paragraph that defines any other rule is left out whole, and so is the .PHONY line (a new one is written).
    """
    kept = []
    for paragraph in re.split(r"\n\s*\n", makefile.strip()):
        rules = set(re.findall(r"^([^\s#=:][^=:]*):(?!=)", paragraph, re.MULTILINE))
        if rules <= STUDENT_RULES:
            kept.append(paragraph)
    missing = STUDENT_RULES - {r for p in kept for r in re.findall(r"^([^\s#=:][^=:]*):(?!=)", p, re.MULTILINE)}
    if missing:
        raise PipelineError(f"the Makefile has no rule {', '.join(sorted(missing))} for the student edition")
    phony = ".PHONY: " + " ".join(sorted(r for r in STUDENT_RULES | {"test"} if not r.startswith("$")))
    return "\n\n".join([kept[0], phony, *kept[1:], STUDENT_TEST_RULE.strip()]) + "\n"


def student_readme(root: Path = REPO_ROOT) -> str:
    """README.md's title and introduction, EDITION_NOTE, and the STUDENT_SECTIONS of README.md and docs/ in order."""
    intro = re.split(r"^(?=## )", (Path(root) / "README.md").read_text(), flags=re.MULTILINE)[0]
    found = {(name, title): text for name in dict.fromkeys(name for name, _ in STUDENT_SECTIONS)
             for title, text in sections((Path(root) / name).read_text()).items()}
    missing = [f"{name}: {title}" for name, title in STUDENT_SECTIONS if (name, title) not in found]
    if missing:
        raise PipelineError(f"no section {missing} for the student edition's README")
    return intro + EDITION_NOTE + "\n" + "".join(found[part] for part in STUDENT_SECTIONS)


def sections(markdown: str) -> dict[str, str]:
    """A document's `## ` sections by title, and the document itself by its `# ` title, every heading one level
    down (a heading is a line that starts with #s and a space, outside a fenced code block)."""
    by_title = {s.splitlines()[0].removeprefix("## ").strip(): s
                for s in re.split(r"^(?=## )", markdown, flags=re.MULTILINE)[1:]}
    if title := re.match(r"# (.+)\n", markdown):
        fenced = re.split(r"^(```.*\n)", markdown, flags=re.MULTILINE)  # text, fence, code, fence, text, ...
        by_title[title[1].strip()] = "".join(part if i % 4 else re.sub(r"^(#+ )", r"#\1", part, flags=re.MULTILINE)
                                             for i, part in enumerate(fenced))
    return by_title


def leaks(folder: Path) -> list[str]:
    """What in `folder` must not reach students: an instructor path, a file holding nbgrader's answer markers."""
    found = [f"{p}/ is the instructor's" for p in INSTRUCTOR_PATHS if (folder / p).exists()]
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and ".git" not in p.relative_to(folder).parts):
        text = path.read_text(errors="replace")
        found += [f"{path.relative_to(folder)} holds '{m}'" for m in MARKERS if m in text]
    return found


def _git_commit(out: Path) -> None:
    """`git init` and one commit of everything, as the instructor's git identity or, without one, the course's."""
    identity = {} if _git("config", "user.email", cwd=out, check=False).stdout.strip() else {
        "GIT_AUTHOR_NAME": "DDP course", "GIT_AUTHOR_EMAIL": "ddp-course@example.invalid",
        "GIT_COMMITTER_NAME": "DDP course", "GIT_COMMITTER_EMAIL": "ddp-course@example.invalid"}
    _git("init", "--quiet", "--initial-branch=main", cwd=out)
    _git("add", "--all", cwd=out)
    _git("commit", "--quiet", "-m", "Student edition of the DDP course", cwd=out, env=identity)


def _git(*args: str, cwd: Path, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if check and done.returncode != 0:
        raise PipelineError(f"git {' '.join(args)} failed in {cwd}:\n{done.stdout}{done.stderr}")
    return done
