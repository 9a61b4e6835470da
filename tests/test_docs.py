"""The documents: README.md (an entry page), docs/*.md (one per reader) and CONTRIBUTING.md.

Every link and every reference to a section resolves, from the documents, the code and the notebooks; every
command they give names what exists: a Makefile target and its variables, a module of `python -m` and the options
of its command line; and the student edition's README is made of student sections that hold no instructor's link.
Seconds.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from classroom import export
from nbplumbing.adapter import PipelineError
from tests.common import ASSIGNMENTS, ROOT, lab_params

DOCUMENTS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
README_MOST_LINES = 150  # the entry page: what the course is, the three doors, the quick start, the labs, what next
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
# A reference to a section in prose: `docs/hub.md (*How big a server*)`, `(README, "Derivation exercises")`.
REFERENCE = re.compile(r"""(?P<file>README(?:\.md)?|CONTRIBUTING\.md|docs/[\w-]+\.md)`?\)?[,:]?\s*\(?
    (?:"(?P<quoted>[A-Z][^"\n]*)"|\*(?P<starred>[A-Z][^*\n]*)\*)""", re.VERBOSE)
CODE = re.compile(r"^```[^\n]*\n(?P<block>.*?)^```|`(?P<span>[^`\n]+)`", re.DOTALL | re.MULTILINE)
MAKE = re.compile(r"(?:^|&&|;|\()\s*make\s+(?P<args>[^#;&|)\n]*)")  # make where a command starts
PYTHON_M = re.compile(r"(?:python(?:3(?:\.11)?)?|torchrun)\s[^#;&|\n]*?-m\s+(?P<module>[\w.]+)(?P<args>[^#;&|\n]*)")
ARGS_OF = {"GRADE_ARGS": "autograder", "HUB_ARGS": "classroom/hub", "BENCH_ARGS": "benchmark"}  # make var -> code


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(markdown: str) -> list[str]:
    """The headings of a markdown text, outside its fenced code blocks."""
    outside = re.sub(r"^```.*?^```", "", markdown, flags=re.DOTALL | re.MULTILINE)
    return [h.strip() for h in re.findall(r"^#+ (.+)$", outside, flags=re.MULTILINE)]


def titles(markdown: str) -> list[str]:
    """What a reference may name: the headings, and the bold lead-ins of paragraphs (**How big a server.**)."""
    return headings(markdown) + [b.strip() for b in re.findall(r"\*\*([^*\n]+)\*\*", markdown)]


def markdown_texts() -> dict[str, str]:
    """The documents, and each solution notebook's markdown cells, by the path their links are relative to."""
    texts = {relative(p): p.read_text() for p in DOCUMENTS}
    for nb in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        texts[relative(nb)] = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return texts


def link_problems(where: str, text: str) -> list[str]:
    problems = []
    for target in (m["target"] for m in LINK.finditer(text)):
        if re.match(r"[a-z]+:", target):
            continue  # a URL: not ours to check here
        path, _, anchor = target.partition("#")
        file = (ROOT / where).parent / path if path else ROOT / where
        if not file.exists():
            problems.append(f"{where}: the link {target} names no file")
        elif anchor and anchor not in {slug(h) for h in headings(file.read_text())}:
            problems.append(f"{where}: the link {target} names no heading of {relative(file.resolve())}")
    return problems


def test_the_readme_is_an_entry_page() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MOST_LINES, f"README.md has {lines} lines: move what one reader needs into docs/"


def test_every_document_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    unlinked = [relative(p) for p in DOCUMENTS if p.name != "README.md" and f"]({relative(p)})" not in readme]
    assert not unlinked, f"README.md's *Where to read next* does not link {unlinked}"


@pytest.mark.parametrize("assignment", lab_params(ASSIGNMENTS))
def test_every_lab_has_its_line(assignment: str) -> None:
    """A row of README's *The labs* (one line) and of docs/students.md's *The labs in detail*."""
    for name, section in (("README.md", "The labs"), ("docs/students.md", "The labs in detail")):
        rows = re.findall(r"^\| `(\w+)`", export.sections((ROOT / name).read_text())[section], re.MULTILINE)
        assert assignment in rows, f"{name}, *{section}*, has no row for {assignment}"


def test_every_link_resolves() -> None:
    problems = [p for where, text in markdown_texts().items() for p in link_problems(where, text)]
    assert not problems, "\n".join(problems)


def test_a_broken_link_is_found() -> None:
    """The mutants: a link to a missing document, and one to a heading that its document lacks."""
    assert link_problems("README.md", "[x](docs/nowhere.md) [y](docs/hub.md#no-such-heading) [z](docs/hub.md)") == [
        "README.md: the link docs/nowhere.md names no file",
        "README.md: the link docs/hub.md#no-such-heading names no heading of docs/hub.md"]


def reference_problems(where: str, text: str) -> list[str]:
    problems = []
    for m in REFERENCE.finditer(text):
        name = "README.md" if m["file"] == "README" else m["file"]
        named = (m["quoted"] or m["starred"]).strip()
        if not any(t.startswith(named) for t in titles((ROOT / name).read_text())):
            problems.append(f"{where}: {m[0]!r} names no section of {name}")
    return problems


def tracked_texts() -> dict[str, str]:
    """Every file git tracks that is text and not history (CHANGELOG.md), generated (course/) or this file (whose
    mutants name sections that are not there)."""
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    texts, skipped = {}, ("CHANGELOG.md", relative(Path(__file__)))
    for name in names:
        if name in skipped or name.startswith("course/") or not (ROOT / name).is_file():
            continue
        try:
            texts[name] = (ROOT / name).read_text()
        except UnicodeDecodeError:
            continue
    return texts


def test_every_reference_to_a_section_resolves() -> None:
    """From the code, the notebooks and the documents: a section named beside its document is in that document."""
    problems = [p for where, text in tracked_texts().items() for p in reference_problems(where, text)]
    assert not problems, "\n".join(problems)


def test_a_reference_to_a_moved_section_is_found() -> None:
    assert reference_problems("x.py", '(README, "The grading sandbox") (docs/sandbox.md, "The grading sandbox")') == [
        "x.py: 'README, \"The grading sandbox\"' names no section of README.md"]


def test_every_test_a_document_names_exists() -> None:
    """`test_structure.py::test_points_table_equals_the_nbgrader_points` in CONTRIBUTING's checklist: that test."""
    missing = [f"{relative(p)}: {m[0]}" for p in DOCUMENTS
               for m in re.finditer(r"(test_\w+\.py)::(test_\w+)", p.read_text())
               if not re.search(rf"^def {m[2]}\(", (ROOT / "tests" / m[1]).read_text(), re.MULTILINE)]
    assert not missing, f"tests named that do not exist: {missing}"


def commands(text: str) -> list[str]:
    """The code of a markdown text, one line each: its fenced blocks' lines and its inline code spans."""
    found = []
    for m in CODE.finditer(text):
        found += m["block"].splitlines() if m["block"] is not None else [m["span"]]
    return found


def makefile_rules(makefile: str) -> set[str]:
    """The Makefile's targets, its variables expanded where they are defined in it ($(STAMP) -> .venv/.installed)."""
    values = dict(re.findall(r"^(\w+)\s*[:?]?=\s*(.*?)\s*$", makefile, re.MULTILINE))
    targets = " ".join(re.findall(r"^([^\s#=:][^=:]*):(?!=)", makefile, re.MULTILINE))
    while (expanded := re.sub(r"\$\((\w+)\)", lambda m: values.get(m[1], ""), targets)) != targets:
        targets = expanded
    return set(targets.split())


def words(args: str) -> list[str]:
    try:
        return shlex.split(args)
    except ValueError:
        return args.split()


def command_problems(where: str, text: str, makefile: str) -> list[str]:
    """What the commands of `text` name that does not exist: a make target or variable, a module, an option."""
    rules, problems = makefile_rules(makefile), []
    for line in commands(text):
        for m in MAKE.finditer(line):
            args = [a for a in words(m["args"]) if not a.startswith("<") and "*" not in a and a != "\\"]
            if args[:1] == ["-C"]:
                args = args[2:]
            if args[:1] and args[0].endswith(":"):
                continue  # what a target prints (`make test-gpu: 2 CUDA GPUs; ...`), not a command
            for arg in args:
                name, eq, value = arg.partition("=")
                if eq and not re.search(rf"\b{re.escape(name)}\b", makefile):
                    problems.append(f"{where}: `{line.strip()}`: the Makefile reads no variable {name}")
                elif eq and name in ARGS_OF:
                    problems += option_problems(where, line, ARGS_OF[name], value)
                elif not eq and not arg.startswith("-") and arg not in rules:
                    problems.append(f"{where}: `{line.strip()}`: the Makefile has no target {arg}")
        for m in PYTHON_M.finditer(line):
            path = ROOT / m["module"].replace(".", "/")
            if (path / "__main__.py").is_file() or path.with_suffix(".py").is_file():
                # its options are spelled out in its package: the folder it is, or the folder it is in
                problems += option_problems(where, line, relative(path if path.is_dir() else path.parent), m["args"])
            elif not importlib.util.find_spec(m["module"].split(".")[0]):
                problems.append(f"{where}: `{line.strip()}`: no module {m['module']}")
    return problems


def option_problems(where: str, line: str, package: str, args: str) -> list[str]:
    """The --options among `args` that no source file of `package` (a folder of the repository) spells out."""
    source = "\n".join(p.read_text() for p in (ROOT / package).rglob("*.py"))
    return [f"{where}: `{line.strip()}`: {package}/ has no option {option}"
            for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", args) if f'"{option}"' not in source]


@pytest.mark.parametrize("document", [relative(p) for p in DOCUMENTS])
def test_every_command_names_what_exists(document: str) -> None:
    problems = command_problems(document, (ROOT / document).read_text(), (ROOT / "Makefile").read_text())
    assert not problems, "\n".join(problems)


def test_a_command_that_names_nothing_is_found() -> None:
    text = "`make tset`, `make grade SUBMISION=x`, `make grade GRADE_ARGS=--wrokers`, `python -m autograder --shrad`"
    assert command_problems("x.md", text, (ROOT / "Makefile").read_text()) == [
        "x.md: `make tset`: the Makefile has no target tset",
        "x.md: `make grade SUBMISION=x`: the Makefile reads no variable SUBMISION",
        "x.md: `make grade GRADE_ARGS=--wrokers`: autograder/ has no option --wrokers",
        "x.md: `python -m autograder --shrad`: autograder/ has no option --shrad"]


def test_the_student_readme_runs_on_the_student_makefile() -> None:
    """The edition's README is made of student sections; its commands are the edition's Makefile's and it links
    to nothing of this repository (the edition holds none of docs/)."""
    readme = export.student_readme(ROOT)
    problems = command_problems("README.md (student edition)", readme,
                                export.student_makefile((ROOT / "Makefile").read_text()))
    problems += [f"the student edition's README links {m['target']}" for m in LINK.finditer(readme)
                 if not re.match(r"[a-z]+:|#", m["target"])]
    assert not problems, "\n".join(problems)


def test_a_missing_student_section_is_refused(tmp_path: Path) -> None:
    for name in {name for name, _ in export.STUDENT_SECTIONS}:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text().replace("## Conda users", "## Conda"))
    with pytest.raises(PipelineError, match="docs/students.md: Conda users"):
        export.student_readme(tmp_path)


# A Slurm command where a line of code starts: the ones tests/test_slurm.py runs on its cluster
SLURM = re.compile(r"^\s*(?:make slurm-(?:grade|status)|sbatch|srun)\s")


def slurm_problems(texts: dict[str, str], ran: set[str]) -> list[str]:
    """The Slurm commands of the documents' fenced blocks (continued lines joined) that are not among `ran`, the
    commands of `ran` that no document gives, and the scripts of classroom/slurm/ that a command (in a block or
    a span) names but that do not exist."""
    given, problems = set(), []
    for where, text in texts.items():
        for m in CODE.finditer(text):
            lines = (m["block"] or "").replace("\\\n", " ").splitlines() if m["span"] is None else [m["span"]]
            for line in (" ".join(line.split()) for line in lines if SLURM.match(line)):
                if m["span"] is None:
                    given.add(line)
                    if line not in ran:
                        problems.append(f"{where}: `{line}` is not a command that tests/test_slurm.py runs")
                problems += [f"{where}: `{line}` names {script}, which does not exist"
                             for script in re.findall(r"classroom/slurm/\S+", line) if not (ROOT / script).is_file()]
    return problems + [f"no document gives `{line}`, which tests/test_slurm.py runs as theirs"
                       for line in sorted(ran - given)]


def test_the_slurm_commands_are_the_ones_the_slurm_tests_run() -> None:
    from tests.test_slurm import DOCUMENTED

    problems = slurm_problems({relative(p): p.read_text() for p in DOCUMENTS}, set(DOCUMENTED.values()))
    assert not problems, "\n".join(problems)


def test_a_slurm_command_that_no_test_ran_is_found() -> None:
    text = ("```bash\nmake slurm-grade SUBMISSIONS=submitted \\\n  SHARDS=4\nsrun -n 2 true\n```\n"
            "`sbatch classroom/slurm/grade.sbatch`")
    assert slurm_problems({"x.md": text}, {"srun -n 2 true", "make slurm-status OUT=graded"}) == [
        "x.md: `make slurm-grade SUBMISSIONS=submitted SHARDS=4` is not a command that tests/test_slurm.py runs",
        "x.md: `sbatch classroom/slurm/grade.sbatch` names classroom/slurm/grade.sbatch, which does not exist",
        "no document gives `make slurm-status OUT=graded`, which tests/test_slurm.py runs as theirs"]
