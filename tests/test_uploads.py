"""Uploads and the class folder (autograder/class_run.py's collect): what is read of them, outside any sandbox.

Regular files only, in either layout (a link would copy what it points at into the feedback); one `_attempt_` in
an LMS name (a name cannot claim another student's attempt) and, with a roster, only its students; a zip gives only
its .ipynb members, each bounded as declared and as read. A bad upload is its student's failed row ("upload
unreadable: ..."), every other submission is graded, and the command exits non-zero at its end. A notebook is read
as nbgrader reads it: format 4 only. nbgrader is stood in for (tests/test_grade.py's tiny class): nothing here runs
a notebook.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

import pytest

from autograder import class_run, grade
from autograder.__main__ import main
from autograder.class_run import UNKNOWN, UNREADABLE
from tests import test_grade
from tests.common import ROOT
from tests.test_grade import TINY

tiny_class = test_grade.tiny_class  # the fixture: pytest finds it among this module's names

NOTEBOOK = {"cells": [{"cell_type": "code", "execution_count": None, "id": "a", "metadata": {}, "outputs": [],
                       "source": ""}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
SECRET = "the instructors' answers"


def lms(folder: Path, student: str, stamp: str = "2026-11-29-10-00-00", file_id: str = TINY,
        suffix: str = ".ipynb") -> Path:
    """The path of an upload as an LMS names it (nbgrader zip_collect's documented pattern)."""
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{TINY}_{student}_attempt_{stamp}_{file_id}{suffix}"


def refusals(entries: list[grade.Entry]) -> dict[tuple[str, str], str]:
    return {(e.student, e.assignment): e.refused for e in entries if e.refused}


def rows(out: Path) -> dict[str, dict[str, str]]:
    with (out / "grades.csv").open() as fh:
        return {row["student"]: row for row in csv.DictReader(fh)}


def test_a_link_in_any_layout_is_refused_and_nothing_it_points_at_is_copied(
        tiny_class: tuple[Path, Path, list[str]], tmp_path: Path) -> None:
    """A linked notebook, a linked exchange file, a linked student folder, a linked LMS upload: each is its
    student's failed row; the linked secret reaches nothing in the out folder; every other student is graded."""
    root, subs, students = tiny_class
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    (subs / "s00" / TINY / f"{TINY}.ipynb").unlink()
    (subs / "s00" / TINY / f"{TINY}.ipynb").symlink_to(secret)
    (subs / "s01" / TINY / "timestamp.txt").symlink_to(secret)
    (subs / "s02").rename(tmp_path / "elsewhere")
    (subs / "s02").symlink_to(tmp_path / "elsewhere")
    lms_folder = tmp_path / "lms"
    lms(lms_folder, "s03").symlink_to(secret)
    lms(lms_folder, "s04").write_text(json.dumps(NOTEBOOK))

    assert refusals(class_run.collect(subs, tmp_path, root)) == {
        ("s00", TINY): f"{TINY}.ipynb is a link or a special file, not a regular file",
        ("s01", TINY): "timestamp.txt is a link or a special file, not a regular file",
        ("s02", UNKNOWN): "s02 is a link, not a folder"}
    assert refusals(class_run.collect(lms_folder, tmp_path, root)) == {
        ("s03", UNKNOWN): f"{lms(lms_folder, 's03').name}: {lms(lms_folder, 's03').name} is a link or a special "
                          "file, not a regular file"}

    out = tmp_path / "out"
    results = {r.student: r for r in class_run.grade_class(subs, out, root=root, workers=2,
                                                           progress=lambda line: None)}
    for student in ("s00", "s01", "s02"):
        assert results[student].status == grade.FAILED and results[student].notes[0].startswith(UNREADABLE)
    assert all(results[s].status == grade.GRADED for s in students[3:]), results
    assert set(rows(out)) == set(students)
    assert not any(SECRET in p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())


def test_an_lms_name_holds_one_attempt_of_a_student_on_the_roster(tiny_class: tuple[Path, Path, list[str]],
                                                                   tmp_path: Path) -> None:
    """A student's file named like another's newer attempt replaces nothing: it is refused, and the other student's
    own upload is graded; with a roster, an upload of someone not on it is refused."""
    root, _, _ = tiny_class
    folder = tmp_path / "lms"
    own = lms(folder, "bob")
    own.write_text(json.dumps(NOTEBOOK))
    claim = lms(folder, "alice", file_id=f"x_bob_attempt_2099-01-01-00-00-00_{TINY}")
    claim.write_text(json.dumps({**NOTEBOOK, "metadata": {"claim": True}}))
    lms(folder, "eve").write_text(json.dumps(NOTEBOOK))

    entries = {e.student: e for e in class_run.collect(folder, tmp_path, root)}
    assert entries["bob"].notebooks == {f"{TINY}.ipynb": own}
    assert entries[claim.name].refused == (f"{claim.name}: its name holds '_attempt_' 2 times, an LMS name once: "
                                           f"<anything>_<student>_attempt_<timestamp>_<notebook>.ipynb")
    on_roster = {e.student: e.refused for e in class_run.collect(folder, tmp_path, root, frozenset({"bob"}))}
    assert on_roster["bob"] == "" and on_roster["eve"] == f"{lms(folder, 'eve').name}: eve is not on the roster"


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_a_zip_gives_only_its_notebooks_each_bounded(tiny_class: tuple[Path, Path, list[str]], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Only .ipynb members, flat (a member's folders, `..` included, are dropped), each within UPLOAD_BYTES: a zip
    that expands past it (a zip bomb: 1 MB of zeros in about 1 kB) is refused before anything past the bound is
    written; a broken zip, or one without a notebook, is refused too."""
    root, _, _ = tiny_class
    monkeypatch.setattr(class_run, "UPLOAD_BYTES", 64 << 10)
    folder = tmp_path / "lms"
    good = _zip(lms(folder, "ann", suffix=".zip"), {f"deep/../../{TINY}.ipynb": json.dumps(NOTEBOOK).encode(),
                                                    "run.sh": b"rm -rf ~", "__MACOSX/x.ipynb": b"junk"})
    bomb = _zip(lms(folder, "ben", suffix=".zip"), {f"{TINY}.ipynb": bytes(1 << 20)})
    assert bomb.stat().st_size < 4 << 10
    broken = lms(folder, "cy", suffix=".zip")
    broken.write_bytes(good.read_bytes()[:-30])
    empty = _zip(lms(folder, "di", suffix=".zip"), {"notes.txt": b"no notebook"})

    entries = {e.student: e for e in class_run.collect(folder, tmp_path / "work", root)}
    assert [p.name for p in entries["ann"].notebooks.values()] == [f"{TINY}.ipynb"]
    assert sorted(p.name for p in (tmp_path / "work" / "extracted").rglob("*") if p.is_file()) == [f"{TINY}.ipynb"]
    assert entries["ben"].refused == (f"{bomb.name}: {TINY}.ipynb in the zip declares {1 << 20} bytes, more than "
                                      f"{64 << 10}")
    assert entries["cy"].refused.startswith(f"{broken.name}: the zip cannot be read: BadZipFile")
    assert entries["di"].refused == f"{empty.name}: the zip holds no .ipynb file"
    extracted = sum(p.stat().st_size for p in (tmp_path / "work").rglob("*") if p.is_file())
    assert extracted <= 2 * (64 << 10), extracted


def test_a_zip_that_lies_about_a_size_is_read_only_to_the_bound(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A member whose header declares less than it holds is read to UPLOAD_BYTES at most (zipfile stops at the
    declared size and refuses the rest as a bad CRC): refused, and nothing past the bound is written."""
    monkeypatch.setattr(class_run, "UPLOAD_BYTES", 1 << 10)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{TINY}.ipynb", bytes(100))
    data = bytearray(buffer.getvalue())
    # The two headers' size fields say 100; the stored data is the 100 bytes: claim 10 in both (a lie).
    data = bytes(data).replace((100).to_bytes(4, "little") * 2, (10).to_bytes(4, "little") * 2)
    path = tmp_path / "lie.zip"
    path.write_bytes(data)
    with pytest.raises(class_run.Unreadable, match="the zip cannot be read"):
        class_run._lms_files(path, tmp_path / "out")
    assert sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file()) <= 1 << 10


def test_a_bad_upload_is_its_row_and_the_run_ends_non_zero(tiny_class: tuple[Path, Path, list[str]],
                                                           tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A name that is no LMS name, a broken zip and a fine upload: the fine one is graded, the others are failed rows
    that say why, every CSV and report is written, and the command exits 1 naming them."""
    root, _, _ = tiny_class
    folder = tmp_path / "lms"
    lms(folder, "ok").write_text(json.dumps(NOTEBOOK))
    (folder / "homework.ipynb").write_text(json.dumps(NOTEBOOK))
    lms(folder, "zed", suffix=".zip").write_bytes(b"PK\x03\x04 not a zip")
    out = tmp_path / "out"
    assert main(["grade", str(folder), "--out", str(out), "--root", str(root), "--workers", "1"]) == 1
    said = capsys.readouterr()
    got = rows(out)
    assert got["ok"]["status"] == grade.GRADED
    assert got["homework.ipynb"]["status"] == got["zed"]["status"] == grade.FAILED
    assert got["homework.ipynb"]["notes"].startswith(f"{UNREADABLE}: homework.ipynb: its name holds '_attempt_' 0")
    assert got["zed"]["notes"].startswith(f"{UNREADABLE}: {lms(folder, 'zed', suffix='.zip').name}: the zip cannot")
    assert "2 uploads could not be read (homework.ipynb/?, zed/?)" in said.err, said.err


def test_an_nbformat_3_file_is_refused_with_its_reason(tmp_path: Path) -> None:
    """nbformat 3 keeps its cells in `worksheets`, which nbgrader converts and a check of `cells` never reads (the
    release in `cells`, anything in `worksheets`): only format 4 is read, and the note says why."""
    release = ROOT / "course" / "00_ranks_and_alpha_beta"
    [name] = [p.name for p in release.glob("*.ipynb")]
    given = json.loads((release / name).read_text())
    path = tmp_path / name
    path.write_text(json.dumps({**given, "nbformat": 3, "nbformat_minor": 0,
                                "worksheets": [{"cells": [{"cell_type": "code", "input": "pass"}]}]}))
    entry = grade.Entry("s", "00_ranks_and_alpha_beta", {name: path})
    checked = grade.check_notebooks(entry, release)
    assert checked.notebooks == {}
    assert checked.notes == [f"{name} is empty or is not a notebook (it is of nbformat 3; only format 4 is graded "
                             "(JupyterLab and Jupyter Notebook write it: open the file there and save it)): its "
                             "exercises score 0"]
    path.write_text(json.dumps({**given, "worksheets": []}))  # format 4 with worksheets: not a valid notebook
    assert "'worksheets' was unexpected" in grade.check_notebooks(entry, release).notes[0]
