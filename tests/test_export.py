"""The student edition (`make student-repo OUT=dir`): no answer in it, and a fresh clone of it works.

The edition is exported once into a temporary folder and cloned, as a student would (tests/ and the release of
every lab in solutions/ are found by themselves). Its Makefile is checked by running it in the clone, never in
this repository: the clone's .venv is this repository's, and every `make` here gets `-o .venv/.installed`
(the set-up counts as done and is never run), so nothing in the environment is installed or changed. The
set-up itself is the same Makefile paragraph as here, which tests/test_lab_server.py and CI check.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from classroom import export
from tests.common import (
    ASSIGNMENTS,
    COURSE,
    ROOT,
    lab_params,
    meta,
    notebook,
    secret_lines,
    source,
    text_lines,
)
from tests.corpus.common import HIDDEN, SOLUTION
from tests.test_lab_server import make_lab

SET_UP_DONE = ("-o", ".venv/.installed")  # make: take the set-up as done, never run it
MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")  # how make passes itself on to a child make
STUDENT_MAKE_VARIABLES = ("LAB", "PYTEST_ARGS")  # what the edition's test rule reads from its caller
GENERATED = {"Makefile", "README.md", "tests/test_labs.py"}
# Solution lines that the student edition holds on purpose, each with its reason (docs/instructors.md: "What a later
# lab gives away of an earlier one"). Any other solution line found there is a leak.
HANDED_OUT = {
    # utils.timing.ping_pong_time, which lab 02 calibrates with: lab 00's exercise 0.1 (ping_pong).
    "dist.send(buffer, dst=0)": "lab 00's ping-pong, a tool of lab 02",
    "dist.send(buffer, dst=1)": "lab 00's ping-pong, a tool of lab 02",
    "dist.recv(buffer, src=1)": "lab 00's ping-pong, a tool of lab 02",
    # Idioms: waiting for the requests posted, and a flat view of a contiguous tensor (utils.timing's ring step and
    # utils.halving_doubling's worked all-reduce use them as every lab's solution does). The ring step itself is lab
    # 00's ring_shift recipe and halving-doubling an answer to lab 01's all_reduce, in other lines: both are listed
    # in docs/instructors.md with what they give away.
    "for request in requests:": "an idiom",
    "flat = tensor.view(-1)": "an idiom",
}


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of a fresh export, with this repository's environment as its .venv."""
    tmp = tmp_path_factory.mktemp("edition")
    edition = export.export(tmp / "edition")
    done = subprocess.run(["git", "clone", "--quiet", str(edition), str(tmp / "clone")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (tmp / "clone" / ".venv").symlink_to((ROOT / ".venv").resolve())
    return tmp / "clone"


def files(folder: Path) -> dict[str, bytes]:
    """Every file of a clone (git's own folder and the .venv link aside): relative path -> bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not {".git", ".venv"} & set(p.relative_to(folder).parts)}


def student_text(name: str, data: bytes) -> str:
    """A file as its reader sees it: a notebook's cell sources (JSON escapes every line break), any other as is."""
    text = data.decode(errors="replace")
    return "\n".join(source(cell) for cell in json.loads(text)["cells"]) if name.endswith(".ipynb") else text


def own_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without what a calling make hands down to a make it runs: its own variables (MAKEFLAGS...), each
    variable set on its command line (`make test PYTEST_ARGS=--durations=60` exports PYTEST_ARGS, which the clone's
    test rule reads too), and the two variables that rule reads from its user.
    """
    _, _, assigned = f" {environ.get('MAKEFLAGS', '')}".partition(" -- ")  # GNU make: options -- VAR=value ...
    handed_down = {*MAKE_VARIABLES, *STUDENT_MAKE_VARIABLES, *re.findall(r"(?:^| )(\w+)[:+?!]?=", assigned)}
    return {k: v for k, v in environ.items() if k not in handed_down}


def test_own_environment_drops_what_a_calling_make_hands_down() -> None:
    caller = {"MAKEFLAGS": "s -- PYTEST_ARGS=-x\\ -q N:=2", "MFLAGS": "-s", "MAKELEVEL": "1", "PYTEST_ARGS": "-x -q",
              "N": "2", "LAB": "01", "HOME": "/home/me", "PATH": "/usr/bin"}
    assert own_environment(caller) == {"HOME": "/home/me", "PATH": "/usr/bin"}


def make(clone: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the clone's make with `args`, whatever the make that runs these tests was given."""
    return subprocess.run(["make", *SET_UP_DONE, *args], cwd=clone, env=own_environment(os.environ),
                          capture_output=True, text=True, timeout=120)


def test_every_file_is_a_student_file(clone: Path) -> None:
    """Each file is a copy of course/, utils/, jupyter/ or a set-up file of this repository, or one of the three
    made for students: so no solutions/, autograder/, classroom/, benchmark/ (reference implementations) or
    tests/corpus and tests/labs (broken submissions).
    """
    ours = {f"course/{k}": export.student_notebook(v.decode(), k[:2]).encode() if k.endswith(".ipynb") else v
            for k, v in files(COURSE).items()}  # a notebook's first cell says what a student does (the next test)
    for name in export.COPIED:
        path = ROOT / name
        ours.update({f"{name}/{k}": v for k, v in files(path).items() if "__pycache__" not in k} if path.is_dir()
                    else {name: path.read_bytes()})
    theirs = files(clone)
    strays = sorted(name for name, data in theirs.items() if name not in GENERATED and ours.get(name) != data)
    assert not strays, f"files of the student edition that are not this repository's student files: {strays}"
    assert GENERATED <= set(theirs), sorted(GENERATED - set(theirs))
    assert sorted(p.name for p in (clone / "course").iterdir()) == ASSIGNMENTS


@pytest.mark.parametrize("assignment", lab_params(ASSIGNMENTS))
def test_every_notebook_starts_with_what_a_student_does(clone: Path, assignment: str) -> None:
    """The release's banner says how the full repository makes the notebook (`make release`, from solutions/); the
    edition has neither, so its first cell says what a student does there instead."""
    [path] = (clone / "course" / assignment).glob("*.ipynb")
    first = source(json.loads(path.read_text())["cells"][0])
    assert "make release" not in first and "solutions/" not in first, first
    assert {"YOUR CODE HERE", "Validate", f"make test LAB={assignment[:2]}"} <= set(re.findall(
        r"YOUR CODE HERE|Validate|make test LAB=\d\d", first)), first
    assert "make release" in source(json.loads((COURSE / assignment / path.name).read_text())["cells"][0])


def test_student_notebook_refuses_a_notebook_without_the_banner() -> None:
    with pytest.raises(export.PipelineError, match="banner"):
        export.student_notebook(json.dumps({"cells": [{"id": "intro", "source": []}]}), "02")


@pytest.mark.parametrize("assignment", lab_params(ASSIGNMENTS))
def test_no_answer_and_no_hidden_test_anywhere(clone: Path, assignment: str) -> None:
    lines = set().union(*(text_lines(student_text(name, data)) for name, data in files(clone).items()))
    for region, what in ((SOLUTION, "solution"), (HIDDEN, "hidden test")):
        secret = secret_lines(assignment, region) - set(HANDED_OUT)
        assert secret, f"{assignment}: no {what} lines to look for"
        found = sorted(secret & lines)
        assert not found, f"{assignment}: {what} lines in the student edition: {found[:5]}"
    assert not export.leaks(clone)


def test_leaks_finds_an_answer(tmp_path: Path) -> None:
    """The export's own last check refuses a folder with a solution region or an instructor's folder."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "a.ipynb").write_text('{"source": "### BEGIN SOLUTION"}')
    assert len(export.leaks(tmp_path)) == 2


def test_makefile_has_the_student_targets_only(clone: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As under `make test PYTEST_ARGS=--durations=60`: the caller's variables must not reach the clone's make.
    monkeypatch.setenv("MAKEFLAGS", " -- PYTEST_ARGS=--durations=60")
    monkeypatch.setenv("PYTEST_ARGS", "--durations=60")
    helped = make(clone, "help")
    assert helped.returncode == 0, helped.stderr
    targets = sorted(line.split()[0] for line in helped.stdout.splitlines())
    assert targets == ["class-lab", "clean", "help", "lab", "test"]
    dry = make(clone, "-n", "test", "LAB=00")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.strip() == '.venv/bin/python -m pytest tests -k "00"', dry.stdout


def test_a_fresh_make_lab_serves_the_course_and_validates(clone: Path, tmp_path: Path) -> None:
    """`make lab` in the clone serves every lab; the Validate button's check of the untouched first notebook runs
    (nbgrader validate, in the server) and reports each exercise's test as failing with its NotImplementedError."""
    [first] = sorted((clone / "course" / ASSIGNMENTS[0]).glob("*.ipynb"))
    with make_lab(tmp_path, repo=clone, make_options=SET_UP_DONE) as (lab, _):
        listed = {item["name"] for item in lab.json("/api/contents")["content"]}
        assert listed == set(ASSIGNMENTS)
        reply = lab.json("/assignments/validate", "POST", {"path": first.relative_to(clone / "course").as_posix()})
    assert reply["success"], reply
    value = json.loads(reply["value"]) if isinstance(reply["value"], str) else reply["value"]
    errors = [f["raw_error"] for f in value.get("failed", [])]
    tests = [c for c in notebook(first)["cells"] if meta(c).get("grade") and not meta(c).get("solution")]
    assert tests and len(errors) == len(tests), f"{len(tests)} test cells, failures reported: {errors}"
    assert all("NotImplementedError" in e for e in errors), errors
