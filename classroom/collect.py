"""nbgrader's collect, made to trust nothing a student put into the exchange's inbound/.

nbgrader 0.9.6's own collect (nbgrader/exchange/default/collect.py) takes a submission's student from its folder's
name, `<student>+<assignment>+<timestamp>+<random>`, and only logs "cheating attempt?" when someone else owns the
folder; it copies as root with shutil.copytree, which follows symbolic links (its size check skips them). In a
shared exchange, where every student may write into inbound/, that lets a student submit in another's name (and,
with a timestamp in 2099, shadow that student's every later submission) or have root copy whatever a link points
to (the solutions, or `/` whole) into a submission the student then reads as feedback.

CheckedCollect (`--ExchangeFactory.collect=classroom.collect.CheckedCollect`, classroom/exchange.py passes it):
- a submission whose folder, or anything in it, is not owned by the student its name claims is not collected;
- a submission holding a symbolic link, a hard link (a file with another name elsewhere), a device, a pipe or a
  socket is not collected: `refusal` finds them before anything is copied;
- each refusal is a log line that starts with REFUSED and names the submission and why (both names when it is
  another's): `make hub-grade` gathers them (classroom/hub/server.py);
- a student's newest submission that is not refused is the one collected, so a forged one shadows nothing;
- the copy (`copy_submission`) opens every entry relative to its folder without following links and checks it
  again, so a submission changed between the check and the copy is refused too, and counts the bytes it copies:
  past CourseDirectory.max_dir_size it stops. nbgrader's ignore, include and max_file_size still apply.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import ignore_patterns

REFUSED = "refused submission"  # the start of each refusal's log line
MAX_ENTRIES = 10_000  # files and folders in one submission: a notebook folder holds a handful
MAX_DEPTH = 16  # folders within folders: the copy recurses, one open folder a level
CHUNK = 1 << 20
KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device",
         stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket"}


class SubmissionRefused(Exception):
    """A submission that may not be collected (the message says why)."""


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def check_entry(info: os.stat_result, shown: str, username: str, uid: int | None) -> None:
    """Refuse an entry of a submission that is not a plain file or folder of the user `uid` (None: anyone's)."""
    kind = stat.S_IFMT(info.st_mode)
    if kind not in (stat.S_IFREG, stat.S_IFDIR):
        raise SubmissionRefused(f"{shown} is {KINDS.get(kind, 'not a file or a folder')}")
    if kind == stat.S_IFREG and info.st_nlink > 1:
        raise SubmissionRefused(f"{shown} is a hard link (one of {info.st_nlink} names of one file)")
    if uid is not None and info.st_uid != uid:
        raise SubmissionRefused(f"submitted in the name of {username} by {owner_name(info.st_uid)} "
                                f"({shown} is {owner_name(info.st_uid)}'s)")


def entries(folder: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry of a folder, itself first, as (path shown, lstat): links are listed, never followed."""
    yield folder.name, folder.lstat()
    if not stat.S_ISDIR(folder.lstat().st_mode):
        return
    todo = [folder]
    while todo:
        with os.scandir(todo.pop()) as listing:
            for entry in listing:
                info = entry.stat(follow_symlinks=False)
                yield str(Path(entry.path).relative_to(folder.parent)), info
                if stat.S_ISDIR(info.st_mode):
                    todo.append(Path(entry.path))


def refusal(folder: Path, username: str, check_owner: bool = True) -> str | None:
    """Why a submission folder may not be collected, or None. With check_owner, the folder and everything in it
    must be owned by the user `username` (the name the folder's name claims)."""
    uid = None
    if check_owner:
        try:
            uid = pwd.getpwnam(username).pw_uid
        except KeyError:
            by = owner_name(folder.lstat().st_uid)
            return f"submitted in the name of {username}, who has no account here, by {by}"
    try:
        for count, (shown, info) in enumerate(entries(folder), 1):
            if count > MAX_ENTRIES:
                return f"more than {MAX_ENTRIES} files and folders"
            if shown.count(os.sep) > MAX_DEPTH:
                return f"folders nested more than {MAX_DEPTH} deep ({shown})"
            check_entry(info, shown, username, uid)
    except SubmissionRefused as why:
        return str(why)
    return None


def copy_submission(src: Path, dest: Path, username: str, uid: int | None, max_bytes: int,
                    ignore: Callable[[str, list[str]], list[str]]) -> int:
    """Copy a submission folder to dest (which must not exist) without following any link, each entry checked as
    `check_entry` does on what was opened; return the bytes copied. Raises SubmissionRefused (dest then holds what
    was copied so far) past max_bytes or at an entry that `check_entry` refuses."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise SubmissionRefused(f"{src.name} is not a folder, or changed while it was copied ({exc.strerror})") \
            from exc
    try:
        return _copy_folder(fd, src, dest, username, uid, max_bytes, ignore)
    finally:
        os.close(fd)


def _copy_folder(fd: int, shown: Path, dest: Path, username: str, uid: int | None, budget: int,
                 ignore: Callable[[str, list[str]], list[str]], depth: int = 0) -> int:
    check_entry(os.fstat(fd), shown.name, username, uid)
    if depth > MAX_DEPTH:
        raise SubmissionRefused(f"folders nested more than {MAX_DEPTH} deep ({shown})")
    dest.mkdir(mode=0o755)
    names = sorted(os.listdir(fd))
    skipped = set(ignore(str(shown), names))
    used = 0
    for name in (n for n in names if n not in skipped):
        # lstat before the open, so that nothing but a plain file or folder is ever opened, and fstat after it, on
        # what was opened (O_NOFOLLOW: a link put in between fails the open itself).
        check_entry(os.stat(name, dir_fd=fd, follow_symlinks=False), str(shown / name), username, uid)
        try:
            child = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        except OSError as exc:
            raise SubmissionRefused(f"{shown / name} changed while it was copied ({exc.strerror})") from exc
        try:
            info = os.fstat(child)
            if stat.S_ISDIR(info.st_mode):
                used += _copy_folder(child, shown / name, dest / name, username, uid, budget - used, ignore,
                                     depth + 1)
            else:
                check_entry(info, str(shown / name), username, uid)
                used += _copy_file(child, dest / name, budget - used)
        finally:
            os.close(child)
    return used


def _copy_file(fd: int, dest: Path, budget: int) -> int:
    """Copy an open file to dest (mode 0644), at most `budget` bytes; the bytes copied."""
    used = 0
    with open(dest, "xb") as out:
        os.chmod(dest, 0o644)
        while chunk := os.read(fd, CHUNK):
            used += len(chunk)
            if used > budget:
                raise SubmissionRefused(f"larger than CourseDirectory.max_dir_size (past {dest.name})")
            out.write(chunk)
    return used


class CheckedCollect(ExchangeCollect):
    """nbgrader's collect that collects only what a student submitted as themselves, and copies no link."""

    def _path_to_record(self, path: str) -> dict:
        """nbgrader's record of a submission, with "refused": why it may not be collected (None: it may)."""
        record = super()._path_to_record(path)
        record["refused"] = refusal(Path(path), record["username"], self.check_owner)
        if record["refused"]:
            self.log.error("%s %s: %s", REFUSED, record["filename"], record["refused"])
        return record

    def _sort_by_timestamp(self, records: list[dict]) -> list[dict]:
        """A student's submissions, newest first, the refused ones left out (unless all are: init_src drops them)."""
        ordered = super()._sort_by_timestamp(records)
        return [r for r in ordered if not r["refused"]] or ordered

    def init_src(self) -> None:
        super().init_src()
        self.src_records = [r for r in self.src_records if not r["refused"]]

    def do_copy(self, src: str, dest: str, log: object = None) -> None:
        """Copy one submission with copy_submission; a refusal leaves no copy behind and is logged."""
        username = Path(src).name.rsplit("+", 3)[0]
        uid = pwd.getpwnam(username).pw_uid if self.check_owner else None
        ignore = ignore_patterns(exclude=self.coursedir.ignore, include=self.coursedir.include,
                                 max_file_size=self.coursedir.max_file_size, log=self.log)
        try:
            copy_submission(Path(src), Path(dest), username, uid, 1000 * self.coursedir.max_dir_size, ignore)
        except SubmissionRefused as why:
            shutil.rmtree(dest, ignore_errors=True)
            self.log.error("%s %s: %s", REFUSED, Path(src).name, why)
