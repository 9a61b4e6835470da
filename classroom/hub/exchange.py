"""The hub's exchange: root's folders, with the least each side needs, and nbgrader's steps that work within them.

nbgrader 0.9.6 wants an exchange root that everyone may write (0777, no sticky bit: release_assignment sets it so,
and every student step checks that it can write there). In such a folder a student can rename the course's folder
and make one of their own, which then receives the others' submissions. The hub's exchange instead:

    <exchange>/               root 0755   nobody but root makes, renames or removes anything here
    <exchange>/<course>/      root 0755
        outbound/             root 0755   the released labs: every student reads them
        inbound/              root 3733   every student drops a submission in, none lists it (each has a random
                                          name), and the sticky bit keeps each from renaming or removing another's;
                                          each submission's folder is 0755 (Submit), not nbgrader's 0777
        feedback/             root 0711   a student reaches only the page named by their own submission's hash

MODES says so; `make_exchange` makes them. Only the root check of nbgrader's steps needs changing: the students'
steps (fetch, submit, list, fetch feedback) need the root to be a folder they may enter, not write, and the
instructor's release (run as root) must leave its mode alone. STUDENT_STEPS (the students' servers' config,
classroom/hub/student/nbgrader_config.py) and RELEASE_OPTIONS (`make hub-release`) put these steps in place.

Only nbgrader and the standard library are imported here: the students' servers load this file.
"""

from __future__ import annotations

import os
from pathlib import Path

from nbgrader.exchange.default import (
    ExchangeFetchAssignment,
    ExchangeFetchFeedback,
    ExchangeList,
    ExchangeReleaseAssignment,
    ExchangeSubmit,
)
from nbgrader.utils import check_directory

ROOT_MODE = 0o755
MODES = {"": 0o755, "outbound": 0o755, "inbound": 0o3733, "feedback": 0o711}  # below the course's folder


def make_exchange(root: Path, course_id: str) -> None:
    """The exchange root and the course's folders, owned by root with MODES (made now, before any student can)."""
    for folder, mode in ((root, ROOT_MODE), *((root / course_id / sub, m) for sub, m in MODES.items())):
        folder.mkdir(exist_ok=True)
        os.lchown(folder, 0, 0)
        os.chmod(folder, mode)


class RootOwnedExchange:
    """nbgrader's exchange step, with the root checked for what it needs in a root-owned exchange: to be entered."""

    def ensure_root(self) -> None:
        if not check_directory(self.root, execute=True):
            self.fail(f"The exchange {self.root} is missing or closed to you, please contact your instructor")


class FetchAssignment(RootOwnedExchange, ExchangeFetchAssignment):
    pass


class FetchFeedback(RootOwnedExchange, ExchangeFetchFeedback):
    pass


class List(RootOwnedExchange, ExchangeList):
    pass


class Submit(RootOwnedExchange, ExchangeSubmit):
    """nbgrader's submit, with the submission's folder closed to others (nbgrader makes it 0777 "so the instructor
    can delete later": root can anyway, and another student who learnt its name could change it)."""

    def copy_files(self) -> None:
        super().copy_files()
        os.chmod(os.path.join(self.inbound_path, self.assignment_filename), 0o755)


class ClassRelease(ExchangeReleaseAssignment):
    """nbgrader's release, each notebook's first cell saying what a student of a class does (classroom.export's
    CLASS_BANNER) instead of course/'s "make release writes this copy from solutions/", which a student who fetched
    the lab does not have. `make release-lab` uses it as it is, the hub with the exchange's own modes."""

    def do_copy(self, src: str, dest: str, log: object = None) -> None:
        super().do_copy(src, dest, log)
        # the instructor's side only (students' servers never release): the import stays out of theirs
        from classroom.export import CLASS_BANNER, student_notebook

        for path in Path(dest).glob("*.ipynb"):
            path.write_text(student_notebook(path.read_text(), self.coursedir.assignment_id[:2], CLASS_BANNER))


class ReleaseAssignment(RootOwnedExchange, ClassRelease):
    """Release without nbgrader's chmod of the root to 0777 (the course's folders are make_exchange's)."""


STUDENT_STEPS = {"fetch_assignment": FetchAssignment, "fetch_feedback": FetchFeedback, "list": List,
                 "submit": Submit}
RELEASE_OPTIONS = ("--ExchangeFactory.release_assignment=classroom.hub.exchange.ReleaseAssignment",)
