"""classroom/collect.py: collect takes only what a student submitted as themselves, and follows no link.

As root (CI's machines, the hub's grader), with two existing accounts standing for two students: root and nobody.
The hub's end-to-end test (tests/test_hub.py) runs the same attacks as a student's own Unix user; these cases run
without a hub, in a second each.
"""

from __future__ import annotations

import logging
import os
import pwd
import sysconfig
from pathlib import Path

import pytest
from traitlets.config import Config

from classroom.collect import MAX_DEPTH, REFUSED, CheckedCollect, SubmissionRefused, copy_submission, refusal

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making files of another user's needs root")

LAB = "00_ranks_and_alpha_beta"
COURSE = "course"
OTHER = "nobody"  # Debian's unprivileged account: a student other than the one who runs the test (root)


def uid(username: str) -> int:
    return pwd.getpwnam(username).pw_uid


def submission(inbound: Path, claimed: str, year: int, owner: str, text: str = "mine") -> Path:
    """A submission as nbgrader's submit leaves it: `<claimed>+<lab>+<timestamp>+<random>/`, its notebook and
    timestamp.txt, all owned by `owner`."""
    stamp = f"{year}-01-01 00:00:00.000000 UTC"
    folder = inbound / f"{claimed}+{LAB}+{stamp}+{owner}{year}"
    folder.mkdir(parents=True)
    (folder / "lab.ipynb").write_text(text)
    (folder / "timestamp.txt").write_text(stamp)
    for path in (folder, *folder.iterdir()):
        os.lchown(path, uid(owner), -1)
    return folder


def no_sharing(src: str, names: list[str]) -> list[str]:
    return []


def test_a_submission_of_ones_own_plain_files_is_accepted(tmp_path: Path) -> None:
    assert refusal(submission(tmp_path, OTHER, 2020, OTHER), OTHER) is None


def test_a_submission_in_anothers_name_is_refused_with_both_names(tmp_path: Path) -> None:
    forged = submission(tmp_path, OTHER, 2099, "root")
    assert refusal(forged, OTHER) == f"submitted in the name of {OTHER} by root ({forged.name} is root's)"
    inside = submission(tmp_path, OTHER, 2020, OTHER)
    os.lchown(inside / "lab.ipynb", 0, -1)  # the folder is the student's, a file in it another's
    assert f"in the name of {OTHER} by root ({inside.name}/lab.ipynb is root's)" in refusal(inside, OTHER)
    assert "who has no account here" in refusal(submission(tmp_path, "no-such-user", 2020, "root"), "no-such-user")


@pytest.mark.parametrize(("make", "says"), [
    (lambda f: (f / "lab.ipynb").unlink() or (f / "lab.ipynb").symlink_to("/etc/shadow"), "is a symbolic link"),
    (lambda f: (f / "sub").symlink_to("/"), "sub is a symbolic link"),
    (lambda f: os.link(f / "lab.ipynb", f.parent / "elsewhere"), "lab.ipynb is a hard link"),
    (lambda f: os.mkfifo(f / "pipe"), "pipe is a named pipe"),
])
def test_a_link_or_a_device_in_a_submission_is_refused(tmp_path: Path, make, says: str) -> None:
    folder = submission(tmp_path / "inbound", "root", 2020, "root")
    make(folder)
    assert says in refusal(folder, "root")


def test_a_submission_nested_too_deep_is_refused(tmp_path: Path) -> None:
    """The copy recurses a level per folder: a deep nest would end collect for everyone, so it is refused."""
    folder = submission(tmp_path / "inbound", "root", 2020, "root")
    (folder / Path(*["d"] * (MAX_DEPTH + 1))).mkdir(parents=True)
    assert "nested more than" in refusal(folder, "root")
    with pytest.raises(SubmissionRefused, match="nested more than"):
        copy_submission(folder, tmp_path / "copy", "root", 0, 10_000, no_sharing)
    (folder / Path(*["d"] * (MAX_DEPTH + 1))).rmdir()
    assert refusal(folder, "root") is None


def test_a_symlinked_submission_folder_is_refused(tmp_path: Path) -> None:
    link = tmp_path / f"root+{LAB}+2020-01-01 00:00:00.000000 UTC+x"
    link.symlink_to("/")
    assert refusal(link, "root") == f"{link.name} is a symbolic link"


def test_the_copy_follows_no_link_and_stops_at_its_size_bound(tmp_path: Path, monkeypatch) -> None:
    """What changed after the check (a link put in its place) is refused by the copy itself; the copy's size
    counts what it copies."""
    folder = submission(tmp_path / "inbound", "root", 2020, "root", text="x" * 5000)
    copied = copy_submission(folder, tmp_path / "copy", "root", 0, 10_000, no_sharing)
    assert copied == 5000 + len("2020-01-01 00:00:00.000000 UTC")
    assert (tmp_path / "copy" / "lab.ipynb").read_text() == "x" * 5000
    with pytest.raises(SubmissionRefused, match="larger than"):
        copy_submission(folder, tmp_path / "small", "root", 0, 4000, no_sharing)
    (folder / "lab.ipynb").unlink()
    (folder / "lab.ipynb").symlink_to("/etc/passwd")
    with pytest.raises(SubmissionRefused, match="is a symbolic link"):
        copy_submission(folder, tmp_path / "linked", "root", 0, 10_000, no_sharing)
    assert not (tmp_path / "linked" / "lab.ipynb").exists()
    # A link put in place between the check before the open and the open itself (a stat that follows links stands
    # for that moment): the open refuses to follow it.
    follow = os.stat
    monkeypatch.setattr(os, "stat", lambda name, dir_fd=None, follow_symlinks=True: follow(name, dir_fd=dir_fd))
    with pytest.raises(SubmissionRefused, match="lab.ipynb changed while it was copied"):
        copy_submission(folder, tmp_path / "swapped", "root", 0, 10_000, no_sharing)
    monkeypatch.undo()
    (tmp_path / "linked-folder").symlink_to("/")
    with pytest.raises(SubmissionRefused, match="linked-folder is not a folder"):  # not even opened
        copy_submission(tmp_path / "linked-folder", tmp_path / "root-copy", "root", 0, 10_000, no_sharing)
    assert not (tmp_path / "root-copy").exists()


def test_collect_takes_each_students_newest_own_submission(tmp_path: Path, caplog, monkeypatch) -> None:
    """nbgrader's collect through CheckedCollect: a forged submission dated 2099 in OTHER's name and a newer one of
    root's with a link are refused and reported; each student's own older submission is collected instead."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory

    monkeypatch.setenv("PATH", f"{sysconfig.get_path('scripts')}:{os.environ['PATH']}")  # nbgrader runs `alembic`
    inbound = tmp_path / "exchange" / COURSE / "inbound"
    submission(inbound, OTHER, 2020, OTHER, text="other's own")
    forged = submission(inbound, OTHER, 2099, "root", text="forged")
    submission(inbound, "root", 2021, "root", text="root's own")
    linked = submission(inbound, "root", 2098, "root")
    (linked / "lab.ipynb").unlink()
    (linked / "lab.ipynb").symlink_to("/etc/shadow")
    (tmp_path / "course").mkdir()
    config = Config()
    config.Exchange.root = str(tmp_path / "exchange")
    config.CourseDirectory.update(course_id=COURSE, assignment_id=LAB, root=str(tmp_path / "course"))
    config.ExchangeCollect.update = True
    coursedir = CourseDirectory(config=config)
    with caplog.at_level(logging.INFO):
        CheckedCollect(coursedir=coursedir, authenticator=Authenticator(config=config), config=config,
                       log=logging.getLogger("collect")).start()
    submitted = tmp_path / "course" / "submitted"
    assert (submitted / OTHER / LAB / "lab.ipynb").read_text() == "other's own"
    assert (submitted / "root" / LAB / "lab.ipynb").read_text() == "root's own"
    refused = sorted(r.getMessage() for r in caplog.records if r.getMessage().startswith(REFUSED))
    assert refused == [f"{REFUSED} {forged.name}: submitted in the name of {OTHER} by root ({forged.name} is root's)",
                       f"{REFUSED} {linked.name}: {linked.name}/lab.ipynb is a symbolic link"], refused
